"""The sequential gate's error rates on simulated processes, with the real rules (perfgate.sequential,
perfgate.compare) and no workers: seconds instead of the hours benchmarks/gate_accuracy.py takes.

Each simulated worker process has its own persistent speed (``--between``: the relative sd between
processes of the same code, the address-space layout effect of docs/gate.md), and its samples scatter
around it (``--within``). With ``--against`` the pair's samples also share a machine speed per burst (it
cancels, as lockstep sampling does); every run gets a common shift (``--run-to-run``: what a repeated run
of the same comparison would move by). The defaults are what a conv rollout showed on a 2-core runner
(2026-11-25: per-pair log-ratio sd 3.7%, of which 1.4% from the samples; A/A ratios' sd across 20 trials
1.2%). ``--fast-share`` and ``--slowed`` add performance modes: a share of each run's processes (drawn
anew per run, and per side when unpaired) in a fast state, as the conv rollout's processes are on this
machine with or without perfgate (docs/gate.md, "Performance modes, compared mode by mode").

    .venv/bin/python benchmarks/gate_power_sim.py --trials 300
    .venv/bin/python benchmarks/gate_power_sim.py --trials 200 --modes stored --base-processes 16 --fast-share 0.45 --slowed 0.1
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import random
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from perfgate.compare import GateSettings  # noqa: E402
from perfgate.model import CaseResult, CaseSpec, ProcessSamples  # noqa: E402
from perfgate.sequential import ComparisonRule, make_sampler  # noqa: E402

SPEC = CaseSpec(workload="w", size="smoke", toggles=("eager",), device="cpu")
STEP_S = 2.5e-3


def process(rnd: random.Random, factor: float, machine: list[float], within: float, index: int) -> ProcessSamples:
    """10 one-sample bursts around ``STEP_S * factor``; ``machine``: the machine's log speed per burst."""
    return ProcessSamples(samples_ns=[int(STEP_S * factor * math.exp(m + rnd.gauss(0, within)) * 1e9) for m in machine],
                          process_index=index, bursts=[1] * len(machine))


def trial(rnd: random.Random, change: float, paired: bool, args: argparse.Namespace, gate: GateSettings) -> tuple[str, int]:
    shift = math.exp(rnd.gauss(0, args.run_to_run))  # this run against the baseline's (or the base side's)
    # performance modes: in each run (each side when unpaired) a share of the processes, drawn anew per run
    # up to --fast-share, runs at --fast-ratio; up to --slowed of them are slowed 1.2-1.6x by the machine
    shares = {side: (rnd.uniform(0, args.fast_share), rnd.uniform(0, args.slowed)) for side in ("base", "head")}

    def mode(side: str) -> float:
        fast, slowed = shares["base" if paired else side]
        return ((args.fast_ratio if rnd.random() < fast else 1.0)
                * (rnd.uniform(1.2, 1.6) if rnd.random() < slowed else 1.0))

    def one(factor: float, index: int, machine: list[float], side: str = "base") -> ProcessSamples:
        return process(rnd, factor * mode(side) * math.exp(rnd.gauss(0, args.between)), machine, args.within, index)

    def machine() -> list[float]:
        return [rnd.gauss(0, args.machine) for _ in range(10)]

    stored = None if paired else CaseResult(spec=SPEC, status="ok", processes=[
        one(1.0, i, machine()) for i in range(args.base_processes)])
    rule = ComparisonRule(gate, gate.threshold, "threshold", paired=paired, base=stored)
    sampler = make_sampler(gate, 3, rule)
    head: list[ProcessSamples] = []
    base: list[ProcessSamples] = []
    target = sampler.first
    while target is not None:
        while len(head) < target:
            m = machine()
            head.append(one((1 + change) * shift, len(head), m, "head"))
            base.append(one(1.0, len(base), m if paired else machine()))
        target = sampler.next_target(len(head), 1.0, CaseResult(spec=SPEC, status="ok", processes=list(head)),
                                     CaseResult(spec=SPEC, status="ok", processes=list(base)) if paired else None)
    return sampler.looks[-1]["result"].split()[0], len(head)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=200)
    ap.add_argument("--between", type=float, default=0.024, help="relative sd between processes")
    ap.add_argument("--within", type=float, default=0.026, help="relative sd of one sample in its process")
    ap.add_argument("--machine", type=float, default=0.03, help="relative sd of the machine's speed per burst")
    ap.add_argument("--run-to-run", type=float, default=0.005, help="relative sd of a whole run's shift")
    ap.add_argument("--base-processes", type=int, default=8, help="processes in a stored baseline")
    ap.add_argument("--fast-share", type=float, default=0.0,
                    help="performance modes: each run's share of processes in a fast mode is drawn up to this")
    ap.add_argument("--fast-ratio", type=float, default=0.65, help="the fast mode's speed (the conv rollout: 0.65)")
    ap.add_argument("--slowed", type=float, default=0.0, help="each run's share of processes slowed 1.2-1.6x, drawn up to this")
    ap.add_argument("--changes", default="0,0.05,0.10")
    ap.add_argument("--modes", default="against,stored")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--gate-run-to-run", type=float, default=None, help="the gate's run_to_run (default: its own)")
    args = ap.parse_args()
    gate = GateSettings(bootstrap_resamples=1000)
    if args.gate_run_to_run is not None:
        gate = dataclasses.replace(gate, run_to_run=args.gate_run_to_run)
    print(f"between {args.between:.1%}, within {args.within:.1%}, machine {args.machine:.1%}, run-to-run "
          f"{args.run_to_run:.1%}, stored baseline {args.base_processes} processes, {args.trials} trials, "
          f"fast mode up to {args.fast_share:.0%} of a run at {args.fast_ratio:g}x, slowed up to {args.slowed:.0%}")
    print(f"{'mode':<8} {'change':>6} {'regression':>10} {'win':>5} {'inconclusive':>12} {'unchanged':>9} "
          f"{'processes (median)':>18} {'s':>5}")
    for mode in args.modes.split(","):
        for change in (float(c) for c in args.changes.split(",")):
            rnd = random.Random(args.seed)
            t0 = time.perf_counter()
            runs = [trial(rnd, change, mode == "against", args, gate) for _ in range(args.trials)]
            kinds = Counter(k for k, _ in runs)
            procs = sorted(n for _, n in runs)
            print(f"{mode:<8} {change:>6.0%} {kinds['regression']:>10} {kinds['win']:>5} {kinds['inconclusive']:>12} "
                  f"{kinds['unchanged']:>9} {procs[len(procs) // 2]:>18} {time.perf_counter() - t0:>5.0f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
