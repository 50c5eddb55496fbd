"""Timing one unit of work honestly: the first call on its own, warm-up until stable, then samples.

The timer is a seam (``Timer``): CPU uses perf_counter_ns, CUDA uses events with one synchronize per
sample, and tests drive the loop with a fake clock.
"""

from __future__ import annotations

import gc
import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol


class Timer(Protocol):
    name: str

    def time_ns(self, fn: Callable[[], Any], loops: int) -> int:
        """Nanoseconds taken by ``loops`` calls of ``fn``, all device work included."""


class PerfCounterTimer:
    name = "perf_counter_ns"

    def time_ns(self, fn: Callable[[], Any], loops: int) -> int:
        t0 = time.perf_counter_ns()
        for _ in range(loops):
            fn()
        return time.perf_counter_ns() - t0


class CudaEventTimer:
    """CUDA events around the loop; one synchronize per sample, after the end event."""

    name = "cuda_event"

    def __init__(self) -> None:
        import torch

        self._torch = torch

    def time_ns(self, fn: Callable[[], Any], loops: int) -> int:
        cuda = self._torch.cuda
        start = cuda.Event(enable_timing=True)
        end = cuda.Event(enable_timing=True)
        start.record()
        for _ in range(loops):
            fn()
        end.record()
        end.synchronize()
        return int(start.elapsed_time(end) * 1e6)


def timer_for(device: str) -> Timer:
    return CudaEventTimer() if device.startswith("cuda") else PerfCounterTimer()


@dataclass
class Measurement:
    first_call_s: float
    warmup_units: int
    loops: int
    samples_ns: list[int]
    warmup_ns: list[int]
    stable: bool
    timer: str
    bursts: list[int] | None = None  # samples per lockstep burst, in order (None: sampled in one go)
    layout_groups: list[int] | None = None  # samples per memory layout, in order (None: one layout)
    faults: int | None = None  # page faults while the samples ran (None: not counted, no ``faults`` given)


# ``lockstep(sample_ns, take, rewarm) -> bursts``: hands sampling to an orchestrator (perfgate.protocol.lockstep)
Lockstep = Callable[[float, Callable[[int], list[int]], Callable[[], None]], list[int]]


def _stable(window: list[int], tolerance: float) -> bool:
    med = statistics.median(window)
    return med > 0 and (max(window) - min(window)) / med <= tolerance


