"""How well `--shard I/N` balances a suite, and how long `perfgate merge` takes: prints figures, asserts nothing.

    python benchmarks/shard_balance.py

Costs are synthetic (log-uniform 2-200 s per case, seeded: a suite mixing eager cases with compile and
autotune cases); the merge times real results.json files of synthetic shards (no torch).
"""

from __future__ import annotations

import random
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from fixtures.shards import suite_cases, write_shard_runs  # noqa: E402

from perfgate.gating.merge import merge_runs  # noqa: E402
from perfgate.running.plan import partition_cases  # noqa: E402


def main() -> None:
    cases = suite_cases()  # 5 workloads x 7 toggles = 35 cases
    rng = random.Random(0)
    costs = {c.key: 2.0 * 100 ** rng.random() for c in cases}
    total = sum(costs.values())
    print(f"{len(cases)} cases, {total:.0f} s in all, longest {max(costs.values()):.0f} s")
    print(" N  ideal/shard  balanced max  (x ideal)  equal-count slices max  (x ideal)")
    for n in range(1, 9):
        ideal = total / n
        balanced = max(sum(costs[c.key] for c in p) for p in partition_cases(cases, n, costs))
        naive = max(sum(costs[c.key] for c in cases[i::n]) for i in range(n))
        print(f"{n:2d}  {ideal:10.0f} s  {balanced:10.0f} s  ({balanced / ideal:5.2f})  "
              f"{naive:20.0f} s  ({naive / ideal:5.2f})")
    with tempfile.TemporaryDirectory() as tmp:
        many = [replace(c, size=f"s{i}") for i in range(20) for c in suite_cases()]  # 700 cases
        paths = write_shard_runs(Path(tmp), many, 8)
        t0 = time.perf_counter()
        run, _ = merge_runs(paths, Path(tmp) / "merged")
        print(f"merge of 8 shards, {len(run.cases)} cases: {time.perf_counter() - t0:.2f} s")


if __name__ == "__main__":
    main()
