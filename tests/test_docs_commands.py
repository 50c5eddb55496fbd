"""Every `perfgate` command the docs show runs: the ones tests/test_docs_site.py only parses run here, on CPU,
in one scratch project.

test_docs_site.py finds each `perfgate ...` line of README.md and docs/**/*.md, checks that the command line
takes it, and runs the cheap read-only ones (doctor, list, baseline show) in this repository. The rest (runs,
baselines, gates, compare, reports, repro, traces, TensorBoard, history, bisect, calibrate, init) run here,
taken from the docs by the same parser, never copied, in a project set up as the README sets up a repository:
`git init`, `perfgate init`, the example replaced by a tiny workload of its own, a few commits (the tag v1.2,
then a commit that makes the step five times longer: what `perfgate bisect v1.2 main` finds, then one more,
so that `--against HEAD~1` and `--against main` compare the same code). The project's [tool.perfgate] keeps
every run to seconds: one tiny case per suite, 3 worker processes (bisect's pairs: two leave its interval too
wide to find a step), 5 samples, no adaptive sampling, a threshold no A/A noise crosses. The runs and
calibrate, which only later commands read, start as soon as the project is set up, three at a time.

Placeholders are filled from runs made earlier (RUN, RESULTS, CURRENT, BASE_RUN, LATEST_RUN, RUN-ID: run
folders; PATH, BASELINE, MACHINE: the stored baseline; CASE: a case of the run the command reads), and a
documented run's folder is what later commands read, so one run feeds many commands. A line with optional
parts runs once, with all of them (`calibrate [--suite S] [--write]`). Each command asserts
its exit code and something it shows. A block whose commands cannot run on CPU in a test carries a needs
marker (`<!-- needs: gpu -->`, `github`) and is only parsed there.
"""

from __future__ import annotations

import glob
import json
import re
import signal
import socket
import subprocess
import sys
import sysconfig
import threading
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import cli_env
from test_docs_site import (
    COMMANDS,
    OPTIONAL,
    PLACEHOLDER,
    REPO,
    SHELL_FENCES,
    DocCommand,
    cheap,
    command_lines,
    doc_pages,
    looks_like_placeholder,
    parse,
    perfgate_calls,
    shell_blocks,
)

from perfgate.running.run_folders import latest_run_dir

SCRATCH_WORKLOAD = '''"""operator_rollout as the docs' scratch project has it: a chain of small linear layers standing in for
the standard workload of that name, which the docs' commands name (tests/test_docs_commands.py)."""

import torch
from torch import nn

from perfgate.workload import Built, Tolerance, Workload

DEPTH = {depth}  # what the project's commits change


class OperatorRollout(Workload):
    name = "operator_rollout"
    description = "a chain of small linear layers (the docs' scratch project)"
    sizes = {{"smoke": {{"n": 16, "steps": 1}}, "pr": {{"n": 16, "steps": 2}}, "full": {{"n": 16, "steps": 4}}}}
    tolerance = Tolerance(rel_l2=1e-2)
    channels_last_applies = False

    def build(self, params, device, dtype, variants):
        layer = nn.Linear(params["n"], params["n"], bias=False)
        g = torch.Generator().manual_seed(0)
        state = torch.randn(params["n"], params["n"], generator=g)
        return Built(model=layer.to(device=device, dtype=dtype), state=state.to(device=device, dtype=dtype))

    def step(self, model, state, built, params):
        for _ in range(DEPTH):
            state = torch.tanh(model(state))
        return state
'''

# A workload named like the one getting-started.md adds from a folder of its own (~/my-repo/workloads).
MY_MODEL = '''import torch

from perfgate.workload import Workload


def make_inputs(params, device):
    g = torch.Generator().manual_seed(0)
    return torch.randn(params["n"], params["n"], generator=g).to(device)


my_model = Workload.from_callable(torch.tanh, make_inputs, name="my_model",
                                  sizes={"smoke": {"n": 16}, "pr": {"n": 16}, "full": {"n": 16}})
'''

