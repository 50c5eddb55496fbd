"""The one exporter interface and the table logic every format shares. No torch here.

An exporter turns a ReportInput (a run's results and, when there is one, its Comparison against a
baseline) into the bytes of one file. The rows, recommendations and op diffs are computed once here;
each format (html, markdown, junit, csv, json) only adds its own syntax.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections import defaultdict
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, Protocol

from perfgate.judging import expect, roofline
from perfgate.judging.compare import throttled
from perfgate.model.comparison import Comparison, Evidence, Verdict, evidence
from perfgate.model.environment_keys import change_under_test
from perfgate.model.results import STATUS_OK, CaseResult, ProcessSamples, RunResult
from perfgate.reports import allocations, traces
from perfgate.util.formatting import failure_note, format_bytes, format_count, format_rate, format_ratio, plural
from perfgate.util.stats import NO_INTERVAL, Ratio, SampleSummary, format_seconds, judged_step_time, speedup_of
from perfgate.util.vocabulary import PEAK_METRICS

# The relative change that counts as "pays off" / "hurts" for the recommendation when neither the
# comparison nor [tool.perfgate.gate] gives one.
DEFAULT_THRESHOLD = 0.05

# How serious a verdict kind is for the row's marker: the worst verdict of a case decides its colour.
VERDICT_SEVERITY = {
    "newly-failing": 0, "regression": 1, "acknowledged": 2, "inconclusive": 3, "missing": 4, "win": 5, "fixed": 6,
    "new": 7, "unchanged": 8, "skipped": 9,
}

# How a verdict kind shows in the reports: the tone of its colour (bad, good, warn, info, neutral) and the word
# printed with it, so no colour is ever the only signal. The case statuses are here too: they stand in for
# a verdict where nothing was compared. A new verdict kind is one line; a kind missing from the table
# still shows, as its own name in neutral grey.
VERDICT_DISPLAY: dict[str, tuple[str, str]] = {
    "newly-failing": ("bad", "newly-failing"),
    "regression": ("bad", "regression"),
    "acknowledged": ("info", "acknowledged"),
    "inconclusive": ("warn", "inconclusive"),
    "missing": ("warn", "missing"),
    "win": ("good", "win"),
    "fixed": ("good", "fixed"),
    "new": ("neutral", "new"),
    "unchanged": ("neutral", "unchanged"),
    "skipped": ("warn", "skipped"),
    "failed": ("bad", "failed"),
    "ok": ("neutral", "ok"),
}

MEMORY_METRICS = PEAK_METRICS


@dataclass(frozen=True)
class VerdictLook:
    """A verdict kind (or case status) as shown: ``tone`` names the colour class, ``word`` the text."""

    kind: str
    tone: str
    word: str


def verdict_display(kind: str) -> VerdictLook:
    """The tone and word of a verdict kind or case status (VERDICT_DISPLAY; neutral and its own name if new)."""
    tone, word = VERDICT_DISPLAY.get(kind, ("neutral", kind))
    return VerdictLook(kind, tone, word)


def element_id(prefix: str, text: str) -> str:
    """An HTML id for ``text`` (a case key, a workload from a results file: untrusted) that is valid and
    safe anywhere, in a URL fragment or a CSS selector: ASCII letters, digits and '-' only, a readable
    slug of the text then 8 hex digits of its SHA-1, so that 'a.b' and 'a-b' still get different ids."""
    slug = re.sub(r"[^A-Za-z0-9]+", "-", text).strip("-")[:48].strip("-")
    digest = hashlib.sha1(text.encode("utf-8", "surrogatepass")).hexdigest()[:8]
    return f"{prefix}-{slug}-{digest}" if slug else f"{prefix}-{digest}"


class Exporter(Protocol):
    """One output format: a name for --format, the file it writes, and the rendering itself."""

    name: str
    filename: str

    def render(self, report: ReportInput) -> bytes: ...


# ---------------------------------------------------------------- formatting shared by every format
# format_bytes, format_count, format_rate, format_ratio, format_value: perfgate.util.formatting (history's
# pages print with them too).


def format_verdict_change(v: Verdict | None) -> str:
    """'1.120x [1.050, 1.200] regression' for the step-time verdict of a case."""
    if v is None:
        return "-"
    return f"{format_ratio(v.ratio, v.ratio_low, v.ratio_high)} {v.kind}".strip() if v.ratio else v.kind


def tolerance_text(tolerance: Any) -> str:
    """A workload's tolerance as a reader writes it: ``rel_l2 <= 0.05``, ``rel_l2 <= 0.05, max_abs <= 0.1``;
    a bare number is a relative L2 bound; "" when there is none."""
    if isinstance(tolerance, (int, float)) and not isinstance(tolerance, bool):
        return f"rel_l2 <= {tolerance:g}"
    if not isinstance(tolerance, dict):
        return ""
    return ", ".join(f"{key} <= {value:g}" for key, value in tolerance.items()
                     if isinstance(value, (int, float)) and not isinstance(value, bool))


def first_line(text: str | None, limit: int = 200) -> str:
    """The last non-empty line of an error message (where Python puts the exception), shortened."""
    lines = [ln.strip() for ln in (text or "").strip().splitlines() if ln.strip()]
    line = lines[-1] if lines else ""
    return line if len(line) <= limit else line[: limit - 3] + "..."


def _metric(case: CaseResult, name: str) -> float | None:
    v = case.metrics.get(name)
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return None
    return float(v)


def peak_memory(case: CaseResult) -> tuple[float | None, str]:
    """The peak memory a person compares: CUDA allocated on a GPU, process RSS on CPU."""
    for name in MEMORY_METRICS:
        v = _metric(case, name)
        if v is not None:
            return v, name
    return None, ""


# ---------------------------------------------------------------- the rows

@dataclass
class Recommendation:
    """The "what pays off here" decision for one toggle; the rule is in ``recommend``."""

    action: str  # adopt | neutral | avoid | cannot run | reference
    reason: str


@dataclass
class OpChange:
    """One op or kernel that differs between the baseline's profile and this run's."""

    name: str
    kind: str  # op | kernel
    change: str  # added | removed | count changed | self time changed
    count_before: float | None
    count_after: float | None
    self_us_before: float | None
    self_us_after: float | None

    @property
    def self_us_delta(self) -> float:
        return (self.self_us_after or 0.0) - (self.self_us_before or 0.0)


def _mhz(x: float | None) -> str:
    return f"{x:g}" if x is not None else "?"


def process_clocks_text(p: ProcessSamples) -> str:
    """One process's GPU clocks in words: 'SM 1980 -> 1410 MHz (max 1980), throttled: hw_thermal_slowdown';
    why none were read where NVML said so; '' for a process without readings (CPU, no nvidia-ml-py)."""
    c = p.gpu_clocks
    if not c:
        return ""
    parts = []
    before, after, top = c.get("sm_clock_mhz_before"), c.get("sm_clock_mhz_after"), c.get("max_sm_clock_mhz")
    if before is not None or after is not None:
        parts.append(f"SM {_mhz(before)} -> {_mhz(after)} MHz" + (f" (max {_mhz(top)})" if top is not None else ""))
    why = throttled(p)
    if why:
        parts.append(f"throttled: {why}")
    if not parts and c.get("error"):
        parts.append(f"no GPU clocks: {first_line(c['error'], 120)}")
    return ", ".join(parts)


@dataclass
class CaseRow:
    """Everything a table shows about one case, already computed; formats only add syntax."""

    case: CaseResult
    step_time: SampleSummary | None
    speedup: Ratio | None
    verdicts: list[Verdict]
    memory_bytes: float | None
    memory_change: float | None  # this case's peak memory / eager's (memory_ratio's value)
    recommendation: Recommendation
    op_diff: list[OpChange] = field(default_factory=list)
    baseline_case: CaseResult | None = None
    bound: roofline.Bound | None = None  # compute-, memory- or overhead-bound, with the evidence
    # memory_vs_eager: the peak memory against eager's with its interval over worker processes
    # (RunResult.memory_vs_eager), and which peak it compares
    memory_ratio: Ratio | None = None
    memory_metric: str = ""

    @property
    def key(self) -> str:
        return self.case.key

    @property
    def anchor(self) -> str:
        """The id of the case's row in its workload's toggle matrix (the overview links there)."""
        return element_id("case", self.key)

    @property
    def spec(self):  # noqa: ANN201 - CaseSpec, re-exported for templates
        return self.case.spec

    @property
    def step_verdict(self) -> Verdict | None:
        for v in self.verdicts:
            if v.metric == "step_time":
                return v
        return None

    @property
    def worst_verdict(self) -> Verdict | None:
        """The case's most serious verdict (VERDICT_SEVERITY: regression before win...), None without one."""
        return min(self.verdicts, key=lambda v: VERDICT_SEVERITY.get(v.kind, 99)) if self.verdicts else None

    @property
    def marker(self) -> str:
        """The worst verdict kind of the case (regression before win...), or its status without one."""
        kinds = [v.kind for v in self.verdicts]
        if kinds:
            return min(kinds, key=lambda k: VERDICT_SEVERITY.get(k, 99))
        return self.case.status if self.case.status != STATUS_OK else ""

    @property
    def is_time_regression(self) -> bool:
        return any(v.kind == "regression" and v.metric in ("step_time",) for v in self.verdicts)

    @property
    def has_regression(self) -> bool:
        return any(v.fails_gate for v in self.verdicts)

    # text cells, identical in every format
    @property
    def step_time_text(self) -> str:
        st = self.step_time
        if st is None:
            return "-"
        return f"{format_seconds(st.value)} {st.interval_text('±')}"

    @property
    def sampling_text(self) -> str:
        """How many worker processes the case took and why it stopped (perfgate.judging.sequential)."""
        from perfgate.judging.sequential import sampling_text

        return sampling_text(self.case)

    @property
    def gpu_clocks_text(self) -> str:
        """The SM clocks of the case's processes around their samples and how many throttled (the gate sets
        those aside, perfgate.judging.compare.throttled); '' where no process recorded clocks."""
        recorded = [p for p in self.case.processes if p.gpu_clocks]
        clocks = [c for p in recorded for c in (p.gpu_clocks.get("sm_clock_mhz_before"),  # type: ignore[union-attr]  # recorded: processes with clocks
                                                p.gpu_clocks.get("sm_clock_mhz_after")) if c is not None]  # type: ignore[union-attr]  # as above
        if not clocks:
            return process_clocks_text(recorded[0]) if recorded else ""
        tops = {p.gpu_clocks.get("max_sm_clock_mhz") for p in recorded} - {None}  # type: ignore[union-attr]  # as above
        text = f"SM clock {_mhz(min(clocks))}-{_mhz(max(clocks))} MHz" + (f" (max {_mhz(max(tops))})" if tops else "")  # type: ignore[type-var]  # None taken out of tops
        why = [w for w in (throttled(p) for p in recorded) if w]
        if why:
            reasons = ", ".join(sorted({r for w in why for r in w.split(", ")}))
            text += f"; {len(why)} of {len(self.case.processes)} process(es) throttled ({reasons})"
        return text

    @property
    def speedup_text(self) -> str:
        sp = self.speedup
        if sp and self.spec.toggles == ("eager",):
            return "1x (reference)"
        if sp and (sp.low is None or sp.high is None):
            return f"{format_ratio(sp.value)} ({NO_INTERVAL})"
        return format_ratio(sp.value, sp.low, sp.high) if sp else "-"

    @property
    def change_text(self) -> str:
        return format_verdict_change(self.step_verdict)

    @property
    def memory_text(self) -> str:
        return format_bytes(self.memory_bytes)

    @property
    def memory_vs_eager_text(self) -> str:
        """'0.62x [0.60, 0.64]', '1.31x (1 process: no interval)', '1x (reference)' for eager, '-'."""
        m = self.memory_ratio
        if m is None:
            return "-"
        if self.spec.toggles == ("eager",):
            return "1x (reference)"
        if m.low is None or m.high is None:
            return f"{format_ratio(m.value)} ({NO_INTERVAL})"
        return format_ratio(m.value, m.low, m.high)

    @property
    def kernels_text(self) -> str:
        k = _metric(self.case, "kernels_per_step")
        if k is not None:
            return plural(k, "kernel", shown=format_count(k))
        ops = _metric(self.case, "aten_ops_per_step")
        return plural(ops, "op", shown=format_count(ops)) if ops is not None else "-"

    @property
    def flops_text(self) -> str:
        return format_rate(_metric(self.case, "achieved_flops_per_s"))

    @property
    def compile_text(self) -> str:
        cold, warm = _metric(self.case, "compile_cold_s"), _metric(self.case, "compile_warm_s")
        if cold is None and warm is None:
            return "-"
        if warm is None:
            return format_seconds(cold)
        return f"{format_seconds(cold)} cold / {format_seconds(warm)} warm"

    @property
    def graph_breaks_text(self) -> str:
        return format_count(_metric(self.case, "graph_breaks"))

    @property
    def drift_text(self) -> str:
        acc = self.case.accuracy
        if not acc:
            return "-"
        verdict = acc.get("verdict", "")
        rel = acc.get("rel_l2")
        mx = acc.get("max_abs")
        parts = [f"{verdict} (amplified)" if acc.get("amplified") else verdict] if verdict else []
        if rel is not None:
            parts.append(f"rel_l2 {rel:.2g}")
        if mx is not None:
            parts.append(f"max {mx:.2g}")
        return " ".join(parts) or "-"

    @property
    def failure_note(self) -> str:
        """Why the case did not run (``[class] reason``), beside a status column that says skipped or failed."""
        return "" if self.case.status == STATUS_OK else failure_note(self.case.failure_class, self.case.message)

    @property
    def status_text(self) -> str:
        c = self.case
        if c.status == STATUS_OK:
            return "ok"
        cls = f" ({c.failure_class})" if c.failure_class else ""
        msg = first_line(c.message)
        return f"{c.status}{cls}: {msg}" if msg else f"{c.status}{cls}"

    @property
    def failure_text(self) -> str:
        """'(compile-error) RuntimeError: ...' for a case that did not run; empty for an ok case."""
        c = self.case
        if c.status == STATUS_OK:
            return ""
        cls = f"({c.failure_class}) " if c.failure_class else ""
        return f"{cls}{first_line(c.message)}".strip()

    @property
    def bound_text(self) -> str:
        return self.bound.bound if self.bound else "-"

    @property
    def headroom_text(self) -> str:
        return self.bound.headroom_text if self.bound else "-"

    @property
    def bound_evidence_text(self) -> str:
        """'idle 36%, 240 ops/step, mean op 2.1 us, 2.4 FLOP/B': what decided the bound class."""
        if not self.bound:
            return ""
        e = self.bound.evidence
        parts = []
        if e.get("device_idle_fraction") is not None:
            parts.append(f"idle {e['device_idle_fraction'] * 100:.0f}%")  # type: ignore[operator]  # checked not None above
        ops = e.get("kernels_per_step") if self.spec.device.startswith("cuda") else e.get("aten_ops_per_step")
        if ops is not None:
            parts.append(f"{format_count(ops)} {'kernels' if self.spec.device.startswith('cuda') else 'ops'}/step")
        if e.get("mean_op_s") is not None:
            parts.append(f"mean op {format_seconds(e['mean_op_s'])}")
        if e.get("arithmetic_intensity") is not None:
            parts.append(f"{e['arithmetic_intensity']:.3g} FLOP/B")
        elif self.bound.flops_note:
            parts.append(f"FLOPs not counted ({self.bound.flops_note})")
        return ", ".join(parts)

    @property
    def trace_dir(self) -> str | None:
        return self.case.profile.get("trace_dir")

    @property
    def trace_file(self) -> str | None:
        return self.case.profile.get("trace_file")


