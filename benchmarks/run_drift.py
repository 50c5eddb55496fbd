"""How far whole runs move on this machine, and how much of it a reference workload in the same run sees.

Stored-baseline mode compares a run with one measured minutes or days before; whatever moves a whole run
(the machine's speed, a neighbour's load) moves the ratio. This benchmark runs one throwaway project N
times in a row, each run measuring two cases with the same processes: the conv rollout of
``gate_accuracy.py`` (7 blocks, 64x64, batch 2, T=40) and its matmul chain, unchanged code both. Per run
and case it takes the gate's own per-process step time (the 10th percentile of each process's samples)
and the median over processes, then reports:

- each case's run-to-run sd (log) and the correlation of the two cases' run values;
- over every pair of runs, the sd of the rollout's ratio as stored mode sees it, and of the same ratio
  divided by the matmul chain's ratio between the same two runs (a machine-speed reference);
- the per-index pattern: each process index's mean deviation from its run's median (a fixed layout per
  index shows as a steady offset).

    /work/main/.venv/bin/python benchmarks/run_drift.py --runs 20 --processes 6 --out drift.json
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import gate_accuracy  # noqa: E402 - the benchmark's own workloads and perfgate runner

from perfgate.model.results import load_results  # noqa: E402
from perfgate.util.stats import PROCESS_QUANTILE  # noqa: E402

CASES = {"rollout": "gate_knob", "matmul": "ref_knob"}


def make_project(root: Path) -> Path:
    """gate_accuracy's rollout project with its matmul chain as a second workload, both in the suite."""
    gate_accuracy.make_project(root, 0.0, None, None, "rollout")
    matmul = gate_accuracy.workload_text("matmul", 0.0)
    (root / "workloads" / "ref_knob.py").write_text(
        matmul.replace('name = "gate_knob"', 'name = "ref_knob"').replace("class GateKnob", "class RefKnob"))
    pyproject = root / "pyproject.toml"
    pyproject.write_text(pyproject.read_text().replace('workloads = ["gate_knob"]',
                                                       'workloads = ["gate_knob", "ref_knob"]'))
    return root


def run_values(run_dir: Path, quantile: float) -> dict[str, list[float]]:
    """Per case: each process's step time (seconds), in process order."""
    out: dict[str, list[float]] = {}
    for case in load_results(run_dir / "results.json").cases:
        out[case.spec.workload] = [p.step_time(quantile) for p in case.processes]
    return out


def summarize(rows: list[dict[str, list[float]]]) -> dict[str, float]:
    logs = {name: [math.log(statistics.median(r[wl])) for r in rows] for name, wl in CASES.items()}
    a, b = logs["rollout"], logs["matmul"]
    raw = [a[j] - a[i] for i, j in itertools.combinations(range(len(a)), 2)]
    norm = [(a[j] - a[i]) - (b[j] - b[i]) for i, j in itertools.combinations(range(len(a)), 2)]
    try:
        corr = statistics.correlation(a, b)
        slope = corr * statistics.stdev(a) / statistics.stdev(b)
    except statistics.StatisticsError:  # a case that did not move at all: no correlation to speak of
        corr = slope = math.nan
    out = {"runs": len(rows), "sd_rollout": statistics.stdev(a), "sd_matmul": statistics.stdev(b),
           "correlation": corr, "slope": slope,
           "pair_sd_raw": statistics.pstdev(raw), "pair_sd_normalized": statistics.pstdev(norm),
           "pairs_beyond_3pct_raw": sum(abs(x) > math.log1p(0.03) for x in raw) / len(raw),
           "pairs_beyond_3pct_normalized": sum(abs(x) > math.log1p(0.03) for x in norm) / len(norm)}
    for name, wl in CASES.items():
        n = min(len(r[wl]) for r in rows)
        dev = [[math.log(r[wl][i]) - math.log(statistics.median(r[wl])) for r in rows] for i in range(n)]
        out[f"index_offsets_{name}"] = [round(math.expm1(statistics.mean(d)), 4) for d in dev]
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--processes", type=int, default=6, help="processes per case, fixed (no adaptive stop)")
    ap.add_argument("--quantile", type=float, default=PROCESS_QUANTILE, help="per-process quantile (the gate's default)")
    ap.add_argument("--name-width", type=int, default=3,
                    help="digits in the run folders' names (r000, r001, ...): another width, other layouts")
    ap.add_argument("--out", type=Path, default=None, help="write every run's values and the summary as JSON")
    args = ap.parse_args()
    if args.runs < 3 or args.processes < 1 or not 1 <= args.name_width <= 200:
        ap.error("--runs must be at least 3, --processes at least 1 and --name-width 1 to 200")
    rows: list[dict[str, list[float]]] = []
    with tempfile.TemporaryDirectory(prefix="run-drift-") as tmp:
        proj = make_project(Path(tmp) / "proj")
        for r in range(args.runs):
            run_dir = proj / "runs" / f"r{r:0{args.name_width}d}"  # names of one length: the same layouts
            t0 = time.perf_counter()
            proc = gate_accuracy.perfgate(["run", "--processes", str(args.processes), "--out", str(run_dir)], proj,
                                          {"GATE_KNOB_EXTRA": "0.00"})
            if proc.returncode != 0:
                print(proc.stdout[-2000:], proc.stderr[-2000:])
                return 3
            rows.append(run_values(run_dir, args.quantile))
            shown = "  ".join(f"{name} {statistics.median(rows[-1][wl]) * 1e6:8.1f} us"
                              for name, wl in CASES.items())
            print(f"run {r:3d}  {time.strftime('%H:%M:%S')}  {time.perf_counter() - t0:5.1f} s  {shown}", flush=True)
    summary = summarize(rows)
    for key, value in summary.items():
        print(f"{key:<30} {value if isinstance(value, (int, list)) else f'{value:.4f}'}")
    if args.out:
        args.out.write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()}, "summary": summary,
                                        "runs": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
