"""The gate's orchestration behind `perfgate run --gate / --against` and `perfgate compare`: find the
baseline, compare (perfgate.judging.compare holds the rule), re-measure a time regression once, write
comparison.json next to results.json, print, and return the exit code. No torch."""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from perfgate.judging import baselines, sequential
from perfgate.judging.compare import STATUS, STEP_TIME, acknowledged, compare_runs, judge_case
from perfgate.judging.gate_settings import GateSettings, gate_settings
from perfgate.judging.settle import LOCKSTEP_SETTLES, confirm_regressions, settle_in_lockstep
from perfgate.model import rule_text
from perfgate.model.comparison import Comparison, Verdict, evidence
from perfgate.model.config import ConfigError, Settings
from perfgate.model.results import STATUS_FAILED, STATUS_OK, CaseResult, CaseSpec, RunResult
from perfgate.protocol import layout
from perfgate.reports import console
from perfgate.running import inherit, runner, workers
from perfgate.util.formatting import plural
from perfgate.util.storage import atomic_write_json

EXIT_OK, EXIT_GATE = 0, 1

Echo = Callable[[str], None]


def default_baseline_path(settings: Settings, run: RunResult) -> Path:
    return baselines.baseline_path(settings.baselines_dir, run.environment.get("machine_key", "unknown-machine"),
                                   run.suite or settings.default_suite)


def write_comparison(comparison: Comparison, run_dir: Path, run: RunResult | None = None,
                     echo: Echo | None = None) -> Path:
    """comparison.json beside results.json; with ``run``, the run's reports again, now with the verdicts.
    A report failure warns and leaves the gate's verdict and exit code alone."""
    path = atomic_write_json(run_dir / "comparison.json", comparison.to_json())
    if run is not None:
        try:
            from perfgate.reports import write_run_reports

            write_run_reports(run, run_dir, comparison)
        except Exception as exc:  # noqa: BLE001 - any exporter failure; the verdicts stand
            if echo:
                echo(f"perfgate: warning: could not write the reports with the verdicts: {type(exc).__name__}: {exc}")
    return path


class NoEvidence(workers.InfrastructureError):
    """A gate none of whose cases carried evidence (comparison.Evidence): exit 3, never a pass."""


def conclude(comparison: Comparison, gate: bool, echo: Echo, run: RunResult | None = None,
             run_dir: Path | None = None) -> int:
    """Print the comparison (with ``run``, a command under each regression that reproduces it) and return
    the gate's exit code; NoEvidence (exit 3) for a gate whose cases all went unjudged (skipped, or failing
    as in the base) and that nothing else failed."""
    found = evidence(run, comparison) if run is not None else None
    said: list[str] = []
    missed = expectations_failed(run, said.append) if gate else False
    # the missed expectations go into the text before its banner, which must agree with the exit code
    echo(console.comparison_text(comparison, gate=gate, evidence=found, run=run, run_dir=run_dir,
                                 expectations_missed=said))
    if gate and (comparison.gate_failed or missed):
        return EXIT_GATE
    if gate and found is not None and found.none_compared:
        raise NoEvidence(f"the gate has no evidence: {found.none_compared}; see the verdicts above")
    return EXIT_OK


def expectations_failed(run: RunResult | None, echo: Echo) -> bool:
    """The expectations hook of the gate (perfgate.judging.expect): does ``run`` miss a ``fail`` rule? Says which."""
    if run is None or not run.expectations:
        return False
    from perfgate.judging import expect

    failing = expect.evaluate(run).failing
    for o in failing:
        echo(f"perfgate: expectation missed: {o.case_key}: {o.rule.text} ({o.reason})")
    return bool(failing)


def expectations_alone(settings: Settings, run: RunResult, *, gate: bool) -> Path | None:
    """Where the stored baseline would be, when a gated run has none there yet but has expectations to judge
    (docs/expectations.md): the gate is then the expectations alone. None otherwise: a gate with neither
    fails fast when the baseline is read (exit 2, saying how to make one)."""
    if not gate or not run.expectations:
        return None
    path = default_baseline_path(settings, run)
    return None if path.exists() else path


