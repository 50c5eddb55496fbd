"""`perfgate calibrate`: how noisy is this machine, case by case, and what can the gate resolve here?

Each case runs ``rounds`` times with the configured number of worker processes (A/A: the same code).
From every process's samples it reports the noise *within* a process (robust CV of its samples) and
*between* processes (robust spread of the per-process step times the gate compares, across all rounds), the A/A verdicts the
gate gives between consecutive rounds (a false alarm shows here), and the smallest step-time change the
gate can detect with the configured sample budget. ``calibrate`` runs the whole command: the machine's
ceilings (perfgate.worker.ceilings, in a worker), the rounds (perfgate.running.runner), the figures printed, and with
``--write`` the ceilings and each case's noise figures stored. No torch.
"""

from __future__ import annotations

import functools
import json
import math
import statistics
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from perfgate.gating import gate as gate_mod
from perfgate.judging import baselines, roofline, runspread
from perfgate.judging.compare import case_time_change, judge_time
from perfgate.judging.gate_settings import GateSettings, gate_settings
from perfgate.judging.sequential import with_sampling
from perfgate.model.config import ConfigError, Settings
from perfgate.model.results import STATUS_OK, CaseResult, CaseSpec
from perfgate.protocol import layout
from perfgate.reports.console import echo
from perfgate.running import environment, run_folders, runner, workers
from perfgate.running.plan import Catalog, plan_cases
from perfgate.util.formatting import plural
from perfgate.util.stats import quantile
from perfgate.util.validation import SchemaError, check

Z_POWER = 0.8416  # one-sided z of 80% power
ROUNDS = 3  # A/A rounds a case gets without --write: the noise figures, printed
# ... and with --write, whose run-to-run term every later unpaired gate of the case uses: from 2 ratios its
# estimate of a true 1.41% landed at the 0.5% floor in one calibration in five; 9 ratios give the upper
# bound 9 degrees of freedom (tests/test_calibrate.py simulates it)
WRITE_ROUNDS = 10
MIN_WRITE_ROUNDS = 8


def run_to_run_bound(rounds: list[CaseResult], quantile: float) -> runspread.Spread | None:
    """The per-run spread of a case from its A/A rounds: the sd of the rounds' levels (each round's mean log
    per-process step time, ``runspread.case_levels``) less what each round's own sampling explains, with its
    upper confidence bound (``runspread.level_spread``); None below 2 rounds."""
    levels, sampling_var = runspread.case_levels(rounds, quantile)
    return runspread.level_spread(levels, sampling_var)


def run_rounds(rounds: int, work: Path, run_round: Callable[[Path], CaseResult]) -> list[CaseResult]:
    """``rounds`` A/A rounds of one case, ``run_round(folder)`` each. Every round draws its own layouts
    (perfgate.protocol.layout) and runs in a folder of its own, as a separate run would, so the ratios between
    rounds see what moves whole runs, layouts included."""
    done = []
    for index in range(rounds):
        layout.reseed(index)
        done.append(run_round(round_folder(work, index)))
    return done


def calibrate_folder(settings: Settings) -> Path:
    """Where the A/A rounds run: one folder per round below it (``round_folder``)."""
    return Path(settings.reports_dir) / ".calibrate"


def round_folder(work: Path, index: int) -> Path:
    """Round ``index``'s folder, its name another length each round: a run folder's name moves where a
    worker's allocations land (docs/gate.md), and a user's runs do not share one."""
    return work / f"round-{index}-{'x' * (7 * index % 23)}"


def _z(p: float) -> float:
    return statistics.NormalDist().inv_cdf(p)


def robust_cv(values: list[float]) -> float:
    """IQR / 1.349 / median: the coefficient of variation a normal distribution with this IQR would have."""
    if len(values) < 2:
        return 0.0
    xs = sorted(values)
    med = statistics.median(xs)
    return (quantile(xs, 0.75) - quantile(xs, 0.25)) / 1.349 / med if med > 0 else 0.0


