"""The sequential gate's error rates on simulated processes, with the real rules (perfgate.judging.sequential,
perfgate.judging.compare) and no workers: seconds instead of the hours benchmarks/gate_accuracy.py takes. The model
is perfgate.judging.gatesim's (tests/test_gate_simulation.py holds its rates to tolerances).

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
    .venv/bin/python benchmarks/gate_power_sim.py --modes stored --run-to-run 0.0075 --gate-run-to-run 0.0075 --unpaired-min-effect 0.5
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from perfgate.judging import decision  # noqa: E402
from perfgate.judging.gate_settings import GateSettings  # noqa: E402
from perfgate.judging.gatesim import Scenario, rates  # noqa: E402


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
    ap.add_argument("--paying", type=float, default=1.0,
                    help="share of head processes that pay the change (less than 1: a layout-dependent cost)")
    ap.add_argument("--changes", default="0,0.05,0.10")
    ap.add_argument("--modes", default="against,stored")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--gate-run-to-run", type=float, default=None, help="the gate's run_to_run (default: its own)")
    ap.add_argument("--unpaired-min-effect", type=float, default=None,
                    help="an unpaired comparison's minimum effect as a share of the threshold (default: "
                         f"decision.UNPAIRED_MIN_EFFECT_SHARE, {decision.UNPAIRED_MIN_EFFECT_SHARE:g})")
    args = ap.parse_args()
    if args.unpaired_min_effect is not None:  # what-if only: the rule reads the module's figure
        decision.UNPAIRED_MIN_EFFECT_SHARE = args.unpaired_min_effect
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
            scenario = Scenario(change=change, paired=mode == "against", between=args.between, within=args.within,
                                machine=args.machine, run_to_run=args.run_to_run, base_processes=args.base_processes,
                                fast_share=args.fast_share, fast_ratio=args.fast_ratio, slowed=args.slowed,
                                paying=args.paying)
            t0 = time.perf_counter()
            got = rates(scenario, gate, trials=args.trials, seed=args.seed)
            print(f"{mode:<8} {change:>6.0%} {got.count('regression'):>10} {got.count('win'):>5} "
                  f"{got.count('inconclusive'):>12} {got.count('unchanged'):>9} {got.median_processes:>18} "
                  f"{time.perf_counter() - t0:>5.0f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
