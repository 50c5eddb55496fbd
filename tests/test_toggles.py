"""perfgate.worker.toggles: requirements -> skip reasons, and what prepare() does to a workload (torch, in process)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from perfgate.worker import toggles
from perfgate.workload import Built, Workload


class ConvWorkload(Workload):
    name = "conv_test"
    description = "one Conv2d applied twice (test only)"
    sizes = {s: {"steps": 2, "batch": 1, "channels": 4, "grid": 8} for s in ("smoke", "pr", "full")}

    def build(self, params, device, dtype, variants):
        torch.manual_seed(0)
        model = nn.Conv2d(params["channels"], params["channels"], 3, padding=1).to(device, dtype)
        state = torch.randn(params["batch"], params["channels"], params["grid"], params["grid"], device=device,
                            dtype=dtype)
        return Built(model=model, state=state)

    def step(self, model, state, built, params):
        built.extra.setdefault("seen", []).append(
            {"grad": torch.is_grad_enabled(), "inference": torch.is_inference_mode_enabled(),
             "autocast": torch.is_autocast_enabled("cpu")})
        return model(state)


class GradWorkload(ConvWorkload):
    name = "grad_test"
    needs_grad = True


PARAMS = ConvWorkload.sizes["smoke"]


def test_registry_is_plain_data_in_canonical_order():
    names = [t["name"] for t in toggles.catalog()]
    assert names[0] == "eager"
    for required in ("compile", "compile-reduce-overhead", "compile-max-autotune", "amp-bf16", "amp-fp16",
                     "channels-last", "cudnn-benchmark", "tf32", "cuda-graphs", "torchscript", "inference-mode"):
        assert required in names
    assert [t["order"] for t in toggles.catalog()] == list(range(len(names)))


@pytest.mark.parametrize("toggle_set,workload,reason", [
    (("cuda-graphs",), {}, "cuda-graphs: needs a CUDA device (this case runs on cpu)"),
    (("cudnn-benchmark",), {}, "cudnn-benchmark: needs a CUDA device"),
    (("compile-reduce-overhead",), {}, "needs a CUDA device"),
    (("inference-mode",), {"needs_grad": True}, "inference-mode: the workload's step needs autograd"),
    (("channels-last",), {"channels_last_applies": False}, "channels-last: the workload's state is not an NCHW"),
])
def test_unmet_requirements_become_skip_reasons(toggle_set, workload, reason):
    assert reason in toggles.skip_reason(toggle_set, "cpu", workload)


def test_what_cannot_run_on_this_machine_is_worded_for_the_machine():
    """`perfgate list` said `no: cuda-graphs: needs a CUDA device (this case runs on cpu)`: the toggle's name
    twice (it heads the line) and "this case" where no case exists. A case's skip reason keeps both."""
    for name in ("cuda-graphs", "tf32", "cudnn-benchmark", "compile-reduce-overhead"):
        assert toggles.unavailable_here(name, "cpu") == "needs a CUDA device (this machine has none torch can use)"
    assert toggles.unavailable_here("eager", "cpu") is None
    assert toggles.unavailable_here("channels-last", "cpu") is None  # a workload's matter, not the machine's
    assert toggles.skip_reason(("cuda-graphs",), "cpu", {}) == "cuda-graphs: needs a CUDA device (this case runs on cpu)"


def test_missing_cxx_compiler_is_said_for_the_machine_too(monkeypatch):
    monkeypatch.setattr(toggles, "_cxx_compiler", lambda: None)
    assert toggles.unavailable_here("compile", "cpu") == ("inductor on CPU needs a C++ compiler (g++ or clang++ on "
                                                          "PATH, or $CXX)")


def test_runnable_sets_have_no_reason():
    assert toggles.skip_reason(("eager",), "cpu", {}) is None
    assert toggles.skip_reason(("amp-bf16", "channels-last", "inference-mode"), "cpu", {}) is None
    assert toggles.skip_reason(("groupnorm",), "cpu", {}) is None  # a variant declares no requirements


def test_missing_cxx_compiler_skips_compile_on_cpu(monkeypatch):
    monkeypatch.setattr(toggles, "_cxx_compiler", lambda: None)
    reason = toggles.skip_reason(("compile", "amp-bf16"), "cpu", {})
    assert reason == "compile: inductor on CPU needs a C++ compiler (g++ or clang++ on PATH, or $CXX)"


