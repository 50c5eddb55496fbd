"""The step-time decision rule: an estimated change, its interval and whether it is significant -> a
verdict. One rule for every mode (lockstep pairs, a stored baseline, one process a side); each mode's
evidence reaches it through its interval (perfgate.judging.compare builds it), never through a rule of its own.
No torch; docs/gate.md ("Deciding a step-time change") states the rule.

With the case's threshold *t* (the change the gate is built to catch), on the log scale:

- ``regression`` / ``win``: the change is significant (its interval excludes no change, the rank test
  agreeing where it can) and its estimate is at least the **minimum effect** in that direction:
  ``MIN_EFFECT_SHARE`` of *t* for paired base/head processes (lockstep), ``UNPAIRED_MIN_EFFECT_SHARE``
  of *t* (the whole threshold) for an unpaired comparison (a stored baseline, two runs);
- ``unchanged``: the estimate is within the minimum effect and the whole interval lies inside the
  **equivalence margin**, +/- ``MARGIN_SHARE`` of *t*: no change as large as the threshold is left open;
- ``inconclusive``: anything else.

Why the estimate decides the direction and size, and the interval only whether the evidence suffices:
the three decided zones are then told apart by the estimate alone, so a narrower interval around the
same estimate can only move a verdict from ``inconclusive`` to a decided one, never from a decided one
back, nor from one decided verdict to another (``tests/test_decision.py`` shrinks intervals to check
it). The rule used before drew the line at the threshold *inside* the interval, so a precise +4.7% was
``unchanged`` while the same estimate measured less precisely was a ``regression``.

Why the point estimate and not the interval's near end past the minimum effect: a change of exactly *t*
has its near end at about *t* - (half-width); on a stored baseline, whose interval carries the run-to-run
term (about +/-4% alone on CPU), that end sits near 1 and such a rule would miss most +5% changes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from perfgate.model import rule_text

# the minimum effect of a paired comparison, as a share of the threshold: a change below half the threshold
# never fails the gate; a change of the threshold's size has its estimate past this line nearly always, so
# it is caught as soon as it is significant. Pairs cancel the drift between runs, so this is safe there.
MIN_EFFECT_SHARE = 0.5
# the minimum effect of an unpaired comparison: two runs measured at different times differ as wholes, and
# whenever that difference is larger than the run-to-run term says, half the threshold alarms on unchanged
# code (an A/A pair of a conv rollout in two folders, 10% threshold: a `win` in 2 of 4 tries at half). The
# whole threshold keeps the estimate's zones monotone and an A/A estimate must move by t to alarm.
UNPAIRED_MIN_EFFECT_SHARE = 1.0
# the equivalence margin, as a share of the threshold: `unchanged` says no change as large as the
# threshold is left open
MARGIN_SHARE = 1.0

DECIDED = ("regression", "win", "unchanged")


def min_effect_share_for(paired: bool) -> float:
    """The minimum effect's share of the threshold for a paired or an unpaired comparison."""
    return MIN_EFFECT_SHARE if paired else UNPAIRED_MIN_EFFECT_SHARE


@dataclass(frozen=True)
class Decision:
    """A step-time verdict, which part of the rule decided it (``decided``, comparison.DECISIONS) and the
    minimum effect and equivalence margin it drew (relative); ``why`` says it in words."""

    kind: str  # regression | win | unchanged | inconclusive
    decided: str
    min_effect: float
    margin: float
    why: str


def decide(ratio: float, low: float, high: float, significant: bool, threshold: float,
           min_effect_share: float = MIN_EFFECT_SHARE) -> Decision:
    """The verdict on a step-time change head / base of ``ratio`` with interval [``low``, ``high``]
    (ratios), ``significant`` as the statistic found it, against ``threshold`` (relative); the minimum
    effect is ``min_effect_share`` of it (``MIN_EFFECT_SHARE`` paired, ``UNPAIRED_MIN_EFFECT_SHARE``
    unpaired: ``min_effect_share_for``)."""
    effect, margin = min_effect_share * threshold, MARGIN_SHARE * threshold
    up, down = 1.0 + effect, 1.0 / (1.0 + effect)
    margin_up, margin_down = 1.0 + margin, 1.0 / (1.0 + margin)
    if not all(math.isfinite(x) for x in (ratio, low, high)):
        decided = "no-estimate"
    elif ratio >= up or ratio <= down:
        decided = "past-min-effect" if significant else "not-significant"
    elif margin_down < low and high < margin_up:
        decided = "within-margin"
    else:
        decided = "past-margin"
    return Decision(rule_text.decided_kind(decided, ratio), decided, effect, margin,
                    rule_text.decision_why(decided, ratio, low, high, significant, effect, margin))
