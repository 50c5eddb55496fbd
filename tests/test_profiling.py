"""The profile pass (perfgate/worker/profiling.py), end to end through the real CLI on tiny test workloads."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from conftest import _profiled_run

# slow: profiled runs through the CLI and torch's profiler in this process (the fast loop, pytest -m "not slow", leaves them to CI)
pytestmark = pytest.mark.slow


def _case(data: dict, key: str) -> dict:
    (case,) = [c for c in data["cases"] if c["key"] == key]
    assert case["status"] == "ok", case.get("message")
    return case


def _trace_counts(run_dir: Path, case: dict) -> tuple[Counter, int]:
    """Read the exported trace on its own: events by kind over the ProfilerStep#N windows it holds."""
    trace = json.loads((run_dir / case["profile"]["trace_file"]).read_text())
    events = [e for e in trace["traceEvents"] if e.get("ph") == "X"]
    steps = sum(1 for e in events if e["name"].startswith("ProfilerStep#") and e.get("cat") == "user_annotation")
    kinds: Counter = Counter()
    for e in events:
        if e.get("cat") == "cpu_op" and e["name"].startswith("aten::"):
            kinds["aten"] += 1
        if e.get("cat") == "kernel" or "cpp_fused" in e["name"]:
            kinds["kernel"] += 1
    return kinds, steps


EAGER = "tight_conv/smoke/eager/cpu"
BF16 = "tight_conv/smoke/amp-bf16/cpu"


def test_op_counts_agree_with_the_exported_trace(profiled_run):
    run_dir, data = profiled_run
    for key in (EAGER, BF16):
        case = _case(data, key)
        assert case["profile"]["trace_dir"] == str(Path(case["profile"]["trace_file"]).parent)
        assert case["profile"]["trace_dir"] == "tb/tight_conv/smoke/" + key.split("/")[2]
        kinds, steps = _trace_counts(run_dir, case)
        assert steps == case["profile"]["window"]["active"] == 3
        assert case["metrics"]["aten_ops_per_step"] == kinds["aten"] / steps > 0
        assert "kernels_per_step" not in case["metrics"]  # eager CPU: no device or compiled kernels
        top = case["profile"]["top_ops"]
        assert 0 < len(top) <= 15
        assert all(r["kind"] in ("op", "kernel") and r["count_per_step"] > 0 for r in top)


def test_counts_identical_across_two_runs_of_the_same_eager_case(profiled_run, tmp_path):
    _, first = profiled_run
    second = _profiled_run(tmp_path / "again", "-w", "tight_conv", "-t", "eager")
    a, b = _case(first, EAGER), _case(second, EAGER)
    for name in ("aten_ops_per_step", "flops_per_step", "cpu_bytes_allocated_per_step"):
        assert a["metrics"][name] == b["metrics"][name], name
    # top_ops are the 15 ops with the most time: the last places can trade (aten::to for aten::reshape, both
    # twice a step, in CI on 2026-11-28); every op both lists name has the same count
    ca = {r["name"]: r["count_per_step"] for r in a["profile"]["top_ops"]}
    cb = {r["name"]: r["count_per_step"] for r in b["profile"]["top_ops"]}
    shared = ca.keys() & cb.keys()
    assert len(shared) >= len(ca) - 3, (ca, cb)
    assert {k: ca[k] for k in shared} == {k: cb[k] for k in shared}


def test_a_toggle_that_changes_the_op_sequence_changes_the_counts(profiled_run):
    _, data = profiled_run
    eager, bf16 = _case(data, EAGER), _case(data, BF16)
    assert bf16["metrics"]["aten_ops_per_step"] > eager["metrics"]["aten_ops_per_step"]
    casts = [r for r in bf16["profile"]["top_ops"] if r["name"] == "aten::_to_copy"]
    assert casts and casts[0]["count_per_step"] > 0  # autocast's casts to bfloat16


