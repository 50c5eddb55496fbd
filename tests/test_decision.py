"""perfgate.judging.decision: one step-time rule for every mode, and its verdicts never get worse as the evidence
gets better."""

from __future__ import annotations

import math

import pytest

from perfgate.judging.compare import judge_time
from perfgate.judging.decision import DECIDED, MARGIN_SHARE, MIN_EFFECT_SHARE, UNPAIRED_MIN_EFFECT_SHARE, decide
from perfgate.judging.timechange import TimeChange

THRESHOLD = 0.05


def _change(ratio: float, low: float, high: float, paired: bool, processes: int = 8) -> TimeChange:
    return TimeChange(ratio=ratio, low=low, high=high, p_value=0.01, significant=low > 1 or high < 1,
                      paired=paired, n_base=processes, n_head=processes, test="test", process_level=processes > 1)


def _shrunk(estimate: float, half: float, steps: int = 60) -> list[tuple[float, float]]:
    """Intervals (log scale) around ``estimate``, from half-width ``half`` down to almost nothing, each one
    inside the one before, lopsided as a bootstrap's can be."""
    return [(estimate - half * f, estimate + 0.6 * half * f) for f in (1 - k / steps for k in range(steps))]


@pytest.mark.parametrize("paired, processes", [(True, 8), (False, 8), (False, 1)],
                         ids=["lockstep", "stored", "one process"])
def test_a_narrower_interval_around_the_same_estimate_never_undoes_a_verdict(paired, processes):
    """Around every estimate from -12% to +12%, intervals from +/-15% down to nothing, in every mode: once
    decided, the verdict stays the same verdict; it never goes back to inconclusive nor flips direction. The rule before
    perfgate.judging.decision failed this: +3% with CI [1.005, 1.055] was a regression, and +3% with CI [1.01,
    1.049] was unchanged."""
    for e in range(-120, 121, 3):
        estimate = math.log1p(e / 1000)
        for half in (0.15, 0.08, 0.04):
            seen: list[str] = []
            for lo, hi in _shrunk(estimate, half):
                kind = judge_time(_change(math.exp(estimate), math.exp(lo), math.exp(hi), paired, processes),
                                  THRESHOLD, "threshold")[0]
                if seen and seen[-1] in DECIDED:
                    assert kind == seen[-1], (e, half, lo, hi, seen[-1], kind)
                seen.append(kind)
            # enough precision always decides, but one process a side never makes a regression or a win
            assert seen[-1] in (DECIDED if processes > 1 else ("unchanged", "inconclusive")), (e, seen[-1])


def test_the_old_rules_counterexample_is_a_regression_at_every_precision():
    wide = judge_time(_change(1.03, 1.005, 1.055, True), THRESHOLD, "threshold")[0]
    narrow = judge_time(_change(1.03, 1.01, 1.049, True), THRESHOLD, "threshold")[0]
    assert wide == narrow == "regression"


@pytest.mark.parametrize("ratio, low, high, kind", [
    (1.049, 1.046, 1.052, "regression"),  # a change of the threshold's size fails every time, not half
    (1.03, 1.01, 1.06, "regression"),  # past the minimum effect (half the threshold), significant
    (1.047, 1.045, 1.049, "regression"),  # shown smaller than the threshold, but past the minimum effect
    (1.024, 1.02, 1.028, "unchanged"),  # a real but small change: below the minimum effect, CI in the margin
    (1.02, 1.005, 1.06, "inconclusive"),  # small by its estimate, but the margin's 5% not ruled out
    (1.003, 0.99, 1.01, "unchanged"),
    (1.04, 0.99, 1.09, "inconclusive"),  # past the minimum effect by its estimate, not significant
    (1 / 1.049, 1 / 1.052, 1 / 1.046, "win"),
    (1 / 1.02, 1 / 1.06, 1 / 1.005, "inconclusive"),
    (1 / 1.024, 1 / 1.028, 1 / 1.02, "unchanged"),
])
def test_the_rule_per_zone(ratio, low, high, kind):
    got = decide(ratio, low, high, low > 1 or high < 1, THRESHOLD)
    assert got.kind == kind, got.why
    assert judge_time(_change(ratio, low, high, True), THRESHOLD, "threshold")[0] == kind


@pytest.mark.parametrize("ratio, low, high, kind", [
    (1.045, 1.042, 1.048, "unchanged"),  # a precise change short of the threshold: inside the margin
    (1.03, 1.01, 1.06, "inconclusive"),  # significant, but unpaired it must reach the threshold itself
    (1.06, 1.01, 1.11, "regression"),
    (1 / 1.06, 1 / 1.11, 1 / 1.01, "win"),
    (1 / 1.04, 1 / 1.07, 1 / 1.01, "inconclusive"),  # the A/A pair in folders of other lengths, scaled
    (1.01, 0.995, 1.03, "unchanged"),
])
def test_unpaired_the_minimum_effect_is_the_whole_threshold(ratio, low, high, kind):
    """Two runs measured at different times differ as wholes by more than the run-to-run term says; an
    unpaired estimate must reach the threshold itself before it is a regression or a win."""
    assert UNPAIRED_MIN_EFFECT_SHARE == 1.0
    kind_got, rule, _ = judge_time(_change(ratio, low, high, False), THRESHOLD, "threshold")
    assert kind_got == kind, rule
    if kind in ("regression", "win"):
        assert "minimum effect 5%" in rule


def test_the_rule_text_says_which_part_decided():
    assert "minimum effect 2.5%" in decide(1.03, 1.01, 1.05, True, THRESHOLD).why
    unchanged = decide(1.01, 0.99, 1.03, False, THRESHOLD).why
    assert "equivalence margin +/-5%" in unchanged and "no significant change" in unchanged
    kind, rule, advice = judge_time(_change(1.01, 0.94, 1.08, True), THRESHOLD, "global threshold")
    assert kind == "inconclusive" and "reaches past the equivalence margin" in rule and advice
    assert "global threshold 5%" in rule and "paired base/head processes" in rule
    assert MIN_EFFECT_SHARE * THRESHOLD < MARGIN_SHARE * THRESHOLD  # small changes can be unchanged


def test_a_non_finite_interval_decides_nothing():
    assert decide(1.1, 1.05, math.inf, True, THRESHOLD).kind == "inconclusive"
    assert decide(math.nan, 0.9, 1.1, False, THRESHOLD).kind == "inconclusive"
