"""`perfgate merge`'s gate: the merged run judged as one, by the shards' own verdicts joined, by this
perfgate's rules from the shards' raw --against samples (--rejudge: sampling short of its design, cases of
the expected suite no shard measured, skips its own --changed-since selection does not take), or against a
stored baseline through gate.py; then the merged reports and the exit code.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from perfgate.gating import gate as gate_mod
from perfgate.gating.comparison_file import COMPARISON_FILE, load_comparison_file, read_comparison
from perfgate.gating.merge import REMEASURE_FILE, find_results
from perfgate.model import acknowledge
from perfgate.model.comparison import Comparison, Verdict
from perfgate.model.config import ConfigError, Settings
from perfgate.model.results import CaseResult, CaseSpec, RunResult, load_results
from perfgate.reports import console, write_run_reports
from perfgate.running import changes, workers
from perfgate.running.changes import Selection
from perfgate.running.github import publish_summary
from perfgate.running.plan import Catalog


def merged_comparison(paths: Sequence[str | Path]) -> Comparison | None:
    """The shards' own verdicts joined into one Comparison, when every shard compared itself (as
    `perfgate run --against REF` does, re-measurements included, on the machine that measured).
    None when no shard did; ConfigError when only some did or they compared against different things."""
    # A shard that drew no case (more shards than cases) ran nothing to compare.
    files = [f.parent / COMPARISON_FILE for f in find_results(paths) if load_results(f).cases]
    present = [f for f in files if f.is_file()]
    if not present:
        return None
    if len(present) != len(files):
        missing = next(f for f in files if not f.is_file())
        raise ConfigError(f"cannot merge: {missing.parent} has no {COMPARISON_FILE} while other shards do; "
                          "run every shard with the same --against/--gate options")
    parts = [read_comparison(f) for f in present]
    first = parts[0]
    for f, part in zip(present, parts, strict=True):
        if (part.mode, part.baseline_source) != (first.mode, first.baseline_source):
            raise ConfigError(f"cannot merge {f}: compared against {part.baseline_source!r}, "
                              f"other shards against {first.baseline_source!r}")
    warnings = list(dict.fromkeys(w for p in parts for w in p.warnings))
    return Comparison(verdicts=[v for p in parts for v in p.verdicts], mode=first.mode,
                      baseline_source=first.baseline_source, environment_diff=first.environment_diff,
                      warnings=warnings, acknowledgements=acknowledge.merged([p.acknowledgements for p in parts]),
                      acknowledged_on=first.acknowledged_on)


def judge_against(out_dir: str | Path, run: RunResult, settings: Settings) -> Comparison:
    """The merged run judged again, by THIS perfgate's rules and settings, from the raw samples the shards
    measured with `perfgate run --against REF`: the merged head run against the merged base/ run, each
    step-time regression confirmed only by the shards' recorded re-measure of both sides. The shards'
    own comparison.json verdicts are not read: they were decided by the code under review.

    In CI the merging perfgate is the pull request's base, so a pull request that edits the gate's
    rules cannot pass its own gate. Raises ConfigError when the shards carry no base/ run."""
    from perfgate.judging.compare import STEP_TIME, acknowledged, compare_runs
    from perfgate.judging.gate_settings import gate_settings
    from perfgate.judging.sequential import look_confidence
    from perfgate.judging.settle import confirm_regressions
    from perfgate.model.environment_keys import side_by_side_diff

    out = Path(out_dir)
    base_file = out / "base" / "results.json"
    if not base_file.is_file() and all(c.skipped_as_unchanged for c in run.cases):
        # nothing measured on either side: each case is skipped as unchanged, which checked_skips then judges
        base_run = RunResult(run_id=f"{run.run_id}-base", suite=run.suite, environment={}, cases=[])
    elif not base_file.is_file():
        raise ConfigError("perfgate merge --rejudge needs each shard's base/ run: run the shards with "
                          "`perfgate run --against REF`")
    else:
        base_run = load_results(base_file)
    ref = run.settings.get("against") or base_run.environment.get("git_ref") or "base"
    source = f"git:{ref} ({str(base_run.environment.get('git_commit', ''))[:12]}), judged again by this perfgate"
    gs = gate_settings(settings)
    # every judging parameter from this side: the looks' levels too, replayed from our settings
    look = look_confidence(gs, settings.processes)
    comparison = compare_runs(run, base_run, gs, mode="against", baseline_source=source, look_confidence=look)
    if run.settings.get("base_python") or run.settings.get("base_env"):
        # the shards ran their two sides in two environments (`run --base-python`, `--base-env`): what differs
        # between them is the change under test, named as the shards' own run named it
        comparison = replace(comparison, environment_diff=side_by_side_diff(base_run.environment, run.environment))
    if gs.remeasures("against") and any(v.metric == STEP_TIME and v.kind == "regression" for v in comparison.verdicts):
        head_again = _cases_by_key(out / REMEASURE_FILE)
        base_again = _cases_by_key(out / "base" / REMEASURE_FILE)

        def remeasure(key: str) -> tuple[CaseResult, CaseResult | None] | None:
            # no recorded re-measure of both sides: the first measurement's regression stands
            if key not in head_again or key not in base_again:
                return None
            return head_again[key], base_again[key]

        comparison, _ = confirm_regressions(comparison, run, gs, remeasure, look_confidence=look)
    return acknowledged(below_floor(comparison, run, base_run, settings), settings)


def below_floor(comparison: Comparison, run: RunResult, base_run: RunResult, settings: Settings) -> Comparison:
    """``comparison`` with a ``newly-failing`` verdict for each compared case whose sampling falls short of
    this judge's own design (perfgate.judging.sequential.short_of_design): fewer processes a side, or stopped
    inconclusive where this judge would have looked again. The shards ran the pull request's settings; a
    pull request that sets `processes = 1` and `adaptive = false` must not make a slowdown inconclusive."""
    from perfgate.judging.compare import STATUS, STEP_TIME
    from perfgate.judging.gate_settings import gate_settings
    from perfgate.judging.sequential import short_of_design

    gs = gate_settings(settings)
    kinds = {v.case_key: v.kind for v in comparison.verdicts if v.metric == STEP_TIME}
    added = []
    for case in run.cases:
        base = base_run.case(case.key)
        if case.key not in kinds or base is None:
            continue  # not compared: its status verdict says why
        why = (short_of_design(gs, settings.processes, case, kinds[case.key])
               or short_of_design(gs, settings.processes, base, ""))
        if why:
            added.append(Verdict(case.key, STATUS, "newly-failing",
                                 rule=f"not enough evidence for this judge: {why}",
                                 advice="the shards' settings measured less than the base's gate would; run the "
                                        "shards with the base's [tool.perfgate] sampling settings"))
    return replace(comparison, verdicts=[*comparison.verdicts, *added]) if added else comparison


def judge_catalog(settings: Settings) -> Catalog:
    """This judge's own workloads (a worker probe of its workloads folders); ConfigError for a broken one."""
    catalog = Catalog.from_probe(workers.run_probe(settings.workloads_dirs, settings.threads))
    if catalog.errors:
        raise ConfigError(catalog.errors[0]["error"])
    return catalog


