"""The time statistic on plain numbers: head / base step time from per-process samples (TimeChange),
paired or unpaired, with performance modes, the set-aside of slowed processes and the bootstrap. No torch,
no results model: lists of floats in, a TimeChange out (perfgate.judging.compare applies it to cases).

Time (``step_time``) is judged from the raw samples, but never as if every sample were independent:
samples inside one worker process are correlated (same memory layout, same neighbours on the machine),
and the spread *between* processes is often larger than inside one. The unit of evidence is therefore
the **step time of each worker process**: a low quantile of its samples (``process_quantile``, 10th
percentile by default), since interference from the rest of the machine only ever adds time:

- stored baseline (unpaired): per-process step times of head vs base, those slowed by the machine
  throughout set aside (``set_aside_slowed``), Mann-Whitney U rank test
  (scipy.stats.mannwhitneyu) and a bootstrap CI (scipy.stats.bootstrap) of its companion estimate,
  the two-sample Hodges-Lehmann shift (``shift_median``: the median of all head - base differences) in
  log space, widened to a Welch t interval (scipy.stats.ttest_ind) where that is wider;
- ``--against`` (paired): base and head processes ran back to back, so each pair's ratio cancels slow
  drift of the machine; Wilcoxon signed-rank test (scipy.stats.wilcoxon) and a bootstrap CI of its
  companion, the Hodges-Lehmann centre of the pair log ratios (``walsh_median``), widened to a
  one-sample t interval (scipy.stats.ttest_1samp) where that is wider.

A change is *significant* when its CI excludes 1 and, where there are enough processes for the rank test
to reach the significance level at all, the rank test agrees. What the verdict then is, perfgate.judging.decision
says: one rule for every mode (a minimum effect for ``regression`` and ``win``, an equivalence margin for
``unchanged``, ``inconclusive`` otherwise, with advice).
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from perfgate.util.stats import (
    process_step_time,
    quantile_name,
    run_to_run_log,
)


@dataclass(frozen=True)
class TimeChange:
    """head / base step time: estimate, CI, rank-test p-value, and how it was obtained."""

    ratio: float
    low: float
    high: float
    p_value: float
    significant: bool
    paired: bool
    n_base: int  # processes (units of evidence) on each side
    n_head: int
    test: str
    process_level: bool = True  # False: too few processes, fell back to raw samples (between-process noise unseen)
    set_aside: tuple[int, int] = (0, 0)  # (base, head) processes set aside as slowed by the machine
    modes: tuple[int, int] = (1, 1)  # (base, head) performance modes the kept processes fall into (unpaired)
    run_to_run: float = 0.0  # the run-to-run spread added to the CI (relative sd)
    base_s: float | None = None  # each side's step time as judged: median of its (kept) per-process times
    head_s: float | None = None
    throttled: str = ""  # processes (pairs) set aside as throttled by their GPU (perfgate.judging.compare), in words


# A process is "slowed by the machine" when its step time lies this far above the typical time of its
# side's faster half, in robust sds of that half and never less than SLOWED_MIN_GAP. Interference only
# ever adds time, and on a shared runner a whole process can land in a slow stretch of its vCPU (1.3-1.6x,
# lasting seconds; docs/gate.md). The gap is 8%, not the 2% it once was: with 2% the rule also cut ordinary
# spread (the top 10-15% of processes of a 3%-spread side), more often on a side with more processes, and
# so biased a 16-process head against a 5-process baseline (8% false alarms, tests/test_sequential.py).
SLOWED_MADS = 3.0
SLOWED_MIN_GAP = 0.08
# But a process's memory layout can make it stably slow too, and then a side's processes fall into modes
# (up to 25% apart on a small conv rollout, docs/gate.md). Interference is rare and brief, so it slows a
# few processes of a side; a layout mode holds a share of the processes, often most of them. So at most
# this share of a side (rounded down) is ever set aside; more processes past the fence make the side
# multimodal, and then every process stays: a minority mode is never kept as "the fast truth".
SLOWED_MAX_SHARE = 0.25


def performance_modes(logs: Sequence[float]) -> list[list[float]]:
    """The log per-process step times of one side split into performance modes: runs of sorted values
    separated by a gap wider than ``max(SLOWED_MADS`` robust sds within the modes, ``SLOWED_MIN_GAP)``. The
    within-mode sd is read from every value's distance to its own mode's median, so a mode holding a third
    of the side is seen as well as one holding a tenth (the faster half alone mixes them). One mode when
    nothing is that far apart, and always one for fewer than 4 processes (too few to tell a mode from
    spread)."""
    ordered = sorted(logs)
    if len(ordered) < 4:
        return [ordered] if ordered else []
    floor = math.log1p(SLOWED_MIN_GAP)
    modes = [[ordered[0]]]
    for x in ordered[1:]:  # candidates: split at every gap past the floor
        if x - modes[-1][-1] > floor:
            modes.append([])
        modes[-1].append(x)
    while len(modes) > 1:  # merge the narrowest gap while it is within SLOWED_MADS sds of the modes' spread
        gaps = [modes[i + 1][0] - modes[i][-1] for i in range(len(modes) - 1)]
        i = min(range(len(gaps)), key=gaps.__getitem__)
        grouped = [m for m in modes if len(m) > 1]  # a lone value says nothing of a mode's spread
        if 2 * sum(map(len, grouped)) >= len(ordered):
            sd = 1.4826 * statistics.median(abs(x - statistics.median(m)) for m in grouped for x in m)
            if gaps[i] > SLOWED_MADS * sd:
                break
        # else: too few values in groups to know the spread: wide spread, not modes, until they are
        modes[i:i + 2] = [modes[i] + modes[i + 1]]
    return modes


def set_aside_slowed(logs: Sequence[float]) -> list[float]:
    """The log per-process step times of one side without those slowed by the machine: the slowest
    performance modes (``performance_modes``), as long as together they hold at most SLOWED_MAX_SHARE of
    the side. More of them than that are a mode of the code's layouts, not interference: then nothing is
    set aside. One mode (even spread, however wide): nothing either. Fewer than 4 processes: all kept."""
    modes = performance_modes(logs)
    cap, dropped = int(SLOWED_MAX_SHARE * len(logs)), 0
    while len(modes) > 1 and dropped + len(modes[-1]) <= cap:
        dropped += len(modes.pop())
    if not dropped:
        return list(logs)
    fence = modes[-1][-1]
    return [x for x in logs if x <= fence]


# Two sides whose processes fall into performance modes are compared mode by mode: the fast mode of the
# base with the fast mode of the head, the slow with the slow, so that a side holding more processes of one
# mode than the other does not read as a change (docs/gate.md, "Performance modes"). Which mode of one side
# is which of the other is decided from the data: every order-keeping way to pair the modes that covers at
# least this share of each side's processes is a reading of the data, and a verdict must hold in all of them.
MATCH_MIN_SHARE = 0.3
# ... and in a reading, the modes' own changes must agree within this many standard errors; a pairing whose
# modes moved apart is not the same modes
MATCH_AGREE_SDS = 3.0


@dataclass(frozen=True)
class ModeMatch:
    """One reading of two multimodal sides: ``pairs`` of (base mode, head mode) indices, and the change it
    gives (log scale): estimate, interval and p-value."""

    pairs: tuple[tuple[int, int], ...]
    estimate: float
    low: float
    high: float
    p_value: float
    agree: bool  # the paired modes' own changes agree (MATCH_AGREE_SDS)
    base_n: tuple[int, ...]
    head_n: tuple[int, ...]


def _match_change(strata: Sequence[tuple[Any, Any]], confidence: float, resamples: int, rng: Any) -> tuple[float, float, float, float, bool]:
    """The change over paired modes (log scale): each pair's Hodges-Lehmann shift, weighted by
    nb * nh / (nb + nh); its interval the union of a bootstrap that resamples within each mode and a t
    interval on the pooled within-mode spread; p from that t. And whether the pairs' shifts agree."""
    import numpy as np
    from scipy import stats as sps

    w = np.array([len(b) * len(h) / (len(b) + len(h)) for b, h in strata])
    shifts = np.array([float(shift_median(h, b)) for b, h in strata])
    estimate = float(np.dot(w, shifts) / w.sum())
    groups = [g for pair in strata for g in pair]
    dof = sum(len(g) - 1 for g in groups)
    ss = sum(float(np.sum((g - np.mean(g)) ** 2)) for g in groups)
    sd = math.sqrt(ss / dof) if dof > 0 else math.nan
    boot = np.zeros(resamples)
    for (b, h), wi in zip(strata, w, strict=True):
        bb = b[rng.integers(0, len(b), (resamples, len(b)))]
        hh = h[rng.integers(0, len(h), (resamples, len(h)))]
        boot += wi * shift_median(hh, bb)
    boot /= w.sum()
    alpha = 1.0 - confidence
    low, high = (float(x) for x in np.quantile(boot, [alpha / 2, 1 - alpha / 2]))
    if not sd > 0:  # every mode without spread (each holds 2 or more): the shift is exact, no t to widen it
        return estimate, min(low, estimate), max(high, estimate), 0.0 if estimate else 1.0, True
    se = sd / math.sqrt(w.sum())
    tq = float(sps.t.ppf(1 - alpha / 2, dof))
    low, high = min(low, estimate - tq * se), max(high, estimate + tq * se)
    p = float(2 * sps.t.sf(abs(estimate) / se, dof))
    agree = all(abs(shifts[i] - shifts[j]) <= MATCH_AGREE_SDS * sd * math.sqrt(1 / w[i] + 1 / w[j])
                for i, j in itertools.combinations(range(len(strata)), 2))
    return estimate, low, high, p, agree


