"""The commands a reviewer runs next: for a regression, the `perfgate run --against BASE` that measures
that case alone, base and head in lockstep, with the settings the gate used (and a form that keeps both
sides' traces at known paths); for confirmed wins against a stored baseline, the `perfgate baseline update
--case` that refreshes those cases only. `perfgate repro CASE`, the console, summary.md and report.html
print them. Every piece is shell-quoted: case names and paths come from untrusted files. No torch.

What the command fixes and what it leaves to the checkout it runs in (docs/gate.md, "Reproducing a
regression"): the case (workload, size, toggles, device), the suite, the sampling (a fixed number of
processes, or the adaptive budget the case was measured with), samples per process, threads, the worker
timeout and memory limit, ``--config`` when the run read another file than the one found here, and the
workloads folders and compile cache the run was given beyond that configuration (where they exist in this
checkout, outside every run folder: ``Checkout``; a comment line says why one is left out).
"""

from __future__ import annotations

import fnmatch
import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from perfgate.model.comparison import Comparison
from perfgate.model.config import ConfigError, find_pyproject, load
from perfgate.model.results import CaseResult, RunResult, SchemaError, load_results
from perfgate.protocol.layout import LAYOUT_ENV, MALLOC_ENV, MALLOC_POLICIES, POLICIES
from perfgate.util.paths import component

# What the printed command holds where no base commit or ref was recorded (a comparison against another
# run's results, a baseline without a commit): replace it with the commit the baseline was measured at.
PLACEHOLDER = "BASE_REF"
FULL_COMMIT = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")  # SHA-1 or SHA-256, as `git rev-parse HEAD` prints it
REPRO_OUT = "reports/repro"  # where the traces form puts its run folder, one per case
VALID_LISTED = 20  # case keys an error line lists at most


def shell(argv: list[str]) -> str:
    """``argv`` as one shell line, every piece quoted."""
    return " ".join(shlex.quote(a) for a in argv)


def shown_path(path: str | Path) -> str:
    """``path`` relative to the working folder when it lies inside it (how a command run here names it),
    else as it is."""
    p = Path(path)
    if p.is_absolute():
        try:
            return str(p.relative_to(Path.cwd()))
        except ValueError:
            return str(p)
    return str(p)


@dataclass(frozen=True)
class Base:
    """What the base side of a reproduction checks out: a commit, a ref, or PLACEHOLDER, and whence."""

    ref: str
    origin: str

    @property
    def known(self) -> bool:
        return self.ref != PLACEHOLDER


def _recorded_base(comparison: Comparison | None, run_dir: Path | None) -> RunResult | None:
    """The base side's run: the comparison's base run when in memory, else read from the run folder
    (``base/results.json`` of `run --against`) or the stored baseline file the comparison names."""
    if comparison is None:
        return None
    if comparison.baseline is not None:
        return comparison.baseline
    try:
        if comparison.mode == "against" and run_dir is not None and (run_dir / "base" / "results.json").is_file():
            return load_results(run_dir / "base" / "results.json")
        source = comparison.baseline_source
        if comparison.mode == "baseline" and source and is_baseline_file(source):
            from perfgate.judging.baselines import load_baseline

            return load_baseline(source).run
    except (SchemaError, OSError):
        return None
    return None


def is_baseline_file(source: str) -> bool:
    """Does a baseline-mode comparison's source name a stored baseline file (not a run folder or results.json)?"""
    p = Path(source)
    return p.name != "results.json" and p.suffix == ".json" and not p.is_dir()


def base_of(run: RunResult, comparison: Comparison | None, run_dir: Path | None = None,
            case_key: str | None = None) -> Base:
    """The base a reproduction of ``case_key`` checks out: the commit the comparison's base side recorded for
    it (`--against`: the base ref's commit; a stored baseline: the commit the case was measured at, its own
    where `baseline update --case` kept it from another), else `--against`'s ref as given, else PLACEHOLDER."""
    return _base_in(run, comparison, _recorded_base(comparison, run_dir), case_key)


