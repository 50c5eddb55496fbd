"""perfgate.stats: the median CI against published rank tables, summarize, ratio_of, formatting."""

from __future__ import annotations

import pytest

from perfgate.stats import SampleSummary, format_seconds, median_ci_ranks, quantile, ratio_of, summarize

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
    assert median_ci_ranks(n) == (r - 1, s - 1)


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5])
def test_tiny_samples_get_the_full_range(n):
    assert median_ci_ranks(n) == (0, n - 1)


def test_large_n_uses_the_normal_approximation_and_stays_symmetric():
    lo, hi = median_ci_ranks(2001)
    assert lo + hi == 2000
    # +/- 1.96 sqrt(n)/2 around the middle rank
    assert abs((1000 - lo) - 1.96 * 2001**0.5 / 2) <= 2


def test_quantile_names_read_as_words():
    from perfgate.stats import quantile_name

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
    assert (s.ci_low, s.ci_high) == (2.0, 9.0)  # ranks 2 and 9 for n = 10
    assert s.mean == 5.5
    assert (s.minimum, s.maximum) == (1.0, 10.0)
    assert s.ci_half_width_rel == pytest.approx(3.5 / 5.5)
    assert s.n_processes == 1 and s.between_process_spread == 0.0


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


def _summary(median, lo, hi):
    return SampleSummary(n=9, median=median, q1=lo, q3=hi, ci_low=lo, ci_high=hi, mean=median, stdev=0.0,
                         minimum=lo, maximum=hi)


def test_ratio_of_combines_the_extremes_of_both_cis():
    r = ratio_of(_summary(10.0, 9.0, 11.0), _summary(5.0, 4.0, 6.0))
    assert r.value == 2.0
    assert r.low == pytest.approx(9.0 / 6.0)
    assert r.high == pytest.approx(11.0 / 4.0)
    assert r.format() == "2.00x [1.50, 2.75]"


def test_ratio_of_missing_or_zero_is_none():
    assert ratio_of(None, _summary(1, 1, 1)) is None
    assert ratio_of(_summary(1, 1, 1), None) is None
    assert ratio_of(_summary(1, 1, 1), _summary(0.0, 0.0, 1.0)) is None
    assert ratio_of(_summary(0.0, 0.0, 0.0), _summary(1, 1, 1)) is None  # a timer that reads 0
    assert ratio_of(_summary(1e300, 1e300, 1e300), _summary(1e-300, 1e-300, 1e-300)) is None  # overflows


@pytest.mark.parametrize("seconds,text", [
    (812e-9, "812 ns"), (41.2e-6, "41.2 us"), (3.07e-3, "3.07 ms"), (1.25, "1.25 s"), (250.0, "250 s"), (None, "-"),
])
def test_format_seconds(seconds, text):
    assert format_seconds(seconds) == text