def mode_matches(base_modes: Sequence[Sequence[float]], head_modes: Sequence[Sequence[float]], *,
                 confidence: float = 0.95, resamples: int = 4000, seed: int = 0) -> list[ModeMatch]:
    """Every reading of two sides' performance modes (``performance_modes``, fastest first): each
    order-keeping pairing of every mode of the side with fewer to as many of the other's (a mode of one
    process is no mode: it is left out of every pairing, like a process the machine slowed). A reading
    counts (``counted``) when its paired modes hold at least MATCH_MIN_SHARE of each side and their own
    changes agree."""
    import numpy as np

    rng = np.random.default_rng(seed)
    bm = [(i, np.asarray(m, dtype=float)) for i, m in enumerate(base_modes) if len(m) > 1]
    hm = [(j, np.asarray(m, dtype=float)) for j, m in enumerate(head_modes) if len(m) > 1]
    out = []
    k = min(len(bm), len(hm))
    if k:
        for bs in itertools.combinations(bm, k):
            for hs in itertools.combinations(hm, k):
                strata = [(b, h) for (_, b), (_, h) in zip(bs, hs, strict=True)]
                est, low, high, p, agree = _match_change(strata, confidence, resamples, rng)
                out.append(ModeMatch(tuple((i, j) for (i, _), (j, _) in zip(bs, hs, strict=True)), est, low, high,
                                     p, agree, tuple(len(b) for b, _ in strata), tuple(len(h) for _, h in strata)))
    return out