# Why a case has no speedup against eager to recommend by (``recommend``'s ``no_speedup``).
NO_EAGER = "no eager case in this run to compare with"
EAGER_DID_NOT_RUN = "eager did not run here (skipped or failed): nothing to compare with"
ZERO_STEP_TIME = "a step time of 0 (a timer that reads 0, here or in eager): no speedup can be judged"


def recommend(case: CaseResult, speedup: Ratio | None, memory_change: float | None, threshold: float,
              no_speedup: str = NO_EAGER) -> Recommendation:
    """The documented rule (docs/reports.md), judged against eager in the same run:

    - a skipped or failed case: cannot run, with its reason (eager too);
    - eager itself is the reference;
    - accuracy verdict "drift": avoid, whatever the speed;
    - speedup CI entirely above 1 + threshold: adopt;
    - speedup CI entirely below 1 - threshold: avoid (it is slower);
    - otherwise (CI within or straddling the band, or no speedup: ``no_speedup`` says why): neutral.
    Memory growth never decides but is named in the reason, since it is the usual price of a speedup.
    """
    if case.status != STATUS_OK:
        cls = f"{case.failure_class}: " if case.failure_class else ""
        return Recommendation("cannot run", f"{case.status}: {cls}{first_line(case.message, 160)}".rstrip(": "))
    if case.spec.toggles == ("eager",):
        return Recommendation("reference", "eager fp32: what every other toggle is measured against")
    mem = ""
    if memory_change is not None and abs(memory_change - 1) >= 0.05:
        mem = f"; peak memory {memory_change:.2f}x eager"
    if case.accuracy.get("verdict") == "drift":
        tol = tolerance_text(case.accuracy.get("tolerance"))
        why = case.accuracy.get("reason")
        return Recommendation("avoid", f"output drifts from the fp32 reference beyond tolerance"
                                       f"{f' ({tol})' if tol else ''}{f': {why}' if why else ''}{mem}")
    if case.accuracy.get("amplified"):  # named, since its rel_l2 alone looks like drift
        mem = f"{mem}; accuracy {case.accuracy.get('reason', 'amplified by the dynamics, not damaged')}"
    if speedup is None:
        return Recommendation("neutral", no_speedup + mem)
    band = f"{threshold * 100:.0f}%"
    if speedup.low is None or speedup.high is None:
        return Recommendation("neutral", f"{speedup.value:.2f}x ({NO_INTERVAL}): not judged{mem}")
    if speedup.low > 1 + threshold:
        return Recommendation("adopt", f"{speedup.value:.2f}x faster, CI [{speedup.low:.2f}, {speedup.high:.2f}] "
                                       f"clears +{band}{mem}")
    if speedup.high < 1 - threshold:
        return Recommendation("avoid", f"{speedup.value:.2f}x: slower than eager, CI [{speedup.low:.2f}, "
                                       f"{speedup.high:.2f}] below -{band}{mem}")
    return Recommendation("neutral", f"{speedup.value:.2f}x, CI [{speedup.low:.2f}, {speedup.high:.2f}] "
                                     f"not clearly beyond ±{band}{mem}")


