"""``[tool.perfgate.gate]``: the gate's knobs (GateSettings), validated from the project's configuration.
No torch. docs/configuration.md lists every key; docs/gate.md says what each default buys."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from perfgate.judging.runspread import calibrated_floor, unpaired_term
from perfgate.model.config import ConfigError, Settings
from perfgate.model.results import (
    METRIC_KINDS,
    CaseResult,
)
from perfgate.protocol import host_quiet
from perfgate.util.stats import (
    PROCESS_QUANTILE,
    RUN_TO_RUN_CPU,
    RUN_TO_RUN_CUDA,
    RUN_TO_RUN_MAX,
)


@dataclass(frozen=True)
class GateSettings:
    """The gate's knobs, from ``[tool.perfgate.gate]``; every default is documented in docs/gate.md."""

    threshold: float = 0.05  # relative step-time change that counts as large
    confidence: float = 0.95  # of the ratio's CI; alpha of the rank test is 1 - confidence
    # relative sd of the step-time ratio between repeated runs of the same change, which one run's samples
    # cannot see (the machine's state drifts between runs); added to the ratio's CI (docs/gate.md). 8% on
    # CPU until `perfgate calibrate --write` (or a pooled baseline) measures it: cases of small workloads on a
    # shared 2-vCPU machine moved by 6-14% (sd) between runs, and unchanged code's unpaired A/A comparisons
    # alarmed in 1 of 16 to 1 of 28 at 6%, 1 of 22 to 1 of 60 at 8%; a term narrower than the moves calls
    # them regressions
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
    # the run: a few processes that happen to agree look settled. Its looks replayed on real runs
    # (benchmarks/rejudge_mechanisms.py --floors): 42 A/A alarms of 602 with it, 52 without (docs/lab-record.md)
    unpaired_min_processes: int = 8
    # an unpaired comparison can set aside each side's slowest minority of processes (``set_aside_slowed``) and
    # compare sides that fall into performance modes mode by mode (``compare_modes``). Both off by default:
    # judged again on real runs of six workloads (benchmarks/rejudge_mechanisms.py, docs/lab-record.md), they
    # widened the spread of unchanged code's ratio (sd 19% against 13% with both off), and gave more A/A
    # alarms (61 against 41 of 672) and more wrong directions (27 against 10) while catching less. True
    # still helps where a machine's processes fall into modes (the C allocator's before it was made steady)
    set_aside_slowed: bool = False
    compare_modes: bool = False
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

