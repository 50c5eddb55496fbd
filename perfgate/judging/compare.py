"""The gate's rule, in one place: a run against a baseline (stored, or a base ref run in the same job)
-> one Verdict per case and metric. No torch. docs/gate.md explains every rule and default below.

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
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import date
from typing import Any

from perfgate.judging import decision
from perfgate.judging.runspread import calibrated_floor, unpaired_term
from perfgate.model import acknowledge
from perfgate.model.config import ConfigError, Settings
from perfgate.model.environment_keys import environment_diff
from perfgate.model.results import (
    METRIC_KINDS,
    STATUS_FAILED,
    STATUS_OK,
    STATUS_SKIPPED,
    CaseResult,
    CaseSpec,
    Comparison,
    ProcessSamples,
    RunResult,
    Verdict,
    higher_is_better,
)
from perfgate.protocol import host_quiet
from perfgate.util.formatting import format_environment, plural
from perfgate.util.stats import (
    PROCESS_QUANTILE,
    RUN_TO_RUN_CPU,
    RUN_TO_RUN_CUDA,
    RUN_TO_RUN_MAX,
    process_step_time,
    quantile_name,
)

STEP_TIME = "step_time"
ACCURACY = "accuracy"
STATUS = "status"


# ---------------------------------------------------------------- settings: [tool.perfgate.gate]

@dataclass(frozen=True)
class GateSettings:
    """The gate's knobs, from ``[tool.perfgate.gate]``; every default is documented in docs/gate.md."""

    threshold: float = 0.05  # relative step-time change that counts as large
    confidence: float = 0.95  # of the ratio's CI; alpha of the rank test is 1 - confidence
    # relative sd of the step-time ratio between repeated runs of the same change, which one run's samples
    # cannot see (the machine's state drifts between runs); added to the ratio's CI (docs/gate.md). 2% on
    # CPU until `perfgate calibrate --write` measures it: with workers' C allocator steady, unchanged code's
    # unpaired ratios spread by an sd of 1.4% across 20 trials on the conv rollout (3% before, when whole
    # runs moved with their share of allocator-thrashing processes)
    run_to_run: float = RUN_TO_RUN_CPU
    # the same for `--against`: base and head sampled in lockstep on the same CPU, so the machine's drift
    # reaches both sides and cancels; what is left between repeated paired runs is smaller (docs/gate.md)
    run_to_run_paired: float = 0.005
    # the unpaired default on a GPU until `perfgate calibrate --write` measures it: whole runs minutes apart
    # moved by about 6% on the first H200 run (docs/lab-record.md), so a stored comparison there must
    # not call a win or a regression that such a move can explain
    run_to_run_cuda: float = RUN_TO_RUN_CUDA
    # each worker process's step time is this quantile of its samples (0.5: the median; stats.PROCESS_QUANTILE)
    process_quantile: float = PROCESS_QUANTILE
    deterministic_tolerance: float = 0.0  # relative; ops, kernels, FLOPs, graph breaks: exact by default
    memory_tolerance: float = 0.10  # relative change of a memory metric that counts
    memory_floor_bytes: float = 1024 * 1024  # ... and never less than this many bytes
    compile_time_tolerance: float = 0.5  # compile_cold_s / compile_warm_s: one sample each, so wide
    compile_time_floor_s: float = 1.0
    # re-run a case whose step time regressed before failing the gate: true, false, or "stored" (the
    # default): against a stored baseline only; `--against`'s lockstep pairs are judged once (docs/gate.md)
    remeasure: bool | str = "stored"
    # against a stored baseline recorded from a clean commit this repository has: a case whose stored
    # comparison is not `unchanged` at its first look is settled by lockstep pairs against that commit
    # (as `run --against` would), not by the stored comparison and the re-measure (docs/gate.md)
    settle_in_lockstep: bool = True
    # how much to measure (perfgate.judging.sequential): processes are added to a case, look by look, until its step
    # time is settled or its budget is spent; adaptive = false measures exactly `processes` per case
    adaptive: bool = True
    max_processes: int = 16  # per side, per case
    # an unpaired comparison (a stored baseline, not lockstep pairs) settles only from this many processes of
    # the run: with fewer, performance modes cannot be seen (perfgate.judging.compare.performance_modes needs 4), and
    # two runs whose few processes landed in different modes looked settled (docs/gate.md)
    unpaired_min_processes: int = 8
    # an unpaired comparison sets aside each side's slowest minority of processes (``set_aside_slowed``) and
    # compares sides that fall into performance modes mode by mode (``mode_matches``); false turns each off
    # (benchmarks/gate_ablation.py measures what each buys; docs/gate.md)
    set_aside_slowed: bool = True
    compare_modes: bool = True
    max_case_s: float = 60.0  # wall seconds of sampling per case (per side pair with --against), roughly
    precision: float = 0.0  # a plain run's target CI half-width (relative); 0: half the threshold
    bootstrap_resamples: int = 4000
    seed: int = 0  # of the bootstrap: the same data always gets the same verdict
    workloads: dict[str, float] = field(default_factory=dict)  # per-workload step-time threshold
    toggles: dict[str, float] = field(default_factory=dict)  # per-toggle step-time threshold
    metrics: dict[str, float] = field(default_factory=dict)  # per-metric tolerance (relative)
    # cores other processes may use as a case starts timing before its unpaired step-time regression or win
    # is inconclusive (perfgate.protocol.host_quiet): "auto" (1.5x the cores the run leaves free), a number, or None (off)
    max_host_load: float | str | None = "auto"

    def threshold_for(self, case: CaseResult | None, key: str,
                      calibration: dict[str, Any] | None = None) -> tuple[float, str]:
        """The step-time threshold of a case and where it came from.

        The configured one, most specific first: the widest per-toggle threshold among the case's toggles,
        then the per-workload one, then the global. A case calibrated on this machine (``perfgate calibrate
        --write``) is judged with the wider of that and its calibrated noise floor (``calibrated_floor``),
        and the source says which won: a calibration never narrows what the configuration asks, and
        widens it only as far as the machine's noise needs."""
        threshold, source = self.configured_threshold(case)
        floor = calibrated_floor((calibration or {}).get(key))
        if floor is not None and floor > threshold:
            return floor, f"calibrated noise floor (the {source}, {threshold * 100:g}%, is below it)"
        return threshold, source

    def configured_threshold(self, case: CaseResult | None) -> tuple[float, str]:
        """The configured step-time threshold of a case and which setting gave it."""
        if case is not None:
            per_toggle = [self.toggles[t] for t in case.spec.toggles if t in self.toggles]
            if per_toggle:
                return max(per_toggle), "per-toggle threshold"
            if case.spec.workload in self.workloads:
                return self.workloads[case.spec.workload], "per-workload threshold"
        return self.threshold, "global threshold"

    def run_to_run_for(self, paired: bool, device: str = "cpu") -> float:
        """The configured run-to-run spread added to a step-time CI: ``run_to_run_paired`` for lockstep
        pairs; unpaired, ``run_to_run_cuda`` on a GPU, else ``run_to_run``."""
        if paired:
            return self.run_to_run_paired
        return self.run_to_run_cuda if device.startswith("cuda") else self.run_to_run

    def run_to_run_term(self, case: CaseResult | None, key: str, calibration: dict[str, Any] | None = None,
                        paired: bool = False, base: CaseResult | None = None) -> tuple[float, str]:
        """The run-to-run spread an unpaired comparison of this case carries, and where it came from
        (perfgate.judging.runspread.unpaired_term: calibrate's upper bound, else the baseline's own pooled runs, else the
        configured default; scaled to the baseline's number of pooled runs). Lockstep pairs share the
        machine's moments: ``run_to_run_paired``."""
        if paired:
            return self.run_to_run_paired, "paired"
        device = case.spec.device if case is not None else (base.spec.device if base is not None else "cpu")
        name = "run_to_run_cuda" if device.startswith("cuda") else "run_to_run"
        return unpaired_term(self.run_to_run_for(False, device), name, (calibration or {}).get(key), base,
                             self.run_to_run_paired, RUN_TO_RUN_MAX)

    def remeasures(self, mode: str) -> bool:
        """Whether a step-time regression in ``mode`` ("stored" or "against") is measured again before it
        fails the gate."""
        return self.remeasure is True or (self.remeasure == "stored" and mode != "against")

    def plain_precision(self) -> float:
        """A plain run's target step-time CI half-width: ``precision``, or half the threshold."""
        return self.precision or self.threshold / 2

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