def op_diff(before: CaseResult | None, after: CaseResult, limit: int = 25) -> list[OpChange]:
    """Ops and kernels that differ between two profiles (profile.top_ops), largest self-time change first."""
    if before is None:
        return []

    def index(case: CaseResult) -> dict[tuple[str, str], dict[str, Any]]:
        out = {}
        for op in case.profile.get("top_ops") or []:
            if isinstance(op, dict) and "name" in op:
                out[(str(op.get("kind", "op")), str(op["name"]))] = op
        return out

    old, new = index(before), index(after)
    changes = []
    for k in old.keys() | new.keys():
        a, b = old.get(k), new.get(k)
        ca, cb = (a or {}).get("count_per_step"), (b or {}).get("count_per_step")
        ta, tb = (a or {}).get("self_time_us_per_step"), (b or {}).get("self_time_us_per_step")
        if a is None:
            change = "added"
        elif b is None:
            change = "removed"
        elif ca is not None and cb is not None and abs(cb - ca) > 1e-9 * max(abs(ca), 1.0):
            change = "count changed"
        elif ta is not None and tb is not None and abs(tb - ta) > 0.05 * max(abs(ta), 1e-9):
            change = "self time changed"
        else:
            continue
        changes.append(OpChange(k[1], k[0], change, ca, cb, ta, tb))
    changes.sort(key=lambda c: (-abs(c.self_us_delta), c.kind, c.name))
    return changes[:limit]