def between_process_sd(times: list[float]) -> float:
    """Robust sd of log per-process step times (MAD x 1.4826, or the plain sd for fewer than 5 processes)."""
    if len(times) < 2:
        return 0.0
    logs = [math.log(m) for m in times]
    if len(logs) < 5:
        return statistics.stdev(logs)
    c = statistics.median(logs)
    return 1.4826 * statistics.median(abs(x - c) for x in logs)


def smallest_detectable(sd_between: float, processes: int, confidence: float, run_to_run: float = 0.0) -> float:
    """Smallest relative step-time change detected with 80% power comparing ``processes`` per side.

    Normal approximation on log per-process step times, with the gate's run-to-run spread (which more
    processes cannot shrink) added in quadrature: (z_{1-alpha/2} + z_{0.8}) * sqrt(2 sd^2 / n + rr^2).
    """
    if processes < 1:
        return math.inf
    spread = math.hypot(sd_between * math.sqrt(2 / processes), math.log1p(run_to_run))
    return math.exp((_z(1 - (1 - confidence) / 2) + Z_POWER) * spread) - 1


def processes_needed(sd_between: float, threshold: float, confidence: float, run_to_run: float = 0.0) -> int | None:
    """Processes per side for the smallest detectable change to reach ``threshold``; None when the
    run-to-run spread alone keeps it above the threshold (no number of processes is enough)."""
    room = (math.log1p(threshold) / (_z(1 - (1 - confidence) / 2) + Z_POWER)) ** 2 - math.log1p(run_to_run) ** 2
    if room <= 0:
        return None
    return max(2, math.ceil(2 * sd_between ** 2 / room))


