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
            and its reason (judge_drift)
A section that fails (say, an op FlopCounterMode cannot dispatch) leaves its figures out and says why
under ``profile["errors"]``; the timed samples stand.

How each number is obtained is documented in docs/profiling.md. Works from torch 2.4 on: attributes that
moved between releases are read through getattr with fallbacks (device_time before cuda_time).
"""

from __future__ import annotations

import contextlib
import json
import math
import resource
import statistics
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

# The profile window: steps skipped, steps profiled but discarded (profiler warm-up), steps recorded.
# Bounded whatever the workload's T: the window is single steps, not units.
WAIT_STEPS = 1
WARMUP_STEPS = 1
ACTIVE_STEPS = 3
TOP_N = 15

# CUDA runtime calls that block the host until the device catches up
SYNC_CALLS = frozenset({
    "cudaDeviceSynchronize", "cudaStreamSynchronize", "cudaEventSynchronize", "cudaStreamWaitEvent",
    "cudaMemcpy", "cudaMemset",
})


# ---------------------------------------------------------------- compile counters and compile time


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


# ---------------------------------------------------------------- memory


def peak_rss_bytes() -> int:
    """The worker's peak resident set size so far (ru_maxrss: KiB on Linux, bytes on macOS)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak if sys.platform == "darwin" else peak * 1024)


def cuda_peaks_over(unit: Any, device: str) -> dict[str, float]:
    """Peak CUDA allocated and reserved bytes over one call of ``unit`` (statistics reset before it).

    Empty on CPU, or when CUDA cannot answer (some calls return 0 on CPU builds, others raise)."""
    import torch

    if not device.startswith("cuda"):
        return {}
    try:
        if not torch.cuda.is_available():
            return {}
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        unit()
        torch.cuda.synchronize()
        return {
            "peak_cuda_allocated_bytes": float(torch.cuda.max_memory_allocated()),
            "peak_cuda_reserved_bytes": float(torch.cuda.max_memory_reserved()),
        }
    except (RuntimeError, AssertionError, AttributeError):
        return {}


# what process_peaks records, in a process's record (results.json) and as the profile pass's metrics
PEAK_KEYS = ("peak_rss_bytes", "peak_cuda_allocated_bytes", "peak_cuda_reserved_bytes")


def process_peaks(unit: Any, device: str) -> dict[str, float]:
    """This worker process's peak memory after its timed samples, what every process records (results.json's
    processes: memory_vs_eager's interval comes from their spread): its peak resident set so far, and on
    CUDA the allocator's peak allocated bytes over one more call of ``unit`` (``cuda_peaks_over``, outside
    the timed samples; the one extra unit this costs a CUDA process)."""
    peaks = {"peak_rss_bytes": float(peak_rss_bytes())}
    cuda = cuda_peaks_over(unit, device)
    if "peak_cuda_allocated_bytes" in cuda:
        peaks["peak_cuda_allocated_bytes"] = cuda["peak_cuda_allocated_bytes"]
        peaks["peak_cuda_reserved_bytes"] = cuda["peak_cuda_reserved_bytes"]
    return peaks


# ---------------------------------------------------------------- numerical drift


def compare_outputs(actual: Any, reference: Any, tolerance: Any) -> dict[str, Any]:
    """max abs, mean abs and relative L2 error of ``actual`` against ``reference`` (in float64 on CPU),
    and the verdict against the workload's Tolerance: ``ok`` within every bound given, else ``drift``."""
    import torch

    a = actual.detach().to("cpu", torch.float64)
    r = reference.detach().to("cpu", torch.float64)
    if a.shape != r.shape:
        return {"verdict": "drift", "tolerance": tolerance.to_json(),
                "message": f"output shape {tuple(a.shape)} differs from the reference {tuple(r.shape)}"}
    diff = (a - r).abs()
    ref_norm = float(torch.linalg.vector_norm(r))
    diff_norm = float(torch.linalg.vector_norm(a - r))
    rel_l2 = diff_norm / ref_norm if ref_norm > 0 else (0.0 if diff_norm == 0 else math.inf)
    max_abs = float(diff.max()) if diff.numel() else 0.0
    mean_abs = float(diff.mean()) if diff.numel() else 0.0
    finite = math.isfinite(max_abs) and math.isfinite(rel_l2)
    ok = finite
    if tolerance.rel_l2 is not None:
        ok = ok and rel_l2 <= tolerance.rel_l2
    if tolerance.max_abs is not None:
        ok = ok and max_abs <= tolerance.max_abs
    return {"max_abs": max_abs, "mean_abs": mean_abs, "rel_l2": rel_l2,
            "verdict": "ok" if ok else "drift", "tolerance": tolerance.to_json()}


