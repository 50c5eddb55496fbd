"""Runs and history as pandas DataFrames, for notebooks. No torch here; ``import perfgate`` does not import
this module (nor pandas) until ``perfgate.load`` or a sibling is first used.

- ``load(path)``: one row per case (spec, status, step-time statistics, every metric, verdicts when the
  run folder holds a comparison.json)
- ``load_samples(path)``: every timed sample of every worker process, one row each (long format)
- ``load_verdicts(path)``: every verdict of the run's comparison.json, one row per case x metric
- ``load_history(url, ...)``: series from a history store, one row per run x case x metric

Every file goes through the readers the CLI uses (perfgate.model.results, perfgate.gating.comparison_file, perfgate.history), so
an untrusted file gets the same checks. Bad input raises ``SchemaError`` (a run that cannot be read) or
``HistoryError`` (a store that cannot be used), both ``ValueError``s with one line naming the path and
what would be valid. The user's guide is docs/notebook.md.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from perfgate.gating.comparison_file import COMPARISON_FILE, read_comparison
from perfgate.history.store import HistoryError
from perfgate.model.comparison import Comparison
from perfgate.model.results import RunResult
from perfgate.util.validation import SchemaError, read_json_file

__all__ = ["HistoryError", "SchemaError", "load", "load_history", "load_samples", "load_verdicts"]

RESULTS_FILE = "results.json"
WHAT_LOAD_TAKES = "a perfgate run folder (holding results.json) or a results.json file"

# The columns every cases frame has, in order, before its parameters, metrics and verdicts.
SPEC_COLUMNS = ("run_id", "workload", "size", "toggles", "device", "dtype")
STATUS_COLUMNS = ("status", "failure_class", "message", "duration_s")
STEP_TIME_COLUMNS = (
    "step_time_s", "step_time_median_s", "step_time_ci_low_s", "step_time_ci_high_s", "step_time_q1_s", "step_time_q3_s",
    "step_time_mean_s", "step_time_stdev_s", "step_time_min_s", "step_time_max_s", "step_time_confidence",
    "samples", "processes", "between_process_spread", "throughput_steps_per_s", "first_call_s",
    "speedup_vs_eager", "speedup_low", "speedup_high",
)
ACCURACY_COLUMNS = ("accuracy_verdict", "accuracy_max_abs", "accuracy_mean_abs", "accuracy_rel_l2")
STEP_VERDICT_COLUMNS = ("step_time_baseline_s", "step_time_current_s", "step_time_ratio", "step_time_ratio_low", "step_time_ratio_high",
                        "step_time_p_value", "step_time_threshold")
FIXED_COLUMNS = (*SPEC_COLUMNS, *STATUS_COLUMNS, *STEP_TIME_COLUMNS, *ACCURACY_COLUMNS)
SAMPLE_COLUMNS = ("run_id", "case", "process", "sample", "layout_group", "burst", "step_time_s")
VERDICT_COLUMNS = ("case", "metric", "kind", "baseline", "current", "ratio", "ratio_low", "ratio_high", "p_value",
                   "threshold", "rule", "advice")
HISTORY_COLUMNS = ("case", "workload", "size", "toggles", "device", "metric", "run_id", "commit", "branch",
                   "started_at", "machine_key", "value", "ci_low", "ci_high", "n")


# ---------------------------------------------------------------- reading a run

def _results_path(path: str | os.PathLike[str]) -> Path:
    """The results.json ``path`` names; SchemaError saying what load takes when it names none."""
    if not isinstance(path, (str, os.PathLike)):
        raise SchemaError(f"{path!r}: not a path; perfgate.load takes {WHAT_LOAD_TAKES}")
    p = Path(path).expanduser()
    if p.is_dir():
        f = p / RESULTS_FILE
        if not f.is_file():
            raise SchemaError(f"{p}: not a perfgate run folder (no {RESULTS_FILE} in it); expected {WHAT_LOAD_TAKES}")
        return f
    if not p.exists():
        raise SchemaError(f"{p}: no such file or folder; expected {WHAT_LOAD_TAKES}")
    return p


def _read_run(path: str | os.PathLike[str]) -> tuple[Path, RunResult]:
    f = _results_path(path)
    return f, RunResult.from_json(read_json_file(f, "results"), source=str(f))


def _read_comparison(results: Path) -> Comparison | None:
    """The comparison.json beside ``results``, or None when the run was not compared."""
    f = results.parent / COMPARISON_FILE
    return read_comparison(f) if f.is_file() else None


def _number(x: Any) -> float:
    """A measured value as a float column cell: NaN for None and for anything not a number."""
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return math.nan
    return float(x)


def load(path: str | os.PathLike[str]) -> pd.DataFrame:
    """The cases of a run as a DataFrame, one row per case, indexed by the case key
    (workload/size/toggles/device).

    ``path`` is a run folder (holding results.json) or a results.json file. Columns: ``run_id``, the spec
    (``workload``, ``size``, ``toggles`` joined by ``+``, ``device``, ``dtype``, and ``param.NAME`` per
    size parameter), the status (``status``, ``failure_class``, ``message``, ``duration_s``), the step
    time in seconds per step over every sample of every process (``step_time_s`` the median, its 95%
    interval for another run ``step_time_ci_low_s``/``step_time_ci_high_s``, NaN with one process: from the
    worker processes plus the run-to-run term, docs/reports.md; quartiles, mean, stdev, min, max, ``samples``,
    ``processes``, ``between_process_spread``), ``throughput_steps_per_s``, ``first_call_s``, the speedup
    against eager in the same run with its interval (NaN with one process), the accuracy drift (``accuracy_*``), then one column per
    metric any case carries (``kernels_per_step``, ``peak_rss_bytes``...; a metric whose name is taken by
    a column above is ``metric.NAME``). NaN where a case has no value (a skipped case has no step time).

    When the run folder holds a comparison.json (``perfgate compare``, ``run --gate``, ``run --against``):
    ``verdict`` (the case's worst verdict kind, as the reports mark it), ``gate_fails`` (a verdict of the
    case fails the gate), ``verdict.METRIC`` (the kind per judged metric: step_time, accuracy, status,
    kernels_per_step...) and the step-time verdict's numbers (``step_time_baseline_s`` and
    ``step_time_current_s``, the gate's statistic of each side, which is not the pooled median above;
    ``step_time_ratio`` with ``step_time_ratio_low``/``_high``, ``step_time_p_value``, ``step_time_threshold``).

    ``frame.attrs`` holds the run's ``run_id``, ``suite``, ``environment``, ``settings``, ``source`` (the
    results.json read) and, when compared, ``comparison`` (mode, baseline_source, warnings, gate_failed).

    Raises SchemaError (a ValueError) naming the path when it is not a run or its files are malformed.
    """
    from perfgate.reports.base import ReportInput

    results, run = _read_run(path)
    comparison = _read_comparison(results)
    rows = ReportInput(run, comparison, run_dir=results.parent).rows
    metric_names = sorted({m for c in run.cases for m in c.metrics})
    params = sorted({k for c in run.cases for k in c.spec.param_dict})
    judged = sorted({v.metric for v in comparison.verdicts}) if comparison else []
    fixed = {"case", *FIXED_COLUMNS, "verdict", "gate_fails", *STEP_VERDICT_COLUMNS}
    metric_column = {m: f"metric.{m}" if m in fixed else m for m in metric_names}

    records: list[dict[str, Any]] = []
    for r in rows:
        c, st, sp = r.case, r.step_time, r.speedup
        rec: dict[str, Any] = {
            "case": c.key, "run_id": run.run_id, "workload": c.spec.workload, "size": c.spec.size,
            "toggles": c.spec.toggle_name, "device": c.spec.device, "dtype": c.spec.dtype,
            "status": c.status, "failure_class": c.failure_class, "message": c.message,
            "duration_s": _number(c.duration_s),
        }
        rec.update({f"param.{k}": c.spec.param_dict.get(k) for k in params})
        rec.update({
            "step_time_s": st.value if st else math.nan,
            "step_time_median_s": st.median if st else math.nan,
            "step_time_ci_low_s": _number(st.ci_low) if st else math.nan,
            "step_time_ci_high_s": _number(st.ci_high) if st else math.nan,
            "step_time_q1_s": st.q1 if st else math.nan,
            "step_time_q3_s": st.q3 if st else math.nan,
            "step_time_mean_s": st.mean if st else math.nan,
            "step_time_stdev_s": st.stdev if st else math.nan,
            "step_time_min_s": st.minimum if st else math.nan,
            "step_time_max_s": st.maximum if st else math.nan,
            "step_time_confidence": st.confidence if st else math.nan,
            "samples": st.n if st else None,
            "processes": st.n_processes if st else None,
            "between_process_spread": st.between_process_spread if st else math.nan,
            "throughput_steps_per_s": 1.0 / st.value if st and st.value > 0 else math.nan,
            "first_call_s": _number(c.first_call_s),
            "speedup_vs_eager": _number(sp.value) if sp else math.nan,
            "speedup_low": _number(sp.low) if sp else math.nan,
            "speedup_high": _number(sp.high) if sp else math.nan,
            "accuracy_verdict": c.accuracy.get("verdict"),
            "accuracy_max_abs": _number(c.accuracy.get("max_abs")),
            "accuracy_mean_abs": _number(c.accuracy.get("mean_abs")),
            "accuracy_rel_l2": _number(c.accuracy.get("rel_l2")),
        })
        rec.update({metric_column[m]: _number(c.metrics.get(m)) for m in metric_names})
        if comparison is not None:
            rec["verdict"] = r.marker if r.verdicts else None
            rec["gate_fails"] = r.has_regression
            kinds = {v.metric: v.kind for v in r.verdicts}
            rec.update({f"verdict.{m}": kinds.get(m) for m in judged})
            v = r.step_verdict
            rec.update({
                "step_time_baseline_s": _number(v.baseline) if v else math.nan,
                "step_time_current_s": _number(v.current) if v else math.nan,
                "step_time_ratio": _number(v.ratio) if v else math.nan,
                "step_time_ratio_low": _number(v.ratio_low) if v else math.nan,
                "step_time_ratio_high": _number(v.ratio_high) if v else math.nan,
                "step_time_p_value": _number(v.p_value) if v else math.nan,
                "step_time_threshold": _number(v.threshold) if v else math.nan,
            })
        records.append(rec)

    columns = ["case", *SPEC_COLUMNS, *(f"param.{k}" for k in params), *STATUS_COLUMNS, *STEP_TIME_COLUMNS,
               *ACCURACY_COLUMNS, *(metric_column[m] for m in metric_names)]
    if comparison is not None:
        columns += ["verdict", "gate_fails", *(f"verdict.{m}" for m in judged), *STEP_VERDICT_COLUMNS]
    frame = pd.DataFrame.from_records(records, columns=columns)
    for name in ("samples", "processes"):
        frame[name] = frame[name].astype("Int64")
    if comparison is not None:
        frame["gate_fails"] = frame["gate_fails"].astype(bool)
    frame = frame.set_index("case")
    frame.attrs.update(_run_attrs(run, results, comparison))
    return frame


def _run_attrs(run: RunResult, results: Path, comparison: Comparison | None) -> dict[str, Any]:
    attrs: dict[str, Any] = {"run_id": run.run_id, "suite": run.suite, "environment": dict(run.environment),
                             "settings": dict(run.settings), "source": str(results)}
    if comparison is not None:
        attrs["comparison"] = {"mode": comparison.mode, "baseline_source": comparison.baseline_source,
                               "warnings": list(comparison.warnings), "gate_failed": comparison.gate_failed}
    return attrs


def _group_labels(groups: Sequence[int] | None, n: int, one_group: bool) -> np.ndarray:
    """Per sample, the index of its group (a layout or a lockstep burst); 0 for every sample when the
    process has no groups and ``one_group`` (one layout), else missing (-1) when the groups are absent or
    do not add up to the samples."""
    if groups and all(g > 0 for g in groups) and sum(groups) == n:
        return np.repeat(np.arange(len(groups)), groups)
    return np.zeros(n, dtype=np.int64) if groups is None and one_group else np.full(n, -1, dtype=np.int64)


def load_samples(path: str | os.PathLike[str]) -> pd.DataFrame:
    """Every timed sample of a run, one row each (long format), in the order each process took them.

    ``path`` is a run folder or a results.json file, as for ``load``. Columns: ``run_id``, ``case`` (the
    key ``load`` indexes by), ``process`` (the worker's process index), ``sample`` (0, 1, ... within the
    process), ``layout_group`` (which of the process's memory layouts the sample was taken in, 0, 1, ...;
    0 throughout for a process that sampled one layout), ``burst`` (the lockstep burst of an ``--against``
    run; missing otherwise) and ``step_time_s`` (seconds per step: the sample's nanoseconds over its
    loops x steps per unit). Cases without samples (skipped, failed early) have no rows.

    The gate judges each process by a low quantile of its samples, per layout group
    (docs/gate.md): ``frame.groupby(["case", "process"]).step_time_s.quantile(0.1)``.
    Raises SchemaError (a ValueError) naming the path when it is not a run or its results are malformed.
    """
    results, run = _read_run(path)
    parts: dict[str, list[np.ndarray]] = {name: [] for name in SAMPLE_COLUMNS[1:]}
    for c in run.cases:
        for p in c.processes:
            n = len(p.samples_ns)
            parts["case"].append(np.full(n, c.key, dtype=object))
            parts["process"].append(np.full(n, p.process_index, dtype=np.int64))
            parts["sample"].append(np.arange(n, dtype=np.int64))
            parts["layout_group"].append(_group_labels(p.layout_groups, n, one_group=True))
            parts["burst"].append(_group_labels(p.bursts, n, one_group=False))
            parts["step_time_s"].append(np.asarray(p.step_times_s, dtype=np.float64))
    data: dict[str, Any] = {"run_id": run.run_id}
    empty = {"case": object, "step_time_s": np.float64}
    for name, arrays in parts.items():
        data[name] = np.concatenate(arrays) if arrays else np.array([], dtype=empty.get(name, np.int64))
    frame = pd.DataFrame(data, columns=list(SAMPLE_COLUMNS))
    for name in ("layout_group", "burst"):
        frame[name] = frame[name].astype("Int64").mask(frame[name] < 0)
    frame.attrs.update(_run_attrs(run, results, None))
    return frame


def load_verdicts(path: str | os.PathLike[str]) -> pd.DataFrame:
    """Every verdict of a run's comparison, one row per case x metric, with the numbers that made it.

    ``path`` is a run folder or a results.json file, as for ``load``; the verdicts are those of the
    comparison.json beside it, cases the baseline had and this run lacks (``missing``) included. Columns:
    ``case``, ``metric``, ``kind`` (regression, win, unchanged, inconclusive...), ``baseline``, ``current``,
    ``ratio`` (current / baseline) with ``ratio_low``/``ratio_high``, ``p_value``, ``threshold``, ``rule``
    and ``advice``. An empty frame when the run was not compared.
    Raises SchemaError (a ValueError) naming the file when the run or its comparison.json is malformed.
    """
    results, run = _read_run(path)
    comparison = _read_comparison(results)
    verdicts = comparison.verdicts if comparison else []
    frame = pd.DataFrame.from_records(
        [{"case": v.case_key, "metric": v.metric, "kind": v.kind, "baseline": _number(v.baseline),
          "current": _number(v.current), "ratio": _number(v.ratio), "ratio_low": _number(v.ratio_low),
          "ratio_high": _number(v.ratio_high), "p_value": _number(v.p_value), "threshold": _number(v.threshold),
          "rule": v.rule, "advice": v.advice} for v in verdicts],
        columns=list(VERDICT_COLUMNS))
    frame.attrs.update(_run_attrs(run, results, comparison))
    return frame


# ---------------------------------------------------------------- reading the history

def _history_url(url: str | os.PathLike[str] | None, config: str | os.PathLike[str] | None) -> str:
    """The store's SQLAlchemy URL: ``url`` as given (a path is a SQLite file), else as the CLI finds it."""
    from perfgate.history.store import resolve_url

    if url is None:
        from perfgate.model.config import load as load_settings

        settings = load_settings(config)  # type: ignore[arg-type]  # any path-like
        return resolve_url(settings.extra, settings.root)
    if isinstance(url, os.PathLike) or (isinstance(url, str) and "://" not in url):
        return "sqlite:///" + str(Path(url).expanduser().resolve())
    if not isinstance(url, str):
        raise HistoryError(f"{url!r}: not a history store; expected a database URL (sqlite:///PATH, "
                           "postgresql://...) or the path of a SQLite file")
    return resolve_url({}, Path.cwd(), url)


