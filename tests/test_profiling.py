"""The profile pass (perfgate/profiling.py), end to end through the real CLI on tiny test workloads."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from conftest import _profiled_run


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
    assert {r["name"]: r["count_per_step"] for r in a["profile"]["top_ops"]} == \
        {r["name"]: r["count_per_step"] for r in b["profile"]["top_ops"]}


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
    from perfgate.toggles import skip_reason

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
    from perfgate.profiling import cuda_peaks_over

    assert cuda_peaks_over(lambda: None, "cpu") == {}
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device here")
    x = torch.empty(0, device="cuda")
    peaks = cuda_peaks_over(lambda: torch.ones(1 << 20, device="cuda") + x.sum(), "cuda")
    assert peaks["peak_cuda_allocated_bytes"] >= 4 << 20
    assert peaks["peak_cuda_reserved_bytes"] >= peaks["peak_cuda_allocated_bytes"]
