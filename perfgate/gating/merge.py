"""Shards: choosing one shard's cases for `perfgate run --shard I/N`, and joining shard results into one
run for `perfgate merge`. No torch: merging runs on a CI machine with no GPU.

Shard results join only when they are parts of the same measurement: same schema version, suite,
environment (hardware, torch, CUDA, Python, perfgate, commit) and measuring settings, and no case twice.
Anything else is refused with one line naming the first file that disagrees and how. The merged run is
judged as one (its shards' own verdicts, judged again, or a stored baseline) through perfgate.gating.gate.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from perfgate.gating import gate as gate_mod
from perfgate.judging.baselines import baseline_path, commit_of, with_commit
from perfgate.model import acknowledge
from perfgate.model.config import ConfigError, Settings
from perfgate.model.environment_keys import ENVIRONMENT_KEYS as COMPARED_ENVIRONMENT_KEYS
from perfgate.model.environment_keys import TUNING_ENV, tuning_variables
from perfgate.model.results import (
    Acknowledgement,
    CaseResult,
    CaseSpec,
    Comparison,
    RunResult,
    SchemaError,
    Verdict,
    load_results,
)
from perfgate.reports import console, write_run_reports
from perfgate.reports.cost import read_cost
from perfgate.running import changes, runner, workers
from perfgate.running.changes import Selection
from perfgate.running.github import publish_summary
from perfgate.running.plan import Catalog, Shard, costs_from_results, expected_costs, load_costs, partition_cases
from perfgate.running.runner import write_results
from perfgate.util.formatting import format_environment
from perfgate.util.storage import check_writable_dir
from perfgate.util.validation import Fields, read_json_file

# Environment keys that make two shards one measurement. Host names, paths and PIDs may differ between
# runners of one pool; the hardware and software that set the numbers may not.
ENVIRONMENT_KEYS = (
    "machine_key", "machine", "device_name", "compute_capability", "nvidia_driver", "torch", "torch_cuda",
    "cudnn", "python", "python_implementation", "perfgate", "git_commit",
)
# Settings that change what a sample means; the rest (timeouts, config paths) may differ.
SETTINGS_KEYS = ("threads", "processes", "seed", "timing")
# Files of a shard's run folder that belong to the shard alone; the merged run writes its own.
SHARD_ONLY_FILES = ("results.json", "summary.md", "report.html", "junit.xml", "comparison.json", ".work",
                    "results-remeasure.json")
# Runs inside a run's folder that belong to it: the base ref's run of `--against`.
SUB_RUNS = ("base",)
REMEASURE_FILE = "results-remeasure.json"


def select_shard(cases: Sequence[CaseSpec], shard: Shard, costs_path: str | Path | None, settings: Settings,
                 suite: str, machine_key: str) -> tuple[list[CaseSpec], dict[str, Any]]:
    """The cases of ``shard`` and the record of how they were chosen (stored as ``settings.shard``).

    Costs come from ``costs_path`` when given, else the suite's baseline for this machine when there is
    one (baselines/<machine>/<suite>.json), else an estimate from the toggles.
    """
    timed: dict[str, float] = {}
    source = "estimate"
    if costs_path is not None:
        timed, source = load_costs(costs_path), str(costs_path)
    else:
        baseline = baseline_path(settings.baselines_dir, machine_key, suite)
        if baseline.is_file():
            try:
                timed, source = costs_from_results(read_json_file(baseline, "baseline")), str(baseline)
            except SchemaError:
                timed = {}  # an unreadable baseline fails the gate later, with its own message
    if not any(c.key in timed for c in cases):
        source = "estimate"
    parts = partition_cases(cases, shard.count, expected_costs(cases, timed))
    record = {
        "index": shard.index,
        "count": shard.count,
        "cases_total": len(cases),
        "cost_source": source,
        "plan": [c.key for c in cases],
    }
    return parts[shard.index - 1], record


def run_folders_below(root: Path) -> list[Path]:
    """The shallowest results.json files under ``root``: a run folder's own sub-runs (the base run of
    ``--against`` in base/, re-measurements) belong to that run and are not shards of their own."""
    found: list[Path] = []
    for f in sorted(root.rglob("results.json"), key=lambda q: (len(q.parts), str(q))):
        if not any(r.parent in f.parents for r in found):
            found.append(f)
    return sorted(found)


def refuse_links(root: Path) -> None:
    """ConfigError when ``root`` or anything below it is a symbolic link. Shard folders come from other
    jobs (untrusted): a link would have merge copy its target's content (any file this job can read) into
    the merged run, or recurse through a link to a parent folder."""
    if root.is_symlink():
        raise ConfigError(f"cannot merge {root}: it is a symbolic link; give the shard folder itself")
    for folder, dirs, files in os.walk(root, followlinks=False):
        for name in (*dirs, *files):
            entry = Path(folder) / name
            if entry.is_symlink():
                raise ConfigError(f"cannot merge {root}: {entry} is a symbolic link (to {os.readlink(entry)!r}); "
                                  "shard folders must hold plain files and folders only")


def find_results(paths: Sequence[str | Path]) -> list[Path]:
    """results.json files named by ``paths``: a file, a run folder, or a folder of downloaded run folders.
    ConfigError for a symbolic link anywhere in them (``refuse_links``)."""
    found: list[Path] = []
    for raw in paths:
        p = Path(raw)
        if p.is_symlink() or p.is_dir():
            refuse_links(p)
        elif p.is_file():
            refuse_links(p.parent)  # the folder merge copies the traces from
        if p.is_file():
            found.append(p)
        elif (p / "results.json").is_file():
            found.append(p / "results.json")
        elif p.is_dir():
            nested = run_folders_below(p)
            if not nested:
                raise ConfigError(f"{p}: no results.json in this folder or below it")
            found.extend(nested)
        else:
            raise ConfigError(f"{p}: no such results file or folder")
    unique = list(dict.fromkeys(f.resolve() for f in found))
    if not unique:
        raise ConfigError("no results to merge; give results.json files or run folders")
    return unique


def refuse_out_in_shard(files: Sequence[Path], out_dir: str | Path) -> None:
    """ConfigError when ``out_dir`` is one of the shard folders of ``files`` or lies inside one: merging would
    replace that shard's results.json with the merged run's, or copy the shard into itself (out/out/...).
    A folder beside the shards, or above them (the folder of downloaded shards), is fine."""
    out = Path(out_dir).resolve()
    for f in files:
        shard_dir = f.parent.resolve()
        if out == shard_dir or shard_dir in out.parents:
            where = "is the shard folder" if out == shard_dir else "is inside the shard folder"
            raise ConfigError(f"perfgate merge: --out {out_dir} {where} {f.parent}; "
                              "give a folder outside every shard folder")


def _raw_schema(path: Path) -> Any:
    try:
        data = read_json_file(path, "results")
    except SchemaError:
        return None  # load_results reports it properly
    return data.get("schema") if isinstance(data, dict) else None


def _first_difference(a: dict[str, Any], b: dict[str, Any], keys: Sequence[str]) -> str | None:
    for k in keys:
        if a.get(k) != b.get(k):
            return f"{k} {b.get(k)!r} (expected {a.get(k)!r})"
    return None


def shard_indices(shard: dict[str, Any] | None) -> list[int]:
    """The shard numbers a run's shard record holds: its ``index`` (`run --shard`), or the ``merged`` list of a
    run `perfgate merge` wrote (merged again, it stands for those shards), else none."""
    if not shard:
        return []
    if shard.get("index") is not None:
        return [shard["index"]]
    return list(shard.get("merged") or [])


def check_compatible(runs: Sequence[tuple[Path, RunResult, Any]]) -> None:
    """Raise ConfigError unless every run is a part of the same measurement as the first."""
    first_path, first, first_schema = runs[0]
    shard0 = first.settings.get("shard")
    seen: dict[str, Path] = {}
    shard_seen: dict[int, Path] = {}
    for path, run, schema in runs:
        where = f"cannot merge {path}"
        if schema != first_schema:
            raise ConfigError(f"{where}: schema {schema!r} differs from {first_path}'s {first_schema!r}; "
                              "rerun the shards with one perfgate version")
        if run.suite != first.suite:
            raise ConfigError(f"{where}: suite {run.suite!r} differs from {first_path}'s {first.suite!r}")
        diff = _first_difference(first.environment, run.environment, ENVIRONMENT_KEYS)
        if diff:
            raise ConfigError(f"{where}: environment differs from {first_path}: {diff}; "
                              "shards must run on identical machines and software")
        diff = _first_difference(first.settings, run.settings, SETTINGS_KEYS)
        if diff:
            raise ConfigError(f"{where}: settings differ from {first_path}: {diff}")
        shard = run.settings.get("shard")
        if (shard is None) != (shard0 is None) or (
                shard and (shard.get("count"), shard.get("plan")) != (shard0.get("count"), shard0.get("plan"))):  # type: ignore[union-attr]  # both set: the line above
            raise ConfigError(f"{where}: not a shard of the same plan as {first_path} "
                              "(different --shard N, selection or unsharded run)")
        for index in shard_indices(shard):
            if index in shard_seen:
                raise ConfigError(f"{where}: shard {index}/{shard.get('count')} was already given by {shard_seen[index]}")  # type: ignore[union-attr]  # indices: a shard
            shard_seen[index] = path
        for case in run.cases:
            if case.key in seen:
                raise ConfigError(f"{where}: case {case.key} is also in {seen[case.key]}; each case must come from one shard")
            seen[case.key] = path


def merged_environment(runs: Sequence[RunResult]) -> dict[str, Any]:
    """The first shard's environment, with what the shards may differ in said for all of them: dirty
    (``git_dirty``) when any shard ran on a tree with uncommitted changes, so `baseline update` and the
    gate's lockstep see it; host names, and the keys a comparison reports (CPU model, address layout),
    joined where they differ; the variables that tune the workers (``tuning_env``) per variable."""
    environment = dict(runs[0].environment)
    if any(r.environment.get("git_dirty") is True for r in runs):
        environment["git_dirty"] = True
    for key in ("hostname", *COMPARED_ENVIRONMENT_KEYS):
        values = sorted({str(r.environment.get(key)) for r in runs})
        if len(values) > 1:
            environment[key] = ", ".join(values)
    tuning = [tuning_variables(r.environment.get(TUNING_ENV)) for r in runs]
    if all(t is not None for t in tuning) and any(t != tuning[0] for t in tuning):
        # each variable as every shard had it (absent: "none"), so a comparison names what differed
        names = sorted({k for t in tuning for k in t or {}})
        environment[TUNING_ENV] = [f"{n}=" + ", ".join(sorted({format_environment((t or {}).get(n)) for t in tuning}))
                                   for n in names]
    return environment


def _rewrite_paths(case: CaseResult, old_root: Path, new_root: Path) -> CaseResult:
    """Trace paths inside a shard's folder point into the merged folder, where the traces are copied."""
    profile = dict(case.profile)
    changed = False
    for k, v in case.profile.items():
        if isinstance(v, str) and k.startswith("trace"):
            try:
                rel = Path(v).relative_to(old_root)
            except ValueError:
                continue
            profile[k], changed = str(new_root / rel), True
    return replace(case, profile=profile) if changed else case


