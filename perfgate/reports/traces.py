"""A case's profiler traces, base and head: where they lie, what they hold, how they differ. No torch.

The profile pass (perfgate.worker.profiling) exports one Chrome-trace JSON per case, the ``.pt.trace.json`` under
``<run dir>/tb/<workload>/<size>/<toggles>/`` (``profile.trace_file`` in results.json, relative to the run
folder), holding the recorded ``ProfilerStep#N`` windows. Here:

- ``base_runs`` and ``trace_pair``: the base and head trace of a case. ``--against REF`` keeps the base
  side's run in ``<run>/base/``, a verdict settled in lockstep against a stored baseline's commit the base
  side of its pairs in ``<run>/lockstep/base/``, and ``perfgate report --against-results OTHER`` names the
  other run's folder; a stored baseline file keeps no traces (its paths are relative to a run folder that
  is not here).
- ``read_trace``: total time and count per kernel (CUDA: ``kernel`` events) or op (CPU: ``cpu_op``
  events), per recorded step. A trace is untrusted: read under the size cap and checked through
  perfgate.util.validation; a missing or malformed one becomes a one-line note, never an error of the report.
- ``kernel_diff``: each name's change between the two, top movers (time per step) first.
- ``trace_text``: what `perfgate trace CASE` prints, with the steps to open a trace in Perfetto.
"""

from __future__ import annotations

import bisect
import fnmatch
import math
import os
import statistics
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

from perfgate.model.comparison import Comparison
from perfgate.model.config import ConfigError
from perfgate.model.results import STATUS_OK, CaseResult, RunResult, load_results
from perfgate.util.formatting import format_count
from perfgate.util.stats import format_seconds
from perfgate.util.validation import (
    Document,
    NonNegative,
    Number,
    SchemaError,
    Text,
    check,
    expected,
    read_json_file,
)

TRACE_SUFFIX = ".pt.trace.json"
PERFETTO_URL = "https://ui.perfetto.dev"
# rows of the kernel diff a report shows; the rest are counted
DIFF_ROWS = 15
# a kernel name (a templated CUDA kernel's can run to kilobytes) as a report shows it
NAME_CHARS = 160

PERFETTO_STEPS = (
    f"open {PERFETTO_URL} in a browser (Chrome or Firefox; the UI is a static page that reads the file in the "
    "browser: nothing is uploaded, and once loaded it works offline)",
    "click \"Open trace file\" in the left menu and choose the .pt.trace.json, or drag the file onto the page",
    "W/S zoom, A/D pan; click a slice for its duration and arguments; select a range for its summary "
    "(kernel names and total time per name)",
    "to run the UI on your own machine instead: git clone https://android.googlesource.com/platform/external/"
    "perfetto && cd perfetto && tools/install-build-deps --ui && ui/run-dev-server, then open "
    "http://localhost:10000",
)


class TraceDocument(Document):
    """A Chrome-trace JSON as torch.profiler's export_chrome_trace writes it: only its events are read."""

    traceEvents: Annotated[list[dict[str, Any]], expected("an array of objects")]


class SliceDocument(Document):
    """One complete event (``ph: X``) of a category that is read: a kernel, an op or a profiler step."""

    name: Text
    dur: NonNegative
    ts: Number | None = None  # its start, microseconds: which profiler step a host op ran in


@dataclass(frozen=True)
class TraceTotals:
    """One trace read: time (microseconds) and count per name, each per recorded workload step."""

    category: str  # the events read: kernel (CUDA) or cpu_op (CPU)
    steps: int  # ProfilerStep windows the trace marks (0: none marked; the totals cover the whole trace)
    steps_per_profiler_step: int  # a captured CUDA graph replays a whole unit per profiler step
    time_us: dict[str, float]
    count: dict[str, float]
    step_wall_us: float | None  # the profiler steps' mean wall time per workload step
    # kernels left out: launched outside every ProfilerStep window (a warm-up step whose host side was not
    # recorded, or after the window), so belonging to no recorded step
    outside: int = 0

    @property
    def total_us(self) -> float:
        return sum(self.time_us.values())


