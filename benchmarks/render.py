"""Render a synthetic results file of 500 cases (with a comparison) into every format: time and sizes.

Targets: all formats under 2 s, report.html under 5 MB. Prints figures; asserts nothing, since
the machine may be shared. Run from the repository root:

    python benchmarks/render.py [--cases 500] [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "tests")]

from fixtures.synthetic import TOGGLES, synthetic_comparison, synthetic_run  # noqa: E402

from perfgate.model.results import load_results  # noqa: E402
from perfgate.reports import registry, write_all  # noqa: E402
from perfgate.reports.base import ReportInput  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=500)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    toggles = TOGGLES[:5]  # eager, compile, amp-bf16, channels-last, torchscript
    n_workloads = -(-args.cases // len(toggles))
    workloads = [f"workload_{i:03d}" for i in range(n_workloads)]
    slow = {f"{w}/smoke/channels-last/cpu": 1.3 for w in workloads[::7]}  # some regressions with sample charts
    base = synthetic_run(workloads, toggles=toggles, seed=1)
    cur = synthetic_run(workloads, toggles=toggles, seed=2, slow=slow,
                        extra_ops=dict.fromkeys(slow, 2))
    with tempfile.TemporaryDirectory() as tmp:
        results = Path(tmp) / "results.json"
        results.write_text(cur.dumps())
        baseline = synthetic_comparison(cur, base)  # built once: comparing is compare.py's cost, not ours
        print(f"{len(cur.cases)} cases, {len(baseline.verdicts)} verdicts; results.json "
              f"{results.stat().st_size / 1e6:.2f} MB; load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
        best: dict[str, float] = {}
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            run = load_results(results)
            comparison = synthetic_comparison(run, base)
            t_load = time.perf_counter()
            report = ReportInput(run, comparison, run_dir=Path(tmp))
            _ = report.rows
            t_rows = time.perf_counter()
            times = {"load results.json + compare (fixture)": t_load - t0, "shared rows": t_rows - t_load}
            for name, exporter in registry().items():
                t = time.perf_counter()
                write_all(report, tmp, [name])
                times[f"{name} -> {exporter.filename}"] = time.perf_counter() - t
            times["total (all formats, from file)"] = time.perf_counter() - t0
            for k, v in times.items():
                best[k] = min(best.get(k, v), v)
        for k, v in best.items():
            print(f"  {k:<40} {v * 1000:8.0f} ms (best of {args.repeat})")
        for exporter in registry().values():
            size = (Path(tmp) / exporter.filename).stat().st_size
            print(f"  {exporter.filename:<40} {size / 1e6:8.3f} MB")


if __name__ == "__main__":
    main()