def _base_in(run: RunResult, comparison: Comparison | None, recorded: RunResult | None, case_key: str | None) -> Base:
    from perfgate.judging.baselines import commit_of

    commit, dirty = commit_of(recorded, case_key or "") if recorded is not None else (None, None)
    against = comparison is not None and comparison.mode == "against"
    if isinstance(commit, str) and FULL_COMMIT.fullmatch(commit):
        origin = "the --against base's commit" if against else "the stored baseline's commit"
        if dirty:
            origin += ", measured with uncommitted changes"
        return Base(commit, origin)
    ref = run.settings.get("against") if isinstance(run.settings, dict) else None
    # results.json is untrusted: a ref that no `run --against` accepted (a newline in it would end the
    # "# base:" comment line and put the rest on a line of its own, run when the block is pasted)
    if against and isinstance(ref, str) and ref.strip() and ref.isprintable() and not ref.startswith("-"):
        return Base(ref, "the --against ref")
    return Base(PLACEHOLDER, "no base commit recorded: put the commit or branch the baseline was measured at")


def _count(value: Any) -> str | None:
    """A positive whole number from a results file as command-line text, or None."""
    return str(value) if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _number(value: Any) -> str | None:
    """A positive number from a results file as command-line text, or None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < float("inf"):
        return None
    return f"{value:g}"


def sampling_options(case: CaseResult, settings: dict[str, Any]) -> list[str]:
    """How many processes the case was measured with, as `perfgate run` options: ``--processes N`` where the
    number was fixed, the adaptive budget (``--max-processes``, ``--max-case-s``) where it was not."""
    info = case.metadata.get("sampling")
    if not isinstance(info, dict) or info.get("rule") == "fixed":
        n = _count(settings.get("processes"))
        return ["--processes", n] if n else []
    budget = given if isinstance(given := info.get("budget"), dict) else {}
    out = []
    first, most = budget.get("first"), budget.get("max_processes")
    # a screened case's budget is its first look only; its lockstep settling had the whole budget
    if _count(most) and not (isinstance(first, int) and most <= first):  # type: ignore[operator]  # _count(most): an int
        out += ["--max-processes", str(most)]
    seconds = _number(budget.get("max_seconds"))
    if seconds:
        out += ["--max-case-s", seconds]
    return out


def _printable(text: str, limit: int = 200) -> str:
    """Untrusted text for a comment line: control and format characters (a newline would end the comment
    and make the rest a command) escaped, at most ``limit`` characters."""
    return "".join(c if c.isprintable() else f"\\x{ord(c):02x}" if ord(c) < 256 else f"\\u{ord(c):04x}"
                   for c in text[:limit])


@dataclass(frozen=True)
class Checkout:
    """Where a path read from a results file may lead the printed command: into this checkout (the project
    root, the folder of the pyproject.toml found from here) and outside every run folder (the configured
    reports folder, any folder holding a results.json). A configuration, workloads folder or compile cache
    elsewhere (an unpacked artifact, a run folder the measured code wrote) would run that code's Python."""

    root: Path
    reports: Path

    @classmethod
    def here(cls) -> Checkout:
        try:
            found = find_pyproject(Path.cwd())
        except ConfigError:
            found = None
        root = (found.parent if found is not None else Path.cwd()).resolve()
        try:
            reports = Path(load(None).reports_dir).resolve()
        except (ConfigError, OSError):
            reports = root / "reports"
        return cls(root, reports)

    def refuses(self, path: Path) -> str | None:
        """Why the command must not use ``path`` (resolved), or None when it may."""
        if not path.is_relative_to(self.root):
            return f"it lies outside this checkout ({self.root})"
        if path.is_relative_to(self.reports):
            return f"it lies in the reports folder ({shown_path(self.reports)}), a run's output"
        folder = path if path.is_dir() else path.parent
        for above in (folder, *folder.parents):
            if (above / "results.json").is_file():
                return f"it lies in a run folder ({shown_path(above)})"
            if above == self.root:
                break
        return None


def _resolved(value: Any) -> Path | None:
    if not isinstance(value, str) or not value or "\0" in value:
        return None
    try:
        return Path(value).resolve()
    except (OSError, RuntimeError, ValueError):
        return None


def _left_out(option: str, value: str, why: str) -> str:
    return f"# {option} {_printable(value)} (from the run's results.json) left out: {why}; add it by hand if you trust it"


