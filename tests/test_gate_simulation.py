"""The gate's false-alarm and power rates under a hierarchical simulation (perfgate.judging.gatesim: run effect,
process effect, sample noise, optional performance modes), through the real looks and verdict. A change
to the rule, the statistics or the sampling that costs accuracy fails here. Seeded: the same code always
gives the same counts."""

from __future__ import annotations

import dataclasses
import functools

import pytest

from perfgate.judging.gate_settings import GateSettings
from perfgate.judging.gatesim import Rates, Scenario, rates

TRIALS = 20
# the t interval widens the bootstrap's wherever it is narrower, so a small bootstrap decides the same
GATE = dataclasses.replace(GateSettings(), bootstrap_resamples=200)
# a stored comparison's run-to-run term where `perfgate calibrate --write` measured a quiet machine (whole
# runs moving by the model's 1.4%): what stored-mode power is held to; the uncalibrated default is wider
CALIBRATED = dataclasses.replace(GATE, run_to_run=0.02)
QUIET, MOVING = 0.014, 0.06  # whole runs' moves: the conv rollout's quiet 2-core runner; tiny cases on a shared one


@functools.cache
def _rates(change: float, paired: bool, trials: int = TRIALS, run_to_run: float | None = None,
           calibrated: bool = True) -> Rates:
    gate = CALIBRATED if calibrated and not paired else GATE
    return rates(Scenario(change=change, paired=paired, run_to_run=run_to_run), gate, trials=trials, seed=3)


@pytest.mark.parametrize("paired", [True, False], ids=["lockstep", "stored-calibrated"])
@pytest.mark.slow
def test_unchanged_code_rarely_alarms_and_ten_percent_is_caught_in_the_right_direction(paired):
    aa = _rates(0.0, paired)
    assert aa.count("regression") + aa.count("win") <= 1, aa
    ten = _rates(0.10, paired)
    assert ten.count("regression") >= 19 and ten.count("win") == 0, ten


@pytest.mark.parametrize("paired", [True, False], ids=["lockstep", "stored-calibrated"])
def test_ten_percent_faster_is_a_win_never_a_regression(paired):
    faster = _rates(-0.10, paired, trials=10)
    assert faster.count("regression") == 0 and faster.count("win") >= 8, faster


@pytest.mark.slow
def test_the_uncalibrated_stored_default_does_not_alarm_where_whole_runs_move():
    """Uncalibrated, a stored comparison carries the CPU default (8%): unchanged code stays quiet on a machine
    whose whole runs move by 6% (the old 2% default alarmed there), and a large change (+25%) is still caught
    on a quiet one, never the wrong way (+20% is caught about half the time at 8%: the term's cost,
    docs/lab-record.md "The CPU run-to-run default")."""
    moving = _rates(0.0, False, run_to_run=MOVING, calibrated=False)
    assert moving.count("regression") + moving.count("win") <= 1, moving
    narrow = rates(Scenario(paired=False, run_to_run=MOVING), dataclasses.replace(GATE, run_to_run=0.02),
                   trials=TRIALS, seed=3)
    assert narrow.count("regression") + narrow.count("win") >= 2, narrow  # why the default is not 2%
    large = _rates(0.25, False, run_to_run=QUIET, calibrated=False)
    assert large.count("regression") >= 19 and large.count("win") == 0, large


def test_lockstep_settles_unchanged_code_and_catches_five_percent():
    assert _rates(0.0, True).count("unchanged") >= 15
    five = _rates(0.05, True)
    assert five.count("regression") >= 15 and five.count("win") == 0, five


def test_a_change_below_the_minimum_effect_is_never_a_win_and_mostly_passes():
    """+1% (a fifth of the 5% threshold): its estimate lands past the minimum effect only by chance."""
    one = _rates(0.01, True)
    assert one.count("win") == 0 and one.count("regression") <= TRIALS // 4, one


def test_the_simulation_is_deterministic():
    once = rates(Scenario(change=0.05, paired=False), GATE, trials=4, seed=9)
    assert once == rates(Scenario(change=0.05, paired=False), GATE, trials=4, seed=9)
