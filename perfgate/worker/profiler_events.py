"""What torch.profiler's events of the profile window say: ops, kernels, copies and syncs per step, the
top ops by self time, the host's bytes allocated per step from the exported trace, and the op timing
the roofline's overhead class reads (device idle share, mean op time, kernel concentration). Torch is
imported inside the functions."""

from __future__ import annotations

import json
import statistics
from collections import Counter
from pathlib import Path
from typing import Any

TOP_N = 15

# CUDA runtime calls that block the host until the device catches up
SYNC_CALLS = frozenset({
    "cudaDeviceSynchronize", "cudaStreamSynchronize", "cudaEventSynchronize", "cudaStreamWaitEvent",
    "cudaMemcpy", "cudaMemset",
})


def _self_device_us(evt: Any) -> float:
    for name in ("self_device_time_total", "self_cuda_time_total"):
        value = getattr(evt, name, None)
        if value is not None:
            try:
                return float(value)
            except (TypeError, RuntimeError):
                continue
    return 0.0


def _is_device_event(evt: Any) -> bool:
    from torch.autograd import DeviceType

    return getattr(evt, "device_type", DeviceType.CPU) != DeviceType.CPU


def is_cpp_kernel(name: str) -> bool:
    """An inductor C++ kernel, as named by its RECORD_FUNCTION (``graph_0_cpp_fused_add_mul_0``)."""
    return "cpp_fused" in name


def _event_kind(evt: Any) -> str | None:
    """kernel | memcpy | memset | op | None (annotations, runtime calls and the step markers)."""
    name = evt.key if hasattr(evt, "key") else evt.name
    if _is_device_event(evt):
        if name.startswith("Memcpy"):
            return "memcpy"
        if name.startswith("Memset"):
            return "memset"
        if name.startswith("ProfilerStep") or getattr(evt, "is_user_annotation", False):
            return None
        return "kernel"
    if is_cpp_kernel(name):
        return "kernel"
    if name.startswith("aten::"):
        return "op"
    return None


def window_counts(events: list[Any], device: str) -> tuple[dict[str, float], int]:
    """Per-step counts over the recorded steps: (metrics, number of recorded steps)."""
    # the profiler renames "ProfilerStep#N" to "ProfilerStep*" in its events
    steps = sum(1 for e in events if e.name.startswith("ProfilerStep") and not _is_device_event(e))
    steps = max(steps, 1)
    kinds: Counter[str] = Counter()
    syncs = 0
    for e in events:
        kind = _event_kind(e)
        if kind:
            kinds[kind] += 1
        elif not _is_device_event(e) and e.name in SYNC_CALLS:
            syncs += 1
    metrics = {"aten_ops_per_step": kinds["op"] / steps}
    if device.startswith("cuda"):
        metrics["kernels_per_step"] = kinds["kernel"] / steps
        metrics["memcpy_per_step"] = kinds["memcpy"] / steps
        metrics["memset_per_step"] = kinds["memset"] / steps
        metrics["syncs_per_step"] = syncs / steps
    elif kinds["kernel"]:  # CPU: the compiled C++ kernels inductor made visible, when there are any
        metrics["kernels_per_step"] = kinds["kernel"] / steps
    return metrics, steps


def top_ops(averages: list[Any], steps: int, n: int = TOP_N) -> list[dict[str, Any]]:
    """The ``n`` ops or kernels with the most self time per step (kernels: device time; ops: CPU time)."""
    rows = []
    for avg in averages:
        kind = _event_kind(avg)
        if kind is None:
            continue
        device_side = kind != "op" and _is_device_event(avg)
        self_us = _self_device_us(avg) if device_side else float(getattr(avg, "self_cpu_time_total", 0.0))
        rows.append({
            "name": avg.key,
            "kind": "op" if kind == "op" else "kernel",
            "count_per_step": avg.count / steps,
            "self_time_us_per_step": self_us / steps,
        })
    rows.sort(key=lambda r: (-r["self_time_us_per_step"], r["name"]))
    return rows[:n]


