"""Acknowledged regressions: ``[[tool.perfgate.acknowledge]]`` entries that let a known regression pass the
gate until a date, or while it stays within a bound. No torch. docs/gate.md, "Acknowledged regressions".

    [[tool.perfgate.acknowledge]]
    case = "operator_rollout/*/compile/cuda"   # workload/size/toggles/device, each part a glob
    metric = "step_time"                       # the default; a gated metric, or "*" for any
    reason = "inductor 2.13 fuses the stencil worse; back with the 2.14 pin"
    expires = 2026-12-31                       # in force through this day (a TOML date or "YYYY-MM-DD")
    bound = "ratio <= 1.12"                    # and while the measured ratio stays within it

Each entry needs a reason and ``expires``, ``bound`` or both. A ``regression`` verdict whose case and metric
an entry matches becomes ``acknowledged`` (it does not fail the gate) while the entry is in force: not past
its expiry date, and the verdict's ratio (current / baseline, the point estimate the reports print) within
its bound. Otherwise the verdict stays a regression and its rule says which entry no longer covers it and
why. Every entry is reported: in force (with what it covered), expired, or matching no regression.
"""

from __future__ import annotations

import datetime as dt
import fnmatch
import math
import operator
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Annotated, Any

from pydantic import BeforeValidator

from perfgate.model import rule_text
from perfgate.model.comparison import AckMatch, Acknowledgement, Comparison, Verdict
from perfgate.model.results import METRIC_KINDS, higher_is_better
from perfgate.util.validation import Table, expected, field_error, model_validator, one_of, satisfying

# The metrics a regression can be acknowledged on: the step time, the accuracy drift, and every gated metric.
METRICS = ("step_time", "accuracy", *(m for m, kind in METRIC_KINDS.items() if kind != "info"))
ANY_METRIC = "*"
TODAY_ENV = "PERFGATE_TODAY"  # the date expiry is judged on, YYYY-MM-DD; the local date without it

_OPS = {"<=": operator.le, "<": operator.lt, ">=": operator.ge, ">": operator.gt}
_BOUND = re.compile(r"\s*ratio\s*(<=|<|>=|>)\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*")
_ISO_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")


@dataclass(frozen=True)
class Bound:
    """``ratio OP value``: how far a regression may go (current / baseline) and stay acknowledged."""

    op: str
    value: float

    @property
    def text(self) -> str:
        return f"ratio {self.op} {self.value:g}"

    @property
    def upper(self) -> bool:
        """An upper bound (``<=``, ``<``): it limits a metric that is worse when higher."""
        return self.op in ("<=", "<")

    def limits(self, metric: str) -> bool:
        """Whether this bound limits how far ``metric`` can worsen (an upper bound for a metric worse when
        higher, a lower bound for one worse when lower)."""
        return self.upper != higher_is_better(metric)

    def holds(self, ratio: float) -> bool:
        return bool(_OPS[self.op](ratio, self.value))


def parse_bound(text: str) -> Bound | None:
    """``"ratio <= 1.12"`` -> Bound; None for anything else, or a number that is not finite and > 0
    (``1e999`` reads as inf: a bound no ratio passes, that is no bound at all)."""
    m = _BOUND.fullmatch(text)
    if m is None or not 0 < float(m.group(2)) < math.inf:
        return None
    return Bound(m.group(1), float(m.group(2)))


def _bound(text: str) -> Bound:
    bound = parse_bound(text)
    if bound is None:
        raise ValueError("not a bound")
    return bound


def _iso_date(value: Any) -> Any:
    """A TOML date as it is; a string YYYY-MM-DD as the date it names (anything else fails validation)."""
    if isinstance(value, str):
        if not _ISO_DATE.fullmatch(value.strip()):
            raise ValueError("not YYYY-MM-DD")
        return dt.date.fromisoformat(value.strip())
    if isinstance(value, dt.datetime):  # a TOML date-time: a day is what expires
        raise ValueError("a date-time, not a date")
    return value


def _case_pattern(value: str) -> bool:
    parts = value.split("/")
    return len(parts) == 4 and all(parts) and value.isprintable()


CasePattern = Annotated[str, satisfying(_case_pattern),
                        expected('a case pattern workload/size/toggles/device, each part a glob '
                                 '("operator_rollout/*/compile/cuda")')]
Reason = Annotated[str, satisfying(lambda v: bool(v.strip())), expected("a non-empty string (why it is acceptable)")]
ExpiryDate = Annotated[dt.date, BeforeValidator(_iso_date), expected("a date YYYY-MM-DD (a TOML date or a string)")]
BoundText = Annotated[str, satisfying(lambda v: parse_bound(v) is not None),
                      expected('a bound "ratio <= NUMBER" (or <, >=, >; NUMBER finite and > 0, the ratio current / baseline)')]


