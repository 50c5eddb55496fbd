"""What a run cost, in one line for the reports (report.html, summary.md, so the CI job summary too): its
wall time, the device-minutes its workers held (GPU-minutes on CUDA, CPU-minutes otherwise), per shard and in
all, and how many cases it measured, re-measured and skipped.

Device time is the sum of the workers' ``duration_s``: the run's cases, the gate's re-measures
(results-remeasure.json) and lockstep settling (lockstep/results.json). The base side of a lockstep pair
(``--against``, settling) runs beside its head on the same device at the same moments, so it adds no device
time of its own. ``run_cost`` computes it from data alone; ``read_cost`` finds that data in a run folder.
A merged run (perfgate.gating.merge) carries each shard's cost in ``settings.shard.costs``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from perfgate.model.results import STATUS_SKIPPED, CaseResult, RunResult, load_results
from perfgate.util.validation import SchemaError

REMEASURE_FILE = "results-remeasure.json"
LOCKSTEP_FILE = "lockstep/results.json"
TIME_FORMAT = "%Y-%m-%dT%H:%M:%S%z"


@dataclass(frozen=True)
class ShardCost:
    """One shard's (or an unsharded run's) cost: ``shard`` is 'I/N', or '' for a whole run."""

    shard: str
    wall_s: float | None  # None while the run has not finished
    device_s: float
    measured: int
    remeasured: int
    skipped: int

    def to_json(self) -> dict[str, Any]:
        return {"shard": self.shard, "wall_s": self.wall_s, "device_s": round(self.device_s, 2),
                "measured": self.measured, "remeasured": self.remeasured, "skipped": self.skipped}

    @classmethod
    def from_json(cls, data: Any) -> ShardCost | None:
        """A cost merge recorded (results.json is untrusted): None for anything not of this shape."""
        if not isinstance(data, dict):
            return None

        def number(key: str) -> float | None:
            value = data.get(key)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < math.inf:
                return None
            return float(value)

        def count(key: str) -> int | None:
            value = data.get(key)
            return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None
        device, counts = number("device_s"), [count(k) for k in ("measured", "remeasured", "skipped")]
        shard = data.get("shard")
        if device is None or None in counts or not isinstance(shard, str) or len(shard) > 20:
            return None
        measured, remeasured, skipped = (int(c or 0) for c in counts)
        return cls(shard, number("wall_s"), device, measured, remeasured, skipped)


@dataclass(frozen=True)
class RunCost:
    """A run's cost: its shards' (one, unsharded) and the device kind its minutes are of."""

    device: str  # "GPU" on CUDA, else "CPU"
    shards: tuple[ShardCost, ...]

    @property
    def wall_s(self) -> float | None:
        walls = [s.wall_s for s in self.shards]
        return None if any(w is None for w in walls) else sum(w or 0.0 for w in walls)

    @property
    def device_s(self) -> float:
        return sum(s.device_s for s in self.shards)

    def count(self, what: str) -> int:
        return sum(getattr(s, what) for s in self.shards)

    def text(self) -> str:
        """'Cost: 3.2 min wall, 2.9 GPU-minutes in workers; 12 cases measured, 1 re-measured, 2 skipped.'
        With shards, the sum over them first, then each shard's."""
        unit = f"{self.device}-minutes"
        counts = (f"{self.count('measured')} case(s) measured, {self.count('remeasured')} re-measured, "
                  f"{self.count('skipped')} skipped")
        if len(self.shards) == 1 and not self.shards[0].shard:
            return f"Cost: {_minutes(self.wall_s)} wall, {self.device_s / 60:.1f} {unit} in workers; {counts}."
        each = "; ".join(f"shard {s.shard} {_minutes(s.wall_s)} wall, {s.device_s / 60:.1f} {unit}"
                         for s in self.shards)
        return (f"Cost: {_minutes(self.wall_s)} wall summed over {len(self.shards)} shard(s), "
                f"{self.device_s / 60:.1f} {unit} in workers ({each}); {counts}.")


def _minutes(seconds: float | None) -> str:
    return "(running)" if seconds is None else f"{seconds / 60:.1f} min"


def wall_seconds(started_at: str, finished_at: str | None) -> float | None:
    """Seconds from a run's start to its finish as results.json records them; None when either is missing
    or unreadable."""
    try:
        start = datetime.strptime(started_at, TIME_FORMAT)
        end = datetime.strptime(finished_at or "", TIME_FORMAT)
    except (TypeError, ValueError):
        return None
    return max(0.0, (end - start).total_seconds())


def _shard_label(run: RunResult) -> str:
    shard = run.settings.get("shard") if isinstance(run.settings, dict) else None
    if isinstance(shard, dict) and isinstance(shard.get("index"), int) and isinstance(shard.get("count"), int):
        return f"{shard['index']}/{shard['count']}"
    return ""


def device_kind(run: RunResult) -> str:
    """'GPU' when any case ran on CUDA, else 'CPU'."""
    return "GPU" if any(str(c.spec.device).startswith("cuda") for c in run.cases) else "CPU"


def shard_cost(run: RunResult, again: Sequence[CaseResult] = ()) -> ShardCost:
    """The cost of one run as it measured it: ``again`` are the cases the gate measured a second time
    (re-measures, lockstep settling; their base sides add no device time, see the module)."""
    device_s = sum(c.duration_s for c in run.cases) + sum(c.duration_s for c in again)
    skipped = sum(1 for c in run.cases if c.status == STATUS_SKIPPED)
    return ShardCost(_shard_label(run), wall_seconds(run.started_at, run.finished_at), device_s,
                     len(run.cases) - skipped, len({c.key for c in again}), skipped)


def run_cost(run: RunResult, again: Sequence[CaseResult] = ()) -> RunCost:
    """The cost of ``run``: a merged run's from the shards' costs merge recorded (``settings.shard.costs``),
    any other run's from its cases and ``again``."""
    shard = run.settings.get("shard") if isinstance(run.settings, dict) else None
    recorded = shard.get("costs") if isinstance(shard, dict) else None
    if isinstance(recorded, list) and recorded:
        costs = [ShardCost.from_json(c) for c in recorded]
        if all(c is not None for c in costs):
            return RunCost(device_kind(run), tuple(c for c in costs if c is not None))
    return RunCost(device_kind(run), (shard_cost(run, again),))


def measured_again(run_dir: Path | None) -> list[CaseResult]:
    """The cases a run's gate measured a second time, read from its folder (none where it has none)."""
    out: list[CaseResult] = []
    for name in (REMEASURE_FILE, LOCKSTEP_FILE):
        path = Path(run_dir) / name if run_dir is not None else None
        if path is not None and path.is_file():
            try:
                out.extend(load_results(path).cases)
            except SchemaError:  # an unreadable side file costs nothing the report can show
                continue
    return out


def read_cost(run: RunResult, run_dir: Path | None) -> RunCost:
    """``run_cost`` of the run in ``run_dir``, with the second measurements its gate left there."""
    return run_cost(run, measured_again(run_dir))
