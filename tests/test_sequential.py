"""perfgate.judging.sequential: the look schedule, alpha spending, and the rules that stop sampling, driven with
seeded synthetic processes (no workers: the statistics alone)."""

from __future__ import annotations

import math
import random
import statistics

import pytest

from perfgate.judging.gate_settings import GateSettings, parse_gate
from perfgate.judging.sequential import (
    Budget,
    ComparisonRule,
    Decision,
    PrecisionRule,
    Sampler,
    boundaries,
    look_schedule,
    make_sampler,
    sampling_text,
    spent_alpha,
)
from perfgate.model.config import ConfigError
from perfgate.model.results import CaseResult, CaseSpec, ProcessSamples

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


def test_the_looks_of_a_comparison_spend_exactly_alpha_over_all_looks():
    """A comparison that never settles looks at every point of the schedule. Its looks' boundaries are
    computed for looks that share data; a Monte Carlo of exactly that (sums of independent processes,
    rejected at the first look past its boundary) must reject alpha of the time, no more; and each look's
    level is wider than Bonferroni's (the sum of the per-look error rates exceeds alpha), which is the
    power the exact boundaries buy."""
    import numpy as np

    class Never(ComparisonRule):
        def decide(self, head, base, confidence):
            return Decision(False, "never")

    sampler = Sampler(Budget(first=3, max_processes=16, max_seconds=1e9), Never(GATE, 0.05, "t", paired=True),
                      alpha=0.05)
    done, looks = 3, 0
    while done is not None:
        done = sampler.next_target(done, 1.0, case([process(random.Random(0), 1e-3)]))
        looks += 1
    counts = [look["processes"] for look in sampler.looks]
    assert looks == 5 and counts == [3, 5, 8, 12, 16]
    levels = [look["confidence"] for look in sampler.looks]
    assert levels[0] == pytest.approx(1 - spent_alpha(0.05, 3 / 16), abs=1e-5)  # nothing earlier to share with
    assert sum(1 - c for c in levels) > 0.06  # Bonferroni would give exactly 0.05
    z = np.array([statistics.NormalDist().inv_cdf(1 - (1 - c) / 2) for c in levels])
    sums = np.cumsum(np.random.default_rng(3).standard_normal((200_000, 16)), axis=1)
    stats = np.stack([sums[:, n - 1] / math.sqrt(n) for n in counts], axis=1)
    rejected = float((np.abs(stats) >= z).any(axis=1).mean())
    assert rejected == pytest.approx(0.05, abs=0.0025)
    assert sampler.stopped.startswith("budget: 16 processes")


def test_boundaries_match_the_published_pocock_design():
    """Pocock's constant boundaries for two-sided 0.05 (Pocock 1977, Table 1): z = 2.178 for 2 equally
    spaced looks, 2.413 for 5. Spending those designs' per-look error rates must give back the same
    boundaries. Two looks: the rates from the bivariate normal itself; five: from a Monte Carlo."""
    import numpy as np
    from scipy import stats as sps

    c = 2.178
    first = 2 * sps.norm.sf(c)
    both_inside = (sps.multivariate_normal([0, 0], [[1, 0.5 ** 0.5], [0.5 ** 0.5, 1]])
                   .cdf([c, c], lower_limit=[-c, -c]))
    assert 1 - both_inside == pytest.approx(0.05, abs=0.0005)
    assert boundaries((1, 2), (first, 1 - both_inside - first)) == pytest.approx([c, c], abs=0.003)

    c = 2.413
    sums = np.cumsum(np.random.default_rng(4).standard_normal((400_000, 5)), axis=1)
    stats = np.abs(sums / np.sqrt(np.arange(1, 6)))
    alive = np.ones(len(stats), bool)
    increments = []
    for k in range(5):
        hit = alive & (stats[:, k] >= c)
        increments.append(hit.mean())
        alive &= ~hit
    assert sum(increments) == pytest.approx(0.05, abs=0.002)
    assert boundaries((1, 2, 3, 4, 5), tuple(increments)) == pytest.approx([c] * 5, abs=0.02)


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


