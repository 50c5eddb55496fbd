"""perfgate.sequential: the look schedule, alpha spending, and the rules that stop sampling, driven with
seeded synthetic processes (no workers: the statistics alone)."""

from __future__ import annotations

import math
import random

import pytest

from perfgate.compare import GateSettings
from perfgate.model import CaseResult, CaseSpec, ProcessSamples
from perfgate.sequential import (
    Budget,
    ComparisonRule,
    Decision,
    PrecisionRule,
    Sampler,
    look_schedule,
    make_sampler,
    sampling_text,
    spent_alpha,
)

SPEC = CaseSpec(workload="w", size="smoke", toggles=("eager",), device="cpu")
GATE = GateSettings(bootstrap_resamples=400)


def process(rnd: random.Random, step_s: float, within: float = 0.01, n: int = 10, index: int = 0) -> ProcessSamples:
    return ProcessSamples(samples_ns=[int(step_s * math.exp(rnd.gauss(0, within)) * 1e9) for _ in range(n)],
                          process_index=index)


def case(procs: list[ProcessSamples]) -> CaseResult:
    return CaseResult(spec=SPEC, status="ok", processes=list(procs))


def test_look_schedule_grows_by_half_and_ends_at_the_budget():
    assert look_schedule(2, 16) == [2, 3, 5, 8, 12, 16]
    assert look_schedule(3, 16) == [3, 5, 8, 12, 16]
    assert look_schedule(6, 6) == [6]
    assert look_schedule(8, 4) == [8]
    assert Budget(first=2, adaptive=False).schedule == [2]


def test_alpha_spending_is_monotone_and_spends_exactly_alpha():
    values = [spent_alpha(0.05, t / 10) for t in range(11)]
    assert values[0] == 0 and values[-1] == pytest.approx(0.05)
    assert all(a < b for a, b in zip(values, values[1:], strict=False))
    assert spent_alpha(0.05, 2.0) == pytest.approx(0.05)


def test_the_looks_of_a_comparison_never_spend_more_than_alpha():
    """A comparison that never settles looks at every point of the schedule; the per-look error rates
    (1 - confidence) add up to alpha at most, so the chance of any false alarm over all looks is bounded."""

    class Never(ComparisonRule):
        def decide(self, head, base, confidence):
            return Decision(False, "never")

    sampler = Sampler(Budget(first=3, max_processes=16, max_seconds=1e9), Never(GATE, 0.05, "t", paired=True),
                      alpha=0.05)
    done, looks = 3, 0
    while done is not None:
        done = sampler.next_target(done, 1.0, case([process(random.Random(0), 1e-3)]))
        looks += 1
    shares = [1 - look["confidence"] for look in sampler.looks]
    assert looks == 5 and len(shares) == 5
    assert sum(shares) == pytest.approx(0.05, rel=1e-3)
    assert all(s < 0.05 for s in shares)
    assert sampler.stopped.startswith("budget: 16 processes")


def test_precision_rule_stops_a_quiet_case_at_the_first_looks_and_a_noisy_one_at_the_budget():
    rnd = random.Random(1)
    quiet = Sampler(Budget(first=2, max_processes=16, max_seconds=1e9), PrecisionRule(0.025, 0.1))
    procs = [process(rnd, 1e-3 * math.exp(rnd.gauss(0, 0.002)), index=i) for i in range(3)]
    assert quiet.next_target(2, 2.0, case(procs[:2])) in (None, 3)
    if quiet.stopped == "":
        assert quiet.next_target(3, 3.0, case(procs)) is None
    assert quiet.stopped.startswith("settled: step time within")

    noisy = Sampler(Budget(first=2, max_processes=8, max_seconds=1e9), PrecisionRule(0.005, 0.1))
    done, procs = 2, []
    while done is not None:
        while len(procs) < done:
            procs.append(process(rnd, 1e-3 * math.exp(rnd.gauss(0, 0.05)), index=len(procs)))
        done = noisy.next_target(len(procs), float(len(procs)), case(procs))
    assert len(procs) == 8 and noisy.stopped.startswith("budget: 8 processes")
    record = noisy.record(8, 8.0)
    assert record["rule"] == "precision" and record["processes"] == 8 and "confidence" not in record
    assert [look["processes"] for look in record["looks"]] == [2, 3, 5, 8]


