"""How much of the spread between worker processes, and between whole runs, the memory layout explains.

Runs one case of an outside workload family (benchmarks/gate_accuracy.py's ``conv16``, ``transformer``,
``rollout`` or ``matmul``) several times with a fixed number of worker processes, each run into an output
folder whose name has another length and from project paths of other lengths (what a user's ``--out`` and
checkout do), and prints, per run, every process's step time (the gate's per-process statistic, the 10th
percentile of its samples) by process index with the layout it drew; then the spread between processes
inside a run, between the runs' medians (what an unpaired comparison of two runs meets), and how many
performance modes the processes fall into (``perfgate.judging.timechange.performance_modes``).

    /work/main/.venv/bin/python benchmarks/layout_spread.py --family conv16 --runs 6 --processes 8
    PERFGATE_LAYOUT=fixed /work/main/.venv/bin/python benchmarks/layout_spread.py ...   # the old layouts
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gate_accuracy import make_project, perfgate  # noqa: E402

from perfgate.judging.timechange import performance_modes  # noqa: E402
from perfgate.model.results import load_results  # noqa: E402
from perfgate.util.stats import PROCESS_QUANTILE  # noqa: E402

FOLDER_NAMES = ("r", "run-folder-with-a-much-longer-name-than-the-first", "out-of-medium-length",
                "x" * 97, "report-2026-11-26", "a" * 33)
PROJECT_NAMES = ("p", "project-checkout-under-a-longer-path" * 2)


def run_once(proj: Path, name: str, processes: int) -> tuple[list[tuple[int, str, float]], float]:
    out = proj / "runs" / name
    t0 = time.perf_counter()
    proc = perfgate(["run", "--processes", str(processes), "--out", str(out)], proj)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"perfgate run failed ({proc.returncode}): {proc.stderr[-1500:]}")
    (case,) = load_results(out / "results.json").cases
    rows = [(p.process_index if p.process_index is not None else i, json.dumps(p.layout) if p.layout else "-",
             p.step_time(PROCESS_QUANTILE)) for i, p in enumerate(case.processes)]
    return rows, wall


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--family", default="conv16")
    ap.add_argument("--runs", type=int, default=6)
    ap.add_argument("--processes", type=int, default=8)
    ap.add_argument("--layouts", type=int, default=None,
                    help="[tool.perfgate.timing] layouts in the project (default: unset, perfgate's default)")
    ap.add_argument("--out", type=Path, help="write every run's per-process figures here as JSON")
    args = ap.parse_args()
    print(f"load before {os.getloadavg()}; PERFGATE_LAYOUT={os.environ.get('PERFGATE_LAYOUT', '(default)')}; "
          f"family {args.family}, {args.runs} runs x {args.processes} processes, layouts {args.layouts or '(default)'}",
          flush=True)
    record: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="layout-spread-") as tmp:
        projects = [make_project(Path(tmp) / name, 0.0, None, None, args.family) for name in PROJECT_NAMES]
        if args.layouts is not None:
            for proj in projects:
                with (proj / "pyproject.toml").open("a") as fh:
                    fh.write(f"\n[tool.perfgate.timing]\nlayouts = {args.layouts}\n")
        medians = []
        for run in range(args.runs):
            proj = projects[run % len(projects)]
            name = FOLDER_NAMES[run % len(FOLDER_NAMES)]
            rows, wall = run_once(proj, name, args.processes)
            times = [t for _, _, t in rows]
            logs = [math.log(t) for t in times]
            med = statistics.median(times)
            medians.append(med)
            modes = performance_modes(logs)
            print(f"run {run} (project path {len(str(proj))} chars, folder {len(name)} chars, {wall:.0f} s): median "
                  f"{med * 1e3:.3f} ms, processes {min(times) / med:.3f}-{max(times) / med:.3f}x of it, "
                  f"sd {statistics.stdev(logs) * 100:.1f}%, {len(modes)} mode(s)", flush=True)
            for index, layout, t in rows:
                print(f"    process {index:2d}  {t * 1e3:8.3f} ms  {t / med:.3f}x  layout {layout}")
            record.append({"run": run, "project_chars": len(str(proj)), "folder_chars": len(name), "wall_s": wall,
                           "processes": [{"index": i, "layout": lay, "step_time_s": t} for i, lay, t in rows]})
            if args.out:
                args.out.write_text(json.dumps(record, indent=1) + "\n")
    logs = [math.log(m) for m in medians]
    within = statistics.median(statistics.stdev([math.log(p["step_time_s"]) for p in r["processes"]]) for r in record)
    print(f"\nbetween runs: the run medians' sd {statistics.stdev(logs) * 100:.2f}% "
          f"(range {min(medians) / statistics.median(medians):.3f}-{max(medians) / statistics.median(medians):.3f}x); "
          f"between processes inside a run: median sd {within * 100:.2f}%")
    print(f"load after {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
