"""Where does a GPU case's between-process spread come from? Fresh processes, perfgate's workload code but
not its runner: each builds one workload case (default: operator_rollout at pr, eager), runs its units for
``--seconds`` with the device synchronised after each, and reports its median unit time. Processes come in
turns of each variant, in alternating order, so every variant samples the same minutes of the machine:

  free     the process runs where the scheduler puts it (how perfgate's plain-run workers run)
  pinned   the process first pins itself to one CPU (a different one per process, round robin)

On the first GPU check (2026-11-26, one H200, docs/lab-record.md) eager cases, whose steps are bound by
the host's launches, spread 7-84% between processes while captured graphs spread 0.2-0.3% and the SM clock
sat at its maximum throughout: the spread is the host's. This tells whether pinning the host thread removes
it (then perfgate's GPU workers should pin), or not (then it is a per-process state like the CPU's modes,
docs/gate.md). Runs on CPU too (``--device cpu``) to check itself.

    python benchmarks/gpu_spread.py --processes 8 --seconds 2 [--workload operator_rollout --size pr]
        [--device cuda] [--out spread.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
VARIANTS = ("free", "pinned")

CHILD = r'''
import json, os, statistics, sys, time
args = json.loads(sys.argv[1])
if args["pin"] is not None:
    os.sched_setaffinity(0, {args["pin"]})
import torch
torch.set_num_threads(1)
from perfgate.worker.discovery import find
cls, _ = find([args["workloads"]], args["workload"])
w = cls()
params = dict(cls.sizes[args["size"]])
device = torch.device(args["device"])
built = w.build(params, device, torch.float32, frozenset())
sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)

def unit():
    w.start_unit(built, params)
    with torch.no_grad():
        out = w.run_unit(built.model, built, params)
    sync()
    return out

for _ in range(5):
    unit()
times = []
end = time.perf_counter() + args["seconds"]
while time.perf_counter() < end:
    t0 = time.perf_counter()
    unit()
    times.append(time.perf_counter() - t0)
steps = w.steps_per_unit(params)
print(json.dumps({"median_step_s": statistics.median(times) / steps, "units": len(times),
                  "cpus": sorted(os.sched_getaffinity(0))}))
'''


def spread(values: list[float]) -> dict[str, float]:
    """Process medians' spread: (max - min) / min and a robust sd (MAD x 1.4826) relative to the median."""
    med = statistics.median(values)
    mad = statistics.median(abs(v - med) for v in values)
    return {"median_s": med, "min_s": min(values), "max_s": max(values),
            "range_pct": 100 * (max(values) - min(values)) / min(values), "robust_sd_pct": 100 * 1.4826 * mad / med}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--processes", type=int, default=8, help="processes per variant (default 8)")
    ap.add_argument("--seconds", type=float, default=2.0, help="seconds of units per process (default 2)")
    ap.add_argument("--workload", default="operator_rollout")
    ap.add_argument("--size", default="pr")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--timeout", type=float, default=60.0, help="seconds per process before it is killed")
    ap.add_argument("--out", type=Path, help="write the processes and the summary here as JSON")
    args = ap.parse_args(argv)
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else [0]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p),
           "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    rows: list[dict] = []
    for i in range(args.processes):
        for variant in (VARIANTS if i % 2 == 0 else VARIANTS[::-1]):
            child = {"workloads": str(REPO / "workloads"), "workload": args.workload, "size": args.size,
                     "device": args.device, "seconds": args.seconds,
                     "pin": cpus[i % len(cpus)] if variant == "pinned" else None}
            started = time.perf_counter()
            try:
                proc = subprocess.run([sys.executable, "-c", CHILD, json.dumps(child)], capture_output=True,
                                      text=True, timeout=args.timeout, env=env)
            except subprocess.TimeoutExpired:
                rows.append({"variant": variant, "index": i, "error": f"timed out after {args.timeout:.0f} s"})
                continue
            row = {"variant": variant, "index": i, "wall_s": round(time.perf_counter() - started, 2)}
            if proc.returncode == 0:
                row.update(json.loads(proc.stdout.strip().splitlines()[-1]))
            else:
                row["error"] = (proc.stderr.strip().splitlines() or ["(no output)"])[-1][:300]
            rows.append(row)
            print(f"{variant:<7} {i:>2}  " + (f"{row['median_step_s'] * 1e6:10.1f} us/step  {row['units']} units"
                                           if "median_step_s" in row else row["error"]), flush=True)
    summary = {}
    for variant in VARIANTS:
        values = [r["median_step_s"] for r in rows if r["variant"] == variant and "median_step_s" in r]
        if values:
            summary[variant] = {"processes": len(values), **spread(values)}
            s = summary[variant]
            print(f"{variant:<7} {len(values)} processes: median {s['median_s'] * 1e6:.1f} us/step, range "
                  f"{s['range_pct']:.1f}%, robust sd {s['robust_sd_pct']:.1f}%")
    if args.out:
        args.out.write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()}, "processes": rows,
                                        "summary": summary}, indent=1) + "\n")
    return 0 if summary else 3


if __name__ == "__main__":
    sys.exit(main())