def expected_cases(settings: Settings, suite: str, run: RunResult, catalog: Catalog | None = None) -> list[CaseSpec]:
    """The cases of ``suite`` as this judge plans it: its own configuration and workloads (a worker probe of
    its workloads folders), on the device the shards measured where the suite says ``auto``."""
    from perfgate.running.plan import plan_cases

    catalog = catalog or judge_catalog(settings)
    chosen = settings.suite(suite)
    device = run.cases[0].spec.device if chosen.device == "auto" and run.cases else None
    return plan_cases(chosen, catalog, device=device)


def unmeasured(comparison: Comparison, run: RunResult, expected: Sequence[CaseSpec], suite: str) -> Comparison:
    """``comparison`` with a ``newly-failing`` verdict for each expected case that no shard measured."""
    from perfgate.judging.compare import STATUS

    have = {c.key for c in run.cases}
    added = [Verdict(s.key, STATUS, "newly-failing",
                     rule=f"in suite {suite!r} as this judge plans it (its configuration and workloads), measured "
                          "by no shard: a change dropped it from the suite (a toggle set, size or workload file "
                          "removed), or its shard did not run",
                     advice="none of the case's regressions can be seen: restore the case, or rerun the missing shard")
             for s in expected if s.key not in have]
    return replace(comparison, verdicts=[*comparison.verdicts, *added]) if added else comparison


def checked_skips(comparison: Comparison, run: RunResult, selection: Selection | None) -> Comparison:
    """``comparison`` with each case the shards skipped as unchanged (``run --changed-since``) that this judge's
    own ``selection`` runs made ``newly-failing``: which cases a change leaves alone is decided by the judge
    (its workloads, its reading of git), never by the shards, which ran the pull request's code. Without a
    selection (no ``--changed-since``) no such skip is taken."""
    from perfgate.judging.compare import STATUS

    doubted = {c.key: c for c in run.cases if c.skipped_as_unchanged
               and (selection is None or selection.runs(c.spec.workload))}
    if not doubted:
        return comparison
    why = ("this judge was given no --changed-since, so it runs every case" if selection is None else
           f"this judge's selection since {selection.since} runs it ({selection.describe()})")
    kept = [v for v in comparison.verdicts if v.case_key not in doubted]
    added = [Verdict(key, STATUS, "newly-failing",
                     rule=f"skipped by its shard as unchanged by this pull request, but {why}"[:600],
                     advice="run the shards with the judge's --changed-since REF (or --all), so that they measure "
                            "what the judge expects")
             for key in doubted]
    return replace(comparison, verdicts=[*kept, *added])


