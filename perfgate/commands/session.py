"""A `perfgate run` from its parsed options to its exit code: the settings with the command line's
measuring options, the run folder, probe and plan, the run's record (environment, layout seed,
expectations, ceilings), the shard's cases, then the cases themselves (perfgate.running.runner), the reports
after every case, the history, and the gate (perfgate.gating.gate; `--against` too). Prints through
``console.echo``. No torch.

Errors leave as exceptions for the command line to turn into one line and an exit code: ConfigError (2),
workers.InfrastructureError (3, gate.NoEvidence included).
"""

from __future__ import annotations

import os
import re
import shutil
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any

from perfgate.gating import gate as gate_mod
from perfgate.judging import expect, roofline
from perfgate.judging.baselines import BASELINE_PRECISION_SHARE, Baseline
from perfgate.judging.sequential import sampling_plan, with_sampling
from perfgate.model.config import ConfigError, Settings, Suite
from perfgate.model.results import STATUS_OK, CaseSpec, RunResult, SchemaError, load_results
from perfgate.protocol import layout
from perfgate.reports import console
from perfgate.reports.console import echo
from perfgate.running import against, changes, environment, inherit, run_folders, runner, workers
from perfgate.running.github import publish_summary
from perfgate.running.plan import Catalog, Shard, parse_shard, plan_cases
from perfgate.util.storage import check_writable_dir

EXIT_OK = 0
EXIT_INFRA = 3
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")  # a variable --base-env may set


