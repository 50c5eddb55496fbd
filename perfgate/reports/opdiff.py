"""The op diff of a regressed case: which ops and kernels differ between the baseline's profile and this
run's (profile.top_ops), largest self-time change first. No torch here."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from perfgate.model.results import CaseResult


@dataclass
class OpChange:
    """One op or kernel that differs between the baseline's profile and this run's."""

    name: str
    kind: str  # op | kernel
    change: str  # added | removed | count changed | self time changed
    count_before: float | None
    count_after: float | None
    self_us_before: float | None
    self_us_after: float | None

    @property
    def self_us_delta(self) -> float:
        return (self.self_us_after or 0.0) - (self.self_us_before or 0.0)


def op_diff(before: CaseResult | None, after: CaseResult, limit: int = 25) -> list[OpChange]:
    """Ops and kernels that differ between two profiles (profile.top_ops), largest self-time change first."""
    if before is None:
        return []

    def index(case: CaseResult) -> dict[tuple[str, str], dict[str, Any]]:
        out = {}
        for op in case.profile.get("top_ops") or []:
            if isinstance(op, dict) and "name" in op:
                out[(str(op.get("kind", "op")), str(op["name"]))] = op
        return out

    old, new = index(before), index(after)
    changes = []
    for k in old.keys() | new.keys():
        a, b = old.get(k), new.get(k)
        ca, cb = (a or {}).get("count_per_step"), (b or {}).get("count_per_step")
        ta, tb = (a or {}).get("self_time_us_per_step"), (b or {}).get("self_time_us_per_step")
        if a is None:
            change = "added"
        elif b is None:
            change = "removed"
        elif ca is not None and cb is not None and abs(cb - ca) > 1e-9 * max(abs(ca), 1.0):
            change = "count changed"
        elif ta is not None and tb is not None and abs(tb - ta) > 0.05 * max(abs(ta), 1e-9):
            change = "self time changed"
        else:
            continue
        changes.append(OpChange(k[1], k[0], change, ca, cb, ta, tb))
    changes.sort(key=lambda c: (-abs(c.self_us_delta), c.kind, c.name))
    return changes[:limit]
