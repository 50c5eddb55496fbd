"""Toggle application hooks a workload can use: declined toggles, and compiling inside its own step."""

from __future__ import annotations

import torch

from perfgate import toggles
from perfgate.workload import Built, Workload


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