@dataclass(frozen=True)
class RunOptions:
    """`perfgate run`'s choices as the command line parsed them (perfgate.cli declares them and their help).
    Made, it has refused what needs no configuration to refuse: a bad --shard, and --baseline or
    --strict-env with --against."""

    suite: str | None = None
    workloads: tuple[str, ...] = ()
    toggles: tuple[str, ...] = ()
    size: str | None = None
    device: str | None = None
    out: str | None = None
    processes: int | None = None
    max_processes: int | None = None
    max_case_s: float | None = None
    threads: int | None = None
    timeout_s: float | None = None
    samples: int | None = None
    max_memory_mb: int | None = None
    device_memory_gb: float | None = None
    workloads_dirs: tuple[str, ...] = ()
    compile_cache: str | None = None
    shard: str | None = None
    shard_costs: str | None = None
    gate: bool = False
    baseline_file: str | None = None
    against_ref: str | None = None
    strict_env: bool = False
    history: bool = False
    baseline_precision: bool = False
    changed_since: str | None = None
    run_all: bool = False
    base_python: str | None = None
    base_env: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        self.shard_part()  # a bad --shard fails before the slow probe
        self.interpreter()  # a --base-python that is no program, a --base-env that is no NAME=VALUE
        if self.changed_since is not None and (not self.changed_since.strip() or self.changed_since.startswith("-")):
            raise ConfigError(f"--changed-since {self.changed_since!r}: not a git ref; give a branch, tag or commit "
                              "(e.g. --changed-since origin/main)")
        if self.changed_since and self.baseline_precision:
            raise ConfigError("--baseline-precision records a run to become a baseline, which holds every case: drop "
                              "--changed-since")
        if self.side_by_side and not self.against_ref:
            for given, name in ((self.baseline_file, "--baseline"), (self.strict_env, "--strict-env"),
                                (self.baseline_precision, "--baseline-precision")):
                if given:
                    raise ConfigError(f"{name} does not apply with --base-python/--base-env: the base side is "
                                      f"measured in this job under that environment, not read from a stored "
                                      f"baseline; drop {name}")
        if self.baseline_precision and (self.gate or self.against_ref):
            raise ConfigError("--baseline-precision records a run to become a baseline; it judges nothing: drop "
                              f"{'--gate' if self.gate else '--against'} (gate later runs against the baseline it makes)")
        # an empty REF (a CI variable unset: `--against "$BASE_REF"`) ran as no --against at all, gated on the
        # stored baseline; a REF like an option is no branch, tag or hash either (git refuses such names)
        if self.against_ref is not None and (not self.against_ref.strip() or self.against_ref.startswith("-")):
            raise ConfigError(f"--against {self.against_ref!r}: not a git ref; give a branch, tag or commit "
                              "(e.g. --against origin/main)")
        if self.against_ref:  # options of a stored baseline, which --against does not read: refused, not dropped
            for given, name in ((self.baseline_file, "--baseline"), (self.strict_env, "--strict-env")):
                if given:
                    raise ConfigError(f"{name} does not apply with --against {self.against_ref}: the base is "
                                      f"measured from REF in this job, on this machine, not read from a stored "
                                      f"baseline; drop {name} (or --against to gate on the stored baseline)")

    @property
    def side_by_side(self) -> bool:
        """Base and head measured in this job: --against REF, or the base side under another environment."""
        return bool(self.against_ref or self.base_python or self.base_env)

    def interpreter(self) -> inherit.Interpreter | None:
        """The base side's interpreter and variables (--base-python, --base-env), or None: this one's.
        ConfigError for a path that is no executable file, or a variable not given as NAME=VALUE."""
        if not (self.base_python or self.base_env):
            return None
        python = ""
        if self.base_python is not None:
            path = Path(self.base_python).expanduser().absolute()  # not resolved: a venv's python is a link
            if not path.is_file() or not os.access(path, os.X_OK):
                raise ConfigError(f"--base-python {self.base_python}: not an executable file; give the Python of "
                                  "the environment the base side runs in (e.g. .venv-base/bin/python)")
            python = str(path)
        env = []
        for item in self.base_env:
            name, eq, value = item.partition("=")
            if not eq or not ENV_NAME.fullmatch(name):
                raise ConfigError(f"--base-env {item!r}: expected NAME=VALUE (NAME of letters, digits and "
                                  "underscores, not starting with a digit), e.g. --base-env TORCH_CUDNN_V8_API_DISABLED=1")
            env.append((name, value))
        return inherit.Interpreter(python, tuple(env))

    def shard_part(self) -> Shard | None:
        return parse_shard(self.shard) if self.shard else None

    def selection(self) -> str | None:
        """What ran, in words, when it was not the suite as configured (RunResult.what_ran); else None."""
        if self.suite is not None or not (self.workloads or self.toggles or self.size):
            return None
        return "; ".join(f"{label} {', '.join(chosen)}" for label, chosen in
                         (("workloads", self.workloads), ("size", (self.size,) if self.size else ()),
                          ("toggles", self.toggles)) if chosen)

    def filters(self) -> str | None:
        """The command line's narrowing of the suite's cases (-w, -t, --size, --device) in words, or None."""
        chosen = (("workloads", self.workloads), ("size", (self.size,) if self.size else ()),
                  ("toggles", self.toggles), ("device", (self.device,) if self.device else ()))
        return "; ".join(f"{label} {', '.join(c)}" for label, c in chosen if c) or None

    @property
    def stored_gate(self) -> bool:
        """Compared with a stored baseline (not --against)?"""
        return (self.gate or bool(self.baseline_file)) and not self.side_by_side


def run_settings(settings: Settings, options: RunOptions) -> Settings:
    """``settings`` with the run's command-line overrides; ConfigError for a --workloads-dir that is none."""
    for d in options.workloads_dirs:
        if not Path(d).is_dir():
            raise ConfigError(f"--workloads-dir {d} is not a directory")
    settings = settings.with_overrides(
        threads=options.threads, timeout_s=options.timeout_s, max_memory_mb=options.max_memory_mb,
        device_memory_gb=options.device_memory_gb,
        workloads_dirs=(*settings.workloads_dirs, *(Path(d).resolve() for d in options.workloads_dirs))
        if options.workloads_dirs else None,
        compile_cache=Path(options.compile_cache).resolve() if options.compile_cache else None,
    )
    return with_sampling(settings, processes=options.processes, samples=options.samples,
                         max_processes=options.max_processes, max_case_s=options.max_case_s)