class AcknowledgeTable(Table):
    """One ``[[tool.perfgate.acknowledge]]`` entry as declared."""

    case: CasePattern
    metric: one_of((*METRICS, ANY_METRIC)) = "step_time"  # type: ignore[valid-type]  # pydantic's Annotated type, built at import
    reason: Reason
    expires: ExpiryDate | None = None
    bound: BoundText | None = None

    @model_validator(mode="after")
    def _needs_a_limit(self) -> AcknowledgeTable:
        if self.expires is None and self.bound is None:
            raise field_error("expires", "set, or bound set: an acknowledgement needs an expiry date "
                                         "(expires = YYYY-MM-DD), a bound (bound = \"ratio <= 1.12\") or both")
        bound = parse_bound(self.bound) if self.bound is not None else None
        if bound is not None and self.metric == "accuracy":
            raise field_error("bound", "absent for metric accuracy (its verdict has no ratio): use expires")
        if bound is not None and self.metric != ANY_METRIC and not bound.limits(self.metric):
            words = ("ratio >= NUMBER or ratio > NUMBER (fewer is worse)" if higher_is_better(self.metric)
                     else "ratio <= NUMBER or ratio < NUMBER (more is worse)")
            raise field_error("bound", f"{words} for metric {self.metric}")
        return self


@dataclass(frozen=True)
class Entry:
    """One validated entry of ``[[tool.perfgate.acknowledge]]``; ``name`` is its place there."""

    name: str
    case: str
    metric: str
    reason: str
    expires: dt.date | None = None
    bound: Bound | None = None

    @classmethod
    def from_table(cls, index: int, table: AcknowledgeTable) -> Entry:
        return cls(name=f"acknowledge[{index}]", case=table.case, metric=table.metric, reason=table.reason.strip(),
                   expires=table.expires, bound=_bound(table.bound) if table.bound is not None else None)

    def matches(self, v: Verdict) -> bool:
        """Whether ``v`` is a regression of a case and metric this entry names."""
        if v.kind != "regression" or (self.metric != ANY_METRIC and v.metric != self.metric):
            return False
        parts = v.case_key.split("/")
        return len(parts) == 4 and all(fnmatch.fnmatchcase(p, q) for p, q in zip(parts, self.case.split("/"), strict=True))

    def expired(self, today: dt.date) -> bool:
        """Past its expiry date: ``expires`` is the last day it is in force."""
        return self.expires is not None and today > self.expires

    def outcome(self, v: Verdict, today: dt.date) -> tuple[str, str]:
        """What this entry does with the regression ``v`` it matches: ('acknowledged' | 'expired' |
        'past-bound', the reason in words)."""
        if self.expired(today):
            return "expired", f"its acknowledgement {self.name} expired on {self.expires.isoformat()}"  # type: ignore[union-attr]
        if self.bound is not None:
            if v.ratio is None:
                return "past-bound", f"{self.name} allows {self.bound.text}, and this verdict has no ratio"
            if not self.bound.limits(v.metric):
                return "past-bound", (f"{self.name}'s bound {self.bound.text} cannot limit {v.metric}, which is "
                                      f"worse when {'lower' if higher_is_better(v.metric) else 'higher'}")
            if not self.bound.holds(v.ratio):
                return "past-bound", (f"the ratio {v.ratio:.3f} is past {self.name}'s bound {self.bound.text}: "
                                      "the change grew beyond what was acknowledged")
        return "acknowledged", self.reason

    @property
    def terms(self) -> str:
        parts = ([f"until {self.expires.isoformat()}"] if self.expires else []) + (
            [f"while {self.bound.text}"] if self.bound else [])
        return ", ".join(parts)


def entries(tables: Sequence[AcknowledgeTable] | None) -> tuple[Entry, ...]:
    """The validated tables of ``[[tool.perfgate.acknowledge]]`` as Entries, in their order."""
    return tuple(Entry.from_table(i, t) for i, t in enumerate(tables or ()))


def _listify(value: Any) -> Any:
    return [value] if isinstance(value, dict) else value  # a single [tool.perfgate.acknowledge] table is one entry


AcknowledgeTables = Annotated[list[AcknowledgeTable], BeforeValidator(_listify)]


class TodayError(ValueError):
    """$PERFGATE_TODAY is set to something that is not a date."""


def today() -> dt.date:
    """The date acknowledgements' expiry is judged on: $PERFGATE_TODAY (YYYY-MM-DD, to preview which ones
    lapse on a later day) or the local date."""
    raw = os.environ.get(TODAY_ENV, "").strip()
    if not raw:
        return dt.date.today()
    try:
        if not _ISO_DATE.fullmatch(raw):
            raise ValueError(raw)
        return dt.date.fromisoformat(raw)
    except ValueError:
        raise TodayError(f"{TODAY_ENV} must be a date YYYY-MM-DD, got {raw!r}") from None


