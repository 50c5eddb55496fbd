"""Reading the history store: each case's series of one metric as Points (filtered by time, branch,
machine, suite, the last N per machine), the case keys and metrics it holds, its runs; every value read
checked, since the store is input like any file.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from perfgate.history.store import MAX_MAGNITUDE, HistoryError, Store, case_specs, measurements, runs, series_table


@dataclass(frozen=True)
class Point:
    """One value of a series: a run's measurement of one case and metric."""

    run_id: str
    commit: str | None
    branch: str | None
    started_at: str
    machine_key: str | None
    value: float
    ci_low: float | None
    ci_high: float | None
    n: int | None

    def to_json(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "commit": self.commit, "branch": self.branch, "started_at": self.started_at,
                "machine_key": self.machine_key, "value": self.value, "ci_low": self.ci_low,
                "ci_high": self.ci_high, "n": self.n}


@dataclass(frozen=True)
class SeriesFilter:
    """Which runs a read considers: glob-free SQL filters, applied in the database."""

    metric: str = "step_time"
    case_keys: tuple[str, ...] | None = None  # None: every case
    since: str | None = None  # ISO date or time: runs started at or after it
    last: int | None = None  # only each series' last N points: per case and machine key
    branch: str | None = None
    machine_key: str | None = None
    suite: str | None = None


def case_keys(store: Store, metric: str | None = None) -> list[str]:
    """Every case key with at least one measurement (of ``metric`` when given), sorted."""
    q = sa.select(case_specs.c.case_key).join(series_table, series_table.c.case_spec == case_specs.c.id).distinct()
    if metric:
        q = q.where(series_table.c.metric == metric)
    with store.engine.connect() as conn:
        return sorted(_text(store, "case key", r[0]) for r in conn.execute(q))


def metrics(store: Store) -> list[str]:
    with store.engine.connect() as conn:
        return sorted(_text(store, "metric name", r[0]) for r in conn.execute(sa.select(series_table.c.metric).distinct()))


def series(store: Store, flt: SeriesFilter) -> dict[str, list[Point]]:
    """Per case key, its points of ``flt.metric`` in run order (start time, then ingest order)."""
    with store.engine.connect() as conn:
        sq = (sa.select(series_table.c.id, case_specs.c.case_key)
              .join(case_specs, case_specs.c.id == series_table.c.case_spec)
              .where(series_table.c.metric == flt.metric))
        if flt.case_keys is not None:
            sq = sq.where(case_specs.c.case_key.in_(flt.case_keys))
        keys = dict(conn.execute(sq).all())
        if not keys:
            return {}
        q = (sa.select(measurements.c.series, runs.c.run_id, runs.c.commit, runs.c.branch, runs.c.started_at,
                       runs.c.machine_key, measurements.c.value, measurements.c.ci_low, measurements.c.ci_high,
                       measurements.c.n)
             .join(runs, runs.c.id == measurements.c.run)
             .where(measurements.c.series.in_(list(keys))))
        if flt.since:
            q = q.where(runs.c.started_at >= flt.since)
        if flt.branch:
            q = q.where(runs.c.branch == flt.branch)
        if flt.machine_key:
            q = q.where(runs.c.machine_key == flt.machine_key)
        if flt.suite:
            q = q.where(runs.c.suite == flt.suite)
        q = q.order_by(measurements.c.series, runs.c.started_at, runs.c.id)
        out: dict[str, list[Point]] = {}
        for r in conn.execute(q):
            out.setdefault(_text(store, "case key", keys[r.series]), []).append(_point(store, keys[r.series],
                                                                                       flt.metric, r))
    out = dict(sorted(out.items()))
    if flt.last:
        out = {k: last_per_machine(v, flt.last) for k, v in out.items()}
    return out


def last_per_machine(points: list[Point], last: int) -> list[Point]:
    """The last ``last`` points of each machine key among ``points``, in their order: detect and report
    analyse a case per machine (detect.by_machine), so N runs means N in each machine's series, not the
    case's last N shared out among its machines."""
    kept: dict[str | None, int] = {}
    out: list[Point] = []
    for p in reversed(points):
        if kept.get(p.machine_key, 0) < last:
            kept[p.machine_key] = kept.get(p.machine_key, 0) + 1
            out.append(p)
    return out[::-1]


def _where(store: Store, run_id: Any, case_key: Any, metric: str) -> str:
    return f"history store {store.describe()}: run {str(run_id)[:80]!r}, {str(case_key)[:80]}, {metric[:80]}"


def _text(store: Store, what: str, value: Any, nullable: bool = False, where: str = "") -> Any:
    """``value`` when it is text (or None where ``nullable``); a store written by something else may hold a
    number or a blob in a text column (SQLite keeps whatever it is given)."""
    if isinstance(value, str) or (nullable and value is None):
        return value
    raise HistoryError(f"{where or f'history store {store.describe()}'}: {what} is {type(value).__name__} "
                       f"{value!r:.40}; valid: text{' or NULL' if nullable else ''} (the store was written by "
                       "something other than perfgate)")


def _number(store: Store, row: Any, case_key: str, metric: str, column: str, nullable: bool) -> float | None:
    value = getattr(row, column)
    if value is None and nullable:
        return None
    if (not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value)
            and abs(value) <= MAX_MAGNITUDE):
        return float(value)
    raise HistoryError(f"{_where(store, row.run_id, case_key, metric)}: {column} is {value!r:.40}; valid: "
                       f"a finite number of magnitude at most {MAX_MAGNITUDE:g}{' or NULL' if nullable else ''} "
                       "(correct or delete that row, or re-add the run)")


def _point(store: Store, case_key: str, metric: str, row: Any) -> Point:
    """One measurement row as a Point, every column checked: the store is input like any file (a hand-edited
    SQLite file, a PostgreSQL store another tool wrote NaN into) and a bad row is one line, exit 2."""
    n = row.n
    if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 0):
        raise HistoryError(f"{_where(store, row.run_id, case_key, metric)}: n is {n!r:.40}; valid: a whole "
                           "number of samples, 0 or more, or NULL")
    where = _where(store, row.run_id, case_key, metric)
    return Point(_text(store, "run id", row.run_id, where=where), _text(store, "commit", row.commit, True, where),
                 _text(store, "branch", row.branch, True, where), _text(store, "start time", row.started_at, where=where),
                 _text(store, "machine key", row.machine_key, True, where),
                 _number(store, row, case_key, metric, "value", False), _number(store, row, case_key, metric, "ci_low", True),  # type: ignore[arg-type]  # value: not nullable
                 _number(store, row, case_key, metric, "ci_high", True), n)


def run_count(store: Store) -> int:
    with store.engine.connect() as conn:
        return int(conn.execute(sa.select(sa.func.count()).select_from(runs)).scalar_one())


def run_ids(store: Store) -> list[str]:
    with store.engine.connect() as conn:
        return [r[0] for r in conn.execute(sa.select(runs.c.run_id).order_by(runs.c.started_at, runs.c.id))]