_FLOAT_KEYS = ("threshold", "confidence", "run_to_run", "run_to_run_paired", "run_to_run_cuda", "process_quantile", "deterministic_tolerance", "memory_tolerance",
               "memory_floor_bytes", "compile_time_tolerance", "compile_time_floor_s", "max_case_s", "precision")
_TABLE_KEYS = ("workloads", "toggles", "metrics")
_VALID_KEYS = (*_FLOAT_KEYS, "remeasure", "settle_in_lockstep", "adaptive", "set_aside_slowed", "compare_modes", "bootstrap_resamples", "seed", "max_processes", "unpaired_min_processes",
               "max_host_load", *_TABLE_KEYS)


# integer keys with a ceiling: a bootstrap of 10^12 resamples was a MemoryError (exit 3) or minutes of swapping
HIGHEST = {"bootstrap_resamples": 1_000_000}


def _number(value: Any, what: str, low: float = 0.0, high: float | None = None) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"[tool.perfgate.gate] {what} must be a number, got {value!r}")
    if not math.isfinite(value):  # TOML spells nan and inf; a nan threshold made every regression "unchanged"
        raise ConfigError(f"[tool.perfgate.gate] {what} must be a finite number, got {value!r}")
    if value < low or (high is not None and value > high):
        bound = f"between {low:g} and {high:g}" if high is not None else f"at least {low:g}"
        raise ConfigError(f"[tool.perfgate.gate] {what} must be {bound}, got {value!r}")
    return float(value)


def parse_gate(raw: Any) -> GateSettings:
    """Validate ``[tool.perfgate.gate]`` (kept raw by config.py) into GateSettings; ConfigError naming the key."""
    if raw is None:
        return GateSettings()
    if not isinstance(raw, dict):
        raise ConfigError(f"[tool.perfgate.gate] must be a table, got {raw!r}")
    unknown = set(raw) - set(_VALID_KEYS)
    if unknown:
        raise ConfigError(f"[tool.perfgate.gate] unknown key(s) {', '.join(sorted(unknown))}; "
                          f"valid: {', '.join(_VALID_KEYS)}")
    kw: dict[str, Any] = {}
    for k in _FLOAT_KEYS:
        if k in raw:
            kw[k] = _number(raw[k], k, 0.0, {"confidence": 0.999, "run_to_run": RUN_TO_RUN_MAX, "run_to_run_paired": RUN_TO_RUN_MAX, "run_to_run_cuda": RUN_TO_RUN_MAX,
                                                     "process_quantile": 0.5}.get(k))  # upper bounds; the default is PROCESS_QUANTILE (0.1)
    if "confidence" in kw and kw["confidence"] < 0.5:
        raise ConfigError(f"[tool.perfgate.gate] confidence must be between 0.5 and 0.999, got {kw['confidence']!r}")
    if "remeasure" in raw:
        if not (isinstance(raw["remeasure"], bool) or raw["remeasure"] == "stored"):
            raise ConfigError(f"[tool.perfgate.gate] remeasure must be true, false or \"stored\", got {raw['remeasure']!r}")
        kw["remeasure"] = raw["remeasure"]
    if "max_host_load" in raw:
        try:
            kw["max_host_load"] = host_quiet.parse_limit(raw["max_host_load"])
        except ValueError as exc:
            raise ConfigError(f"[tool.perfgate.gate] max_host_load {exc}") from None
    for k in ("adaptive", "settle_in_lockstep", "set_aside_slowed", "compare_modes"):
        if k in raw:
            if not isinstance(raw[k], bool):
                raise ConfigError(f"[tool.perfgate.gate] {k} must be true or false, got {raw[k]!r}")
            kw[k] = raw[k]
    if kw.get("max_case_s", 1.0) <= 0:
        raise ConfigError(f"[tool.perfgate.gate] max_case_s must be more than 0, got {raw['max_case_s']!r}")
    lowest = {"bootstrap_resamples": 100, "seed": 0, "max_processes": 1, "unpaired_min_processes": 1}
    for k, low in lowest.items():
        if k in raw:
            v = raw[k]
            high = HIGHEST.get(k)
            if isinstance(v, bool) or not isinstance(v, int) or v < low or (high is not None and v > high):
                bound = f"from {low} to {high}" if high is not None else f">= {low}"
                raise ConfigError(f"[tool.perfgate.gate] {k} must be an integer {bound}, got {v!r}")
            kw[k] = v
    for k in _TABLE_KEYS:
        if k in raw:
            table = raw[k]
            if not isinstance(table, dict):
                raise ConfigError(f"[tool.perfgate.gate.{k}] must be a table of name = number, got {table!r}")
            parsed = {}
            for name, v in table.items():
                if isinstance(v, dict):  # [tool.perfgate.gate.workloads.NAME] threshold = 0.08
                    if set(v) != {"threshold"}:
                        raise ConfigError(f"[tool.perfgate.gate.{k}.{name}] takes only 'threshold', got {', '.join(v)}")
                    v = v["threshold"]
                if k == "metrics" and name not in METRIC_KINDS:
                    raise ConfigError(f"[tool.perfgate.gate.metrics] unknown metric {name!r}; "
                                      f"valid: {', '.join(METRIC_KINDS)}")
                parsed[name] = _number(v, f"{k}.{name}")
            kw[k] = parsed
    return GateSettings(**kw)


