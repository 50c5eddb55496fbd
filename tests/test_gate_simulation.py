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


@functools.cache
def _rates(change: float, paired: bool, trials: int = TRIALS) -> Rates:
    return rates(Scenario(change=change, paired=paired), GATE, trials=trials, seed=3)


@pytest.mark.parametrize("paired", [True, False], ids=["lockstep", "stored"])
@pytest.mark.slow
def test_unchanged_code_rarely_alarms_and_ten_percent_is_caught_in_the_right_direction(paired):
    aa = _rates(0.0, paired)
    assert aa.count("regression") + aa.count("win") <= 1, aa
    ten = _rates(0.10, paired)
    assert ten.count("regression") >= 19 and ten.count("win") == 0, ten


@pytest.mark.parametrize("paired", [True, False], ids=["lockstep", "stored"])
def test_ten_percent_faster_is_a_win_never_a_regression(paired):
    faster = _rates(-0.10, paired, trials=10)
    assert faster.count("regression") == 0 and faster.count("win") >= 8, faster


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
