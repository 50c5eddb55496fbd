"""The run-to-run spread of a case, measured: how far whole runs of the same code land apart. No torch.

Two places measure it: `perfgate calibrate` (its A/A rounds, one ratio between consecutive rounds) and a
baseline pooled from several runs of one commit (`perfgate baseline update RUN1 RUN2 ...`, each run's
level of the case). A handful of runs gives a rough figure: from two ratios the sample sd of a true 1.41%
lands at or below the 0.5% floor in one calibration in five. So every measured spread is kept with its
uncertainty. A figure that narrows the term is the one-sided upper confidence bound (chi-square, on the
variance of the runs' levels), never the point estimate: a lucky few runs must not make an unpaired
comparison look paired. A pooled baseline's few runs that spread more than the configured default widen
the term by their spread combined with the default's (``moderated``), not by that bound, which from 3 runs
is 4.4 times their estimate.

Two figures, not to be confused:

- the **per-run spread** ``tau``: the sd of one run's log step time around the code's own level;
- the **ratio term** (``GateSettings.run_to_run``): the sd of the log ratio of two single runs,
  ``tau * sqrt(2)``. Against a baseline pooled from ``k`` runs the ratio's share is ``tau * sqrt(1 + 1/k)``
  (the head run's own move, and the baseline's, averaged over its runs).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

CONFIDENCE = 0.95  # of the one-sided upper bound the gate uses


@dataclass(frozen=True)
class Spread:
    """A measured per-run spread (relative sd of one run's log step time): the point estimate, its
    one-sided upper confidence bound, and the degrees of freedom (runs - 1) behind them."""

    estimate: float
    upper: float
    dof: int
    confidence: float = CONFIDENCE

    def to_json(self) -> dict[str, Any]:
        return {"estimate": round(self.estimate, 5), "upper": round(self.upper, 5), "dof": self.dof,
                "confidence": self.confidence}


def chi2_lower(confidence: float, dof: int) -> float:
    """The (1 - confidence) quantile of a chi-square with ``dof`` degrees of freedom."""
    from scipy import stats

    return float(stats.chi2.ppf(1.0 - confidence, dof))


def level_spread(levels: Sequence[float], sampling_var: float = 0.0, confidence: float = CONFIDENCE) -> Spread | None:
    """The per-run spread from ``levels``, each run's log step time of one case: their sample variance
    (``len(levels) - 1`` degrees of freedom), less ``sampling_var`` (the part of one level's variance its own
    processes explain: between-process variance / processes), as a relative sd; the upper bound is
    ``dof * s^2 / chi2_{1-confidence}(dof)`` less the same sampling part. None with fewer than 2 levels."""
    if len(levels) < 2:
        return None
    dof = len(levels) - 1
    s2 = statistics.variance(levels)
    upper = dof * s2 / chi2_lower(confidence, dof)
    return Spread(estimate=math.expm1(math.sqrt(max(s2 - sampling_var, 0.0))),
                  upper=math.expm1(math.sqrt(max(upper - sampling_var, 0.0))), dof=dof, confidence=confidence)


def case_levels(cases: Sequence[Any], quantile: float) -> tuple[list[float], float]:
    """Each run's level of one case (the mean log step time of its worker processes, each process's
    ``quantile`` of its samples), and the part of one level's variance its own processes explain (the mean
    over runs of between-process variance / processes). Runs without a process step time to log are left
    out."""
    levels, sampling = [], []
    for case in cases:
        logs = [math.log(t) for t in (p.step_time(quantile) for p in case.processes if p.samples_ns) if t > 0]
        if logs:
            levels.append(statistics.fmean(logs))
            sampling.append(statistics.variance(logs) / len(logs) if len(logs) > 1 else 0.0)
    return levels, statistics.fmean(sampling) if sampling else 0.0


def ratio_spread(ratios: Sequence[float], sampling_var: float, confidence: float = CONFIDENCE) -> Spread | None:
    """The per-run spread from A/A ratios alone (calibration entries written before the levels were kept):
    half their mean square log is one level's variance, taken with ``len(ratios)`` degrees of freedom (an
    approximation: consecutive ratios share a run), less ``sampling_var``, with its upper bound."""
    if not ratios:
        return None
    dof = len(ratios)
    s2 = statistics.fmean(math.log(r) ** 2 for r in ratios) / 2
    upper = dof * s2 / chi2_lower(confidence, dof)
    return Spread(estimate=math.expm1(math.sqrt(max(s2 - sampling_var, 0.0))),
                  upper=math.expm1(math.sqrt(max(upper - sampling_var, 0.0))), dof=dof, confidence=confidence)


def ratio_term(per_run: float, base_runs: int = 1) -> float:
    """The ratio term (relative sd of head / base) a per-run spread gives against a baseline pooled from
    ``base_runs`` runs: ``tau * sqrt(1 + 1 / base_runs)`` in log space."""
    return math.expm1(math.log1p(per_run) * math.sqrt(1.0 + 1.0 / max(1, base_runs)))


def per_run(ratio: float) -> float:
    """The per-run spread behind a ratio term of two single runs (``ratio / sqrt(2)`` in log space)."""
    return math.expm1(math.log1p(ratio) / math.sqrt(2.0))


# ---------------------------------------------------------------- what the gate reads from a baseline

BASELINE_RUNS = "baseline_runs"  # a pooled baseline case's metadata: {runs, run_spread}, perfgate.judging.baselines.pooled


def _figure(value: Any, high: float) -> float | None:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and 0 <= value <= high
    return float(value) if ok else None


def calibrated_floor(entry: Any) -> float | None:
    """A calibration entry's noise floor (the smallest step-time change calibrate found detectable, rounded
    up to 0.5%), or None. Entries written before the floor had its own key held a threshold frozen from the
    configuration of their day beside the figure: only the figure (``smallest_detectable_change``) is read."""
    if not isinstance(entry, dict):
        return None
    floor = _figure(entry.get("noise_floor"), 10.0)
    if floor is None:
        smallest = _figure(entry.get("smallest_detectable_change"), 10.0)
        floor = None if smallest is None else round(math.ceil(smallest * 200) / 200, 4)
    return floor or None


def calibrated_spread(entry: Any, high: float) -> Spread | None:
    """The per-run spread a calibration entry measured, at its upper bound. An entry written before the bound
    was stored (its ``run_to_run`` a point estimate from as few as 2 ratios) is read again from its A/A
    ratios: the bound recomputed, the point estimate never used; None where it holds none."""
    if not isinstance(entry, dict):
        return None
    if isinstance(entry.get("run_spread"), dict):
        stored = _figure(entry.get("run_to_run"), high)
        dof = entry["run_spread"].get("dof")
        if stored is None or isinstance(dof, bool) or not isinstance(dof, int) or dof < 1:
            return None
        point = _figure(entry.get("run_to_run_estimate"), high)
        return Spread(estimate=per_run(stored if point is None else point), upper=per_run(stored), dof=dof)
    ratios = entry.get("aa_ratios")
    sd = _figure(entry.get("between_process_sd"), 10.0)
    processes = entry.get("processes")
    if (not isinstance(ratios, list) or not ratios or sd is None or isinstance(processes, bool)
            or not isinstance(processes, int) or processes < 1
            or any(_figure(r, 100.0) is None or r <= 0 for r in ratios)):
        return None
    return ratio_spread(ratios, sd ** 2 / processes)


def pooled_spread(base: Any, high: float) -> tuple[int, Spread | None]:
    """(runs, per-run spread) of a baseline case pooled from several runs (its ``baseline_runs`` metadata,
    validated: a file's word); (1, None) for a case of one run."""
    info = getattr(base, "metadata", {}).get(BASELINE_RUNS) if base is not None else None
    if not isinstance(info, dict):
        return 1, None
    runs = info.get("runs")
    if isinstance(runs, bool) or not isinstance(runs, int) or not 1 <= runs <= 1000:
        return 1, None
    spread = info.get("run_spread")
    if runs < 2 or not isinstance(spread, dict):
        return runs, None
    estimate, upper, dof = _figure(spread.get("estimate"), high), _figure(spread.get("upper"), high), spread.get("dof")
    if estimate is None or upper is None or upper < estimate or dof != runs - 1:
        return runs, None
    return runs, Spread(estimate=estimate, upper=upper, dof=dof)


# A baseline pooled from a few runs whose levels spread more than the configured default says combines the
# two: their variances averaged (log scale), the default counted as this many degrees of freedom. The runs'
# own upper bound is no figure to judge with: from 3 runs (2 dof) it is 4.4x their estimate; a transformer
# block's three runs, spread by 5.9% (sd), gave a 39% term and intervals of 0.44x-2.1x (docs/lab-record.md,
# "Baselines pooled from a few runs").
DEFAULT_DOF = 2


def moderated(assumed: float, pooled: Spread, default_dof: int = DEFAULT_DOF) -> float:
    """The per-run spread of ``pooled`` runs combined with the configured default's ``assumed`` one: the mean
    of their variances weighted by degrees of freedom, the default's counted as ``default_dof``."""
    a, e = math.log1p(assumed), math.log1p(pooled.estimate)
    return math.expm1(math.sqrt((default_dof * a * a + pooled.dof * e * e) / (default_dof + pooled.dof)))


def unpaired_term(default: float, default_name: str, entry: Any, base: Any, paired_floor: float,
                  high: float) -> tuple[float, str]:
    """The run-to-run term of an unpaired comparison against ``base`` (a baseline case) and where it came from.

    The per-run spread: calibrate's upper bound where the case was calibrated (``entry``); else, where the
    baseline case pools several runs, their own upper bound when it is below the configured default's (the
    runs show the default too wide, with confidence), or, when their estimate is above it (they show it too
    narrow), their spread combined with the default's (``moderated``); else the configured ``default`` (a
    ratio of two single runs). Then the ratio's term against a baseline of ``k`` pooled runs
    (``ratio_term``); a measured one never below ``paired_floor`` nor above ``high``."""
    runs, pooled = pooled_spread(base, high)
    assumed = per_run(default)
    calibrated = calibrated_spread(entry, high)
    if calibrated is not None:
        when = str(entry.get("measured_at", ""))[:10]
        tau, source = calibrated.upper, (f"measured by calibrate{' on ' + when if when else ''} "
                                         f"({calibrated.confidence * 100:g}% upper bound, {calibrated.dof} dof)")
    elif pooled is not None and pooled.upper < assumed:
        tau, source = pooled.upper, (f"measured by the baseline's {runs} pooled runs "
                                     f"({pooled.confidence * 100:g}% upper bound)")
    elif pooled is not None and pooled.estimate > assumed:
        tau, source = moderated(assumed, pooled), (
            f"measured by the baseline's {runs} pooled runs ({pooled.estimate * 100:.1f}% a run), combined with "
            f"the {default_name} default counted as {DEFAULT_DOF} runs' worth")
    elif runs == 1:  # the configured term as it is: the ratio of two single runs it stands for
        return default, f"{default_name} default, not calibrated"
    else:
        tau, source = assumed, f"{default_name} default, not calibrated"
        return round(ratio_term(tau, runs), 5), source + f"; against {runs} pooled runs"
    if runs > 1:
        source += f"; against {runs} pooled runs"
    # a measured term never below the paired one: a few quiet runs must not make a comparison look paired
    return min(high, max(paired_floor, round(ratio_term(tau, runs), 5))), source
