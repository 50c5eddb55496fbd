"""Tiny workloads for the profile-pass tests: a conv stack with a tight tolerance (any precision change
drifts), and a model with a deliberate graph break (a data-dependent ``.item()`` branch)."""

from __future__ import annotations

import torch
from torch import nn

from perfgate.workload import Built, Tolerance, Workload

_SIZES = {
    "smoke": {"steps": 3, "grid": 12, "channels": 4},
    "pr": {"steps": 10, "grid": 64, "channels": 16},
    "full": {"steps": 50, "grid": 128, "channels": 32},
}


class TightConv(Workload):
    name = "tight_conv"
    description = "two convolutions and a GELU per step; tolerance so tight that bf16 autocast drifts"
    sizes = _SIZES
    tolerance = Tolerance(rel_l2=1e-6)

    def build(self, params, device, dtype, variants):
        c = params["channels"]
        model = nn.Sequential(nn.Conv2d(2, c, 3, padding=1), nn.GELU(), nn.Conv2d(c, 2, 3, padding=1))
        model = model.to(device=device, dtype=dtype).eval()
        x0 = torch.randn(1, 2, params["grid"], params["grid"]).to(device=device, dtype=dtype)
        return Built(model=model, state=x0)

    def step(self, model, state, built, params):
        return 0.5 * model(state) + 0.5 * state


class BranchyModel(nn.Module):
    def __init__(self, channels: int) -> None:
        super().__init__()
        self.inp = nn.Linear(channels, channels)
        self.out = nn.Linear(channels, channels)

    def forward(self, x):
        h = torch.tanh(self.inp(x))
        # a data-dependent Python branch: dynamo must break the graph at .item()
        if h.sum().item() > 0:
            h = h * 2
        else:
            h = h - 1
        return torch.sigmoid(self.out(h))


class GraphBreak(Workload):
    name = "graph_break"
    description = "a small MLP with a .item() branch in forward: one deliberate graph break per call"
    sizes = _SIZES
    tolerance = Tolerance(rel_l2=1e-4)
    channels_last_applies = False

    def build(self, params, device, dtype, variants):
        model = BranchyModel(params["channels"]).to(device=device, dtype=dtype).eval()
        x0 = torch.randn(params["grid"], params["channels"]).to(device=device, dtype=dtype)
        return Built(model=model, state=x0)

    def step(self, model, state, built, params):
        return model(state)
