"""The profile pass: what process 0 of a case measures after its timed samples, never during them.

``profile_pass`` fills the worker's result with
  metrics   aten_ops_per_step, kernels_per_step, memcpy/memset/syncs_per_step (CUDA), flops_per_step,
            achieved_flops_per_s, peak_cuda_allocated/reserved_bytes, peak_rss_bytes,
            cpu_bytes_allocated_per_step, graph_breaks, unique_graphs, recompiles (compile toggles),
            and for the roofline (perfgate.judging.roofline): bytes_per_step, arithmetic_intensity,
            achieved_bytes_per_s, device_idle_fraction, mean_op_s, kernel_concentration_80
  profile   top_ops, graph_break_reasons, trace_dir, trace_file (relative to the run folder), window,
            memory_sites (perfgate.worker.allocations: where one more step allocates), memory_snapshot (CUDA)
  accuracy  max_abs, mean_abs, rel_l2, tolerance (against an eager fp32 reference); horizons (the toggle's
            and fp32 eager's error against float64 at steps 1, 2, 4, ... and the end); verdict ok|drift
            and its reason (drift.judge_drift)
A section that fails (say, an op FlopCounterMode cannot dispatch) leaves its figures out and says why
under ``profile["errors"]``; the timed samples stand.

The pieces live beside it: dynamo's counters and the compile time (compile_stats.py), a process's peak
memory (peak_memory.py), the drift check (drift.py), what the profiler's events say (profiler_events.py),
the roofline's FLOPs and bytes (roofline_counts.py).

How each number is obtained is documented in docs/profiling.md. Works from torch 2.4 on: attributes that
moved between releases are read through getattr with fallbacks (device_time before cuda_time).
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

from perfgate.worker.compile_stats import compile_counters
from perfgate.worker.drift import reference_check
from perfgate.worker.peak_memory import PEAK_KEYS, process_peaks
from perfgate.worker.profiler_events import cpu_bytes_allocated_per_step, op_timing, top_ops, window_counts
from perfgate.worker.roofline_counts import bytes_per_step, flops_per_step, roofline_metrics

# The profile window: steps skipped, steps profiled but discarded (profiler warm-up), steps recorded.
# Bounded whatever the workload's T: the window is single steps, not units.
WAIT_STEPS = 1
WARMUP_STEPS = 1
ACTIVE_STEPS = 3


def trace_dir_for(run_dir: Path, spec: Any) -> Path:
    """``<run dir>/tb/<workload>/<size>/<toggles>/``: one trace per folder, a run per case in TensorBoard."""
    from perfgate.util.paths import case_tb_dir

    return case_tb_dir(run_dir / "tb", spec.workload, spec.size, spec.toggle_name)


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        import torch

        try:
            torch.cuda.synchronize()
        except RuntimeError:
            pass


def profile_window(cfg: dict[str, Any], spec: Any, workload: Any, prepared: Any, run_dir: Path
                   ) -> tuple[dict[str, float], dict[str, Any]]:
    """torch.profiler over wait+warmup+active single steps (one unit per profiler step for CUDA graphs),
    trace exported for TensorBoard. Returns (metrics, profile detail)."""
    from torch.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler

    device = spec.device
    activities = [ProfilerActivity.CPU]
    if device.startswith("cuda"):
        activities.append(ProfilerActivity.CUDA)
    trace_dir = trace_dir_for(run_dir, spec)
    trace_dir.mkdir(parents=True, exist_ok=True)
    for old in trace_dir.glob("*.pt.trace.json*"):  # one trace per folder, even when a case is re-run
        old.unlink()
    worker_name = f"{spec.workload}.{spec.size}.{spec.toggle_name}.{spec.device}"
    # a captured CUDA graph replays whole units; anything else profiles single steps of the same contexts
    per_call_steps = workload.steps_per_unit(spec.param_dict) if prepared.captured else 1
    state = prepared.built.state
    total = WAIT_STEPS + WARMUP_STEPS + ACTIVE_STEPS
    with profile(
        activities=activities,
        schedule=schedule(wait=WAIT_STEPS, warmup=WARMUP_STEPS, active=ACTIVE_STEPS, repeat=1),
        on_trace_ready=tensorboard_trace_handler(str(trace_dir), worker_name=worker_name),
        profile_memory=True,
        record_shapes=False,
    ) as prof:
        for _ in range(total):
            if prepared.captured:
                prepared.unit()
            else:
                state = prepared.step(state)
            _sync(device)
            prof.step()
    events = list(prof.events())
    metrics, steps = window_counts(events, device)
    if per_call_steps > 1:
        metrics = {k: v / per_call_steps for k, v in metrics.items()}
    metrics.update(op_timing(events, device, steps))
    profile_detail: dict[str, Any] = {
        "top_ops": top_ops(list(prof.key_averages()), steps * per_call_steps),
        "window": {"wait": WAIT_STEPS, "warmup": WARMUP_STEPS, "active": steps,
                   "steps_per_profiler_step": per_call_steps},
    }
    traces = sorted(trace_dir.glob("*.pt.trace.json"), key=lambda p: p.stat().st_mtime)
    if traces:
        trace = traces[-1]
        profile_detail["trace_dir"] = str(trace_dir.relative_to(run_dir))
        profile_detail["trace_file"] = str(trace.relative_to(run_dir))
        per_step = cpu_bytes_allocated_per_step(trace, steps * per_call_steps)
        if per_step is not None:
            metrics["cpu_bytes_allocated_per_step"] = per_step
    return metrics, profile_detail


def _median_step_s(result: dict[str, Any]) -> float | None:
    proc = result.get("process") or {}
    samples = proc.get("samples_ns") or []
    if not samples:
        return None
    per = max(proc.get("loops", 1), 1) * max(proc.get("steps_per_unit", 1), 1)
    return statistics.median(samples) / per * 1e-9


def profile_pass(cfg: dict[str, Any], spec: Any, workload: Any, prepared: Any, result: dict[str, Any]) -> None:
    """Everything process 0 measures after its timed samples; fills result metrics, profile, accuracy."""
    from perfgate.worker import toggles as toggles_mod

    metrics = result.setdefault("metrics", {})
    profile_detail = result.setdefault("profile", {})
    run_dir = Path(cfg.get("run_dir") or ".").resolve()
    # the peak of the timed work, read before the reference instance below adds its own memory: what this
    # process recorded after its samples (process_peaks), else read now
    recorded = {k: float(v) for k in PEAK_KEYS if (v := (result.get("process") or {}).get(k)) is not None}
    metrics.update(recorded or process_peaks(prepared.unit, spec.device))

    # compile counters first: nothing below may add to them
    if toggles_mod.compile_mode(prepared.toggles) is not None:
        counts, reasons, detail = compile_counters()
        metrics.update(counts)
        profile_detail["graph_break_reasons"] = reasons
        profile_detail["compile"] = detail


    # a section that fails costs its own figures, recorded under profile["errors"], never the timing
    errors: list[str] = []
    ref = None
    try:
        accuracy, ref = reference_check(cfg, spec, workload, prepared)
        result["accuracy"] = accuracy
    except Exception as exc:
        errors.append(f"accuracy: {type(exc).__name__}: {exc}")

    if ref is not None:
        try:
            flops = flops_per_step(spec, workload, ref)
        except Exception as exc:  # an op the counter cannot dispatch through
            errors.append(f"flops: {type(exc).__name__}: {exc}")
            flops = None
        traffic = None
        try:
            traffic, counted = bytes_per_step(spec, workload, prepared, ref)
            profile_detail["bytes_counted_on"] = counted
        except Exception as exc:  # an op the dispatch mode cannot pass through
            errors.append(f"bytes: {type(exc).__name__}: {exc}")
        del ref
        metrics.update(roofline_metrics(flops, traffic, _median_step_s(result)))

    try:
        window_metrics, window_detail = profile_window(cfg, spec, workload, prepared, run_dir)
        metrics.update(window_metrics)
        profile_detail.update(window_detail)
    except Exception as exc:
        errors.append(f"profiler window: {type(exc).__name__}: {exc}")
    try:  # one more step: where it allocates (a memory regression's report diffs base and head sites)
        from perfgate.worker.allocations import allocation_sites

        trace_dir = trace_dir_for(run_dir, spec)
        trace_dir.mkdir(parents=True, exist_ok=True)
        profile_detail.update(allocation_sites(spec, prepared, trace_dir, run_dir))
    except Exception as exc:
        errors.append(f"memory sites: {type(exc).__name__}: {exc}")
    if errors:
        profile_detail["errors"] = errors
