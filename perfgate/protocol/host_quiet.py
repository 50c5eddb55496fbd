"""Whether the host was quiet as a worker started timing: the worker's reading and the gate's rule
(``busy_reason``); docs/gate.md, "A quiet host".

The worker reads, right before its timed samples, the CPU
time other processes took over a short window (/proc/stat less the worker's own, in cores), the 1-minute
load average, and on CUDA the other processes NVML sees on its GPU (``gpu_clocks.other_gpu_processes``); the
case keeps one reading per process (``metadata.host``). The gate (perfgate.judging.compare) turns an unpaired
step-time regression or win measured on a busy host into ``inconclusive (host busy: ...)``: lockstep pairs
share the moments of the machine and need no such rule. Standard library only: the worker and the gate both
import it.
"""

from __future__ import annotations

import math
import os
import time
from typing import Any

WINDOW_S = 0.2  # long enough for /proc/stat's 10 ms ticks to count a busy core to a few %
# the default limit: other processes may use this many times the cores a run leaves free (all but its
# worker's threads) before the host counts as busy. Up to 1.0x they fit beside the worker; the rest is slack
# for a short window's bursts (the orchestrator, a CI runner's agent) that do not slow a step measurably
AUTO_SHARE = 1.5
AUTO_FLOOR = 0.5  # on a host with no free core: half a core of others


def _cpu_ticks() -> tuple[int, int] | None:
    """(busy, total) ticks of all CPUs since boot from /proc/stat; None where there is none."""
    try:
        with open("/proc/stat", encoding="ascii") as f:
            fields = f.readline().split()
    except OSError:
        return None
    if not fields or fields[0] != "cpu":
        return None
    values = [int(v) for v in fields[1:9]]  # user nice system idle iowait irq softirq steal
    idle = values[3] + values[4]
    return sum(values) - idle, sum(values)


def _own_ticks() -> float:
    """This process's CPU time (all its threads), in /proc/stat's ticks."""
    t = os.times()
    return (t.user + t.system) * os.sysconf("SC_CLK_TCK")


def other_cpu(window_s: float = WINDOW_S) -> float | None:
    """The cores other processes kept busy over ``window_s`` (the host's busy time less this process's);
    None where /proc/stat cannot be read."""
    cpus = os.cpu_count() or 1
    before, own_before = _cpu_ticks(), _own_ticks()
    time.sleep(window_s)
    after, own_after = _cpu_ticks(), _own_ticks()
    if before is None or after is None or after[1] <= before[1]:
        return None
    busy = (after[0] - before[0]) - (own_after - own_before)
    return round(max(0.0, busy) / ((after[1] - before[1]) / cpus), 2)


def read_host(threads: int, gpu: dict[str, Any] | None = None, window_s: float = WINDOW_S) -> dict[str, Any]:
    """One reading for results.json: cpus, the run's threads, other processes' cores over the window, the
    1-minute load average, and ``gpu`` (``other_processes``, ``error``) on CUDA."""
    try:
        load: float | None = round(os.getloadavg()[0], 2)
    except OSError:
        load = None
    reading: dict[str, Any] = {"cpus": os.cpu_count() or 1, "threads": threads, "other_cpu": other_cpu(window_s),
                               "load_1m": load, "window_s": window_s}
    if gpu is not None:
        reading["gpu"] = gpu
    return reading


def parse_limit(value: Any) -> float | str | None:
    """``[tool.perfgate.gate] max_host_load``: "auto" (the default), a number of cores (> 0), or 0, false or
    "none" (no check: None); ValueError with the reason for anything else."""
    if value == "auto":
        return "auto"
    if value is False or value == "none" or (not isinstance(value, bool) and value == 0):
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise ValueError(f'must be "auto", a number of cores (0 or "none" turns the check off), got {value!r}')
    return float(value)


def limit_for(setting: float | str | None, reading: dict[str, Any]) -> float | None:
    """The cores others may use under ``setting`` on the host ``reading`` describes."""
    if setting != "auto":
        return setting if isinstance(setting, float) else None
    cpus, threads = reading.get("cpus"), reading.get("threads")
    cpus = cpus if isinstance(cpus, int) and cpus > 0 else 1
    threads = threads if isinstance(threads, int) and threads > 0 else 1
    return max(AUTO_FLOOR, AUTO_SHARE * (cpus - threads))


def _number(value: Any) -> float | None:
    ok = not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value)
    return float(value) if ok else None


def busy_reason(readings: Any, setting: float | str | None) -> str | None:
    """Why the host was not quiet in a case's readings (``metadata.host``, read from an untrusted file), in
    words ('other processes used 1.9 CPUs (limit 1.5) at the start of 2 of 3 processes'); None when every
    process started on a quiet host, none was recorded, or ``setting`` is None (the check is off)."""
    if setting is None or not isinstance(readings, list):
        return None
    records = [r for r in readings if isinstance(r, dict)]
    cpu_busy: list[tuple[float, float]] = []
    gpu_busy: list[int] = []
    for r in records:
        limit = limit_for(setting, r)
        used = _number(r.get("other_cpu"))
        if used is None:  # no /proc/stat: the load average, less the worker itself
            load = _number(r.get("load_1m"))
            used = None if load is None else load - 1
        if limit is not None and used is not None and used > limit:
            cpu_busy.append((used, limit))
        gpu = r.get("gpu")
        others = gpu.get("other_processes") if isinstance(gpu, dict) else None
        if isinstance(others, int) and not isinstance(others, bool) and others > 0:
            gpu_busy.append(others)
    parts = []
    if cpu_busy:
        used, limit = max(cpu_busy)
        parts.append(f"other processes used {used:.1f} CPUs (limit {limit:g}) at the start of "
                     f"{len(cpu_busy)} of {len(records)} processes")
    if gpu_busy:
        parts.append(f"{max(gpu_busy)} other process(es) on the GPU at the start of {len(gpu_busy)} of "
                     f"{len(records)} processes")
    return "; ".join(parts) or None


def sides_busy(base: Any, head: Any, setting: float | str | None) -> str | None:
    """``busy_reason`` of both sides' ``metadata.host`` in one line ('this run: ...; the baseline: ...')."""
    said = [f"{side}: {why}" for side, why in (("this run", busy_reason(head, setting)),
                                               ("the baseline", busy_reason(base, setting))) if why]
    return "; ".join(said) or None