@dataclass
class Group:
    """The cases of one workload, size and device: one toggle matrix and one "what pays off" table."""

    workload: str
    size: str
    device: str
    rows: list[CaseRow]

    @property
    def title(self) -> str:
        return f"{self.workload} [{self.size}, {self.device}]"

    @property
    def bound_advice(self) -> str | None:
        """What the eager case's bound class says will pay (roofline.ADVICE), for the recommendation."""
        eager = next((r for r in self.rows if r.spec.toggles == ("eager",)), None)
        if eager is None or eager.bound is None:
            return None
        return f"eager is {roofline.ADVICE[eager.bound.bound]} ({eager.bound.reason})"

    @property
    def anchor(self) -> str:
        return element_id("w", f"{self.workload}/{self.size}/{self.device}")


@dataclass
class OverviewCell:
    """One case in the overview: the verdict (or, with nothing compared, the status) and one number."""

    look: VerdictLook
    value: str  # "1.12x": the step time against the baseline's, or the speedup against eager; "-" for none
    interval: str  # "[1.05, 1.20]": the value's 95% CI; "" for none
    note: str  # the metric that decided the verdict where it is not the step time; "" otherwise
    href: str  # where the case's numbers are: its row in the toggle matrix, or the missing cases' list
    title: str  # the whole story in one tooltip