def measure(
    unit: Callable[[], Any] | None,
    timer: Timer,
    *,
    samples: int = 10,
    min_sample_s: float = 0.0005,
    max_warmup: int = 30,
    warmup_tolerance: float = 0.05,
    max_time_s: float = 30.0,
    min_time_s: float = 0.0,
    sync: Callable[[], None] = lambda: None,
    clock: Callable[[], float] = time.perf_counter,
    lockstep: Lockstep | None = None,
    check: Callable[[Any], None] | None = None,
    layouts: int = 1,
    relayout: Callable[[int], Callable[[], Any]] | None = None,
    around_samples: Callable[[str], None] | None = None,
    faults: Callable[[], int] | None = None,
) -> Measurement:
    """Time ``unit``: first call alone (compile lands there), warm-up until three consecutive units agree
    within ``warmup_tolerance`` (or ``max_warmup`` units), then ``samples`` samples of ``loops`` units each,
    ``loops`` chosen so a sample lasts at least ``min_sample_s``; sampling goes on past ``samples`` until
    ``min_time_s`` has passed, so the samples span more than one moment of a shared machine's load, and
    stops early past ``max_time_s`` (after at least 3 samples). GC is off while sampling.

    With ``lockstep``, the orchestrator decides when to sample and how much (perfgate.protocol.lockstep): it is
    called once warm-up is done and returns the number of samples of each burst it asked for.

    ``check`` is called with what the first call returned (it raises when that is not a valid output), and
    again with what any later call returned when that is None: every call is checked, the later ones only
    for the cheapest sign of a step that stopped returning its output.

    ``layouts`` > 1 with ``relayout`` (and no lockstep): the samples come in that many groups, each a share
    of ``samples`` (at least 2), ``min_time_s`` and ``max_time_s``; before group k > 0, ``relayout(k)``
    returns the unit to time from then on (the workload built anew on another memory layout), run once
    untimed first. The unit of the group before is dropped first (``relayout`` drops the rest of its build).
    ``unit`` None: the first unit is ``relayout(0)``'s, so that nothing but this function holds it (a unit
    passed in is also held by the caller's call, ``**`` arguments and all, until this function returns).

    ``around_samples`` is called with "before" once warm-up is done and with "after" once the last sample
    is taken (perfgate.worker.gpu_clocks reads the GPU's clocks there), outside every timed sample.

    ``faults`` (the process's page faults so far) is read before and after each batch of samples, outside
    the timed calls: the faults of the timed units alone (no warm-up, no relayout's build) are recorded."""
    if unit is None:
        if relayout is None:
            raise TypeError("measure() needs a unit, or a relayout to make it")
        unit = relayout(0)
    t0 = clock()
    first = unit()
    sync()
    first_call_s = clock() - t0
    if check is not None:
        check(first)
        unit = _every_return_checked(unit, check)
    del first

    warmup: list[int] = []
    stable = False
    budget_start = clock()
    while len(warmup) < max_warmup:
        warmup.append(timer.time_ns(unit, 1))
        if len(warmup) >= 3 and _stable(warmup[-3:], warmup_tolerance):
            stable = True
            break
        if clock() - budget_start > max_time_s / 2 and len(warmup) >= 3:
            break
    unit_ns = statistics.median(warmup[-3:])
    loops = max(1, math.ceil(min_sample_s * 1e9 / max(unit_ns, 1)))

    out: list[int] = []
    bursts: list[int] | None = None
    layout_groups: list[int] = []
    current = [unit]  # the unit being timed: another one after each relayout
    gc_was_enabled = gc.isenabled()
    gc.collect()
    gc.disable()

    faulted = [0]

    def take(n: int) -> list[int]:
        before = faults() if faults is not None else 0
        got = [timer.time_ns(current[0], loops) for _ in range(n)]
        if faults is not None:
            faulted[0] += faults() - before
        out.extend(got)
        return got

    def rewarm() -> None:
        unit()  # type: ignore[misc]  # set before any sample; rewarm serves lockstep, which never relayouts
        sync()

    try:
        if around_samples is not None:
            around_samples("before")
        if lockstep is not None:
            bursts = lockstep(float(unit_ns * loops), take, rewarm)
        else:
            groups = layouts if relayout is not None and layouts > 1 else 1
            for group in range(groups):
                if group:
                    # the earlier build goes before the next is made: held on, every build would count in the
                    # process's peak memory (a case sampling three layouts read three models' worth)
                    current[0] = unit = None  # type: ignore[call-overload]  # dropped until the next build
                    current[0] = relayout(group)  # type: ignore[misc]  # groups > 1 only with a relayout
                    if check is not None:
                        current[0] = _every_return_checked(current[0], check)
                    timer.time_ns(current[0], 1)  # the new build's first unit: its allocations, untimed
                least = 3 if groups == 1 else 2
                before = len(out)
                _sample_group(take, clock, out, before + max(least, math.ceil(samples / groups)), least,
                              min_time_s / groups, max_time_s / groups)
                layout_groups.append(len(out) - before)
        if around_samples is not None:
            around_samples("after")
    finally:
        if gc_was_enabled:
            gc.enable()
    m = _measurement(first_call_s, warmup, loops, out, stable, timer, bursts,
                     layout_groups if len(layout_groups) > 1 else None)
    m.faults = faulted[0] if faults is not None else None
    return m


def _sample_group(take: Callable[[int], list[int]], clock: Callable[[], float], out: list[int], samples: int,
                  least: int, min_time_s: float, max_time_s: float) -> None:
    """Take samples until ``out`` holds ``samples`` and ``min_time_s`` has passed, or past ``max_time_s``
    once this call took at least ``least``."""
    start, first = clock(), len(out)
    while True:
        take(1)
        elapsed = clock() - start
        if len(out) >= samples and elapsed >= min_time_s:
            break
        if len(out) - first >= least and elapsed > max_time_s:
            break


def _every_return_checked(unit: Callable[[], Any], check: Callable[[Any], None]) -> Callable[[], Any]:
    """``unit`` with a check of each return: one ``is None`` test, so the timing hardly moves."""
    def checked() -> Any:
        out = unit()
        if out is None:
            check(out)
        return out

    return checked


def _measurement(first_call_s: float, warmup: list[int], loops: int, out: list[int], stable: bool, timer: Timer,
                 bursts: list[int] | None, layout_groups: list[int] | None = None) -> Measurement:
    return Measurement(first_call_s=first_call_s, warmup_units=len(warmup), loops=loops, samples_ns=out,
                       warmup_ns=warmup, stable=stable, timer=timer.name, bursts=bursts, layout_groups=layout_groups)
