"""The words results are written in: what became of a case (its status, the class of a failure) and every
metric a case can carry, with how the gate judges it and which way is better. No torch, and no other perfgate
module: the data model (perfgate.model.results) and the expectation rules (perfgate.model.rules) both build on it.
"""

from __future__ import annotations

from dataclasses import dataclass

STATUS_OK = "ok"
STATUS_SKIPPED = "skipped"
STATUS_FAILED = "failed"
STATUSES = (STATUS_OK, STATUS_SKIPPED, STATUS_FAILED)

# a skipped case's metadata["skipped_as"] when `run --changed-since` left it out: nothing it depends on changed
SKIPPED_UNCHANGED = "unchanged"

FAILURE_CLASSES = ("oom", "compile-error", "unsupported", "timeout", "crash", "error")


@dataclass(frozen=True)
class Metric:
    """How the gate judges one metric (``kind``) and which way is better (``higher_is_better``)."""

    kind: str  # deterministic | memory | time | info
    higher_is_better: bool = False  # False: more is worse (times, bytes, counts, drift)


_HIGHER = True  # more is better: a rate, a count of hits, a criterion met (1) rather than not (0)

# Every metric a case can carry in CaseResult.metrics, how the gate judges it, and which way is better.
# The one table of both: the gate (compare.judge_metric), history (history/detect.py) and the reports
# read it through METRIC_KINDS and higher_is_better. Kinds:
#   deterministic  exact (or a small configured tolerance): gates reliably even on a noisy CPU runner
#   memory         relative tolerance with an absolute floor
#   time           statistical (the step time itself is judged from the raw samples, not from here)
#   info           reported, never gated
METRICS: dict[str, Metric] = {
    "aten_ops_per_step": Metric("deterministic"),
    "kernels_per_step": Metric("deterministic"),
    "memcpy_per_step": Metric("deterministic"),
    "memset_per_step": Metric("deterministic"),
    "syncs_per_step": Metric("deterministic"),
    "flops_per_step": Metric("deterministic"),
    "graph_breaks": Metric("deterministic"),
    "unique_graphs": Metric("deterministic"),
    "recompiles": Metric("deterministic"),
    "peak_cuda_allocated_bytes": Metric("memory"),
    "peak_cuda_reserved_bytes": Metric("memory"),
    "peak_rss_bytes": Metric("memory"),
    "cpu_bytes_allocated_per_step": Metric("memory"),
    # minor page faults per timed step (perfgate.worker.main): memory the steps map in anew, which the steady
    # allocator can hide from the step time; a count that moves with the kernel (huge pages): not gated
    "page_faults_per_step": Metric("info"),
    "compile_cold_s": Metric("time"),
    "compile_warm_s": Metric("time"),
    "achieved_flops_per_s": Metric("info", _HIGHER),
    # simulator_construction: the first compile, then setup per construction after it (exit criterion)
    "first_compile_s": Metric("time"),
    "setup_per_construction_s": Metric("time"),
    "construction_cache_hits": Metric("deterministic", _HIGHER),
    "construction_recompiles": Metric("deterministic"),
    "setup_exit_criterion_met": Metric("info", _HIGHER),
    # roofline (perfgate.judging.roofline): traffic and placement of a step; informative, never gated
    "bytes_per_step": Metric("info"),
    "arithmetic_intensity": Metric("info", _HIGHER),  # more FLOPs per byte moved: the compute side of the roofline
    "achieved_bytes_per_s": Metric("info", _HIGHER),
    "kernel_concentration_80": Metric("info"),
    "device_idle_fraction": Metric("info"),
    "mean_op_s": Metric("info"),
}
METRIC_KINDS: dict[str, str] = {name: m.kind for name, m in METRICS.items()}

# The peak memory a person compares, first found first: CUDA allocated on a GPU, the process's resident set
# on CPU. Each worker process records both it measured (results.json's processes); `memory_vs_eager` is the
# ratio of a case's to eager's (perfgate.model.results.RunResult.memory_vs_eager)
PEAK_METRICS = ("peak_cuda_allocated_bytes", "peak_rss_bytes")

# Figures derived from a case's samples rather than carried in CaseResult.metrics (results.json's "derived",
# the history's series); the gate judges step_time by its own rule (perfgate.judging.compare).
DERIVED_METRICS: dict[str, Metric] = {
    "step_time": Metric("time"),
    "throughput_steps_per_s": Metric("time", _HIGHER),
    "first_call_s": Metric("time"),
}


def higher_is_better(metric: str) -> bool:
    """Whether more of ``metric`` is better (a METRICS or DERIVED_METRICS name); any other metric (the
    accuracy drift figures among them) is worse the more there is."""
    m = METRICS.get(metric) or DERIVED_METRICS.get(metric)
    return m is not None and m.higher_is_better