def gate_settings(settings: Settings) -> GateSettings:
    return parse_gate(settings.extra.get("gate"))


# ---------------------------------------------------------------- the time statistic

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
                drop_slowed: bool = True, by_modes: bool = True) -> TimeChange | None:
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
        extra = statistics.NormalDist().inv_cdf(1 - alpha / 2) * math.log1p(run_to_run)
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


# The clocks-event reasons (perfgate.worker.gpu_clocks, read through NVML) for which a GPU slows itself down: heat,
# power and the hardware's own slowdowns. Not an idle GPU, nor clocks someone set (applications clocks,
# sync boost, display): those are the machine's configuration, the same for every process.
THROTTLING_REASONS = ("sw_power_cap", "hw_slowdown", "sw_thermal_slowdown", "hw_thermal_slowdown",
                      "hw_power_brake_slowdown", "board_limit", "reliability")


def throttled(process: ProcessSamples) -> str | None:
    """Why ``process``'s GPU throttled around its timed samples: the THROTTLING_REASONS NVML reported right
    before or right after them, joined by ", "; None for a CPU process, one without clock readings, or one
    whose GPU reported none of them."""
    clocks = process.gpu_clocks or {}
    seen: list[str] = []
    for key in ("throttle_reasons_before", "throttle_reasons_after"):
        seen += [r for r in clocks.get(key) or () if r in THROTTLING_REASONS and r not in seen]
    return ", ".join(seen) or None


def _throttled_kept(why: Sequence[str | None], units: str) -> tuple[list[int], str]:
    """Indices of the ``units`` (processes of a side, or pairs) to keep given why each throttled, and what
    was done in words. Throttled units are set aside while they are fewer than half: when half or more
    throttle, throttling is how this GPU runs this load, not an accident of some processes, and all stay."""
    hit = [i for i, w in enumerate(why) if w]
    if not hit:
        return list(range(len(why))), ""
    reasons = ", ".join(sorted({r for w in why if w for r in w.split(", ")}))
    if 2 * len(hit) < len(why):
        return [i for i, w in enumerate(why) if not w], f"{len(hit)} {units} set aside as throttled ({reasons})"
    return list(range(len(why))), f"{len(hit)} of {len(why)} {units} throttled ({reasons}), all kept: half or more"


def case_time_change(base: CaseResult, head: CaseResult, gate: GateSettings, *, paired: bool = False,
                     confidence: float | None = None, run_to_run: float | None = None,
                     unpaired_run_to_run: float | None = None) -> TimeChange | None:
    """``time_change`` between two measured cases with the gate's settings: its bootstrap, seed, quantile and
    the run-to-run term of the mode (paired: ``--against``'s lockstep pairs, with their bursts), at
    ``confidence`` (a sequential look's) or the gate's own; ``run_to_run`` (the case's
    ``GateSettings.run_to_run_term``) or the configured default. The one call the gate, adaptive sampling
    and ``perfgate calibrate`` share.

    Processes whose GPU throttled (``throttled``) are set aside first, on each side (a pair with either
    throttled, when paired), and the change's ``test`` says how many and why.

    Pairs asked for that cannot be formed (unequal process counts, one process a side) give an unpaired
    change, and that carries ``unpaired_run_to_run`` (else the configured unpaired default): the paired term
    is the spread left once pairs cancel the machine's drift, which unpaired sides do not."""
    change = _case_time_change(base, head, gate, paired, confidence,
                               gate.run_to_run_for(paired, head.spec.device) if run_to_run is None else run_to_run)
    if paired and change is not None and not change.paired:
        change = _case_time_change(base, head, gate, False, confidence,
                                   gate.run_to_run_for(False, head.spec.device) if unpaired_run_to_run is None
                                   else unpaired_run_to_run)
    return change


def _case_time_change(base: CaseResult, head: CaseResult, gate: GateSettings, paired: bool,
                      confidence: float | None, run_to_run: float) -> TimeChange | None:
    base_p, head_p = list(base.processes), list(head.processes)
    notes = []
    if paired and len(base_p) == len(head_p):
        keep, note = _throttled_kept([throttled(b) or throttled(h) for b, h in zip(base_p, head_p, strict=True)],
                                     "pair(s)")
        base_p, head_p = [base_p[i] for i in keep], [head_p[i] for i in keep]
        notes = [note] if note else []
    else:
        for side, processes in (("base", base_p), ("head", head_p)):
            keep, note = _throttled_kept([throttled(p) for p in processes], f"{side} process(es)")
            processes[:] = [processes[i] for i in keep]
            notes += [note] if note else []
    change = time_change([p.step_times_s for p in base_p], [p.step_times_s for p in head_p],
                         paired=paired, confidence=gate.confidence if confidence is None else confidence,
                         resamples=gate.bootstrap_resamples, seed=gate.seed,
                         base_bursts=[p.bursts for p in base_p], head_bursts=[p.bursts for p in head_p],
                         base_layouts=[p.layout_groups for p in base_p], head_layouts=[p.layout_groups for p in head_p],
                         run_to_run=run_to_run, quantile=gate.process_quantile, drop_slowed=gate.set_aside_slowed,
                         by_modes=gate.compare_modes)
    if change is None or not notes:
        return change
    return replace(change, test=f"{change.test} ({'; '.join(notes)})")


ADVICE_NOISY = ("the noise is too large to settle a change of this size: run more worker processes "
                "(--processes), use `perfgate run --against REF` (paired, same job), or `perfgate calibrate`")


ADVICE_MODES = ("the worker processes run this code at distinct speeds (performance modes of their memory "
                "layouts, docs/gate.md): more processes sample the modes more evenly (--processes, "
                "[tool.perfgate.gate] max_processes), or use `perfgate run --against REF`, whose pairs share a layout")


