"""Roofline and bound class (perfgate/judging/roofline.py): the rule on given evidence, the ceilings it reads,
and the classes of three workloads built here to be compute-, memory- and overhead-bound on CPU, from
real profiles of real worker processes (`perfgate run`)."""

from __future__ import annotations

import json
import textwrap

import pytest
from conftest import run_cli

from perfgate.judging import roofline
from perfgate.judging.roofline import Roof, case_bound, classify, roof_for, spec_sheet
from perfgate.model.results import CaseResult, CaseSpec, load_results

N_MATMUL = 384
N_CHAIN = 1 << 20
CHAIN_OPS = 8
TINY_OPS = 60

BOUND_WORKLOADS = textwrap.dedent(f'''
    import torch

    from perfgate.workload import Built, Workload

    SIZES = {{"smoke": {{}}, "pr": {{}}, "full": {{}}}}


    class Matmul(Workload):
        name = "bound_matmul"
        description = "one large matmul per step: compute-bound"
        sizes = SIZES
        channels_last_applies = False

        def build(self, params, device, dtype, variants):
            g = torch.Generator().manual_seed(0)
            a = torch.randn({N_MATMUL}, {N_MATMUL}, generator=g).to(device, dtype)
            b = torch.randn({N_MATMUL}, {N_MATMUL}, generator=g).to(device, dtype) / {N_MATMUL}
            return Built(model=torch.nn.Identity(), state=a, extra={{"b": b}})

        def step(self, model, state, built, params):
            return torch.mm(state, built.extra["b"])


    class Chain(Workload):
        name = "bound_chain"
        description = "a chain of elementwise ops on a large array: memory-bound"
        sizes = SIZES
        channels_last_applies = False

        def build(self, params, device, dtype, variants):
            return Built(model=torch.nn.Identity(), state=torch.rand({N_CHAIN}, device=device, dtype=dtype))

        def step(self, model, state, built, params):
            x = state
            for _ in range({CHAIN_OPS // 2}):
                x = x * 0.5
                x = x + 0.25
            return x


    class Tiny(Workload):
        name = "bound_tiny"
        description = "a Python loop of tiny ops: overhead-bound"
        sizes = SIZES
        channels_last_applies = False

        def build(self, params, device, dtype, variants):
            return Built(model=torch.nn.Identity(), state=torch.rand(16, device=device, dtype=dtype))

        def step(self, model, state, built, params):
            x = state
            for _ in range({TINY_OPS}):
                x = x * 0.999
            return x
''')


@pytest.fixture(scope="module")
def bound_run(tmp_path_factory):
    """The three workloads, eager on CPU, one worker process each, profiled (~20 s on 2 loaded cores)."""
    root = tmp_path_factory.mktemp("bounds")
    (root / "workloads").mkdir()
    (root / "workloads" / "bounds.py").write_text(BOUND_WORKLOADS)
    (root / "pyproject.toml").write_text('[tool.perfgate]\nworkloads_dirs = ["workloads"]\n'
                                         '[tool.perfgate.timing]\nsamples = 5\nmin_time_s = 0.1\n'
                                         '[tool.perfgate.expect]\n"bound_chain/*/eager/cpu" = ["bound == memory-bound"]\n')
    cal = run_cli("calibrate", "--ceilings-only", "--write", cwd=root)  # this machine's ceilings, stored
    assert cal.returncode == 0, cal.stdout + cal.stderr
    assert "ceilings cpu (1 thread(s)): peak float32" in cal.stdout and "stored the ceilings in" in cal.stdout
    proc = run_cli("run", "-w", "bound_*", "-t", "eager", "--processes", "1", "--out", str(root / "run"), cwd=root)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return load_results(root / "run")


@pytest.mark.slow
def test_calibrate_stores_ceilings_the_run_carries(bound_run):
    cpu = bound_run.ceilings["cpu"]
    assert set(cpu["flops"]) >= {"float32", "float64"} and set(cpu["bandwidth"]) == {"copy", "triad"}
    assert all(v > 1e8 for v in [*cpu["flops"].values(), *cpu["bandwidth"].values()])
    assert bound_run.ceilings["source"].endswith("ceilings.json") and cpu["threads"] == 1
    b = case_bound(bound_run.case("bound_matmul/smoke/eager/cpu"), bound_run.ceilings)
    assert b.ridge_source == "measured (perfgate calibrate)"
    # a shared runner can slow the ceiling's measurement more than the case's, so no upper bound here
    assert b.flops_fraction > 0 and b.headroom == pytest.approx(1 / b.flops_fraction)


