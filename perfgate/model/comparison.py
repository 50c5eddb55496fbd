"""A comparison: every verdict of a run judged against a stored baseline or a base ref's run (Verdict,
Comparison), the acknowledgements applied to it, the evidence it rests on, and comparison.json as declared
(``ComparisonDocument``).

Produced by perfgate.judging.compare; read by the console, the reports and the gate's exit code. Judges
nothing: the verdicts are made above the model.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Annotated, Any

from perfgate.model.results import RunResult
from perfgate.util.validation import (
    Document,
    Index,
    Measured,
    Name,
    Stored,
    Text,
    check,
    document,
    from_document,
    one_of,
)
from perfgate.util.vocabulary import STATUS_OK, STATUS_SKIPPED

# The verdict kinds of a comparison, per case and metric. "acknowledged": a regression that an entry of
# [[tool.perfgate.acknowledge]] in force covers (perfgate.model.acknowledge); it does not fail the gate.
VERDICT_KINDS = (
    "regression", "acknowledged", "win", "unchanged", "inconclusive", "new", "missing", "newly-failing", "fixed",
    "skipped",
)
GATE_FAILING_VERDICTS = ("regression", "newly-failing")

# What an acknowledgement did with a regression it matched (perfgate.model.acknowledge): covered it, or left it a
# regression because the entry expired or the ratio is past the entry's bound.
ACK_OUTCOMES = ("acknowledged", "expired", "past-bound")
# An entry's state in a comparison: in force and matched a regression, expired, or in force and matched none.
ACK_STATES = ("in-force", "expired", "unmatched")

# What settled a step-time verdict: its first measurement (the stored comparison, `--against`'s pairs, a
# screen that passed), the re-measure that confirmed or contradicted it, lockstep pairs against a stored
# baseline's commit, or the stored comparison's full sampler after lockstep could not run
SETTLED_BY = ("measurement", "remeasure", "lockstep", "full-sampler")

# comparison.json as declared: each field's type and what an error line says would be valid (see
# perfgate.model.results_file, which declares results.json the same way).


class TimeFactsDocument(Document):
    """What decided a step-time verdict, as data: the rule text says the same in words."""

    paired: bool
    processes: list[Index]  # [base, head]: the processes (pairs) the comparison kept, a side
    set_aside: list[Index] = [0, 0]
    modes: list[Index] = [1, 1]
    confidence: Measured
    run_to_run: Measured
    run_to_run_source: Text = ""
    host_busy: Text | None = None
    settled_by: one_of(SETTLED_BY) = "measurement"  # type: ignore[valid-type]  # pydantic's Annotated type


class VerdictDocument(Document):
    """One case x metric judged against a baseline, with the numbers that made the decision."""

    case_key: Name
    metric: Name
    kind: one_of(VERDICT_KINDS)  # type: ignore[valid-type]  # pydantic's Annotated type, built at import
    baseline: Measured | None = None
    current: Measured | None = None
    ratio: Measured | None = None
    ratio_low: Measured | None = None
    ratio_high: Measured | None = None
    p_value: Measured | None = None
    threshold: Measured | None = None
    rule: Text = ""
    advice: Text | None = None
    facts: TimeFactsDocument | None = None  # step time only; absent in older files


def _pair(values: Any, default: tuple[int, int]) -> tuple[int, int]:
    return (int(values[0]), int(values[1])) if len(values) == 2 else default


@dataclass(frozen=True)
class TimeFacts:
    """What decided a step-time verdict, as data (its rule says the same in words): paired or not, the
    processes each side kept and set aside, the performance modes they fell into, the confidence it was
    judged at, the run-to-run term added and where it came from, a busy host that made it inconclusive,
    and what settled it (SETTLED_BY)."""

    paired: bool
    processes: tuple[int, int]  # (base, head)
    confidence: float
    run_to_run: float
    run_to_run_source: str = ""
    set_aside: tuple[int, int] = (0, 0)
    modes: tuple[int, int] = (1, 1)
    host_busy: str | None = None
    settled_by: str = "measurement"

    @classmethod
    def from_document(cls, doc: TimeFactsDocument) -> TimeFacts:
        return cls(paired=doc.paired, processes=_pair(doc.processes, (0, 0)), confidence=float(doc.confidence),
                   run_to_run=float(doc.run_to_run), run_to_run_source=doc.run_to_run_source,
                   set_aside=_pair(doc.set_aside, (0, 0)), modes=_pair(doc.modes, (1, 1)),
                   host_busy=doc.host_busy, settled_by=doc.settled_by)


@dataclass(frozen=True)
class Verdict:
    """One case x metric judged against a baseline, with the numbers that made the decision."""

    case_key: str
    metric: str  # "step_time", "accuracy", "status", or a METRIC_KINDS name
    kind: str  # one of VERDICT_KINDS
    baseline: float | None = None
    current: float | None = None
    ratio: float | None = None  # current / baseline
    ratio_low: float | None = None
    ratio_high: float | None = None
    p_value: float | None = None
    threshold: float | None = None  # the relative change that counts as large, or the tolerance used
    rule: str = ""  # the rule applied, in words
    advice: str | None = None
    facts: TimeFacts | None = None  # a step-time verdict's evidence as data

    def settled(self, by: str, rule: str) -> Verdict:
        """This verdict as what ``by`` (SETTLED_BY) settled, with ``rule``."""
        facts = replace(self.facts, settled_by=by) if self.facts is not None else None
        return replace(self, rule=rule, facts=facts)

    @property
    def fails_gate(self) -> bool:
        return self.kind in GATE_FAILING_VERDICTS

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Any, source: str = "comparison", where: str = "verdict") -> Verdict:
        """A Verdict read back from a comparison.json; SchemaError naming the field when malformed."""
        doc = check(VerdictDocument, data, source, where)
        fields = {name: getattr(doc, name) for name in VerdictDocument.model_fields if name != "facts"}
        return cls(**fields, facts=TimeFacts.from_document(doc.facts) if doc.facts is not None else None)



@dataclass(frozen=True)
class AckMatch:
    """A regression an acknowledgement matched, and what it did with it (``outcome``: one of ACK_OUTCOMES)."""

    case_key: Name
    metric: Name
    outcome: Annotated[str, Stored(one_of(ACK_OUTCOMES))]
    ratio: Measured | None = None


AckMatchDocument = document(AckMatch, "AckMatchDocument")


@dataclass(frozen=True)
class Acknowledgement:
    """One [[tool.perfgate.acknowledge]] entry as a comparison applied it: the entry's terms, its ``state``
    (ACK_STATES) and the regressions it matched. perfgate.model.acknowledge makes these."""

    entry: Name  # "acknowledge[0]": its place in the configuration, as error lines name it
    case: Name
    metric: Name
    reason: Text
    state: Annotated[str, Stored(one_of(ACK_STATES))]
    expires: Text | None = None  # ISO date, the last day it is in force
    bound: Text | None = None  # "ratio <= 1.12"
    matches: Annotated[tuple[AckMatch, ...], Stored(list[AckMatchDocument], default=[], read=tuple)] = ()

    @property
    def terms(self) -> str:
        """'until 2026-12-31, while ratio <= 1.12': what keeps it in force."""
        parts = ([f"until {self.expires}"] if self.expires else []) + ([f"while {self.bound}"] if self.bound else [])
        return ", ".join(parts)

    def matched(self, outcome: str) -> list[AckMatch]:
        return [m for m in self.matches if m.outcome == outcome]

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "matches": [asdict(m) for m in self.matches]}

    @classmethod
    def from_json(cls, data: Any, source: str = "comparison", where: str = "acknowledgements") -> Acknowledgement:
        return from_document(cls, check(AcknowledgementDocument, data, source, where))


AcknowledgementDocument = document(Acknowledgement, "AcknowledgementDocument")


class ComparisonDocument(Document):
    """comparison.json: every verdict of one comparison, a run against a stored baseline or a base ref."""

    mode: one_of(("baseline", "against")) = "baseline"  # type: ignore[valid-type]  # pydantic's Annotated type, built at import
    baseline_source: Text | None = None
    environment_diff: dict[str, list[Any]] = {}
    warnings: list[Text] = []
    gate_failed: bool | None = None  # written for readers; recomputed from the verdicts
    verdicts: list[VerdictDocument]
    acknowledgements: list[AcknowledgementDocument] = []  # type: ignore[valid-type]  # generated from Acknowledgement
    acknowledged_on: Text | None = None  # the date the acknowledgements' expiry was judged on (ISO)


@dataclass
class Comparison:
    """Every verdict of one comparison: a run against a stored baseline or against a base ref's run.

    Produced by perfgate.judging.compare; consumed by the console, the exporters and the gate's exit code.
    """

    verdicts: list[Verdict]
    mode: str = "baseline"  # "baseline" (a stored file) or "against" (base and head in the same job)
    baseline_source: str | None = None  # the baseline file's path, or "git:REF"
    baseline: RunResult | None = None
    # environment keys that differ: {key: [baseline value, current value]}
    environment_diff: dict[str, list[Any]] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    # every [[tool.perfgate.acknowledge]] entry as applied (perfgate.model.acknowledge.apply), and the date its
    # expiry was judged on (ISO); empty and None when none was applied
    acknowledgements: list[Acknowledgement] = field(default_factory=list)
    acknowledged_on: str | None = None

    @property
    def gate_failed(self) -> bool:
        return any(v.fails_gate for v in self.verdicts)

    def counts(self) -> dict[str, int]:
        out = dict.fromkeys(VERDICT_KINDS, 0)
        for v in self.verdicts:
            out[v.kind] += 1
        return out

    def for_case(self, key: str) -> list[Verdict]:
        return [v for v in self.verdicts if v.case_key == key]

    def to_json(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "baseline_source": self.baseline_source,
            "environment_diff": self.environment_diff,
            "warnings": self.warnings,
            "gate_failed": self.gate_failed,
            "verdicts": [v.to_json() for v in self.verdicts],
            "acknowledgements": [a.to_json() for a in self.acknowledgements],
            "acknowledged_on": self.acknowledged_on,
        }


@dataclass(frozen=True)
class Evidence:
    """What a comparison of ``run`` rests on, counted over the run's cases. A case carried evidence when it
    ran now and was judged against the base (``compared``: it ran on both sides; or it is new to the base,
    or fixed), or when its status fails the gate (newly failing). One skipped now, or failing now as it did
    in the base (or new to it), carried none: a gate with no case that carried evidence cannot pass."""

    cases: int
    carried: int
    compared: int
    skipped: int  # of those that carried none
    unchanged: int = 0  # cases `run --changed-since` skipped: not among ``cases``, evidence of nothing either way

    @property
    def unjudged(self) -> str:
        """Why the cases that carried none did: '1 skipped, 1 failed as in the base or new to it'."""
        return f"{self.skipped} skipped, {self.cases - self.carried - self.skipped} failed as in the base or new to it"

    @property
    def none_compared(self) -> str:
        """Why a gate on this evidence cannot pass ('' when it can): no case ran to be judged, or none was
        compared with the base (each new to it, or fixed: nothing says how the head's figures compare). A run
        whose every case was skipped as unchanged by the change has nothing to pass on and nothing to doubt."""
        if self.cases == 0 and self.unchanged:
            return ""
        if self.carried == 0:
            return f"none of the {self.cases} case(s) ran to be judged ({self.unjudged})"
        if self.compared == 0:
            return f"none of the {self.cases} case(s) was compared with the base (each is new to it or fixed)"
        return ""

    @property
    def text(self) -> str:
        """'evidence: 2 of 3 case(s) ran and were judged (2 compared with the base); 1 carried none (...)'."""
        none = self.cases - self.carried
        return (f"evidence: {self.carried} of {self.cases} case(s) ran and were judged ({self.compared} compared "
                f"with the base)" + (f"; {none} carried none ({self.unjudged})" if none else ""))


def evidence(run: RunResult, comparison: Comparison) -> Evidence:
    """The evidence ``comparison`` of ``run`` rests on (Evidence)."""
    failing = {v.case_key for v in comparison.verdicts if v.fails_gate}
    compared = {v.case_key for v in comparison.verdicts if v.metric != "status"}
    cases = [c for c in run.cases if not c.skipped_as_unchanged or c.key in failing]
    none = [c for c in cases if c.status != STATUS_OK and c.key not in failing]
    return Evidence(cases=len(cases), carried=len(cases) - len(none),
                    compared=sum(1 for c in cases if c.key in compared),
                    skipped=sum(1 for c in none if c.status == STATUS_SKIPPED),
                    unchanged=len(run.cases) - len(cases))
