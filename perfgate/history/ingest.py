"""Runs into the history: a run folder, a results.json or a merged CI run -> a RunRecord.

results.json is read with perfgate.model.results.load_results (the one reader of results files); what a run
lacks (its commit or branch) comes from git at ingest, and ``--commit/--branch`` override both.
No torch here.
"""

from __future__ import annotations

import math
import os
import subprocess
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from perfgate.history.store import MAX_MAGNITUDE, HistoryError, Store
from perfgate.history.writing import RunRecord, add_run
from perfgate.model.results import STATUS_OK, CaseResult, RunResult, load_results

# accuracy entries kept as metrics, under these names
DRIFT_METRICS = {"max_abs": "drift_max_abs", "mean_abs": "drift_mean_abs", "rel_l2": "drift_rel_l2"}


def _git(root: Path, *args: str) -> str | None:
    try:
        out = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    text = out.stdout.strip()
    return text if out.returncode == 0 and text else None


def git_commit_and_branch(root: Path) -> tuple[str | None, str | None]:
    """HEAD's commit and branch at ``root`` (branch None when detached; CI's GITHUB_REF_NAME then)."""
    commit = _git(root, "rev-parse", "HEAD")
    branch = _git(root, "rev-parse", "--abbrev-ref", "HEAD")
    if branch == "HEAD":
        branch = None
    return commit, branch or os.environ.get("GITHUB_REF_NAME") or None


def _finite(x: Any) -> float | None:
    """``x`` as a measurement the store keeps: a finite number of magnitude at most store.MAX_MAGNITUDE
    (a larger one is no measurement, and would overflow change detection's sums of squares); else None."""
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return None
    x = float(x)
    return x if math.isfinite(x) and abs(x) <= MAX_MAGNITUDE else None


def case_measurements(case: CaseResult, run: RunResult | None = None) -> list[dict[str, Any]]:
    """The statistics a case contributes: step_time (median of its samples with the interval the run's
    reports print, ``RunResult.step_time``: from its worker processes plus the run-to-run term, none with one
    process),
    throughput_steps_per_s, first_call_s, every numeric metric, and the accuracy drift figures."""
    out: list[dict[str, Any]] = []

    def put(metric: str, value: Any, low: Any = None, high: Any = None, n: int | None = None) -> None:
        v = _finite(value)
        if v is not None:
            out.append({"case_key": case.key, "metric": metric, "value": v, "ci_low": _finite(low),
                        "ci_high": _finite(high), "n": n})

    st = run.step_time(case) if run is not None else case.step_time()
    if st is not None:
        put("step_time", st.value, st.ci_low, st.ci_high, st.n)
        if st.value > 0:
            put("throughput_steps_per_s", 1.0 / st.value, 1.0 / st.ci_high if st.ci_high else None,
                1.0 / st.ci_low if st.ci_low else None, st.n)
        put("first_call_s", case.first_call_s)
    for name, value in sorted(case.metrics.items()):
        if name not in ("step_time", "throughput_steps_per_s", "first_call_s"):
            put(str(name), value)
    for key, metric in DRIFT_METRICS.items():
        put(metric, case.accuracy.get(key))
    return out


def record_from_run(run: RunResult, source: str | None, root: Path, commit: str | None = None,
                    branch: str | None = None) -> RunRecord:
    """The store's record of ``run``. Commit and branch: the overrides, else the run's environment
    (git_commit, git_branch), else git at ``root`` now; a run that recorded git_commit as null (measured
    outside a checkout, or before its first commit) keeps no commit rather than today's HEAD."""
    env = run.environment
    run_commit = commit or env.get("git_commit")
    run_branch = branch or env.get("git_branch")
    if not run_commit or not run_branch:
        git_commit, git_branch = git_commit_and_branch(root)
        if commit is None and "git_commit" not in env:
            run_commit = git_commit
        run_branch = run_branch or git_branch
    if not isinstance(run.run_id, str) or not run.run_id.strip() or len(run.run_id) > 255:
        raise HistoryError(f"{source}: run_id must be a non-empty string of at most 255 characters, got {run.run_id!r:.80}")
    rows = [{"case_key": c.key, "workload": c.spec.workload, "size": c.spec.size, "toggles": c.spec.toggle_name,
             "device": c.spec.device, "status": c.status, "failure_class": c.failure_class} for c in run.cases]
    for row in rows:
        for name, value in row.items():
            _check_text(source, f"case {row['case_key'][:80]!r}: {name}", value, FIELD_LIMITS[name])  # type: ignore[index]  # a case key: a string
    for name, value in (("suite", run.suite), ("commit", run_commit), ("branch", run_branch),
                        ("machine_key", env.get("machine_key"))):
        _check_text(source, name, value, FIELD_LIMITS[name])
    seen: set[str] = set()
    for row in rows:
        if row["case_key"] in seen:
            raise HistoryError(f"{source}: case {row['case_key']} appears twice in one run")
        seen.add(row["case_key"])  # type: ignore[arg-type]  # as above
    meas = [m for c in run.cases if c.status == STATUS_OK for m in case_measurements(c, run)]
    for m in meas:
        _check_text(source, f"case {m['case_key'][:80]!r}: metric name", m["metric"], FIELD_LIMITS["metric"])
    return RunRecord(run_id=run.run_id, suite=run.suite, commit=str(run_commit) if run_commit else None,
                     branch=str(run_branch) if run_branch else None,
                     started_at=utc_time(run.started_at or run.finished_at, source), machine_key=env.get("machine_key"),
                     environment=env, settings=run.settings, source=source, cases=rows, measurements=meas)