# ---------------------------------------------------------------- reading the profiler's events


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


# ---------------------------------------------------------------- the pass


def trace_dir_for(run_dir: Path, spec: Any) -> Path:
    """``<run dir>/tb/<workload>/<size>/<toggles>/``: one trace per folder, a run per case in TensorBoard."""
    from perfgate.util.paths import case_tb_dir

    return case_tb_dir(run_dir / "tb", spec.workload, spec.size, spec.toggle_name)


def _reseed(seed: int) -> None:
    import random

    import torch

    random.seed(seed)
    torch.manual_seed(seed)


def _first_tensor(state: Any) -> Any:
    return state[0] if isinstance(state, (tuple, list)) else state


def horizons(steps: int) -> list[int]:
    """The steps of a unit at which drift is read: 1, 2, 4, 8, ... and the last, so a long rollout keeps a
    handful of snapshots, not one per step."""
    out, h = [], 1
    while h < steps:
        out.append(h)
        h *= 2
    return [*out, max(steps, 1)]


@contextlib.contextmanager
def recording_steps(workload: Any, at: list[int]) -> Iterator[dict[int, Any]]:
    """While held, every ``workload.step`` call is counted and the output after the steps in ``at`` is
    kept (a detached copy, on its device): ``{step: tensor}``. A workload whose ``run_unit`` does not call
    ``step`` (``Workload.from_callable``) records nothing: only its unit's end is compared."""
    snapshots: dict[int, Any] = {}
    original = workload.step
    wanted = set(at)
    count = 0

    def step(model: Any, state: Any, built: Any, params: dict[str, Any]) -> Any:
        nonlocal count
        new = original(model, state, built, params)
        count += 1
        if count in wanted:
            out = _first_tensor(workload.output(new))
            if hasattr(out, "detach"):  # a step's state need not be a tensor mid-unit; only the end is checked
                snapshots[count] = out.detach().clone()
        return new

    workload.step = step  # an instance attribute: run_unit's self.step finds it first
    try:
        yield snapshots
    finally:
        del workload.step


def _run_reference(workload: Any, spec: Any, variants: frozenset[str], seed: int, dtype: Any,
                   at: list[int]) -> tuple[Any, Any, dict[int, Any]]:
    """An eager instance of the workload in ``dtype`` built from ``seed`` (same weights and inputs as the
    case) run for one unit: (its Built, its output, {step: output} at the steps in ``at``)."""
    import torch

    from perfgate.worker import toggles as toggles_mod

    params = spec.param_dict
    _reseed(seed)  # same draw as the worker's seed before prepare(): same weights and inputs
    if getattr(workload, "applies_compile", False):
        workload.compile_mode = None  # the reference of a self-compiling workload is eager too
    ref = workload.build(params, torch.device(spec.device), dtype, variants)
    contexts = toggles_mod.step_contexts((), spec.device, workload.needs_grad)
    _reseed(seed)
    workload.start_unit(ref, params)
    with recording_steps(workload, at) as snapshots, contexts():
        expected = workload.output(workload.run_unit(ref.model, ref, params))
    return ref, expected, snapshots