def judge_time(change: TimeChange, threshold: float, threshold_source: str) -> tuple[str, str, str | None]:
    """(kind, rule in words, advice) for a step-time change against ``threshold`` (relative)."""
    kind, rule, advice = _judge_size(change, threshold, threshold_source)
    if kind == "inconclusive" and max(change.modes) > 1:
        # a multimodal side is kept whole and its spread widens the CI; say why it did not settle
        rule = f"the processes fall into {max(change.modes)} performance modes: {rule}"
        advice = ADVICE_MODES
    if kind in ("regression", "win") and not change.process_level:
        sides = [side for side, n in (("the baseline", change.n_base), ("this run", change.n_head)) if n < 2]
        fix = ("run at least 2 worker processes per case (--processes 2 or more) so the gate can see how much "
               "processes differ")
        if "the baseline" in sides:  # more processes now cannot help: every later gate would stay inconclusive
            fix = ("the baseline holds one worker process for this case, so no run can settle a change against "
                   "it: update the baseline from a run with 2 or more processes per case"
                   + ("; and " + fix if "this run" in sides else ""))
        return ("inconclusive", f"{rule}; but one process in {' and '.join(sides)} hides the between-process "
                                "noise", fix)
    return kind, rule, advice


def _judge_size(change: TimeChange, threshold: float, threshold_source: str) -> tuple[str, str, str | None]:
    """``judge_time``'s rule (perfgate.judging.decision: a minimum effect and an equivalence margin) with the
    evidence it was applied to."""
    pct = f"{threshold * 100:g}%"
    mode = "paired base/head processes" if change.paired else "per-process step times"
    basis = f"{change.test}, {change.n_base} vs {change.n_head} processes ({mode}); {threshold_source} {pct}"
    decided = decision.decide(change.ratio, change.low, change.high, change.significant, threshold,
                              decision.min_effect_share_for(change.paired))
    return (decided.kind, f"{decided.why}; {basis}",
            ADVICE_NOISY if decided.kind == "inconclusive" else None)


def budget_advice(change: TimeChange, threshold: float, sampling: dict[str, Any], gate: GateSettings,
                  confidence: float) -> str | None:
    """What it would take to settle an inconclusive step time judged at ``confidence``: the change this
    budget resolves, and the processes (and seconds, at this case's pace) that would narrow the CI enough.
    A sketch: the sampling part of the CI shrinks as 1/sqrt(processes), the run-to-run part does not.
    ``sampling`` (the case's record) is evidence for the advice's figures only, never for the verdict."""
    n, seconds = sampling.get("processes"), sampling.get("seconds")
    if (isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= 10_000
            or not isinstance(seconds, (int, float)) or not 0 <= seconds < 1e9):
        return None
    est = math.log(change.ratio)
    half = (math.log(change.high) - math.log(change.low)) / 2
    z = statistics.NormalDist().inv_cdf(1 - (1 - confidence) / 2)
    floor = z * math.log1p(change.run_to_run)
    line = math.log1p(threshold)
    # settled once the CI clears the nearer of: 1 (a real change), or the threshold (unchanged)
    needed_half = max(abs(est), line - abs(est)) if abs(est) < line else abs(est)
    text = (f"at this budget ({plural(n, 'process', 'processes')} a side, {seconds:.0f} s) the step time is known to "
            f"+/-{math.expm1(half) * 100:.1f}%, so only changes past about {math.expm1(half) * 100:.0f}% are settled")
    sampling_half = math.sqrt(max(half ** 2 - floor ** 2, 0.0))
    if needed_half <= floor or sampling_half == 0:
        return text + ("; no budget settles this one: the run-to-run spread alone is wider "
                       + ("(a wider threshold)" if change.paired else
                          "(use `perfgate run --against REF`, or a wider threshold)"))
    needed = math.ceil(n * (sampling_half / math.sqrt(needed_half ** 2 - floor ** 2)) ** 2)
    if needed <= n:
        return text
    return (text + f"; settling it would take about {needed} processes a side (~{seconds / n * needed:.0f} s): "
            f"raise [tool.perfgate.gate] max_processes / max_case_s"
            + ("" if change.paired else ", or use `perfgate run --against REF`"))


# ---------------------------------------------------------------- other metric kinds

def _relative_verdict(key: str, metric: str, base: float, cur: float, tol: float, floor: float,
                      what: str) -> Verdict:
    """Unchanged within max(tol of the baseline, floor); beyond it a win or a regression, the way up the
    metric's model.METRICS entry says."""
    diff = cur - base
    allowed = max(abs(base) * tol, floor)
    ratio = cur / base if base else None
    rule = f"{what}: change beyond max({tol * 100:g}% of baseline, {floor:g}) counts"
    if abs(diff) <= allowed:
        kind = "unchanged"
    else:
        worse = diff < 0 if higher_is_better(metric) else diff > 0
        kind = "regression" if worse else "win"
    return Verdict(case_key=key, metric=metric, kind=kind, baseline=base, current=cur, ratio=ratio,
                   threshold=tol, rule=rule)


def judge_metric(key: str, metric: str, base: float | None, cur: float | None, gate: GateSettings) -> Verdict | None:
    """The verdict of one METRIC_KINDS metric of a case that ran in both; None for info-only metrics."""
    kind = METRIC_KINDS.get(metric)
    if kind is None or kind == "info":
        return None
    if base is None:
        return Verdict(key, metric, "new", current=cur, rule="metric absent from the baseline")
    if cur is None:
        return Verdict(key, metric, "missing", baseline=base, rule="metric in the baseline, not measured now")
    base, cur = float(base), float(cur)
    if not math.isfinite(base):  # NaN or an infinity: nothing to compare with (NaN - x is neither worse nor not)
        if (math.isnan(base) and math.isnan(cur)) or base == cur:
            return Verdict(key, metric, "unchanged", baseline=base, current=cur,
                           rule=f"not a finite number in the baseline nor now ({base:g}, {cur:g})")
        return Verdict(key, metric, "new", baseline=base, current=cur,
                       rule=f"not a finite number in the baseline ({base:g}): nothing to compare with")
    if not math.isfinite(cur):  # was measured, is not a number now: the gate cannot vouch for it
        return Verdict(key, metric, "regression", baseline=base, current=cur,
                       rule=f"not a finite number now ({cur:g}; {base:g} in the baseline): the measurement broke")
    if kind == "deterministic":
        tol = gate.metrics.get(metric, gate.deterministic_tolerance)
        what = "deterministic count, exact" if tol == 0 else f"deterministic count, tolerance {tol * 100:g}%"
        # counts of ops, kernels, FLOPs, graph breaks: a tiny float floor absorbs per-step averaging
        return _relative_verdict(key, metric, base, cur, tol, 1e-9, what)
    if kind == "memory":
        tol = gate.metrics.get(metric, gate.memory_tolerance)
        return _relative_verdict(key, metric, base, cur, tol, gate.memory_floor_bytes,
                                 f"memory, relative tolerance {tol * 100:g}% with a floor of "
                                 f"{gate.memory_floor_bytes / 2**20:g} MiB")
    tol = gate.metrics.get(metric, gate.compile_time_tolerance)
    return _relative_verdict(key, metric, base, cur, tol, gate.compile_time_floor_s,
                             f"one timing per run, tolerance {tol * 100:g}% with a floor of {gate.compile_time_floor_s:g} s")


