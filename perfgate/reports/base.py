"""The one exporter interface and what every format reads: ReportInput, a run and its Comparison against
a baseline when there is one, with its rows, groups, overview and banner computed once. No torch here.

An exporter turns a ReportInput into the bytes of one file; each format (html, markdown, junit, csv,
json) only adds its own syntax. The pieces live beside it: the rows (rows.py), the recommendation
(recommend.py), the op diff (opdiff.py), the overview's cells (overview.py), what a run covers
(scope.py), how a verdict reads (display.py).
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any, Protocol

from perfgate.judging import expect, roofline
from perfgate.model.comparison import Comparison, Evidence, Verdict, evidence
from perfgate.model.results import STATUS_OK, CaseResult, RunResult
from perfgate.reports import allocations, traces
from perfgate.reports.display import verdict_display
from perfgate.reports.opdiff import op_diff
from perfgate.reports.overview import Overview, OverviewCell, OverviewRow, overview_cell
from perfgate.reports.recommend import EAGER_DID_NOT_RUN, NO_EAGER, ZERO_STEP_TIME, Recommendation, recommend
from perfgate.reports.rows import CaseRow, Group, peak_memory
from perfgate.reports.scope import environment_change, planned_gap
from perfgate.util.formatting import plural
from perfgate.util.stats import judged_step_time, speedup_of

# The relative change that counts as "pays off" / "hurts" for the recommendation when neither the
# comparison nor [tool.perfgate.gate] gives one.
DEFAULT_THRESHOLD = 0.05


class Exporter(Protocol):
    """One output format: a name for --format, the file it writes, and the rendering itself."""

    name: str
    filename: str

    def render(self, report: ReportInput) -> bytes: ...


def build_overview(report: ReportInput) -> Overview:
    """The overview of a report: one row per workload, size and device, one column per toggle set in the
    order the run first met them."""
    compared = report.comparison is not None
    toggles: list[str] = []
    rows: dict[tuple[str, str, str], OverviewRow] = {}
    for g in report.groups:
        line = rows.setdefault((g.workload, g.size, g.device), OverviewRow(g.workload, g.size, g.device, f"#{g.anchor}"))
        for r in g.rows:
            name = r.spec.toggle_name
            if name not in toggles:
                toggles.append(name)
            line.cells[name] = overview_cell(r, compared)
    baseline = report.comparison.baseline if report.comparison else None
    for v in report.missing_verdicts:
        spec = baseline.case(v.case_key).spec if baseline and baseline.case(v.case_key) else None  # type: ignore[union-attr]  # checked in the condition
        if spec is None:  # no spec to place it by: the list of missing cases names it
            continue
        line = rows.setdefault((spec.workload, spec.size, spec.device),
                               OverviewRow(spec.workload, spec.size, spec.device, ""))
        if spec.toggle_name not in toggles:
            toggles.append(spec.toggle_name)
        line.cells[spec.toggle_name] = OverviewCell(verdict_display(v.kind), "-", "", "", "#missing",
                                                    f"{v.case_key}: {v.kind}; {v.rule}")
    return Overview(compared, toggles, list(rows.values()))


def _threshold(value: Any) -> float | None:
    """A step-time threshold read from a results or comparison file (untrusted): a positive finite number,
    else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < math.inf:
        return None
    return float(value)