# Written into the [tool.perfgate] table `perfgate init` made, and after it: every run in seconds.
TOP_KEYS = "processes = 3\ntimeout_s = 300\n"
TABLES = """
[tool.perfgate.suites.pr]
description = "operator_rollout at pr size on CPU (the docs' scratch project)"
workloads = ["operator_rollout"]
sizes = ["pr"]
toggles = ["eager"]
device = "cpu"

[tool.perfgate.timing]
samples = 5
min_time_s = 0.1
max_warmup = 5
layouts = 1

[tool.perfgate.gate]
threshold = 4.0            # a regression is 5x: a step of 200 us varies by half between processes here
memory_tolerance = 0.5
adaptive = false           # exactly `processes` per case and side
remeasure = false
settle_in_lockstep = false
max_host_load = 0          # the machine the tests share is often busy
"""

# Ignored in the scratch checkout, as a user's .gitignore would: what the docs' commands write there.
EXCLUDED = "/.venv-base/\n/.cache/\n/out/\n/history.html\n"

# Runs the commands below read, named by their arguments as the docs write them; documented or not, each
# is made once, when the first command needs it.
PLAIN = ("run",)
POOL = (("run",), ("run", "--history"), ("run", "--processes", "3"))  # one clean commit: RUN1 RUN2 RUN3
OTHER = ("run", "--processes", "3")  # a smoke run other than the one the first baseline holds
CURRENT = ("run", "--baseline-precision")  # a smoke run that no baseline holds: compare's CURRENT
# trace names a compiled case; no documented run compiles (the scratch suites are eager), so one run does
COMPILED = ("run", "-w", "operator_rollout", "-t", "compile", "--processes", "1")
AGAINST = ("run", "--against", "main", "--gate")  # a compared run: repro's --results

# RUN in a command: which run, by the command's path (the plain run otherwise)
RUN_OF = {("repro",): AGAINST, ("trace",): COMPILED, ("baseline", "update"): OTHER}
# the latest run, for a command that reads it (no RUN named): which run it must be, by the command's path
LATEST_OF = {("trace",): COMPILED}
RUN_FOLDERS = {"RUN", "RUN-ID", "RESULTS", "CURRENT", "BASE_RUN", "LATEST_RUN", "RUN1", "RUN2", "RUN3"}
NOT_PLACEHOLDERS = {"HEAD"}  # a git ref the docs write as it is typed

# Order of execution, by command path: what later commands read is made first (init sets the project up,
# runs feed baselines, reports, repro, traces and the history; calibrate's A/A rounds come last).
ORDER = (("init",), ("list",), ("run",), ("baseline",), ("compare",), ("report",), ("repro",), ("trace",),
         ("tensorboard",), ("history",), ("bisect",), ("calibrate",))


@dataclass(frozen=True)
class Expected:
    shows: str  # a regular expression the output (stdout and stderr) matches
    codes: tuple[int, ...] = (0,)


# What each command shows, by its path; an exit code other than 0 where the docs give one.
EXPECTED = {
    ("init",): Expected(r"pyproject\.toml"),
    ("list",): Expected(r"operator_rollout"),
    ("run",): Expected(r"results: \S*results\.json|verdict"),
    ("baseline", "update"): Expected(r"baseline \S+smoke\.json <- "),
    ("baseline", "show"): Expected(r"operator_rollout/smoke/eager/cpu"),
    ("compare",): Expected(r"Gate passed: no regression"),
    ("report",): Expected(r"report\.html"),
    ("repro",): Expected(r"perfgate run --against"),
    ("trace",): Expected(r"operator_rollout/smoke/compile/cpu\n.*\.pt\.trace\.json"),
    ("tensorboard",): Expected(r"TensorBoard on \S+: http://"),
    ("history", "add"): Expected(r"(added|already in history): "),
    ("history", "show"): Expected(r"operator_rollout/smoke/eager/cpu"),
    ("history", "detect"): Expected(r"\d+ series analysed: "),
    ("history", "report"): Expected(r"history\.html"),
    ("bisect",): Expected(r"first commit of the step: .*a slower step"),
    ("calibrate",): Expected(r"operator_rollout"),
}
# `history detect --fail-on-regression` exits 1 when it finds a regression: runs of one commit on a shared
# machine may show one, and the output then names it
FAILS_ON_REGRESSION = Expected(r"\d+ series analysed: ", (0, 1))


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@example.com", *args], cwd=cwd,
                          capture_output=True, text=True, check=True, timeout=60).stdout.strip()


def doc_example(page: str, marker: str) -> str:
    """The first ```python block after ``marker`` in ``page`` (the workloads the docs tell a user to copy)."""
    text = (Path(__file__).resolve().parent.parent / page).read_text()
    after = text[text.index(marker):]
    found = re.search(r"```python\n(.*?)```", after, re.S)
    assert found, f"{page}: no python block after {marker!r}"
    return found.group(1)


