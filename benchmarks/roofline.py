"""The roofline's figures on this machine: ceilings against hand-timed work, calibrate's wall time, and
the standard workloads' bound classes and headroom at smoke size.

1. ``perfgate.worker.ceilings`` (what `perfgate calibrate` stores) against a hand-timed matmul (a plain
   perf_counter loop around torch.mm, best of 25 loops of 4 calls) and a hand-timed copy
   (numpy.copyto, no torch at all, best of 25 loops of 8), each in its own fresh process with one
   thread, in alternating order, ``--repeats`` times; prints each figure's median and the median ratio
   ceiling / hand-timed (target: within 10%). Both take the best of many timings, as a ceiling must.
2. `perfgate calibrate --ceilings-only --write` end to end (a CLI subprocess), wall time (target < 60 s).
3. `perfgate run --suite smoke` with those ceilings, then every case's bound class, evidence and
   headroom to the ceiling that binds it.

    python benchmarks/roofline.py [--repeats 3] [--skip-suite]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from perfgate.commands import calibrate  # noqa: E402
from perfgate.judging import roofline  # noqa: E402
from perfgate.model.results import load_results  # noqa: E402
from perfgate.running.inherit import worker_env  # noqa: E402
from perfgate.worker import ceilings  # noqa: E402

HAND_TIMED = r"""
import json, sys, time
import numpy as np
import torch
torch.set_num_threads(1)
n, nbytes, reps = int(sys.argv[1]), int(sys.argv[2]), 25

def best(fn, loops):
    fn()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        for _ in range(loops):
            fn()
        times.append((time.perf_counter() - t0) / loops)
    return min(times)

a, b = torch.randn(n, n), torch.randn(n, n)
mm = best(lambda: torch.mm(a, b), 4)
src = np.ones(nbytes // 4, dtype=np.float32)
dst = np.empty_like(src)
cp = best(lambda: np.copyto(dst, src), 8)
print(json.dumps({"matmul_flops": 2 * n ** 3 / mm, "copy_bytes_per_s": 2 * src.nbytes / cp}))
"""


def hand_timed() -> dict[str, float]:
    proc = subprocess.run([sys.executable, "-c", HAND_TIMED, str(ceilings.MATMUL_N["cpu"]),
                           str(ceilings.STREAM_BYTES["cpu"])], capture_output=True, text=True, check=True,
                          env=worker_env(1))
    return json.loads(proc.stdout.strip().splitlines()[-1])


def cli(*args: str, cwd: Path) -> tuple[subprocess.CompletedProcess, float]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "perfgate", *args], cwd=cwd, capture_output=True, text=True, env=env)
    return proc, time.perf_counter() - t0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--skip-suite", action="store_true", help="only the ceilings and calibrate's wall time")
    args = parser.parse_args()
    print(f"load before: {os.getloadavg()[0]:.2f} (1-min) on {os.cpu_count()} CPUs")

    # 1. ceilings against hand-timed work, alternating which goes first
    figures: dict[str, list[float]] = {"ceiling_matmul": [], "hand_matmul": [], "ceiling_copy": [], "hand_copy": []}
    for i in range(args.repeats):
        order = ("ceilings", "hand") if i % 2 == 0 else ("hand", "ceilings")
        for what in order:
            if what == "ceilings":
                cpu = calibrate.measure_ceilings(threads=1)["cpu"]
                figures["ceiling_matmul"].append(cpu["flops"]["float32"])
                figures["ceiling_copy"].append(cpu["bandwidth"]["copy"])
            else:
                hand = hand_timed()
                figures["hand_matmul"].append(hand["matmul_flops"])
                figures["hand_copy"].append(hand["copy_bytes_per_s"])
    print(f"\n1. ceilings vs hand-timed, {args.repeats} repeat(s), medians (1 thread):")
    for kind, unit in (("matmul", "FLOP/s"), ("copy", "B/s")):
        c, h = statistics.median(figures[f"ceiling_{kind}"]), statistics.median(figures[f"hand_{kind}"])
        ratios = [a / b for a, b in zip(figures[f"ceiling_{kind}"], figures[f"hand_{kind}"], strict=True)]
        print(f"   {kind:<6}  ceiling {roofline._rate(c, unit):>14}  hand-timed {roofline._rate(h, unit):>14}  "
              f"ratio median {statistics.median(ratios):.3f} (each: {', '.join(f'{r:.3f}' for r in ratios)})")

    # 2. calibrate --ceilings-only --write, end to end
    root = Path(tempfile.mkdtemp(prefix="perfgate-roofline-"))
    (root / "pyproject.toml").write_text(f'[tool.perfgate]\nworkloads_dirs = ["{REPO / "workloads"}"]\n'
                                         f'[tool.perfgate.suites.smoke]\nworkloads = ["*"]\nsizes = ["smoke"]\n'
                                         f'toggles = ["eager", "compile", "amp-bf16", "channels-last"]\n'
                                         f'device = "cpu"\n')
    proc, wall = cli("calibrate", "--ceilings-only", "--write", cwd=root)
    if proc.returncode != 0:
        print(proc.stdout + proc.stderr)
        return 3
    print(f"\n2. perfgate calibrate --ceilings-only --write: {wall:.1f} s wall (target < 60 s)")
    for line in proc.stdout.strip().splitlines():
        print(f"   {line}")
    if args.skip_suite:
        return 0

    # 3. the smoke suite with those ceilings: bound class and headroom per case
    proc, wall = cli("run", "--suite", "smoke", "--processes", "1", "--out", str(root / "run"), cwd=root)
    if proc.returncode != 0:
        print(proc.stdout[-2000:] + proc.stderr[-2000:])
        return 3
    run = load_results(root / "run")
    print(f"\n3. smoke suite ({wall:.0f} s): bound class per case, with the ceilings above")
    print(f"   {'case':<44} {'bound':<15} {'idle':>5} {'ops/step':>8} {'mean op':>9} {'FLOP/B':>7}  headroom")
    for case in run.cases:
        b = roofline.case_bound(case, run.ceilings)
        if b is None:
            print(f"   {case.key:<44} {case.status}")
            continue
        e = b.evidence
        print(f"   {case.key:<44} {b.bound:<15} {e['device_idle_fraction'] or 0:>5.0%} "
              f"{e['aten_ops_per_step'] or 0:>8.0f} {(e['mean_op_s'] or 0) * 1e6:>7.2f}us "
              f"{e['arithmetic_intensity'] or 0:>7.3g}  {b.headroom_text}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