def counted(matches: Sequence[ModeMatch], n_base: int, n_head: int) -> list[ModeMatch]:
    """The readings that count: paired modes holding at least MATCH_MIN_SHARE of each side's processes,
    whose own changes agree, and not a part of another such reading (which says the same with more)."""
    fit = [m for m in matches if m.agree and sum(m.base_n) >= MATCH_MIN_SHARE * n_base
           and sum(m.head_n) >= MATCH_MIN_SHARE * n_head]
    return [m for m in fit if not any(set(m.pairs) < set(o.pairs) for o in fit)]


def process_time(samples: Sequence[float], quantile: float = 0.5, layout_groups: Sequence[int] | None = None) -> float:
    """One worker process's step time: the ``quantile`` of its samples (0.5: the median); over several
    layouts, the median of each layout's (``stats.process_step_time``)."""
    return process_step_time(samples, quantile, layout_groups)


def _rank_test_can_reach(alpha: float, n1: int, n2: int | None = None) -> bool:
    """Can a two-sided exact rank test on this many units reach p < alpha at all? Mann-Whitney's
    smallest p is 2 / C(n1 + n2, n1); Wilcoxon's (paired, n2 None) is 2 / 2**n1. Integers: no overflow."""
    orderings = 2 ** n1 if n2 is None else math.comb(n1 + n2, n1)
    return orderings > 2 / alpha  # int-float comparison is exact in Python, never overflows