@dataclass
class Outcome:
    argv: list[str]  # as run, placeholders filled
    code: int
    out: str
    run_dir: Path | None  # the run folder it made


class Project:
    """The scratch project, and every command run in it so far (by its arguments as the docs write them)."""

    def __init__(self, root: Path, home: Path):
        self.root, self.home = root, home
        self.env = cli_env(HOME=str(home))
        self.env.pop("PERFGATE_HISTORY_URL", None)
        self.done: dict[tuple[str, ...], Outcome] = {}
        self.background: dict[tuple[str, ...], Future[Outcome]] = {}
        self.pools: list[ThreadPoolExecutor] = []
        self.venv_lock = threading.Lock()

    # ------------------------------------------------------------ the project
    def set_up(self) -> None:
        """The README's steps: a git repository, `perfgate init`, a workload of its own, commits."""
        self.root.mkdir(parents=True)
        git(self.root, "init", "-q", "-b", "main")
        init = self.doc(("init",))
        assert init.code == 0, init.out
        pyproject = self.root / "pyproject.toml"
        text = pyproject.read_text()
        assert text.count("[tool.perfgate]\n") == 1 and text.count('workloads = ["*"]') == 1, text
        text = text.replace("[tool.perfgate]\n", "[tool.perfgate]\n" + TOP_KEYS)
        pyproject.write_text(text.replace('workloads = ["*"]', 'workloads = ["operator_rollout"]') + TABLES)
        workloads = self.root / "workloads"
        for example in workloads.glob("*.py"):  # "Replace the example with your own workloads" (README)
            example.unlink()
        (workloads / "operator_rollout.py").write_text(SCRATCH_WORKLOAD.format(depth=4))
        # the examples docs/workloads.md tells a user to copy into workloads/
        (workloads / "heat_diffusion.py").write_text(doc_example("docs/workloads.md", "tests/test_docs.py runs"))
        (workloads / "mlp_regression.py").write_text(doc_example("docs/workloads.md", "tests/test_training.py runs"))
        mine = self.home / "my-repo" / "workloads"
        mine.mkdir(parents=True)
        (mine / "my_model.py").write_text(MY_MODEL)
        (self.root / ".git" / "info" / "exclude").write_text(EXCLUDED)
        git(self.root, "add", "-A")
        git(self.root, "commit", "-qm", "perfgate: workloads")
        git(self.root, "tag", "v1.2")
        (workloads / "operator_rollout.py").write_text(SCRATCH_WORKLOAD.format(depth=20))
        git(self.root, "commit", "-qam", "a slower step: five times the layers")
        (self.root / "NOTES.md").write_text("notes\n")
        git(self.root, "add", "NOTES.md")
        git(self.root, "commit", "-qm", "notes")
        git(self.root, "update-ref", "refs/remotes/origin/main", "HEAD")  # as a clone has it
        # README: `perfgate run && perfgate baseline update`
        for args in (PLAIN, ("baseline", "update")):
            outcome = self.doc(args)
            assert outcome.code == 0, f"perfgate {' '.join(args)}: {outcome.out}"

    def base_environment(self) -> None:
        """.venv-base (docs/upgrades.md): a virtual environment seeing this one's packages through a .pth file,
        so its torch is this one's (a second torch would be a download)."""
        venv = self.root / ".venv-base"
        with self.venv_lock:  # two runs in the background may both need it
            if venv.exists():
                return
            subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True,
                           capture_output=True, timeout=120)
            site = venv / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"
            (site / "shared.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")

    # ------------------------------------------------------------ what commands read
    def latest(self) -> Path:
        found = latest_run_dir(self.root / "reports")
        assert found is not None, "no run in the scratch project yet"
        return found

    def folder(self, args: tuple[str, ...]) -> Path:
        outcome = self.doc(args)
        assert outcome.run_dir is not None, f"`perfgate {' '.join(args)}` made no run folder: {outcome.out}"
        return outcome.run_dir

    def baseline(self) -> Path:
        found = sorted((self.root / "baselines").glob("*/smoke.json"))
        assert len(found) == 1, f"one stored smoke baseline expected: {found}"
        return found[0]

    def first_case(self, run_dir: Path) -> str:
        cases = json.loads((run_dir / "results.json").read_text())["cases"]
        ok = [c["key"] for c in cases if c["status"] == "ok"]
        assert ok, f"{run_dir}: no ok case"
        return ok[0]

    def run_folder(self, name: str, path: tuple[str, ...]) -> Path:
        if name in ("RUN1", "RUN2", "RUN3"):
            return self.folder(POOL[int(name[-1]) - 1])
        if name == "LATEST_RUN":
            return self.latest()
        if name == "BASE_RUN":
            return self.folder(("run", "--history"))
        if name == "CURRENT":
            return self.folder(CURRENT)
        return self.folder(RUN_OF.get(path, PLAIN))

    def fill(self, args: tuple[str, ...], path: tuple[str, ...]) -> list[str]:
        """``args`` with its placeholders filled (a path as a user types it, relative to the project) and its
        globs and ~ expanded as a shell would."""
        def relative(p: Path) -> str:
            return str(p.relative_to(self.root))

        out: list[str] = []
        for arg in args:
            if arg.startswith("~/"):
                arg = str(self.home / arg[2:])
            if ".venv-base/" in arg:
                self.base_environment()
            if arg in ("PATH", "BASELINE"):
                arg = relative(self.baseline())
            elif arg == "S":
                arg = "smoke"
            elif arg in RUN_FOLDERS:
                arg = relative(self.run_folder(arg, path))
            elif "/" in arg:  # reports/RUN-ID, reports/LATEST_RUN/results.json, baselines/MACHINE/smoke.json
                arg = "/".join(self.run_folder(part, path).name if part in RUN_FOLDERS else
                               self.baseline().parent.name if part == "MACHINE" else part
                               for part in arg.split("/"))
            if "*" in arg and path != ("trace",):  # trace takes a glob of case keys, quoted in the docs
                expanded = sorted(glob.glob(arg, root_dir=self.root))
                out += expanded or [arg]
            else:
                out.append(arg)
        if "CASE" in out:  # a case of the run the command reads: RUN (--results RUN), else the latest
            named = [a for a in out if (self.root / a / "results.json").is_file()]
            run_dir = self.root / named[0] if named else self.latest()
            out = [self.first_case(run_dir) if a == "CASE" else a for a in out]
        unfilled = [a for a in out if looks_like_placeholder(a) and a not in NOT_PLACEHOLDERS]
        assert not unfilled, (f"`perfgate {' '.join(args)}`: no value for {unfilled} in tests/test_docs_commands.py; "
                              "fill it in Project.fill, or mark the docs block with a needs marker")
        return out

    # ------------------------------------------------------------ running
    def doc(self, args: tuple[str, ...]) -> Outcome:
        """`perfgate ARGS` (as the docs write it) run in the project once: its outcome. A command waits for the
        background commands of the stages before its own, except calibrate, which nothing reads (bisect, which
        measures, waits for every one)."""
        if args in self.background:
            return self.background[args].result()
        if args not in self.done:
            path = parse(args)
            for other, future in list(self.background.items()):
                if (stage(other) < stage(args) and parse(other) != ("calibrate",)) or path == ("bisect",):
                    future.result()
            if path in LATEST_OF and "--results" not in args and self.latest() != self.folder(LATEST_OF[path]):
                self.done.pop(LATEST_OF[path])  # made before another run: made again, to be the latest
                self.background.pop(LATEST_OF[path], None)
                self.folder(LATEST_OF[path])
            self.done[args] = self.execute(args, path)
        return self.done[args]

    def execute(self, args: tuple[str, ...], path: tuple[str, ...]) -> Outcome:
        argv = [sys.executable, "-m", "perfgate", *self.fill(args, path)]
        if path == ("tensorboard",):
            code, out = self.serve_and_stop(argv)
        else:
            proc = subprocess.run(argv, cwd=self.root, env=self.env, capture_output=True, text=True, timeout=900)
            code, out = proc.returncode, proc.stdout + proc.stderr
        # the run folder a run names (its first line, or `results: FOLDER/results.json`)
        named = re.search(r"^perfgate: .* -> (/\S+)$", out, re.M) or re.search(r"results: (/\S+)/results\.json", out)
        made = Path(named.group(1)) if path == ("run",) and named else None
        return Outcome(argv[3:], code, out, made if made and (made / "results.json").is_file() else None)

    def in_background(self, commands: list[tuple[str, ...]], then: tuple[str, ...] | None = None) -> None:
        """Start ``commands`` WIDTH at a time, in this order: each is a command of its own process, and none reads
        what another writes (a run's folder is its own). ``then``, a run, starts once the runs among them have
        ended: it is then the latest run."""
        pool = ThreadPoolExecutor(max_workers=WIDTH, thread_name_prefix="docs-command")
        self.pools.append(pool)
        for args in commands:
            if args not in self.done and args not in self.background:
                self.background[args] = pool.submit(self.finish, args)
        pool.shutdown(wait=False)
        if then is not None:
            runs = [f for a, f in self.background.items() if parse(a) == ("run",)]
            after = ThreadPoolExecutor(max_workers=1, thread_name_prefix="docs-command-then")
            self.pools.append(after)
            self.background[then] = after.submit(self.finish, then, runs)
            after.shutdown(wait=False)

    def finish(self, args: tuple[str, ...], after: Sequence[Future[Outcome]] = ()) -> Outcome:
        for future in after:
            future.result()
        self.done[args] = self.execute(args, parse(args))
        return self.done[args]

    def close(self) -> None:
        for pool in self.pools:
            pool.shutdown(wait=True, cancel_futures=True)

    def serve_and_stop(self, argv: list[str]) -> tuple[int, str]:
        """`perfgate tensorboard ...` until it prints its URL, then SIGTERM, as a supervisor stops it."""
        if "--port" not in argv:  # the default port, 6006
            with socket.socket() as s:
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                try:
                    s.bind(("", 6006))
                except OSError:
                    pytest.skip("port 6006, `perfgate tensorboard`'s default, is in use on this machine")
        log = self.root.parent / f"tensorboard-{len(self.done)}.txt"
        with log.open("w") as sink:
            proc = subprocess.Popen(argv, cwd=self.root, env=self.env, stdout=sink, stderr=subprocess.STDOUT)
            try:
                deadline = time.monotonic() + 120
                while proc.poll() is None and time.monotonic() < deadline and "http://" not in log.read_text():
                    time.sleep(0.3)
            finally:
                if proc.poll() is None:
                    proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        return proc.returncode, log.read_text()


