"""A worker process's peak memory after its timed samples: its peak resident set, and on CUDA the
allocator's peak allocated and reserved bytes over one more unit. Torch is imported inside the functions."""

from __future__ import annotations

import resource
import sys
from typing import Any


def peak_rss_bytes() -> int:
    """The worker's peak resident set size so far (ru_maxrss: KiB on Linux, bytes on macOS)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak if sys.platform == "darwin" else peak * 1024)


def cuda_peaks_over(unit: Any, device: str) -> dict[str, float]:
    """Peak CUDA allocated and reserved bytes over one call of ``unit`` (statistics reset before it).

    Empty on CPU, or when CUDA cannot answer (some calls return 0 on CPU builds, others raise)."""
    import torch

    if not device.startswith("cuda"):
        return {}
    try:
        if not torch.cuda.is_available():
            return {}
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        unit()
        torch.cuda.synchronize()
        return {
            "peak_cuda_allocated_bytes": float(torch.cuda.max_memory_allocated()),
            "peak_cuda_reserved_bytes": float(torch.cuda.max_memory_reserved()),
        }
    except (RuntimeError, AssertionError, AttributeError):
        return {}


# what process_peaks records, in a process's record (results.json) and as the profile pass's metrics
PEAK_KEYS = ("peak_rss_bytes", "peak_cuda_allocated_bytes", "peak_cuda_reserved_bytes")


def process_peaks(unit: Any, device: str) -> dict[str, float]:
    """This worker process's peak memory after its timed samples, what every process records (results.json's
    processes: memory_vs_eager's interval comes from their spread): its peak resident set so far, and on
    CUDA the allocator's peak allocated bytes over one more call of ``unit`` (``cuda_peaks_over``, outside
    the timed samples; the one extra unit this costs a CUDA process)."""
    peaks = {"peak_rss_bytes": float(peak_rss_bytes())}
    cuda = cuda_peaks_over(unit, device)
    if "peak_cuda_allocated_bytes" in cuda:
        peaks["peak_cuda_allocated_bytes"] = cuda["peak_cuda_allocated_bytes"]
        peaks["peak_cuda_reserved_bytes"] = cuda["peak_cuda_reserved_bytes"]
    return peaks