def conclude_expectations_alone(run: RunResult, baseline_path: Path, echo: Echo) -> int:
    """The exit code of a gated run with no baseline to compare with: 1 when it missed a ``fail`` expectation."""
    echo(f"\nperfgate: no baseline to compare with ({baseline_path}; `perfgate baseline update` stores one): "
         "the gate judged the expectations alone")
    missed = expectations_failed(run, echo)
    echo("\nGATE FAILED: a fail expectation was missed; no baseline compared" if missed else
         "\nGate passed: no fail expectation missed; no baseline compared")
    return EXIT_GATE if missed else EXIT_OK


def load_stored(settings: Settings, run: RunResult, baseline_file: Path | None) -> tuple[Path, baselines.Baseline]:
    """The stored baseline a gated run compares with, read before any case runs (a missing or broken one
    fails fast, and the cases' sampling needs it)."""
    path = baseline_file or default_baseline_path(settings, run)
    return path, baselines.load_baseline(path)


COMMIT_HASH = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")  # SHA-1 or SHA-256, as `git rev-parse HEAD` prints it


@dataclass(frozen=True)
class Lockstep:
    """The commits a stored comparison is settled against in lockstep: the baseline's (``commit``), and per
    case the one its numbers were measured at (``by_case``; another where `baseline update --case` kept the
    case from an earlier commit)."""

    commit: str
    by_case: dict[str, str]

    def commit_for(self, key: str) -> str:
        return self.by_case.get(key, self.commit)

    @property
    def commits(self) -> list[str]:
        """Each commit once, the baseline's first."""
        return list(dict.fromkeys([self.commit, *self.by_case.values()]))

    def describe(self) -> str:
        if len(self.commits) == 1:
            return f"the baseline's commit {self.commit[:12]}"
        counts = [(c, sum(1 for v in self.by_case.values() if v == c)) for c in self.commits]
        return "the commits the baseline's cases were measured at: " + ", ".join(
            f"{c[:12]} ({plural(n, 'case')})" for c, n in counts)


def lockstep_commits(settings: Settings, baseline: baselines.Baseline) -> tuple[Lockstep | None, str]:
    """The commits a stored comparison is settled against in lockstep (docs/gate.md, "Settling in lockstep
    against the baseline's commit"), or None and why not. The baseline file is untrusted: each commit, the
    environment's and any a case names (``baselines.commit_of``), must be a full hash, recorded from a clean
    tree, and a commit of this repository; one that is not leaves every case to the stored numbers."""
    if not gate_settings(settings).settle_in_lockstep:
        return None, "settle_in_lockstep = false"
    from perfgate.running import against

    known: dict[str, bool] = {}

    def why_not(commit: Any, dirty: Any, whose: str) -> str:
        if not isinstance(commit, str) or not COMMIT_HASH.fullmatch(commit):
            return f"{whose} records no git commit"
        if dirty is not False:
            return f"{whose} was recorded with uncommitted changes to {commit[:12]}"
        if commit not in known:
            known[commit] = against.has_commit(settings.root, commit)
        return "" if known[commit] else f"{whose}'s commit {commit[:12]} is not in this repository (a shallow clone? fetch it)"

    env = baseline.run.environment
    why = why_not(env.get("git_commit"), env.get("git_dirty"), "the baseline")
    if why:
        return None, why
    by_case = {}
    for case in baseline.run.cases:
        commit, dirty = baselines.commit_of(baseline.run, case.key)
        why = why_not(commit, dirty, f"the baseline's case {case.key}")
        if why:
            return None, why
        by_case[case.key] = commit
    return Lockstep(env["git_commit"], by_case), ""