def config_option(settings: dict[str, Any], checkout: Checkout | None = None,
                  notes: list[str] | None = None) -> list[str]:
    """``--config PATH`` when the run read another configuration file than the one found from here, and it
    lies in this checkout outside every run folder (``Checkout``); else nothing, with a line in ``notes``
    saying why."""
    recorded = settings.get("config")
    if not isinstance(recorded, str) or not recorded:
        return []
    checkout = checkout or Checkout.here()
    notes = notes if notes is not None else []
    try:
        found = find_pyproject(Path.cwd())
    except ConfigError:
        found = None
    path = _resolved(recorded)
    if path is None or not path.is_file():
        # not here (a CI machine's path): the nearest pyproject.toml stands in for one, another file cannot
        if Path(recorded).name != "pyproject.toml":
            notes.append(_left_out("--config", recorded, "it is not a file here"))
        return []
    if found is not None and found.resolve() == path:
        return []
    why = checkout.refuses(path)
    if why:
        notes.append(_left_out("--config", recorded, why))
        return []
    return ["--config", shown_path(path)]


def folder_options(settings: dict[str, Any], config_args: list[str], checkout: Checkout | None = None,
                   notes: list[str] | None = None) -> list[str]:
    """``--workloads-dir`` for each workloads folder the run read that the configuration the command will read
    does not list (one given on the run's command line), and ``--compile-cache`` when the run kept its compiler
    caches elsewhere than that configuration says. Only folders that exist in this checkout, outside every run
    folder (``Checkout``): a path from another machine (CI's) names nothing to reproduce with, and one
    elsewhere, read from an untrusted file, could have the command import whatever Python files lie there
    (each left out gets a line in ``notes``)."""
    try:
        here = load(config_args[1] if config_args else None)
    except (ConfigError, OSError):
        return []  # the command's own run will say what is wrong with the configuration
    checkout = checkout or Checkout.here()
    notes = notes if notes is not None else []

    def usable(option: str, value: Any) -> Path | None:
        path = _resolved(value)
        if path is None:
            return None
        why = "it is not a folder here" if not path.is_dir() else checkout.refuses(path)
        if why:
            notes.append(_left_out(option, value, why))
            return None
        return path

    known = {p.resolve() for p in here.workloads_dirs}
    out: list[str] = []
    recorded = settings.get("workloads_dirs")
    for d in recorded if isinstance(recorded, list) else []:
        path = _resolved(d)
        if path is None or path in known:
            continue
        path = usable("--workloads-dir", d)
        if path is not None:
            known.add(path)
            out += ["--workloads-dir", shown_path(path)]
    cache_path = _resolved(settings.get("compile_cache"))
    if cache_path is not None and (here.compile_cache is None or Path(here.compile_cache).resolve() != cache_path):
        cache = usable("--compile-cache", settings.get("compile_cache"))
        if cache is not None:
            out += ["--compile-cache", shown_path(cache)]
    return out


def _glob_literal(name: str) -> str:
    """``name`` as a -w pattern that matches exactly that name."""
    return re.sub(r"([*?\[])", r"[\1]", name)


def layout_prefix(run: RunResult) -> list[str]:
    """``PERFGATE_LAYOUT=POLICY`` and ``PERFGATE_MALLOC=POLICY`` where the run measured under another layout or
    C allocator policy than the default (the variables set in its environment): a reproduction under the
    defaults would measure other layouts. The run's layout seed is not repeated: a reproduction draws
    layouts of its own (docs/gate.md)."""
    env = run.environment if isinstance(run.environment, dict) else {}
    return [f"{name}={env.get(key)}" for name, key, policies in ((LAYOUT_ENV, "layout_policy", POLICIES),
                                                                 (MALLOC_ENV, "malloc", MALLOC_POLICIES))
            if env.get(key) in policies and env.get(key) != policies[0]]


