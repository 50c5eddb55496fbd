"""Change-point detection accuracy on synthetic series (perfgate.history.detect): prints figures over
several seeds (mean, and the spread between seeds as sd and range), asserts nothing. A pure-statistics
simulation: no timing in it, so any machine load leaves the figures the same.

    python benchmarks/history_detect.py [--series 200] [--points 100] [--cv 0.03] [--seeds 5]

Each series: ``--points`` values, Gaussian noise of coefficient of variation ``--cv`` (3%: run-to-run
spread of a per-run median step time on a shared 2-vCPU runner). Conditions:

- one step of the given size at a random position between 20% and 80% of the series. Found: a change
  point within 5 points of the step. False: every other change point, and every creep (the series has
  no trend besides its step; the creeps are also shown on their own);
- a transient: the given change for 10 points starting between the 20th and 70th point, then back.
  Found: change points within 5 points of both edges. False: every other change point and every creep;
- no step (noise only), at the default ``significance_per_test`` and at larger ones: false = every
  change point and every creep;
- three +2% steps (at 25/50/75%): reported as a regression creep or as three steps; flagged at all
  (any regression step or creep).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from perfgate.history.detect import DetectSettings, SeriesAnalysis, analyse  # noqa: E402
from perfgate.history.reading import Point  # noqa: E402

NEAR = 5  # a change point within this many points of a true edge found it
TRANSIENT_LENGTH = 10


def points(values: np.ndarray) -> list[Point]:
    return [Point(f"r{i}", None, None, "", None, float(v), None, None, None) for i, v in enumerate(values)]


def false_change_points(a: SeriesAnalysis, edges: list[int]) -> int:
    """Change points not within NEAR of a true edge (one per edge at most counts as found)."""
    false, unclaimed = 0, list(edges)
    for c in a.change_points:
        near = [e for e in unclaimed if abs(c.index - e) <= NEAR]
        if near:
            unclaimed.remove(near[0])
        else:
            false += 1
    return false


def found_all(a: SeriesAnalysis, edges: list[int]) -> bool:
    return all(any(abs(c.index - e) <= NEAR for c in a.change_points) for e in edges)


# One condition: (label, make a series and its true edges from an rng, settings). Its figures per seed:
# share of series with every edge found, false findings per series.
Condition = tuple[str, Callable[[np.random.Generator], tuple[np.ndarray, list[int]]], DetectSettings]


def conditions(n: int, cv: float, significance_levels: list[float]) -> list[Condition]:
    s = DetectSettings()

    def step(size: float) -> Callable[[np.random.Generator], tuple[np.ndarray, list[int]]]:
        def make(rng: np.random.Generator) -> tuple[np.ndarray, list[int]]:
            x = rng.normal(1.0, cv, n)
            at = int(rng.integers(n // 5, 4 * n // 5 + 1))
            x[at:] *= 1 + size
            return x, [at]
        return make

    def transient(size: float) -> Callable[[np.random.Generator], tuple[np.ndarray, list[int]]]:
        def make(rng: np.random.Generator) -> tuple[np.ndarray, list[int]]:
            x = rng.normal(1.0, cv, n)
            at = int(rng.integers(n // 5, 7 * n // 10 + 1))
            x[at:at + TRANSIENT_LENGTH] *= 1 + size
            return x, [at, at + TRANSIENT_LENGTH]
        return make

    def noise(rng: np.random.Generator) -> tuple[np.ndarray, list[int]]:
        return rng.normal(1.0, cv, n), []

    out: list[Condition] = [(f"step {size:+.0%}", step(size), s) for size in (0.02, 0.05, 0.10)]
    out += [(f"transient {size:+.0%} for {TRANSIENT_LENGTH} points", transient(size), s) for size in (0.05, 0.10)]
    out += [(f"no step, significance_per_test {level:g}", noise, DetectSettings(significance_per_test=level))
            for level in significance_levels]
    return out


def staircase(rng: np.random.Generator, n: int, cv: float, series: int) -> tuple[float, float]:
    """Three +2% steps: (share reported as a regression creep or three steps, share flagged at all)."""
    reported = flagged = 0
    for _ in range(series):
        x = rng.normal(1.0, cv, n)
        for at in (n // 4, n // 2, 3 * n // 4):
            x[at:] *= 1.02
        a = analyse("c", "step_time", points(x))
        creep = any(c.kind == "regression" for c in a.creeps)
        reported += creep or len(a.change_points) >= 3
        flagged += a.regressions > 0
    return reported / series, flagged / series


def spread(values: list[float], percent: bool) -> str:
    """mean ± sd [min, max] over the seeds."""
    v = np.array(values) * (100 if percent else 1)
    fmt = "{:.1f}%" if percent else "{:.3f}"
    return (f"{fmt.format(v.mean())} ± {fmt.format(v.std(ddof=1) if len(v) > 1 else 0.0)} "
            f"[{fmt.format(v.min())}, {fmt.format(v.max())}]")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--series", type=int, default=200, help="series per condition and seed")
    ap.add_argument("--points", type=int, default=100)
    ap.add_argument("--cv", type=float, default=0.03)
    ap.add_argument("--seeds", type=int, default=5, help="seeds 0..N-1, each a fresh set of series")
    args = ap.parse_args()
    s = DetectSettings()
    n = args.points
    levels = [s.significance_per_test, 1e-3, 1e-2]
    print(f"{args.series} series of {n} points per condition and seed, noise CV {args.cv:.0%}, window "
          f"{s.window}..{s.max_window}, significance_per_test {s.significance_per_test:g}, seeds 0-{args.seeds - 1}; "
          "figures: mean ± sd [min, max] over the seeds")
    t0 = time.perf_counter()
    conds = conditions(n, args.cv, levels)
    found: dict[str, list[float]] = {label: [] for label, _, _ in conds}
    false: dict[str, list[float]] = {label: [] for label, _, _ in conds}  # change points and creeps
    false_creeps: dict[str, list[float]] = {label: [] for label, _, _ in conds}  # the creeps among them
    stair_reported: list[float] = []
    stair_flagged: list[float] = []
    for seed in range(args.seeds):
        rng = np.random.default_rng(seed)
        for label, make, settings in conds:
            hits = wrong = creeps = 0
            for _ in range(args.series):
                x, edges = make(rng)
                a = analyse("c", "step_time", points(x), settings)
                hits += bool(edges) and found_all(a, edges)
                wrong += false_change_points(a, edges) + len(a.creeps)
                creeps += len(a.creeps)
            found[label].append(hits / args.series)
            false[label].append(wrong / args.series)
            false_creeps[label].append(creeps / args.series)
        reported, flagged = staircase(rng, n, args.cv, args.series)
        stair_reported.append(reported)
        stair_flagged.append(flagged)
    print("| series | found (every edge within 5 points) | false change points + creeps per series | "
          "of which creeps |")
    print("|---|---|---|---|")
    for label, _, _ in conds:
        hit = spread(found[label], True) if not label.startswith("no step") else "-"
        print(f"| {label} | {hit} | {spread(false[label], False)} | {spread(false_creeps[label], False)} |")
    print(f"| three +2% steps (at 25/50/75%) | reported as a regression creep or three steps: "
          f"{spread(stair_reported, True)}; flagged as a regression at all: {spread(stair_flagged, True)} | | |")
    print(f"{time.perf_counter() - t0:.1f} s in all")


if __name__ == "__main__":
    main()