def sampler_factory(settings: Settings, mode: str, baseline: baselines.Baseline | None = None,
                    screen: bool = False) -> Callable[[CaseSpec], sequential.Sampler]:
    """How many processes each case gets (perfgate.judging.sequential): ``mode`` "plain" measures to a precision,
    "baseline" to a baseline's (half a plain run's, from ``unpaired_min_processes``: `run --baseline-precision`),
    "stored" until the comparison with ``baseline`` settles (with ``screen``: one look, lockstep pairs
    settle the rest), "against" until the paired comparison does."""
    gs = gate_settings(settings)
    calibration = baseline.calibration if baseline else {}

    def make(spec: CaseSpec) -> sequential.Sampler:
        base_case = baseline.run.case(spec.key) if baseline else None
        case = CaseResult(spec=spec, status=STATUS_OK)
        # the term the case's printed interval adds for another run: its calibration here, else the default
        printed = gs.run_to_run_term(case, spec.key, calibration)
        rule: sequential.Rule
        if mode == "baseline":
            rule = sequential.PrecisionRule(gs.plain_precision() * baselines.BASELINE_PRECISION_SHARE,
                                            gs.process_quantile, gs.confidence, printed[0],
                                            min_processes=gs.unpaired_min_processes)
        elif mode == "plain" or (mode == "stored" and (base_case is None or base_case.status != STATUS_OK)):
            rule = sequential.PrecisionRule(gs.plain_precision(), gs.process_quantile, gs.confidence, printed[0])
        else:
            threshold, source = gs.threshold_for(case, spec.key, calibration)
            run_to_run, _ = gs.run_to_run_term(case, spec.key, calibration, paired=(mode == "against"), base=base_case)
            rule = sequential.ComparisonRule(gs, threshold, source, paired=(mode == "against"), base=base_case,
                                             run_to_run=run_to_run)
        sampler = sequential.make_sampler(gs, settings.processes, rule,
                                          screen=screen and mode == "stored" and isinstance(rule, sequential.ComparisonRule))
        sampler.run_to_run = printed
        return sampler

    return make


def gate_run(run: RunResult, run_dir: Path, settings: Settings, stored: tuple[Path, baselines.Baseline], *,
             strict_env: bool, gate: bool, cases: list[CaseSpec], workload_files: dict[str, str],
             echo: Echo, lockstep: Lockstep | None = None) -> int:
    """After `perfgate run`: compare with the stored baseline, settle what it did not in lockstep against
    the baseline's commits ``lockstep`` (when it has them), re-measure the other time regressions, exit code."""
    gs = gate_settings(settings)
    path, base = stored
    baselines.check_covers(base, run)
    # the levels of the looks the cases were sampled with (a screen when settling in lockstep follows)
    comparison = compare_runs(run, base.run, gs, baseline_source=str(path), calibration=base.calibration,
                              strict_env=strict_env,
                              look_confidence=sequential.look_confidence(gs, settings.processes, screen=bool(lockstep)))
    settled: set[str] = set()
    if lockstep:
        comparison, settled, unsettled = settle_stored(comparison, run, run_dir, settings, lockstep, cases,
                                                       workload_files, base.calibration, echo)
        comparison, run = measure_unscreened(comparison, run, run_dir, settings, base, unsettled, cases,
                                             workload_files, echo)
    # against a stored baseline a win is re-measured too: a run in a fast minute is not a win (docs/gate.md)
    confirm = ("regression", "win")
    if gs.remeasures("stored") and any(v.metric == "step_time" and v.kind in confirm and v.case_key not in settled
                                       for v in comparison.verdicts):
        specs = {s.key: s for s in cases}
        sampler_for = sampler_factory(settings, "stored", base)

        def remeasure(key: str) -> tuple[CaseResult, CaseResult | None] | None:
            spec = specs.get(key)
            if spec is None or key in settled:
                return None
            echo(f"re-measuring {key}: its step time changed; it must change the same way again to count")
            # in the run's own folder, from its fork server: workers under a longer path would get another
            # memory layout than the run's and the baseline's (docs/gate.md, "Why processes ... differ").
            # Step times only: a profile pass there would replace the trace the run's case names
            layout.redraw()  # other layouts than the measurement it checks drew (perfgate.protocol.layout)
            return runner.run_case(spec, workload_files[spec.workload], settings, run_dir,
                                   configure=_no_profile, sampler=sampler_for(spec)), None

        comparison, again = confirm_regressions(comparison, run, gs, remeasure, calibration=base.calibration,
                                                look_confidence=sequential.look_confidence(gs, settings.processes),
                                                kinds=confirm)
        record_remeasures(run, run_dir, again)
    comparison = acknowledged(comparison, settings)
    write_comparison(comparison, run_dir, run, echo)
    return conclude(comparison, gate, echo, run, run_dir)