def run_command(case: CaseResult, run: RunResult, base: Base, *, gate: bool = True,
                notes: list[str] | None = None) -> list[str]:
    """`perfgate run --against BASE` narrowed to ``case``, with the settings its run recorded; a recorded
    path the command may not use is left out, with a line saying why added to ``notes``."""
    settings = run.settings if isinstance(run.settings, dict) else {}
    spec = case.spec
    side = base_side_options(settings)
    # --base-python alone measured this tree against itself in another environment: no ref to check out
    same_tree = bool(side) and not settings.get("against")
    argv = [*layout_prefix(run), "perfgate", "run", *([] if same_tree else ["--against", base.ref]), *side]
    if run.suite:
        argv += ["--suite", run.suite]
    argv += ["-w", _glob_literal(spec.workload), "--size", spec.size, "-t", spec.toggle_name, "--device", spec.device]
    argv += sampling_options(case, settings)
    timing = given if isinstance(given := settings.get("timing"), dict) else {}
    for option, value in (("--samples", _count(timing.get("samples"))), ("--threads", _count(settings.get("threads"))),
                          ("--timeout", _number(settings.get("timeout_s"))),
                          ("--max-memory-mb", _count(settings.get("max_memory_mb"))),
                          ("--device-memory-gb", _number(settings.get("device_memory_gb")))):
        if value:
            argv += [option, value]
    checkout = Checkout.here()
    config_args = config_option(settings, checkout, notes)
    argv += config_args + folder_options(settings, config_args, checkout, notes)
    return argv + (["--gate"] if gate else [])


_SIDE_VALUE = re.compile(r"[^\s\x00-\x1f\x7f-]\S*")
_SIDE_VARIABLE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=\S*")


def base_side_options(settings: dict[str, Any]) -> list[str]:
    """`--base-python PATH` and `--base-env NAME=VALUE` as the run recorded them (results.json is untrusted:
    a path or variable that no `perfgate run` accepted is left out)."""
    out = []
    python = settings.get("base_python")
    if isinstance(python, str) and _SIDE_VALUE.fullmatch(python):
        out += ["--base-python", python]
    variables = settings.get("base_env")
    for item in variables if isinstance(variables, list) else []:
        if isinstance(item, str) and item.isprintable() and _SIDE_VARIABLE.fullmatch(item):
            out += ["--base-env", item]
    return out


def traces_folder(case: CaseResult) -> str:
    """The run folder the traces form writes: one per case under REPRO_OUT."""
    spec = case.spec
    return f"{REPRO_OUT}/" + component(f"{spec.workload}-{spec.size}-{spec.toggle_name}-{spec.device}")


def traces_command(case: CaseResult, run: RunResult, base: Base) -> list[str]:
    """The form that keeps both sides' traces: one lockstep pair (each side's process 0 runs the profile
    pass), into a known folder; no verdict to read from one pair."""
    argv = run_command(case, run, base, gate=False)
    if "--processes" in argv:
        i = argv.index("--processes")
        del argv[i:i + 2]
    for option in ("--max-processes", "--max-case-s"):
        if option in argv:
            i = argv.index(option)
            del argv[i:i + 2]
    return argv + ["--processes", "1", "--out", traces_folder(case)]


@dataclass(frozen=True)
class Repro:
    """One case's reproduction: the command that judges it again, and the one that keeps both traces."""

    case_key: str
    base: Base
    command: str
    traces: str
    traces_dir: str
    spec_dirs: str  # <workload>/<size>/<toggles>: where each side's trace lands under its tb/
    notes: tuple[str, ...] = ()  # comment lines: recorded paths the commands leave out, and why

    def lines(self, summary: str = "", *, traces_only: bool = False) -> list[str]:
        """The commented commands (``traces_only``: only the form that keeps both traces)."""
        head = f"# {self.case_key}" + (f": {summary}" if summary else "")
        return [head, f"# base: {self.base.ref[:12] if self.base.known else self.base.ref} ({self.base.origin})",
                *self.notes, *([] if traces_only else [self.command]),
                f"# the same case with both traces kept (head: {self.traces_dir}/tb/{self.spec_dirs}/, "
                f"base: {self.traces_dir}/base/tb/{self.spec_dirs}/; open them in https://ui.perfetto.dev):",
                self.traces]


