"""perfgate.util.stats: the median CI against published rank tables, summarize, ratio_of, formatting."""

from __future__ import annotations

import dataclasses
import math
import random
import statistics

import pytest

from perfgate.util.stats import (
    SampleSummary,
    format_seconds,
    median_ci_ranks,
    peak_ratio,
    process_half_width,
    quantile,
    ratio_of,
    summarize,
)

# 1-based ranks (r, s) of the distribution-free 95% CI [x_(r), x_(s)] of the median, as tabulated in
# nonparametric statistics texts (e.g. Conover, Practical Nonparametric Statistics, table A3).
KNOWN_95 = {
    6: (1, 6), 7: (1, 7), 8: (1, 8), 9: (2, 8), 10: (2, 9), 11: (2, 10), 12: (3, 10), 13: (3, 11),
    14: (3, 12), 15: (4, 12), 16: (4, 13), 17: (5, 13), 18: (5, 14), 19: (5, 15), 20: (6, 15),
    100: (40, 61),
}


@pytest.mark.parametrize("n", sorted(KNOWN_95))
def test_median_ci_ranks_match_the_published_table(n):
    r, s = KNOWN_95[n]
    lo, hi, actual = median_ci_ranks(n)
    assert (lo, hi) == (r - 1, s - 1)
    assert 0.95 <= actual < 1


@pytest.mark.parametrize("n, covers", [(1, 0.0), (2, 0.5), (3, 0.75), (4, 0.875), (5, 0.9375)])
def test_tiny_samples_get_the_full_range_and_say_what_it_covers(n, covers):
    """For n <= 5 the full range is the widest interval there is, and it covers the median with 50-94%, not
    the 95% the function promised (and history stored); it says what it covers."""
    assert median_ci_ranks(n) == (0, n - 1, pytest.approx(covers))


def test_the_stated_confidence_is_the_coverage_a_simulation_finds():
    rng = random.Random(7)
    for n in (4, 9):
        lo, hi, actual = median_ci_ranks(n)
        trials, hits = 4000, 0
        for _ in range(trials):
            xs = sorted(rng.gauss(0, 1) for _ in range(n))
            hits += xs[lo] <= 0 <= xs[hi]
        assert abs(hits / trials - actual) < 0.02, (n, hits / trials, actual)


def test_large_n_uses_the_normal_approximation_and_stays_symmetric():
    lo, hi, _ = median_ci_ranks(2001)
    assert lo + hi == 2000
    # +/- 1.96 sqrt(n)/2 around the middle rank
    assert abs((1000 - lo) - 1.96 * 2001**0.5 / 2) <= 2


def test_quantile_names_read_as_words():
    from perfgate.util.stats import quantile_name

    assert [quantile_name(q) for q in (0.5, 0.1, 0.01, 0.02, 0.03, 0.11, 0.21, 0.125)] == [
        "median", "10th percentile", "1st percentile", "2nd percentile", "3rd percentile", "11th percentile",
        "21st percentile", "12.5th percentile"]
    assert quantile_name(0.5, plural=True) == "medians" and quantile_name(0.1, plural=True) == "10th percentiles"


def test_quantile_matches_numpy_linear_interpolation():
    xs = [1.0, 2.0, 4.0, 8.0]
    assert quantile(xs, 0.0) == 1.0
    assert quantile(xs, 1.0) == 8.0
    assert quantile(xs, 0.25) == pytest.approx(1.75)
    assert quantile(xs, 0.75) == pytest.approx(5.0)
    with pytest.raises(ValueError):
        quantile([], 0.5)


def test_summarize_exact_figures():
    samples = [float(x) for x in range(1, 11)]  # 1..10
    s = summarize(samples)
    assert s.n == 10
    assert s.median == 5.5
    assert (s.q1, s.q3) == (3.25, 7.75)
    assert s.iqr == pytest.approx(4.5)
    assert s.mean == 5.5
    assert (s.minimum, s.maximum) == (1.0, 10.0)
    assert s.n_processes == 1 and s.between_process_spread == 0.0


def test_one_process_gives_no_interval_however_many_samples():
    """Samples inside one worker process are not independent: 10 of them gave the CI of the median [2, 9]
    as if they were. One process has no spread to give an interval from, and says so."""
    s = summarize([float(x) for x in range(1, 11)])
    assert (s.ci_low, s.ci_high, s.ci_half_width_rel, s.process_half_width) == (None, None, None, None)
    assert s.interval_text() == "(1 process: no interval)"
    assert s.to_json()["ci_low"] is None and "another run" in s.to_json()["ci_means"]


