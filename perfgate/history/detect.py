"""Change points and creep in a series of runs. No torch here.

Steps: E-divisive means (Matteson & James, 2014, "A nonparametric approach for multiple change point
analysis of multivariate data") as adapted for performance series by MongoDB and Apache Otava (Hunter:
Fleming et al., ICPE 2023), in three stages:

1. Candidates. The series is cut into windows of ``window`` points (overlapping by half), and again into
   windows 4x, 16x ... as long, up to ``max_window`` or the whole series. In each window,
   E-divisive's divergence q-hat (energy distance, alpha = 1) picks the split that best separates two
   distributions; the split is kept when Student's t-test between the two sides gives
   p < ``significance_per_test``, and the search recurses into the halves (hierarchical segmentation).
   Hunter replaced the original permutation test with this t-test: deterministic, and thousands of
   times cheaper. A transient (a few runs off, then back) fails that test at either edge, since each
   side mixes both levels; so in the two shortest window lengths a split that fails looks for its other
   edge (the best split of the part before or after it), and both are kept when the runs between them
   differ from the runs on each side.
2. Pruning. Candidates are re-tested against their neighbours (the points between the previous and the
   next candidate on each side); the weakest one above ``significance_per_test`` (or smaller than
   ``min_magnitude``) is dropped, and the test repeats until every change point stands.
3. Reporting. Each change point: the commit range (the last run before it, the first run after it), the
   relative step (mean after / mean before - 1) with a Student-t 95% CI, the p-value, regression or win.

Creep: steps too small for any one window (three +2% steps in 3% noise) are still a trend. Within each
segment between change points, and over the whole range when a straight line describes the series
better than its steps (``steps_explain``), a Mann-Kendall test (Kendall's tau of value against
position) with p < ``significance_per_test`` and a Theil-Sen total change of at least ``min_creep``
is reported as creep, with its commit range and the Theil-Sen CI. docs/history.md explains the choices
and the figures measured with benchmarks/history_detect.py.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
from scipy import stats as sps

from perfgate.history.reading import Point
from perfgate.model.results import higher_is_better
from perfgate.util.formatting import format_value

# A transient's edges are tested at this share of significance_per_test: two edges are searched for, not
# one, and at the full level the search tripled the false change points on noise (100-point series, 3%
# noise: 0.007 -> 0.020 per series); at a fifth that figure stayed as it was without the search, while
# +10% transients of 10 runs were still found at both edges in 97% of series (docs/history.md).
TRANSIENT_SHARE = 0.2


@dataclass(frozen=True)
class _DetectFields:
    window: int = 50  # points per shortest E-divisive window (Otava's default), overlapping by half
    max_window: int = 800  # longest window (q-hat is quadratic in a window's length)
    min_size: int = 5  # fewest points on either side of a change point
    significance_per_test: float = 1e-4  # see DetectSettings
    min_magnitude: float = 0.0  # smallest relative step reported
    min_creep: float = 0.03  # smallest total relative change of a segment reported as creep
    min_creep_points: int = 8  # fewest points in a segment tested for creep
    creep_blocks: int = 400  # longer segments are tested on this many block medians (Theil-Sen is O(n^2))


_RENAMED = ("DetectSettings.max_pvalue is deprecated and will be removed: it is the significance of each "
            "single test, not a false-alarm rate; use significance_per_test")


class DetectSettings(_DetectFields):
    """What ``analyse`` looks for (the fields of _DetectFields). ``significance_per_test`` is the p-value
    each single test (a split's t-test, a change point's re-test, a segment's Mann-Kendall test) must be
    below; it is not a false-alarm rate: many splits are tried per series (docs/history.md has the rates
    measured at several values). ``max_pvalue``, its old name, still works, with a DeprecationWarning."""

    def __init__(self, *args: Any, max_pvalue: float | None = None, **kwargs: Any) -> None:
        if max_pvalue is not None:
            warnings.warn(_RENAMED, DeprecationWarning, stacklevel=2)
            if "significance_per_test" in kwargs:
                raise TypeError("DetectSettings: give significance_per_test or max_pvalue (its old name), not both")
            kwargs["significance_per_test"] = max_pvalue
        super().__init__(*args, **kwargs)

    @property
    def max_pvalue(self) -> float:
        warnings.warn(_RENAMED, DeprecationWarning, stacklevel=2)
        return self.significance_per_test


DEFAULTS = DetectSettings()


@dataclass(frozen=True)
class ChangePoint:
    """A step: ``index`` is the first point of the new level."""

    index: int
    before_run: str
    after_run: str
    before_commit: str | None
    after_commit: str | None
    mean_before: float
    mean_after: float
    # relative: mean_after / mean_before - 1; None (with its CI) for a step from a level of 0 (a count such
    # as graph_breaks going from 0 to 1), which has no relative size: its kind follows the difference
    change: float | None
    ci_low: float | None
    ci_high: float | None
    p_value: float
    kind: str  # "regression" or "win"

    def to_json(self) -> dict[str, Any]:
        return {"type": "step", **asdict(self)}


@dataclass(frozen=True)
class Creep:
    """A trend within one segment: the Theil-Sen change from its first to its last point."""

    start: int
    end: int  # inclusive
    first_run: str
    last_run: str
    first_commit: str | None
    last_commit: str | None
    change: float  # relative total change over the segment
    ci_low: float
    ci_high: float
    p_value: float  # Mann-Kendall
    kind: str

    def to_json(self) -> dict[str, Any]:
        return {"type": "creep", **asdict(self)}


@dataclass
class SeriesAnalysis:
    case_key: str
    metric: str
    points: int
    change_points: list[ChangePoint] = field(default_factory=list)
    creeps: list[Creep] = field(default_factory=list)
    machine_key: str | None = None  # set when the case's runs came from several machines (by_machine)

    @property
    def regressions(self) -> int:
        return (sum(f.kind == "regression" for f in self.change_points)
                + sum(f.kind == "regression" for f in self.creeps))

    def to_json(self) -> dict[str, Any]:
        return {"case": self.case_key, "metric": self.metric, "machine_key": self.machine_key, "points": self.points,
                "change_points": [c.to_json() for c in self.change_points],
                "creeps": [c.to_json() for c in self.creeps]}


# ---------------------------------------------------------------- E-divisive

def qhat(y: np.ndarray, min_size: int) -> tuple[int, float]:
    """E-divisive's best split of ``y``: (tau, q) maximising Matteson & James's q-hat (alpha = 1), tau
    the first index of the right part; (-1, 0) when ``y`` is too short for ``min_size`` on both sides."""
    n = len(y)
    if n < 2 * min_size:
        return -1, 0.0
    d = np.abs(y[:, None] - y[None, :])
    lower = np.tril(d).sum(axis=1)  # sum_{i<t} d[t, i]
    upper = np.triu(d).sum(axis=1)  # sum_{j>t} d[t, j]
    w_left = np.concatenate(([0.0], np.cumsum(lower)))  # w_left[t]: pairs inside y[:t]
    w_right = np.concatenate((np.cumsum(upper[::-1])[::-1], [0.0]))  # w_right[t]: pairs inside y[t:]
    total = w_left[n]
    taus = np.arange(min_size, n - min_size + 1)
    m, k = taus.astype(float), (n - taus).astype(float)
    cross = total - w_left[taus] - w_right[taus]
    e = 2 * cross / (m * k) - 2 * w_left[taus] / (m * (m - 1)) - 2 * w_right[taus] / (k * (k - 1))
    q = m * k / (m + k) * e
    best = int(np.argmax(q))
    return int(taus[best]), float(q[best])


def ttest(a: np.ndarray, b: np.ndarray) -> tuple[float, float, float]:
    """(p, t, dof) of Student's two-sample t-test (pooled variance, as Hunter uses) between a and b; p 1
    where it cannot be computed. Pooled: a side of a few points with a freakishly small spread cannot
    make a split look significant, as it can under Welch's test."""
    na, nb = len(a), len(b)
    if na < 2 or nb < 2:
        return 1.0, 0.0, 1.0
    dof = na + nb - 2
    pooled = ((na - 1) * a.var(ddof=1) + (nb - 1) * b.var(ddof=1)) / dof
    diff = float(b.mean() - a.mean())
    se = math.sqrt(pooled * (1 / na + 1 / nb))
    if se <= 0:
        return (0.0 if diff != 0 else 1.0), (math.inf if diff != 0 else 0.0), float(dof)
    t = diff / se
    return float(2 * sps.t.sf(abs(t), dof)), t, float(dof)


def window_sizes(n: int, s: DetectSettings) -> list[int]:
    """The window lengths searched: ``window``, 4x, 16x ... up to ``max_window``, and the whole series
    when it is no longer than that. Short windows place nearby steps; long ones give a small step
    enough points on each side to stand out of the noise."""
    sizes, w = [], s.window
    while w < min(n, s.max_window):
        sizes.append(w)
        w *= 4
    sizes.append(min(n, s.max_window))
    return sizes


def _window_candidates(x: np.ndarray, s: DetectSettings) -> set[int]:
    found: set[int] = set()
    for i, w in enumerate(window_sizes(len(x), s)):
        # Transients in the two shortest lengths: one shorter than half the shortest window lies whole
        # inside one of those windows (they overlap by half), and the next length gives it longer sides
        # to differ from; in longer windows it is a small share, and the search costs more (q-hat is
        # quadratic). A transient longer than that is two steps the windows find on their own.
        found |= _candidates_in_windows(x, w, s, transients=i <= 1)
    return found


def _candidates_in_windows(x: np.ndarray, window: int, s: DetectSettings, transients: bool) -> set[int]:
    found: set[int] = set()
    n = len(x)
    step = max(1, window // 2)
    starts = list(range(0, n - window + 1, step)) if n > window else [0]
    if n > window and starts[-1] + window < n:
        starts.append(n - window)  # the last window ends with the series
    for start in starts:
        found.update(start + t for t in _window_splits(x[start:start + window], s, transients))
    return found


def _window_splits(seg: np.ndarray, s: DetectSettings, transients: bool) -> list[int]:
    """E-divisive's hierarchical splits of one window: the best split of the part that has one, kept
    while it passes the t-test (or, with ``transients``, when it does not but is one edge of a transient
    whose other edge is found), then the search goes on in the parts."""
    best_of: dict[tuple[int, int], tuple[int, float]] = {}

    def best_split(a: int, b: int) -> tuple[int, float]:
        """q-hat's best split of seg[a:b] (its index in seg, or -1) and its q; each part computed once."""
        if (a, b) not in best_of:
            tau, q = qhat(seg[a:b], s.min_size)
            best_of[(a, b)] = (a + tau if tau > 0 else -1, q)
        return best_of[(a, b)]

    splits = [0, len(seg)]
    while True:
        parts = [best_split(a, b) for a, b in zip(splits, splits[1:], strict=False)]
        tau, _ = max(parts, key=lambda part: (part[0] >= 0, part[1]))
        if tau < 0:
            return splits[1:-1]
        a = max(p for p in splits if p < tau)
        b = min(p for p in splits if p > tau)
        if ttest(seg[a:tau], seg[tau:b])[0] < s.significance_per_test:
            new = [tau]
        else:
            # A transient (a few runs off, then back) dilutes either side of one edge with the runs
            # of the other level, so neither edge stands alone: look for its other edge.
            other = _transient_edge(seg, a, tau, b, best_split, s) if transients else None
            if other is None:
                return splits[1:-1]
            new = [tau, other]
        splits = sorted({*splits, *new})


def _transient_edge(seg: np.ndarray, a: int, tau: int, b: int,
                    best_split: Callable[[int, int], tuple[int, float]], s: DetectSettings) -> int | None:
    """The other edge of a transient in seg[a:b] with one edge at ``tau``: the best split of the part
    before or after ``tau`` such that the runs between the two edges differ from the runs on each side
    (each t-test p < ``significance_per_test`` x TRANSIENT_SHARE); None when there is no such edge."""
    best: tuple[float, int] | None = None
    for lo, hi in ((a, tau), (tau, b)):
        edge, _ = best_split(lo, hi)
        if edge < 0:
            continue
        first, second = sorted((tau, edge))
        p = max(ttest(seg[a:first], seg[first:second])[0], ttest(seg[first:second], seg[second:b])[0])
        if p < s.significance_per_test * TRANSIENT_SHARE and (best is None or p < best[0]):
            best = (p, edge)
    return None if best is None else best[1]


def _segment_test(x: np.ndarray, cps: list[int], i: int) -> tuple[float, float]:
    """(p, |t|) of change point cps[i] against the points up to its neighbours."""
    lo = cps[i - 1] if i > 0 else 0
    hi = cps[i + 1] if i + 1 < len(cps) else len(x)
    p, t, _ = ttest(x[lo:cps[i]], x[cps[i]:hi])
    return p, abs(t)


def change_point_indices(x: Sequence[float], s: DetectSettings = DEFAULTS) -> list[int]:
    """Indices of the change points of ``x`` (each the first point of a new level), in order."""
    arr = np.asarray(x, dtype=float)
    if len(arr) < 2 * s.min_size:
        return []
    cps = sorted(_window_candidates(arr, s))
    while cps:
        tests = [_segment_test(arr, cps, i) for i in range(len(cps))]
        mags = [abs(_rel_change(arr, cps, i)) for i in range(len(cps))]
        # the weakest: highest p, then smallest |t| (near-duplicates from overlapping windows tie at p = 1)
        worst = max(range(len(cps)), key=lambda i: (tests[i][0], -tests[i][1]))
        too_small = [i for i in range(len(cps)) if mags[i] < s.min_magnitude]
        if tests[worst][0] >= s.significance_per_test:
            del cps[worst]
        elif too_small:
            del cps[min(too_small, key=lambda i: mags[i])]
        else:
            break
    return cps


def _rel_change(x: np.ndarray, cps: list[int], i: int) -> float:
    lo = cps[i - 1] if i > 0 else 0
    hi = cps[i + 1] if i + 1 < len(cps) else len(x)
    before, after = x[lo:cps[i]].mean(), x[cps[i]:hi].mean()
    if before:
        return float(after / before - 1)
    return math.inf if after != before else 0.0  # from a level of 0: no relative size, larger than any


def _kind(change: float, metric: str) -> str:
    worse = change < 0 if higher_is_better(metric) else change > 0
    return "regression" if worse else "win"


def _step_ci(before: np.ndarray, after: np.ndarray) -> tuple[float, float]:
    """95% CI of mean(after)/mean(before) - 1: the t interval of the difference (pooled variance), over
    mean(before)."""
    mb = before.mean()
    p, t, dof = ttest(before, after)
    diff = after.mean() - mb
    se = abs(diff / t) if t and math.isfinite(t) else 0.0
    half = float(sps.t.ppf(0.975, max(dof, 1.0))) * se
    return float((diff - half) / mb), float((diff + half) / mb)


def creep_test(y: np.ndarray, s: DetectSettings) -> tuple[float, float, float, float] | None:
    """(Mann-Kendall p, relative Theil-Sen change over y, its CI low, high), on block medians when long."""
    n = len(y)
    if n < s.min_creep_points:
        return None
    pos = np.arange(n, dtype=float)
    if n > s.creep_blocks:  # Theil-Sen is quadratic: test the trend of block medians instead
        edges = np.linspace(0, n, s.creep_blocks + 1).astype(int)
        pos = np.array([(a + b - 1) / 2 for a, b in zip(edges, edges[1:], strict=False)])
        y = np.array([np.median(y[a:b]) for a, b in zip(edges, edges[1:], strict=False)])
    tau = sps.kendalltau(pos, y)
    if not np.isfinite(tau.pvalue):
        return None
    slope, intercept, low, high = sps.theilslopes(y, pos, alpha=0.95)
    level = float(np.median(y)) or 1.0
    span = float(n - 1)
    start_level = intercept + slope * 0.0
    ref = start_level if start_level > 0 else level
    return float(tau.pvalue), slope * span / ref, low * span / ref, high * span / ref


def steps_explain(x: np.ndarray, cps: Sequence[int]) -> bool:
    """True when the levels between the change points ``cps`` describe ``x`` better than one straight
    line over the whole range, by the Bayesian information criterion: n ln(residual sum of squares / n)
    + k ln n, where a line has k = 2 (level and slope) and the steps k = 2c + 1 (c + 1 levels and c
    places). A clean step has a strong trend too (the Theil-Sen line through one step rises by about
    1.5x the step), but the step describes it better; a staircase of small steps of which only one or
    two were found, or a steady creep cut into steps, is described better by the line."""
    bounds = [0, *cps, len(x)]
    ss_steps = sum(float(((x[a:b] - x[a:b].mean()) ** 2).sum()) for a, b in zip(bounds, bounds[1:], strict=False))
    pos = np.arange(len(x), dtype=float)
    slope, intercept = np.polyfit(pos, x, 1)
    ss_line = float(((x - (intercept + slope * pos)) ** 2).sum())
    if ss_steps <= 0 or ss_line <= 0:
        return ss_line > 0  # no noise at all: whichever fits exactly
    n = len(x)
    return n * math.log(ss_line / ss_steps) >= (2 * len(cps) - 1) * math.log(n)


def by_machine(points: Sequence[Point]) -> list[tuple[str | None, list[Point]]]:
    """A case's series as one series per machine key, when its runs came from several (each in run order,
    machines by name, runs with no machine key last): a step time from a faster and a slower runner is
    not one series, and a change in which runner took the runs read as a step at the commit where it
    happened. [(None, points)] when every run came from one machine."""
    keys = {p.machine_key for p in points}
    if len(keys) <= 1:
        return [(None, list(points))]
    order = sorted(keys, key=lambda k: (k is None, k or ""))
    return [(k, [p for p in points if p.machine_key == k]) for k in order]


def analyse(case_key: str, metric: str, points: Sequence[Point], s: DetectSettings = DEFAULTS,
            machine_key: str | None = None) -> SeriesAnalysis:
    """Change points and creep of one case's series of ``metric`` (from one machine: by_machine)."""
    x = np.array([p.value for p in points], dtype=float)
    out = SeriesAnalysis(case_key, metric, len(points), machine_key=machine_key)
    cps = change_point_indices(x, s)  # type: ignore[arg-type]  # any float sequence
    for i, cp in enumerate(cps):
        lo = cps[i - 1] if i > 0 else 0
        hi = cps[i + 1] if i + 1 < len(cps) else len(x)
        before, after = x[lo:cp], x[cp:hi]
        change: float | None = None
        low: float | None = None
        high: float | None = None
        if before.mean():
            change = float(after.mean() / before.mean() - 1)
            low, high = _step_ci(before, after)
        p, _, _ = ttest(before, after)
        out.change_points.append(ChangePoint(
            index=cp, before_run=points[cp - 1].run_id, after_run=points[cp].run_id,
            before_commit=points[cp - 1].commit, after_commit=points[cp].commit,
            mean_before=float(before.mean()), mean_after=float(after.mean()), change=change, ci_low=low,
            ci_high=high, p_value=p, kind=_kind(float(after.mean() - before.mean()), metric)))
    bounds = [0, *cps, len(x)]
    spans = list(zip(bounds, bounds[1:], strict=False))
    if cps and not steps_explain(x, cps):
        # the whole range too, when its steps do not explain its trend: small steps, each too small to
        # find, or found only in part (three +2% steps in 3% noise may show as one +4% step)
        spans.append((0, len(x)))
    for a, b in spans:
        res = creep_test(x[a:b], s)
        if res is None:
            continue
        p, change, low, high = res
        if p >= s.significance_per_test or abs(change) < s.min_creep:
            continue
        out.creeps.append(Creep(start=a, end=b - 1, first_run=points[a].run_id, last_run=points[b - 1].run_id,
                                first_commit=points[a].commit, last_commit=points[b - 1].commit, change=change,
                                ci_low=low, ci_high=high, p_value=p, kind=_kind(change, metric)))
    return out


def _commit(c: str | None, run: str) -> str:
    return c[:12] if c else run


def step_range(c: ChangePoint) -> str:
    """Where a step lies: between the last run before it and the first after it; two runs of one commit
    (a re-run, a nightly of an unchanged branch) say so: the step came from outside the code."""
    if c.before_commit and c.before_commit == c.after_commit:
        return f"between two runs of {c.before_commit[:12]} ({c.before_run}, {c.after_run}): not a code change"
    return f"between {_commit(c.before_commit, c.before_run)} and {_commit(c.after_commit, c.after_run)}"


def step_text(c: ChangePoint, metric: str) -> str:
    """A step's size: its relative change with the CI, or, from a level of 0, the two levels."""
    if c.change is None or c.ci_low is None or c.ci_high is None:
        return f"{format_value(metric, c.mean_before)} -> {format_value(metric, c.mean_after)}"
    return f"{c.change * 100:+.1f}% [{c.ci_low * 100:+.1f}%, {c.ci_high * 100:+.1f}%]"


def _split(a: SeriesAnalysis, analyses: Sequence[SeriesAnalysis]) -> bool:
    """Whether ``a``'s case and metric were split by machine (its runs without a machine key among them)."""
    return any(b.machine_key is not None and (b.case_key, b.metric) == (a.case_key, a.metric) for b in analyses)


def render(analyses: Sequence[SeriesAnalysis]) -> str:
    """The findings as text: one line per change point or creep, grouped by case and metric."""
    lines: list[str] = []
    found = [a for a in analyses if a.change_points or a.creeps]
    for a in found:
        where = f"  on {a.machine_key or 'no machine key'}" if a.machine_key is not None or _split(a, analyses) else ""
        lines.append(f"{a.case_key}  {a.metric}{where}  ({a.points} run{'' if a.points == 1 else 's'})")
        for c in a.change_points:
            lines.append(f"  step   {c.kind:<10} {step_text(c, a.metric)}"
                         f"  {step_range(c)}"
                         f"  (run {c.index + 1} of {a.points}, p={c.p_value:.1g})")
        for cr in a.creeps:
            lines.append(f"  creep  {cr.kind:<10} {cr.change * 100:+.1f}% [{cr.ci_low * 100:+.1f}%, {cr.ci_high * 100:+.1f}%]"
                         f"  from {_commit(cr.first_commit, cr.first_run)} to {_commit(cr.last_commit, cr.last_run)}"
                         f"  (runs {cr.start + 1}-{cr.end + 1}, Mann-Kendall p={cr.p_value:.1g})")
    steps = sum(len(a.change_points) for a in analyses)
    creeps = sum(len(a.creeps) for a in analyses)
    regressions = sum(a.regressions for a in analyses)
    lines.append(f"{len(analyses)} series analysed: {steps} change point(s), {creeps} creep(s), "
                 f"{regressions} regression(s)")
    return "\n".join(lines) + "\n"