def simulate(change: float, between: float, paired: bool, trials: int, seed: int, rule_alpha: bool = True,
             unpaired_min_processes: int = GateSettings.unpaired_min_processes) -> dict[str, int]:
    """Sequential comparisons of synthetic processes: base and head per-process step times with a
    between-process spread ``between``; ``change`` the true relative slowdown of head."""
    rnd = random.Random(seed)
    # no run-to-run shift is simulated: the term is kept at 1% so the looks' own error rates show
    gate = GateSettings(bootstrap_resamples=300, max_processes=12, unpaired_min_processes=unpaired_min_processes,
                        run_to_run=0.01)
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
@pytest.mark.slow
def test_sequential_looks_keep_false_alarms_rare_and_catch_a_clear_regression(paired):
    aa = simulate(0.0, 0.03, paired, trials=200, seed=11)
    assert aa.get("regression", 0) + aa.get("win", 0) <= 10, aa  # 5% of 200 is 10
    caught = simulate(0.10, 0.03, paired, trials=30, seed=12)
    assert caught.get("regression", 0) >= 27, caught
    assert caught.get("win", 0) == 0


@pytest.mark.slow
def test_spending_alpha_is_what_keeps_repeated_looks_honest():
    """The same A/A data judged at the nominal 95% at every look raises more false alarms than with the
    error rate spent over the looks: the test fails if spending is switched off. Lockstep pairs, whose
    minimum effect is half the threshold (perfgate.judging.decision), so that alarms are possible at all; every
    look may settle there, as spending is about the early looks."""
    spent = simulate(0.0, 0.03, True, trials=80, seed=21, unpaired_min_processes=1)
    naive = simulate(0.0, 0.03, True, trials=80, seed=21, rule_alpha=False, unpaired_min_processes=1)
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


def test_an_unpaired_comparison_settles_only_from_its_floor_of_processes():
    """Unpaired, a look with fewer than ``unpaired_min_processes`` of the run's own does not settle even a clear
    change: with 3 or 5 processes, performance modes cannot be seen, and two runs whose few processes landed
    in different modes looked settled (docs/gate.md). Lockstep pairs settle as soon as they can."""
    rnd = random.Random(5)
    gate = GateSettings(bootstrap_resamples=300)
    base = case([process(rnd, 1e-3, index=i) for i in range(16)])
    for paired, settles_at in ((False, 8), (True, 3)):
        rule = ComparisonRule(gate, 0.05, "global threshold", paired=paired, base=base)
        sampler = make_sampler(gate, 2, rule)
        target, head = sampler.first, []
        while target is not None:
            head += [process(rnd, 1.5e-3, index=len(head)) for _ in range(target - len(head))]
            target = sampler.next_target(len(head), 1.0, case(head), case(base.processes[:len(head)]) if paired else None)
        assert sampler.stopped.startswith("settled: regression"), sampler.stopped
        assert len(head) == settles_at, sampler.looks
    assert "unpaired, it settles from 8 processes" in sampler_looks_first(gate, base)
    # a stored baseline's processes are what they are: one of 5 does not hold the head back past 8
    short = ComparisonRule(gate, 0.05, "global threshold", paired=False, base=case(base.processes[:5]))
    sampler = make_sampler(gate, 2, short)
    head = [process(rnd, 1.5e-3, index=i) for i in range(8)]
    assert sampler.next_target(5, 1.0, case(head[:5])) == 8
    assert sampler.next_target(8, 1.0, case(head)) is None and sampler.stopped.startswith("settled: regression")
    with pytest.raises(ConfigError, match="unpaired_min_processes must be an integer >= 1"):
        parse_gate({"unpaired_min_processes": 0})
    assert parse_gate({"unpaired_min_processes": 3}).unpaired_min_processes == 3


def sampler_looks_first(gate: GateSettings, base: CaseResult) -> str:
    rnd = random.Random(6)
    sampler = make_sampler(gate, 2, ComparisonRule(gate, 0.05, "global threshold", paired=False, base=base))
    sampler.next_target(3, 1.0, case([process(rnd, 1.5e-3, index=i) for i in range(3)]))
    return sampler.looks[0]["result"]