@pytest.mark.parametrize("workload, bound", [
    ("bound_matmul", "compute-bound"), ("bound_chain", "memory-bound"), ("bound_tiny", "overhead-bound")])
@pytest.mark.slow
def test_each_workload_gets_its_bound_class_from_a_real_profile(bound_run, workload, bound):
    case = bound_run.case(f"{workload}/smoke/eager/cpu")
    assert case.status == "ok", case.message
    b = case_bound(case, bound_run.ceilings)
    assert b is not None and b.bound == bound, (b, case.metrics)
    for name in ("device_idle_fraction", "mean_op_s", "bytes_per_step", "arithmetic_intensity"):
        assert b.evidence[name] is not None, name
    assert case.metrics["kernel_concentration_80"] >= 1


@pytest.mark.slow
def test_bytes_per_step_counts_every_operand_and_result(bound_run):
    mm = bound_run.case("bound_matmul/smoke/eager/cpu").metrics
    assert mm["bytes_per_step"] == 3 * N_MATMUL * N_MATMUL * 4  # a, b read; the product written
    assert mm["arithmetic_intensity"] == pytest.approx(2 * N_MATMUL ** 3 / mm["bytes_per_step"])
    chain = bound_run.case("bound_chain/smoke/eager/cpu").metrics
    assert chain["bytes_per_step"] == CHAIN_OPS * 2 * N_CHAIN * 4  # each op reads and writes the array
    assert chain["arithmetic_intensity"] == 0.0  # the FLOP counter counts matmuls and convolutions only
    tiny = bound_run.case("bound_tiny/smoke/eager/cpu").metrics
    assert tiny["bytes_per_step"] == TINY_OPS * 2 * 16 * 4
    assert tiny["aten_ops_per_step"] >= TINY_OPS  # each mul by a Python number dispatches a few more
    assert tiny["mean_op_s"] < bound_run.case("bound_chain/smoke/eager/cpu").metrics["mean_op_s"]


@pytest.mark.slow
def test_a_bound_expectation_is_checked_on_the_run(bound_run):
    data = json.loads(bound_run.dumps())
    (outcome,) = data["expectations"]["outcomes"]
    assert (outcome["case_key"], outcome["outcome"], outcome["value"]) == (
        "bound_chain/smoke/eager/cpu", "met", "memory-bound")


# ---------------------------------------------------------------- the rule on given evidence


def evidence(**kw):
    base = {"device_idle_fraction": 0.05, "mean_op_s": 1e-3, "flops_per_step": 1e9, "bytes_per_step": 1e7,
            "arithmetic_intensity": 100.0}
    return {**base, **kw}


MEASURED = Roof(1e11, 1e10, "measured (perfgate calibrate)")  # ridge 10 FLOP/B


@pytest.mark.parametrize("ev, device, bound", [
    (evidence(), "cpu", "compute-bound"),
    (evidence(arithmetic_intensity=10.0), "cpu", "compute-bound"),  # on the ridge: the math is the limit
    (evidence(arithmetic_intensity=9.9), "cpu", "memory-bound"),
    (evidence(arithmetic_intensity=None, flops_per_step=0.0), "cpu", "memory-bound"),  # 0 FLOPs counted
    (evidence(arithmetic_intensity=None, flops_per_step=None), "cpu", "unclassified"),  # bytes, no count
    (evidence(device_idle_fraction=0.6), "cpu", "overhead-bound"),
    (evidence(mean_op_s=19e-6), "cpu", "overhead-bound"),
    (evidence(mean_op_s=15e-6), "cuda", "compute-bound"),  # a launch costs less than a CPU dispatch
    (evidence(mean_op_s=9e-6), "cuda", "overhead-bound"),
])
def test_classify(ev, device, bound):
    got, reason, ridge, source = classify(ev, device, MEASURED)
    assert got == bound and ridge == 10.0 and source.startswith("measured") and reason


def test_without_ceilings_the_default_ridge_decides_and_says_so():
    got, _, ridge, source = classify(evidence(arithmetic_intensity=50.0), "cuda", Roof(None, None, "default ridge"))
    assert (got, ridge) == ("memory-bound", roofline.DEFAULT_RIDGE["cuda"]) and "no measured ceilings" in source