def test_the_interval_is_a_t_interval_over_the_processes_step_times_plus_the_run_to_run_term():
    groups = [[1.00] * 5, [1.10] * 5, [1.21] * 5]  # constant within each process: its step time at any quantile
    s = summarize([x for g in groups for x in g], groups=groups, run_to_run=0.02)
    logs = [math.log(g[0]) for g in groups]
    sd = (sum((x - sum(logs) / 3) ** 2 for x in logs) / 2) ** 0.5
    process = 4.302652729911275 * sd / 3 ** 0.5  # t(0.975, 2 df)
    assert s.process_half_width == pytest.approx(math.expm1(process))
    both = math.hypot(process, 1.959963984540054 * math.log1p(0.02))
    assert s.ci_half_width_rel == pytest.approx(math.expm1(both))
    assert (s.ci_low, s.ci_high) == (pytest.approx(1.10 / math.exp(both)), pytest.approx(1.10 * math.exp(both)))
    assert s.n_processes == 3 and s.process_log_sd == pytest.approx(sd)
    assert process_half_width([1.00, 1.10, 1.21]) == pytest.approx(math.expm1(process))
    assert process_half_width([1.00]) is None


def _process(rng, level, n=40, noise=0.002):
    # interference only adds time: a process's samples lie above its level
    return [level * (1 + abs(rng.gauss(0, noise))) for _ in range(n)]


def _run(rng, processes=8, spread=0.015, run_effect=0.0, level=1e-3):
    """One run of a case: ``processes`` worker processes whose levels differ by ``spread`` (relative sd),
    the whole run moved by ``run_effect``, each with 40 tight samples."""
    at = level * math.exp(rng.gauss(0, run_effect))
    groups = [_process(rng, at * math.exp(rng.gauss(0, spread))) for _ in range(processes)]
    return [x for g in groups for x in g], groups


def test_eight_processes_3pct_apart_with_tight_samples_get_an_interval_as_wide_as_their_spread():
    """8 processes whose step times differ by about 3% (max - min), 200 samples each within +/-0.2%: the
    CI of the median of all 1,600 samples pooled was about +/-0.1%, as if they were independent. The
    processes' spread is the evidence: the interval reaches about as far as the t interval over them."""
    rng = random.Random(3)
    levels = [1.0 + 0.03 * i / 7 for i in range(8)]
    groups = [_process(rng, lv, 200) for lv in levels]
    s = summarize([x for g in groups for x in g], groups=groups)
    assert s.between_process_spread > 0.025
    assert s.ci_half_width_rel > 0.007  # the old pooled interval: about 0.001
    assert s.ci_low < statistics.median(levels) < s.ci_high


@pytest.mark.parametrize("run_effect, run_to_run", [(0.0, 0.0), (0.02 / 2 ** 0.5, 0.02)])
def test_a_case_interval_holds_another_runs_median_in_most_pairs(run_effect, run_to_run):
    """Coverage under a hierarchical simulation (run effect, process effect, sample noise): run i's interval
    holds run j's median in at least 80% of pairs (the pooled-sample interval held it in about 1 in 10).
    ``run_to_run`` is the relative sd of the ratio between two runs: each run moves by it / sqrt(2)."""
    rng = random.Random(11)
    hits, trials = 0, 200
    for _ in range(trials):
        a, b = (_run(rng, run_effect=run_effect) for _ in range(2))
        s = summarize(a[0], groups=a[1], run_to_run=run_to_run)
        hits += s.ci_low <= summarize(b[0], groups=b[1]).value <= s.ci_high
    assert hits / trials >= 0.8


def test_the_step_time_is_the_centre_of_its_interval_not_the_pooled_median():
    """Two fast processes and one slow one, each with a slow tail: the pooled median sits in the tail, the
    case's step time is the geometric mean of each process's 10th percentile, and the interval is centred
    on it (the pooled median with an interval from the processes held another run's in half the pairs)."""
    groups = [[1.0] * 4 + [3.0] * 6, [1.1] * 4 + [3.0] * 6, [2.0] * 4 + [3.0] * 6]
    s = summarize([x for g in groups for x in g], groups=groups)
    assert s.median == 3.0
    expected = math.exp(statistics.fmean(math.log(g[0]) for g in groups))  # each process's 10th percentile
    assert s.value == s.estimate == pytest.approx(expected)
    assert s.ci_low * s.ci_high == pytest.approx(expected ** 2)  # symmetric in log space around it
    assert s.to_json()["estimate"] == pytest.approx(expected)
    # without a separate estimate (a summary built by hand), the pooled median stands in
    assert dataclasses.replace(s, estimate=None).value == 3.0


def test_a_speedup_interval_holds_another_runs_speedup_in_most_pairs():
    """Eager and a toggle run at different times of one run, each moved by its own run effect: the Welch
    interval plus the run-to-run term holds another run's speedup in at least 85% of pairs."""
    rng = random.Random(5)
    hits, trials = 0, 150

    def speedup():
        eager, toggle = _run(rng, run_effect=0.014), _run(rng, run_effect=0.014, level=0.8e-3)
        return ratio_of(summarize(eager[0], groups=eager[1], run_to_run=0.02),
                        summarize(toggle[0], groups=toggle[1], run_to_run=0.02), 0.02)

    for _ in range(trials):
        first, second = speedup(), speedup()
        hits += first.low <= second.value <= first.high
    assert hits / trials >= 0.85