def load_history(url: str | os.PathLike[str] | None = None, metric: str | Sequence[str] | None = "step_time",
                 cases: str | Sequence[str] = (), since: str | None = None, last: int | None = None,
                 branch: str | None = None, machine: str | None = None,
                 config: str | os.PathLike[str] | None = None) -> pd.DataFrame:
    """The series of a history store, one row per run x case x metric, in run order per case.

    ``url``: a database URL (``sqlite:///PATH``, relative to the working folder, ``sqlite:////ABS``,
    ``postgresql://...``) or the path of a SQLite file; None finds the store as ``perfgate history`` does
    ($PERFGATE_HISTORY_URL, ``history`` in the nearest pyproject.toml's [tool.perfgate] or ``config``,
    else .perfgate/history.db under the project root). ``metric``: a metric name (default step_time), a list
    of them, or None for every metric in the store. The filters are those of ``perfgate history show``:
    ``cases`` (globs over the workload name or the whole key), ``since`` (a date YYYY-MM-DD or a UTC
    time), ``last`` (each series' last N runs, per machine key), ``branch``, ``machine`` (the machine key).

    Columns: ``case``, its parts (``workload``, ``size``, ``toggles``, ``device``), ``metric``, ``run_id``,
    ``commit``, ``branch``, ``started_at`` (a UTC timestamp; NaT where the store holds no readable time),
    ``machine_key``, ``value`` with its interval (``ci_low``, ``ci_high``; step_time's is the one its run's
    reports printed) and
    ``n`` (the samples behind it). Raises HistoryError (a ValueError) with one line when the store does not
    exist, is not a perfgate history, or a filter is malformed.
    """
    from perfgate.history import show as show_mod
    from perfgate.history.reading import metrics as store_metrics
    from perfgate.history.store import open_store

    if last is not None and (isinstance(last, bool) or not isinstance(last, int) or last < 1):
        raise HistoryError(f"last={last!r}: expected a whole number of runs, 1 or more")
    patterns = [cases] if isinstance(cases, str) else list(cases)
    records: list[dict[str, Any]] = []
    with open_store(_history_url(url, config), create=False) as store:
        chosen = store_metrics(store) if metric is None else [metric] if isinstance(metric, str) else list(metric)
        for m in chosen:
            for key, points in show_mod.read(store, m, patterns, since, last, branch, machine).items():
                parts = key.split("/")
                spec = dict(zip(("workload", "size", "toggles", "device"), parts, strict=True)) if len(parts) == 4 else {}
                for p in points:
                    records.append({"case": key, **spec, "metric": m, **p.to_json()})
    frame = pd.DataFrame.from_records(records, columns=list(HISTORY_COLUMNS))
    frame["started_at"] = pd.to_datetime(frame["started_at"], utc=True, errors="coerce", format="ISO8601")
    frame["n"] = frame["n"].astype("Int64")
    for name in ("value", "ci_low", "ci_high"):
        frame[name] = frame[name].astype("float64")
    return frame