def test_no_evidence_no_class():
    case = CaseResult(CaseSpec("w", "smoke", ("eager",), "cpu"), "ok", metrics={"aten_ops_per_step": 3.0})
    assert case_bound(case) is None
    assert case_bound(CaseResult(CaseSpec("w", "smoke", ("eager",), "cpu"), "failed")) is None


def test_headroom_is_to_the_ceiling_that_binds():
    case = CaseResult(CaseSpec("w", "smoke", ("eager",), "cpu"), "ok", metrics={
        "mean_op_s": 1e-3, "device_idle_fraction": 0.0, "flops_per_step": 1e6, "bytes_per_step": 1e6,
        "arithmetic_intensity": 1.0, "achieved_flops_per_s": 1e9, "achieved_bytes_per_s": 2.5e9})
    b = case_bound(case, {"cpu": {"flops": {"float32": 1e11}, "bandwidth": {"copy": 5e9, "triad": 1e10}}})
    assert b.bound == "memory-bound" and b.bandwidth_fraction == 0.25 and b.headroom == 4.0
    assert b.headroom_text == "25% of peak bandwidth (4x headroom)"


# ---------------------------------------------------------------- ceilings


@pytest.mark.parametrize("name, expected", [
    ("NVIDIA H100 80GB HBM3", "H100 SXM"), ("NVIDIA H100 PCIe", "H100 PCIe"), ("NVIDIA H200", "H200"),
    ("NVIDIA A100-SXM4-80GB", "A100 80GB"), ("NVIDIA A100-SXM4-40GB", "A100 40GB"),
    ("NVIDIA GeForce RTX 3060 Ti", "RTX 3060 Ti"), ("Tesla T4", "T4"), ("Quadro P400", None), (None, None),
])
def test_spec_sheet_lookup(name, expected):
    got = spec_sheet(name)
    assert (got["name"] if got else None) == expected


def test_roof_prefers_measured_then_spec_sheet():
    spec = spec_sheet("NVIDIA H100 80GB HBM3")
    measured = {"cuda": {"flops": {"float32": 5e13, "bfloat16": 6e14}, "bandwidth": {"copy": 2.9e12, "triad": 3e12}}}
    roof = roof_for({**measured, "spec": spec}, "cuda", "bfloat16")
    assert (roof.peak_flops, roof.peak_bandwidth, roof.spec_flops) == (6e14, 3e12, 989.4e12)
    assert roof_for({"spec": spec}, "cuda", "float16").source == "spec sheet (H100 SXM)"
    assert roof_for({"spec": spec}, "cpu").ridge is None  # a GPU's sheet says nothing about the host
    assert roof_for(measured, "cuda", "tf32").peak_flops == 5e13  # no tf32 measured: float32's


def test_ceilings_for_run_reads_the_machine_file_and_ignores_a_bad_one(tmp_path):
    env = {"machine_key": "cpu-test", "device_name": "NVIDIA H200"}
    assert roofline.ceilings_for_run(tmp_path, env) == {"spec": spec_sheet("NVIDIA H200")}
    path = roofline.ceilings_path(tmp_path, "cpu-test")
    path.parent.mkdir(parents=True)
    path.write_text("{not json")
    assert "cpu" not in roofline.ceilings_for_run(tmp_path, env)
    path.write_text(json.dumps({"schema": roofline.CEILINGS_SCHEMA, "cpu": {"flops": {"float32": 1e11},
                                                                            "bandwidth": {"copy": 1e10}}}))
    got = roofline.ceilings_for_run(tmp_path, env)
    assert got["cpu"]["flops"]["float32"] == 1e11 and got["source"] == str(path)


def test_the_recommendation_says_what_the_eager_bound_predicted():
    from fixtures.synthetic import roofline_run

    from perfgate.reports.base import ReportInput

    rows = {r.spec.toggle_name: r for r in ReportInput(roofline_run()).rows}
    assert rows["eager"].bound.bound == "memory-bound" and rows["compile"].bound.bound == "overhead-bound"
    # channels-last runs 0.8x in the synthetic run, though a memory-bound step should gain from it
    assert rows["channels-last"].recommendation.action == "avoid"
    assert ("eager is memory-bound, so channels-last should pay; it does not here"
            in rows["channels-last"].recommendation.reason)
    assert "should pay" not in rows["amp-bf16"].recommendation.reason  # avoided for its drift, not its speed
    assert "memory-bound" not in rows["compile"].recommendation.reason  # compile does not attack bytes
    assert roofline.toggle_hint("overhead-bound", ("compile",), "adopt").startswith("as the roofline predicts")


