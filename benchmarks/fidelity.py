"""Does perfgate report the step time a careful person would measure by hand?

Side by side, in one run: the step time `perfgate run` reports for the smoke rollout (eager, CPU, 1 thread)
and a hand-timed loop of the same step in this process (same seed, same sizes, threads pinned to 1, GC off,
perf_counter_ns, median). Rounds alternate hand loop and perfgate run so slow drift on a shared machine
hits both alike. Also prints the harness overhead per case: the case's wall time minus the time inside
timed samples (worker spawn, torch import, build, first call, warm-up, profile pass).

Target: perfgate's median within 3% of the hand-timed median.

    python benchmarks/fidelity.py [--rounds 3] [--size smoke] [--processes 2]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# Pin threads before torch is imported, exactly as perfgate's workers do.
for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "NUMEXPR_NUM_THREADS"):
    os.environ[_var] = "1"

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import torch  # noqa: E402

from perfgate.model.results import load_results  # noqa: E402
from perfgate.util.stats import format_seconds  # noqa: E402
from perfgate.worker.discovery import load_file  # noqa: E402

WORKLOAD_FILE = REPO / "workloads" / "operator_rollout.py"


def hand_timed(size: str, seconds: float, seed: int = 0) -> list[float]:
    """Seconds per step of the rollout, one sample per unit of T steps, timed with a bare loop."""
    (cls,) = [c for c in load_file(WORKLOAD_FILE) if c.name == "operator_rollout"]
    workload = cls()
    params = dict(cls.sizes[size])
    torch.manual_seed(seed)
    built = workload.build(params, torch.device("cpu"), torch.float32, frozenset())
    model, steps = built.model, int(params["T"])
    samples: list[float] = []
    with torch.no_grad():
        for _ in range(20):  # warm-up
            state = built.state
            for _ in range(steps):
                state = workload.step(model, state, built, params)
        gc.collect()
        gc.disable()
        try:
            deadline = time.perf_counter() + seconds
            while time.perf_counter() < deadline:
                t0 = time.perf_counter_ns()
                state = built.state
                for _ in range(steps):
                    state = workload.step(model, state, built, params)
                samples.append((time.perf_counter_ns() - t0) / steps * 1e-9)
        finally:
            gc.enable()
    return samples


def perfgate_run(size: str, processes: int, out: Path) -> dict:
    """Run the real CLI; return the case's step times and its time accounting."""
    cmd = [sys.executable, "-m", "perfgate", "run", "-w", "operator_rollout", "-t", "eager", "--size", size,
           "--device", "cpu", "--threads", "1", "--processes", str(processes), "--out", str(out)]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
    cli_wall = time.perf_counter() - t0
    if proc.returncode != 0:
        sys.exit(f"perfgate run failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    case = load_results(out).cases[0]
    inside_samples = sum(ns for p in case.processes for ns in p.samples_ns) * 1e-9
    return {
        "step_times": case.step_samples_s,
        "median": case.step_time().median,
        "duration_s": case.duration_s,
        "inside_samples_s": inside_samples,
        "first_call_s": [p.first_call_s for p in case.processes],
        "warmup_units": [p.warmup_units for p in case.processes],
        "loops": [p.loops for p in case.processes],
        "cli_wall_s": cli_wall,
        "processes": len(case.processes),
        "warmup_s": sum(case.metadata.get("warmup_ns", [])) * 1e-9,  # process 0's warm-up
    }


def bare_import_s() -> float:
    """Wall time of a Python process that only imports torch: the floor of any worker's start-up."""
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import torch"], check=True)
    return time.perf_counter() - t0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--size", default="smoke")
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--hand-seconds", type=float, default=3.0, help="hand-timed loop length per round")
    parser.add_argument("--json", help="also write the figures here")
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.set_num_interop_threads(1)

    print(f"load before: {os.getloadavg()}  torch {torch.__version__}  cpu threads 1")
    hand: list[float] = []
    runs: list[dict] = []
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            h = hand_timed(args.size, args.hand_seconds)
            p = perfgate_run(args.size, args.processes, Path(tmp) / f"round{r}")
            hand += h
            runs.append(p)
            print(f"round {r + 1}: hand {format_seconds(statistics.median(h))} ({len(h)} units)   "
                  f"perfgate {format_seconds(p['median'])} ({len(p['step_times'])} samples, "
                  f"loops {p['loops']}, warm-up units {p['warmup_units']})   "
                  f"ratio {p['median'] / statistics.median(h):.3f}")
    hand_median = statistics.median(hand)
    reported = statistics.median(t for p in runs for t in p["step_times"])
    ratio = reported / hand_median
    overhead = [p["duration_s"] - p["inside_samples_s"] for p in runs]
    per_process = [o / p["processes"] for o, p in zip(overhead, runs, strict=True)]
    n_samples = sum(len(p["step_times"]) for p in runs)
    walls = ", ".join(f"{p['duration_s']:.2f} s" for p in runs)
    inside = ", ".join(f"{p['inside_samples_s']:.2f} s" for p in runs)
    overheads = ", ".join(f"{o:.2f} s" for o in overhead)
    firsts = ", ".join(f"{x * 1e3:.1f} ms" for p in runs for x in p["first_call_s"])
    cli_walls = ", ".join(f"{p['cli_wall_s']:.2f} s" for p in runs)
    warmups = ", ".join(f"{p['warmup_s'] * 1e3:.1f} ms" for p in runs)
    imports = [bare_import_s() for _ in range(3)]
    print()
    print(f"hand-timed median step       {format_seconds(hand_median)}  ({len(hand)} units of T steps)")
    print(f"perfgate reported median     {format_seconds(reported)}  ({n_samples} samples,"
          f" {args.rounds} runs x {args.processes} processes)")
    print(f"ratio perfgate / hand        {ratio:.4f}  ({(ratio - 1) * 100:+.2f}%; target within +/-3%)")
    print(f"case wall time               {walls}")
    print(f"time inside samples          {inside}")
    print(f"harness overhead per case    {overheads}  (median {statistics.median(overhead):.2f} s;"
          f" per worker process {statistics.median(per_process):.2f} s)")
    print(f"first call per process       {firsts}")
    print(f"warm-up (process 0)          {warmups}")
    print(f"`python -c 'import torch'`   {statistics.median(imports):.2f} s (median of 3): the start-up floor per process")
    print(f"`perfgate run` wall (CLI)    {cli_walls}")
    print(f"load after: {os.getloadavg()}")
    if args.json:
        Path(args.json).write_text(json.dumps({"hand_median_s": hand_median, "reported_median_s": reported,
                                               "ratio": ratio, "overhead_per_case_s": overhead}, indent=1))
    return 0 if abs(ratio - 1) <= 0.03 else 1


if __name__ == "__main__":
    sys.exit(main())
