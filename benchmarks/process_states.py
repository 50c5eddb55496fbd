"""Are a workload's processes fast or slow by themselves? Fresh Python processes, no perfgate anywhere:
each builds the conv rollout of the layout issue (3 Conv2d-InstanceNorm-GELU blocks, 64x64, 16 channels,
batch 2, a 20-step unit, one torch thread), then times units for ``--seconds`` and prints the median of
each second. A process whose every second sits far from the others' is in a *state* of its own; seconds
that agree inside a process while processes disagree is what the gate calls performance modes
(docs/gate.md, "Performance modes, compared mode by mode").

    .venv/bin/python benchmarks/process_states.py --processes 30 --seconds 3 [--pin 0,1] [--kernels conv,mm,ew]
        [--malloc system|steady|both]

``--malloc steady`` fixes the C allocator's thresholds in each process first, as perfgate's workers do
(perfgate.protocol.layout.steady_malloc); ``both`` alternates the two policies process by process, side by side.
Each process also reports its minor page faults per timed call: the slow states were glibc's malloc
handing large temporaries back to the kernel and faulting them in again (docs/gate.md).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

CHILD = r'''
import json, resource, sys, time
if sys.argv[3] == "steady":
    from perfgate.protocol import layout
    assert layout.steady_malloc() == "steady"
import torch, torch.nn as nn
torch.set_num_threads(1)
torch.manual_seed(0)
c = 16
layers = [nn.Conv2d(2, c, 1)]
for _ in range(3):
    layers += [nn.Conv2d(c, c, 3, padding=1), nn.InstanceNorm2d(c, affine=True), nn.GELU()]
model = nn.Sequential(*layers, nn.Conv2d(c, 2, 1)).eval()
x = torch.randn(2, 2, 64, 64)

def unit():
    s = x
    with torch.no_grad():
        for _ in range(20):
            s = 0.5 * model(s) + 0.5 * s
    return s

a, v = torch.randn(192, 192), torch.randn(1 << 18)

def mm():  # a matmul chain: compute-bound, small
    b = a
    for _ in range(8):
        b = torch.mm(b, a) * 0.01

def ew():  # elementwise over 1 MiB: memory-bound
    u = v
    for _ in range(30):
        u = torch.sin(u) * 1.01 + 0.5

kernels = {"conv": unit, "mm": mm, "ew": ew}
chosen = sys.argv[2].split(",")
for k in chosen:
    for _ in range(3):
        kernels[k]()
seconds = {k: [] for k in chosen}
calls, faults = 0, resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(int(sys.argv[1])):  # the kernels in turn, one median per second each
    ts, end = {k: [] for k in chosen}, time.perf_counter() + 1.0
    while time.perf_counter() < end:
        for k in chosen:
            t = time.perf_counter()
            kernels[k]()
            ts[k].append(time.perf_counter() - t)
            calls += 1
    for k in chosen:
        seconds[k].append(sorted(ts[k])[len(ts[k]) // 2] * 1e3)
seconds["faults_per_call"] = (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults) / max(calls, 1)
print(json.dumps(seconds))
'''


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--processes", type=int, default=30)
    ap.add_argument("--seconds", type=int, default=3, help="seconds timed per process (one median each)")
    ap.add_argument("--pin", default="", help="comma-separated CPUs to pin the processes to in turn (taskset)")
    ap.add_argument("--fast", type=float, default=0.8, help="a process below this share of the median is 'fast'")
    ap.add_argument("--kernels", default="conv",
                    help="timed in turn in each process: conv (the rollout), mm (a matmul chain), ew (elementwise "
                         "over 1 MiB); several show whether a process's state is the machine's or each computation's")
    ap.add_argument("--malloc", default="system", choices=("system", "steady", "both"),
                    help="the C allocator's defaults, perfgate's steady thresholds, or the two in turn")
    ap.add_argument("--out", default=None, help="write every process's seconds as JSON here")
    args = ap.parse_args()
    pins = [c for c in args.pin.split(",") if c]
    kernels = args.kernels.split(",")
    rows = []
    print(f"load before: {os.getloadavg()}")
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (repo, os.environ.get("PYTHONPATH", "")) if p),
           "PERFGATE_MALLOC": "steady"}
    for i in range(args.processes):
        policy = args.malloc if args.malloc != "both" else ("system", "steady")[i % 2]
        cmd = [sys.executable, "-c", CHILD, str(args.seconds), args.kernels, policy]
        cpu = pins[i % len(pins)] if pins else None
        if cpu is not None:
            cmd = ["taskset", "-c", cpu, *cmd]
        started = time.strftime("%H:%M:%S", time.gmtime())
        seconds = json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True, timeout=300,
                                            env=env).stdout)
        faults = seconds.pop("faults_per_call")
        rows.append({"process": i, "cpu": cpu, "started_utc": started, "malloc": policy,
                     "faults_per_call": round(faults, 1), "ms": {k: [round(s, 2) for s in seconds[k]] for k in kernels}})
        print(f"{i:>3} {started} cpu {cpu or '-'} {policy:6}  " + "   ".join(
            f"{k} " + " ".join(f"{s:6.2f}" for s in seconds[k]) for k in kernels)
            + f"  ms, {faults:8.1f} page faults a call", flush=True)
    print()
    for policy in sorted({r["malloc"] for r in rows}):
        mine = [r for r in rows if r["malloc"] == policy]
        print(f"malloc {policy}: {len(mine)} processes, page faults a call: median "
              f"{statistics.median(r['faults_per_call'] for r in mine):.1f}")
        for k in kernels:
            medians = [statistics.median(r["ms"][k]) for r in mine]
            mid = statistics.median(medians)
            fast = [r["process"] for r, m in zip(mine, medians, strict=True) if m < args.fast * mid]
            mad = statistics.median(abs(m - mid) for m in medians) * 1.4826 / mid
            inside = statistics.median((max(r["ms"][k]) - min(r["ms"][k])) / statistics.median(r["ms"][k]) for r in mine)
            print(f"  {k}: process medians {min(medians):.2f}-{mid:.2f}-{max(medians):.2f} ms (min-median-max), "
                  f"robust sd {mad:.1%}, max/min {max(medians) / min(medians):.2f}; {len(fast)} below {args.fast:g}x the "
                  f"median: processes {fast}; a process's seconds spread (max-min over median): median {inside:.1%}")
            for cpu in sorted({r["cpu"] for r in mine if r["cpu"] is not None}):
                on = [r["process"] for r in mine if r["cpu"] == cpu]
                print(f"    cpu {cpu}: {sum(i in fast for i in on)} of {len(on)} fast")
    print(f"load after: {os.getloadavg()}")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