def run_folder(settings: Settings, options: RunOptions, suite: Suite) -> tuple[Path, list[Path]]:
    """The run's folder and the folders this run creates for it (the run's, then each missing parent up),
    checked writable (with the compile cache) before the probe and any case: fail fast. Without ``--out``
    the run's folder is reserved (created atomically, run_folders.unique_run_dir): a second run started in the
    same second into the same reports folder gets a folder of its own, never this one."""
    run_dir = Path(options.out).resolve() if options.out else settings.reports_dir
    created = []
    missing = run_dir
    while not missing.exists() and missing.parent != missing:
        created.append(missing)
        missing = missing.parent
    problem = check_writable_dir(run_dir)  # --out, or the reports folder the run's own is reserved in
    if problem is None and not options.out:
        run_id = run_folders.new_run_id(suite.name)
        try:
            run_dir = run_folders.unique_run_dir(settings.reports_dir, run_id, reserve=True)
            created.insert(0, run_dir)
            problem = check_writable_dir(run_dir)
        except OSError as exc:
            problem = f"output directory {settings.reports_dir / run_id} is not writable: {exc.strerror or exc}"
    if problem is None and settings.compile_cache:
        problem = check_writable_dir(settings.compile_cache)
        problem = problem and problem.replace("output directory", "compile cache", 1)
    if problem:
        raise ConfigError(problem)
    return run_dir, created


@contextmanager
def removed_on_error(run_dir: Path, created: list[Path]) -> Iterator[None]:
    """Leave no empty run folder behind a usage error: remove ``run_dir`` if this run created it, and each
    parent it created (a first run's reports/) that is empty again."""
    try:
        yield
    except BaseException:
        if created:
            shutil.rmtree(run_dir, ignore_errors=True)
            for parent in created[1:]:
                try:
                    parent.rmdir()
                except OSError:  # another run put something there meanwhile: keep it
                    break
        raise


def plan(settings: Settings, options: RunOptions, suite: Suite, run_dir: Path | None = None
         ) -> tuple[dict[str, Any], Catalog, list[CaseSpec]]:
    """The probe's answer, its catalog and the cases to run; ConfigError for a broken workload file or a
    selection of nothing. With ``run_dir``: the probe is forked by the fork server the run's workers then
    come from (workers.run_probe), one ``import torch`` for both."""
    probe = workers.run_probe(settings.workloads_dirs, settings.threads,
                              run_folders.run_work_dir(run_dir) if run_dir is not None else None)
    catalog = Catalog.from_probe(probe)
    if catalog.errors:
        raise ConfigError(catalog.errors[0]["error"])
    if not catalog.workloads:  # not "unknown workload '*'": the user named none
        raise ConfigError(f"{settings.no_workloads()}; run perfgate from a project's root, pass --workloads-dir DIR, "
                          "or start one with `perfgate init`")
    cases = plan_cases(suite, catalog, options.workloads, options.toggles, options.size, options.device)
    if not cases:
        raise ConfigError(f"suite {suite.name!r} selects no cases")
    off_cuda = sorted({c.device for c in cases if not c.device.startswith("cuda")})
    if settings.device_memory_gb and off_cuda:
        raise ConfigError(f"a device memory cap of {settings.device_memory_gb:g} GB (--device-memory-gb, or "
                          f"device_memory_gb in [tool.perfgate]) applies to CUDA workers only; this run measures "
                          f"on {', '.join(off_cuda)}: run with --device cuda, or drop the cap")
    return probe, catalog, cases


