"""Detector-image simulator: per-pixel scattering physics with a structure-factor interpolation.

From WORKLOADS.md section 5. For every detector pixel (split into ``oversample^2`` sub-pixels) and every
source (a wavelength and a weight), the scattering vector follows from the geometry (detector distance,
pixel size, beam centre) and the wavelength; |q| indexes a tabulated structure factor F(|q|) with linear
interpolation; the intensity |F|^2, times the polarization factor and the pixel's solid angle, is summed
over sources and sub-pixels. The physics is written the way the team's fixed version is: constants are
tensors made once at construction, no ``.item()`` and no data-dependent branch, so torch.compile sees
one graph.

Sizes: grid 32^2 (smoke), 256^2 (pr), 512^2 (``pr-512``), 1024^2 (full). Their exit criteria: <= 3
kernels dominating the profile and >= 2x over the C reference at 1024^2 (the PyTorch version was 2.7x
slower). The construction cost (recompiles per construction) is measured by ``simulator_construction``,
which reuses :class:`DetectorPhysics` from this file.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from perfgate.workload import Built, Tolerance, Workload


def structure_factor_table(points: int, q_max: float, generator: torch.Generator) -> torch.Tensor:
    """A smooth, deterministic |F(q)| table: a few Gaussian Bragg-like peaks on a decaying background."""
    q = torch.linspace(0.0, q_max, points, dtype=torch.float64)
    peaks = q_max * (0.15 + 0.7 * torch.rand(6, generator=generator, dtype=torch.float64))
    heights = 1.0 + 4.0 * torch.rand(6, generator=generator, dtype=torch.float64)
    table = 10.0 * torch.exp(-q / (0.3 * q_max))
    table = table + (heights * torch.exp(-((q[:, None] - peaks) ** 2) / (2 * (0.01 * q_max) ** 2))).sum(-1)
    return table.float()


class DetectorPhysics(nn.Module):
    """Intensity image (H, W) of one exposure; every constant is a buffer, so one graph serves any geometry."""

    def __init__(self, grid: int, oversample: int, pixel_size: float, distance: float,
                 wavelengths: torch.Tensor, weights: torch.Tensor, table: torch.Tensor, q_max: float,
                 float_constants: bool = False) -> None:
        super().__init__()
        # float_constants: the distance as a Python float attribute, as the team's first version had it
        self.float_constants = float_constants
        self.distance_value = float(distance)
        # sub-pixel offsets in pixel units, centred in each pixel
        sub = (torch.arange(oversample, dtype=torch.float32) + 0.5) / oversample - 0.5
        idx = torch.arange(grid, dtype=torch.float32) - grid / 2 + 0.5
        coords = (idx[:, None] + sub[None, :]).reshape(-1)  # (grid * oversample,)
        self.register_buffer("coords", coords * pixel_size)
        self.register_buffer("distance", torch.tensor(distance))
        self.register_buffer("wavelengths", wavelengths)  # (S,)
        self.register_buffer("weights", weights)  # (S,)
        self.register_buffer("table", table)  # (P,)
        self.register_buffer("q_step", torch.tensor(q_max / (table.numel() - 1)))
        self.grid = grid
        self.oversample = oversample

    def forward(self) -> torch.Tensor:
        x = self.coords[:, None]  # (G*o, 1)
        y = self.coords[None, :]  # (1, G*o)
        if self.float_constants:
            # a constant tensor made inside the compiled region from a guarded Python float (the team's bug)
            distance = torch.full_like(self.distance, self.distance_value)
        else:
            distance = self.distance
        r = torch.sqrt(x * x + y * y + distance**2)
        cos2theta = distance / r  # cosine of the scattering angle 2*theta
        sin_theta = torch.sqrt(((1.0 - cos2theta) * 0.5).clamp_min(0.0))
        solid_angle = distance / r**3
        polarization = 0.5 * (1.0 + cos2theta**2)
        # |q| = 4 pi sin(theta) / lambda, one plane per source: (S, G*o, G*o)
        q = 4.0 * math.pi * sin_theta / self.wavelengths[:, None, None]
        pos = (q / self.q_step).clamp(0.0, self.table.numel() - 1.001)
        lower = pos.floor()
        frac = pos - lower
        i0 = lower.long()
        f = torch.lerp(self.table[i0], self.table[i0 + 1], frac)
        per_source = f * f * (polarization * solid_angle)
        image = (per_source * self.weights[:, None, None]).sum(0)
        o = self.oversample
        return image.reshape(self.grid, o, self.grid, o).sum(dim=(1, 3))


def make_physics(params: dict, device, dtype, distance: float | None = None,
                 float_constants: bool = False) -> DetectorPhysics:
    """A DetectorPhysics for ``params`` (grid, oversample, sources, table_points), deterministic per seed."""
    g = torch.Generator(device="cpu").manual_seed(int(params.get("seed", 3)))
    sources = int(params["sources"])
    wavelengths = 1.0 + 0.05 * torch.rand(sources, generator=g)  # angstrom, a narrow band
    weights = torch.softmax(torch.randn(sources, generator=g), 0)
    q_max = 4.0 * math.pi * 0.35  # past the largest sin(theta) of the detector at the shortest wavelength
    table = structure_factor_table(int(params.get("table_points", 4096)), q_max, g)
    pixel_size = float(params.get("pixel_size", 0.1)) * 1024 / int(params["grid"])  # same detector, any grid
    physics = DetectorPhysics(int(params["grid"]), int(params["oversample"]), pixel_size,
                              float(distance if distance is not None else params.get("distance", 100.0)),
                              wavelengths, weights, table, q_max, float_constants)
    return physics.to(device=device, dtype=dtype)


class DetectorSim(Workload):
    name = "detector_sim"
    description = "Per-pixel scattering simulator: q from geometry and wavelength, interpolated structure factor, summed"
    sizes = {
        "smoke": {"grid": 32, "oversample": 2, "sources": 4, "steps": 2},
        "pr": {"grid": 256, "oversample": 2, "sources": 4, "steps": 4},
        "pr-512": {"grid": 512, "oversample": 2, "sources": 4, "steps": 4},
        "full": {"grid": 1024, "oversample": 2, "sources": 4, "steps": 4},
    }
    tolerance = Tolerance(rel_l2=1e-3)
    channels_last_applies = False
    # The team's exit criteria as rules (docs/expectations.md). "<= 3 kernels dominate" holds on CPU too
    # (inductor fuses the physics into one C++ kernel) and the smoke suite checks it; ">= 2x at 1024^2"
    # is their target for CUDA, not yet measured by perfgate, so it warns.
    expectations = {
        "detector_sim/*/eager/*": ["status == ok", "accuracy == ok"],
        "detector_sim/*/compile/*": ["status == ok", "accuracy == ok", "kernel_concentration_80 <= 3"],
        "detector_sim/full/compile/cuda": [{"rule": "speedup_vs_eager >= 2", "severity": "warn"}],
    }

    def build(self, params, device, dtype, variants):
        physics = make_physics(params, device, dtype).eval()
        grid = int(params["grid"])
        return Built(model=physics, state=torch.zeros(grid, grid, device=device, dtype=dtype))

    def step(self, model, state, built, params):
        # one exposure per step, accumulated: the unit is a short series of frames
        return state + model()