def check_rejudge_options(rejudge: bool, baseline_file: str | None, expect_suite: str | None,
                          changed_since: str | None) -> None:
    """ConfigError for a `perfgate merge` option --rejudge refuses (--baseline) or needs (--expect-suite,
    --changed-since)."""
    if rejudge and baseline_file:
        raise ConfigError("perfgate merge: --rejudge judges the shards' --against runs; it takes no --baseline")
    for given, name in ((expect_suite, "--expect-suite"), (changed_since, "--changed-since")):
        if given and not rejudge:
            raise ConfigError(f"perfgate merge: {name} checks the shards --rejudge judges; add --rejudge")


@dataclass(frozen=True)
class JudgeSelection:
    """`merge --changed-since SINCE [--head COMMIT | --changes FILE] [--all]`: how this judge reads a change."""

    since: str | None = None
    head: str | None = None
    changes_file: str | None = None
    run_all: bool = False

    def __post_init__(self) -> None:
        if (self.head or self.changes_file or self.run_all) and not self.since:
            raise ConfigError("perfgate merge: --head, --changes and --all choose this judge's --changed-since "
                              "selection; add --changed-since REF")
        if self.head and self.changes_file:
            raise ConfigError("perfgate merge: --changes lists the pull request's files, --head reads them from git; "
                              "give one")
        if self.changes_file:  # bad input is said before anything is merged or written
            found = changes.read_pull_request_files(Path(self.changes_file), Path.cwd())
            if isinstance(found, str):
                raise ConfigError(f"perfgate merge --changes: {found}")


def judge_selection(settings: Settings, catalog: Catalog, chosen: JudgeSelection) -> Selection | None:
    """The cases this judge lets a change skip, from its own workloads and git (or the files GitHub lists for
    the pull request); None without --changed-since."""
    since = chosen.since
    if not since:
        return None
    listed = Path(chosen.changes_file) if chosen.changes_file else None
    selection = changes.selection_for_run(settings.root, settings.source, catalog.workloads, since, chosen.run_all,
                                          chosen.head, listed)
    console.echo(f"perfgate: this judge's selection since {since}: {selection.describe()}")
    return selection


def _cases_by_key(path: Path) -> dict[str, CaseResult]:
    return {c.key: c for c in load_results(path).cases} if path.is_file() else {}


def judge_merged(run: RunResult, results: Sequence[str], out_dir: Path, settings: Settings | None, *, gate: bool,
                 baseline_file: str | None, strict_env: bool, rejudge: bool, expect_suite: str | None = None,
                 selection: JudgeSelection | None = None) -> int:
    """`perfgate merge` from the judging on; ``settings`` None when nothing is to be judged. With --rejudge,
    the shards' raw --against samples judged again; else the shards' own verdicts, or with a baseline (or
    shards that compared nothing) the stored comparison. Then the merged reports, and under --gate the job
    summary. With ``expect_suite`` (--rejudge only), a case of that suite as this judge plans it that no shard
    measured is ``newly-failing``; so is a case a shard skipped as unchanged that this judge's own
    ``selection`` runs (every case without --changed-since). Returns the exit code; gate.NoEvidence (exit 3)
    only once the reports are written."""
    code, no_evidence = gate_mod.EXIT_OK, None
    selection = selection or JudgeSelection()
    if settings is not None:
        if rejudge:
            comparison = judge_against(out_dir, run, settings)
            catalog = judge_catalog(settings) if expect_suite or selection.since else None
            if expect_suite:
                comparison = unmeasured(comparison, run, expected_cases(settings, expect_suite, run, catalog),
                                        expect_suite)
            comparison = checked_skips(comparison, run, judge_selection(settings, catalog, selection)
                                       if catalog else None)
        else:
            comparison = None if baseline_file else merged_comparison(results)  # type: ignore[assignment]  # None: judged below
        try:
            if comparison is not None:
                gate_mod.write_comparison(comparison, out_dir)
                code = gate_mod.conclude(comparison, gate, console.echo, run, out_dir)
            else:
                path = Path(baseline_file) if baseline_file else gate_mod.default_baseline_path(settings, run)
                code = gate_mod.compare_files(str(out_dir), str(path), settings, strict_env=strict_env, gate=gate,
                                              echo=console.echo)
        except gate_mod.NoEvidence as exc:  # exit 3 once the merged reports are written
            no_evidence = exc
    write_run_reports(run, out_dir, load_comparison_file(out_dir))
    console.echo(f"reports: {out_dir / 'report.html'} (also summary.md, junit.xml)")
    if gate:
        publish_summary(out_dir)
    if no_evidence:
        raise no_evidence
    return code