def test_flops_memory_and_rss(profiled_run):
    _, data = profiled_run
    m = _case(data, EAGER)["metrics"]
    # two 3x3 convolutions (2->4 and 4->2 channels) on a 12x12 grid: 2*Cin*Cout*9*H*W each
    assert m["flops_per_step"] == 2 * (2 * 2 * 4 * 9 * 12 * 12)
    assert m["achieved_flops_per_s"] > 0
    assert m["peak_rss_bytes"] > 10 * 2**20
    assert m["cpu_bytes_allocated_per_step"] > 0
    assert "peak_cuda_allocated_bytes" not in m  # CPU case: no CUDA figures, not zeros


def test_drift_detected_for_lower_precision(profiled_run):
    _, data = profiled_run
    eager, bf16 = _case(data, EAGER)["accuracy"], _case(data, BF16)["accuracy"]
    assert eager["verdict"] == "ok" and eager["max_abs"] == 0.0 and eager["rel_l2"] == 0.0
    assert bf16["verdict"] == "drift"
    assert bf16["rel_l2"] > bf16["tolerance"]["rel_l2"] == 1e-6
    assert bf16["max_abs"] >= bf16["mean_abs"] > 0


def test_compile_graph_breaks_kernels_and_cold_warm_compile(tmp_path):
    """The one compile test: two processes share the case's fresh inductor cache (cold, then warm)."""
    from perfgate.worker.toggles import skip_reason

    reason = skip_reason(("compile",), "cpu", {})
    if reason:
        pytest.skip(reason)
    out, cache = tmp_path / "run", tmp_path / "compile-cache"
    data = _profiled_run(out, "-w", "graph_break", "-t", "compile", "--processes", "2", "--compile-cache", str(cache))
    case = _case(data, "graph_break/smoke/compile/cpu")
    assert case["metadata"]["compile_cache"] == "persistent-cold"  # an empty persistent cache: a cold compile
    m, prof = case["metrics"], case["profile"]
    assert m["graph_breaks"] >= 1
    assert any("item()" in r for r in prof["graph_break_reasons"])
    assert m["unique_graphs"] >= 2  # the graph before the break and the one resumed after it
    assert "recompiles" in m
    assert m["compile_cold_s"] > 0 and m["compile_warm_s"] > 0
    # inductor's C++ kernels appear by name and are counted the same way the trace shows them
    assert any("cpp_fused" in r["name"] and r["kind"] == "kernel" for r in prof["top_ops"])
    kinds, steps = _trace_counts(out, case)
    assert m["kernels_per_step"] == kinds["kernel"] / steps > 0
    assert m["aten_ops_per_step"] == kinds["aten"] / steps
    assert case["accuracy"]["verdict"] == "ok"
    # a second run finds the persistent cache warm: no cold compile to report, the same graphs
    again = _case(_profiled_run(tmp_path / "again", "-w", "graph_break", "-t", "compile", "--processes", "1",
                                "--compile-cache", str(cache)), "graph_break/smoke/compile/cpu")
    assert again["metadata"]["compile_cache"] == "persistent-warm"
    assert "compile_cold_s" not in again["metrics"] and again["metrics"]["compile_warm_s"] > 0
    assert again["metrics"]["unique_graphs"] == m["unique_graphs"]


def test_cuda_peaks_are_absent_on_cpu_and_measured_on_cuda():
    torch = pytest.importorskip("torch")
    from perfgate.worker.peak_memory import cuda_peaks_over

    assert cuda_peaks_over(lambda: None, "cpu") == {}
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device here")
    x = torch.empty(0, device="cuda")
    peaks = cuda_peaks_over(lambda: torch.ones(1 << 20, device="cuda") + x.sum(), "cuda")
    assert peaks["peak_cuda_allocated_bytes"] >= 4 << 20
    assert peaks["peak_cuda_reserved_bytes"] >= peaks["peak_cuda_allocated_bytes"]


# ------------------------------------------------ drift: a float64 reference, per step, the noise floor