def judge_accuracy(key: str, base: dict[str, Any], cur: dict[str, Any], errors: Sequence[Any] = ()) -> Verdict | None:
    """Drift of the toggle's output from the eager fp32 reference, past the workload's tolerance. ``errors``:
    the current case's profile["errors"], where a reference check that raised is recorded (``accuracy: ...``)."""
    if not cur.get("verdict"):
        if not base.get("verdict"):
            return None
        failed = next((str(e) for e in errors if str(e).startswith("accuracy:")), None)
        common: dict[str, Any] = dict(case_key=key, metric=ACCURACY, baseline=base.get("rel_l2"))
        if failed is None:
            return Verdict(kind="missing", rule="accuracy checked in the baseline, not reported now", **common)
        if base.get("verdict") == "drift":
            return Verdict(kind="unchanged", rule=f"the reference check fails now ({failed[:200]}); it drifted in the "
                                                  "baseline", **common)
        return Verdict(kind="regression", rule=f"the reference check ran within tolerance in the baseline and fails "
                                               f"now: {failed[:200]}",
                       advice="the toggled output can no longer be compared with the eager reference "
                              "(its type or shape changed?): see the case's profile errors", **common)
    tol = cur.get("tolerance")
    tol_value = tol.get("rel_l2") if isinstance(tol, dict) else tol if isinstance(tol, (int, float)) else None
    b, c = base.get("rel_l2"), cur.get("rel_l2")
    common = dict(case_key=key, metric=ACCURACY, baseline=b, current=c,
                  threshold=float(tol_value) if tol_value is not None else None)
    if cur["verdict"] == "drift":
        if base.get("verdict") == "drift":
            return Verdict(kind="unchanged", rule="output drifts past the workload's tolerance, as in the baseline",
                           advice="this toggle's output already drifted in the baseline: fix it or widen the "
                                  "workload's tolerance", **common)
        why = cur.get("reason")
        return Verdict(kind="regression", rule="output drifts from the eager fp32 reference past the workload's "
                                               "tolerance (relative L2)" + (f": {why}" if why else ""), **common)
    if base.get("verdict") == "drift":
        return Verdict(kind="win", rule="output back within the workload's tolerance (drifted in the baseline)", **common)
    return Verdict(kind="unchanged", rule="output within the workload's tolerance", **common)


# The sections of the worker's profile pass (perfgate.worker.profiling.profile_pass) that, when they raise, record
# "SECTION: ExcType: message" under the case's profile["errors"] and drop their own figures while the case
# still ends ok, with the gated metrics each one's failure costs. The FLOP count runs on the reference the
# accuracy check builds, so a failed reference check costs it too.
PROFILE_SECTIONS: dict[str, tuple[str, ...]] = {
    "profiler window": ("aten_ops_per_step", "kernels_per_step", "memcpy_per_step", "memset_per_step",
                        "syncs_per_step", "cpu_bytes_allocated_per_step"),
    "flops": ("flops_per_step",),
    "accuracy": ("flops_per_step",),
    "memory sites": (),  # where a step allocates: read by a memory regression's report, never gated
}


def section_error(metric: str, errors: Sequence[Any]) -> str | None:
    """The first of a case's profile errors whose section measures ``metric`` (PROFILE_SECTIONS), else None."""
    for e in errors:
        section, sep, _ = str(e).partition(":")
        if sep and metric in PROFILE_SECTIONS.get(section.strip(), ()):
            return str(e)
    return None


def _lost_to_error(v: Verdict, errors: Sequence[Any]) -> Verdict:
    """A gated metric the baseline measured and the case lost now (``missing``) is a regression when the
    section of the profile pass that measures it recorded an error: the measurement broke, and a pull request
    that breaks the profiler must not pass by dropping every count it gates. Missing for any other reason
    (no profile pass ran, a compile time a warm cache does not measure) it stays ``missing``."""
    if v.kind != "missing":
        return v
    error = section_error(v.metric, errors)
    if error is None:
        return v
    return replace(v, kind="regression",
                   rule=f"measured in the baseline, not now: the measurement broke ({error[:200]})",
                   advice="the case's profile pass failed where it measures this metric (see the case's "
                          "profile errors in results.json): fix what makes it fail; the gate cannot vouch "
                          "for a metric it can no longer measure")


# ---------------------------------------------------------------- one case, one run

