"""The history store: SQLite and a real PostgreSQL, versioned migrations, refusals that leave a store
untouched, and concurrent writers in separate processes that lose nothing."""

from __future__ import annotations

import hashlib
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
import sqlalchemy as sa

from perfgate.history import ingest
from perfgate.history.store import (
    MIGRATIONS,
    HistoryError,
    SeriesFilter,
    add_run,
    open_store,
    resolve_url,
    run_count,
    schema_version,
    series,
)
from tests.fixtures.history import commit_of, make_run, write_run
from tests.fixtures.postgres import PostgresUnavailable, postgres_server

ROOT = Path(__file__).resolve().parent.parent


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _record(index: int, times: list[float], **kw) -> ingest.RunRecord:  # noqa: ANN003
    return ingest.record_from_run(make_run(index, times, **kw), None, ROOT)


@pytest.fixture(scope="module")
def pg_url() -> str:
    try:
        with postgres_server() as url:
            yield url
    except PostgresUnavailable as exc:
        pytest.skip(f"no PostgreSQL server for the tests: {exc}")


def _fresh_pg(pg_url: str) -> str:
    """The test PostgreSQL database emptied: a new store each test."""
    url = resolve_url({}, ROOT, pg_url)
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        conn.exec_driver_sql("DROP SCHEMA public CASCADE")
        conn.exec_driver_sql("CREATE SCHEMA public")
    engine.dispose()
    return url


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request, tmp_path: Path) -> str:  # noqa: ANN001
    if request.param == "sqlite":
        return resolve_url({}, tmp_path, "sqlite:///history.db")
    return _fresh_pg(request.getfixturevalue("pg_url"))


