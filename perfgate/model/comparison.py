"""A comparison: every verdict of a run judged against a stored baseline or a base ref's run (Verdict,
Comparison), the acknowledgements applied to it, the evidence it rests on, and comparison.json as declared
(``ComparisonDocument``).

Produced by perfgate.judging.compare; read by the console, the reports and the gate's exit code. Judges
nothing: the verdicts are made above the model.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Annotated, Any

from pydantic import BeforeValidator, WithJsonSchema

from perfgate.model.results import RunResult
from perfgate.util.validation import (
    NOT_STORED,
    Count,
    Index,
    Measured,
    Name,
    Stored,
    Text,
    check,
    document,
    expected,
    from_document,
    one_of,
    satisfying,
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

# What decided a step-time verdict (TimeFacts.decided): perfgate.judging.decision's rule, by the part of it that
# spoke. No finite estimate; significant and past the minimum effect (a regression or a win); past the minimum
# effect but not significant; within the minimum effect with the interval inside the equivalence margin
# (unchanged); within the minimum effect with the interval reaching past the margin.
DECISIONS = ("no-estimate", "past-min-effect", "not-significant", "within-margin", "past-margin")
# What the re-measure of a step-time regression or win did (TimeFacts.remeasure): repeated it, contradicted it
# (the other way), did not repeat it, or gave no step time (the first measurement's verdict then stands, a
# win only as inconclusive)
REMEASURES = ("confirmed", "contradicted", "not-repeated", "no-time")


def _as_tuple(value: Any) -> Any:
    """A JSON array as the tuple a record holds (strict validation takes no list for a tuple)."""
    return tuple(value) if isinstance(value, list) else value


# (base, head): a count on each side of a comparison
Sides = Annotated[tuple[Index, Index], BeforeValidator(_as_tuple), expected("a [base, head] pair of integers >= 0")]
Notes = Annotated[tuple[Text, ...], BeforeValidator(_as_tuple), expected("an array of strings")]


@dataclass(frozen=True)
class TimeFacts:
    """What decided a step-time verdict, as data. perfgate.model.rule_text says it in words from these and the
    verdict's numbers (the verdict's ``rule``): the decision and the statistics it was applied to, the
    processes each side kept, set aside and the modes they fell into, the threshold's and the run-to-run
    term's sources, the confidence, what made a change inconclusive (one process a side, a busy host, other
    parameters in the baseline), and what settled it (SETTLED_BY, REMEASURES)."""

    paired: bool  # base and head processes compared pair by pair (lockstep), else side against side
    processes: Sides  # the processes (pairs) the comparison kept, a side
    confidence: Measured  # the level the interval was judged at
    run_to_run: Measured  # the run-to-run term added to the interval (relative sd)
    run_to_run_source: Text = ""
    set_aside: Sides = (0, 0)  # processes set aside as slowed by the machine
    modes: Sides = (1, 1)  # performance modes the kept processes fall into
    host_busy: Text | None = None  # why the host was not quiet: a change measured alone on it cannot stand
    settled_by: one_of(SETTLED_BY) = "measurement"  # type: ignore[valid-type]  # pydantic's Annotated type
    # Below: absent from an older perfgate's comparison.json, whose stored rule says them in words
    decided: one_of(DECISIONS) | None = None  # type: ignore[valid-type]  # the part of the rule that decided
    significant: bool = False  # the interval excludes 1 (and the rank test agrees where it can)
    min_effect: Measured = 0.0  # the change a regression or a win must reach by its estimate (relative)
    margin: Measured = 0.0  # the equivalence margin an unchanged interval lies within (relative)
    test: Text = ""  # the statistics: test, interval and how the processes were read
    throttled: Text = ""  # processes (pairs) set aside as throttled by their GPU, or kept although they were
    threshold_source: Text = ""  # where the threshold came from (config, calibration, the noise floor)
    one_process: bool = False  # a regression or win left inconclusive: one process on a side hides their noise
    look: Count | None = None  # judged at the confidence of the sequential look at this many processes
    other_parameters: Text = ""  # what of the case's spec the baseline measured otherwise
    remeasure: one_of(REMEASURES) | None = None  # type: ignore[valid-type]  # what the re-measure did
    remeasure_gave: Text = ""  # the re-measure's verdict that gave no step time, and its rule
    before_kind: one_of(VERDICT_KINDS) | None = None  # type: ignore[valid-type]  # the verdict settled, with its
    before_ratio: Measured | None = None  # ratio and interval (settled_by other than "measurement")
    before_ratio_low: Measured | None = None
    before_ratio_high: Measured | None = None
    commit: Text = ""  # the baseline's commit lockstep pairs ran against (12 characters)
    notes: Notes = ()  # said last: what the acknowledgements made of it


@dataclass(frozen=True)
class Verdict:
    """One case x metric judged against a baseline, with the numbers that made the decision. A step-time
    verdict's ``rule`` is said from its numbers and ``facts`` (perfgate.model.rule_text.time_rule)."""

    case_key: Name
    metric: Name  # "step_time", "accuracy", "status", or a METRIC_KINDS name
    kind: one_of(VERDICT_KINDS)  # type: ignore[valid-type]  # pydantic's Annotated type, built at import
    baseline: Measured | None = None
    current: Measured | None = None
    ratio: Measured | None = None  # current / baseline
    ratio_low: Measured | None = None
    ratio_high: Measured | None = None
    p_value: Measured | None = None
    threshold: Measured | None = None  # the relative change that counts as large, or the tolerance used
    rule: Text = ""  # the rule applied, in words
    advice: Text | None = None
    # a step-time verdict's evidence as data; absent in older files
    facts: Annotated[TimeFacts | None, Stored(TimeFactsDocument | None)] = None

    @property
    def fails_gate(self) -> bool:
        return self.kind in GATE_FAILING_VERDICTS

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Any, source: str = "comparison", where: str = "verdict") -> Verdict:
        """A Verdict read back from a comparison.json, its rule as stored; SchemaError naming the field when
        malformed."""
        return from_document(cls, check(VerdictDocument, data, source, where))


