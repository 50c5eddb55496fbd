"""How long does the smoke suite take here? Wall time of `python -m perfgate run --suite smoke`, with load.

Runs the real CLI once (or --runs N times back to back, all with one `--compile-cache` folder, empty
before the first run: the first is cold, the later ones find every compile cached, as a CI job with a
restored cache does), prints the machine's load before and after (`os.getloadavg`), the
wall time per run against the targets (cold < 300 s, warm < 120 s on 2 cores; the layout issue asks a
newcomer's cold first run <= 240 s with every case settled), how many measured cases settled on their
precision and which ended on their budget instead (results.json's ``sampling.stopped``), and the slowest
cases by duration. The figures go into docs/workloads-catalog.md with the load noted.

    python benchmarks/smoke_suite_time.py [--runs 2] [-- extra perfgate run options]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from perfgate.model.results import load_results  # noqa: E402

TARGETS_S = {"cold": 300.0, "warm": 120.0}


def load_text() -> str:
    return " / ".join(f"{x:.2f}" for x in os.getloadavg())


def stopped(case) -> str:
    """Why the case's sampling stopped ('settled: ...', 'budget: ...'), '' without sampling metadata."""
    info = case.metadata.get("sampling")
    return str(info.get("stopped", "")) if isinstance(info, dict) else ""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=1, help="back-to-back runs (the first is cold)")
    parser.add_argument("extra", nargs="*", help="more `perfgate run` options, after --")
    args = parser.parse_args()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p))
    with tempfile.TemporaryDirectory(prefix="perfgate-smoke-time-") as tmp:
        for i in range(args.runs):
            kind = "cold" if i == 0 else "warm"
            out = Path(tmp) / f"run{i}"
            before = load_text()
            started = time.perf_counter()
            proc = subprocess.run([sys.executable, "-m", "perfgate", "run", "--suite", "smoke", "--out", str(out),
                                   "--compile-cache", str(Path(tmp) / "compile-cache"), *args.extra],
                                  cwd=ROOT, env=env, capture_output=True, text=True)
            wall = time.perf_counter() - started
            verdict = "within" if wall <= TARGETS_S[kind] else "OVER"
            print(f"run {i + 1} ({kind}): exit {proc.returncode}, wall {wall:.1f} s, {verdict} the "
                  f"{TARGETS_S[kind]:.0f} s target; load 1/5/15 min {before} before, {load_text()} after")
            if proc.returncode != 0:
                print(proc.stdout[-2000:] + proc.stderr[-2000:])
                return 1
            run = load_results(out / "results.json")
            statuses = [c.status for c in run.cases]
            print(f"  {len(statuses)} cases: {statuses.count('ok')} ok, {statuses.count('skipped')} skipped, "
                  f"{statuses.count('failed')} failed")
            measured = [c for c in run.cases if c.status == "ok"]
            unsettled = [c for c in measured if not str(stopped(c)).startswith("settled")]
            print(f"  {len(measured) - len(unsettled)} of {len(measured)} measured cases settled"
                  + "".join(f"\n    not settled: {c.spec.key}: {stopped(c)}" for c in unsettled))
            for case in sorted(run.cases, key=lambda c: -(c.duration_s or 0))[:8]:
                compiled = "  ".join(f"{k} {case.metrics[k]:.1f} s" for k in ("compile_cold_s", "compile_warm_s")
                                     if k in case.metrics)
                print(f"  {case.duration_s or 0:6.1f} s  {case.spec.key}  {case.status}  {compiled}".rstrip())
    return 0


if __name__ == "__main__":
    sys.exit(main())