def measure_unscreened(comparison: Comparison, run: RunResult, run_dir: Path, settings: Settings,
                       base: baselines.Baseline, keys: set[str], cases: list[CaseSpec], workload_files: dict[str, str],
                       echo: Echo) -> tuple[Comparison, RunResult]:
    """The cases of ``keys`` (lockstep could not settle them: their commit's checkout failed) whose one-look
    screen left the step time ``inconclusive``, measured again with the stored comparison's own sampler (its
    looks and budget) and judged at its levels: a screen is no verdict of its own. A screened regression or
    win goes to the re-measure as without lockstep. Returns the comparison and the run with those cases."""
    gs = gate_settings(settings)
    specs = {s.key: s for s in cases}
    sampler_for = sampler_factory(settings, "stored", base)
    look = sequential.look_confidence(gs, settings.processes)
    verdicts = list(comparison.verdicts)
    measured = False
    for i, v in enumerate(verdicts):
        if v.metric != STEP_TIME or v.kind != "inconclusive" or v.case_key not in keys or v.case_key not in specs:
            continue
        spec, first = specs[v.case_key], run.case(v.case_key)
        echo(f"measuring {spec.key} with the stored comparison's full sampler: lockstep could not settle its screen")
        # step times only, in the run's own folder (as the re-measure: the run's trace stays the one it names)
        again = runner.run_case(spec, workload_files[spec.workload], settings, run_dir, configure=_no_profile,
                                sampler=sampler_for(spec))
        measured = True
        if again.status == STATUS_OK and first is not None:  # the profile pass's counts stay the first run's
            again = replace(first, processes=again.processes, duration_s=first.duration_s + again.duration_s,
                            metadata={**first.metadata, "sampling": again.metadata.get("sampling")})
            run = replace(run, cases=[again if c.key == spec.key else c for c in run.cases])
        new = [n for n in judge_case(spec.key, base.run.case(spec.key), again, gs, calibration=base.calibration,
                                     look_confidence=look) if n.metric in (STEP_TIME, STATUS)]
        if new:
            verdicts[i] = (rule_text.settled(new[0], "full-sampler", v) if new[0].facts is not None  # a status: in words
                           else replace(new[0], rule=f"{new[0].rule}; {rule_text.screen_note(v.kind, v.ratio)}"))
    if measured:
        runner.write_results(run, run_dir / "results.json")
    return replace(comparison, verdicts=verdicts), run


def settle_stored(comparison: Comparison, run: RunResult, run_dir: Path, settings: Settings, lockstep: Lockstep,
                  cases: list[CaseSpec], workload_files: dict[str, str], calibration: dict[str, Any],
                  echo: Echo) -> tuple[Comparison, set[str], set[str]]:
    """Settle each stored step-time verdict in LOCKSTEP_SETTLES by lockstep pairs against the commit its
    case was measured at (each commit checked out once, only when some case needs it); returns the
    comparison, the keys settled, and the keys whose commit could not be checked out. A checkout that fails
    leaves its cases to the stored comparison (``measure_unscreened``, then the re-measure), with a warning.
    The pairs' samples go to lockstep/results.json (head) and lockstep/base/results.json (each base case
    with the commit it ran at, ``baselines.commit_of``)."""
    from perfgate.running import against

    specs = {s.key: s for s in cases}
    needed = [v.case_key for v in comparison.verdicts
              if v.metric == "step_time" and v.kind in LOCKSTEP_SETTLES and v.case_key in specs]
    gs = gate_settings(settings)
    head_dir, base_dir = run_dir / "lockstep", run_dir / "lockstep" / "base"
    pairs: list[tuple[CaseResult, CaseResult]] = []
    settled: set[str] = set()
    unsettled: set[str] = set()
    sampler_for = sampler_factory(settings, "against")
    for commit in lockstep.commits:
        group = {key for key in needed if lockstep.commit_for(key) == commit}
        if not group:  # nothing to settle there: no checkout
            continue
        try:
            with against.interruptible(), against.checked_out(settings, commit) as base:
                probe_base(base, settings, echo)

                def measure(key: str, group: set[str] = group, base: Any = base,
                            commit: str = commit) -> tuple[CaseResult, CaseResult | None] | None:
                    if key not in group:
                        return None
                    spec = specs[key]
                    echo(f"settling {key} in lockstep against the baseline's commit {commit[:12]}")
                    head, base_case = against.run_pair(spec, workload_files[spec.workload], base, settings,
                                                       head_dir, base_dir, sampler=sampler_for(spec))
                    echo(f"      lockstep {console.outcome_text(head, run)}")
                    return head, base_case

                comparison, got, done = settle_in_lockstep(
                    comparison, measure, gs, commit=commit, calibration=calibration,
                    look_confidence=sequential.look_confidence(gs, settings.processes))
        except ConfigError as exc:
            echo(f"perfgate: warning: could not settle in lockstep against the baseline's commit {commit[:12]}: {exc}")
            unsettled |= group
            continue
        pairs += got
        settled |= done
    if pairs:
        runner.write_results(replace(run, cases=[h for h, _ in pairs]), head_dir / "results.json")
        env = {**run.environment, "git_commit": lockstep.commit, "git_dirty": False}
        runner.write_results(replace(run, run_id=f"{run.run_id}-base", environment=env,
                                     cases=[baselines.with_commit(b, (lockstep.commit_for(b.key), False), env)
                                            for _, b in pairs]),
                             base_dir / "results.json")
    return comparison, settled, unsettled