def _widen(low: float, high: float, t_result: Any, confidence: float) -> tuple[float, float]:
    """The union of the bootstrap interval and a t interval (log space). A percentile bootstrap over two or
    three per-process step times claims far more certainty than it has; the t interval widens it honestly
    there, and with many processes the two agree. NaN (no spread on a side) leaves the bootstrap's."""
    try:
        ci = t_result.confidence_interval(confidence_level=confidence)
    except (ValueError, ZeroDivisionError):
        return low, high
    t_low, t_high = float(ci.low), float(ci.high)
    if math.isnan(t_low) or math.isnan(t_high):
        return low, high
    return min(low, t_low), max(high, t_high)


# a step-time ratio's bounds stay within 1e-9..1e9 (in log space): a wider interval says no more, and
# exp() of its raw bound overflowed
LOG_RATIO_LIMIT = math.log(1e9)
BOOTSTRAP_BATCH = 500  # resamples per batch: the Walsh averages of a batch stay a few MB
BOOTSTRAP_ELEMENTS = 8_000_000  # values one bootstrap batch may hold (64 MB of float64)
SHIFT_SIDE_MAX = 128  # samples a side a two-sample shift is computed from, past SHIFT_PAIRS_MAX pairs
SHIFT_PAIRS_MAX = SHIFT_SIDE_MAX * SHIFT_SIDE_MAX


