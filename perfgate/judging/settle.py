"""What settles a first verdict: the re-measure of a step-time regression or win, and lockstep pairs
against a stored baseline's commit. No torch; the measuring is the caller's (``Remeasure``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from perfgate.judging.compare import STATUS, STEP_TIME, LookConfidence, judge_case
from perfgate.judging.gate_settings import GateSettings
from perfgate.model import rule_text
from perfgate.model.comparison import Comparison, Verdict
from perfgate.model.results import STATUS_FAILED, CaseResult, RunResult

Remeasure = Callable[[str], "tuple[CaseResult, CaseResult | None] | None"]

# Verdicts of a re-measure or a lockstep pair that carry no step time (a side skipped, no samples): they
# neither confirm nor contradict the verdict being checked, which therefore stands.
NO_TIME = ("skipped", "missing", "new")


def gives_no_time(v: Verdict) -> bool:
    """Does this verdict of a re-measure or a lockstep pair carry no step time? Those of NO_TIME, and a step
    time judged with no ratio at all (``inconclusive`` at "a step time of 0": samples of 0 ns): such a
    measurement is broken, and a broken second measurement must never soften the first."""
    return v.kind in NO_TIME or (v.metric == STEP_TIME and v.kind == "inconclusive" and v.ratio is None)


def base_failed(base: CaseResult | None) -> bool:
    """Did the base side of a re-measure fail? Its verdict (``fixed``, or ``unchanged`` when the head failed
    too) says nothing about the head's time: a base worker that timed out or crashed on a loaded runner
    must never clear a regression."""
    return base is not None and base.status == STATUS_FAILED


def confirm_regressions(comparison: Comparison, current: RunResult, gate: GateSettings, remeasure: Remeasure,
                        calibration: dict[str, Any] | None = None,
                        look_confidence: LookConfidence | None = None,
                        kinds: tuple[str, ...] = ("regression",)) -> tuple[Comparison, list[CaseResult]]:
    """Re-measure each case whose step-time verdict is one of ``kinds`` (a regression; against a stored
    baseline, a win too): it fails the gate only if it regresses again, and is a win only if it is again.

    ``remeasure(key)`` runs the case again and returns (new head case, new base case or None to keep the
    stored baseline's). Returns the updated comparison and the re-measured head cases.
    """
    assert comparison.baseline is not None
    remeasured: list[CaseResult] = []
    verdicts = list(comparison.verdicts)
    for i, v in enumerate(verdicts):
        if v.metric != STEP_TIME or v.kind not in kinds:
            continue
        again = remeasure(v.case_key)
        if again is None:
            continue
        head, base = again
        remeasured.append(head)
        base = base or comparison.baseline.case(v.case_key)
        new = [n for n in judge_case(v.case_key, base, head, gate, paired=comparison.mode == "against",
                                     calibration=calibration, look_confidence=look_confidence)
               if n.metric in (STEP_TIME, STATUS)]
        if not new:
            continue
        n = new[0]
        # skipped, no samples, 0 ns, or a base side that failed (`fixed`, or failing on both sides): the head's
        # time was never judged against a base, so nothing confirms or contradicts the first measurement
        if gives_no_time(n) or base_failed(base):
            # fail safe: a regression stands; a win stays a win only if it repeats
            verdicts[i] = rule_text.with_facts(v, v.kind if v.kind == "regression" else "inconclusive",
                                               remeasure="no-time", remeasure_gave=f"{n.kind}: {n.rule}")
            continue
        if n.kind == "newly-failing":  # the re-measure failed, or could not run the case at all
            first = f"first measurement {rule_text.ratio_text(v.ratio, v.ratio_low, v.ratio_high)}"
            was = "regressed" if v.kind == "regression" else "was faster"
            verdicts[i] = replace(n, rule=f"{n.rule} (in the re-measure; the {first} {was})")
        elif n.kind == v.kind:
            verdicts[i] = rule_text.settled(n, "remeasure", v, remeasure="confirmed")
        elif n.kind in ("regression", "win"):  # two measurements that contradict each other decide nothing
            verdicts[i] = replace(rule_text.settled(n, "remeasure", v, "inconclusive", remeasure="contradicted"),
                                  advice="the two measurements disagree: the machine's speed changed while the "
                                         "case ran; `perfgate run --against` measures base and head in lockstep")
        else:
            one_off = ("a one-off slowdown: the machine was busy" if v.kind == "regression"
                       else "a one-off speed-up: the machine ran this case faster for a while")
            verdicts[i] = replace(rule_text.settled(n, "remeasure", v, remeasure="not-repeated"),
                                  advice=n.advice or f"{one_off}, or the change is near the threshold; "
                                                     "`perfgate calibrate` measures the noise")
    return replace(comparison, verdicts=verdicts), remeasured


LOCKSTEP_SETTLES = ("regression", "win", "inconclusive")  # stored step-time verdicts lockstep pairs settle


def settle_in_lockstep(comparison: Comparison, measure: Remeasure, gate: GateSettings, *, commit: str,
                       calibration: dict[str, Any] | None = None, look_confidence: LookConfidence | None = None
                       ) -> tuple[Comparison, list[tuple[CaseResult, CaseResult]], set[str]]:
    """Judge again, paired, each stored step-time verdict in LOCKSTEP_SETTLES: ``measure(key)`` runs the case
    in lockstep pairs against the baseline's ``commit`` and returns (head, base), or None where it cannot
    (the stored verdict stands, for the re-measure to confirm). The paired verdict replaces the stored one,
    whose figures its rule keeps. Returns the updated comparison, the pairs measured and the keys settled."""
    verdicts = list(comparison.verdicts)
    pairs: list[tuple[CaseResult, CaseResult]] = []
    settled: set[str] = set()
    for i, v in enumerate(verdicts):
        if v.metric != STEP_TIME or v.kind not in LOCKSTEP_SETTLES:
            continue
        got = measure(v.case_key)
        if got is None or got[1] is None:
            continue
        head, base = got
        pairs.append((head, base))  # type: ignore[arg-type]  # got[1] is not None, checked above
        new = [n for n in judge_case(v.case_key, base, head, gate, paired=True, calibration=calibration,
                                     look_confidence=look_confidence) if n.metric == STEP_TIME]
        if new and not gives_no_time(new[0]):  # else a side failed, skipped, had no samples or 0 ns: the stored verdict stands
            verdicts[i] = rule_text.settled(new[0], "lockstep", v, commit=commit[:12])
            settled.add(v.case_key)
    return replace(comparison, verdicts=verdicts), pairs, settled