@dataclass
class ReportInput:
    """What every exporter reads: the run, an optional comparison, where the run lives."""

    run: RunResult
    comparison: Comparison | None = None
    run_dir: Path | None = None
    html_filename: str = "report.html"
    # where the reports are written (`perfgate report --out`); the run folder when None. Links to traces
    # are relative to it, and only to files inside it.
    report_dir: Path | None = None

    @property
    def threshold(self) -> float:
        """The run's global step-time threshold (``[tool.perfgate.gate] threshold`` as it recorded it): the
        one a case has unless its toggle, workload or calibration sets another (``threshold_of``)."""
        return self._gate_setting("threshold", DEFAULT_THRESHOLD, 0.0, math.inf)

    def threshold_of(self, case: CaseResult) -> float:
        """The step-time threshold of ``case``, as the gate sets it per toggle, workload and case: its own
        step-time verdict's, else the run's recorded ``[tool.perfgate.gate]`` (the widest per-toggle threshold
        among its toggles, then the per-workload one, then the global ``threshold``)."""
        for v in self.comparison.for_case(case.key) if self.comparison else []:
            if v.metric == "step_time" and _threshold(v.threshold) is not None:
                return float(v.threshold)  # type: ignore[arg-type]  # _threshold(v.threshold) is not None
        gate = self.run.settings.get("gate") if isinstance(self.run.settings, dict) else None
        gate = gate if isinstance(gate, dict) else {}
        toggles: Any
        workloads: Any
        toggles, workloads = (gate.get(k) if isinstance(gate.get(k), dict) else {} for k in ("toggles", "workloads"))
        per_toggle = [t for t in (_threshold(toggles.get(name)) for name in case.spec.toggles) if t is not None]
        if per_toggle:
            return max(per_toggle)
        per_workload = _threshold(workloads.get(case.spec.workload))
        return per_workload if per_workload is not None else self.threshold

    @property
    def process_quantile(self) -> float:
        """The quantile of each process's samples the gate judged this run by (``[tool.perfgate.gate]
        process_quantile``, as the run recorded it)."""
        return self.run.process_quantile

    @property
    def judged_step_time(self) -> str:
        """What a step_time verdict's baseline and current values are (``stats.judged_step_time``)."""
        return judged_step_time(self.process_quantile)

    def _gate_setting(self, key: str, default: float, low: float, high: float) -> float:
        """A number from the run's recorded ``[tool.perfgate.gate]`` (``RunResult.gate_setting``)."""
        return self.run.gate_setting(key, default, low, high)

    @cached_property
    def repros(self) -> dict[str, Any]:
        """perfgate.reports.repro.Repro by case key, for every case with a verdict that fails the gate."""
        from perfgate.reports.repro import regression_repros

        return regression_repros(self.run, self.comparison, self.run_dir)

    @cached_property
    def refresh_command(self) -> str | None:
        """`perfgate baseline update ... --case KEY...` for the confirmed step-time wins against a stored
        baseline file; None when there are none."""
        from perfgate.reports.repro import refresh_command

        return refresh_command(self.comparison, self.run_dir)

    @property
    def history_href(self) -> str | None:
        """history.html beside the run (written by `perfgate run --history`): each case links to its trend."""
        if self.run_dir is not None and (Path(self.run_dir) / "history.html").is_file():
            return "history.html"
        return None

    @cached_property
    def rows(self) -> list[CaseRow]:
        run, comp = self.run, self.comparison
        summaries = {c.key: run.step_time(c) for c in run.cases}
        memories = {c.key: peak_memory(c) for c in run.cases}
        against_eager = {c.key: run.memory_vs_eager(c) for c in run.cases}
        verdicts: dict[str, list[Verdict]] = defaultdict(list)
        for v in comp.verdicts if comp else []:
            verdicts[v.case_key].append(v)
        baseline = comp.baseline if comp else None
        rows = []
        for c in run.cases:
            eager_key = f"{c.spec.workload}/{c.spec.size}/eager/{c.spec.device}"
            eager_time = summaries.get(eager_key)
            speedup = (speedup_of(eager_time, summaries[c.key], c.key == eager_key, run.run_to_run(c))
                       if eager_key in summaries else None)
            mem, _ = memories[c.key]
            mem_metric, mem_ratio = against_eager[c.key] or ("", None)
            mem_change = mem_ratio.value if mem_ratio is not None else None
            vs = verdicts.get(c.key, [])
            base_case = baseline.case(c.key) if baseline else None
            row = CaseRow(
                case=c, step_time=summaries[c.key], speedup=speedup, verdicts=vs,
                memory_bytes=mem, memory_change=mem_change,
                recommendation=recommend(c, speedup, mem_change, self.threshold_of(c),
                                         NO_EAGER if eager_key not in summaries else
                                         EAGER_DID_NOT_RUN if eager_time is None else ZERO_STEP_TIME),
                baseline_case=base_case, bound=roofline.case_bound(c, run.ceilings),
                memory_ratio=mem_ratio, memory_metric=mem_metric,
            )
            if c.status == STATUS_OK and row.has_regression:
                row.op_diff = op_diff(base_case, c)
            rows.append(row)
        # the recommendation says what the eager step's bound class predicted for each toggle
        eager_bounds = {r.key: r.bound.bound for r in rows if r.spec.toggles == ("eager",) and r.bound}
        for r in rows:
            eb = eager_bounds.get(f"{r.spec.workload}/{r.spec.size}/eager/{r.spec.device}")
            hint = roofline.toggle_hint(eb, r.spec.toggles, r.recommendation.action) if eb else ""
            if hint and r.spec.toggles != ("eager",) and r.case.accuracy.get("verdict") != "drift":
                r.recommendation = Recommendation(r.recommendation.action, f"{r.recommendation.reason}; {hint}")
        return rows

    @property
    def regression_rows(self) -> list[CaseRow]:
        """The cases the "Regressions: why" part explains: a gate-failing verdict, or marked regression."""
        return [r for r in self.rows if r.has_regression or r.marker == "regression"]

    @cached_property
    def trace_pairs(self) -> dict[str, traces.TracePair]:
        """Both traces of each regressed case and their kernel (op) difference (perfgate.reports.traces), read once
        for every format; empty without a comparison or a run folder."""
        if self.comparison is None or self.run_dir is None:
            return {}
        bases = traces.base_runs(Path(self.run_dir), self.comparison)
        return {r.key: traces.trace_pair(r.case, bases, Path(self.run_dir)) for r in self.regression_rows}

    @cached_property
    def memory_growth(self) -> dict[str, allocations.MemoryGrowth]:
        """Why memory grew, per case with a memory regression: its allocation sites, base against head
        (perfgate.reports.allocations), and the snapshot files where the base and head kept some."""
        if self.comparison is None:
            return {}
        bases = traces.base_runs(Path(self.run_dir), self.comparison) if self.run_dir is not None else []
        base_dirs = {}
        for r in self.rows:
            folder = next((b.folder for b in bases if b.folder is not None and b.run is not None
                           and b.run.case(r.key) is not None), None)
            if folder is not None:
                base_dirs[r.key] = folder
        return allocations.growth_by_case(self.rows, self.comparison, self.run_dir, base_dirs)

    def file_link(self, path: Path | None) -> tuple[str | None, str]:
        """(href, text) of a file the report points to (a memory snapshot): as ``trace_link``."""
        folder = self.report_dir or self.run_dir
        return traces.link(path, Path(folder) if folder else None)

    def trace_link(self, side: traces.TraceSide) -> tuple[str | None, str]:
        """(href, text) of one side's trace: a link relative to the report's folder where the file lies
        inside it, else its path as text and no link."""
        return traces.link(side.path, Path(self.report_dir or self.run_dir) if (self.report_dir or self.run_dir)  # type: ignore[arg-type]  # one of them is set: the condition
                           else None)

    @cached_property
    def groups(self) -> list[Group]:
        by: dict[tuple[str, str, str], list[CaseRow]] = {}
        for r in self.rows:
            by.setdefault((r.spec.workload, r.spec.size, r.spec.device), []).append(r)
        return [Group(w, s, d, rows) for (w, s, d), rows in by.items()]

    @cached_property
    def overview(self) -> Overview:
        return build_overview(self)

    @property
    def status_counts(self) -> dict[str, int]:
        return self.run.counts()

    @cached_property
    def expectations(self) -> expect.Evaluation:
        """The run's expectation rules evaluated on its cases (perfgate.judging.expect)."""
        return expect.evaluate(self.run)

    @property
    def verdict(self) -> Banner:
        return banner(self)

    @property
    def evidence(self) -> Evidence | None:
        """How many of the run's cases carried evidence in the comparison (None without one)."""
        return evidence(self.run, self.comparison) if self.comparison else None

    def verdicts_of(self, *kinds: str) -> list[tuple[CaseRow, Verdict]]:
        out = []
        for r in self.rows:
            for v in r.verdicts:
                if v.kind in kinds:
                    out.append((r, v))
        return out

    @property
    def missing_verdicts(self) -> list[Verdict]:
        """Verdicts for cases the baseline has and this run does not (no row to hang them on)."""
        if not self.comparison:
            return []
        keys = {c.key for c in self.run.cases}
        return [v for v in self.comparison.verdicts if v.case_key not in keys]