def _copy_shard_files(shard_dir: Path, out: Path) -> None:
    """Traces and other files of a shard's folder into the merged folder; what belongs to the shard
    alone (its results, reports, comparison, sub-runs such as base/) is merged separately or rewritten."""
    if shard_dir == out:
        return

    def ignore(d: str, names: list[str]) -> list[str]:
        if Path(d) != shard_dir:
            return []
        return [n for n in names if n in SHARD_ONLY_FILES or n in SUB_RUNS]

    shutil.copytree(shard_dir, out, dirs_exist_ok=True, ignore=ignore)


def _load_all(files: Sequence[Path]) -> list[tuple[Path, RunResult, Any]]:
    runs = []
    for f in files:
        schema = _raw_schema(f)
        try:
            runs.append((f, load_results(f), schema))
        except SchemaError as exc:
            raise ConfigError(f"cannot merge {exc}") from exc
    return runs


def merge_runs(paths: Sequence[str | Path], out_dir: str | Path) -> tuple[RunResult, list[str]]:
    """Join shard results into one run for ``out_dir`` (its results.json is the caller's to write);
    copies each shard's traces there, and merges the shards' sub-runs (the ``--against`` base run in
    base/, re-measurements) into the same places under ``out_dir``. Returns the run and warnings."""
    out = Path(out_dir).resolve()
    files = find_results(paths)
    refuse_out_in_shard(files, out_dir)
    runs = _load_all(files)
    check_compatible(runs)
    for sub in SUB_RUNS:
        subs = [f.parent / sub / "results.json" for f, _, _ in runs]
        present = [f for f in subs if f.is_file()]
        # a shard that measured nothing (no case drawn, or each skipped as unchanged) ran no base side either
        measured = [f.parent / sub / "results.json" for f, r, _ in runs
                    if any(not c.skipped_as_unchanged for c in r.cases)]
        if present and any(not f.is_file() for f in measured):
            raise ConfigError(f"cannot merge: only some shards have a {sub}/ run "
                              f"(e.g. {present[0].parent.parent}); run every shard with the same options")
        if present:
            sub_run, _ = merge_runs(present, out / sub)
            write_results(sub_run, out / sub / "results.json")
    remeasured = [c for f, _, _ in runs if (f.parent / REMEASURE_FILE).is_file()
                  for c in load_results(f.parent / REMEASURE_FILE).cases]
    first = runs[0][1]
    if remeasured:
        write_results(replace(first, run_id=out.name, cases=remeasured), out / REMEASURE_FILE)
    shard0 = first.settings.get("shard")
    environment = merged_environment([r for _, r, _ in runs])
    cases: list[CaseResult] = []
    for f, run, _ in runs:
        shard_dir = f.parent.resolve()
        _copy_shard_files(shard_dir, out)
        # each case keeps the tree it was measured in where the merged record says otherwise (a clean
        # shard's cases in a run that another, dirty shard makes dirty): baseline update and repro read it
        cases.extend(with_commit(_rewrite_paths(c, shard_dir, out), commit_of(run, c.key), environment)
                     for c in run.cases)
    warnings: list[str] = []
    settings = dict(first.settings)
    if shard0:
        plan = shard0.get("plan", [])
        order = {k: i for i, k in enumerate(plan)}
        cases.sort(key=lambda c: order.get(c.key, len(order)))
        merged = sorted(i for _, r, _ in runs for i in shard_indices(r.settings.get("shard")))
        absent = [i for i in range(1, shard0["count"] + 1) if i not in merged]
        have = {c.key for c in cases}
        missing = [k for k in plan if k not in have]
        if absent:
            count = shard0["count"]
            warnings.append(f"shard(s) {', '.join(f'{i}/{count}' for i in absent)} not given; "
                            f"{len(missing)} case(s) of the plan have no result")
        elif missing:
            warnings.append(f"{len(missing)} planned case(s) have no result: {', '.join(missing[:5])}"
                            + (" ..." if len(missing) > 5 else ""))
        # each shard's wall and device time, as its own report showed it (perfgate.reports.cost)
        costs = [c.to_json() for f, r, _ in runs for c in read_cost(r, f.parent).shards]
        settings["shard"] = {"merged": merged, "count": shard0["count"], "cases_total": len(plan),
                             "missing_cases": missing, "plan": plan, "costs": costs}
    starts = [r.started_at for _, r, _ in runs if r.started_at]
    ends = [r.finished_at for _, r, _ in runs if r.finished_at]
    merged_run = RunResult(
        run_id=out.name, suite=first.suite, environment=environment, cases=cases,
        started_at=min(starts) if starts else "", finished_at=max(ends) if ends else None,
        settings=settings, expectations=first.expectations, ceilings=first.ceilings,
    )
    return merged_run, warnings


