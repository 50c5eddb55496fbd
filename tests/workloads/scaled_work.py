"""A tiny test workload whose amount of work per step is scaled from outside, without changing the case.

``PERFGATE_TEST_WORK_SCALE`` (default 1.0) multiplies the number of small matmuls per step, as a code
change would: the case identity (workload/size/toggles/device) and the output stay the same, only the
time moves. The gate's end-to-end tests use it to make a rerun measurably slower.
"""

from __future__ import annotations

import os

import torch

from perfgate.workload import Built, Tolerance, Workload


class ScaledWork(Workload):
    name = "scaled_work"
    description = "small matmul chain; PERFGATE_TEST_WORK_SCALE multiplies the work per step (gate tests)"
    sizes = {
        "smoke": {"n": 32, "reps": 20, "steps": 1},
        "pr": {"n": 64, "reps": 50, "steps": 1},
        "full": {"n": 128, "reps": 100, "steps": 1},
    }
    tolerance = Tolerance(rel_l2=1e-3)
    channels_last_applies = False

    def build(self, params, device, dtype, variants):
        g = torch.Generator(device="cpu").manual_seed(0)
        w = torch.randn(params["n"], params["n"], generator=g) / params["n"] ** 0.5
        x = torch.randn(params["n"], params["n"], generator=g)
        reps = max(1, round(params["reps"] * float(os.environ.get("PERFGATE_TEST_WORK_SCALE", "1.0"))))
        return Built(model=w.to(device=device, dtype=dtype), state=x.to(device=device, dtype=dtype),
                     extra={"reps": reps})

    def step(self, model, state, built, params):
        y = state
        for _ in range(built.extra["reps"]):
            y = torch.tanh(y @ model)
        # the output does not depend on the extra work: the same state goes on
        return state + 0.0 * y
