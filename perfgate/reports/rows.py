"""The rows every format shows: CaseRow (one case with its summary, speedup, verdicts, memory,
recommendation, op diff and bound, every cell already a text) and Group (the cases of one workload,
size and device). No torch here."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from perfgate.judging import roofline
from perfgate.judging.compare import throttled
from perfgate.model.comparison import Verdict
from perfgate.model.results import STATUS_OK, CaseResult, ProcessSamples
from perfgate.reports.display import VERDICT_SEVERITY, element_id, first_line, format_verdict_change
from perfgate.reports.opdiff import OpChange
from perfgate.reports.recommend import Recommendation
from perfgate.util.formatting import failure_note, format_bytes, format_count, format_rate, format_ratio, plural
from perfgate.util.stats import NO_INTERVAL, Ratio, SampleSummary, format_seconds
from perfgate.util.vocabulary import PEAK_METRICS

MEMORY_METRICS = PEAK_METRICS


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