def test_a_screen_is_one_look_at_the_full_error_rate():
    """settle_in_lockstep's screen (perfgate.gating.gate.sampler_factory): one look of the first processes, judged
    at the whole alpha since no look follows, and its stop says it screened."""
    rnd = random.Random(3)
    gate = GateSettings(bootstrap_resamples=300)
    base = case([process(rnd, 1e-3, index=i) for i in range(3)])
    rule = ComparisonRule(gate, 0.05, "global threshold", paired=False, base=base)
    screen = make_sampler(gate, 2, rule, screen=True)
    assert screen.budget.schedule == [3]
    head = case([process(rnd, s, index=i) for i, s in enumerate((1.2e-3, 0.8e-3, 1.0e-3))])  # too wide to settle
    assert screen.next_target(3, 1.0, head, base) is None
    assert screen.confidence == pytest.approx(0.95) and screen.stopped.startswith("screened: one look")
    assert make_sampler(gate, 2, rule).budget.schedule == [3, 5, 8, 12, 16]


class _SettlesAt(ComparisonRule):
    """A comparison rule that settles at exactly ``n`` processes: drives a Sampler to any stop point."""

    def __init__(self, n: int | None) -> None:
        super().__init__(GATE, 0.05, "t", paired=True)
        self.n = n

    def decide(self, head: CaseResult, base: CaseResult | None, confidence: float) -> Decision:
        return Decision(self.n is not None and len(head.processes) >= self.n, "stub", "unchanged")


@pytest.mark.parametrize("stop, max_seconds", [(3, 60.0), (5, 60.0), (8, 60.0), (16, 60.0), (None, 60.0),
                                               (None, 9.0), (None, 14.0)])
@pytest.mark.parametrize("screen", [False, True])
def test_the_judge_recomputes_each_looks_level_from_its_own_settings(stop, max_seconds, screen):
    """look_confidence replays the design from the judge's settings: at whichever look a case stopped (a
    settled look, the process budget, the time budget), it gives the level the sampler judged that look at;
    and the level the case's record states is not read."""
    from perfgate.judging.sequential import look_confidence

    gate = GateSettings(bootstrap_resamples=300, max_case_s=max_seconds)
    rnd = random.Random(5)
    sampler = make_sampler(gate, 2, ComparisonRule(gate, 0.05, "t", paired=True), screen=screen)
    sampler.rule = _SettlesAt(stop)
    head = case([])
    done, per_process_s = 0, 1.0
    target = sampler.first
    while target is not None:
        head.processes.extend(process(rnd, 1e-3, index=i) for i in range(done, target))
        done = target
        target = sampler.next_target(done, done * per_process_s, head)
    head.metadata["sampling"] = sampler.record(done, done * per_process_s)
    judged = look_confidence(gate, 2, screen=screen)(head)
    assert judged == pytest.approx(sampler.confidence, abs=1e-12), (done, sampler.stopped)
    head.metadata["sampling"]["confidence"] = 0.99999999  # what a pull request's shard could write
    assert look_confidence(gate, 2, screen=screen)(head) == judged
    assert look_confidence(GateSettings(adaptive=False), 2)(head) == pytest.approx(0.95)


def test_the_command_lines_sampling_goes_into_the_gate_table(tmp_path):
    from perfgate.judging.gate_settings import gate_settings
    from perfgate.judging.sequential import sampling_plan, with_sampling
    from perfgate.model.config import load

    (tmp_path / "pyproject.toml").write_text("[tool.perfgate]\nprocesses = 3\n")
    settings = load(str(tmp_path / "pyproject.toml"))
    assert with_sampling(settings) == settings
    fixed = with_sampling(settings, processes=5, samples=7)
    assert (fixed.processes, fixed.timing.samples, gate_settings(fixed).adaptive) == (5, 7, False)
    budget = with_sampling(settings, max_processes=9, max_case_s=30)
    gs = gate_settings(budget)
    assert (budget.processes, gs.adaptive, gs.max_processes, gs.max_case_s) == (3, True, 9, 30)
    assert settings.extra.get("gate") in (None, {})  # the settings given are left as they were
    assert sampling_plan(fixed) == "5 process(es) each"
    assert sampling_plan(budget) == "3 to 9 process(es) each as needed (at most 30 s)"