@dataclass
class OverviewRow:
    workload: str
    size: str
    device: str
    href: str  # the workload's section ("" where no case of it ran)
    cells: dict[str, OverviewCell] = field(default_factory=dict)


@dataclass
class Overview:
    """Workloads x toggles, every case of the run (and every baseline case missing from it) in one table."""

    compared: bool
    toggles: list[str]
    rows: list[OverviewRow]


def _ratio_parts(value: float | None, low: float | None, high: float | None) -> tuple[str, str]:
    if value is None:
        return "-", ""
    interval = f"[{low:.2f}, {high:.2f}]" if low is not None and high is not None else ""
    return f"{value:.2f}x", interval


def overview_cell(row: CaseRow, compared: bool) -> OverviewCell:
    """A case's overview cell. Compared: its worst verdict (regression before win...) and the step time
    this run / the baseline's with CI. Not compared: its status and its speedup against eager with CI."""
    c, href = row.case, f"#{row.anchor}"
    facts = [c.key]
    worst = row.worst_verdict if compared else None
    note = ""
    if worst is not None:
        look = verdict_display(worst.kind)
        step = row.step_verdict
        value, interval = _ratio_parts(step.ratio, step.ratio_low, step.ratio_high) if step else ("-", "")
        if worst.metric not in ("step_time", "status"):
            note = worst.metric
        judged = ", ".join(f"{v.metric} {v.kind}" for v in sorted(row.verdicts, key=lambda v: (
            VERDICT_SEVERITY.get(v.kind, 99), v.metric)))
        facts.append(f"{look.word} ({judged})")
        if step is not None:
            facts.append(f"step time vs baseline {format_ratio(step.ratio, step.ratio_low, step.ratio_high)}")
        facts.append(f"speedup vs eager {row.speedup_text}")
    else:
        look = verdict_display(c.status)
        if row.spec.toggles == ("eager",) and row.speedup is not None:
            value, interval = "1x", "reference"
        else:
            sp = row.speedup
            value, interval = _ratio_parts(sp.value, sp.low, sp.high) if sp else ("-", "")
        facts.append(f"speedup vs eager {row.speedup_text}")
    if value == "-" and c.status != STATUS_OK and look.word != c.status:
        value = c.status
    if c.status != STATUS_OK:
        facts.append(row.status_text)
    return OverviewCell(look, value, interval, note, href, "; ".join(facts))


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