def test_cuda_on_a_machine_without_it():
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    assert "torch.cuda.is_available() is False" in toggles.skip_reason(("tf32",), "cuda", {})


def test_unknown_requirement_is_a_programming_error():
    with pytest.raises(ValueError):
        toggles.unmet_requirement("quantum", "cpu")


def prepared(toggle_set, workload_cls=ConvWorkload, variants=frozenset()):
    p = toggles.prepare(workload_cls(), dict(PARAMS), "cpu", toggle_set, variants)
    return p, p.unit()


def test_eager_runs_in_no_grad_without_autocast():
    p, out = prepared(())
    seen = p.built.extra["seen"]
    assert len(seen) == 2  # steps_per_unit
    assert seen[0] == {"grad": False, "inference": False, "autocast": False}
    assert out.dtype == torch.float32 and not torch.backends.cudnn.benchmark


def test_needs_grad_keeps_autograd():
    p, out = prepared((), GradWorkload)
    assert p.built.extra["seen"][0]["grad"] and out.requires_grad


def test_inference_mode():
    p, out = prepared(("inference-mode",))
    assert p.built.extra["seen"][0]["inference"] and torch.is_inference(out)


def test_amp_bf16_autocasts_the_step():
    p, out = prepared(("amp-bf16",))
    assert p.built.extra["seen"][0]["autocast"] and out.dtype == torch.bfloat16


def test_channels_last_converts_model_and_state():
    p, out = prepared(("channels-last",))
    assert p.model.weight.is_contiguous(memory_format=torch.channels_last)
    assert p.built.state.is_contiguous(memory_format=torch.channels_last)
    assert not p.built.state.is_contiguous()
    eager = prepared(())[1]
    torch.testing.assert_close(out, eager, rtol=1e-5, atol=1e-5)


def test_tf32_flag_is_off_for_the_reference_and_on_for_the_toggle():
    prepared(("tf32",))
    assert torch.backends.cudnn.allow_tf32 and torch.get_float32_matmul_precision() == "high"
    prepared(())
    assert not torch.backends.cuda.matmul.allow_tf32 and torch.get_float32_matmul_precision() == "highest"


def test_torchscript_scripts_the_model():
    p, out = prepared(("torchscript",))
    assert isinstance(p.model, torch.jit.ScriptModule)
    torch.testing.assert_close(out, prepared(())[1])


@pytest.mark.slow
def test_compile_matches_eager():
    """The one compile test (inductor on CPU takes seconds): a compiled conv matches eager."""
    reason = toggles.skip_reason(("compile",), "cpu", {})
    if reason:
        pytest.skip(reason)
    p, out = prepared(("compile",))
    assert p.model is not None and hasattr(p.model, "_orig_mod")
    torch.testing.assert_close(out, prepared(())[1], rtol=1e-4, atol=1e-4)


def test_the_timed_unit_runs_in_the_same_modes_with_one_context_around_all_calls():
    p = toggles.prepare(ConvWorkload(), dict(PARAMS), "cpu", ("amp-bf16", "inference-mode"), frozenset())
    fn, context = p.timed()
    with context():
        out = fn()
        out = fn()
    assert torch.is_grad_enabled()  # restored afterwards
    seen = p.built.extra["seen"]
    assert len(seen) == 4
    assert all(s == {"grad": False, "inference": True, "autocast": True} for s in seen)
    assert out.dtype == torch.bfloat16


# ------------------------------------------------ workload hooks: declined toggles, self-compiling workloads


class SelfCompiling(Workload):
    name = "self_compiling"
    description = "records the compile mode perfgate hands it"
    sizes = {"smoke": {"steps": 1}, "pr": {"steps": 1}, "full": {"steps": 1}}
    applies_compile = True
    unsupported_toggles = {"cuda-graphs": "constructs inside the step"}

    def build(self, params, device, dtype, variants):
        self.mode_at_build = self.compile_mode
        return Built(model=torch.nn.Identity(), state=torch.ones(2, device=device))

    def step(self, model, state, built, params):
        return model(state) * 2