COMPARISON_FILE = "comparison.json"


def comparison_from_json(data: Any, source: str) -> Comparison:
    """A Comparison read back from a comparison.json; SchemaError naming ``source`` and the field if malformed."""
    f = Fields(data, source, "")
    verdicts = f.get("verdicts", f.array, required=True)
    def pair(value: Any, where: str) -> list[Any]:
        """[baseline, this run]: report.html's environment table shows both (a shorter list crashed it)."""
        if not isinstance(value, list) or len(value) != 2:
            f.fail(where, "a [baseline, this run] pair", value)
        return value

    env_diff = f.get("environment_diff", f.values(pair), {})
    return Comparison(
        verdicts=[Verdict.from_json(v, source, f"verdicts[{i}]") for i, v in enumerate(verdicts)],
        mode=f.get("mode", f.one_of(("baseline", "against")), "baseline"),
        baseline_source=f.get("baseline_source", f.string),
        environment_diff=dict(env_diff),
        warnings=list(f.get("warnings", f.each(f.string), [])),
        acknowledgements=[Acknowledgement.from_json(a, source, f"acknowledgements[{i}]")
                          for i, a in enumerate(f.get("acknowledgements", f.array, []))],
        acknowledged_on=f.get("acknowledged_on", f.string),
    )


def read_comparison(path: Path) -> Comparison:
    """The Comparison in the comparison.json at ``path``; SchemaError (exit 2) naming it when unreadable."""
    return comparison_from_json(read_json_file(path, "comparison"), str(path))


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


def load_comparison_file(run_dir: str | Path) -> Comparison | None:
    """The comparison.json of a run folder, or None when the run was not compared."""
    f = Path(run_dir) / COMPARISON_FILE
    if not f.is_file():
        return None
    return read_comparison(f)


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


def merge_into(results: Sequence[str], out_dir: Path) -> RunResult:
    """`perfgate merge` up to the judging: the shards joined into ``out_dir`` (checked writable first), its
    results.json written, the warnings and the run's tables printed. An ``out_dir`` in a shard folder is
    refused before anything is created."""
    refuse_out_in_shard(find_results(results), out_dir)
    problem = check_writable_dir(out_dir)
    if problem:
        raise ConfigError(problem)
    run, warnings = merge_runs(results, out_dir)
    write_results(run, out_dir / "results.json")
    for w in warnings:
        console.echo(f"perfgate: warning: {w}", err=True)
    console.echo(console.run_tables(run))
    console.echo(f"\n{runner.summary_status(run) or 'no cases'}; merged results: {out_dir / 'results.json'}")
    return run


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
