"""Statistics of timing samples: median and IQR of the samples, and the intervals reports print.

The worker process is the unit of every interval: samples inside one process share its memory layout and
its moments on the machine, so they are not independent, and pooling them gave intervals several times too
narrow (a rerun's median fell inside a case's printed 95% CI 12 times in 96). A case's interval comes from
its per-process step times (``process_step_time``, the statistic the gate judges), plus the run-to-run term
where the figure is meant to hold another run's (docs/reports.md, "What an interval means").

No torch, no numpy here: these run in the orchestrator and in report rendering (scipy gives t quantiles).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass

# What a case's step-time interval means, for readers of results.json and the exporters' JSON
CI_MEANS = ("95% interval of this case's step time (the geometric mean over its worker processes of each "
            "process's step time) in another run on this machine: a t interval over its worker processes' step times plus "
            "the run-to-run term; none with one process")
# ... and a speedup's
RATIO_MEANS = ("95% interval of this speedup in another run on this machine: a Welch t interval over both "
               "cases' worker processes plus the run-to-run term (the cases ran at different times)")
NO_INTERVAL = "1 process: no interval"
# ... and a peak memory's against eager (``peak_ratio``)
PEAK_RATIO_MEANS = ("95% interval of this case's peak memory / eager's: a Welch t interval over both cases' worker "
                    "processes' peaks (none with one process on a side; exact where every process peaked alike)")


@dataclass(frozen=True)
class SampleSummary:
    """A case's step-time samples: its step time (``estimate``: the geometric mean over its worker processes
    of each process's step time, ``process_step_time``), the interval around it from the same processes
    (``ci_low``/``ci_high``: None with one process, which gives no interval), and the median, quartiles, mean
    and range of every sample pooled. The estimate and its interval are one statistic: a pooled median is
    not what the interval was measured for (it held another run's in half the pairs, docs/lab-record.md)."""

    n: int
    median: float
    q1: float
    q3: float
    ci_low: float | None
    ci_high: float | None
    mean: float
    stdev: float
    minimum: float
    maximum: float
    confidence: float = 0.95
    n_processes: int = 1
    # spread of the per-process medians relative to the overall median: (max - min) / median
    between_process_spread: float = 0.0
    # sd of the log per-process step times (``process_step_time``); 0 with one process
    process_log_sd: float = 0.0
    # relative half-width from the processes alone (where this run's processes put the step time): the
    # figure a plain run settles on (perfgate.judging.sequential.PrecisionRule); None with one process
    process_half_width: float | None = None
    run_to_run: float = 0.0  # the run-to-run term (relative sd) in ci_low/ci_high
    # the case's step time, the centre of ci_low/ci_high (None given: the pooled median, as before it existed)
    estimate: float | None = None

    def __post_init__(self) -> None:
        if self.estimate is None:
            object.__setattr__(self, "estimate", self.median)

    @property
    def value(self) -> float:
        """The case's step time (``estimate``), typed as the float it always is after construction."""
        return self.median if self.estimate is None else self.estimate

    @property
    def iqr(self) -> float:
        return self.q3 - self.q1

    @property
    def ci_half_width_rel(self) -> float | None:
        """The +/- a person reads, relative to the step time: the interval is symmetric in log space,
        [estimate / (1 + h), estimate * (1 + h)], and this is h; None without an interval."""
        if self.ci_low is None or self.ci_high is None:
            return None
        if self.value == 0:
            return 0.0
        return self.ci_high / self.value - 1

    def interval_text(self, plus_minus: str = "+/-") -> str:
        """"+/- 3.1%", or "(1 process: no interval)": the case's interval as tables print it."""
        h = self.ci_half_width_rel
        return f"({NO_INTERVAL})" if h is None else f"{plus_minus} {h * 100:.1f}%"

    def to_json(self) -> dict[str, float | str | None]:
        d: dict[str, float | str | None] = dict(asdict(self))
        d["iqr"] = self.iqr
        d["ci_means"] = CI_MEANS
        return d


# Each worker process's step time, as the gate judges it, is this quantile of its samples: interference from
# the rest of the machine only ever adds time, so a low quantile is what the code costs (docs/gate.md).
# The default of `[tool.perfgate.gate] process_quantile`; reports mark the same value.
PROCESS_QUANTILE = 0.1
# The largest run-to-run spread (relative sd) a setting or a stored calibration may give the gate.
RUN_TO_RUN_MAX = 0.5
# The run-to-run term's defaults (relative sd) until `perfgate calibrate --write` measures it: the gate's
# (perfgate.judging.gate_settings.GateSettings, where docs/gate.md explains them) and the reports' intervals'.
# The CPU one is what whole runs moved by on a shared 2-vCPU machine (docs/lab-record.md, "The CPU
# run-to-run default"): with it the printed intervals held another run's figure in >= 80% of pairs on each of
# three samples of runs (6% missed on two of them).
RUN_TO_RUN_CPU = 0.08
RUN_TO_RUN_CUDA = 0.03
# An interval's half-width stays within a factor of 1e9 (in log space): a t interval with about one degree
# of freedom reaches thousands, where math.exp overflows; a wider one says no more.
LOG_LIMIT = math.log(1e9)


def quantile_name(q: float, plural: bool = False) -> str:
    """How a quantile reads: "median" for 0.5, else "10th percentile", "1st percentile" and the like."""
    if q == 0.5:
        return "medians" if plural else "median"
    pct = f"{q * 100:g}"
    suffix = "th" if pct.endswith(("11", "12", "13")) else {"1": "st", "2": "nd", "3": "rd"}.get(pct[-1], "th")
    return f"{pct}{suffix} percentile{'s' if plural else ''}"


def judged_step_time(q: float) -> str:
    """What a step_time verdict's baseline and current values are, in words, for a note beside a verdict
    table: the statistic the gate judges (the run tables show the geometric mean of the same figures)."""
    return f"the median over worker processes of each process's {quantile_name(q)} step time"


# The note under a verdict table that shows step_time values (the console's, report.html's); {judged} is
# judged_step_time's words. summary.md's tables show the ratio only: JUDGED_RATIO_NOTE.
JUDGED_NOTE = ("step_time baseline and current are {judged}, the statistic the gate judges; a case's step time in "
               "the run tables is the geometric mean of the same per-process figures")
JUDGED_RATIO_NOTE = ("step_time ratios compare {judged}, the statistic the gate judges; a case's step time in the "
                     "case table is the geometric mean of the same per-process figures")


def quantile(sorted_values: Sequence[float], q: float) -> float:
    """Linear-interpolated quantile of already sorted values (numpy's default method)."""
    if not sorted_values:
        raise ValueError("quantile of no values")
    pos = (len(sorted_values) - 1) * q
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    frac = pos - lo
    return sorted_values[lo] * (1 - frac) + sorted_values[hi] * frac


def process_step_time(samples: Sequence[float], q: float, layout_groups: Sequence[int] | None = None) -> float:
    """One worker process's step time: the ``q`` quantile of its samples. A process that sampled several
    memory layouts one after the other (``layout_groups``: its samples per layout, in order; perfgate.protocol.layout)
    gets the median over its layouts of each layout's quantile, so one layout of a few cannot decide it."""
    if (layout_groups and len(layout_groups) > 1 and all(n > 0 for n in layout_groups)
            and sum(layout_groups) == len(samples)):
        values, start = [], 0
        for n in layout_groups:
            values.append(quantile(sorted(samples[start:start + n]), q))
            start += n
        return statistics.median(values)
    return quantile(sorted(samples), q)


def t_quantile(p: float, df: float) -> float:
    """The ``p`` quantile of Student's t with ``df`` degrees of freedom."""
    from scipy import stats as sps

    return float(sps.t.ppf(p, df))


def two_sided(confidence: float) -> float:
    """The normal quantile of a two-sided interval at ``confidence`` (1.96 at 0.95)."""
    return statistics.NormalDist().inv_cdf(1 - (1 - confidence) / 2)


def run_to_run_log(run_to_run: float, confidence: float) -> float:
    """The run-to-run term's half-width in log space at ``confidence``, as the gate adds it
    (perfgate.judging.timechange.time_change): ``z * log(1 + run_to_run)``."""
    return two_sided(confidence) * math.log1p(run_to_run) if run_to_run > 0 else 0.0


def process_half_width(process_times: Sequence[float], confidence: float = 0.95,
                       run_to_run: float = 0.0) -> float | None:
    """The relative half-width of a case's step-time interval from its worker processes' step times (each
    ``process_step_time``): a t interval of their mean log (``len - 1`` degrees of freedom, right at small
    n for normal log times), with ``run_to_run`` (relative sd) added in quadrature in log space where the
    figure is meant to hold another run's. None with fewer than 2 processes: one gives no spread, and the
    samples inside it are not independent. The one function the tables and a plain run's settling use."""
    logs = [math.log(t) for t in process_times if t > 0]
    if len(logs) < 2:
        return None
    se = statistics.stdev(logs) / math.sqrt(len(logs))
    half = t_quantile(1 - (1 - confidence) / 2, len(logs) - 1) * se
    return math.expm1(min(math.hypot(half, run_to_run_log(run_to_run, confidence)), LOG_LIMIT))


def _binom_cdf(k: int, n: int) -> float:
    """P(X <= k) for X ~ Binomial(n, 1/2)."""
    if k < 0:
        return 0.0
    if n > 300:  # normal approximation with continuity correction; exact sums get slow and underflow
        z = (k + 0.5 - n / 2) / math.sqrt(n / 4)
        return 0.5 * (1 + math.erf(z / math.sqrt(2)))
    return sum(math.comb(n, i) for i in range(k + 1)) / 2**n


def median_ci_ranks(n: int, confidence: float = 0.95) -> tuple[int, int, float]:
    """0-based ranks (lo, hi) of the order statistics bounding a distribution-free CI of the median, and
    the interval's actual confidence.

    The interval [x_(lo), x_(hi)] covers the true median with probability ``1 - 2 P(X <= lo)``,
    X ~ Binomial(n, 1/2) (exact, no distributional assumption): at least ``confidence`` where any interval
    reaches it. For n <= 5 none does, and the full range is returned with what it covers: 50% for 2 values,
    75% for 3, 87.5% for 4, 93.75% for 5; a caller must not call such an interval a 95% one.
    """
    alpha = 1 - confidence
    # 1-based interval [x_(k+1), x_(n-k)] covers the median with probability 1 - 2 P(X <= k);
    # take the largest k keeping that >= confidence. None qualifies for n <= 5: the full range.
    lo = 0
    for k in range(n // 2):
        if _binom_cdf(k, n) <= alpha / 2:
            lo = k
        else:
            break
    return lo, n - 1 - lo, 1 - 2 * _binom_cdf(lo, n)


def summarize(
    samples: Sequence[float], groups: Sequence[Sequence[float]] | None = None, confidence: float = 0.95, *,
    quantile_of_process: float = PROCESS_QUANTILE, layouts: Sequence[Sequence[int] | None] | None = None,
    run_to_run: float = 0.0,
) -> SampleSummary:
    """Summary of ``samples``; ``groups`` (one list per worker process, ``layouts`` its samples per memory
    layout) give the step time and its interval: the processes' step times (the ``quantile_of_process`` of
    each, ``process_step_time``), their geometric mean the ``estimate``, and ``process_half_width`` around it with
    ``run_to_run`` added. No groups: the samples are one process's. One process: no interval."""
    if not samples:
        raise ValueError("summarize() needs at least one sample")
    xs = sorted(samples)
    n = len(xs)
    med = statistics.median(xs)
    kept = [(g, lay) for g, lay in zip(groups or [], layouts or [None] * len(groups or []), strict=False) if g]
    spread = 0.0
    if len(kept) > 1 and med > 0:
        medians = [statistics.median(g) for g, _ in kept]
        spread = (max(medians) - min(medians)) / med
    times = [process_step_time(g, quantile_of_process, lay) for g, lay in kept]
    logs = [math.log(t) for t in times if t > 0]
    # the centre of the t interval is the mean log: the geometric mean of the processes' step times
    estimate = math.exp(statistics.fmean(logs)) if logs else process_step_time(xs, quantile_of_process)
    this_run = process_half_width(times, confidence)
    any_run = process_half_width(times, confidence, run_to_run)
    # the half-width is symmetric in log space: [estimate / (1 + h), estimate * (1 + h)]
    ci_low, ci_high = (None, None) if any_run is None else (estimate / (1 + any_run), estimate * (1 + any_run))
    return SampleSummary(
        n=n,
        median=med,
        q1=quantile(xs, 0.25),
        q3=quantile(xs, 0.75),
        ci_low=ci_low,
        ci_high=ci_high,
        mean=statistics.fmean(xs),
        stdev=statistics.stdev(xs) if n > 1 else 0.0,
        minimum=xs[0],
        maximum=xs[-1],
        confidence=confidence,
        n_processes=max(len(kept), 1),
        between_process_spread=spread,
        process_log_sd=statistics.stdev(logs) if len(logs) > 1 else 0.0,
        process_half_width=this_run,
        run_to_run=run_to_run,
        estimate=estimate,
    )


@dataclass(frozen=True)
class Ratio:
    """``numerator / denominator`` of two step times with its interval (None without one: a side of one process)."""

    value: float
    low: float | None
    high: float | None
    means: str = RATIO_MEANS  # what the interval is, for readers of results.json and the exporters' JSON

    def to_json(self) -> dict[str, float | str | None]:
        return asdict(self)

    def format(self, digits: int = 2) -> str:
        if self.low is None or self.high is None:
            return f"{self.value:.{digits}f}x ({NO_INTERVAL})"
        return f"{self.value:.{digits}f}x [{self.low:.{digits}f}, {self.high:.{digits}f}]"


def ratio_of(numerator: SampleSummary | None, denominator: SampleSummary | None,
             run_to_run: float = 0.0) -> Ratio | None:
    """Ratio of step times (``SampleSummary.estimate``), with a Welch t interval over both sides' log per-process step times and
    ``run_to_run`` (relative sd) added in quadrature once per side: the two cases were measured at different
    times, not side by side, so each moves on its own. No interval (low, high None) where a side has one
    process.
    None where a side is missing or its median is 0: a step time of 0 is a broken timer, not an infinitely
    fast step (eager at 0 ns once made every toggle "0.00x: slower than eager"); None too where the ratio
    overflows (times no timer gives, from an untrusted results.json: its chart crashed report.html)."""
    if numerator is None or denominator is None or numerator.value <= 0 or denominator.value <= 0:
        return None
    value = numerator.value / denominator.value
    if not math.isfinite(value):
        return None
    if numerator.n_processes < 2 or denominator.n_processes < 2:
        return Ratio(value, None, None)
    confidence = numerator.confidence
    var_n = numerator.process_log_sd ** 2 / numerator.n_processes
    var_d = denominator.process_log_sd ** 2 / denominator.n_processes
    se = math.sqrt(var_n + var_d)
    half = 0.0
    if se > 0:  # Welch-Satterthwaite degrees of freedom
        df = (var_n + var_d) ** 2 / (var_n ** 2 / (numerator.n_processes - 1)
                                      + var_d ** 2 / (denominator.n_processes - 1))
        half = t_quantile(1 - (1 - confidence) / 2, df) * se
    # each case moves by the run-to-run term on its own (they ran at different times, not side by side): once
    # per side
    half = min(math.hypot(half, run_to_run_log(run_to_run, confidence), run_to_run_log(run_to_run, confidence)),
               LOG_LIMIT)
    return Ratio(value=value, low=value * math.exp(-half), high=value * math.exp(half))


def peak_ratio(numerator: Sequence[float], denominator: Sequence[float], confidence: float = 0.95) -> Ratio | None:
    """A case's peak memory against another's (``memory_vs_eager``): the ratio of the medians of their worker
    processes' peaks, with a Welch t interval over both sides' log peaks. Peaks are a process's own, not a
    timing: no run-to-run term. Where every process of both sides peaked at the same bytes (a caching
    allocator's deterministic peak) the interval is the value itself; no interval where a side has one
    process (its spread is unknown). None where a side has no peak or a peak of 0."""
    num = [math.log(x) for x in numerator if x > 0 and math.isfinite(x)]
    den = [math.log(x) for x in denominator if x > 0 and math.isfinite(x)]
    if not num or not den or len(num) != len(numerator) or len(den) != len(denominator):
        return None
    value = statistics.median(numerator) / statistics.median(denominator)
    if not math.isfinite(value) or value <= 0:
        return None
    if len(num) < 2 or len(den) < 2:
        return Ratio(value, None, None, PEAK_RATIO_MEANS)
    var_n = statistics.variance(num) / len(num)
    var_d = statistics.variance(den) / len(den)
    half = 0.0
    if var_n + var_d > 0:  # Welch-Satterthwaite degrees of freedom
        df = (var_n + var_d) ** 2 / (var_n ** 2 / (len(num) - 1) + var_d ** 2 / (len(den) - 1))
        half = min(t_quantile(1 - (1 - confidence) / 2, df) * math.sqrt(var_n + var_d), LOG_LIMIT)
    return Ratio(value, value * math.exp(-half), value * math.exp(half), PEAK_RATIO_MEANS)


def speedup_of(eager: SampleSummary | None, case: SampleSummary | None, same_case: bool,
               run_to_run: float) -> Ratio | None:
    """The speedup of a case against eager (eager time / case time, ``ratio_of``); eager against itself
    (``same_case``) is 1 by definition, not a noisy ratio."""
    if same_case:
        return Ratio(1.0, 1.0, 1.0) if eager is not None and eager.value > 0 else None
    return ratio_of(eager, case, run_to_run)


def format_seconds(s: float | None) -> str:
    """A duration in the unit a person reads: 812 ns, 41.2 us, 3.07 ms, 1.25 s."""
    if s is None or (isinstance(s, float) and math.isnan(s)):
        return "-"
    a = abs(s)
    if a >= 1:
        return f"{s:.3g} s" if a < 100 else f"{s:.0f} s"
    if a >= 1e-3:
        return f"{s * 1e3:.3g} ms"
    if a >= 1e-6:
        return f"{s * 1e6:.3g} us"
    return f"{s * 1e9:.3g} ns"