def new_run(settings: Settings, options: RunOptions, suite: Suite, run_dir: Path, probe: dict[str, Any],
            catalog: Catalog, cases: list[CaseSpec]) -> RunResult:
    """The run's record before its first case: environment (host, torch, machine key, layout policy and
    seed), settings, expectation rules and the machine's ceilings."""
    env = {**environment.host_environment(settings.root, settings.threads), **probe["environment"]}
    env["machine_key"] = environment.machine_key(env, cases[0].device)
    env["address_layout"] = workers.address_layout()  # fixed: no address-space randomization in workers
    # what tunes the workers, as NAME=value (an environment holds no tables): a difference is reported
    env["tuning_env"] = [f"{k}={v}" for k, v in inherit.tuning_environment().items()]
    env["layout_policy"] = layout.policy()  # drawn: each worker draws its own layout (docs/gate.md)
    env["malloc"] = layout.malloc_state()  # steady: the C allocator's thresholds fixed in workers (docs/gate.md)
    if env["layout_policy"] == "drawn":
        env["layout_seed"] = layout.run_seed()
    recorded = settings.to_json()
    selection = options.selection()
    if selection:  # not the suite: say so (RunResult.what_ran)
        recorded["selection"] = selection
    elif options.filters():  # the suite, narrowed: `baseline update` must not make it the whole baseline
        recorded["filters"] = options.filters()
    return RunResult(run_id=run_dir.name, suite=suite.name, environment=env,
                     started_at=time.strftime("%Y-%m-%dT%H:%M:%S%z"), settings=recorded,
                     expectations=expect.rules_json(settings, catalog.workloads, cases),
                     ceilings=roofline.ceilings_for_run(settings.baselines_dir, env))


def select_shard(cases: list[CaseSpec], shard: Shard, options: RunOptions, settings: Settings,
                 run: RunResult) -> list[CaseSpec]:
    """The shard's cases, its record stored in ``run.settings["shard"]``, said in one line."""
    from perfgate.gating.merge import select_shard as select

    cases, run.settings["shard"] = select(cases, shard, options.shard_costs, settings, run.suite,  # type: ignore[arg-type]  # a suite run: named
                                          run.environment["machine_key"])
    echo(f"perfgate: shard {shard.text}: {len(cases)} of {run.settings['shard']['cases_total']} "
         f"case(s), balanced by {run.settings['shard']['cost_source']}")
    return cases


def select_changed(settings: Settings, options: RunOptions, catalog: Catalog, cases: list[CaseSpec],
                   record: RunResult) -> tuple[list[CaseSpec], RunResult]:
    """`--changed-since REF`: the cases of the workloads the change touches (perfgate.running.changes), the
    others recorded in ``record`` as skipped, unchanged, and the selection in ``settings.changed_since``."""
    if not options.changed_since:
        return cases, record
    selection = changes.selection_for_run(settings.root, settings.source, catalog.workloads, options.changed_since,
                                          options.run_all)
    chosen, skipped = changes.split_cases(cases, selection)
    echo(f"perfgate: --changed-since {options.changed_since}: {selection.summary(len(skipped), len(cases))}")
    settings_json = {**record.settings, "changed_since": selection.to_json()}
    return chosen, replace(record, settings=settings_json, cases=skipped)


def progress(event: str, k: int, n: int, spec: Any, result: Any, elapsed: float, run: RunResult | None = None) -> None:
    """The run's progress lines: one as a case starts, one with its outcome (its step time with the
    interval ``run``'s tables print)."""
    if event == "start":
        echo(console.progress_line(k, n, spec, elapsed, k - 1))
    else:
        echo(f"      {result.status:<8} {console.outcome_detail(result, run)}  ({result.duration_s:.1f} s)")


def reports_writer(run_dir: Path) -> Callable[[RunResult], None]:
    """report.html, summary.md and junit.xml for `perfgate run`, rewritten after each case. A report bug
    must not cost a long run its results (results.json is already safe): it warns once and goes on."""
    from perfgate.reports import write_run_reports

    warned: list[str] = []

    def write(run: RunResult) -> None:
        try:
            write_run_reports(run, run_dir)
        except Exception as exc:  # noqa: BLE001 - any exporter failure; results.json stands
            if not warned:
                warned.append(str(exc))
                echo(f"perfgate: warning: could not write the reports: {type(exc).__name__}: {exc}", err=True)

    return write


def write_tensorboard_scalars(run: RunResult, run_dir: Path) -> None:
    """Scalars and hparams next to the traces; a failure here costs the charts, never the results."""
    try:
        from perfgate.reports.tensorboard import write_tensorboard

        write_tensorboard(run, run_dir / "tb")
    except Exception as exc:  # noqa: BLE001 - TensorBoard's writer is optional to the run's outcome
        echo(f"perfgate: warning: TensorBoard scalars not written: {exc}", err=True)


