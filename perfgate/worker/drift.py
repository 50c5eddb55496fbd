"""Numerical drift, the profile pass's accuracy check: the toggled unit's output against an eager fp32
instance built from the same seed, both against float64 at steps 1, 2, 4, ... and the end, and the
verdict (ok, amplified by the dynamics, or drift). Torch is imported inside the functions; docs/profiling.md,
"Numerical drift"."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from typing import Any


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