def test_tampered_ceilings_are_ignored_not_a_crash():
    bad = {"cpu": {"flops": {"float32": "1e11", "float64": -3, "bfloat16": float("inf")}, "bandwidth": [1, 2]},
           "spec": "H100"}
    roof = roof_for(bad, "cpu")
    assert (roof.peak_flops, roof.peak_bandwidth, roof.source) == (None, None, "default ridge")
    assert roof_for({"cuda": {"flops": {"float32": True}}, "spec": {"flops": None}}, "cuda").ridge is None


def test_bandwidth_of_a_fused_step_is_not_compared_with_bytes_counted_before_fusion():
    metrics = {"mean_op_s": 1e-3, "device_idle_fraction": 0.0, "bytes_per_step": 1e6, "flops_per_step": 0.0,
               "arithmetic_intensity": 0.0, "achieved_bytes_per_s": 3e10}
    ceilings = {"cpu": {"flops": {"float32": 1e11}, "bandwidth": {"copy": 1e10}}}
    compiled = CaseResult(CaseSpec("w", "smoke", ("compile",), "cpu"), "ok", metrics=metrics,
                          profile={"bytes_counted_on": "eager reference ops (before fusion)"})
    assert case_bound(compiled, ceilings).bandwidth_fraction is None
    eager = CaseResult(CaseSpec("w", "smoke", ("eager",), "cpu"), "ok", metrics=metrics,
                       profile={"bytes_counted_on": "this toggle's eager ops"})
    b = case_bound(eager, ceilings)
    assert b.bandwidth_fraction == 3.0 and "above the ceiling" in b.headroom_text


def test_a_dtype_not_measured_takes_the_spec_sheet_peak_of_that_dtype_not_the_measured_float32():
    """An amp-fp16 case on an H100 whose calibrate measured float32 only (its float16 matmul failed, or a
    ceilings.json from before): its ridge was 50 TFLOP/s / 3 TB/s = 17 FLOP/B, so a step at 100 FLOP/B read
    compute-bound; against the float16 peak (the spec sheet's 989 TFLOP/s, ridge ~295) it is memory-bound."""
    spec = spec_sheet("NVIDIA H100 80GB HBM3")
    ceilings = {"cuda": {"flops": {"float32": 5e13}, "bandwidth": {"copy": 3e12},
                         "errors": ["float16 matmul: RuntimeError: ..."]}, "spec": spec}
    roof = roof_for(ceilings, "cuda", "float16")
    assert roof.peak_flops == 989.4e12 and roof.source == "spec sheet (H100 SXM)"
    metrics = {"mean_op_s": 1e-3, "device_idle_fraction": 0.0, "bytes_per_step": 1e9, "arithmetic_intensity": 100.0}
    case = CaseResult(CaseSpec("w", "full", ("amp-fp16",), "cuda"), "ok", metrics=metrics)
    assert case_bound(case, ceilings).bound == "memory-bound"
    # measured float16 still wins over the sheet; no sheet for the dtype: the measured float32, said so
    assert roof_for({**ceilings, "cuda": {**ceilings["cuda"], "flops": {"float32": 5e13, "float16": 7e14}}},
                    "cuda", "float16").peak_flops == 7e14
    cpu = roof_for({"cpu": {"flops": {"float32": 1e11}, "bandwidth": {"copy": 1e10}}}, "cpu", "float16")
    assert cpu.peak_flops == 1e11 and "float16 not measured" in cpu.source


# ---------------------------------------------------------------- a FLOP count that failed is not a zero


FLOPS_FAILED = "flops: RuntimeError: FlopCounterMode cannot dispatch my_ext::fused_op"


def _uncounted_case(toggle="eager", errors=(FLOPS_FAILED,), **metrics):
    """A case whose FLOP counter failed: bytes counted, no FLOPs; the worker before this fix stored an
    arithmetic intensity of 0 for it."""
    base = {"mean_op_s": 1e-3, "device_idle_fraction": 0.05, "bytes_per_step": 1e7, "arithmetic_intensity": 0.0,
            "achieved_bytes_per_s": 5e9}
    return CaseResult(CaseSpec("w", "smoke", (toggle,), "cpu"), "ok", metrics={**base, **metrics},
                      profile={"errors": list(errors)} if errors else {})


