"""The gate's rules on simulated worker processes: a hierarchical model of step times, run through the
real sequential looks and verdict (``sequential.ComparisonRule`` -> ``compare.case_time_change`` ->
``compare.judge_time``), with no workers. Seconds instead of the hours ``benchmarks/gate_accuracy.py``
takes; ``tests/test_gate_simulation.py`` holds the gate's false-alarm and power rates to tolerances with
it, and ``benchmarks/gate_power_sim.py`` / ``benchmarks/gate_ablation.py`` print them. No torch.

The model, one level inside the other (log scale, every term a relative sd):

- **run**: the head run as a whole moves against the baseline's by ``run_to_run`` (what a repeated run
  of the same comparison moves by);
- **process**: each worker process has its own persistent speed (``between``: layouts, the machine's
  state when it started);
- **modes** (optional): a share of each run's processes (drawn anew per run, and per side when unpaired,
  up to ``fast_share``) runs at ``fast_ratio``, and up to ``slowed`` of them are slowed 1.2-1.6x by the
  machine throughout;
- **sample**: 10 one-sample bursts per process scatter by ``within``; with lockstep pairs the two sides
  share the machine's speed per burst (``machine``), which cancels, as lockstep sampling does.

A change of ``change`` is paid by each head process with probability ``paying`` (1: by all of them; less:
code whose cost depends on where a process's layout put it, which only some processes pay).
"""

from __future__ import annotations

import dataclasses
import math
import random
from collections import Counter
from dataclasses import dataclass

from perfgate.judging.gate_settings import GateSettings
from perfgate.judging.sequential import ComparisonRule, make_sampler
from perfgate.model.results import CaseResult, CaseSpec, ProcessSamples

SPEC = CaseSpec(workload="simulated", size="smoke", toggles=("eager",), device="cpu")
STEP_S = 2.5e-3
BURSTS = 10


@dataclass(frozen=True)
class Scenario:
    """One simulated comparison's noise and change. The defaults are what a conv rollout showed on a
    2-core runner with the workers' allocator steady (docs/gate.md: per-pair log-ratio sd 3.7%, 1.4% of it
    from the samples; unpaired A/A ratios spread by 1.4% across 20 trials, paired ones by about 0.5%)."""

    change: float = 0.0  # head / base - 1
    paired: bool = True  # lockstep pairs (``--against``), else a stored baseline (unpaired)
    between: float = 0.024
    within: float = 0.026
    machine: float = 0.03
    run_to_run: float | None = None  # None: 0.5% paired, 1.4% unpaired
    base_processes: int = 8  # in a stored baseline
    fast_share: float = 0.0
    fast_ratio: float = 0.65
    slowed: float = 0.0
    paying: float = 1.0

    def run_shift(self) -> float:
        return self.run_to_run if self.run_to_run is not None else (0.005 if self.paired else 0.014)


def _process(rnd: random.Random, factor: float, machine: list[float], within: float, index: int) -> ProcessSamples:
    """One process's bursts around ``STEP_S * factor``; ``machine``: the machine's log speed per burst."""
    return ProcessSamples(samples_ns=[int(STEP_S * factor * math.exp(m + rnd.gauss(0, within)) * 1e9) for m in machine],
                          process_index=index, bursts=[1] * len(machine))


def trial(rnd: random.Random, scenario: Scenario, gate: GateSettings) -> tuple[str, int]:
    """One gated comparison under ``scenario``, looks and all: (the step-time verdict, head processes)."""
    s = scenario
    shift = math.exp(rnd.gauss(0, s.run_shift()))
    shares = {side: (rnd.uniform(0, s.fast_share), rnd.uniform(0, s.slowed)) for side in ("base", "head")}

    def mode(side: str) -> float:
        fast, slowed = shares["base" if s.paired else side]
        return ((s.fast_ratio if rnd.random() < fast else 1.0)
                * (rnd.uniform(1.2, 1.6) if rnd.random() < slowed else 1.0))

    def one(factor: float, index: int, machine: list[float], side: str) -> ProcessSamples:
        return _process(rnd, factor * mode(side) * math.exp(rnd.gauss(0, s.between)), machine, s.within, index)

    def machine() -> list[float]:
        return [rnd.gauss(0, s.machine) for _ in range(BURSTS)]

    stored = None if s.paired else CaseResult(spec=SPEC, status="ok", processes=[
        one(1.0, i, machine(), "base") for i in range(s.base_processes)])
    rule = ComparisonRule(gate, gate.threshold, "threshold", paired=s.paired, base=stored)
    sampler = make_sampler(gate, 3, rule)
    head: list[ProcessSamples] = []
    base: list[ProcessSamples] = []
    target = sampler.first
    while target is not None:
        while len(head) < target:
            m = machine()
            pays = rnd.random() < s.paying
            head.append(one((1 + (s.change if pays else 0.0)) * shift, len(head), m, "head"))
            base.append(one(1.0, len(base), m if s.paired else machine(), "base"))
        target = sampler.next_target(len(head), 1.0, CaseResult(spec=SPEC, status="ok", processes=list(head)),  # type: ignore[assignment]  # None ends the loop
                                     CaseResult(spec=SPEC, status="ok", processes=list(base)) if s.paired else None)
    return sampler.looks[-1]["result"].split()[0], len(head)


@dataclass(frozen=True)
class Rates:
    """What ``trials`` gated comparisons of one scenario ended as."""

    trials: int
    kinds: dict[str, int]
    median_processes: int

    def count(self, kind: str) -> int:
        return self.kinds.get(kind, 0)


def rates(scenario: Scenario, gate: GateSettings | None = None, trials: int = 20, seed: int = 1) -> Rates:
    """``trials`` seeded comparisons of ``scenario`` under ``gate`` (default: the gate's defaults with a
    1,000-resample bootstrap, which the t interval widens anyway). The same arguments, the same rates."""
    gate = gate or dataclasses.replace(GateSettings(), bootstrap_resamples=1000)
    rnd = random.Random(f"perfgate-gatesim:{seed}")
    runs = [trial(rnd, scenario, gate) for _ in range(trials)]
    processes = sorted(n for _, n in runs)
    return Rates(trials, dict(Counter(k for k, _ in runs)), processes[len(processes) // 2])