def add_to_history(settings: Settings, run_dir: Path) -> None:
    """`run --history`: the run just made into the store, its trends in history.html beside it; a store
    problem exits 2 (the results stand)."""
    from perfgate.history import commands

    for line in commands.add_from_run(settings, run_dir):
        echo(line)


def now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")


def run(settings: Settings, options: RunOptions) -> int:
    """`perfgate run`: plan, measure, report, judge. Returns the exit code: 0, or 1 when the gate fails."""
    settings = run_settings(settings, options)
    suite = settings.suite(options.suite or settings.default_suite)
    if options.device_memory_gb is None and suite.device_memory_gb:  # the suite's cap over [tool.perfgate]'s
        settings = replace(settings, device_memory_gb=suite.device_memory_gb)
    run_dir, created = run_folder(settings, options, suite)
    try:
        # SIGTERM (a CI cancellation, a supervisor) ends the run as Ctrl-C does, whatever it is doing: its
        # workers and their processes end at once, temporary worktrees are removed, exit 130
        with against.interruptible():
            return _run_in(settings, options, suite, run_dir, created)
    finally:  # the run's fork servers end with it, however it ends (perfgate used from Python lives on)
        workers.close_zygotes(under=run_dir)


def _run_in(settings: Settings, options: RunOptions, suite: Suite, run_dir: Path, created: list[Path]) -> int:
    """`perfgate run` once its folder is reserved."""
    with removed_on_error(run_dir, created):
        probe, catalog, cases = plan(settings, options, suite, run_dir)
    files = {name: info["file"] for name, info in catalog.workloads.items()}
    record = new_run(settings, options, suite, run_dir, probe, catalog, cases)
    # --gate with expectations and no baseline stored yet: the expectations alone are the gate
    no_baseline = gate_mod.expectations_alone(settings, record, gate=options.gate and not options.side_by_side
                                              and not options.baseline_file)
    stored = None
    if options.stored_gate and not no_baseline:  # read before any case runs: a missing or broken one fails fast
        with removed_on_error(run_dir, created):
            stored = gate_mod.load_stored(settings, record,
                                          Path(options.baseline_file) if options.baseline_file else None)
    cases, record = select_changed(settings, options, catalog, cases, record)
    shard = options.shard_part()
    if shard:
        cases = select_shard(cases, shard, options, settings, record)
        if shard.index > 1:  # the skipped cases are shard 1's to record: merge takes each case from one shard
            record = replace(record, cases=[])
    if not cases:
        runner.write_results(replace(record, finished_at=now()), run_dir / "results.json")
        where = f"in shard {shard.text}" if shard else "that this change touches"
        echo(f"perfgate: nothing to run {where}; results: {run_dir / 'results.json'}")
        if record.cases:  # cases skipped as unchanged: their reports say so, and the job summary
            reports_writer(run_dir)(record)
            if options.gate:
                publish_summary(run_dir)
        return EXIT_OK
    echo(f"perfgate: {len(cases)} case(s) of {record.what_ran} on {cases[0].device}, "
         f"{sampling_plan(settings)}, {settings.threads} thread(s) -> {run_dir}")
    if options.baseline_precision:
        gs = gate_mod.gate_settings(settings)
        echo(f"perfgate: measuring to a baseline's precision: each case until its step time is within "
             f"+/-{gs.plain_precision() * BASELINE_PRECISION_SHARE * 100:g}%, from "
             f"{gs.unpaired_min_processes} processes (a plain run: +/-{gs.plain_precision() * 100:g}%)")
    if settings.reports_dir in run_dir.parents:
        run_folders.mark_latest(settings.reports_dir, run_dir)
    write_reports = reports_writer(run_dir)
    write_reports(record)
    if options.side_by_side:  # the gate's same-job A/B mode: perfgate/gating/gate.py
        return run_against(options.against_ref, options, cases, files, settings, record, run_dir)
    return run_measured(options, cases, files, settings, record, run_dir, stored, no_baseline, write_reports)