@pytest.mark.parametrize("case, why", [
    (_uncounted_case(), "RuntimeError: FlopCounterMode cannot dispatch my_ext::fused_op"),  # absent, errors say why
    (_uncounted_case(errors=()), "no FLOP count recorded"),  # absent, no error kept (an older results.json)
    (_uncounted_case(flops_per_step=float("nan"), arithmetic_intensity=float("nan"), errors=()), "nan"),
    (_uncounted_case(flops_per_step=0.0), "RuntimeError"),  # a 0 beside the counter's own error is no count
])
def test_a_failed_flop_count_is_unclassified_not_memory_bound(case, why):
    """Before: no FLOPs read as an arithmetic intensity of 0, so every case whose counter failed was
    memory-bound, and the report recommended amp / channels-last on that basis."""
    b = case_bound(case, {"cpu": {"flops": {"float32": 1e11}, "bandwidth": {"copy": 1e10}}})
    assert b is not None and b.bound == roofline.UNCLASSIFIED, b
    assert b.reason.startswith("FLOPs not counted") and why in b.reason, b.reason
    assert b.evidence["arithmetic_intensity"] is None and b.headroom is None and b.headroom_text == "-"


def test_a_real_zero_flop_step_is_still_memory_bound():
    """A step of copies and elementwise ops counted 0 FLOPs, no error: intensity 0, memory-bound is right."""
    b = case_bound(_uncounted_case(flops_per_step=0.0, errors=()), None)
    assert b.bound == "memory-bound" and b.evidence["arithmetic_intensity"] == 0.0


def test_overhead_evidence_still_classifies_a_case_without_flops():
    b = case_bound(_uncounted_case(device_idle_fraction=0.7), None)
    assert b.bound == "overhead-bound" and b.evidence["arithmetic_intensity"] is None  # not "0 FLOP/B"
    assert b.flops_note.startswith("RuntimeError")


def test_an_unclassified_eager_predicts_no_toggle_in_the_report_or_the_expectations():
    from fixtures.synthetic import roofline_run

    from perfgate.judging import expect
    from perfgate.reports.base import ReportInput

    run = roofline_run()
    eager = run.case("operator_rollout/smoke/eager/cpu")
    eager.metrics.pop("flops_per_step")
    eager.metrics.pop("achieved_flops_per_s")
    eager.metrics["arithmetic_intensity"] = 0.0
    eager.profile["errors"] = [FLOPS_FAILED]
    report = ReportInput(run)
    rows = {r.spec.toggle_name: r for r in report.rows}
    assert rows["eager"].bound.bound == "unclassified" and rows["eager"].headroom_text == "-"
    assert "FLOPs not counted" in rows["eager"].bound_evidence_text
    # channels-last avoided: no "eager is memory-bound, so channels-last should pay"
    assert "should pay" not in rows["channels-last"].recommendation.reason
    advice = report.groups[0].bound_advice
    assert "eager is memory-bound" not in advice and "FLOPs not counted" in advice and "no toggle" in advice
    (outcome,) = [o for o in expect.evaluate(run).outcomes if o.rule.metric == "bound"]
    assert outcome.outcome == "unknown" and "FLOPs not counted" in outcome.reason


def test_the_worker_stores_no_intensity_for_a_flop_count_that_failed():
    from perfgate.worker.roofline_counts import roofline_metrics

    assert "arithmetic_intensity" not in roofline_metrics(None, 1e7, 0.01)  # before: 0.0, read memory-bound
    assert roofline_metrics(None, 1e7, 0.01) == {"bytes_per_step": 1e7, "achieved_bytes_per_s": 1e9}
    assert roofline_metrics(0.0, 1e7, 0.01)["arithmetic_intensity"] == 0.0  # a real 0: copies only
    assert roofline_metrics(2e7, 1e7, None) == {"flops_per_step": 2e7, "bytes_per_step": 1e7,
                                                "arithmetic_intensity": 2.0}


# ---------------------------------------------------------------- untrusted and foreign ceilings