def full_forms(line: str) -> list[str]:
    """``line`` with its optional parts put in: every `[A]`, and one form per alternative of an `[A | B]` (the
    other such parts left out). test_docs_site.py parses each variant of a line; running its full forms runs
    every part of it (`calibrate [--suite S] [--write]` is one run of `calibrate --suite S --write`)."""
    line = PLACEHOLDER.sub(lambda m: m.group(1).upper(), line)
    groups = list(OPTIONAL.finditer(line))
    choices = [[alt.strip() for alt in g.group(1).split(" | ")] for g in groups]
    alone = [c[0] if len(c) == 1 else "" for c in choices]

    def form(picks: list[str]) -> str:
        out, last = "", 0
        for group, pick in zip(groups, picks, strict=True):
            out, last = out + line[last:group.start()] + pick, group.end()
        return out + line[last:]

    alternatives = [(i, alt) for i, c in enumerate(choices) if len(c) > 1 for alt in c]
    if not alternatives:
        return [form(alone)]
    return [form([alt if j == i else pick for j, pick in enumerate(alone)]) for i, alt in alternatives]


def documented_runs() -> dict[tuple[str, ...], list[str]]:
    """The commands run here, each once, with where the docs show it: the perfgate calls of every full form of
    every line of a shell block without a needs marker, except those test_docs_site.py runs itself."""
    found: dict[tuple[str, ...], list[str]] = {}
    for page in doc_pages():
        name = str(page.relative_to(REPO))
        for _, lang, body, needs in shell_blocks(page.read_text()):
            if lang not in SHELL_FENCES or needs:
                continue
            for number, line in command_lines(lang, body):
                if "perfgate" not in line:
                    continue
                try:
                    calls = [a for f in full_forms(line) for a in perfgate_calls(f)]
                except AssertionError:  # not a shell line: test_docs_site.py says so
                    continue
                for args in calls:
                    if not cheap(DocCommand("", args, ())):
                        found.setdefault(args, []).append(f"{name}:{number}")
    return found