def _accuracy_of(workload, params: dict, toggle_set: tuple[str, ...]) -> dict:
    """reference_check run in this process, as process 0 of a case does after its samples."""
    torch = pytest.importorskip("torch")
    from perfgate.model.results import CaseSpec
    from perfgate.worker import drift, toggles

    spec = CaseSpec(workload.name, "smoke", toggle_set, "cpu", tuple(sorted(params.items())))
    torch.manual_seed(0)
    prepared = toggles.prepare(workload, dict(params), "cpu", toggle_set, frozenset())
    return drift.reference_check({"seed": 0}, spec, workload, prepared)[0]


# 50 steps, as the pr rollout, on a small grid: bf16 autocast on CPU stands in for the GPU's tf32 and fp16
ROLLOUT_50 = {"T": 50, "grid": 16, "channels": 8, "blocks": 4}


def test_a_rollout_amplifying_one_steps_rounding_is_not_called_drift():
    """The GPU run's "every reduced-precision toggle drifts" (rel_l2 0.8-0.9 after 50 steps): one step of
    bf16 is off by ~3e-3, and the rollout amplifies any error, fp32 eager's own included, ~1e4-fold."""
    from workloads.operator_rollout import OperatorRollout

    acc = _accuracy_of(OperatorRollout(), dict(OperatorRollout.sizes["smoke"], **ROLLOUT_50), ("amp-bf16",))
    tolerance = acc["tolerance"]["rel_l2"]
    assert acc["rel_l2"] > tolerance  # what the end alone, against fp32 eager, called drift
    steps = [row["step"] for row in acc["horizons"]]
    assert steps == [1, 2, 4, 8, 16, 32, 50]
    first, last = acc["horizons"][0], acc["horizons"][-1]
    assert first["rel_l2"] < tolerance and first["floor"] < 1e-5
    assert last["floor"] > 100 * first["floor"]  # the dynamics amplify fp32's own rounding
    assert acc["verdict"] == "ok" and acc["amplified"] is True
    assert acc["reason"].startswith("amplified, not damaged: one step: rel_l2")


def test_the_stochastic_rollout_draws_the_same_noise_in_float64():
    """A generator gives other numbers for float64 than for float32: the reference must draw float32."""
    from workloads.operator_rollout import OperatorRollout

    acc = _accuracy_of(OperatorRollout(), dict(OperatorRollout.sizes["smoke"]), ())
    assert acc["verdict"] == "ok" and acc["rel_l2"] == 0.0
    assert all(row["floor"] < 1e-5 and row["rel_l2"] == row["floor"] for row in acc["horizons"])


def _damaged(kind: str):
    torch = pytest.importorskip("torch")
    from workloads.operator_rollout import OperatorRollout

    class Damaged(OperatorRollout):
        name = f"damaged_{kind}"

        def step(self, model, state, built, params):
            new = super().step(model, state, built, params)
            if torch.is_autocast_enabled("cpu"):  # the toggle's bug, not rounding
                return new * float("nan") if kind == "nan" else new * 1.2
            return new

    return Damaged()


@pytest.mark.parametrize("kind, reason", [("nan", "not finite"), ("scale", "after 1 step(s) the output is already off")])
def test_real_numerical_damage_stays_drift(kind, reason):
    from workloads.operator_rollout import OperatorRollout

    acc = _accuracy_of(_damaged(kind), dict(OperatorRollout.sizes["smoke"], **ROLLOUT_50), ("amp-bf16",))
    assert acc["verdict"] == "drift"
    assert reason in acc["reason"]


def test_an_error_growing_faster_than_the_dynamics_is_drift():
    from perfgate.worker.drift import judge_drift

    end = {"verdict": "drift", "rel_l2": 0.5, "max_abs": 1.0}
    rows = [{"step": 1, "rel_l2": 1e-4, "floor": 1e-7}, {"step": 2, "rel_l2": 1e-1, "floor": 2e-7},
            {"step": 3, "rel_l2": 0.5, "floor": 4e-7}]
    judged = judge_drift(end, rows, 5e-2)
    assert judged["verdict"] == "drift"
    assert "at step 2 the output differs by 0.1, more than that growth explains (0.002)" in judged["reason"]
    assert judge_drift({"verdict": "ok", "rel_l2": 0.0, "max_abs": 0.0}, rows, 5e-2) == {"verdict": "ok"}
