"""Shards: choosing one shard's cases for `perfgate run --shard I/N`, and joining shard results into one
run for `perfgate merge`. No torch: merging runs on a CI machine with no GPU.

Shard results join only when they are parts of the same measurement: same schema version, suite,
environment (hardware, torch, CUDA, Python, perfgate, commit) and measuring settings, and no case twice.
Anything else is refused with one line naming the first file that disagrees and how. The merged run is
judged as one (its shards' own verdicts, judged again, or a stored baseline) by perfgate.gating.merged_gate.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from perfgate.judging.baselines import baseline_path, commit_of, with_commit
from perfgate.model.config import ConfigError, Settings
from perfgate.model.environment_keys import JOINED, MERGED, TUNING_ENV, keys_with, tuning_variables
from perfgate.model.results import CaseResult, CaseSpec, RunResult, SchemaError, load_results
from perfgate.reports import console
from perfgate.reports.cost import read_cost
from perfgate.running import runner
from perfgate.running.plan import Shard, costs_from_results, expected_costs, load_costs, partition_cases
from perfgate.running.runner import write_results
from perfgate.util.formatting import format_environment
from perfgate.util.storage import check_writable_dir
from perfgate.util.validation import read_json_file

# Environment keys that make two shards one measurement (environment_keys.KEYS). Host names, paths and PIDs
# may differ between runners of one pool; the hardware and software that set the numbers may not.
ENVIRONMENT_KEYS = keys_with(MERGED)
# Settings that change what a sample means; the rest (timeouts, config paths) may differ.
SETTINGS_KEYS = keys_with(MERGED, recorded_in="settings")
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


def _differences(a: dict[str, Any], b: dict[str, Any], keys: Sequence[str]) -> str | None:
    """Every key of ``keys`` whose value in ``b`` differs from ``a``'s, in their order, in one line; None if none."""
    said = [f"{k} {b.get(k)!r} (expected {a.get(k)!r})" for k in keys if a.get(k) != b.get(k)]
    return ", ".join(said) or None


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
        diff = _differences(first.environment, run.environment, ENVIRONMENT_KEYS)
        if diff:
            raise ConfigError(f"{where}: environment differs from {first_path}: {diff}; "
                              "shards must run on identical machines and software")
        diff = _differences(first.settings, run.settings, SETTINGS_KEYS)
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
    joined where they differ (environment_keys.JOINED: those that are one measurement's, MERGED, never do);
    the variables that tune the workers (``tuning_env``) per variable."""
    environment = dict(runs[0].environment)
    if any(r.environment.get("git_dirty") is True for r in runs):
        environment["git_dirty"] = True
    for key in keys_with(JOINED):
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