def repro_for(case: CaseResult, run: RunResult, base: Base) -> Repro:
    spec = case.spec
    notes: list[str] = []
    command = shell(run_command(case, run, base, notes=notes))
    return Repro(case_key=case.key, base=base, command=command,
                 traces=shell(traces_command(case, run, base)), traces_dir=traces_folder(case),
                 spec_dirs="/".join(component(x) for x in (spec.workload, spec.size, spec.toggle_name)),
                 notes=tuple(notes))


def regression_repros(run: RunResult, comparison: Comparison | None, run_dir: Path | None = None) -> dict[str, Repro]:
    """A Repro for every case with a verdict that fails the gate, by case key, in the verdicts' order."""
    if comparison is None:
        return {}
    keys = list(dict.fromkeys(v.case_key for v in comparison.verdicts if v.fails_gate))
    cases = {c.key: c for c in run.cases}
    if not any(k in cases for k in keys):
        return {}
    recorded = _recorded_base(comparison, run_dir)
    return {k: repro_for(cases[k], run, _base_in(run, comparison, recorded, k)) for k in keys if k in cases}


def matching_cases(pattern: str, run: RunResult, source: str) -> list[CaseResult]:
    """The run's cases whose key is ``pattern`` or matches it as a glob; ConfigError listing the keys if none."""
    exact = [c for c in run.cases if c.key == pattern]
    found = exact or [c for c in run.cases if fnmatch.fnmatchcase(c.key, pattern)]
    if not found:
        keys = [c.key for c in run.cases]
        shown = ", ".join(keys[:VALID_LISTED]) + (f", ... ({len(keys) - VALID_LISTED} more)"
                                                  if len(keys) > VALID_LISTED else "")
        raise ConfigError(f"no case of {source} matches {pattern!r}; valid: {shown or '(the run has no case)'}"
                          " (a key workload/size/toggles/device, or a glob of keys)")
    return found


def verdict_summary(key: str, comparison: Comparison | None) -> str:
    """'step_time regression 3.010x [2.9, 3.1]': the case's verdicts that fail the gate, else its worst one."""
    if comparison is None:
        return ""
    verdicts = comparison.for_case(key)
    shown = [v for v in verdicts if v.fails_gate] or [v for v in verdicts if v.kind not in ("unchanged",)]
    return "; ".join(f"{v.metric} {v.kind}" + (f" {v.ratio:.3f}x" if v.ratio is not None else "") for v in shown[:3])


def command_lines(pattern: str, run: RunResult, comparison: Comparison | None, run_dir: Path, *,
                  traces_only: bool = False) -> list[str]:
    """`perfgate repro CASE`: for each case the pattern matches, its reproduction (``traces_only``: only the
    form that keeps both traces)."""
    cases = matching_cases(pattern, run, str(run_dir))
    recorded = _recorded_base(comparison, run_dir)
    out: list[str] = []
    for case in cases:
        r = repro_for(case, run, _base_in(run, comparison, recorded, case.key))
        out += r.lines(verdict_summary(case.key, comparison), traces_only=traces_only)
    return out


def load_run(path: str | Path) -> tuple[RunResult, Path]:
    """A run folder or results.json -> the run and its folder (SchemaError naming the file if unreadable)."""
    p = Path(path)
    run_dir = p if p.is_dir() else p.parent
    return load_results(p), run_dir


# ---------------------------------------------------------------- wins: refresh the baseline for those cases

def confirmed_wins(comparison: Comparison | None) -> list[str]:
    """Case keys whose step time is a settled win against a stored baseline file."""
    if comparison is None or comparison.mode != "baseline" or not comparison.baseline_source:
        return []
    if not is_baseline_file(comparison.baseline_source):
        return []
    return list(dict.fromkeys(v.case_key for v in comparison.verdicts if v.metric == "step_time" and v.kind == "win"))


def refresh_command(comparison: Comparison | None, run_dir: Path | None) -> str | None:
    """`perfgate baseline update RUN --baseline FILE --case KEY...` for the confirmed wins, or None."""
    keys = confirmed_wins(comparison)
    if not keys or comparison is None or comparison.baseline_source is None:
        return None
    argv = ["perfgate", "baseline", "update", shown_path(run_dir) if run_dir else "RUN_DIR",
            "--baseline", shown_path(comparison.baseline_source)]
    for key in keys:
        argv += ["--case", key]
    return shell(argv)

