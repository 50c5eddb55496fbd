"""Lockstep sampling: two worker processes take turns sampling the same case in short bursts.

``perfgate run --against`` compares a base and a head worker process. Run one after the other, each
process sees its own few seconds of the machine, and a shared machine's speed changes over seconds (on
the 2-vCPU runners measured for docs/gate.md, identical processes a few seconds apart differed by up to
1.3x, switching between two regimes). In lockstep both processes start, compile and warm up at the same
time, then wait; the orchestrator asks each in turn for a burst of samples (about ``BURST_S`` long),
alternating who goes first (A B, B A, ...), while the other sleeps on its pipe. Base and head thus sample
the same moments of the machine, and each pair of bursts is a ratio that a regime change cannot bias.

The protocol is one JSON object per line over two pipes per worker (fds handed over with ``pass_fds``):

- worker -> orchestrator, once warm: ``{"ready": true, "sample_ns": <median warm sample>}``;
- orchestrator -> worker: ``{"burst": n}``; the worker runs one untimed unit (its caches went cold while
  the other process ran), then ``n`` timed samples, and answers ``{"ns": <their sum>}``;
- orchestrator -> worker: ``{"stop": true}``; the worker finishes (metrics, profile) and writes its result.

A worker that skips or fails before it is ready closes its pipe without ``ready``: the orchestrator stops
the other one and the case ends as it would have. No torch here.
"""

from __future__ import annotations

import json
import math
import os
import select
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

BURST_S = 0.02  # target length of one burst: short next to a regime change, long next to a pipe round trip
REWARM_BELOW_NS = 50_000_000  # re-warm before a burst when one sample is shorter than this


class ChannelClosed(Exception):
    """The other end closed its pipe (the process ended)."""


class Channel:
    """Line-delimited JSON over a read fd and a write fd, with deadlines on reads."""

    def __init__(self, read_fd: int, write_fd: int) -> None:
        self.read_fd, self.write_fd = read_fd, write_fd
        self._buf = b""

    def send(self, obj: dict[str, Any]) -> None:
        data = (json.dumps(obj) + "\n").encode()
        while data:
            data = data[os.write(self.write_fd, data):]

    def recv(self, deadline: float | None = None) -> dict[str, Any]:
        """The next message; ChannelClosed at EOF, TimeoutError past ``deadline`` (a perf_counter time)."""
        while b"\n" not in self._buf:
            if deadline is not None:
                left = deadline - time.perf_counter()
                if left <= 0 or not select.select([self.read_fd], [], [], left)[0]:
                    raise TimeoutError
            chunk = os.read(self.read_fd, 65536)
            if not chunk:
                raise ChannelClosed
            self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        return json.loads(line)

    def close(self) -> None:
        for fd in (self.read_fd, self.write_fd):
            try:
                os.close(fd)
            except OSError:
                pass


# ---------------------------------------------------------------- the worker's side

def serve(channel: Channel, sample_ns: float, take: Callable[[int], list[int]], rewarm: Callable[[], None]) -> list[int]:
    """Announce ready, then answer bursts until told to stop (or the orchestrator goes away).

    ``take(n)`` times ``n`` samples and returns their nanoseconds; ``rewarm()`` runs one untimed unit.
    Returns the number of samples of each burst, in order.
    """
    bursts: list[int] = []
    try:
        channel.send({"ready": True, "sample_ns": sample_ns})
        while True:
            msg = channel.recv()
            if "burst" not in msg:
                break
            if sample_ns < REWARM_BELOW_NS:
                rewarm()
            got = take(int(msg["burst"]))
            bursts.append(len(got))
            channel.send({"ns": sum(got)})
    except (ChannelClosed, BrokenPipeError):
        pass
    return bursts


# ---------------------------------------------------------------- the orchestrator's side

@dataclass
class Side:
    channel: Channel
    ready: bool = False
    done: bool = False  # closed, failed or timed out: no more bursts
    timed_out: bool = False
    sample_ns: float = 0.0
    samples: int = 0
    sampled_ns: int = 0
    bursts: list[int] = field(default_factory=list)


def burst_size(sample_ns: float, burst_s: float = BURST_S) -> int:
    return max(1, math.ceil(burst_s * 1e9 / max(sample_ns, 1.0)))


def drive(channels: Sequence[Channel], *, samples: int, min_time_s: float, max_time_s: float, deadline: float,
          burst_s: float = BURST_S) -> list[Side]:
    """Wait until every worker is ready, then ask them for bursts in turn (order alternating each round)
    until each has at least ``samples`` samples and ``min_time_s`` of sampling (or ``max_time_s``, after 3
    rounds), then tell them all to stop. When one is not ready (it skipped or failed) the others are
    stopped at once. ``deadline`` (perf_counter) bounds the whole; a side past it is marked ``timed_out``."""
    sides = [Side(c) for c in channels]
    for side in sides:
        try:
            msg = side.channel.recv(deadline)
            side.ready, side.sample_ns = bool(msg.get("ready")), float(msg.get("sample_ns", 0.0))
        except ChannelClosed:
            side.done = True
        except TimeoutError:
            side.done = side.timed_out = True
    rounds = 0
    sizes = [burst_size(s.sample_ns, burst_s) for s in sides]
    if all(s.ready for s in sides):
        while True:
            order = range(len(sides)) if rounds % 2 == 0 else reversed(range(len(sides)))
            for i in order:
                side = sides[i]
                try:
                    side.channel.send({"burst": sizes[i]})
                    ns = int(side.channel.recv(deadline)["ns"])
                    side.sampled_ns += ns
                    side.samples += sizes[i]
                    side.bursts.append(sizes[i])
                    # warm-up ran while the other process was starting: size the next burst on this one
                    sizes[i] = burst_size(ns / sizes[i], burst_s)
                except (ChannelClosed, BrokenPipeError):
                    side.done = True
                except TimeoutError:
                    side.done = side.timed_out = True
                if side.done:
                    break
            rounds += 1
            if any(s.done for s in sides):
                break
            enough = all(s.samples >= samples and s.sampled_ns >= min_time_s * 1e9 for s in sides)
            too_long = rounds >= 3 and any(s.sampled_ns > max_time_s * 1e9 for s in sides)
            if enough or too_long:
                break
    for side in sides:
        if not side.done:
            try:
                side.channel.send({"stop": True})
            except BrokenPipeError:
                pass
    return sides
