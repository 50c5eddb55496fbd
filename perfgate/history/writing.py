"""Adding a run to the history store: a RunRecord written in one transaction (its run, cases, case specs,
series and measurements), a run already there left as it is, a locked store waited for and retried.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError, OperationalError, SQLAlchemyError

from perfgate.history.store import HistoryError, Store, _first_line, case_specs, cases, measurements, runs, series_table


@dataclass(frozen=True)
class RunRecord:
    """One run as the store keeps it (see perfgate.history.ingest.record_from_run)."""

    run_id: str
    suite: str | None
    commit: str | None
    branch: str | None
    started_at: str
    machine_key: str | None
    environment: dict[str, Any]
    settings: dict[str, Any]
    source: str | None
    cases: list[dict[str, Any]]  # case_key, workload, size, toggles, device, status, failure_class
    measurements: list[dict[str, Any]]  # case_key, metric, value, ci_low, ci_high, n


def add_run(store: Store, record: RunRecord, retries: int = 5) -> bool:
    """Add one run in one transaction; False when a run with its run_id is already there (a no-op).

    A writer that finds the store locked waits (SQLite busy timeout) and retries a few times; a unique
    violation from a concurrent writer of the same run counts as already there."""
    for attempt in range(retries):
        try:
            with store.engine.connect() as conn:
                with conn.begin():
                    exists = conn.execute(sa.select(runs.c.id).where(runs.c.run_id == record.run_id)).first()
                    if exists is not None:
                        return False
                    run_pk = conn.execute(runs.insert().values(  # type: ignore[index]  # an insert: a primary key
                        run_id=record.run_id, suite=record.suite, commit=record.commit, branch=record.branch,
                        started_at=record.started_at, added_at=time.time(), machine_key=record.machine_key,
                        environment=json.dumps(record.environment, default=str, sort_keys=True),
                        settings=json.dumps(record.settings, default=str, sort_keys=True), source=record.source,
                    )).inserted_primary_key[0]
                    spec_ids = _ensure_case_specs(conn, record.cases)
                    if record.cases:
                        conn.execute(cases.insert(), [
                            {"run": run_pk, "case_spec": spec_ids[c["case_key"]], "status": c["status"],
                             "failure_class": c.get("failure_class")} for c in record.cases])
                    if record.measurements:
                        series_ids = _ensure_series(conn, spec_ids, {(m["case_key"], m["metric"])
                                                                     for m in record.measurements})
                        conn.execute(measurements.insert(), [
                            {"run": run_pk, "series": series_ids[(m["case_key"], m["metric"])], "value": m["value"],
                             "ci_low": m.get("ci_low"), "ci_high": m.get("ci_high"), "n": m.get("n")}
                            for m in record.measurements])
            return True
        except IntegrityError as exc:
            # a concurrent writer may have committed the same run_id between our check and our insert; any
            # other refusal (another constraint, whatever its message says) is an error: asking the store by
            # the unique key tells the two apart, and the rolled-back transaction left nothing behind
            if _has_run(store, record.run_id):
                return False
            raise HistoryError(f"history store {store.describe()}: run {record.run_id} was refused "
                               f"({_first_line(exc.orig)})") from exc
        except OperationalError as exc:
            if attempt == retries - 1 or "locked" not in str(exc).lower():
                raise HistoryError(f"history store {store.describe()}: could not write run {record.run_id} "
                                   f"({_first_line(exc.orig or exc)})") from exc
            time.sleep(0.2 * (attempt + 1))
        except SQLAlchemyError as exc:
            raise HistoryError(f"history store {store.describe()}: could not write run {record.run_id} "
                               f"({_first_line(getattr(exc, 'orig', None) or exc)})") from exc
    return False


def _has_run(store: Store, run_id: str) -> bool:
    """Whether a run with ``run_id`` (the runs table's unique key) is committed in the store."""
    with store.engine.connect() as conn:
        return conn.execute(sa.select(runs.c.id).where(runs.c.run_id == run_id)).first() is not None


def _insert_ignoring_duplicates(conn: Connection, table: sa.Table, rows: list[dict[str, Any]],
                                unique: list[str]) -> None:
    """INSERT ... ON CONFLICT DO NOTHING: a concurrent writer may add the same key first."""
    if not rows:
        return
    if conn.dialect.name == "postgresql":
        from sqlalchemy.dialects.postgresql import insert
    else:
        from sqlalchemy.dialects.sqlite import insert  # type: ignore[assignment]  # either dialect's insert
    conn.execute(insert(table).on_conflict_do_nothing(index_elements=unique), rows)


def _ensure_case_specs(conn: Connection, rows: list[dict[str, Any]]) -> dict[str, int]:
    keys = [r["case_key"] for r in rows]
    if not keys:
        return {}
    q = sa.select(case_specs.c.case_key, case_specs.c.id).where(case_specs.c.case_key.in_(keys))
    ids = dict(conn.execute(q).all())
    missing = [{k: r[k] for k in ("case_key", "workload", "size", "toggles", "device")} for r in rows
               if r["case_key"] not in ids]
    if missing:
        _insert_ignoring_duplicates(conn, case_specs, missing, ["case_key"])
        ids = dict(conn.execute(q).all())
    return ids


def _ensure_series(conn: Connection, spec_ids: dict[str, int], pairs: set[tuple[str, str]]) -> dict[tuple[str, str], int]:
    by_spec = {v: k for k, v in spec_ids.items()}
    q = (sa.select(series_table.c.case_spec, series_table.c.metric, series_table.c.id)
         .where(series_table.c.case_spec.in_(list(spec_ids.values()))))

    def read() -> dict[tuple[str, str], int]:
        return {(by_spec[s], m): i for s, m, i in conn.execute(q)}

    ids = read()
    missing = [{"case_spec": spec_ids[k], "metric": m} for k, m in sorted(pairs) if (k, m) not in ids]
    if missing:
        _insert_ignoring_duplicates(conn, series_table, missing, ["case_spec", "metric"])
        ids = read()
    return ids