def reference_check(cfg: dict[str, Any], spec: Any, workload: Any, prepared: Any
                    ) -> tuple[dict[str, Any], Any]:
    """Drift of the toggled unit's output from an eager fp32 instance built from the same seed, judged
    against an eager float64 instance on the same device (``judge_drift``).

    Returns (accuracy dict, the fp32 reference Built and model, for the FLOP count). Global flags are set
    to the reference's (TF32 off) while the references run and restored after; RNG is reseeded before
    each run so stochastic workloads draw the same numbers."""
    import torch

    from perfgate.worker import toggles as toggles_mod

    seed = int(cfg.get("seed", 0))
    at = horizons(workload.steps_per_unit(spec.param_dict))
    _reseed(seed)
    # a replayed CUDA graph runs no step in Python: only its unit's end is compared
    with recording_steps(workload, [] if prepared.captured else at) as toggled_steps:
        out = workload.output(prepared.unit())
    actual = out.detach().clone() if isinstance(out, torch.Tensor) else out

    toggles_mod.set_global_flags((), spec.device)
    try:
        ref, expected, fp32_steps = _run_reference(workload, spec, prepared.variants, seed, torch.float32, at)
        accuracy = compare_outputs(actual, expected, workload.tolerance)
        try:
            _, exact, fp64_steps = _run_reference(workload, spec, prepared.variants, seed, torch.float64, at)
        except Exception as exc:  # a workload or device without float64: the fp32 comparison alone
            accuracy["reason"] = f"no float64 reference ({type(exc).__name__}: {exc}); judged against fp32 eager"
            return accuracy, ref
    finally:
        toggles_mod.set_global_flags(prepared.toggles, spec.device)
    toggled_steps[at[-1]] = actual  # the unit's end is the toggle's output, however it was produced
    fp32_steps[at[-1]] = expected
    fp64_steps[at[-1]] = exact
    rows = []
    for h in at:
        if h in toggled_steps and h in fp32_steps and h in fp64_steps:
            rows.append({"step": h,
                         "rel_l2": _rel_l2(toggled_steps[h], fp64_steps[h]),
                         "floor": _rel_l2(fp32_steps[h], fp64_steps[h])})
    accuracy["horizons"] = rows
    accuracy.update(judge_drift(accuracy, rows, workload.tolerance.rel_l2))
    return accuracy, ref


def _rel_l2(actual: Any, reference: Any) -> float:
    import torch

    a = _first_tensor(actual).detach().to("cpu", torch.float64)
    r = _first_tensor(reference).detach().to("cpu", torch.float64)
    if a.shape != r.shape:
        return math.inf
    ref_norm = float(torch.linalg.vector_norm(r))
    diff_norm = float(torch.linalg.vector_norm(a - r))
    return diff_norm / ref_norm if ref_norm > 0 else (0.0 if diff_norm == 0 else math.inf)


# A toggle's error at a step may exceed what one step's error grown by the dynamics explains by this factor
# (the growth is read from fp32 eager's own error, which starts orders of magnitude smaller), and it is
# explained up to SATURATED whatever the growth: two unrelated fields of the same size differ by about
# sqrt(2) in relative L2, which is where an amplified error stops growing.
AMPLIFIED_SLACK = 10.0
SATURATED = 2.0


def judge_drift(end: dict[str, Any], rows: list[dict[str, Any]], tolerance: float | None) -> dict[str, Any]:
    """The drift verdict and its reason, from ``end`` (``compare_outputs`` of the unit's end against fp32
    eager) and ``rows`` (``{"step", "rel_l2", "floor"}``: the toggle's and fp32 eager's relative L2 error
    against float64 at steps 1, 2, 4, ... and the end). Returns ``{"verdict", "reason", ...}``:

    - a non-finite output, or an end error within ``tolerance`` of fp32 eager: as ``compare_outputs`` said;
    - else, when one step's error (the first row) is itself beyond ``tolerance``: drift, the toggle's own;
    - else, when at every step the error is what that one-step error grows to under the dynamics (fp32
      eager's error, the noise floor, grows by floor(step) / floor(1); the toggle's may reach
      ``AMPLIFIED_SLACK`` times one step's error times that, or ``SATURATED``): ok, ``amplified``;
    - else drift: the error grows faster than the dynamics explain.
    """
    verdict = end.get("verdict")
    if verdict != "drift" or not all(math.isfinite(end.get(k, math.nan)) for k in ("rel_l2", "max_abs")):
        return {"verdict": verdict} if verdict == "ok" else {
            "verdict": "drift", "reason": end.get("message") or "the output is not finite (NaN or inf)"}
    if len(rows) < 2 or tolerance is None:
        return {"verdict": "drift", "reason": f"rel_l2 {end['rel_l2']:.2g} against fp32 eager at the unit's end "
                                              "(no per-step figures to tell the dynamics from the toggle)"}
    first, last = rows[0], rows[-1]
    if not math.isfinite(first["rel_l2"]) or first["rel_l2"] > tolerance:
        return {"verdict": "drift", "reason": f"after {first['step']} step(s) the output is already off by rel_l2 "
                                              f"{first['rel_l2']:.2g} against float64, beyond tolerance {tolerance:g}"}
    if first["floor"] <= 0:
        return {"verdict": "drift", "reason": "fp32 eager matches float64 exactly after one step, so the dynamics' "
                                              "amplification cannot be read; the end is beyond tolerance"}
    amplification = last["floor"] / first["floor"]
    figures = (f"one step: rel_l2 {first['rel_l2']:.2g} against float64 (fp32 eager {first['floor']:.2g}); "
               f"over {last['step']} steps the dynamics amplify any error {amplification:.2g}x (fp32 eager's own "
               f"grows to {last['floor']:.2g})")
    for row in rows[1:]:
        explained = min(first["rel_l2"] * row["floor"] / first["floor"] * AMPLIFIED_SLACK, SATURATED)
        if not (math.isfinite(row["rel_l2"]) and row["rel_l2"] <= explained):
            return {"verdict": "drift", "amplification": amplification,
                    "reason": f"{figures}; at step {row['step']} the output differs by {row['rel_l2']:.2g}, more "
                              f"than that growth explains ({explained:.2g})"}
    return {"verdict": "ok", "amplified": True, "amplification": amplification,
            "reason": f"amplified, not damaged: {figures}, so the end differs by {last['rel_l2']:.2g}"}