def test_url_resolution(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PERFGATE_HISTORY_URL", raising=False)
    assert resolve_url({}, tmp_path) == f"sqlite:///{tmp_path}/.perfgate/history.db"
    assert resolve_url({"history": "sqlite:///x/h.db"}, tmp_path) == f"sqlite:///{tmp_path}/x/h.db"
    assert resolve_url({}, tmp_path, "postgresql://u@h/db") == "postgresql+psycopg://u@h/db"
    monkeypatch.setenv("PERFGATE_HISTORY_URL", "sqlite:////abs/h.db")
    assert resolve_url({"history": "sqlite:///x.db"}, tmp_path) == "sqlite:////abs/h.db"
    for bad in ("mysql://h/db", "sqlite://relative.db", ""):
        monkeypatch.setenv("PERFGATE_HISTORY_URL", bad)
        with pytest.raises(HistoryError):
            resolve_url({"history": 3}, tmp_path)


def test_add_is_idempotent_and_series_come_in_run_order(store_url: str) -> None:
    with open_store(store_url, create=True) as store:
        # added out of order: the series follows the runs' start times, not the order of ingest
        for i in (2, 0, 1):
            assert add_run(store, _record(i, [0.010 * (1 + i), 0.020]))
        assert not add_run(store, _record(1, [0.5, 0.5]))  # same run id: a no-op, the first one stays
        assert run_count(store) == 3
        data = series(store, SeriesFilter(metric="step_time"))
    first = data["workload_0/smoke/eager/cpu"]
    assert [p.run_id for p in first] == ["run-000000", "run-000001", "run-000002"]
    assert [round(p.value, 6) for p in first] == [0.01, 0.02, 0.03]
    assert all(p.ci_low <= p.value <= p.ci_high for p in first)
    assert first[0].commit == commit_of(0) and first[0].branch == "main"
    with open_store(store_url, create=False) as store:
        last = series(store, SeriesFilter(metric="step_time", last=2, case_keys=("workload_0/smoke/compile/cpu",)))
        assert list(last) == ["workload_0/smoke/compile/cpu"] and len(last["workload_0/smoke/compile/cpu"]) == 2
        kernels = series(store, SeriesFilter(metric="kernels_per_step"))
        assert kernels["workload_0/smoke/eager/cpu"][0].value == 12.0


def test_a_refused_run_is_an_error_not_a_duplicate(store_url: str) -> None:
    """A constraint other than the run's identity refuses the insert (NOT NULL on runs.started_at, whose
    message names the runs table): an error saying so, never "already there", and nothing half-written."""
    from dataclasses import replace

    with open_store(store_url, create=True) as store:
        broken = replace(_record(0, [0.01, 0.02]), started_at=None)
        with pytest.raises(HistoryError, match="run-000000 was refused"):
            add_run(store, broken)
        assert run_count(store) == 0
        assert add_run(store, _record(0, [0.01, 0.02]))  # the same run, whole: added
        assert not add_run(store, _record(0, [0.01, 0.02]))  # and now it is already there
        assert run_count(store) == 1


def _extra_migration(conn: sa.Connection) -> None:
    conn.exec_driver_sql("CREATE TABLE notes (id INTEGER PRIMARY KEY, text VARCHAR(100))")


def test_an_older_store_is_upgraded_with_its_data(store_url: str) -> None:
    with open_store(store_url, create=True) as store:
        add_run(store, _record(0, [0.01]))
    with open_store(store_url, create=False, migrations=[*MIGRATIONS, _extra_migration]) as store:
        assert store.version == len(MIGRATIONS) + 1
        assert any("->" in n for n in store.notes)
        assert run_count(store) == 1
        with store.engine.connect() as conn:
            assert "notes" in sa.inspect(conn).get_table_names()
    # this code, which knows fewer migrations, now refuses the store (newer than it)
    with pytest.raises(HistoryError, match="newer than this perfgate knows"):
        open_store(store_url, create=True)


def test_a_newer_sqlite_store_is_refused_untouched(tmp_path: Path) -> None:
    url = resolve_url({}, tmp_path, "sqlite:///h.db")
    with open_store(url, create=True) as store:
        add_run(store, _record(0, [0.01]))
        with store.engine.begin() as conn:
            conn.execute(schema_version.update().values(version=99))
    path = tmp_path / "h.db"
    before = _digest(path)
    with pytest.raises(HistoryError, match="schema version 99, newer"):
        open_store(url, create=True)
    assert _digest(path) == before


@pytest.mark.parametrize("content", [b"this is not a database\n" * 10, b"SQLite format 3\x00" + b"\x07" * 200])
def test_a_corrupt_file_is_refused_untouched(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "h.db"
    path.write_bytes(content)
    with pytest.raises(HistoryError, match=str(path)):
        open_store(resolve_url({}, tmp_path, "sqlite:///h.db"), create=True)
    assert path.read_bytes() == content
    assert sorted(p.name for p in tmp_path.iterdir()) == ["h.db"]


def test_a_foreign_sqlite_database_is_refused_untouched(tmp_path: Path) -> None:
    path = tmp_path / "h.db"
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE customers (id INTEGER, name TEXT)")
    con.commit()
    con.close()
    before = _digest(path)
    with pytest.raises(HistoryError, match="something else"):
        open_store(resolve_url({}, tmp_path, "sqlite:///h.db"), create=True)
    assert _digest(path) == before


def test_reading_a_missing_store_says_how_to_make_one(tmp_path: Path) -> None:
    with pytest.raises(HistoryError, match="history add"):
        open_store(resolve_url({}, tmp_path, "sqlite:///none/h.db"), create=False)
    assert not (tmp_path / "none").exists()


def test_unreachable_postgresql_is_one_line(tmp_path: Path) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens here once closed
    with pytest.raises(HistoryError, match="cannot reach the history store") as info:
        open_store(resolve_url({}, tmp_path, f"postgresql://u:secret@127.0.0.1:{port}/db"), create=True)
    assert "\n" not in str(info.value) and "secret" not in str(info.value)


def test_a_foreign_postgresql_database_is_refused(pg_url: str) -> None:
    url = _fresh_pg(pg_url)
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE customers (id INTEGER)")
    engine.dispose()
    with pytest.raises(HistoryError, match="something else"):
        open_store(url, create=True)


def test_concurrent_add_processes_lose_nothing(store_url: str, tmp_path: Path) -> None:
    """Eight `perfgate history add` processes at once, each with its own runs and one run they all share."""
    runs_dir = tmp_path / "runs"
    writers, per_writer = 8, 4
    groups = []
    for w in range(writers):
        folders = [write_run(runs_dir / f"w{w}", make_run(w * per_writer + k, [0.01, 0.02, 0.03]))
                   for k in range(per_writer)]
        folders.append(write_run(runs_dir / f"w{w}-shared", make_run(999, [0.01, 0.02, 0.03])))
        groups.append(folders)
    env = {**os.environ, "PERFGATE_HISTORY_URL": store_url.replace("postgresql+psycopg:", "postgresql:")}
    procs = [subprocess.Popen([sys.executable, "-m", "perfgate", "history", "add", *map(str, g)], cwd=tmp_path, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for g in groups]
    outs = [p.communicate(timeout=300) for p in procs]
    for p, (_out, err) in zip(procs, outs, strict=True):
        assert p.returncode == 0, err
    shared_added = sum(out.count("added: run-000999") for out, _ in outs)
    assert shared_added == 1
    with open_store(store_url, create=False) as store:
        assert run_count(store) == writers * per_writer + 1
        data = series(store, SeriesFilter(metric="step_time"))
    assert all(len(v) == writers * per_writer + 1 for v in data.values()) and len(data) == 3
