"""This machine's ceilings for the roofline: peak FLOP/s (a large matmul per dtype) and memory bandwidth
(a large copy and a STREAM-style triad), on the CPU and on CUDA when present.

``python -m perfgate.worker.ceilings [--threads N] [--budget S]`` measures in its own process and prints one
JSON object; `perfgate calibrate` runs it in a worker (``perfgate.commands.calibrate.measure_ceilings``: the
orchestrator never imports this module) and stores the result as
``<baselines_dir>/<machine-key>/ceilings.json`` (perfgate.judging.roofline reads it).

How each figure is obtained (docs/roofline.md):
  flops      2 n^3 / the best time per call of ``torch.mm`` on n x n operands of the dtype, timed in
             batches of calls lasting >= 50 ms (a sustained rate) until the budget per figure is spent,
             in three passes over all figures (best, not median: a ceiling is what the hardware can do)
  bandwidth  copy: ``dst.copy_(src)``, 2 x size bytes moved; triad: ``torch.add(b, c, alpha=s, out=a)``,
             3 x size bytes (STREAM's convention: write-allocate traffic not counted); arrays far larger
             than the last-level cache
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

# Operand sizes: large enough to run at the peak, small enough for a 2-core CI runner's memory and time.
MATMUL_N = {"cpu": 1024, "cuda": 8192}
STREAM_BYTES = {"cpu": 128 * 2**20, "cuda": 1024 * 2**20}  # per array
CPU_DTYPES = ("float32", "float64", "bfloat16")
CUDA_DTYPES = ("float32", "tf32", "float16", "bfloat16")
DEFAULT_BUDGET_S = 1.2  # per figure, spread over ROUNDS passes
ROUNDS = 3


BATCH_S = 0.05  # one timing covers at least this long: a sustained rate, not one lucky call


def _best_time(fn: Any, sync: Any, budget_s: float, min_reps: int = 3) -> float:
    """The best time per call of ``fn()``: timings of batches of calls lasting at least BATCH_S each,
    repeated until ``budget_s`` is spent (at least ``min_reps`` batches); the best batch's mean."""
    t0 = time.perf_counter()
    fn()  # warm-up: allocations, kernel selection, page faults
    sync()
    batch = max(1, int(BATCH_S / max(time.perf_counter() - t0, 1e-6)))
    best, spent, reps = float("inf"), 0.0, 0
    while reps < min_reps or spent < budget_s:
        t0 = time.perf_counter()
        for _ in range(batch):
            fn()
        sync()
        dt = time.perf_counter() - t0
        best, spent, reps = min(best, dt / batch), spent + dt, reps + 1
        if reps >= 200:
            break
    return best


def _sync_for(device: str) -> Any:
    import torch

    return torch.cuda.synchronize if device == "cuda" else (lambda: None)


def peak_flops(device: str, dtype_name: str, budget_s: float = DEFAULT_BUDGET_S, n: int | None = None) -> float:
    """FLOP/s of an n x n matmul in ``dtype_name`` ("tf32": float32 with TF32 math allowed)."""
    import torch

    n = n or MATMUL_N[device]
    dtype = torch.float32 if dtype_name == "tf32" else getattr(torch, dtype_name)
    previous = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = dtype_name == "tf32"
    try:
        g = torch.Generator(device="cpu").manual_seed(0)
        a = torch.randn(n, n, generator=g).to(device, dtype)
        b = torch.randn(n, n, generator=g).to(device, dtype)
        out = torch.empty(n, n, device=device, dtype=dtype)
        best = _best_time(lambda: torch.mm(a, b, out=out), _sync_for(device), budget_s)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = previous
    return 2.0 * n ** 3 / best


def bandwidth(device: str, kind: str, budget_s: float = DEFAULT_BUDGET_S, nbytes: int | None = None) -> float:
    """Bytes/s of a ``copy`` (2 arrays moved) or a ``triad`` (3 arrays) over float32 arrays of ``nbytes``."""
    import torch

    numel = (nbytes or STREAM_BYTES[device]) // 4
    a = torch.empty(numel, device=device)
    b = torch.ones(numel, device=device)
    c = torch.full((numel,), 2.0, device=device)
    if kind == "copy":
        best = _best_time(lambda: a.copy_(b), _sync_for(device), budget_s)
        return 2 * numel * 4 / best
    best = _best_time(lambda: torch.add(b, c, alpha=3.0, out=a), _sync_for(device), budget_s)
    return 3 * numel * 4 / best


def measure(threads: int = 1, budget_s: float = DEFAULT_BUDGET_S) -> dict[str, Any]:
    """Every ceiling this process can measure: {"cpu": {...}, "cuda": {...} when CUDA is present}."""
    import torch

    torch.set_num_threads(threads)
    out: dict[str, Any] = {}
    devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    for device in devices:
        t0 = time.perf_counter()
        dtypes = CUDA_DTYPES if device == "cuda" else CPU_DTYPES
        entry: dict[str, Any] = {"flops": {}, "bandwidth": {}, "errors": []}
        # in ROUNDS passes over every figure, keeping each one's best: a burst of load from the rest of a
        # shared machine then costs one pass of one figure, not the figure
        failed: set[str] = set()
        for _ in range(ROUNDS):
            for dt in dtypes:
                if dt in failed:
                    continue
                try:
                    value = peak_flops(device, dt, budget_s / ROUNDS)
                except (RuntimeError, TypeError) as exc:  # a dtype this device's matmul does not support
                    failed.add(dt)
                    entry["errors"].append(f"{dt} matmul: {type(exc).__name__}: {exc}"[:300])
                    continue
                entry["flops"][dt] = max(value, entry["flops"].get(dt, 0.0))
            for kind in ("copy", "triad"):
                entry["bandwidth"][kind] = max(bandwidth(device, kind, budget_s / ROUNDS),
                                               entry["bandwidth"].get(kind, 0.0))
        entry.update({
            "threads": threads if device == "cpu" else None,
            "matmul_n": MATMUL_N[device], "stream_bytes": STREAM_BYTES[device],
            "device_name": torch.cuda.get_device_name(0) if device == "cuda" else None,
            "torch": torch.__version__, "seconds": round(time.perf_counter() - t0, 2),
            "measured_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        })
        if not entry["errors"]:
            del entry["errors"]
        out[device] = entry
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m perfgate.worker.ceilings", description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--budget", type=float, default=DEFAULT_BUDGET_S, help="seconds of repeats per figure")
    args = parser.parse_args(argv)
    json.dump(measure(args.threads, args.budget), sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
