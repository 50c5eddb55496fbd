"""The documentation site: `mkdocs build --strict` passes, the generated reference pages match the code, and
every `perfgate` command line in README.md and docs/**/*.md is one the real command line accepts.

A shell block (```bash, ```sh, ```shell, ```console) line that calls perfgate is parsed by perfgate's
click commands without running it: an unknown command or option, a missing argument or value, or a
value outside a fixed choice fails here. The cheap read-only ones (`--help`, `--version`, `doctor`,
`list`, `baseline show`) are also run; tests/test_docs_commands.py runs every other one in a scratch
project. A block whose commands need a GPU or GitHub carries a marker on
the line before its fence, `<!-- needs: gpu -->` or `<!-- needs: github -->`: its commands are parsed,
never run. Placeholders the docs write are understood: `<run-id>`, `[--out DIR]` (an optional part, each
alternative of `[A | B]` checked), a standalone `...`.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import click
import pytest

from perfgate.cli import main as perfgate_cli

REPO = Path(__file__).resolve().parent.parent
SHELL_FENCES = ("bash", "sh", "shell", "console")
NEEDS = ("gpu", "github")
MARKER = re.compile(r"^\s*<!--\s*needs:\s*(.*?)\s*-->\s*$")
FENCE = re.compile(r"^\s*(```+|~~~+)\s*([\w+-]*)")
OPERATORS = {"&&", "||", ";", "|", "&", "(", ")"}
REDIRECTS = re.compile(r"^\d*(>>?|<)&?$")
# commands run for real: read-only and seconds long (the first words of their arguments)
CHEAP = (("doctor",), ("list",), ("baseline", "show"))
UNSET = getattr(click.core, "UNSET", object())  # click >= 8.3: what a parameter not given holds


@dataclass(frozen=True)
class DocCommand:
    where: str  # file:line
    args: tuple[str, ...]  # after `perfgate`
    needs: tuple[str, ...]  # from the block's marker
    problem: str = ""  # a line the shell could not read


def doc_pages() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]


def shell_blocks(text: str) -> list[tuple[int, str, list[tuple[int, str]], tuple[str, ...]]]:
    """Each fenced block of ``text``: (line of its fence, language, its (line number, line)s, its needs)."""
    blocks, lines, i = [], text.splitlines(), 0
    while i < len(lines):
        opening = FENCE.match(lines[i])
        if not opening:
            i += 1
            continue
        fence, lang = opening.group(1), opening.group(2).lower()
        before = next((line for line in reversed(lines[:i]) if line.strip()), "")
        marker = MARKER.match(before)
        needs = tuple(n.strip() for n in marker.group(1).split(",")) if marker else ()
        body, i = [], i + 1
        while i < len(lines) and not lines[i].strip().startswith(fence[:3]):
            body.append((i + 1, lines[i]))
            i += 1
        blocks.append((i - len(body), lang, body, needs))
        i += 1
    return blocks


def command_lines(lang: str, body: list[tuple[int, str]]) -> list[tuple[int, str]]:
    """The shell command lines of a block: continuations joined; in a console block only `$ ` lines."""
    out: list[tuple[int, str]] = []
    pending: tuple[int, str] | None = None
    for number, line in body:
        if pending is None:
            if lang == "console":
                if not line.lstrip().startswith("$ "):
                    continue
                line = line.lstrip()[2:]
            pending = (number, line)
        else:
            pending = (pending[0], pending[1] + " " + line.strip())
        if pending[1].rstrip().endswith("\\"):
            pending = (pending[0], pending[1].rstrip()[:-1])
            continue
        out.append(pending)
        pending = None
    if pending is not None:
        out.append(pending)
    return out


PLACEHOLDER = re.compile(r"<([A-Za-z][\w.-]*)>")
OPTIONAL = re.compile(r"(?<=\s)\[((?:-|[A-Z])[^\[\]]*)\]")


def variants(line: str) -> list[str]:
    """``line`` with its optional parts left out, and with each alternative of each one put in."""
    line = PLACEHOLDER.sub(lambda m: m.group(1).upper(), line)  # reports/<run-id> -> reports/RUN-ID
    groups = list(OPTIONAL.finditer(line))
    if not groups:
        return [line]

    def keep(chosen: int, alternative: str) -> str:
        out, last = "", 0
        for n, group in enumerate(groups):
            out += line[last:group.start()] + (alternative if n == chosen else "")
            last = group.end()
        return out + line[last:]

    found = [keep(-1, "")]
    for n, group in enumerate(groups):
        found += [keep(n, alt.strip()) for alt in group.group(1).split(" | ")]
    return found


def perfgate_calls(line: str) -> list[tuple[str, ...]]:
    """The arguments of each perfgate call in one shell line (`perfgate ...`, `python -m perfgate ...`)."""
    lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    try:
        tokens = list(lexer)
    except ValueError as exc:  # an unclosed quote
        raise AssertionError(f"not a shell line ({exc}): {line}") from None
    commands: list[list[str]] = [[]]
    skip = False
    for token in tokens:
        if skip:
            skip = False
        elif token in OPERATORS:
            commands.append([])
        elif REDIRECTS.match(token):
            skip = True  # the file it redirects to
        elif token != "...":
            commands[-1].append(token)
    calls = []
    for words in commands:
        while words and re.match(r"^[A-Za-z_]\w*=", words[0]):  # VAR=value perfgate ...
            words = words[1:]
        if words and Path(words[0]).name == "perfgate":
            calls.append(tuple(words[1:]))
        elif len(words) >= 3 and Path(words[0]).name.startswith("python") and words[1:3] == ["-m", "perfgate"]:
            calls.append(tuple(words[3:]))
    return calls


def doc_commands() -> list[DocCommand]:
    found = []
    for page in doc_pages():
        name = str(page.relative_to(REPO))
        for _, lang, body, needs in shell_blocks(page.read_text()):
            if lang not in SHELL_FENCES:
                continue
            for number, line in command_lines(lang, body):
                if "perfgate" not in line:
                    continue
                for variant in variants(line):
                    try:
                        calls = perfgate_calls(variant)
                    except AssertionError as exc:
                        calls, found = [], [*found, DocCommand(f"{name}:{number}", (), needs, str(exc))]
                    found += [DocCommand(f"{name}:{number}", args, needs) for args in calls]
    return list(dict.fromkeys(found))


def looks_like_placeholder(value: str) -> bool:
    return bool(re.fullmatch(r"[A-Z][A-Z0-9_.-]*(/[A-Z0-9_.*-]*)*", value))


def parse(args: tuple[str, ...] | list[str]) -> tuple[str, ...]:
    """Resolve ``args`` through perfgate's click commands as `perfgate ARGS` would, without running anything
    and without reading a file: the path of the command it names (("baseline", "update")). click's own
    error when the command, an option, a value or an argument is wrong."""
    command: click.Command = perfgate_cli
    ctx = click.Context(command, info_name="perfgate", **perfgate_cli.context_settings)
    path: list[str] = []
    args = list(args)
    while True:
        parser = command.make_parser(ctx)
        opts, rest, _ = parser.parse_args(args=list(args))
        if any(opts.get(p.name) not in (None, False) and p.is_eager for p in command.get_params(ctx)
               if isinstance(p, click.Option) and p.is_flag):
            return tuple(path)  # --help, --version: nothing else is read
        if isinstance(command, click.Group):
            if not rest:
                raise click.UsageError(f"`perfgate {' '.join(path)}` names no command", ctx)
            sub = command.get_command(ctx, rest[0])
            if sub is None:
                raise click.exceptions.NoSuchCommand(rest[0], possibilities=command.list_commands(ctx), ctx=ctx)
            path.append(rest[0])
            command, args = sub, rest[1:]
            ctx = click.Context(sub, info_name=rest[0], parent=ctx)
            continue
        if rest:
            raise click.UsageError(f"unexpected extra argument(s) {' '.join(rest)}", ctx)
        for param in command.get_params(ctx):
            given = opts.get(param.name)
            if param.required and (given is None or given is UNSET or given == ()):
                raise click.MissingParameter(ctx=ctx, param=param)
            if isinstance(param.type, click.Choice) and isinstance(given, str) and not looks_like_placeholder(given):
                param.type.convert(given, param, ctx)  # a renamed choice fails here
        return tuple(path)


def cheap(call: DocCommand) -> bool:
    """Whether a documented command is run here: read-only, seconds long, nothing to fill in."""
    if call.needs or any(looks_like_placeholder(a) or "*" in a for a in call.args):
        return False
    if any(a in ("--help", "-h", "--version") for a in call.args):
        return True
    return tuple(a for a in call.args if not a.startswith("-")) in CHEAP


COMMANDS = doc_commands()


# ---------------------------------------------------------------- the checker itself

@pytest.mark.parametrize("args", [
    ("run", "--no-such-option"),
    ("no-such-command",),
    ("baseline", "no-such-command"),
    ("merge", "a", "b"),  # --out is required
    ("report",),  # RESULTS is required
    ("run", "--suite"),  # an option without its value
    ("history", "show", "--format", "xml"),  # not one of its choices
    ("compare", "a", "b", "c"),  # one argument too many
    ("baseline",),
], ids=lambda a: " ".join(a))
def test_the_checker_refuses_what_the_command_line_refuses(args):
    with pytest.raises(click.ClickException):
        parse(args)


@pytest.mark.parametrize("args,path", [
    (("run", "--suite", "smoke", "-w", "x", "-t", "eager", "-t", "compile+amp-bf16", "--gate"), ("run",)),
    (("baseline", "update", "RUN1", "RUN2", "--case", "CASE"), ("baseline", "update")),
    (("history", "show", "--format", "csv", "--last", "N"), ("history", "show")),
    (("compare", "reports/RUN-ID", "baselines/MACHINE/smoke.json"), ("compare",)),  # paths are not read
    (("run", "--help"), ("run",)),
    (("--version",), ()),
    (("calibrate", "--no-ceilings"), ("calibrate",)),
], ids=lambda a: " ".join(a) if isinstance(a, tuple) else None)
def test_the_checker_accepts_what_the_command_line_takes(args, path):
    assert parse(args) == path


def test_the_checker_reads_shell_syntax_and_doc_placeholders():
    line = ("FOO=1 perfgate report reports/<run-id> [--baseline FILE | --against-results OTHER] > out.txt "
            "&& python -m perfgate list | head  # a comment perfgate --bogus")
    calls = [c for v in variants(line) for c in perfgate_calls(v)]
    assert ("report", "reports/RUN-ID") in calls
    assert ("report", "reports/RUN-ID", "--baseline", "FILE") in calls
    assert ("report", "reports/RUN-ID", "--against-results", "OTHER") in calls
    assert ("list",) in calls and not any("--bogus" in c for c in calls)
    assert perfgate_calls("pip install -e <perfgate checkout>".replace("<", "").replace(">", "")) == []


def test_a_needs_marker_applies_to_the_block_after_it():
    text = "<!-- needs: gpu -->\n```bash\nperfgate run --device cuda\n```\n\n```bash\nperfgate doctor\n```\n"
    blocks = shell_blocks(text)
    assert [(b[1], b[3]) for b in blocks] == [("bash", ("gpu",)), ("bash", ())]
    assert [line for _, line in command_lines("bash", blocks[0][2])] == ["perfgate run --device cuda"]
    assert cheap(DocCommand("x", ("doctor",), ())) and not cheap(DocCommand("x", ("doctor",), ("github",)))
    assert not cheap(DocCommand("x", ("baseline", "show", "PATH"), ()))  # a placeholder to fill in


# ---------------------------------------------------------------- the docs' commands

def test_the_docs_show_perfgate_commands():
    assert len(COMMANDS) >= 5, "no perfgate command found in README.md and docs/: is the extraction broken?"


@pytest.mark.parametrize("call", COMMANDS, ids=[f"{c.where} {' '.join(c.args)}" for c in COMMANDS])
def test_each_documented_command_is_one_perfgate_takes(call):
    assert not call.problem, f"{call.where}: {call.problem}"
    unknown = set(call.needs) - set(NEEDS)
    assert not unknown, f"{call.where}: unknown needs marker {sorted(unknown)}; valid: {', '.join(NEEDS)}"
    try:
        parse(call.args)
    except click.ClickException as exc:
        pytest.fail(f"{call.where}: `perfgate {' '.join(call.args)}`: {exc.format_message()}")


def asks_for_cuda(args: tuple[str, ...]) -> bool:
    return any(a == "--device=cuda" or (a == "--device" and args[i + 1:i + 2] == ("cuda",))
               for i, a in enumerate(args))


def test_a_command_that_needs_a_gpu_is_marked():
    unmarked = [f"{c.where}: perfgate {' '.join(c.args)}" for c in COMMANDS
                if asks_for_cuda(c.args) and "gpu" not in c.needs]
    assert not unmarked, ("put <!-- needs: gpu --> on the line before the fence of these blocks (or move the "
                          "command into a marked block):\n" + "\n".join(unmarked))


RUNNABLE = sorted({c.args for c in COMMANDS if cheap(c)})


@pytest.mark.slow  # doctor and list start a worker process (the probe)
@pytest.mark.parametrize("args", RUNNABLE, ids=lambda a: " ".join(a))
def test_each_cheap_documented_command_runs(args):
    where = ", ".join(c.where for c in COMMANDS if c.args == args)
    proc = subprocess.run([sys.executable, "-m", "perfgate", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=180, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert proc.returncode == 0, f"{where}: `perfgate {' '.join(args)}` exit {proc.returncode}: {proc.stderr[-2000:]}"


# ---------------------------------------------------------------- the reference pages and the site

def test_the_reference_pages_are_generated_from_the_code_without_torch():
    code = ("import runpy, sys; sys.argv = ['gen_reference', '--check']; "
            "m = runpy.run_path('scripts/gen_reference.py'); rc = m['main'](['--check']); "
            "print('torch imported' if 'torch' in sys.modules else 'no torch'); sys.exit(rc)")
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert "no torch" in proc.stdout, proc.stdout + proc.stderr
    assert proc.returncode == 0, f"{proc.stderr}run `python scripts/gen_reference.py` and commit the pages"


def test_the_reference_covers_every_command_and_option():
    page = (REPO / "docs" / "reference" / "cli.md").read_text()
    ctx = click.Context(perfgate_cli, info_name="perfgate", **perfgate_cli.context_settings)

    def every(command: click.Command, ctx: click.Context):
        yield command, ctx
        if isinstance(command, click.Group):
            for name in command.list_commands(ctx):
                sub = command.get_command(ctx, name)
                yield from every(sub, click.Context(sub, info_name=name, parent=ctx))

    for command, sub_ctx in every(perfgate_cli, ctx):
        assert f"`{sub_ctx.command_path}`" in page
        for param in command.get_params(sub_ctx):
            for name in getattr(param, "opts", []) if isinstance(param, click.Option) else [param.human_readable_name]:
                assert f"`{name}`" in page, f"{sub_ctx.command_path} {name} is not in docs/reference/cli.md"


def test_mkdocs_build_strict_passes(tmp_path):
    for module in ("mkdocs", "material"):
        if importlib.util.find_spec(module) is None:
            pytest.skip(f"{module} is not installed: pip install -e '.[docs]' installs the site's tools")
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
                          cwd=REPO, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    problems = [line for line in proc.stderr.splitlines() if line.startswith(("WARNING", "ERROR"))]
    assert proc.returncode == 0, "mkdocs build --strict failed:\n" + "\n".join(problems or [proc.stderr[-3000:]])
    assert (tmp_path / "site" / "reference" / "cli" / "index.html").is_file()


def load_generator():
    spec = importlib.util.spec_from_file_location("gen_reference", REPO / "scripts" / "gen_reference.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("section,key", [("tool.perfgate.gate", "threshold"), ("tool.perfgate", "threads"),
                                         ("tool.perfgate.timing", "layouts")])
def test_a_key_the_code_has_without_a_meaning_stops_generation(monkeypatch, section, key):
    generator = load_generator()
    monkeypatch.delitem(generator.MEANINGS[section], key)
    with pytest.raises(SystemExit, match=key):
        generator.config_page()


def test_the_configuration_reference_takes_defaults_and_words_from_the_code():
    from perfgate.judging.gate_settings import GateSettings

    page = load_generator().config_page()
    assert f"| `threshold` | a number, at least 0 | `{GateSettings().threshold!r}` |" in page
    assert "| `confidence` | a number, between 0.5 and 0.999 |" in page  # parse_gate's second check
    assert '| `workloads_dirs` | an array, each a string (one string means an array of one) | `["workloads"]` |' in page


# The lab record holds every dated measurement and grows by design; the generated reference and the schema
# index are code's; the rest are user pages, each the rule as it stands
LONG_BY_DESIGN = {"lab-record.md"}


def test_user_pages_stay_short_enough_to_read():
    """No user page over 500 lines and a README of at most 150: a page that outgrows that is a lab notebook
    in the making, and its measurements belong in docs/lab-record.md."""
    pages = [p for p in (REPO / "docs").glob("*.md") if p.name not in LONG_BY_DESIGN]
    assert pages
    long = {p.name: n for p in pages if (n := len(p.read_text().splitlines())) > 500}
    assert not long, f"user pages over 500 lines: {long}"
    assert len((REPO / "README.md").read_text().splitlines()) <= 150
