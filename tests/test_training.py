"""Training workloads (perfgate.workload.TrainingWorkload): a step is forward, loss, backward and optimizer
step, its state carried across steps; drift is the parameters after a unit against fp32; the training
toggles (amp-fp16 with a gradient scaler, optimizer-foreach/fused, set-to-none, compile of the whole step)."""

from __future__ import annotations

import json
import re

import pytest
import torch
from conftest import REPO, run_cli

from perfgate.model.results import CaseSpec
from perfgate.worker import drift, roofline_counts, toggles
from perfgate.worker.discovery import discover
from perfgate.workload import TrainingWorkload, WorkloadError, check_loss

WORKLOADS = discover([REPO / "workloads"])


def make(name: str = "operator_training") -> TrainingWorkload:
    return WORKLOADS.workloads[name][0]()


def prepared(toggle_set: tuple[str, ...] = (), variants: frozenset[str] = frozenset(), **override):
    workload = make()
    params = {**workload.sizes["smoke"], **override}
    return workload, params, toggles.prepare(workload, params, "cpu", toggle_set, variants)


def flat(parameters) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in parameters]).clone()


@pytest.mark.slow  # trains a few steps in process: seconds on a loaded 2-core machine
def test_each_step_trains_the_parameters_and_each_unit_starts_from_the_same_ones():
    workload, params, p = prepared()
    model, built = p.model, p.built
    initial = flat(model.parameters())
    end = workload.output(p.unit()).clone()
    assert not torch.equal(end, initial)
    trainer = built.trainer
    # the optimizer's state carried across the unit's steps: AdamW's step count and moments
    (state, *_) = trainer.optimizer.state.values()
    assert float(state["step"]) == params["steps"] and state["exp_avg"].abs().sum() > 0
    assert torch.equal(workload.output(p.unit()), end)  # restored: every unit repeats the same steps
    trainer.restore()
    assert torch.equal(flat(model.parameters()), initial) and float(state["step"]) == 0
    workload.start_unit(built, params)
    one = workload.output(workload.step(model, None, built, params)).clone()
    two = workload.output(workload.step(model, None, built, params)).clone()
    assert not torch.equal(one, initial) and not torch.equal(two, one)


@pytest.mark.slow  # trains a few steps in process: seconds on a loaded 2-core machine
def test_the_reference_is_a_plain_fp32_step_and_the_toggles_choose_the_optimizer_and_zero_grad():
    _, _, eager = prepared()
    eager.unit()
    described = eager.built.trainer.describe()
    assert described["implementation"] == "for-loop" and described["zero_grad"] == "zeros"
    assert described["grad_scaler"] is None and described["autocast"] is None and described["optimizer"] == "AdamW"
    expected = flat(eager.built.trainer.parameters)
    for toggle, key in (("optimizer-foreach", "foreach"), ("optimizer-fused", "fused")):
        _, _, p = prepared((toggle,))
        out = p.unit()
        assert p.built.trainer.optimizer.defaults[key] is True
        # another order of the same sums: Adam's update of a near-zero gradient may flip (a few entries by ~lr)
        assert (flat(out) - expected).norm() <= 1e-3 * expected.norm(), toggle
    _, _, p = prepared(("set-to-none",))
    assert torch.equal(flat(p.unit()), expected)  # freed and zeroed gradients: the same numbers
    assert p.built.trainer.describe()["zero_grad"] == "set_to_none"


@pytest.mark.slow  # trains a few steps in process: seconds on a loaded 2-core machine
def test_amp_fp16_scales_the_loss_and_autocasts_the_forward_only():
    _, _, p = prepared(("amp-fp16",))
    out = p.unit()
    trainer = p.built.trainer
    assert trainer.scaler is not None and trainer.describe()["autocast"] == "float16"
    scaler = trainer.describe()["grad_scaler"]
    assert scaler["init_scale"] == 65536.0 and 0 < scaler["scale"] <= 65536.0
    # backward and the optimizer ran outside autocast: the parameters and their gradients stay fp32
    assert all(t.dtype == torch.float32 and t.grad.dtype == torch.float32 for t in out)
    _, _, bf16 = prepared(("amp-bf16",))
    bf16.unit()
    assert bf16.built.trainer.scaler is None and bf16.built.trainer.describe()["autocast"] == "bfloat16"


@pytest.mark.slow  # trains a few steps in process: seconds on a loaded 2-core machine
def test_activation_checkpointing_recomputes_the_same_numbers():
    _, _, plain = prepared()
    _, _, checkpointed = prepared((), frozenset({"checkpoint"}))
    assert torch.allclose(flat(checkpointed.unit()), flat(plain.unit()), rtol=1e-5, atol=1e-7)


@pytest.mark.slow  # trains a few steps in process: seconds on a loaded 2-core machine
def test_the_flop_count_includes_the_backward_pass():
    from torch.utils.flop_counter import FlopCounterMode

    workload = make()
    params = workload.sizes["smoke"]
    spec = CaseSpec(workload=workload.name, size="smoke", toggles=("eager",), device="cpu",
                    params=tuple(sorted(params.items())))
    ref = workload.build(params, torch.device("cpu"), torch.float32, frozenset())
    training = roofline_counts.flops_per_step(spec, workload, ref)
    counter = FlopCounterMode(display=False)
    with counter, torch.no_grad():
        workload.loss(ref.model, ref.state, ref, params)
    forward = counter.get_total_flops()
    # backward computes the weights' and the activations' gradients: about twice the forward's FLOPs
    assert forward > 0 and 2.5 * forward <= training <= 3.2 * forward