@dataclass
class Banner:
    """The verdict line at the top of every format."""

    state: str  # pass | fail | no-baseline | no-evidence
    headline: str
    counts: dict[str, int]


def banner(report: ReportInput) -> Banner:
    comp = report.comparison
    st = report.status_counts
    gap = planned_gap(report.run)
    unchanged = sum(1 for c in report.run.cases if c.skipped_as_unchanged)
    skipped = f"{st['skipped']} skipped" + (f" ({unchanged} unchanged by this pull request)" if unchanged else "")
    runs = f"{st['ok']} ok, {skipped}, {st['failed']} failed" + (f"; {gap}" if gap else "")
    ev = report.expectations
    change = environment_change(comp, 4)
    exp = (f"; {ev.headline}" if ev.rules else "") + (f"; the change under test is {change}" if change else "")
    if comp is None:
        if ev.gate_failed:
            return Banner("fail", f"FAIL: {len(ev.failing)} expectation(s) missed ({runs}); no baseline compared"
                                  f"{exp}", {})
        # not "no baseline": a plain `perfgate run` compares with none even where one is stored
        return Banner("no-baseline", f"NOT COMPARED: {len(report.run.cases)} case(s) measured "
                                     f"({runs}){exp}", {})
    c = comp.counts()
    parts = f"{c['regression']} regression(s), {c['newly-failing']} newly failing, {c['win']} win(s), " \
            f"{c['inconclusive']} inconclusive" + (f", {c['acknowledged']} acknowledged" if c["acknowledged"] else "")
    if comp.gate_failed or ev.gate_failed:
        return Banner("fail", f"FAIL: {parts} ({runs}){exp}", c)
    found = report.evidence
    if found is not None and found.cases == 0 and found.unchanged:
        return Banner("pass", f"PASS: nothing to measure: every one of the {plural(found.unchanged, 'case')} is "
                              f"skipped: unchanged by this pull request{exp}", c)
    if found is not None and found.none_compared:  # `--gate` exits 3: nothing it could pass on
        return Banner("no-evidence", f"NO EVIDENCE: {found.none_compared}; the gate cannot "
                                     f"pass{f'; {gap}' if gap else ''}{exp}", c)
    return Banner("pass", f"PASS: {parts} ({runs}){exp}", c)