# comparison.json as declared: each field's type and what an error line says would be valid (see
# perfgate.model.results, which declares results.json the same way); the documents of the records here are
# generated from them (validation.document).
TimeFactsDocument = document(TimeFacts, "TimeFactsDocument")
VerdictDocument = document(Verdict, "VerdictDocument")


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


# [baseline value, this run's value]: report.html's environment table shows both (a shorter list crashed it)
EnvironmentPair = Annotated[list[Any], satisfying(lambda v: len(v) == 2),
                            WithJsonSchema({"type": "array", "items": {}, "minItems": 2, "maxItems": 2}),
                            expected("a [baseline, this run] pair")]


@dataclass
class Comparison:
    """Every verdict of one comparison: a run against a stored baseline or against a base ref's run.

    Produced by perfgate.judging.compare; consumed by the console, the exporters and the gate's exit code.
    """

    verdicts: Annotated[list[Verdict], Stored(list[VerdictDocument])]
    # "baseline" (a stored file) or "against" (base and head in the same job)
    mode: one_of(("baseline", "against")) = "baseline"  # type: ignore[valid-type]  # pydantic's Annotated type
    baseline_source: Text | None = None  # the baseline file's path, or "git:REF"
    baseline: Annotated[RunResult | None, NOT_STORED] = None  # the run compared with, where it was at hand
    # environment keys that differ: {key: [baseline value, current value]}
    environment_diff: dict[str, EnvironmentPair] = field(default_factory=dict)
    warnings: list[Text] = field(default_factory=list)
    # every [[tool.perfgate.acknowledge]] entry as applied (perfgate.model.acknowledge.apply), and the date its
    # expiry was judged on (ISO); empty and None when none was applied
    acknowledgements: Annotated[list[Acknowledgement], Stored(list[AcknowledgementDocument])] = \
        field(default_factory=list)
    acknowledged_on: Text | None = None

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

    @classmethod
    def from_json(cls, data: Any, source: str = "comparison") -> Comparison:
        """A Comparison read back from a comparison.json (its baseline run is not in it); SchemaError naming
        ``source`` and the field when malformed."""
        return from_document(cls, check(ComparisonDocument, data, source))


# comparison.json: what a Comparison holds but the run it was compared with, and whether it fails the gate,
# written for readers (recomputed from the verdicts, never read back)
ComparisonDocument = document(
    Comparison, "ComparisonDocument", gate_failed=(bool | None, None),
    doc="comparison.json: every verdict of one comparison, a run against a stored baseline or a base ref.")


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