@pytest.mark.slow  # trains a few steps in process: seconds on a loaded 2-core machine
def test_drift_is_the_parameters_after_the_unit_against_fp32_and_float64():
    workload, params, p = prepared(("amp-bf16",))
    spec = CaseSpec(workload=workload.name, size="smoke", toggles=("amp-bf16",), device="cpu",
                    params=tuple(sorted(params.items())))
    p.unit()  # timed units before the check: it must start again from the initial parameters
    accuracy, _ = drift.reference_check({"seed": 0}, spec, workload, p)
    assert [row["step"] for row in accuracy["horizons"]] == drift.horizons(params["steps"])
    assert 0 < accuracy["rel_l2"] <= workload.tolerance.rel_l2 and accuracy["verdict"] == "ok"
    assert all(0 < row["floor"] < row["rel_l2"] for row in accuracy["horizons"])


@pytest.mark.parametrize("loss,needle", [
    (None, "loss() returned NoneType None, not a one-element tensor that requires grad"),
    (torch.ones(3, requires_grad=True), "loss() returned a tensor of shape (3,), not"),
    (torch.tensor(1.0), "loss() returned a tensor that does not require grad"),
])
def test_a_loss_that_cannot_be_backpropagated_is_one_line_naming_the_workload(loss, needle):
    with pytest.raises(WorkloadError) as info:
        check_loss("w", loss)
    assert str(info.value).startswith("workload 'w': ") and needle in str(info.value)
    assert "\n" not in str(info.value)


def test_the_training_toggles_skip_a_workload_that_does_not_train():
    for name in ("optimizer-foreach", "optimizer-fused", "set-to-none"):
        assert toggles.skip_reason((name,), "cpu", {"trains": False}) == \
            f"{name}: the workload's step is no training step (it has no optimizer)"
        assert toggles.skip_reason((name,), "cpu", make().describe()) is None
        assert toggles.unavailable_here(name, "cpu") is None  # a workload's matter, not the machine's
    assert "cuda-graphs: does not apply" in toggles.skip_reason(("cuda-graphs",), "cuda", make().describe())


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_on_a_gpu_training_steps_run_under_amp_and_each_optimizer_implementation():
    workload = make()
    params = workload.sizes["smoke"]
    eager = flat(toggles.prepare(workload, params, "cuda", (), frozenset()).unit())
    for toggle_set in (("amp-fp16",), ("amp-bf16",), ("optimizer-foreach",), ("optimizer-fused", "set-to-none")):
        p = toggles.prepare(make(), params, "cuda", toggle_set, frozenset())
        out = p.unit()
        torch.cuda.synchronize()
        assert all(t.is_cuda and t.dtype == torch.float32 for t in out), toggle_set
        assert (p.built.trainer.scaler is not None) == ("amp-fp16" in toggle_set)
        assert torch.allclose(flat(out), eager, rtol=0, atol=1e-2), toggle_set  # lr 1e-3 x 3 steps at most apart


# ------------------------------------------------------------------ through the real CLI


def doc_example(path: str, marker: str) -> str:
    text = (REPO / path).read_text()
    return re.search(r"```python\n(.*?)```", text[text.index(marker):], re.S).group(1)


@pytest.mark.slow
def test_training_cases_run_measure_and_judge_drift_under_perfgate_run(tmp_path):
    """The documented training example and the shipped operator_training, at smoke size: every case ok,
    its drift judged on the parameters against fp32 and float64, the fp16 case through its scaler."""
    (tmp_path / "wl").mkdir()
    (tmp_path / "wl" / "mlp_regression.py").write_text(doc_example("docs/workloads.md", "tests/test_training.py runs"))
    out = tmp_path / "run"
    proc = run_cli("run", "--workloads-dir", str(tmp_path / "wl"), "-w", "mlp_regression", "-w", "operator_training",
                   "-t", "eager", "-t", "amp-fp16", "-t", "optimizer-fused+set-to-none", "-t", "checkpoint",
                   "--size", "smoke", "--processes", "1", "--samples", "3", "--out", str(out))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    cases = {c["key"]: c for c in json.loads((out / "results.json").read_text())["cases"]}
    assert set(cases) == {f"{w}/smoke/{t}/cpu" for w in ("mlp_regression", "operator_training")
                          for t in ("eager", "amp-fp16", "optimizer-fused+set-to-none")} \
        | {"operator_training/smoke/checkpoint/cpu"}
    for key, case in cases.items():
        assert case["status"] == "ok", (key, case.get("message"))
        accuracy = case["accuracy"]
        assert accuracy["verdict"] == "ok" and len(accuracy["horizons"]) >= 2, (key, accuracy)
        training = case["metadata"]["training"]
        assert training["optimizer"] == "AdamW" and training["parameters"] > 0
        assert case["metrics"]["flops_per_step"] > 0 and case["metrics"]["aten_ops_per_step"] > 0
        assert (training["grad_scaler"] is not None) == ("amp-fp16" in key), key
    fused = cases["operator_training/smoke/optimizer-fused+set-to-none/cpu"]["metadata"]["training"]
    assert fused["implementation"] == "fused" and fused["zero_grad"] == "set_to_none"
