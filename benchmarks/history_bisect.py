"""`perfgate bisect` over a throwaway repository of 16 commits where one commit makes the step +5%
longer: commits measured, wall time, and whether it named the right commit. Prints figures, asserts
nothing.

    python benchmarks/history_bisect.py [--trials 3] [--step 0.05] [--processes 3]

The repository is tests/fixtures/gitrepo.py's (a small matmul chain; the step commit lengthens it),
the step at a different commit in each trial. Target: <= 5 measurements, log2 of the range
plus one.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.fixtures.gitrepo import make_repo  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--step", type=float, default=0.05)
    ap.add_argument("--processes", type=int, default=3)
    ap.add_argument("--samples", type=int, default=20)
    args = ap.parse_args()
    positions = [11, 4, 8, 13, 2, 6][:args.trials]
    env = {k: v for k, v in os.environ.items() if k != "PERFGATE_HISTORY_URL"}
    right = 0
    for trial, at in enumerate(positions, start=1):
        with tempfile.TemporaryDirectory() as tmp:
            repo = Path(tmp) / "repo"
            hashes = make_repo(repo, 16, at, step=args.step, processes=args.processes, samples=args.samples,
                               min_time_s=0.5)
            t0 = time.perf_counter()
            out = subprocess.run([sys.executable, "-m", "perfgate", "bisect", hashes[0], hashes[-1], "-w", "bisect_work"],
                                 cwd=repo, capture_output=True, text=True, env=env)
            wall = time.perf_counter() - t0
            named = re.search(r"first commit of the step: ([0-9a-f]{40})", out.stdout)
            measured = len(re.findall(r"^  [0-9a-f]{12} \(\d+ of \d+\) against GOOD", out.stdout, re.M))
            ok = bool(named) and named.group(1) == hashes[at]
            right += ok
            step_line = next((ln.strip() for ln in out.stdout.splitlines() if ln.startswith("  the step:")), "")
            print(f"trial {trial}: step +{args.step:.0%} at commit {at} of 15: "
                  f"{'named it' if ok else 'WRONG: ' + (out.stdout + out.stderr).strip().splitlines()[-1]}; "
                  f"{measured} measurement(s), {wall:.0f} s wall; {step_line}")
    print(f"{right} of {len(positions)} trials named the right commit (target: <= 5 measurements each)")


if __name__ == "__main__":
    main()
