"""What torch.compile did in this worker process: dynamo's graph breaks, unique graphs and recompiles
since ``reset_compile_counters``, and the compile time the first call paid. Torch is imported inside the
functions."""

from __future__ import annotations

import statistics
from typing import Any


def reset_compile_counters() -> None:
    """Fresh dynamo state and counters, so what is read after the timed samples belongs to this case."""
    import torch._dynamo

    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    clear = getattr(torch._dynamo.utils, "clear_compilation_metrics", None)
    if clear is not None:
        clear()


def compile_counters() -> tuple[dict[str, float], list[str], dict[str, Any]]:
    """(metrics, graph-break reasons, detail) from dynamo's own counters since reset_compile_counters.

    graph_breaks: every break dynamo recorded (``counters["graph_break"]``, reason -> count).
    unique_graphs: FX graphs dynamo handed to the backend (``counters["stats"]["unique_graphs"]``).
    recompiles: compiled frames whose compile dynamo attributed a recompile reason to (its compilation
    metrics), i.e. compiles of a frame that already had a cache entry.
    """
    from torch._dynamo.utils import counters

    breaks: Any = counters.get("graph_break", {})
    reasons = sorted(breaks, key=lambda r: (-breaks[r], r))
    stats: Any = counters.get("stats", {})
    metrics: dict[str, float] = {
        "graph_breaks": float(sum(breaks.values())),
        "unique_graphs": float(stats.get("unique_graphs", 0)),
    }
    frames: Any = counters.get("frames", {})
    detail: dict[str, Any] = {"frames_compiled": int(frames.get("ok", 0))}
    records = _compilation_metrics()
    if records is not None:
        recompiles = _recompiles(records)
        if recompiles is not None:
            metrics["recompiles"] = float(len(recompiles))
            detail["recompile_reasons"] = [str(getattr(r, "recompile_reason", None) or f"{r.co_name}: cache entry "
                                               f"{getattr(r, 'cache_size', '?')}") for r in recompiles][:20]
        frame_s = [getattr(r, "entire_frame_compile_time_s", None) for r in records]
        if any(t is not None for t in frame_s):
            detail["dynamo_compile_s"] = float(sum(t for t in frame_s if t is not None))
    return metrics, [f"{r} (x{breaks[r]})" if breaks[r] > 1 else str(r) for r in reasons], detail


def _recompiles(records: list[Any]) -> list[Any] | None:
    """Records of compiles that were recompiles: dynamo's ``recompile_reason`` where its metrics carry
    one (recent torch), else a frame compiled while it already had cache entries (``cache_size > 0``,
    torch 2.4-era metrics). None when neither field exists, so the metric is omitted rather than 0."""
    import dataclasses

    import torch._dynamo.utils as dynamo_utils

    cls = getattr(dynamo_utils, "CompilationMetrics", None)
    fields = {f.name for f in dataclasses.fields(cls)} if cls and dataclasses.is_dataclass(cls) else set()
    if "recompile_reason" in fields:
        return [r for r in records if getattr(r, "recompile_reason", None)]
    if "cache_size" in fields:
        return [r for r in records if (getattr(r, "cache_size", 0) or 0) > 0]
    return None


def _compilation_metrics() -> list[Any] | None:
    import torch._dynamo.utils as dynamo_utils

    getter = getattr(dynamo_utils, "get_compilation_metrics", None)
    if getter is None:
        return None
    try:
        return list(getter())
    except Exception:
        return None


def compile_time(first_call_s: float, samples_ns: list[int], loops: int) -> dict[str, float]:
    """Compile time as the user waits for it: the first call minus one steady-state unit (median sample).

    Version-independent and includes everything the first call pays (tracing, inductor, the C++ or
    Triton build, cache lookups); with a fresh inductor cache it is the cold compile, with a warm one
    the warm compile."""
    unit_s = statistics.median(samples_ns) / max(loops, 1) * 1e-9 if samples_ns else 0.0
    return {"first_call_s": first_call_s, "unit_s": unit_s, "compile_s": max(0.0, first_call_s - unit_s)}