def test_ratio_of_is_a_welch_interval_on_the_log_ratio_plus_the_run_to_run_term():
    a_groups, b_groups = [[2.0] * 3, [2.2] * 3], [[1.0] * 3, [1.05] * 3, [1.1] * 3]
    a = summarize([x for g in a_groups for x in g], groups=a_groups)
    b = summarize([x for g in b_groups for x in g], groups=b_groups)
    r = ratio_of(a, b, 0.02)
    var_a, var_b = a.process_log_sd ** 2 / 2, b.process_log_sd ** 2 / 3
    df = (var_a + var_b) ** 2 / (var_a ** 2 / 1 + var_b ** 2 / 2)
    from scipy import stats as sps

    term = 1.959963984540054 * math.log1p(0.02)  # once per side: the cases ran at different times
    half = math.hypot(sps.t.ppf(0.975, df) * math.sqrt(var_a + var_b), term, term)
    assert r.value == pytest.approx(a.value / b.value)
    assert (r.low, r.high) == (pytest.approx(r.value / math.exp(half)), pytest.approx(r.value * math.exp(half)))
    assert r.to_json()["means"].startswith("95% interval of this speedup in another run")


def test_ratio_of_a_side_of_one_process_has_no_interval():
    one = summarize([1.0, 1.1, 1.2])
    groups = [[2.0] * 3, [2.2] * 3]
    two = summarize([x for g in groups for x in g], groups=groups)
    r = ratio_of(two, one, 0.02)
    assert (r.low, r.high) == (None, None)
    assert r.format() == f"{r.value:.2f}x (1 process: no interval)"


def test_peak_ratio_is_exact_where_every_process_peaked_alike():
    """A caching allocator's peak is the same bytes in every process: the ratio is the value, no noise."""
    r = peak_ratio([700.0, 700.0, 700.0], [1000.0, 1000.0])
    assert (r.value, r.low, r.high) == (0.7, 0.7, 0.7)
    assert r.to_json()["means"].startswith("95% interval of this case's peak memory / eager's")


def test_peak_ratio_is_a_welch_interval_over_the_processes_log_peaks_without_a_run_to_run_term():
    case, eager = [690.0, 710.0, 700.0], [1000.0, 1040.0]
    r = peak_ratio(case, eager)
    from scipy import stats as sps

    logs_c, logs_e = [math.log(x) for x in case], [math.log(x) for x in eager]
    var_c, var_e = statistics.variance(logs_c) / 3, statistics.variance(logs_e) / 2
    df = (var_c + var_e) ** 2 / (var_c ** 2 / 2 + var_e ** 2 / 1)
    half = sps.t.ppf(0.975, df) * math.sqrt(var_c + var_e)
    assert r.value == pytest.approx(700 / 1020)
    assert (r.low, r.high) == (pytest.approx(r.value / math.exp(half)), pytest.approx(r.value * math.exp(half)))
    assert r.low < r.value < r.high


def test_peak_ratio_of_a_side_of_one_process_has_no_interval_and_of_nothing_is_none():
    r = peak_ratio([700.0], [1000.0, 1000.0])
    assert (r.value, r.low, r.high) == (0.7, None, None)
    assert peak_ratio([], [1000.0]) is None
    assert peak_ratio([700.0], []) is None
    assert peak_ratio([0.0, 700.0], [1000.0, 1000.0]) is None  # a peak of 0 is no measurement
    assert peak_ratio([math.inf, 700.0], [1000.0, 1000.0]) is None


def test_summarize_between_process_spread():
    a, b = [1.0, 1.0, 1.0], [1.2, 1.2, 1.2]
    s = summarize(a + b, groups=[a, b])
    assert s.n_processes == 2
    assert s.between_process_spread == pytest.approx(0.2 / 1.1)


def test_summarize_rejects_no_samples():
    with pytest.raises(ValueError):
        summarize([])


def test_summary_json_carries_iqr():
    d = summarize([1.0, 2.0, 3.0]).to_json()
    assert d["iqr"] == pytest.approx(1.0) and d["median"] == 2.0


def _summary(median, processes=2, log_sd=0.01):
    return SampleSummary(n=9, median=median, q1=median, q3=median, ci_low=median, ci_high=median, mean=median,
                         stdev=0.0, minimum=median, maximum=median, n_processes=processes, process_log_sd=log_sd)


def test_ratio_of_missing_or_zero_is_none():
    assert ratio_of(None, _summary(1)) is None
    assert ratio_of(_summary(1), None) is None
    assert ratio_of(_summary(1), _summary(0.0)) is None
    assert ratio_of(_summary(0.0), _summary(1)) is None  # a timer that reads 0
    assert ratio_of(_summary(1e300), _summary(1e-300)) is None  # overflows


def test_ratio_of_an_interval_too_wide_to_say_anything_stays_finite():
    r = ratio_of(_summary(1.0, 2, 500.0), _summary(1.0, 2, 500.0))
    assert r.low == pytest.approx(1e-9) and r.high == pytest.approx(1e9)


@pytest.mark.parametrize("seconds,text", [
    (812e-9, "812 ns"), (41.2e-6, "41.2 us"), (3.07e-3, "3.07 ms"), (1.25, "1.25 s"), (250.0, "250 s"), (None, "-"),
])
def test_format_seconds(seconds, text):
    assert format_seconds(seconds) == text