def _batch(per_resample: int) -> int:
    """Resamples per bootstrap batch so that a batch holds at most BOOTSTRAP_ELEMENTS values."""
    return max(1, min(BOOTSTRAP_BATCH, BOOTSTRAP_ELEMENTS // max(per_resample, 1)))


def _thinned_sides(head: Any, base: Any) -> tuple[Any, Any]:
    """``head`` and ``base`` as they are, or, when they make more than SHIFT_PAIRS_MAX differences, each
    side longer than SHIFT_SIDE_MAX as that many of its order statistics, evenly spaced (min and max kept)."""
    import numpy as np

    if len(head) * len(base) <= SHIFT_PAIRS_MAX:
        return head, base

    def thin(x: Any) -> Any:
        if len(x) <= SHIFT_SIDE_MAX:
            return x
        return np.sort(x)[np.round(np.linspace(0, len(x) - 1, SHIFT_SIDE_MAX)).astype(int)]

    return thin(head), thin(base)


def walsh_median(x: Any, axis: int = -1) -> Any:
    """The Hodges-Lehmann estimate of the centre of ``x`` (along ``axis``): the median of the averages of
    all pairs (x_i + x_j) / 2, i <= j. The companion of the Wilcoxon signed-rank test: as robust as the
    median to a few wild values, and nearly as efficient as the mean (95% for normal data, where the median
    has 64%), so its bootstrap interval is narrower than the median's for the same processes."""
    import numpy as np

    x = np.moveaxis(np.asarray(x, dtype=float), axis, -1)
    i, j = np.triu_indices(x.shape[-1])
    return np.median((x[..., i] + x[..., j]) / 2.0, axis=-1)


def shift_median(head: Any, base: Any, axis: int = -1) -> Any:
    """The two-sample Hodges-Lehmann shift of ``head`` over ``base`` (along ``axis``): the median of all
    differences head_i - base_j. The companion of the Mann-Whitney U test, robust as a difference of
    medians and far more efficient with few processes (it uses every pair, not the two middle values)."""
    import numpy as np

    h = np.moveaxis(np.asarray(head, dtype=float), axis, -1)
    b = np.moveaxis(np.asarray(base, dtype=float), axis, -1)
    diffs = h[..., :, None] - b[..., None, :]
    return np.median(diffs.reshape(*diffs.shape[:-2], -1), axis=-1)


def _chunks(samples: Sequence[float], sizes: Sequence[int]) -> list[Sequence[float]]:
    out, start = [], 0
    for n in sizes:
        out.append(samples[start:start + n])
        start += n
    return out


def pair_log_ratio(base: Sequence[float], head: Sequence[float], base_bursts: Sequence[int] | None = None,
                   head_bursts: Sequence[int] | None = None, quantile: float = 0.5) -> float:
    """log(head / base) of one pair of processes. Sampled in lockstep (the same number of bursts, taken in
    turns), it is the median over bursts of the log ratio of the two bursts' medians, so the machine's
    speed changing during the pair cancels burst by burst; otherwise the log ratio of the two processes'
    step times (``process_time`` at ``quantile``)."""
    if (base_bursts and head_bursts and len(base_bursts) == len(head_bursts)
            and sum(base_bursts) == len(base) and sum(head_bursts) == len(head)):
        medians = [(statistics.median(b), statistics.median(h))
                   for b, h in zip(_chunks(base, base_bursts), _chunks(head, head_bursts), strict=True)]
        # a burst whose median is 0 (a timer that read 0 ns: untrusted samples) has no ratio; the rest decide
        ratios = [math.log(h / b) for b, h in medians if b > 0 and h > 0]
        if ratios:
            return statistics.median(ratios)
    return math.log(process_time(head, quantile) / process_time(base, quantile))


def time_change(base_groups: Sequence[Sequence[float]], head_groups: Sequence[Sequence[float]], *,
                paired: bool = False, confidence: float = 0.95, resamples: int = 4000,
                seed: int = 0, base_bursts: Sequence[Sequence[int] | None] | None = None,
                head_bursts: Sequence[Sequence[int] | None] | None = None,
                run_to_run: float = 0.0, quantile: float = 0.5,
                base_layouts: Sequence[Sequence[int] | None] | None = None,
                head_layouts: Sequence[Sequence[int] | None] | None = None,
                drop_slowed: bool = False, by_modes: bool = False) -> TimeChange | None:
    """Compare step-time samples grouped by worker process (seconds per step) of base and head.

    ``paired``: group i of base ran with group i of head (``--against``); ``base_bursts`` /
    ``head_bursts``: per process, its samples per lockstep burst (None where not sampled in lockstep).
    ``run_to_run``: relative sd of the ratio between repeated runs, added to the CI in quadrature.
    ``quantile``: each process's step time is this quantile of its samples (``process_time``);
    ``base_layouts`` / ``head_layouts``: per process, its samples per memory layout (None: one layout).
    Unpaired, ``drop_slowed``: each side's slowed minority is set aside (``set_aside_slowed``); ``by_modes``:
    sides with performance modes are compared mode by mode (``mode_matches``).
    Returns None when either side has no samples.
    """
    import numpy as np
    from scipy import stats as sps

    base_layouts = list(base_layouts or [None] * len(base_groups))
    head_layouts = list(head_layouts or [None] * len(head_groups))
    if paired and len(base_groups) == len(head_groups):
        keep = [i for i in range(len(base_groups)) if len(base_groups[i]) and len(head_groups[i])]
        base_bursts = [(base_bursts or [None] * len(base_groups))[i] for i in keep]
        head_bursts = [(head_bursts or [None] * len(head_groups))[i] for i in keep]
        base_layouts, head_layouts = [base_layouts[i] for i in keep], [head_layouts[i] for i in keep]
        base_groups, head_groups = [list(base_groups[i]) for i in keep], [list(head_groups[i]) for i in keep]
    else:
        paired = False
        base_layouts = [lay for g, lay in zip(base_groups, base_layouts, strict=False) if len(g)]
        head_layouts = [lay for g, lay in zip(head_groups, head_layouts, strict=False) if len(g)]
        base_groups = [list(g) for g in base_groups if len(g)]
        head_groups = [list(g) for g in head_groups if len(g)]
    if not base_groups or not head_groups:
        return None
    alpha = 1.0 - confidence
    rng = np.random.default_rng(seed)
    process_level = len(base_groups) >= 2 and len(head_groups) >= 2
    set_aside, modes = (0, 0), (1, 1)
    if process_level:
        base = np.log([process_time(g, quantile, lay) for g, lay in zip(base_groups, base_layouts, strict=True)])
        head = np.log([process_time(g, quantile, lay) for g, lay in zip(head_groups, head_layouts, strict=True)])
        n_base, n_head = len(base), len(head)
        if not paired:
            if drop_slowed:
                kept_base, kept_head = set_aside_slowed(base), set_aside_slowed(head)  # type: ignore[arg-type]  # any float sequence
                base, head = np.array(kept_base), np.array(kept_head)
            if by_modes:
                modes = (len(performance_modes(base)), len(performance_modes(head)))  # type: ignore[arg-type]  # as above
            set_aside = (n_base - len(base), n_head - len(head))
    else:
        # one process on a side: only the raw samples are left, and they hide between-process noise
        base = np.log([x for g in base_groups for x in g])
        head = np.log([x for g in head_groups for x in g])
        paired = False
    if paired:
        diffs = np.array([pair_log_ratio(b, h, bb, hb, quantile) for b, h, bb, hb
                          in zip(base_groups, head_groups, base_bursts, head_bursts, strict=True)])  # type: ignore[arg-type]  # paired: bursts given
        estimate = float(walsh_median(diffs))
        if np.all(diffs == diffs[0]):
            low = high = estimate
        else:
            ci = sps.bootstrap((diffs,), walsh_median, confidence_level=confidence, n_resamples=resamples,
                               method="percentile", vectorized=True, batch=_batch(len(diffs) ** 2 // 2 + len(diffs)),
                               rng=rng)
            low, high = float(ci.confidence_interval.low), float(ci.confidence_interval.high)
        if np.all(diffs == 0):
            p = 1.0
        else:
            p = float(sps.wilcoxon(diffs).pvalue)
            low, high = _widen(low, high, sps.ttest_1samp(diffs, 0.0), confidence)
        reachable = _rank_test_can_reach(alpha, len(diffs))
        test = "Wilcoxon signed-rank on per-pair log ratios"
    elif max(modes) > 1:
        estimate, low, high, p, test = _matched_modes(base, head, confidence, resamples, seed, quantile)
        reachable = True
    else:
        paired = False
        # the shift and its bootstrap hold every head - base difference: thousands of raw samples a side (one
        # fast process) asked for tens of GiB (MemoryError, exit 3); past SHIFT_PAIRS_MAX both come from each
        # side's evenly spaced order statistics (a CI as wide as that many samples give); the rank and t tests
        # below still see every sample
        th, tb = _thinned_sides(head, base)
        estimate = float(shift_median(th, tb))
        if np.ptp(np.concatenate([base, head])) == 0:
            low = high = estimate
        else:
            ci = sps.bootstrap((th, tb), shift_median, confidence_level=confidence, n_resamples=resamples,
                               method="percentile", vectorized=True, batch=_batch(len(th) * len(tb)), rng=rng)
            low, high = float(ci.confidence_interval.low), float(ci.confidence_interval.high)
        p = 1.0
        if np.ptp(np.concatenate([base, head])) > 0:
            p = float(sps.mannwhitneyu(head, base, alternative="two-sided").pvalue)
            low, high = _widen(low, high, sps.ttest_ind(head, base, equal_var=False), confidence)
        reachable = _rank_test_can_reach(alpha, len(head), len(base))
        per_process = quantile_name(quantile, plural=True)
        test = (f"Mann-Whitney U on per-process {per_process}" if process_level
                else "Mann-Whitney U on raw samples (one process on a side)")
    if not reachable:  # the p printed beside the verdict cannot say "significant" here; the interval does
        test += f" (its p cannot fall below {alpha:.2g} with this few processes: the CI decides)"
    if any(set_aside):
        test += (f" ({set_aside[0]} base and {set_aside[1]} head process(es) set aside as slowed by the "
                 "machine)")
    if run_to_run > 0:
        # One run's interval is about this run's minutes only; the same change measured again lands
        # elsewhere by about run_to_run (docs/gate.md). Add that spread in quadrature, in log space.
        extra = run_to_run_log(run_to_run, 1 - alpha)
        low, high = estimate - math.hypot(estimate - low, extra), estimate + math.hypot(high - estimate, extra)
        test += f", CI + {run_to_run * 100:g}% run-to-run"
    excludes_one = low > 0 or high < 0
    significant = excludes_one and (p < alpha or not reachable)
    # A t interval with about one degree of freedom at a late look's level (a file of 1,000 one-sample
    # processes against two) reaches thousands in log space: math.exp overflowed (exit 3). Such an interval
    # says "no evidence" at any width; clamped, it reads as a ratio of up to 1e9.
    low, high = max(low, -LOG_RATIO_LIMIT), min(high, LOG_RATIO_LIMIT)
    estimate = min(max(estimate, -LOG_RATIO_LIMIT), LOG_RATIO_LIMIT)
    return TimeChange(
        ratio=math.exp(estimate), low=math.exp(low), high=math.exp(high), p_value=p, significant=significant,
        paired=paired, n_base=len(base_groups), n_head=len(head_groups), test=test, process_level=process_level,
        set_aside=set_aside, modes=modes, run_to_run=run_to_run, base_s=math.exp(float(np.median(base))), head_s=math.exp(float(np.median(head))),
    )


def _matched_modes(base: Any, head: Any, confidence: float, resamples: int, seed: int,
                   quantile: float) -> tuple[float, float, float, float, str]:
    """``time_change`` for sides that fall into performance modes: (estimate, low, high, p, test) in log
    scale, compared mode by mode (``mode_matches``). One reading that counts: its change. Several: the CI
    spans them all and p is the largest, so a verdict holds in every reading. None: the modes cannot be
    told apart from a change, and nothing is significant."""
    base_modes, head_modes = performance_modes(base), performance_modes(head)
    matches = mode_matches(base_modes, head_modes, confidence=confidence, resamples=resamples, seed=seed)
    readings = counted(matches, len(base), len(head))
    sizes = (f"base {'+'.join(str(len(m)) for m in base_modes)}, head {'+'.join(str(len(m)) for m in head_modes)} "
             f"processes, fastest mode first")
    per_process = quantile_name(quantile, plural=True)
    if not readings:
        estimate = float(shift_median(head, base))
        low = min([estimate, *(m.low for m in matches)])
        high = max([estimate, *(m.high for m in matches)])
        return estimate, low, high, 1.0, (
            f"per-process {per_process} in {len(base_modes)} base and {len(head_modes)} head performance modes "
            f"({sizes}) that no pairing of modes explains (each holds less than {MATCH_MIN_SHARE:.0%} of a side, "
            "or its modes moved apart): a change cannot be told from the modes, not significant")
    best = max(readings, key=lambda m: (sum(m.base_n) + sum(m.head_n), -m.p_value))
    low, high = min(m.low for m in readings), max(m.high for m in readings)
    text = (f"per-process {per_process} compared mode by mode ({sizes}; {len(best.pairs)} mode(s) paired, "
            "t on the pooled within-mode spread)")
    if len(readings) > 1:
        text += f"; {len(readings)} pairings of the modes fit the data, the CI spans them all"
    return best.estimate, low, high, max(m.p_value for m in readings), text