def _status_verdict(key: str, base: CaseResult | None, cur: CaseResult | None) -> Verdict | None:
    """The verdict on a case's status when it did not run ok on both sides; None when it did."""
    if cur is not None and cur.skipped_as_unchanged:  # `run --changed-since`: not run, and not gone either
        return Verdict(key, STATUS, "skipped", rule=(cur.message or "skipped: unchanged by this pull request")[:300],
                       advice="nothing this case's workload depends on changed; `perfgate run` without "
                              "--changed-since (or with --all) measures it")
    if cur is None:
        return Verdict(key, STATUS, "missing", rule="case in the baseline, not run now",
                       advice="run the full suite (or the same selection) to compare this case")
    if base is None:
        return Verdict(key, STATUS, "new", rule="case not in the baseline",
                       advice="`perfgate baseline update` adds it once the change is merged")
    if cur.status == STATUS_SKIPPED:
        if base.status == STATUS_OK:  # a case that stops running stops measuring: nothing it measured is judged
            return Verdict(key, STATUS, "newly-failing",
                           rule=f"ran in the baseline, skipped now: {(cur.message or '').strip()[:200]}",
                           advice="the case no longer runs here, so none of its regressions can be seen: if "
                                  "the change means it (a toggle this code no longer supports), update the "
                                  "baseline with the change; if the machine lost something (a CUDA device, a "
                                  "Python torch.compile supports), fix the runner")
        return Verdict(key, STATUS, "skipped", rule=f"skipped now: {(cur.message or '').strip()[:200]}")
    if cur.status == STATUS_FAILED:
        if base.status == STATUS_OK:
            return Verdict(key, STATUS, "newly-failing",
                           rule=f"ran in the baseline, fails now ({cur.failure_class}): "
                                f"{(cur.message or '').strip().splitlines()[-1:] or ''}"[:300])
        if base.status == STATUS_SKIPPED:  # never ran there: runnable now, and failing, is news
            return Verdict(key, STATUS, "newly-failing",
                           rule=(f"skipped in the baseline ({(base.message or '').strip()[:100]}), fails now "
                                 f"({cur.failure_class}): {(cur.message or '').strip().splitlines()[-1:] or ''}")[:300],
                           advice="the case can run here now and fails: fix it, or if it cannot run on this "
                                  "machine, make its toggle's requirements say so (a skip with a reason)")
        return Verdict(key, STATUS, "unchanged", rule=f"failed in the baseline and now ({cur.failure_class})")
    if base.status == STATUS_FAILED:
        return Verdict(key, STATUS, "fixed", rule=f"failed in the baseline ({base.failure_class}), runs now")
    if base.status == STATUS_SKIPPED:
        return Verdict(key, STATUS, "new", rule="skipped in the baseline, runs now")
    return None


# The confidence a case's step time is judged at, from the judging side's own sampling design
# (perfgate.judging.sequential.look_confidence); None: the gate's nominal confidence.
LookConfidence = Callable[[CaseResult], float]


def host_busy(kind: str, base: CaseResult, cur: CaseResult, gate: GateSettings) -> str | None:
    """Why an unpaired step-time ``kind`` (a regression or a win) cannot stand: either side's processes
    started timing on a host that was not quiet (perfgate.protocol.host_quiet); None otherwise."""
    if kind not in ("regression", "win"):
        return None
    return host_quiet.sides_busy(base.metadata.get("host"), cur.metadata.get("host"), gate.max_host_load)


def judge_case(key: str, base: CaseResult | None, cur: CaseResult | None, gate: GateSettings, *,
               paired: bool = False, calibration: dict[str, Any] | None = None,
               look_confidence: LookConfidence | None = None) -> list[Verdict]:
    """Every verdict of one case: its status, or its step time, accuracy and metrics when both ran ok.
    The step time is judged at ``look_confidence(cur)`` (the level of the sequential look that ends at
    the case's process count) or the gate's confidence; never at a level the results file states."""
    status = _status_verdict(key, base, cur)
    if status is not None:
        return [status]
    assert base is not None and cur is not None
    out: list[Verdict] = []
    threshold, source = gate.threshold_for(cur, key, calibration)
    # a case sampled until its comparison settled is judged at the confidence of its last look (its share
    # of the error rate, perfgate.judging.sequential), recomputed here from the judge's settings: the level the
    # case's metadata records was written by the measuring side, which may be the pull request's code
    confidence = look_confidence(cur) if look_confidence is not None else gate.confidence
    run_to_run, run_to_run_source = gate.run_to_run_term(cur, key, calibration, paired, base=base)
    unpaired, unpaired_source = (gate.run_to_run_term(cur, key, calibration, base=base) if paired
                                 else (run_to_run, run_to_run_source))
    # a process whose step time is 0 (a sample of 0 ns is valid JSON): its log is -inf, and the statistics
    # would come out NaN, "not significant", so `unchanged` at a ratio of inf; no ratio can be judged
    zero = [side for side, c in (("baseline", base), ("now", cur))
            if any(p.samples_ns and not p.step_time(gate.process_quantile) > 0 for p in c.processes)]
    change = None if zero else case_time_change(base, cur, gate, paired=paired, confidence=confidence,
                                                run_to_run=run_to_run, unpaired_run_to_run=unpaired)
    if change is not None and paired and not change.paired:
        run_to_run, run_to_run_source = unpaired, f"{unpaired_source}: the processes could not be paired"
    if zero:
        out.append(Verdict(key, STEP_TIME, "inconclusive",
                           rule=f"a step time of 0 {' and '.join(zero)} (a process whose samples are 0 ns): "
                                "no ratio can be judged",
                           advice="a timer that reads 0 is broken, or the unit of work is too small to time: "
                                  "check the run's results.json (and the baseline's) samples_ns"))
    elif change is None:
        out.append(Verdict(key, STEP_TIME, "missing", rule="no step-time samples on one side"))
    else:
        kind, rule, advice = judge_time(change, threshold, source)
        rule += f"; run-to-run {run_to_run * 100:g}% ({run_to_run_source})"
        if confidence != gate.confidence:
            rule += (f"; judged at {confidence * 100:.2f}% confidence (the sequential look at "
                     f"{plural(len(cur.processes), 'process', 'processes')})")
        sampling = cur.metadata.get("sampling")
        if kind == "inconclusive" and isinstance(sampling, dict):
            advice = budget_advice(change, threshold, sampling, gate, confidence) or advice
        busy = None if paired else host_busy(kind, base, cur, gate)
        if busy:
            kind, rule, advice = "inconclusive", f"host busy: {busy}; measured alone, a {kind} ({rule})", \
                "other processes took the host's CPUs or GPU while this case was timed: run it again on a quiet " \
                "host, or with `perfgate run --against` (lockstep pairs share the machine's moments)"
        out.append(Verdict(
            case_key=key, metric=STEP_TIME, kind=kind,
            baseline=change.base_s, current=change.head_s,
            ratio=change.ratio, ratio_low=change.low, ratio_high=change.high, p_value=change.p_value,
            threshold=threshold, rule=rule, advice=advice,
        ))
    errors = cur.profile.get("errors") if isinstance(cur.profile, dict) else None
    errors = errors if isinstance(errors, list) else []
    acc = judge_accuracy(key, base.accuracy, cur.accuracy, errors)
    if acc is not None:
        out.append(acc)
    for metric in [m for m in METRIC_KINDS if m in cur.metrics or m in base.metrics]:
        v = judge_metric(key, metric, base.metrics.get(metric), cur.metrics.get(metric), gate)
        if v is not None:
            out.append(_lost_to_error(v, errors))
    differs = spec_difference(base.spec, cur.spec)
    if differs:
        out = [_other_parameters(v, differs) for v in out]
    return out