def test_the_time_budget_ends_sampling_before_a_look_that_would_not_fit():
    rnd = random.Random(2)
    sampler = Sampler(Budget(first=2, max_processes=16, max_seconds=10.0), PrecisionRule(0.0001, 0.1))
    procs = [process(rnd, 1e-3 * math.exp(rnd.gauss(0, 0.05)), index=i) for i in range(3)]
    assert sampler.next_target(2, 4.0, case(procs[:2])) == 3  # 4 s for 2; the third fits by 6 s
    assert sampler.next_target(3, 6.5, case(procs)) is None  # 5 processes would take about 10.8 s
    assert sampler.stopped.startswith("budget: 10 s")


def simulate(change: float, between: float, paired: bool, trials: int, seed: int, rule_alpha: bool = True
             ) -> dict[str, int]:
    """Sequential comparisons of synthetic processes: base and head per-process step times with a
    between-process spread ``between``; ``change`` the true relative slowdown of head."""
    rnd = random.Random(seed)
    gate = GateSettings(bootstrap_resamples=300, max_processes=12)
    counts: dict[str, int] = {}
    for _ in range(trials):
        base_procs = [process(rnd, 1e-3 * math.exp(rnd.gauss(0, between)), index=i) for i in range(12)]
        rule = ComparisonRule(gate, 0.05, "threshold", paired=paired, base=None if paired else case(base_procs))
        sampler = make_sampler(gate, 3, rule)
        if not rule_alpha:  # the naive way: every look at the nominal confidence
            sampler._look_confidence = lambda done, final: 0.95  # type: ignore[method-assign]
        head_procs: list[ProcessSamples] = []
        target = sampler.first
        while target is not None:
            while len(head_procs) < target:
                head_procs.append(process(rnd, 1e-3 * (1 + change) * math.exp(rnd.gauss(0, between)),
                                          index=len(head_procs)))
            base_now = case(base_procs[:len(head_procs)]) if paired else None
            target = sampler.next_target(len(head_procs), 1.0, case(head_procs), base_now)
        verdict = sampler.looks[-1]["result"].split()[0]
        counts[verdict] = counts.get(verdict, 0) + 1
    return counts


@pytest.mark.parametrize("paired", [False, True])
def test_sequential_looks_keep_false_alarms_rare_and_catch_a_clear_regression(paired):
    aa = simulate(0.0, 0.03, paired, trials=60, seed=11)
    assert aa.get("regression", 0) + aa.get("win", 0) <= 3, aa  # 5% of 60 is 3
    caught = simulate(0.10, 0.03, paired, trials=30, seed=12)
    assert caught.get("regression", 0) >= 27, caught
    assert caught.get("win", 0) == 0


def test_spending_alpha_is_what_keeps_repeated_looks_honest():
    """The same A/A data judged at the nominal 95% at every look raises more false alarms than with the
    error rate spent over the looks: the test fails if spending is switched off."""
    spent = simulate(0.0, 0.03, False, trials=80, seed=21)
    naive = simulate(0.0, 0.03, False, trials=80, seed=21, rule_alpha=False)
    alarms = lambda c: c.get("regression", 0) + c.get("win", 0)  # noqa: E731
    assert alarms(spent) < alarms(naive), (spent, naive)


def test_sampling_text_names_processes_and_why():
    c = case([])
    assert sampling_text(c) == ""
    c.metadata["sampling"] = {"processes": 5, "stopped": "settled: unchanged at 1.001x [0.98, 1.02]"}
    assert sampling_text(c) == "5 processes (settled: unchanged at 1.001x [0.98, 1.02])"


def test_make_sampler_starts_comparisons_at_three_and_respects_adaptive_off():
    gate = GateSettings()
    rule = ComparisonRule(gate, 0.05, "t", paired=True)
    assert make_sampler(gate, 2, rule).budget.schedule == [3, 5, 8, 12, 16]
    assert make_sampler(gate, 2, PrecisionRule(0.025)).budget.schedule[0] == 2
    fixed = make_sampler(GateSettings(adaptive=False), 2, rule)
    assert fixed.budget.schedule == [2] and fixed.rule is None