def _no_profile(cfg: dict[str, Any]) -> None:
    """A worker's case file without the profile pass (a re-measure judges step times only)."""
    cfg["profile"] = False


def record_remeasures(run: RunResult, run_dir: Path, again: list[CaseResult]) -> None:
    """Keep the re-measured samples where a reader can find them: results-remeasure.json."""
    if again:
        runner.write_results(replace(run, cases=again), run_dir / "results-remeasure.json")


# The command line's narrowing of a suite (workloads, toggles, size, device), applied to REF's plan as to this one's
Narrowing = tuple[tuple[str, ...], tuple[str, ...], str | None, str | None]


def execute_against(ref: str | None, cases: list[CaseSpec], workload_files: dict[str, str], settings: Settings,
                    run: RunResult, run_dir: Path, progress: Any, echo: Echo, *, gate: bool,
                    narrowing: Narrowing = ((), (), None, None),
                    interpreter: inherit.Interpreter | None = None) -> int:
    """`perfgate run --against REF`: base and head interleaved per case, compared directly; a case of the
    suite as REF plans it (``narrowing`` applied) that this tree's plan lacks is ``newly-failing``.
    ``interpreter`` (`--base-python`, `--base-env`): the base side runs under it, REF's code, or with no REF
    this tree's: the change under test is then the environment, named in the comparison."""
    from perfgate.running import against

    if ref is None:
        if interpreter is None:
            raise ConfigError("a same-job comparison needs --against REF or --base-python PATH")
        with against.interruptible():
            same = against.same_tree(settings, interpreter)
            try:
                return _judge_against(same, None, cases, workload_files, settings, run, run_dir, progress, echo,
                                      gate=gate, narrowing=narrowing)
            finally:
                same.close()
    with against.interruptible(), against.checked_out(settings, ref) as base:
        if interpreter is not None:
            against.use_interpreter(base, interpreter)
        return _judge_against(base, ref, cases, workload_files, settings, run, run_dir, progress, echo, gate=gate,
                              narrowing=narrowing)


def base_side_environment(base: Any, run: RunResult) -> dict[str, Any]:
    """The base run's environment: the head's (same machine, same job), with the base checkout's commit, and,
    under another interpreter (`--base-python`, `--base-env`), what its probe saw (torch, CUDA, cuDNN,
    Python, packages), its executable and the variables that tune its workers."""
    env = dict(run.environment)
    if base.worktree:  # a clean worktree of REF's commit, whatever state the head's tree is in
        env.update(git_commit=base.commit, git_dirty=False, git_ref=base.ref)
    if base.interpreter is not None:
        env.update(base.environment)
        env["executable"] = base.interpreter.executable
        # what tunes its workers, and every variable --base-env set, whatever its name: the change asked for
        tuning = {**inherit.tuning_environment({**os.environ, **dict(base.interpreter.env)}), **dict(base.interpreter.env)}
        env["tuning_env"] = [f"{k}={v}" for k, v in sorted(tuning.items())]
    return env


def gone_at_head(base: Any, settings: Settings, run: RunResult, cases: list[CaseSpec], narrowing: Narrowing,
                 echo: Echo) -> list[Verdict]:
    """A ``newly-failing`` verdict for each case of the suite as REF plans it (its own configuration and
    catalog, perfgate.running.against.base_suite_cases) that this tree's plan lacks: a change dropped it (a workload
    file deleted, a size renamed, a toggle taken out of the suite), and none of its regressions could be seen.
    A shard plans no base cases (`perfgate merge --expect-suite` checks the whole suite)."""
    from perfgate.running import against

    if run.settings.get("shard"):
        return []
    planned, why = against.base_suite_cases(base, settings, run.suite or settings.default_suite, *narrowing)
    if planned is None:
        echo(f"perfgate: warning: the cases {base.ref} has and this tree lacks cannot be seen: {why}")
        return []
    have = {c.key for c in cases} | {c.key for c in run.cases}  # run.cases: those skipped as unchanged
    where = f"{base.ref} ({base.commit[:12]})"
    return [Verdict(s.key, STATUS, "newly-failing",
                    rule=f"in suite {run.suite!r} at {where}, not in it now: a change dropped the case (a toggle set "
                         "or workload taken out of the suite, a size or variant removed from the workload, its "
                         "workload file removed)",
                    advice="none of the case's regressions can be seen any more: if the change means it, say so "
                           "in review; if not, restore the case")
            for s in planned if s.key not in have]