# host ops (CPU) per step: the median of the steps' times from this many recorded steps on, so one step in
# which the shared machine preempted an op does not make that op a top mover
ROBUST_STEPS = 3


# the host-side calls that launch device work: a kernel carries the correlation id of the one that launched it
LAUNCH_CATEGORIES = ("cuda_runtime", "cuda_driver")


def _correlation(event: dict[str, Any]) -> int | None:
    """The correlation id linking a kernel to its launching runtime call (``args.correlation``), or None."""
    args = event.get("args")
    value = args.get("correlation") if isinstance(args, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _launches(events: list[dict[str, Any]]) -> dict[int, float]:
    """correlation id -> when the host launched it: the runtime or driver call's start, else the start of
    its ``ac2g`` flow (``ph: s``, id = the correlation id), which links the same two events."""
    out: dict[int, float] = {}
    for event in events:
        ts = event.get("ts")
        if not isinstance(ts, (int, float)) or isinstance(ts, bool) or not math.isfinite(ts):
            continue
        if event.get("ph") == "X" and event.get("cat") in LAUNCH_CATEGORIES:
            corr = _correlation(event)
        elif event.get("ph") == "s" and event.get("cat") == "ac2g":
            corr = event.get("id") if isinstance(event.get("id"), int) and not isinstance(event.get("id"), bool) else None
        else:
            continue
        if corr is not None:
            out.setdefault(corr, float(ts))
    return out


def _window_of(ts: float | None, windows: list[tuple[float, float]], starts: list[float]) -> int | None:
    if ts is None:
        return None
    k = bisect.bisect_right(starts, ts) - 1
    return k if k >= 0 and ts <= windows[k][1] else None


def _launched_in_windows(kernels: list[tuple[SliceDocument, int | None]], launches: dict[int, float],
                         windows: list[tuple[float, float]]) -> tuple[list[SliceDocument], int]:
    """The kernels launched inside one of ``windows``, and how many were not. A kernel's step is the one its
    launching call (same correlation id) ran in, not the one its own time on the GPU falls in: a step's
    kernels run after its host side, and a kernel of a step before the window (the profiler's warm-up)
    runs inside it. In a trace that records launches, a kernel whose launch is not recorded was launched
    before the window; in one that records none, the kernel's own start decides."""
    windows = sorted(windows)
    starts = [w[0] for w in windows]
    kept, outside = [], 0
    for piece, corr in kernels:
        if corr is not None and corr in launches:
            at: float | None = launches[corr]
        elif launches and corr is not None:
            at = None  # launched while the host side was not recorded
        else:
            at = piece.ts
        if _window_of(at, windows, starts) is None:
            outside += 1
        else:
            kept.append(piece)
    return kept, outside


def read_trace(path: Path, category: str, steps_per_profiler_step: int = 1) -> TraceTotals:
    """Per name: time and count of the ``category`` events (``kernel`` or ``cpu_op``) of the trace at
    ``path`` per workload step (its ``ProfilerStep#N`` windows times ``steps_per_profiler_step``). The
    time is the total divided by the steps; for host ops (``cpu_op``) in at least ROBUST_STEPS windows, each
    of whose events lies inside one, the median of the windows' times (a preempted step is one window). A
    count is always the total divided by the steps. Kernels count in the step that launched them
    (``_launched_in_windows``); those launched outside the windows are left out, their number in
    ``outside``. SchemaError naming the file and the event for anything malformed."""
    source = str(path)
    doc = check(TraceDocument, read_json_file(path, "profiler trace"), source)
    pieces: list[SliceDocument] = []
    correlations: list[int | None] = []
    windows: list[tuple[float, float]] = []
    steps, step_us = 0, 0.0
    for i, event in enumerate(doc.traceEvents):
        cat = event.get("cat")
        if event.get("ph") != "X" or cat not in (category, "user_annotation"):
            continue
        piece = check(SliceDocument, event, source, where=f"traceEvents[{i}]")
        if cat == "user_annotation":  # the host side's step markers; GPU annotations have their own category
            if piece.name.startswith("ProfilerStep#"):
                steps += 1
                step_us += piece.dur
                if piece.ts is not None:
                    windows.append((piece.ts, piece.ts + piece.dur))
            continue
        pieces.append(piece)
        correlations.append(_correlation(event))
    outside = 0
    if category == "kernel" and steps and len(windows) == steps:
        pieces, outside = _launched_in_windows(list(zip(pieces, correlations, strict=True)), _launches(doc.traceEvents),
                                               windows)
    time_us: dict[str, float] = {}
    count: dict[str, float] = {}
    for piece in pieces:
        time_us[piece.name] = time_us.get(piece.name, 0.0) + piece.dur
        count[piece.name] = count.get(piece.name, 0.0) + 1
    per = max(int(steps_per_profiler_step), 1)
    divide = max(steps, 1) * per
    time_us = {k: v / divide for k, v in time_us.items()}
    if category == "cpu_op" and len(windows) == steps >= ROBUST_STEPS:
        time_us.update({k: v / per for k, v in _median_step_times(pieces, windows).items()})
    return TraceTotals(category, steps, per, time_us, {k: v / divide for k, v in count.items()},
                       step_us / (steps * per) if steps else None, outside)


def _median_step_times(pieces: list[SliceDocument], windows: list[tuple[float, float]]) -> dict[str, float]:
    """Per name whose every event starts inside one of ``windows`` and that runs in every window: the median
    over the windows of its time in each. An op that runs in some steps only (every other step, once in
    the window) keeps its mean: the median of its times, 0 in the steps without it, read 0 for an op in
    fewer than half the steps, however long it ran, and left it out of the top movers."""
    windows = sorted(windows)
    starts = [w[0] for w in windows]
    per_window: dict[str, list[float]] = {}
    seen: dict[str, set[int]] = {}
    outside: set[str] = set()
    for piece in pieces:
        k = bisect.bisect_right(starts, piece.ts) - 1 if piece.ts is not None else -1
        if k < 0 or piece.ts > windows[k][1]:  # type: ignore[operator]  # k >= 0 only when piece.ts is not None
            outside.add(piece.name)
            continue
        per_window.setdefault(piece.name, [0.0] * len(windows))[k] += piece.dur
        seen.setdefault(piece.name, set()).add(k)
    return {name: statistics.median(times) for name, times in per_window.items()
            if name not in outside and len(seen[name]) == len(windows)}


@dataclass(frozen=True)
class KernelChange:
    """One kernel (op on CPU) in the base and head traces: time and count per step, 0 where absent."""

    name: str
    base_us: float
    head_us: float
    base_count: float
    head_count: float

    @property
    def delta_us(self) -> float:
        return self.head_us - self.base_us

    @property
    def delta_count(self) -> float:
        return self.head_count - self.base_count

    @property
    def change(self) -> str:
        """added | removed | count changed | time changed | unchanged"""
        if not self.base_count:
            return "added"
        if not self.head_count:
            return "removed"
        if abs(self.delta_count) > 1e-9 * max(self.base_count, 1.0):
            return "count changed"
        return "time changed" if self.delta_us else "unchanged"

    @property
    def shown_name(self) -> str:
        return self.name if len(self.name) <= NAME_CHARS else self.name[:NAME_CHARS - 1] + "…"

    @property
    def relative_text(self) -> str:
        """'+42%' against the base's time; 'new' for an added kernel, '' when nothing moved."""
        if not self.base_us:
            return "new" if self.head_us else ""
        return f"{self.delta_us / self.base_us * 100:+.0f}%"


def kernel_diff(base: TraceTotals, head: TraceTotals) -> list[KernelChange]:
    """Every name of either trace, top movers first: the largest change of time per step, then of count
    per step, then by name; names whose time and count are the same in both are left out."""
    changes = [KernelChange(n, base.time_us.get(n, 0.0), head.time_us.get(n, 0.0), base.count.get(n, 0.0),
                            head.count.get(n, 0.0)) for n in base.time_us.keys() | head.time_us.keys()]
    moved = [c for c in changes if c.change != "unchanged"]
    moved.sort(key=lambda c: (-abs(c.delta_us), -abs(c.delta_count), c.name))
    return moved


# ---------------------------------------------------------------- where the traces lie


@dataclass(frozen=True)
class BaseRun:
    """A run holding base cases: its folder (the traces' paths are relative to it; None for a stored
    baseline, whose run folder is not here) and what to call it."""

    folder: Path | None
    run: RunResult | None
    what: str


def _read_run(folder: Path) -> RunResult | None:
    try:
        return load_results(folder / "results.json")
    except SchemaError:
        return None


def base_runs(run_dir: Path, comparison: Comparison | None) -> list[BaseRun]:
    """Where the base side of ``run_dir``'s cases was measured, the first holding a case first:
    ``--against``'s ``base/``, the lockstep pairs' ``lockstep/base/``, another run's folder
    (``--against-results``, `perfgate compare` with a results file), or a stored baseline (no folder)."""
    out = []
    against = run_dir / "base"
    if (comparison is not None and comparison.mode == "against") or (
            comparison is None and (against / "results.json").is_file()):
        base = comparison.baseline if comparison is not None and comparison.baseline is not None else None
        out.append(BaseRun(against, base or _read_run(against), "the base ref's side (base/)"))
        return out
    lockstep = run_dir / "lockstep" / "base"
    if (lockstep / "results.json").is_file():
        out.append(BaseRun(lockstep, _read_run(lockstep), "the lockstep pairs' base side (lockstep/base/)"))
    if comparison is None:
        return out
    source = Path(comparison.baseline_source) if comparison.baseline_source else None
    if source is not None and (source.is_dir() or (source.name == "results.json" and source.is_file())):
        folder = source if source.is_dir() else source.parent
        out.append(BaseRun(folder, comparison.baseline or _read_run(folder), f"the base run {folder}"))
    else:
        out.append(BaseRun(None, comparison.baseline, f"the stored baseline {comparison.baseline_source or '-'}"))
    return out


def _recorded_trace(case: CaseResult) -> str | None:
    rel = case.profile.get("trace_file") if isinstance(case.profile, dict) else None
    return rel if isinstance(rel, str) and rel else None


def _inside(path: Path, root: Path) -> bool:
    real, real_root = path.resolve(), root.resolve()
    return real == real_root or real_root in real.parents


@dataclass(frozen=True)
class TraceSide:
    """One side's trace: the file (None when there is none to read) or why not."""

    label: str  # base | head
    path: Path | None = None
    note: str = ""


def trace_of(case: CaseResult | None, folder: Path | None, label: str, what: str) -> TraceSide:
    """The trace file ``case`` recorded, relative to its run ``folder``: a file inside that folder whose
    name ends in .pt.trace.json, or a TraceSide that says why there is none."""
    if case is None:
        return TraceSide(label, note=f"{what} has no such case")
    rel = _recorded_trace(case)
    if rel is None:
        why = f"the case {case.status}" if case.status != STATUS_OK else "the case recorded no trace"
        return TraceSide(label, note=f"{why} in {what}")
    if folder is None:
        return TraceSide(label, note=f"not kept: {what} names {rel}, relative to the run folder it was made "
                                     "from, which is not here (perfgate run --against REF keeps both sides' traces)")
    path = folder / rel
    if ("\x00" in rel or Path(rel).is_absolute() or not rel.endswith(TRACE_SUFFIX)
            or not _inside(path, folder)):
        return TraceSide(label, note=f"{what} names {rel!r}, not a {TRACE_SUFFIX} file inside its run folder")
    if not path.is_file():
        return TraceSide(label, note=f"missing: {path} (named in {what}) does not exist")
    return TraceSide(label, path)


def _category(case: CaseResult) -> tuple[str, str]:
    """(trace category, what the diff calls a row): kernels on CUDA, ops on CPU."""
    return ("kernel", "kernel") if case.spec.device.startswith("cuda") else ("cpu_op", "op")


def _steps_per_profiler_step(case: CaseResult) -> int:
    window = case.profile.get("window") if isinstance(case.profile, dict) else None
    value = window.get("steps_per_profiler_step", 1) if isinstance(window, dict) else 1
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 1 else 1


@dataclass
class TracePair:
    """Both traces of a case and their kernel-by-kernel difference, or notes saying what is missing."""

    case_key: str
    unit: str  # kernel | op
    base: TraceSide
    head: TraceSide
    base_totals: TraceTotals | None = None
    head_totals: TraceTotals | None = None
    changes: list[KernelChange] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    # (base, head): the two runs `perfgate tensorboard` shows the traces as, for the profiler plugin's Diff view
    tensorboard_runs: tuple[str, str] | None = None

    @property
    def compared(self) -> bool:
        return self.base_totals is not None and self.head_totals is not None

    @property
    def shown_changes(self) -> list[KernelChange]:
        return self.changes[:DIFF_ROWS]

    @property
    def more(self) -> int:
        return max(len(self.changes) - DIFF_ROWS, 0)

    @property
    def top_mover_text(self) -> str:
        """'aten::conv2d 41.2 us -> 80.1 us per step (+94%), 6 -> 12 calls': the first row, in words."""
        if not self.changes:
            return ""
        c = self.changes[0]
        text = f"{c.shown_name} {format_us(c.base_us)} -> {format_us(c.head_us)} per step"
        text += f" ({c.relative_text})" if c.relative_text else ""
        if c.delta_count:
            text += f", {format_count(c.base_count)} -> {format_count(c.head_count)} calls"
        return text


def format_us(us: float | None) -> str:
    """Microseconds in the unit a person reads (812 ns, 41.2 us, 3.07 ms)."""
    return format_seconds(us * 1e-6) if us is not None else "-"


def format_delta_us(us: float) -> str:
    """A change of microseconds with its sign: '+1.37 ms', '-812 ns'."""
    return ("-" if us < 0 else "+") + format_us(abs(us))


def _totals(side: TraceSide, case: CaseResult, notes: list[str]) -> TraceTotals | None:
    if side.path is None:
        return None
    category, _ = _category(case)
    try:
        totals = read_trace(side.path, category, _steps_per_profiler_step(case))
    except SchemaError as exc:
        notes.append(f"{side.label} trace unreadable: {' '.join(str(exc).split())[:300]}")
        return None
    if not totals.time_us:
        notes.append(f"{side.label} trace {side.path.name} holds no {category} events")
    if totals.outside:
        notes.append(f"{side.label} trace: {totals.outside} {category}s launched outside the recorded steps "
                     "(the profiler's warm-up, or after the window) are left out of the per-step figures")
    return totals


# the folder, inside a case's TensorBoard run, that `perfgate tensorboard` shows its base trace in: the
# profiler plugin lists it as the run `<workload>/<size>/<toggles>/base`, next to the head's
BASE_RUN_FOLDER = "base"


def tensorboard_runs(base: TraceSide, head: TraceSide, tb_dir: Path) -> tuple[str, str] | None:
    """(base run, head run): the names TensorBoard's PyTorch Profiler tab lists a case's two traces under
    when `perfgate tensorboard` serves them (the head's folder inside ``tb_dir``, and its ``base`` below
    it), or None where a side has no trace or the head's lies outside ``tb_dir``."""
    if base.path is None or head.path is None or not _inside(head.path.parent, tb_dir):
        return None
    head_run = head.path.parent.resolve().relative_to(tb_dir.resolve()).as_posix()
    return (f"{head_run}/{BASE_RUN_FOLDER}", head_run) if head_run != "." else None


def _base_holder(case: CaseResult, bases: list[BaseRun]) -> BaseRun | None:
    return next((b for b in bases if b.run is not None and b.run.case(case.key) is not None), None)


def trace_sides(case: CaseResult, bases: list[BaseRun], run_dir: Path) -> tuple[TraceSide, TraceSide]:
    """(base, head): the head trace of ``case`` (in ``run_dir``) and the base trace from the first of
    ``bases`` that has the case, each a file or a note saying why there is none; nothing is read."""
    head = trace_of(case, run_dir, "head", "this run")
    holder = _base_holder(case, bases)
    if holder is not None and holder.run is not None:
        base = trace_of(holder.run.case(case.key), holder.folder, "base", holder.what)
    elif bases and bases[-1].folder is None:
        base = TraceSide("base", note=f"not kept: {bases[-1].what} keeps no traces (perfgate run --against REF "
                                      "keeps both sides')")
    elif bases:
        base = TraceSide("base", note=f"{bases[-1].what} has no such case (or its results.json cannot be read)")
    else:
        base = TraceSide("base", note="nothing was compared: no base side")
    return base, head


def trace_pair(case: CaseResult, bases: list[BaseRun], run_dir: Path) -> TracePair:
    """The head trace of ``case`` (in ``run_dir``), the base trace from the first of ``bases`` that has
    the case, and, when both read, their difference. Never raises for a missing or malformed file."""
    base, head = trace_sides(case, bases, run_dir)
    holder = _base_holder(case, bases)
    pair = TracePair(case.key, _category(case)[1], base, head)
    base_case = holder.run.case(case.key) if holder is not None and holder.run is not None else None
    pair.tensorboard_runs = tensorboard_runs(base, head, run_dir / "tb")
    pair.base_totals = _totals(base, base_case or case, pair.notes)
    pair.head_totals = _totals(head, case, pair.notes)
    if pair.base_totals is not None and pair.head_totals is not None:
        pair.changes = kernel_diff(pair.base_totals, pair.head_totals)
        if not pair.base_totals.steps or not pair.head_totals.steps:
            pair.notes.append("a trace marks no ProfilerStep windows: its totals cover the whole trace, not one step")
    return pair


def link(path: Path | None, report_dir: Path | None) -> tuple[str | None, str]:
    """(href, text) for a trace file in a report written to ``report_dir``: a relative link when the file
    (symlinks resolved) lies inside the report's folder tree, else no link and the path as text."""
    if path is None:
        return None, ""
    if report_dir is not None and _inside(path, report_dir):
        rel = os.path.relpath(path.resolve(), report_dir.resolve())
        return urllib.parse.quote(Path(rel).as_posix()), Path(rel).as_posix()
    return None, str(path.resolve())


# ---------------------------------------------------------------- perfgate trace CASE


def matching_cases(run: RunResult, pattern: str, source: str) -> list[CaseResult]:
    """The cases whose key is ``pattern`` or matches it as a glob (``tight_conv/*/eager/cpu``);
    ConfigError naming the valid cases when none does."""
    exact = [c for c in run.cases if c.key == pattern]
    found = exact or [c for c in run.cases if fnmatch.fnmatchcase(c.key, pattern)]
    if not found:
        valid = ", ".join(c.key for c in run.cases) or "none (the run has no cases)"
        raise ConfigError(f"no case of {source} matches {pattern!r}; valid: {valid}")
    return found


def trace_text(run_dir: Path, pattern: str, comparison: Comparison | None, top: int = 5) -> str:
    """What `perfgate trace CASE` prints: per matching case its trace file(s), base and head where the
    run was compared with a base that kept them, the top movers between them, then how to open a trace
    in Perfetto. ConfigError (exit 2) when no case matches."""
    run = load_results(run_dir)
    bases = base_runs(run_dir, comparison)
    lines = []
    for case in matching_cases(run, pattern, str(run_dir / "results.json")):
        pair = trace_pair(case, bases, run_dir)
        lines.append(case.key)
        for side in ((pair.head, pair.base) if bases else (pair.head,)):
            lines.append(f"  {side.label}: {side.path if side.path else 'none: ' + side.note}")
        lines.extend(f"  note: {n}" for n in pair.notes)
        if pair.compared:
            unit = f"{pair.unit}s"
            lines.append(f"  {unit} that moved most (time per step, base -> head):" if pair.changes
                         else f"  the two traces show the same {unit} with the same time per step")
            for c in pair.changes[:top]:
                lines.append(f"    {c.shown_name}: {format_us(c.base_us)} -> {format_us(c.head_us)} "
                             f"({c.relative_text or c.change}); calls {format_count(c.base_count)} -> {format_count(c.head_count)}")
    lines.append("")
    lines.append("To open a trace in Perfetto:")
    lines.extend(f"  {i}. {step}" for i, step in enumerate(PERFETTO_STEPS, 1))
    lines.append("TensorBoard (`perfgate tensorboard`) shows the run's scalars and hparams.")
    return "\n".join(lines)