def run_against(ref: str | None, options: RunOptions, cases: list[CaseSpec], files: dict[str, str],
                settings: Settings, record: RunResult, run_dir: Path) -> int:
    """`run --against REF` and/or `--base-python PATH`: REF (or this tree, under that Python) and this tree
    in lockstep, case by case, compared directly (gate.py)."""
    no_evidence: gate_mod.NoEvidence | None = None
    try:
        code = gate_mod.execute_against(ref, cases, files, settings, record, run_dir, partial(progress, run=record), echo,
                                        gate=options.gate, narrowing=(options.workloads, options.toggles,
                                                                      options.size, options.device),
                                        interpreter=options.interpreter())
    except gate_mod.NoEvidence as exc:  # exit 3 once the summary and the history have the run
        code, no_evidence = EXIT_INFRA, exc
    try:  # the head side's scalars next to its traces, as a plain run has them
        write_tensorboard_scalars(load_results(run_dir / "results.json"), run_dir)
    except (OSError, SchemaError) as exc:
        echo(f"perfgate: warning: TensorBoard scalars not written: {exc}", err=True)
    if options.gate:  # summary.md, now with the verdicts, into the job summary (perfgate/running/github.py)
        publish_summary(run_dir)
    if options.history:
        add_to_history(settings, run_dir)
    if no_evidence:
        raise no_evidence
    return code


def run_measured(options: RunOptions, cases: list[CaseSpec], files: dict[str, str], settings: Settings,
                 record: RunResult, run_dir: Path, stored: tuple[Path, Baseline] | None, no_baseline: Path | None,
                 write_reports: Callable[[RunResult], None]) -> int:
    """The cases measured one after the other, then judged against ``stored`` (settling in lockstep against
    its commit where it can), or by the expectations alone (``no_baseline``), or not judged."""
    lockstep: gate_mod.Lockstep | None = None
    if no_baseline:
        echo(f"perfgate: no baseline at {no_baseline}: --gate judges the expectations alone")
    if stored:  # settle what the stored comparison does not in lockstep against the baseline's commit
        lockstep, why_not = gate_mod.lockstep_commits(settings, stored[1])
        echo(f"perfgate: step-time changes the stored comparison does not settle at its first look are "
             f"settled in lockstep against {lockstep.describe()}" if lockstep else
             f"perfgate: step times are judged against the stored baseline alone ({why_not})")
    mode = "stored" if stored else "baseline" if options.baseline_precision else "plain"
    sampler_for = gate_mod.sampler_factory(settings, mode, stored[1] if stored else None, screen=bool(lockstep))
    done = runner.execute(cases, files, settings, record, run_dir, partial(progress, run=record), after_case=write_reports,
                          sampler_for=sampler_for)
    done = replace(done, finished_at=now())
    runner.write_results(done, run_dir / "results.json")
    write_tensorboard_scalars(done, run_dir)
    write_reports(done)
    echo(f"reports: {run_dir / 'report.html'} (also summary.md, junit.xml)")
    echo(console.run_tables(done))
    if done.expectations:  # every rule on the cases it matched (perfgate/judging/expect.py); --gate fails on a miss
        echo("\n" + expect.console_text(expect.evaluate(done)))
    echo(f"\n{runner.summary_status(done)}; results: {run_dir / 'results.json'}")
    if options.history:  # before the gate's verdict: a regression is history too
        add_to_history(settings, run_dir)
    if not any(c.status == STATUS_OK for c in done.cases):
        raise workers.InfrastructureError("no case could run (see the failures and skip reasons above)")
    if stored:  # compare with the stored baseline: perfgate/gating/gate.py
        code = gate_mod.gate_run(done, run_dir, settings, stored, strict_env=options.strict_env, gate=options.gate,
                                 cases=cases, workload_files=files, echo=echo, lockstep=lockstep)
        if options.gate:  # summary.md, now with the verdicts, into the job summary (perfgate/running/github.py)
            publish_summary(run_dir)
        return code
    if no_baseline:
        code = gate_mod.conclude_expectations_alone(done, no_baseline, echo)
        publish_summary(run_dir)
        return code
    return EXIT_OK