def spec_difference(base: CaseSpec, cur: CaseSpec) -> str:
    """What of a case's spec differs between the baseline and now beyond its key (the size's parameters,
    the dtype): 'T=100 -> T=50, dtype float32 -> bfloat16'; '' when nothing does."""
    parts = []
    if base.params != cur.params:
        b, c = base.param_dict, cur.param_dict
        names = [k for k in dict.fromkeys([*b, *c]) if b.get(k, _ABSENT) != c.get(k, _ABSENT)]
        parts.append(", ".join(f"{k}={b.get(k, '(none)')} -> {k}={c.get(k, '(none)')}" for k in names))
    if base.dtype != cur.dtype:
        parts.append(f"dtype {base.dtype} -> {cur.dtype}")
    return ", ".join(parts)


_ABSENT = object()


def _other_parameters(v: Verdict, differs: str) -> Verdict:
    """A verdict of a case the baseline measured with other parameters (``spec_difference``): a win is no
    evidence that the code got faster (the problem may have shrunk), so it is ``inconclusive``; a regression
    stays one (it fails loudly; the baseline needs updating); every verdict's rule says what differs."""
    note = f"the baseline measured this case with other parameters ({differs})"
    if v.kind == "win":
        return replace(v, kind="inconclusive", rule=f"{v.rule}; but {note}: a win cannot be told from a smaller problem",
                       advice="the case's size parameters or dtype changed: `perfgate baseline update` once the "
                              "change is merged, or compare with `perfgate run --against REF`")
    if v.kind in ("regression", "unchanged", "inconclusive"):
        return replace(v, rule=f"{v.rule}; {note}")
    return v


def compare_runs(current: RunResult, baseline: RunResult, gate: GateSettings | None = None, *,
                 mode: str = "baseline", baseline_source: str | None = None,
                 calibration: dict[str, Any] | None = None, strict_env: bool = False,
                 look_confidence: LookConfidence | None = None) -> Comparison:
    """Judge every case of ``current`` against ``baseline``. ``mode="against"`` pairs processes;
    ``look_confidence``: as judge_case.

    Raises ConfigError when ``strict_env`` and the environments differ in torch, CUDA, driver, Python
    or hardware.
    """
    gate = gate or GateSettings()
    diff = environment_diff(baseline.environment, current.environment) if mode == "baseline" else {}
    warnings = []
    if diff:
        text = ", ".join(f"{k} {format_environment(b)} -> {format_environment(c)}" for k, (b, c) in diff.items())
        if strict_env:
            raise ConfigError(f"{baseline_source or 'baseline'}: environment differs from this run ({text}); "
                              "refusing with --strict-env; update the baseline on this machine")
        warnings.append(f"WARNING: the baseline was measured in a different environment ({text}); "
                        "time verdicts may reflect the environment, not the change")
    others = [(c.key, spec_difference(b.spec, c.spec)) for c in current.cases
              for b in [baseline.case(c.key)] if b is not None]
    others = [(k, d) for k, d in others if d]
    if others:
        warnings.append("WARNING: the baseline measured " + "; ".join(f"{k} with other parameters ({d})" for k, d in others)
                        + ": its wins are inconclusive; update the baseline once the change is merged")
    keys = [c.key for c in current.cases] + [c.key for c in baseline.cases if current.case(c.key) is None]
    # a run of the whole suite (no selection, filter or shard) that lacks a case the baseline of the same suite
    # ran ok: a change dropped the case from the suite, and none of its regressions can be seen any more
    whole_suite = mode == "baseline" and bool(current.suite) and current.suite == baseline.suite \
        and not current.part_of_suite
    verdicts: list[Verdict] = []
    for key in keys:
        base_case = baseline.case(key)
        if whole_suite and current.case(key) is None and base_case is not None and base_case.status == STATUS_OK:
            verdicts.append(_gone_from_suite(key, current.suite))
            continue
        verdicts.extend(judge_case(key, baseline.case(key), current.case(key), gate,
                                   paired=(mode == "against"), calibration=calibration,
                                   look_confidence=look_confidence))
    return Comparison(verdicts=verdicts, mode=mode, baseline_source=baseline_source, baseline=baseline,
                      environment_diff=diff, warnings=warnings)


def _gone_from_suite(key: str, suite: str | None) -> Verdict:
    """The verdict of a case that ran ok in the baseline and that a run of the whole suite lacks:
    ``newly-failing``, as a case that ran in the baseline and is skipped now."""
    return Verdict(key, STATUS, "newly-failing",
                   rule=f"in the baseline, not in suite {suite!r} now: the run covered the whole suite, so a "
                        "change dropped the case (a toggle set or workload taken out of the suite, a size or "
                        "variant removed from the workload, its workload file removed)",
                   advice="none of the case's regressions can be seen any more: if the change means it, update "
                          "the baseline with the change (`perfgate baseline update` from a run of the whole "
                          "suite drops the case); if not, restore the case")


def acknowledged(comparison: Comparison, settings: Settings | None, today: date | None = None) -> Comparison:
    """``comparison`` with ``settings``' ``[[tool.perfgate.acknowledge]]`` applied (perfgate.model.acknowledge.apply):
    a regression an entry in force covers becomes ``acknowledged``. Applied last, to the verdicts that decide
    the gate (after the re-measure and lockstep settling). ``today``: the day expiry is judged on, by
    default acknowledge.today() ($PERFGATE_TODAY or the local date)."""
    if settings is None or not settings.acknowledgements:
        return comparison
    if today is None:
        try:
            today = acknowledge.today()
        except acknowledge.TodayError as exc:
            raise ConfigError(str(exc)) from None
    return acknowledge.apply(comparison, settings.acknowledgements, today)


Remeasure = Callable[[str], "tuple[CaseResult, CaseResult | None] | None"]

# Verdicts of a re-measure or a lockstep pair that carry no step time (a side skipped, no samples): they
# neither confirm nor contradict the verdict being checked, which therefore stands.
NO_TIME = ("skipped", "missing", "new")


def gives_no_time(v: Verdict) -> bool:
    """Does this verdict of a re-measure or a lockstep pair carry no step time? Those of NO_TIME, and a step
    time judged with no ratio at all (``inconclusive`` at "a step time of 0": samples of 0 ns): such a
    measurement is broken, and a broken second measurement must never soften the first."""
    return v.kind in NO_TIME or (v.metric == STEP_TIME and v.kind == "inconclusive" and v.ratio is None)