def flops_per_step(spec: Any, workload: Any, ref: Any) -> float | None:
    """FLOPs of one step of the workload, counted once by torch.utils.flop_counter on the eager fp32
    reference: the algorithm's FLOPs, the same for every toggle (compiled code hides its aten calls)."""
    from torch.utils.flop_counter import FlopCounterMode

    from perfgate.worker import toggles as toggles_mod

    contexts = toggles_mod.step_contexts((), spec.device, workload.needs_grad)
    counter = FlopCounterMode(display=False)
    with counter, contexts():
        workload.step(ref.model, ref.state, ref, spec.param_dict)
    return float(counter.get_total_flops())


# aten ops that move no data: views and aliases (func.is_view), fresh allocations, autograd bookkeeping
_NO_TRAFFIC = ("empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "detach", "alias",
               "lift_fresh", "set_", "resize_", "record_stream")


def bytes_per_step(spec: Any, workload: Any, prepared: Any, ref: Any) -> tuple[float, str]:
    """Bytes one step reads and writes at the aten-op level, and which instance was counted.

    Every aten op the step dispatches adds the sizes of its tensor inputs and outputs (numel x element
    size; views, aliases and fresh allocations add nothing), counted by a TorchDispatchMode. Where the
    toggled model runs op by op (eager, amp, channels-last...) that model is counted, in its own dtypes;
    where a compiler or a graph hides the ops (compile, torchscript, cuda-graphs) the eager reference is
    counted under the case's autocast: the traffic before fusion, an upper bound of the compiled step's.
    Caches are not modelled: an op whose operands stay in cache counts as if it went to memory."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_flatten

    from perfgate.worker import toggles as toggles_mod

    class BytesCounter(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.total = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
            out = func(*args, **(kwargs or {}))
            name = func.overloadpacket.__name__
            if not getattr(func, "is_view", False) and name not in _NO_TRAFFIC:
                for t in (*tree_flatten((args, kwargs or {}))[0], *tree_flatten(out)[0]):
                    if isinstance(t, torch.Tensor):
                        self.total += t.numel() * t.element_size()
            return out

    toggles = tuple(prepared.toggles)
    runs_op_by_op = (toggles_mod.compile_mode(toggles) is None and not prepared.captured
                     and "torchscript" not in toggles and not getattr(workload, "compile_mode", None))
    counter = BytesCounter()
    if runs_op_by_op:
        with counter:
            prepared.step(prepared.built.state)
        return float(counter.total), "this toggle's eager ops"
    amp = tuple(t for t in toggles if t in ("amp-fp16", "amp-bf16"))
    contexts = toggles_mod.step_contexts(amp, spec.device, workload.needs_grad)
    with counter, contexts():
        workload.step(ref.model, ref.state, ref, spec.param_dict)
    return float(counter.total), "eager reference ops (before fusion)"


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


def roofline_metrics(flops: float | None, traffic: float | None, step_s: float | None) -> dict[str, float]:
    """flops_per_step, bytes_per_step, arithmetic_intensity and the achieved rates from what was counted
    (None: that count failed). No intensity without a FLOP count: a count that failed is not 0 FLOPs, and
    an intensity of 0 made such a step memory-bound (perfgate.judging.roofline classifies it unclassified)."""
    out: dict[str, float] = {}
    if flops is not None:
        out["flops_per_step"] = flops
        if step_s and flops > 0:
            out["achieved_flops_per_s"] = flops / step_s
    if traffic:
        out["bytes_per_step"] = traffic
        if flops is not None:
            out["arithmetic_intensity"] = flops / traffic
        if step_s:
            out["achieved_bytes_per_s"] = traffic / step_s
    return out


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
