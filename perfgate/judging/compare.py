"""The gate's rule: a run against a baseline (stored, or a base ref run in the same job) -> one Verdict
per case and metric. No torch. The step-time statistic is perfgate.judging.timechange's, the knobs
perfgate.judging.gate_settings', what settles a first verdict perfgate.judging.settle's; the verdict of a
step-time change is perfgate.judging.decision's. docs/gate.md explains every rule and default."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import date
from typing import Any

from perfgate.judging import decision
from perfgate.judging.gate_settings import GateSettings
from perfgate.judging.timechange import TimeChange, time_change
from perfgate.model import acknowledge, rule_text
from perfgate.model.comparison import Comparison, TimeFacts, Verdict
from perfgate.model.config import ConfigError, Settings
from perfgate.model.environment_keys import environment_diff
from perfgate.model.results import (
    METRIC_KINDS,
    STATUS_FAILED,
    STATUS_OK,
    STATUS_SKIPPED,
    CaseResult,
    CaseSpec,
    ProcessSamples,
    RunResult,
    higher_is_better,
)
from perfgate.protocol import host_quiet
from perfgate.util.formatting import format_environment, plural
from perfgate.util.stats import run_to_run_log

STEP_TIME = "step_time"
ACCURACY = "accuracy"
STATUS = "status"



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
    return replace(change, throttled="; ".join(notes))


ADVICE_NOISY = ("the noise is too large to settle a change of this size: run more worker processes "
                "(--processes), use `perfgate run --against REF` (paired, same job), or `perfgate calibrate`")


ADVICE_MODES = ("the worker processes run this code at distinct speeds (performance modes of their memory "
                "layouts, docs/gate.md): more processes sample the modes more evenly (--processes, "
                "[tool.perfgate.gate] max_processes), or use `perfgate run --against REF`, whose pairs share a layout")


ADVICE_BUSY = ("other processes took the host's CPUs or GPU while this case was timed: run it again on a quiet "
               "host, or with `perfgate run --against` (lockstep pairs share the machine's moments)")


def judge_time(change: TimeChange, threshold: float, threshold_source: str) -> tuple[str, str, str | None]:
    """(kind, rule in words, advice) for a step-time change against ``threshold`` (relative): the words are
    perfgate.model.rule_text.measured_rule's, of the facts ``time_facts`` finds."""
    kind, facts, advice = time_facts(change, threshold, threshold_source)
    verdict = Verdict("", STEP_TIME, kind, ratio=change.ratio, ratio_low=change.low, ratio_high=change.high,
                      threshold=threshold, facts=TimeFacts(**facts, confidence=math.nan, run_to_run=change.run_to_run))
    return kind, rule_text.measured_rule(verdict), advice


def time_facts(change: TimeChange, threshold: float, threshold_source: str) -> tuple[str, dict[str, Any], str | None]:
    """(kind, facts, advice) for a step-time change against ``threshold`` (relative): the decision
    (perfgate.judging.decision: a minimum effect and an equivalence margin) and the evidence it was applied
    to, as TimeFacts fields. Performance modes that left it inconclusive change the advice; a regression or
    a win with one process on a side is inconclusive (``one_process``): the between-process noise is unseen."""
    decided = decision.decide(change.ratio, change.low, change.high, change.significant, threshold,
                              decision.min_effect_share_for(change.paired))
    kind, advice = decided.kind, ADVICE_NOISY if decided.kind == "inconclusive" else None
    if kind == "inconclusive" and max(change.modes) > 1:
        # a multimodal side is kept whole and its spread widens the CI; the rule says why it did not settle
        advice = ADVICE_MODES
    one_process = kind in ("regression", "win") and not change.process_level
    if one_process:
        sides = [side for side, n in (("the baseline", change.n_base), ("this run", change.n_head)) if n < 2]
        advice = ("run at least 2 worker processes per case (--processes 2 or more) so the gate can see how much "
                  "processes differ")
        if "the baseline" in sides:  # more processes now cannot help: every later gate would stay inconclusive
            advice = ("the baseline holds one worker process for this case, so no run can settle a change against "
                      "it: update the baseline from a run with 2 or more processes per case"
                      + ("; and " + advice if "this run" in sides else ""))
        kind = "inconclusive"
    facts = dict(paired=change.paired, processes=(change.n_base, change.n_head), set_aside=change.set_aside,
                 modes=change.modes, decided=decided.decided, significant=change.significant,
                 min_effect=decided.min_effect, margin=decided.margin, test=change.test, throttled=change.throttled,
                 threshold_source=threshold_source, one_process=one_process)
    return kind, facts, advice


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
    floor = run_to_run_log(change.run_to_run, confidence)
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
        kind, facts, advice = time_facts(change, threshold, source)
        sampling = cur.metadata.get("sampling")
        if kind == "inconclusive" and isinstance(sampling, dict):
            advice = budget_advice(change, threshold, sampling, gate, confidence) or advice
        busy = None if paired else host_busy(kind, base, cur, gate)
        if busy:
            kind, advice = "inconclusive", ADVICE_BUSY
        look = len(cur.processes) if confidence != gate.confidence else None
        out.append(rule_text.worded(Verdict(
            case_key=key, metric=STEP_TIME, kind=kind,
            baseline=change.base_s, current=change.head_s,
            ratio=change.ratio, ratio_low=change.low, ratio_high=change.high, p_value=change.p_value,
            threshold=threshold, advice=advice,
            facts=TimeFacts(**facts, confidence=confidence, run_to_run=run_to_run, run_to_run_source=run_to_run_source,
                            host_busy=busy, look=look),
        )))
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
    if v.kind not in ("regression", "win", "unchanged", "inconclusive"):
        return v
    kind, advice = v.kind, v.advice
    if v.kind == "win":
        kind, advice = "inconclusive", ("the case's size parameters or dtype changed: `perfgate baseline update` "
                                        "once the change is merged, or compare with `perfgate run --against REF`")
    if v.facts is not None:
        return replace(rule_text.with_facts(v, kind, other_parameters=differs), advice=advice)
    return replace(v, kind=kind, rule=f"{v.rule}; {rule_text.other_parameters_note(differs, v.kind == 'win')}",
                   advice=advice)


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


def sort_key(v: Verdict) -> tuple[int, str, str]:
    """Order for people: what fails the gate first, then wins, then the rest."""
    order = {"newly-failing": 0, "regression": 1, "acknowledged": 2, "win": 3, "fixed": 4, "inconclusive": 5,
             "new": 6, "missing": 7, "skipped": 8, "unchanged": 9}
    return order.get(v.kind, 10), v.case_key, v.metric