def stage(args: tuple[str, ...]) -> int:
    """Where ``args`` runs in ORDER (the compiled run: with trace, which reads it)."""
    path = ("trace",) if args == COMPILED else parse(args)
    return next(i for i, first in enumerate(ORDER) if path[:len(first)] == first)


RUNS = documented_runs()
TO_RUN = sorted(RUNS, key=lambda a: (stage(a), list(RUNS).index(a)))  # in ORDER, else as the docs show them


# Run in the background, WIDTH at a time, as soon as the project is set up: the runs (which only the commands
# after them read), calibrate (which nothing reads), longest first; then the compiled run, alone, so that it is
# the latest run when trace reads the latest.
BACKGROUND_PATHS = (("run",), ("calibrate",))
WIDTH = 3  # commands at a time: a run leaves a core idle part of the time (lockstep pairs, process start-up)
LONGEST_FIRST = (("calibrate",), ("run", "--against"), ("run", "--base-python"), ("run", "--base-env"),
                 ("run", "--workloads-dir", "workloads"))


def background(selected: set[tuple[str, ...]]) -> list[tuple[str, ...]]:
    chosen = [a for a in TO_RUN if a in selected and parse(a) in BACKGROUND_PATHS]
    return sorted(chosen, key=lambda a: next((i for i, p in enumerate(LONGEST_FIRST) if a[:len(p)] == p),
                                             len(LONGEST_FIRST)))