def test_a_self_compiling_workload_gets_the_mode_and_an_unwrapped_model():
    workload = SelfCompiling()
    prepared = toggles.prepare(workload, {"steps": 1}, "cpu", ("compile-max-autotune",), frozenset())
    assert workload.mode_at_build == "max-autotune"
    assert isinstance(prepared.model, torch.nn.Identity)  # not an OptimizedModule: nothing compiled here
    assert torch.equal(prepared.unit(), torch.full((2,), 2.0))
    toggles.prepare(workload, {"steps": 1}, "cpu", (), frozenset())
    assert workload.mode_at_build is None


def test_a_declined_toggle_is_a_skip_with_the_workload_reason():
    info = SelfCompiling.describe()
    reason = toggles.skip_reason(("cuda-graphs",), "cuda", info)
    assert reason == "cuda-graphs: does not apply to this workload: constructs inside the step"
    assert toggles.skip_reason(("eager",), "cpu", info) is None


def test_inference_mode_is_skipped_for_a_workload_that_needs_grad():
    reason = toggles.skip_reason(("inference-mode",), "cpu", {"needs_grad": True})
    assert reason and "autograd" in reason


# ------------------------------------------------ cuda-graphs and workloads that own generators


class _FakeDevice:
    def __init__(self, kind):
        self.type = kind


class _FakeGenerator:
    def __init__(self, kind):
        self.device = _FakeDevice(kind)


class _RecordingGraph:
    """Only perfgate's own wiring is tested with it: which generators reach register_generator_state."""

    def __init__(self):
        self.registered = []

    def register_generator_state(self, generator):
        self.registered.append(generator)


def test_only_cuda_generators_are_registered_with_the_graph():
    cpu, cuda = _FakeGenerator("cpu"), _FakeGenerator("cuda")
    graph = _RecordingGraph()
    assert toggles.register_generators(graph, (cpu, cuda)) == 1
    assert graph.registered == [cuda]
    assert toggles.register_generators(object(), (cpu,)) == 0  # nothing to register: no API needed


def test_a_torch_without_generator_registration_is_unsupported_not_an_error():
    from perfgate.worker.main import classify

    with pytest.raises(toggles.ToggleUnsupported, match="register_generator_state") as info:
        toggles.register_generators(object(), (_FakeGenerator("cuda"),))
    assert classify(info.value) == "unsupported"


def test_the_workload_start_runs_before_every_unit_outside_run_unit():
    """start_unit (the rollout's reseed) runs before each unit, so units repeat the same random draws."""
    from workloads.operator_rollout import OperatorRollout

    params = dict(OperatorRollout.sizes["smoke"])
    workload = OperatorRollout()
    p = toggles.prepare(workload, params, "cpu", (), frozenset())
    first, second = p.unit().clone(), p.unit().clone()
    fn, context = p.timed()
    with context():
        third = fn().clone()
    assert torch.equal(first, second) and torch.equal(first, third)
    assert workload.generators(p.built) == (p.built.extra["generator"],)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA: captures a real CUDA graph")
def test_cuda_graphs_replay_draws_the_same_random_numbers_as_eager():
    from workloads.operator_rollout import OperatorRollout

    params = dict(OperatorRollout.sizes["smoke"])
    torch.manual_seed(0)
    eager = toggles.prepare(OperatorRollout(), params, "cuda", (), frozenset()).unit().clone()
    torch.manual_seed(0)
    graphed = toggles.prepare(OperatorRollout(), params, "cuda", ("cuda-graphs",), frozenset())
    assert graphed.captured
    first, second = graphed.unit().clone(), graphed.unit().clone()
    torch.testing.assert_close(first, eager, rtol=1e-5, atol=1e-6)
    assert torch.equal(first, second)  # every replay reseeded before it, outside the graph


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA: captures a real CUDA graph")
def test_an_undeclared_generator_makes_cuda_graphs_unsupported_with_the_reason():
    from perfgate.worker.main import classify
    from workloads.operator_rollout import OperatorRollout

    class Undeclared(OperatorRollout):
        name = "undeclared"

        def generators(self, built):
            return ()

    params = dict(OperatorRollout.sizes["smoke"])
    with pytest.raises(toggles.ToggleUnsupported, match="cannot be captured") as info:
        toggles.prepare(Undeclared(), params, "cuda", ("cuda-graphs",), frozenset())
    assert classify(info.value) == "unsupported"