@dataclass
class CaseNoise:
    key: str
    rounds: list[CaseResult]
    within_cv: float
    between_sd: float
    smallest_change: float
    processes: int
    threshold: float
    aa_verdicts: list[str]
    needed_processes: int | None
    seconds_per_process: float = 0.0  # wall seconds one worker process of this case takes here
    aa_ratios: list[float] = field(default_factory=list)  # step-time ratio of each round to the one before
    run_to_run: float = 0.0  # the gate's run-to-run term, to compare the rounds' spread with
    spread: runspread.Spread | None = None  # the per-run spread the rounds show (run_to_run_bound)

    @property
    def round_to_round(self) -> float | None:
        """How far consecutive rounds' step times moved apart: the RMS of the A/A log ratios, as a relative
        figure. Under A/A each ratio's expected log is 0, so this is their spread; it holds the rounds'
        sampling noise as well as the run-to-run drift the gate's ``run_to_run`` stands for, and with
        three rounds it rests on two ratios: a rough upper figure, not a measurement of the term alone."""
        if not self.aa_ratios:
            return None
        return math.expm1(math.sqrt(statistics.fmean(math.log(r) ** 2 for r in self.aa_ratios)))

    @property
    def run_to_run_spread(self) -> runspread.Spread | None:
        """The per-run spread the rounds measure (``run_to_run_bound``), or None below 2 rounds."""
        return self.spread if self.aa_ratios else None

    @property
    def run_to_run_estimate(self) -> float | None:
        """The run-to-run term measured for this case (a ratio of two single runs), as a point estimate:
        printed, never used by the gate (``run_to_run_upper``)."""
        spread = self.run_to_run_spread
        return None if spread is None else max(runspread.ratio_term(spread.estimate), GateSettings.run_to_run_paired)

    @property
    def run_to_run_upper(self) -> float | None:
        """What ``--write`` stores and the gate adds to this case's unpaired comparisons: the one-sided
        upper confidence bound of the term, never below the paired term (``GateSettings.run_to_run_paired``)."""
        spread = self.run_to_run_spread
        return None if spread is None else max(runspread.ratio_term(spread.upper), GateSettings.run_to_run_paired)

    @property
    def needed_seconds(self) -> float | None:
        """About how long the processes needed for the threshold take, per side."""
        return None if self.needed_processes is None else self.needed_processes * self.seconds_per_process

    @property
    def too_noisy(self) -> bool:
        return self.smallest_change > self.threshold

    def noise_floor(self) -> float:
        """What --write stores as the case's noise figure: the smallest detectable change, rounded up to
        0.5%. The gate judges with the wider of it and the threshold configured when it judges
        (``GateSettings.threshold_for``); no threshold is frozen in the baseline."""
        return round(math.ceil(self.smallest_change * 200) / 200, 4)

    def to_json(self) -> dict[str, Any]:
        spread = self.run_to_run_spread
        upper = self.run_to_run_upper
        return {
            "noise_floor": self.noise_floor(),
            "within_process_cv": round(self.within_cv, 5),
            "between_process_sd": round(self.between_sd, 5),
            "smallest_detectable_change": round(self.smallest_change, 5),
            "processes": self.processes,
            "needed_processes": self.needed_processes,
            "seconds_per_process": round(self.seconds_per_process, 3),
            "rounds": len(self.rounds),
            "aa_verdicts": self.aa_verdicts,
            "aa_ratios": [round(r, 5) for r in self.aa_ratios],
            # what the gate adds to unpaired comparisons of this case (GateSettings.run_to_run_term): the
            # upper confidence bound, with the per-run spread it comes from
            "run_to_run": None if upper is None else round(upper, 5),
            "run_to_run_estimate": None if self.run_to_run_estimate is None else round(self.run_to_run_estimate, 5),
            "run_spread": None if spread is None else spread.to_json(),
            "measured_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        }


def timed(round_: CaseResult, gate: GateSettings) -> bool:
    """Whether an A/A round gives step times to judge: it ran ok, took samples, and no process's step time is
    0 (samples of 0 ns: no ratio, no log, can be taken of it; the gate says so too, compare.judge_case)."""
    sampled = [p for p in round_.processes if p.samples_ns]
    return round_.status == STATUS_OK and bool(sampled) and all(p.step_time(gate.process_quantile) > 0 for p in sampled)


def analyse(key: str, rounds: list[CaseResult], gate: GateSettings, threshold: float, processes: int) -> CaseNoise | None:
    """Noise figures of one case from its A/A rounds; None when no round ran ok with step times to judge."""
    ok = [r for r in rounds if timed(r, gate)]
    if not ok:
        return None
    procs = [p for r in ok for p in r.processes if p.samples_ns]
    within = statistics.median(robust_cv(p.step_times_s) for p in procs)
    sd = between_process_sd([p.step_time(gate.process_quantile) for p in procs])
    verdicts, ratios = [], []
    for a, b in zip(ok, ok[1:], strict=False):
        change = case_time_change(a, b, gate)
        if change is not None:
            verdicts.append(judge_time(change, threshold, "threshold")[0])
            ratios.append(change.ratio)
    seconds = sum(r.duration_s for r in ok) / max(1, sum(len(r.processes) for r in ok))
    noise = CaseNoise(key=key, rounds=ok, within_cv=within, between_sd=sd, smallest_change=0.0, processes=processes,
                      threshold=threshold, aa_verdicts=verdicts, needed_processes=None, seconds_per_process=seconds,
                      aa_ratios=ratios, run_to_run=gate.run_to_run,
                      spread=run_to_run_bound(ok, gate.process_quantile))
    # the term the gate will add for this case once --write stores it: the one measured here, else the default
    term = gate.run_to_run if noise.run_to_run_upper is None else noise.run_to_run_upper
    needed = processes_needed(sd, threshold, gate.confidence, term)
    if needed is not None:  # an unpaired gate settles no case before this many processes, however quiet
        needed = max(needed, gate.unpaired_min_processes)
    return replace(noise, smallest_change=smallest_detectable(sd, processes, gate.confidence, term),
                   needed_processes=needed, run_to_run=term)


def report_lines(noise: CaseNoise) -> list[str]:
    taken = ", ".join(str(len(r.processes)) for r in noise.rounds)
    lines = [
        f"{noise.key}: within a process {noise.within_cv * 100:.1f}% (robust CV), between processes "
        f"{noise.between_sd * 100:.1f}% (sd of per-process step times, {sum(len(r.processes) for r in noise.rounds)} "
        f"processes; per round {taken}, {noise.seconds_per_process:.1f} s each)",
        f"    smallest detectable change with {noise.processes} process(es) per side: "
        f"{noise.smallest_change * 100:.1f}% (threshold {noise.threshold * 100:g}%); "
        f"A/A verdicts between rounds: {', '.join(noise.aa_verdicts) or '-'}",
    ]
    if noise.round_to_round is not None:
        lines.append(f"    A/A ratios between rounds: {', '.join(f'{r:.3f}x' for r in noise.aa_ratios)} (RMS "
                     f"{noise.round_to_round * 100:.1f}%, sampling noise included); run-to-run term "
                     f"{(noise.run_to_run_estimate or 0) * 100:.1f}%, at most {noise.run_to_run * 100:.1f}% "
                     f"({noise.run_to_run_spread.confidence * 100:g}% upper bound from "  # type: ignore[union-attr]
                     f"{plural(noise.run_to_run_spread.dof + 1, 'round')}): the bound is what the figures here assume and what "  # type: ignore[union-attr]
                     "this case's unpaired comparisons add once --write stores it")
    if noise.needed_processes is not None:
        lines.append(f"    a {noise.threshold * 100:g}% threshold needs about {plural(noise.needed_processes, 'process', 'processes')} a side "
                     f"here (~{noise.needed_seconds:.0f} s of measuring per side, twice that with --against)")
    if noise.too_noisy:
        lines.append(
            f"    TOO NOISY for a {noise.threshold * 100:g}% threshold on this runner with {noise.processes} "
            "process(es) a side: raise [tool.perfgate.gate] max_processes"
            + (f" to {noise.needed_processes} (or more) and max_case_s to match, " if noise.needed_processes else
               " (no number of processes is enough: the gate's run-to-run spread alone is too large), ")
            + f"or use `perfgate run --against REF`; a stored comparison judges it at {noise.noise_floor() * 100:.1f}% "
            + ("at least (--write stores this noise floor)" if unstorable(noise) is None
               else "at least (too wide for a baseline: --write leaves this case out)"))
    return lines


@dataclass(frozen=True)
class CalibrateOptions:
    """`perfgate calibrate`'s choices as the command line parsed them (perfgate.cli declares them)."""

    suite: str | None = None
    workloads: tuple[str, ...] = ()
    toggles: tuple[str, ...] = ()
    rounds: int | None = None  # ROUNDS, or WRITE_ROUNDS with write
    processes: int | None = None
    samples: int | None = None
    write: bool = False
    baseline_file: str | None = None
    ceilings: bool = True
    ceilings_only: bool = False


def calibrate(settings: Settings, options: CalibrateOptions) -> None:
    """`perfgate calibrate`: the machine's ceilings, then ``options.rounds`` A/A rounds of each case with
    their noise figures printed; with ``write``, the ceilings and each case's noise figures stored.
    Its rounds' fork servers end with it (perfgate used from Python lives on: workers.close_zygotes)."""
    try:
        _calibrate(settings, options)
    finally:
        workers.close_zygotes(under=calibrate_folder(settings))


def rounds_of(options: CalibrateOptions) -> int:
    """The A/A rounds per case: as asked, else ROUNDS (WRITE_ROUNDS with --write); ConfigError when --write
    is asked with fewer than MIN_WRITE_ROUNDS (its run-to-run term would rest on too few ratios)."""
    write = options.write and not options.ceilings_only
    rounds = options.rounds or (WRITE_ROUNDS if write else ROUNDS)
    if write and rounds < MIN_WRITE_ROUNDS:
        raise ConfigError(f"calibrate --write needs --rounds {MIN_WRITE_ROUNDS} or more (got {rounds}): the run-to-run "
                          f"term it stores rests on the ratios between rounds; leave --rounds out ({WRITE_ROUNDS})")
    return rounds


def _calibrate(settings: Settings, options: CalibrateOptions) -> None:
    rounds = rounds_of(options)  # a bad --rounds fails before any measuring
    settings = with_sampling(settings, processes=options.processes, samples=options.samples)
    gs = gate_settings(settings)
    suite = settings.suite(options.suite or settings.default_suite)
    # forked by the fork server the first round's workers then come from (workers.run_probe)
    probe = workers.run_probe(settings.workloads_dirs, settings.threads,
                              run_folders.run_work_dir(round_folder(calibrate_folder(settings), 0)))
    catalog = Catalog.from_probe(probe)
    cases = plan_cases(suite, catalog, options.workloads, options.toggles, None, None)
    if not cases:
        raise ConfigError(f"suite {suite.name!r} selects no cases")
    env = {**environment.host_environment(settings.root, settings.threads), **probe["environment"]}
    machine_key = environment.machine_key(env, cases[0].device)
    path = Path(options.baseline_file) if options.baseline_file else baselines.baseline_path(
        settings.baselines_dir, machine_key, suite.name)
    # fail early, before minutes of measuring and before the ceilings are written
    base = (check_target(baselines.load_baseline(path), machine_key, suite.name)
            if options.write and not options.ceilings_only else None)
    if options.ceilings or options.ceilings_only:  # the machine's roofline (perfgate/worker/ceilings.py, perfgate/judging/roofline.py)
        calibrate_ceilings(settings, env, machine_key, options.write)
        if options.ceilings_only:
            return
    results = measure_noise(settings, gs, cases, catalog, rounds)
    if base is not None:
        # read again: the rounds take minutes, and a `baseline update` meanwhile must not be reverted to what
        # the baseline held when they began
        with baselines.updating(path):
            base = check_target(baselines.load_baseline(path), machine_key, suite.name)
            stored = 0
            for key, noise in results.items():
                why = unstorable(noise)
                if why is None:
                    base.calibration[key] = noise.to_json()
                    stored += 1
                    continue
                kept = ("its calibration stored before stays" if key in base.calibration
                        else "the gate keeps the configured run-to-run term and threshold for it")
                echo(f"{key}: not stored: {why}; {kept}. Gate it with `perfgate run --against REF` (paired), "
                     "or calibrate again on a quieter runner")
            baselines.write_baseline(base, path)
        echo(f"stored the noise figures of {plural(stored, 'case')} in {path}")


def check_target(base: baselines.Baseline, machine_key: str, suite: str) -> baselines.Baseline:
    """``base``, the baseline ``--write`` stores into; ConfigError when it is another machine's or another
    suite's (a ``--baseline FILE``): the gate there would judge that machine's cases with this one's noise."""
    where = base.path or "the baseline"
    if base.machine_key and base.machine_key != machine_key:
        raise ConfigError(f"{where} is the baseline of machine {base.machine_key!r}, and this machine is "
                          f"{machine_key!r}: its calibration must be measured there; name this machine's baseline "
                          "with --baseline, or leave it out")
    if base.suite and base.suite != suite:
        raise ConfigError(f"{where} is the baseline of suite {base.suite!r}, and calibrate measured suite {suite!r}; "
                          f"name a baseline of suite {suite!r} with --baseline, or pass --suite {base.suite}")
    return base


def unstorable(noise: CaseNoise) -> str | None:
    """Why ``noise`` cannot be stored in a baseline (a figure past what a baseline may hold: a run-to-run term
    over stats.RUN_TO_RUN_MAX, a threshold over 10x), or None. Stored anyway, every later gate, compare and
    baseline update would refuse the whole file (exit 2)."""
    try:
        check(baselines.CalibrationDocument, noise.to_json(), noise.key)
    except SchemaError as exc:
        return str(exc).removeprefix(f"{noise.key}: ")
    return None


def measure_noise(settings: Settings, gs: GateSettings, cases: list[CaseSpec], catalog: Catalog,
                  rounds: int) -> dict[str, CaseNoise]:
    """``rounds`` A/A rounds of each case (under reports_dir/.calibrate), each case's figures printed as it
    ends; the noise of every case that ran, by key."""
    work = calibrate_folder(settings)
    per_side = gs.max_processes if gs.adaptive else settings.processes
    echo(f"perfgate calibrate: {len(cases)} case(s) x {rounds} A/A rounds, "
         + (f"processes added until each round's step time is within +/-{gs.plain_precision() * 100:g}% "
            f"(at most {gs.max_processes})" if gs.adaptive else f"{settings.processes} process(es) each"))
    sampler_for = gate_mod.sampler_factory(settings, "plain")
    results = {}
    for spec in cases:
        file = catalog.workloads[spec.workload]["file"]
        rounds_done = run_rounds(rounds, work, functools.partial(
            runner.run_case, spec, file, settings, sampler=sampler_for(spec)))
        threshold, _ = gs.threshold_for(rounds_done[0], spec.key)
        noise = analyse(spec.key, rounds_done, gs, threshold, per_side)
        if noise is None:
            statuses = sorted({r.status for r in rounds_done})
            why = ("no round gave step times to judge (no samples, or samples of 0 ns)" if statuses == [STATUS_OK]
                   else "/".join(statuses))
            echo(f"{spec.key}: {why}, nothing to calibrate")
            continue
        results[spec.key] = noise
        for line in report_lines(noise):
            echo(line)
    return results


def measure_ceilings(threads: int = 1, budget_s: float | None = None, timeout_s: float = 300) -> dict[str, Any]:
    """This machine's ceilings, measured by ``python -m perfgate.worker.ceilings`` in a worker subprocess (threads
    pinned as for a case; ``budget_s``: seconds of repeats per figure, the module's default without it);
    RuntimeError naming why it failed. No torch in this process: it never imports perfgate.worker.ceilings."""
    args = ["-m", "perfgate.worker.ceilings", "--threads", str(threads)]
    if budget_s is not None:
        args += ["--budget", str(budget_s)]
    try:
        proc = workers.run_worker_command(args, threads, timeout_s)
    except subprocess.TimeoutExpired as exc:
        raise RuntimeError(f"measuring the ceilings took longer than {timeout_s:g} s") from exc
    if proc.returncode != 0:
        tail = "\n".join(proc.stderr.strip().splitlines()[-3:])
        raise RuntimeError(f"measuring the ceilings failed (exit {proc.returncode}): {tail}")
    try:
        return json.loads(proc.stdout.strip().splitlines()[-1])
    except (json.JSONDecodeError, IndexError) as exc:
        raise RuntimeError(f"the ceilings worker printed no result: {proc.stdout[-300:]}") from exc


def calibrate_ceilings(settings: Settings, env: dict[str, Any], machine_key: str, write: bool) -> None:
    """Measure this machine's ceilings in a worker; print them; with ``write``, store ceilings.json.
    A measurement that fails is an infrastructure error (exit 3)."""
    try:
        measured = measure_ceilings(settings.threads)
    except RuntimeError as exc:
        raise workers.InfrastructureError(str(exc)) from exc
    for line in roofline.ceilings_lines(measured, env.get("device_name")):
        echo(line)
    if write:
        path = roofline.write_ceilings(roofline.ceilings_path(settings.baselines_dir, machine_key), measured)
        echo(f"stored the ceilings in {path}")