# the store's column widths (perfgate.history.store): longer text is refused, never cut
FIELD_LIMITS = {"case_key": 512, "workload": 255, "size": 255, "toggles": 255, "device": 64, "status": 32,
                "failure_class": 64, "suite": 255, "commit": 64, "branch": 255, "machine_key": 255, "metric": 128}


def _check_text(source: str | None, what: str, value: Any, limit: int) -> None:
    if value is None:
        return
    if not isinstance(value, str) or len(value) > limit or "\x00" in value:
        raise HistoryError(f"{source}: {what} must be text of at most {limit} characters, got {str(value)[:80]!r}")


def utc_time(text: str | None, source: str | None) -> str:
    """A run's start time as UTC ``YYYY-MM-DDTHH:MM:SSZ``, so that runs from runners in other time zones
    sort by when they ran. results.json writes local time with its offset (``%Y-%m-%dT%H:%M:%S%z``)."""
    if not text:
        raise HistoryError(f"{source}: the run has no started_at time; a history orders runs by it")
    for fmt in ("%Y-%m-%dT%H:%M:%S%z", "%Y-%m-%dT%H:%M:%S.%f%z", "%Y-%m-%dT%H:%M:%S"):
        try:
            t = datetime.strptime(str(text), fmt)
        except ValueError:
            continue
        if t.tzinfo is not None:
            t = t.astimezone(timezone.utc)
        return t.strftime("%Y-%m-%dT%H:%M:%SZ")
    raise HistoryError(f"{source}: started_at {str(text)[:40]!r} is not an ISO time (YYYY-MM-DDTHH:MM:SS+HHMM)")


def resolve_inputs(paths: Sequence[str]) -> list[Path]:
    """Each argument's results.json: a results file, a run folder, or a folder of run folders (a CI
    download). SchemaError-free: a path with no results.json is a HistoryError naming it."""
    found: list[Path] = []
    for raw in paths:
        p = Path(raw)
        if p.is_file():
            found.append(p)
        elif p.is_dir() and (p / "results.json").is_file():
            found.append(p / "results.json")
        elif p.is_dir():
            inner = sorted(d / "results.json" for d in p.iterdir() if (d / "results.json").is_file())
            if not inner:
                raise HistoryError(f"{p}: no results.json in this folder or its sub-folders; give a run folder "
                                   "(reports/<run-id>) or a results.json")
            found.extend(inner)
        else:
            raise HistoryError(f"{p}: no such file or folder; give a run folder (reports/<run-id>) or a results.json")
    return found


def load_records(paths: Sequence[str], root: Path, commit: str | None = None,
                 branch: str | None = None) -> list[RunRecord]:
    """Every input read and validated before anything is written (a bad one leaves the store untouched)."""
    files = resolve_inputs(paths)
    if (commit or branch) and len(files) > 1:
        raise HistoryError(f"--commit/--branch name one run's commit; {len(files)} runs were given")
    return [record_from_run(load_results(f), str(f), root, commit, branch) for f in files]


def add_records(store: Store, records: Sequence[RunRecord]) -> list[tuple[RunRecord, bool]]:
    """Add each record; (record, added) per record, added False where it was already there."""
    return [(r, add_run(store, r)) for r in records]