def base_failed(base: CaseResult | None) -> bool:
    """Did the base side of a re-measure fail? Its verdict (``fixed``, or ``unchanged`` when the head failed
    too) says nothing about the head's time: a base worker that timed out or crashed on a loaded runner
    must never clear a regression."""
    return base is not None and base.status == STATUS_FAILED


def _ratio_text(v: Verdict) -> str:
    """A step-time verdict's ratio and CI as rule texts quote it: '1.106x [1.079, 1.131]'."""
    if v.ratio is None:
        return "no ratio"
    ci = f" [{v.ratio_low:.3f}, {v.ratio_high:.3f}]" if v.ratio_low is not None and v.ratio_high is not None else ""
    return f"{v.ratio:.3f}x{ci}"


def confirm_regressions(comparison: Comparison, current: RunResult, gate: GateSettings, remeasure: Remeasure,
                        calibration: dict[str, Any] | None = None,
                        look_confidence: LookConfidence | None = None,
                        kinds: tuple[str, ...] = ("regression",)) -> tuple[Comparison, list[CaseResult]]:
    """Re-measure each case whose step-time verdict is one of ``kinds`` (a regression; against a stored
    baseline, a win too): it fails the gate only if it regresses again, and is a win only if it is again.

    ``remeasure(key)`` runs the case again and returns (new head case, new base case or None to keep the
    stored baseline's). Returns the updated comparison and the re-measured head cases.
    """
    assert comparison.baseline is not None
    remeasured: list[CaseResult] = []
    verdicts = list(comparison.verdicts)
    for i, v in enumerate(verdicts):
        if v.metric != STEP_TIME or v.kind not in kinds:
            continue
        again = remeasure(v.case_key)
        if again is None:
            continue
        head, base = again
        remeasured.append(head)
        base = base or comparison.baseline.case(v.case_key)
        new = [n for n in judge_case(v.case_key, base, head, gate, paired=comparison.mode == "against",
                                     calibration=calibration, look_confidence=look_confidence)
               if n.metric in (STEP_TIME, STATUS)]
        if not new:
            continue
        n = new[0]
        first = f"first measurement {_ratio_text(v)}"
        was = "regressed" if v.kind == "regression" else "was faster"
        # skipped, no samples, 0 ns, or a base side that failed (`fixed`, or failing on both sides): the head's
        # time was never judged against a base, so nothing confirms or contradicts the first measurement
        if gives_no_time(n) or base_failed(base):
            if v.kind == "regression":  # fail safe: the regression stands
                verdicts[i] = replace(v, rule=f"{v.rule}; the re-measure gave no step time to confirm it "
                                              f"({n.kind}: {n.rule}), so the {first} stands")
            else:  # a win stays a win only if it repeats
                verdicts[i] = replace(v, kind="inconclusive",
                                      rule=f"the {first} was faster; the re-measure gave no step time to confirm "
                                           f"it ({n.kind}: {n.rule})")
            continue
        if n.kind == "newly-failing":  # the re-measure failed, or could not run the case at all
            verdicts[i] = replace(n, rule=f"{n.rule} (in the re-measure; the {first} {was})")
        elif n.kind == v.kind:
            verdicts[i] = replace(n, rule=f"{n.rule}; confirmed by a re-measure ({first})")
        elif n.kind in ("regression", "win"):  # two measurements that contradict each other decide nothing
            verdicts[i] = replace(n, kind="inconclusive",
                                  rule=f"the {first} {was}, the re-measure "
                                       f"{'was faster' if n.kind == 'win' else 'regressed'} ({n.rule})",
                                  advice="the two measurements disagree: the machine's speed changed while the "
                                         "case ran; `perfgate run --against` measures base and head in lockstep")
        else:
            one_off = ("a one-off slowdown: the machine was busy" if v.kind == "regression"
                       else "a one-off speed-up: the machine ran this case faster for a while")
            verdicts[i] = replace(n, rule=f"{n.rule}; the {first} {was}, the re-measure did not",
                                  advice=n.advice or f"{one_off}, or the change is near the threshold; "
                                                     "`perfgate calibrate` measures the noise")
    return replace(comparison, verdicts=verdicts), remeasured


LOCKSTEP_SETTLES = ("regression", "win", "inconclusive")  # stored step-time verdicts lockstep pairs settle


def settle_in_lockstep(comparison: Comparison, measure: Remeasure, gate: GateSettings, *, commit: str,
                       calibration: dict[str, Any] | None = None, look_confidence: LookConfidence | None = None
                       ) -> tuple[Comparison, list[tuple[CaseResult, CaseResult]], set[str]]:
    """Judge again, paired, each stored step-time verdict in LOCKSTEP_SETTLES: ``measure(key)`` runs the case
    in lockstep pairs against the baseline's ``commit`` and returns (head, base), or None where it cannot
    (the stored verdict stands, for the re-measure to confirm). The paired verdict replaces the stored one,
    whose figures its rule keeps. Returns the updated comparison, the pairs measured and the keys settled."""
    verdicts = list(comparison.verdicts)
    pairs: list[tuple[CaseResult, CaseResult]] = []
    settled: set[str] = set()
    for i, v in enumerate(verdicts):
        if v.metric != STEP_TIME or v.kind not in LOCKSTEP_SETTLES:
            continue
        got = measure(v.case_key)
        if got is None or got[1] is None:
            continue
        head, base = got
        pairs.append((head, base))  # type: ignore[arg-type]  # got[1] is not None, checked above
        new = [n for n in judge_case(v.case_key, base, head, gate, paired=True, calibration=calibration,
                                     look_confidence=look_confidence) if n.metric == STEP_TIME]
        if new and not gives_no_time(new[0]):  # else a side failed, skipped, had no samples or 0 ns: the stored verdict stands
            n = new[0]
            verdicts[i] = replace(n, rule=f"{n.rule}; settled in lockstep against the baseline's commit "
                                         f"{commit[:12]} (the stored comparison: {v.kind} at {_ratio_text(v)})")
            settled.add(v.case_key)
    return replace(comparison, verdicts=verdicts), pairs, settled


def sort_key(v: Verdict) -> tuple[int, str, str]:
    """Order for people: what fails the gate first, then wins, then the rest."""
    order = {"newly-failing": 0, "regression": 1, "acknowledged": 2, "win": 3, "fixed": 4, "inconclusive": 5,
             "new": 6, "missing": 7, "skipped": 8, "unchanged": 9}
    return order.get(v.kind, 10), v.case_key, v.metric
