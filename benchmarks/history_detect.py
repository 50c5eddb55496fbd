"""Change-point detection accuracy on synthetic series (perfgate.history.detect): prints figures against
the issue's targets, asserts nothing.

    python benchmarks/history_detect.py [--series 200] [--points 100] [--cv 0.03]

Each series: ``--points`` values, Gaussian noise of coefficient of variation ``--cv`` (3%: run-to-run
spread of a per-run median step time on a shared 2-vCPU runner), one step of the given size at a random
position between 20% and 80% of the series. Found: a change point within 5 points of the step. False:
every other change point. Also: pure noise (false change points only), and creep (three +2% steps at
25/50/75%) counted as reported when detect gives a regression creep or three steps.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from perfgate.history.detect import DetectSettings, analyse  # noqa: E402
from perfgate.history.store import Point  # noqa: E402


def points(values: np.ndarray) -> list[Point]:
    return [Point(f"r{i}", None, None, "", None, float(v), None, None, None) for i, v in enumerate(values)]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--series", type=int, default=200)
    ap.add_argument("--points", type=int, default=100)
    ap.add_argument("--cv", type=float, default=0.03)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    s = DetectSettings()
    n = args.points
    print(f"{args.series} series of {n} points, noise CV {args.cv:.0%}, window {s.window}..{s.max_window}, "
          f"max p {s.max_pvalue:g}")
    t0 = time.perf_counter()
    for step in (0.02, 0.05, 0.10):
        found = false = 0
        errors = []
        for _ in range(args.series):
            x = rng.normal(1.0, args.cv, n)
            at = int(rng.integers(n // 5, 4 * n // 5 + 1))
            x[at:] *= 1 + step
            cps = analyse("c", "step_time", points(x), s).change_points
            near = [c for c in cps if abs(c.index - at) <= 5]
            if near:
                found += 1
                errors.append(abs(near[0].change - step))
            false += len(cps) - (1 if near else 0)
        target = "  (target: >= 95% found, < 0.05 false per series)" if step == 0.05 else ""
        print(f"step {step:+.0%}: found within 5 points in {found / args.series:.1%} of series, "
              f"{false / args.series:.3f} false change points per series, "
              f"median |size error| {np.median(errors) * 100 if errors else float('nan'):.2f} percentage points{target}")
    false = sum(len(analyse("c", "step_time", points(rng.normal(1.0, args.cv, n)), s).change_points)
                for _ in range(args.series))
    print(f"no step: {false / args.series:.3f} false change points per series")
    reported = as_creep = 0
    for _ in range(args.series):
        x = rng.normal(1.0, args.cv, n)
        for at in (n // 4, n // 2, 3 * n // 4):
            x[at:] *= 1.02
        a = analyse("c", "step_time", points(x), s)
        creep = any(c.kind == "regression" for c in a.creeps)
        as_creep += creep
        reported += creep or len(a.change_points) >= 3
    print(f"three +2% steps: reported in {reported / args.series:.1%} of series "
          f"({as_creep / args.series:.1%} as a regression creep)")
    print(f"{time.perf_counter() - t0:.1f} s in all")


if __name__ == "__main__":
    main()