def probe_base(base: Any, settings: Settings, echo: Echo) -> None:
    """What the base checkout (perfgate.running.against.BaseCheckout) can run, and its notes said once."""
    from perfgate.running import against

    against.probe_base(base, settings.threads)
    for note in base.notes:
        echo(f"note: {note}")


def _judge_against(base: Any, ref: str | None, cases: list[CaseSpec], workload_files: dict[str, str],
                   settings: Settings, run: RunResult, run_dir: Path, progress: Any, echo: Echo, *,
                   gate: bool, narrowing: Narrowing) -> int:
    """execute_against's work once REF is checked out in ``base`` (perfgate.running.against.BaseCheckout), or
    with ``ref`` None, once ``base`` is this tree under another interpreter."""
    from perfgate.model.environment_keys import change_text, side_by_side_diff
    from perfgate.running import against

    probe_base(base, settings, echo)
    gone = gone_at_head(base, settings, run, cases, narrowing, echo) if base.worktree else []
    if run.environment.get("git_dirty") and base.worktree:
        echo(f"note: the head side is this working tree, with uncommitted changes on top of "
             f"{str(run.environment.get('git_commit'))[:12]}; the base side is {ref} ({base.commit[:12]}) as committed")
    base_dir = run_dir / "base"
    base_run = replace(run, run_id=f"{run.run_id}-base", environment=base_side_environment(base, run), cases=[])
    env_change = side_by_side_diff(base_run.environment, run.environment) if base.interpreter is not None else {}
    side = base.describe()
    if base.interpreter is not None:
        echo(f"perfgate: base side: {side}; the environments differ in: "
             f"{change_text(env_change) or 'nothing recorded (an A/A pair)'}")
        extra: dict[str, Any] = {"base_python": base.interpreter.python or None,
                                 "base_env": [f"{k}={v}" for k, v in base.interpreter.env]}
    else:
        extra = {}
    run = replace(run, settings={**run.settings, **({"against": ref} if ref else {}), **extra})
    ref = ref or side  # the base side in the lines below
    runner.write_results(run, run_dir / "results.json")
    t0 = time.perf_counter()
    sampler_for = sampler_factory(settings, "against")
    for k, spec in enumerate(cases, start=1):
        progress("start", k, len(cases), spec, None, time.perf_counter() - t0)
        head, base_case = against.run_pair(spec, workload_files[spec.workload], base, settings, run_dir, base_dir,
                                           sampler=sampler_for(spec))
        if head.status == STATUS_OK and base_failed_by_machine(base_case):
            # `fixed` would rest on one base worker that a loaded runner may have killed: measure the pair again
            echo(f"measuring {spec.key} once more against {ref}: its base side failed "
                 f"({base_case.failure_class if base_case else ''}); `fixed` only if it fails again")
            head, base_case = against.run_pair(spec, workload_files[spec.workload], base, settings, run_dir,
                                               base_dir, sampler=sampler_for(spec))
        run = run.with_case(head)
        if base_case is not None:
            base_run = base_run.with_case(base_case)
        runner.write_results(run, run_dir / "results.json")
        runner.write_results(base_run, base_dir / "results.json")
        progress("done", k, len(cases), spec, head, time.perf_counter() - t0)
        if base_case is not None and base_case.status == "ok":
            echo(f"      base     {console.outcome_text(base_case, base_run)}  ({base_case.duration_s:.1f} s)")
    echo(console.run_tables(run))
    gs = gate_settings(settings)
    look = sequential.look_confidence(gs, settings.processes)
    comparison = compare_runs(run, base_run, gs, mode="against", baseline_source=side, look_confidence=look)
    comparison = replace(comparison, verdicts=[*comparison.verdicts, *gone], environment_diff=env_change)
    if gs.remeasures("against") and any(v.metric == "step_time" and v.kind == "regression" for v in comparison.verdicts):
        specs = {s.key: s for s in cases}
        base_again: list[CaseResult] = []

        def remeasure(key: str) -> tuple[CaseResult, CaseResult | None] | None:
            spec = specs[key]
            echo(f"re-measuring {key} against {ref}: it must regress again to fail the gate")
            layout.redraw()  # other layouts than the measurement it checks drew; one per pair, both sides
            head_case, base_case = against.run_pair(spec, workload_files[spec.workload], base, settings,
                                                    run_dir / "remeasure", base_dir / "remeasure",
                                                    sampler=sampler_for(spec))
            if base_case is not None:
                base_again.append(base_case)
            return head_case, base_case

        comparison, again = confirm_regressions(comparison, run, gs, remeasure, look_confidence=look)
        record_remeasures(run, run_dir, again)
        # both sides of each re-measure, so that `perfgate merge --rejudge` can confirm it again
        record_remeasures(base_run, base_dir, base_again)
    # both sides measured (and re-measured): the run is finished, as a plain run's results.json and report say
    finished = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    run, base_run = replace(run, finished_at=finished), replace(base_run, finished_at=finished)
    runner.write_results(run, run_dir / "results.json")
    runner.write_results(base_run, base_dir / "results.json")
    comparison = acknowledged(comparison, settings)
    write_comparison(comparison, run_dir, run, echo)
    code = conclude(comparison, gate, echo, run, run_dir)
    if not gate and not any(c.status == STATUS_OK for c in run.cases):  # as a plain run: nothing measured, exit 3
        raise NoEvidence("no case could run (see the failures and skip reasons above)")
    return code