@pytest.mark.parametrize("flops, bandwidth", [(1e308, 1e10), (1e11, 1e-300), (1e11, 1e300), (1e-3, 1e10)])
def test_ceilings_no_device_has_are_ignored_and_the_report_still_draws(flops, bandwidth):
    """Before: a results.json carrying a ceiling of 1e308 FLOP/s (or a bandwidth of 1e-300 B/s) passed as a
    positive finite number, and the roofline chart's axis reached infinity: `perfgate report` crashed
    with OverflowError. Figures no device has are now ignored like any tampered value."""
    from fixtures.synthetic import roofline_run

    from perfgate.reports import html
    from perfgate.reports.base import ReportInput

    ceilings = {"cpu": {"flops": {"float32": flops}, "bandwidth": {"copy": bandwidth}}}
    assert roof_for(ceilings, "cpu").source == "default ridge"
    run = roofline_run()
    run.ceilings = ceilings
    (group,) = ReportInput(run).groups
    chart = html.roofline_chart(group, run.ceilings)
    assert chart.needs_ceilings  # none usable: the line naming `perfgate calibrate`, no chart
    # a case's own figures past any device: not placed, no crash
    run = roofline_run()
    run.case("operator_rollout/smoke/eager/cpu").metrics.update(arithmetic_intensity=1e308,
                                                                achieved_flops_per_s=1e308)
    (group,) = ReportInput(run).groups
    chart = html.roofline_chart(group, run.ceilings)
    assert any(u.startswith("eager (") for u in chart.unplaced) and chart.points


def test_ceilings_measured_on_another_gpu_are_not_used_for_this_one(tmp_path):
    """A ceilings.json under a CPU machine key (a run whose first case is on the CPU) holds the GPU that
    calibrate saw; a fleet of hosts with the same CPU and other GPUs shares that key. Before, an H100 run
    was placed against an A100's measured peaks; now a cuda entry whose device_name is not the run's GPU
    is left out (the spec sheet of the run's own GPU stands in) and the ceilings say why."""
    path = roofline.ceilings_path(tmp_path, "cpu-key")
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"schema": roofline.CEILINGS_SCHEMA,
                                "cpu": {"flops": {"float32": 1e11}, "bandwidth": {"copy": 1e10}, "threads": 1},
                                "cuda": {"flops": {"float32": 1.9e13}, "bandwidth": {"copy": 1.5e12},
                                         "device_name": "NVIDIA A100-SXM4-40GB"}}))
    env = {"machine_key": "cpu-key", "device_name": "NVIDIA H100 80GB HBM3", "threads": 1}
    got = roofline.ceilings_for_run(tmp_path, env)
    assert "cuda" not in got and got["cpu"]["flops"]["float32"] == 1e11
    assert any("NVIDIA A100-SXM4-40GB" in n and "NVIDIA H100 80GB HBM3" in n for n in got["not_used"])
    assert roof_for(got, "cuda").source == "spec sheet (H100 SXM)"
    # CPU ceilings measured with other threads than the run's: not this run's ceilings either
    got = roofline.ceilings_for_run(tmp_path, {**env, "threads": 4, "device_name": "NVIDIA A100-SXM4-40GB"})
    assert "cpu" not in got and got["cuda"]["flops"]["float32"] == 1.9e13
    assert any("1 thread" in n and "4" in n for n in got["not_used"])


def test_a_damaged_ceilings_file_is_named_not_silently_dropped(tmp_path):
    """A ceilings.json that fails its schema measured nothing, and the run goes on with the default ridge;
    before, nothing said so and the report read as if calibrate had never run."""
    path = roofline.ceilings_path(tmp_path, "cpu-key")
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"schema": roofline.CEILINGS_SCHEMA, "cpu": {"flops": {"float32": "fast"}}}))
    got = roofline.ceilings_for_run(tmp_path, {"machine_key": "cpu-key", "threads": 1})
    assert "cpu" not in got and got["source"] == str(path)
    assert all(str(path) in n and "calibrate --write" in n for n in got["not_used"])
    assert [n.split(":")[0] for n in got["not_used"]] == ["cpu", "cuda"]
    assert roof_for(got, "cpu").source == "default ridge"


def test_the_report_says_why_stored_ceilings_were_not_used():
    from fixtures.synthetic import roofline_run

    from perfgate.reports import html
    from perfgate.reports.base import ReportInput

    run = roofline_run()
    run.ceilings = {"not_used": ["cpu: measured with 1 thread(s), this run uses 4", "cuda: measured on X"]}
    (group,) = ReportInput(run).groups
    chart = html.roofline_chart(group, run.ceilings)
    assert chart.missing == ("this run carries no ceilings for cpu (the stored ones were not used: measured "
                             "with 1 thread(s), this run uses 4)")