def cpu_bytes_allocated_per_step(trace_file: Path, steps: int) -> float | None:
    """Bytes the host allocator handed out per recorded step: the positive ``[memory]`` events of the
    exported trace (profile_memory=True) on the CPU device."""
    try:
        data = json.loads(trace_file.read_text())
    except (OSError, json.JSONDecodeError):
        return None
    total = 0
    for ev in data.get("traceEvents", []):
        if ev.get("name") != "[memory]":
            continue
        args = ev.get("args", {})
        if args.get("Device Type", 0) == 0 and args.get("Bytes", 0) > 0:
            total += args["Bytes"]
    return total / max(steps, 1)


def _ancestors_are_ops(evt: Any) -> bool:
    parent = getattr(evt, "cpu_parent", None)
    while parent is not None:
        if _event_kind(parent) in ("op", "kernel"):
            return True
        parent = getattr(parent, "cpu_parent", None)
    return False


def _concentration(times: dict[str, float], share: float = 0.8) -> float | None:
    """The fewest names whose time adds up to ``share`` of the total."""
    total = sum(times.values())
    if total <= 0:
        return None
    acc, n = 0.0, 0
    for t in sorted(times.values(), reverse=True):
        acc += t
        n += 1
        if acc >= share * total - 1e-12:
            break
    return float(n)


def _step_of(evt: Any) -> Any:
    """The ProfilerStep event an op ran in, or None."""
    parent = getattr(evt, "cpu_parent", None)
    while parent is not None:
        if parent.name.startswith("ProfilerStep"):
            return parent
        parent = getattr(parent, "cpu_parent", None)
    return None


def op_timing(events: list[Any], device: str, steps: int) -> dict[str, float]:
    """The overhead evidence of the profile window: device_idle_fraction (share of a step's wall time
    the device does no op or kernel work), mean_op_s (busy time per innermost op or kernel),
    kernel_concentration_80 (fewest kernels, ops on CPU, by name, covering 80% of the busy time).

    CUDA: kernels' device time against the profiler steps' wall time, over the window. CPU: the CPU is
    the device; its busy time is the time inside top-level aten ops and compiled kernels, the rest of the
    step is Python and dispatch between them. On CPU each figure is the median over the recorded steps:
    a scheduler preemption inside one op of one step (a shared machine) then moves none of them."""
    out: dict[str, float] = {}
    if device.startswith("cuda"):
        step_us = sum(e.time_range.elapsed_us() for e in events
                      if e.name.startswith("ProfilerStep") and not _is_device_event(e))
        kernels = [e for e in events if _is_device_event(e) and _event_kind(e) == "kernel"]
        busy_us = sum(_self_device_us(e) for e in kernels)
        by_name: Counter[str] = Counter()
        for e in kernels:
            by_name[e.name] += _self_device_us(e)  # type: ignore[assignment]  # a Counter of float microseconds
        if step_us > 0:
            out["device_idle_fraction"] = max(0.0, 1.0 - busy_us / step_us)
        if kernels:
            out["mean_op_s"] = busy_us / len(kernels) * 1e-6
        conc = _concentration(dict(by_name))
        if conc is not None:
            out["kernel_concentration_80"] = conc
        return out
    per_step: dict[int, dict[str, Any]] = {}
    for e in events:
        if _is_device_event(e) or _event_kind(e) not in ("op", "kernel"):
            continue
        step = _step_of(e)
        if step is None:
            continue
        acc = per_step.setdefault(id(step), {"wall": step.time_range.elapsed_us(), "busy": 0.0, "inner": 0,
                                             "names": Counter()})
        if not _ancestors_are_ops(e):
            acc["busy"] += e.time_range.elapsed_us()
        if not any(_event_kind(c) in ("op", "kernel") for c in getattr(e, "cpu_children", [])):
            acc["inner"] += 1
        acc["names"][e.name] += float(getattr(e, "self_cpu_time_total", 0.0))
    idle = [max(0.0, 1.0 - a["busy"] / a["wall"]) for a in per_step.values() if a["wall"] > 0]
    mean_op = [a["busy"] / a["inner"] * 1e-6 for a in per_step.values() if a["inner"]]
    concentrations = [c for c in (_concentration(dict(a["names"])) for a in per_step.values()) if c is not None]
    if idle:
        out["device_idle_fraction"] = statistics.median(idle)
    if mean_op:
        out["mean_op_s"] = statistics.median(mean_op)
    if concentrations:
        out["kernel_concentration_80"] = float(statistics.median(concentrations))
    return out