def planned_gap(run: RunResult) -> str:
    """'no result for 4 planned cases (shard(s) 3/3 not merged)': what a merge of shards lacks of its plan
    (``settings.shard.missing_cases``, perfgate.gating.merge); '' for any other run. The gate judges only the cases
    that came, so every banner says which did not."""
    shard = run.settings.get("shard") if isinstance(run.settings, dict) else None
    if not isinstance(shard, dict) or shard.get("index") is not None:
        return ""
    missing, merged, count = shard.get("missing_cases"), shard.get("merged"), shard.get("count")
    if not isinstance(missing, list) or not missing:
        return ""
    absent = [i for i in range(1, count + 1) if i not in merged] \
        if isinstance(count, int) and isinstance(merged, list) else []
    which = (f"shard(s) {', '.join(f'{i}/{count}' for i in absent[:10])}{' ...' if len(absent) > 10 else ''} "
             "not merged" if absent else "their shard did not finish them")
    return f"no result for {plural(len(missing), 'planned case')} ({which})"


def change_selection(run: RunResult) -> str:
    """What `run --changed-since REF` chose, in one line ('every case runs: pyproject.toml changed ...', or
    '12 case(s) skipped: unchanged by this pull request since origin/main; runs workload(s) a: ...'), from
    ``settings.changed_since`` (results.json is untrusted: anything else of that shape is left out); '' when
    the run chose by no change."""
    chosen = run.settings.get("changed_since") if isinstance(run.settings, dict) else None
    if not isinstance(chosen, dict) or not isinstance(chosen.get("since"), str):
        return ""
    reasons = [str(r) for r in chosen.get("reasons") or [] if isinstance(r, str)] \
        if isinstance(chosen.get("reasons"), list) else []
    since = chosen["since"][:100]
    workloads = chosen.get("workloads")
    if not isinstance(workloads, list):
        return f"Changed since {since}: every case runs ({'; '.join(reasons)[:600]})"
    unchanged = sum(1 for c in run.cases if c.skipped_as_unchanged)
    names = ", ".join(str(w) for w in workloads[:20]) or "none"
    return (f"Changed since {since}: {plural(unchanged, 'case')} skipped: unchanged by this pull request; "
            f"runs the cases of workload(s) {names} ({'; '.join(reasons)[:600] or 'no workload file changed'})")


def environment_change(comparison: Comparison | None, limit: int = 8) -> str:
    """The change under test where the two sides ran in different environments (environment_keys.change_under_test)."""
    return change_under_test(comparison.mode, comparison.environment_diff, limit) if comparison is not None else ""


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