def test_a_run_to_become_a_baseline_measures_to_half_a_plain_runs_precision_from_the_unpaired_floor(tmp_path):
    """`run --baseline-precision`: a plain run stopped a case at 2-5 processes once its CI was within half the
    threshold, and that thin run became the baseline. A baseline's run settles a quiet case only from
    ``unpaired_min_processes`` and at half a plain run's half-width; with --gate or --against it is refused."""
    from perfgate.commands.session import RunOptions
    from perfgate.gating.gate import sampler_factory
    from perfgate.model import config
    from perfgate.model.config import ConfigError

    (tmp_path / "pyproject.toml").write_text("[tool.perfgate]\n")
    settings = config.load(cwd=tmp_path)
    plain, baseline = (sampler_factory(settings, mode)(SPEC) for mode in ("plain", "baseline"))
    assert baseline.rule.precision == plain.rule.precision / 2 == GATE.threshold / 4
    rnd = random.Random(3)
    procs = [process(rnd, 1e-3 * math.exp(rnd.gauss(0, 0.001)), index=i) for i in range(8)]
    assert plain.next_target(3, 3.0, case(procs[:3])) is None and plain.stopped.startswith("settled")
    assert baseline.next_target(3, 3.0, case(procs[:3])) == 5
    assert "a baseline settles from 8 processes" in baseline.looks[-1]["result"]
    assert baseline.next_target(5, 5.0, case(procs[:5])) == 8
    assert baseline.next_target(8, 8.0, case(procs)) is None and baseline.stopped.startswith("settled")
    for given in ({"gate": True}, {"against_ref": "main"}):
        with pytest.raises(ConfigError, match="--baseline-precision records a run to become a baseline"):
            RunOptions(baseline_precision=True, **given)


def test_a_case_prints_its_calibrated_run_to_run_term_and_every_report_reads_the_same(tmp_path):
    """A case calibrated on this machine (`perfgate calibrate --write`, in the baseline) prints the interval
    its calibration gives for another run, in its settle line and in every report (RunResult.run_to_run
    reads the term its sampling recorded); a case without one prints the device's default. A results file
    is untrusted: a recorded term that is not a number in [0, RUN_TO_RUN_MAX] gives the run's setting."""
    from dataclasses import replace

    from perfgate.gating.gate import sampler_factory
    from perfgate.judging.baselines import Baseline
    from perfgate.model import config
    from perfgate.model.results import RunResult

    (tmp_path / "pyproject.toml").write_text("[tool.perfgate]\n")
    settings = config.load(cwd=tmp_path)
    rnd = random.Random(5)
    procs = [process(rnd, 1e-3 * math.exp(rnd.gauss(0, 0.01)), index=i) for i in range(3)]
    empty = RunResult(run_id="b", suite="smoke", environment={}, cases=[])
    calibrated = Baseline(empty, "m", "smoke", {SPEC.key: {"run_to_run": 0.011, "run_spread": {"dof": 9}}})
    for baseline, term, source in ((None, GATE.run_to_run, "run_to_run default, not calibrated"),
                                   (calibrated, 0.011, "measured by calibrate (95% upper bound, 9 dof)")):
        sampler = sampler_factory(settings, "stored" if baseline else "plain", baseline)(SPEC)
        sampler.next_target(3, 3.0, case(procs))
        record = sampler.record(3, 3.0)
        assert (record["run_to_run"], record["run_to_run_source"]) == (pytest.approx(term), source)
        assert f"for another run (+{term * 100:g}% run-to-run)" in sampler.looks[-1]["result"]
        measured = replace(case(procs), metadata={"sampling": record})
        run = RunResult(run_id="r", suite="smoke", environment={}, cases=[measured], settings={"gate": {"run_to_run": 0.07}})
        assert run.run_to_run(measured) == pytest.approx(term)
        assert run.step_time(measured).run_to_run == pytest.approx(term)
    for bad in (-0.1, 0.9, True, "0.01", None, float("nan")):
        forged = replace(measured, metadata={"sampling": {**record, "run_to_run": bad}})
        assert run.run_to_run(forged) == 0.07
