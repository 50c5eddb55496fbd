"""Descriptive statistics of timing samples: median, IQR and a distribution-free CI of the median.

No torch, no numpy needed here: these run in the orchestrator and in report rendering.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class SampleSummary:
    n: int
    median: float
    q1: float
    q3: float
    ci_low: float
    ci_high: float
    mean: float
    stdev: float
    minimum: float
    maximum: float
    confidence: float = 0.95
    n_processes: int = 1
    # spread of the per-process medians relative to the overall median: (max - min) / median
    between_process_spread: float = 0.0

    @property
    def iqr(self) -> float:
        return self.q3 - self.q1

    @property
    def ci_half_width_rel(self) -> float:
        """Half the CI width relative to the median: the +/- a person reads."""
        if self.median == 0:
            return 0.0
        return (self.ci_high - self.ci_low) / 2 / self.median

    def to_json(self) -> dict[str, float]:
        d = asdict(self)
        d["iqr"] = self.iqr
        return d


# Each worker process's step time, as the gate judges it, is this quantile of its samples: interference from
# the rest of the machine only ever adds time, so a low quantile is what the code costs (docs/gate.md).
# The default of `[tool.perfgate.gate] process_quantile`; reports mark the same value.
PROCESS_QUANTILE = 0.1
# The largest run-to-run spread (relative sd) a setting or a stored calibration may give the gate.
RUN_TO_RUN_MAX = 0.5


def quantile_name(q: float, plural: bool = False) -> str:
    """How a quantile reads: "median" for 0.5, else "10th percentile", "1st percentile" and the like."""
    if q == 0.5:
        return "medians" if plural else "median"
    pct = f"{q * 100:g}"
    suffix = "th" if pct.endswith(("11", "12", "13")) else {"1": "st", "2": "nd", "3": "rd"}.get(pct[-1], "th")
    return f"{pct}{suffix} percentile{'s' if plural else ''}"


def judged_step_time(q: float) -> str:
    """What a step_time verdict's baseline and current values are, in words, for a note beside a verdict
    table: the statistic the gate judges, which is not the median of all samples a run table shows."""
    return f"the median over worker processes of each process's {quantile_name(q)} step time"


# The note under a verdict table that shows step_time values (the console's, report.html's); {judged} is
# judged_step_time's words. summary.md's tables show the ratio only: JUDGED_RATIO_NOTE.
JUDGED_NOTE = ("step_time baseline and current are {judged}, the statistic the gate judges; a case's step time "
               "in the run tables is the median of all its samples")
JUDGED_RATIO_NOTE = ("step_time ratios compare {judged}, the statistic the gate judges; a case's step time in "
                     "the case table is the median of all its samples")


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
    memory layouts one after the other (``layout_groups``: its samples per layout, in order; perfgate.layout)
    gets the median over its layouts of each layout's quantile, so one layout of a few cannot decide it."""
    if (layout_groups and len(layout_groups) > 1 and all(n > 0 for n in layout_groups)
            and sum(layout_groups) == len(samples)):
        values, start = [], 0
        for n in layout_groups:
            values.append(quantile(sorted(samples[start:start + n]), q))
            start += n
        return statistics.median(values)
    return quantile(sorted(samples), q)


def _binom_cdf(k: int, n: int) -> float:
    """P(X <= k) for X ~ Binomial(n, 1/2)."""
    if k < 0:
        return 0.0
    if n > 300:  # normal approximation with continuity correction; exact sums get slow and underflow
        z = (k + 0.5 - n / 2) / math.sqrt(n / 4)
        return 0.5 * (1 + math.erf(z / math.sqrt(2)))
    return sum(math.comb(n, i) for i in range(0, k + 1)) / 2**n


def median_ci_ranks(n: int, confidence: float = 0.95) -> tuple[int, int]:
    """0-based ranks (lo, hi) of the order statistics bounding a distribution-free CI of the median.

    The interval [x_(lo), x_(hi)] covers the true median with probability >= ``confidence``
    (exact binomial argument, no distributional assumption). For tiny n the interval is the full range.
    """
    alpha = 1 - confidence
    # 1-based interval [x_(k+1), x_(n-k)] covers the median with probability 1 - 2 P(X <= k);
    # take the largest k keeping that >= confidence. None qualifies for n <= 5: the full range.
    lo = 0
    for k in range(0, n // 2):
        if _binom_cdf(k, n) <= alpha / 2:
            lo = k
        else:
            break
    return lo, n - 1 - lo


def summarize(
    samples: Sequence[float], groups: Sequence[Sequence[float]] | None = None, confidence: float = 0.95
) -> SampleSummary:
    """Summary of ``samples``; ``groups`` (one list per worker process) adds the between-process spread."""
    if not samples:
        raise ValueError("summarize() needs at least one sample")
    xs = sorted(samples)
    n = len(xs)
    lo, hi = median_ci_ranks(n, confidence)
    med = statistics.median(xs)
    groups = [g for g in (groups or []) if g]
    spread = 0.0
    if len(groups) > 1 and med > 0:
        medians = [statistics.median(g) for g in groups]
        spread = (max(medians) - min(medians)) / med
    return SampleSummary(
        n=n,
        median=med,
        q1=quantile(xs, 0.25),
        q3=quantile(xs, 0.75),
        ci_low=xs[lo],
        ci_high=xs[hi],
        mean=statistics.fmean(xs),
        stdev=statistics.stdev(xs) if n > 1 else 0.0,
        minimum=xs[0],
        maximum=xs[-1],
        confidence=confidence,
        n_processes=max(len(groups), 1),
        between_process_spread=spread,
    )


@dataclass(frozen=True)
class Ratio:
    """``numerator / denominator`` of two medians with a conservative interval from their CIs."""

    value: float
    low: float
    high: float

    def to_json(self) -> dict[str, float]:
        return asdict(self)

    def format(self, digits: int = 2) -> str:
        return f"{self.value:.{digits}f}x [{self.low:.{digits}f}, {self.high:.{digits}f}]"


def ratio_of(numerator: SampleSummary | None, denominator: SampleSummary | None) -> Ratio | None:
    """Ratio of medians; the interval combines the extremes of both CIs, so it never claims too much.
    None where a side is missing or its median is 0: a step time of 0 is a broken timer, not an infinitely
    fast step (eager at 0 ns once made every toggle "0.00x: slower than eager"); None too where the ratio
    overflows (times no timer gives, from an untrusted results.json: its chart crashed report.html)."""
    if numerator is None or denominator is None or numerator.median <= 0 or denominator.median <= 0 \
            or denominator.ci_low <= 0:
        return None
    ratio = Ratio(
        value=numerator.median / denominator.median,
        low=numerator.ci_low / denominator.ci_high,
        high=numerator.ci_high / denominator.ci_low,
    )
    return ratio if all(math.isfinite(x) for x in (ratio.value, ratio.low, ratio.high)) else None


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