@pytest.fixture(scope="module")
def project(tmp_path_factory, request) -> Iterator[Project]:
    root = tmp_path_factory.mktemp("docs-commands")
    scratch = Project(root / "your-repo", root / "home")
    try:
        scratch.set_up()
        selected = {item.callspec.params["args"] for item in request.session.items
                    if getattr(item, "originalname", "") == "test_each_documented_command_runs"}
        scratch.in_background(background(selected),
                              then=COMPILED if any(parse(a) == ("trace",) for a in selected) else None)
        yield scratch
    finally:
        scratch.close()


def test_every_documented_command_is_run_or_marked():
    """Each documented command is run, here (alone or as a part of its line's full form) or by
    test_docs_site.py, or is in a block with a needs marker; and what each command shows is said here."""
    assert {("init",), ("run",), ("baseline", "update")} <= set(TO_RUN), "is the extraction broken?"
    left = [f"{c.where}: perfgate {' '.join(c.args)}" for c in COMMANDS if not (c.needs or cheap(c) or c.problem)
            and not any(c.where in where and not Counter(c.args) - Counter(args) for args, where in RUNS.items())]
    assert not left, "documented commands nobody runs:\n" + "\n".join(left)
    unknown = sorted({parse(a) for a in TO_RUN} - set(EXPECTED))
    assert not unknown, f"say what these commands show in EXPECTED: {unknown}"


def test_a_line_runs_once_with_every_optional_part():
    assert full_forms("perfgate calibrate [--suite S] [--write]  # A/A") == ["perfgate calibrate --suite S --write  # A/A"]
    assert full_forms("perfgate report reports/<run-id> [--out DIR] [--baseline F | --against-results R]") == [
        "perfgate report reports/RUN-ID --out DIR --baseline F", "perfgate report reports/RUN-ID --out DIR --against-results R"]
    assert full_forms("perfgate run --gate") == ["perfgate run --gate"]


def test_a_placeholder_without_a_value_fails_naming_it(tmp_path):
    scratch = Project(tmp_path / "your-repo", tmp_path / "home")
    with pytest.raises(AssertionError, match=r"no value for \['NEW_THING'\]"):
        scratch.fill(("report", "NEW_THING"), ("report",))
    assert scratch.fill(("run", "--changed-since", "HEAD", "-w", "x"), ("run",)) == ["run", "--changed-since", "HEAD",
                                                                                      "-w", "x"]


@pytest.mark.slow  # every command starts perfgate, most of them worker processes
@pytest.mark.parametrize("args", TO_RUN, ids=lambda a: " ".join(a))
def test_each_documented_command_runs(project, args):
    where = ", ".join(RUNS[args])
    path = parse(args)
    expected = FAILS_ON_REGRESSION if "--fail-on-regression" in args else EXPECTED[path]
    outcome = project.doc(args)
    shown = f"{where}: `perfgate {' '.join(outcome.argv)}` exit {outcome.code}:\n{outcome.out[-3000:]}"
    assert outcome.code in expected.codes, shown
    assert re.search(expected.shows, outcome.out), f"no match for {expected.shows!r}: {shown}"
    if outcome.code == 1:
        assert "regression" in outcome.out, shown
    if path == ("run",):  # a run leaves its folder with at least one measured case
        assert outcome.run_dir is not None, shown
        assert project.first_case(outcome.run_dir), shown