# Failures of a worker that the machine can cause (a timeout or the OOM killer on a loaded runner, a crash),
# unlike an exception the code raises: a base side failing so is measured once more before `fixed` stands.
MACHINE_FAILURES = ("timeout", "oom", "crash")


def base_failed_by_machine(base_case: CaseResult | None) -> bool:
    """Did the base side of an --against pair fail in a way the machine can cause (MACHINE_FAILURES)?"""
    return base_case is not None and base_case.status == STATUS_FAILED and base_case.failure_class in MACHINE_FAILURES


def compare_files(current: str, baseline: str, settings: Settings, *, strict_env: bool, gate: bool,
                  echo: Echo) -> int:
    """`perfgate compare CURRENT BASELINE`: BASELINE is a baseline file or another run's results."""
    from perfgate.model.results import load_results

    cur = load_results(current)
    base_path = Path(baseline)
    calibration: dict[str, Any] = {}
    if not _is_results(base_path):
        b = baselines.load_baseline(base_path)
        baselines.check_covers(b, cur)
        base_run, calibration = b.run, b.calibration
    else:
        base_run = load_results(base_path)
        # as a baseline file must: one that shares no case would make every case `new`, and a gate pass
        baselines.check_shares(base_run, cur, str(base_path), "results")
    gs: GateSettings = gate_settings(settings)
    # CURRENT's file is evidence only: its cases are judged at the levels `run --gate` with these settings
    # gives the looks that end at their process counts, never at a level the file states
    comparison = compare_runs(cur, base_run, gs, baseline_source=str(base_path), calibration=calibration,
                              strict_env=strict_env, look_confidence=sequential.look_confidence(gs, settings.processes))
    comparison = acknowledged(comparison, settings)
    cur_dir = Path(current) if Path(current).is_dir() else Path(current).parent
    # the run's reports again with these verdicts, as `run --gate` writes them: report.html and summary.md
    # beside comparison.json never show an older comparison's verdict
    write_comparison(comparison, cur_dir, cur, echo)
    return conclude(comparison, gate, echo, cur, cur_dir)


def _is_results(path: Path) -> bool:
    """A run's results (a run folder or a results.json) rather than a baseline file? Anything else, a
    corrupt file included, goes to the baseline reader, whose error names the file."""
    from perfgate.util.validation import SchemaError, read_json_file

    if path.is_dir():
        return True
    try:
        data = read_json_file(path, "results")
    except SchemaError:
        return False
    return isinstance(data, dict) and str(data.get("schema", "")).startswith("perfgate.results")