def _ci_note(v: Verdict, bound: Bound) -> str:
    """Where the verdict's CI reaches past the bound its point estimate is within: said, not decided on."""
    end = v.ratio_high if bound.upper else v.ratio_low
    if end is None or bound.holds(end):
        return ""
    return f"; its CI reaches {end:.3f}, past the bound: a later run may find it past"


def apply(comparison: Comparison, acknowledged: Sequence[Entry], today: dt.date) -> Comparison:
    """``comparison`` with every regression that an entry in force covers turned into ``acknowledged``, and a
    record of every entry (``Comparison.acknowledgements``). A regression two entries match is covered by
    the first in force that holds it; one that none covers stays a regression, its rule naming each
    entry that matched and why it no longer covers it."""
    if not acknowledged:
        return comparison
    matches: dict[str, list[AckMatch]] = {e.name: [] for e in acknowledged}
    verdicts = []
    for v in comparison.verdicts:
        candidates = [e for e in acknowledged if e.matches(v)]
        if not candidates:
            verdicts.append(v)
            continue
        judged = [(e, *e.outcome(v, today)) for e in candidates]
        covering = next(((e, why) for e, outcome, why in judged if outcome == "acknowledged"), None)
        if covering is not None:
            e, why = covering
            matches[e.name].append(AckMatch(v.case_key, v.metric, "acknowledged", v.ratio))
            note = _ci_note(v, e.bound) if e.bound is not None and v.ratio is not None else ""
            verdicts.append(replace(rule_text.noted(v, f"acknowledged by {e.name} ({e.terms})"), kind="acknowledged",
                                    advice=f"acknowledged: {why}{note}"))
            continue
        for e, outcome, _ in judged:
            matches[e.name].append(AckMatch(v.case_key, v.metric, outcome, v.ratio))
        verdicts.append(rule_text.noted(v, *(why for _, _, why in judged)))
    records = []
    for e in acknowledged:
        state = "expired" if e.expired(today) else ("in-force" if matches[e.name] else "unmatched")
        records.append(Acknowledgement(entry=e.name, case=e.case, metric=e.metric, reason=e.reason, state=state,
                                       expires=e.expires.isoformat() if e.expires else None,
                                       bound=e.bound.text if e.bound else None, matches=tuple(matches[e.name])))
    return replace(comparison, verdicts=verdicts, acknowledgements=records, acknowledged_on=today.isoformat())


def merged(parts: Sequence[Sequence[Acknowledgement]]) -> list[Acknowledgement]:
    """The acknowledgements of several shards' comparisons as one: each entry's matches joined, an entry
    unmatched in every shard unmatched, one expired in any expired."""
    order: list[str] = []
    joined: dict[str, Acknowledgement] = {}
    for part in parts:
        for a in part:
            if a.entry not in joined:
                order.append(a.entry)
                joined[a.entry] = a
                continue
            have = joined[a.entry]
            states = {have.state, a.state}
            state = "expired" if "expired" in states else ("in-force" if "in-force" in states else "unmatched")
            joined[a.entry] = replace(have, state=state, matches=have.matches + a.matches)
    return [joined[name] for name in order]


def summary_lines(comparison: Comparison) -> list[str]:
    """The acknowledgements of ``comparison`` in words, one line each, grouped: in force, expired, and the
    entries that matched no regression (a note). Empty when none applied."""
    acks = comparison.acknowledgements
    if not acks:
        return []
    out = []
    on = f" (judged on {comparison.acknowledged_on})" if comparison.acknowledged_on else ""
    for state, title in (("in-force", "in force"), ("expired", "expired")):
        group = [a for a in acks if a.state == state]
        if group:
            out.append(f"Acknowledgements {title}{on}: {len(group)}")
            out.extend(f"  {record_line(a)}" for a in group)
    unmatched = [a for a in acks if a.state == "unmatched"]
    if unmatched:
        out.append(f"Note: {len(unmatched)} acknowledgement(s) matched no regression (fixed, or a pattern that "
                   "names no case: case ids are workload/size/toggles/device): "
                   + ", ".join(f"{a.entry} {a.case} {a.metric}" for a in unmatched))
    return out


def record_line(a: Acknowledgement) -> str:
    """'acknowledge[0] rollout/*/compile/cpu step_time (until 2026-12-31): "why"; covers: KEY step_time 1.080x'."""
    head = f'{a.entry} {a.case} {a.metric} ({a.terms}): "{a.reason}"'
    parts = []
    for outcome, words in (("acknowledged", "covers"), ("past-bound", "PAST ITS BOUND, a regression again"),
                           ("expired", "no longer covers, a regression again")):
        ms = a.matched(outcome)
        if ms:
            parts.append(f"{words}: " + ", ".join(match_text(m) for m in ms))
    return head + ("; " + "; ".join(parts) if parts else "")


def match_text(m: AckMatch) -> str:
    ratio = f" {m.ratio:.3f}x" if m.ratio is not None else ""
    return f"{m.case_key} {m.metric}{ratio}"
