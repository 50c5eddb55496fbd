"""The history store: SQLite and a real PostgreSQL, Alembic migrations (a store of the release before
Alembic upgraded to head), refusals that leave a store untouched, and concurrent writers in separate
processes that lose nothing."""

from __future__ import annotations

import hashlib
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
import sqlalchemy as sa

from perfgate.history import ingest
from perfgate.history.reading import SeriesFilter, run_count, series
from perfgate.history.store import (
    MIGRATIONS_DIR,
    SCHEMA_HEAD,
    HistoryError,
    metadata,
    open_store,
    resolve_url,
    schema_version,
)
from perfgate.history.writing import add_run
from tests.fixtures.history import commit_of, make_run, write_run
from tests.fixtures.postgres import PostgresUnavailable, postgres_server

ROOT = Path(__file__).resolve().parent.parent
# A store written by the release before Alembic (tests/fixtures/history-store/README.md)
BEFORE_ALEMBIC_DB = ROOT / "tests" / "fixtures" / "history-store" / "store-v1-before-alembic.db"
BEFORE_ALEMBIC_PG_DDL = BEFORE_ALEMBIC_DB.with_suffix(".postgresql.sql")


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


@pytest.mark.slow
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
    # each point is that run's case step time, as the reports print it (its processes' geometric mean)
    expected = [make_run(i, [0.010 * (1 + i), 0.020]).cases[0].step_time().value for i in range(3)]
    assert [round(p.value, 9) for p in first] == [round(v, 9) for v in expected]
    assert expected[1] / expected[0] == pytest.approx(2.0) and expected[0] == pytest.approx(0.01, rel=0.05)
    assert all(p.ci_low <= p.value <= p.ci_high for p in first)
    assert first[0].commit == commit_of(0) and first[0].branch == "main"
    with open_store(store_url, create=False) as store:
        last = series(store, SeriesFilter(metric="step_time", last=2, case_keys=("workload_0/smoke/compile/cpu",)))
        assert list(last) == ["workload_0/smoke/compile/cpu"] and len(last["workload_0/smoke/compile/cpu"]) == 2
        kernels = series(store, SeriesFilter(metric="kernels_per_step"))
        assert kernels["workload_0/smoke/eager/cpu"][0].value == 12.0


@pytest.mark.slow
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


EXTRA_REVISION = '''"""A test's second revision: a table of notes."""
import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "{down}"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table("notes", sa.Column("id", sa.Integer, primary_key=True), sa.Column("text", sa.String(100)))


def downgrade() -> None:
    op.drop_table("notes")
'''


@pytest.mark.slow
def test_an_older_store_is_upgraded_with_its_data(store_url: str, tmp_path: Path) -> None:
    with open_store(store_url, create=True) as store:
        add_run(store, _record(0, [0.01]))
    newer = tmp_path / "migrations"
    shutil.copytree(MIGRATIONS_DIR, newer, ignore=shutil.ignore_patterns("__pycache__"))
    (newer / "versions" / "0002_notes.py").write_text(EXTRA_REVISION.format(down=SCHEMA_HEAD))
    with open_store(store_url, create=False, migrations_dir=newer) as store:
        assert store.revision == "0002"
        assert any(f"{SCHEMA_HEAD} -> 0002" in n for n in store.notes)
        assert run_count(store) == 1
        with store.engine.connect() as conn:
            assert "notes" in sa.inspect(conn).get_table_names()
    # this code, which knows fewer revisions, now refuses the store (newer than it)
    with pytest.raises(HistoryError, match="revision 0002, newer than this perfgate knows"):
        open_store(store_url, create=True)


def test_missing_migration_scripts_are_one_line(tmp_path: Path) -> None:
    url = resolve_url({}, tmp_path, "sqlite:///h.db")
    with pytest.raises(HistoryError, match="schema migrations in .* cannot be read.*reinstall perfgate") as info:
        open_store(url, create=True, migrations_dir=tmp_path / "nowhere")
    assert "\n" not in str(info.value)


def test_schema_head_is_alembics_head() -> None:
    from alembic.script import ScriptDirectory

    assert ScriptDirectory(str(MIGRATIONS_DIR)).get_current_head() == SCHEMA_HEAD


def _schema(url: str) -> dict:
    """Everything about a database's tables that a query or a constraint depends on (alembic_version aside)."""
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            insp = sa.inspect(conn)
            out = {}
            for t in sorted(set(insp.get_table_names()) - {"alembic_version"}):
                out[t] = {
                    "columns": [(c["name"], str(c["type"]), c["nullable"], c.get("default"))
                                for c in insp.get_columns(t)],
                    "pk": insp.get_pk_constraint(t)["constrained_columns"],
                    "fks": sorted((f["name"] or "", tuple(f["constrained_columns"]), f["referred_table"],
                                   tuple(f["referred_columns"]), tuple(sorted(f["options"].items())))
                                  for f in insp.get_foreign_keys(t)),
                    "unique": sorted((u["name"] or "", tuple(u["column_names"])) for u in insp.get_unique_constraints(t)),
                    "indexes": sorted((i["name"], tuple(i["column_names"]), i["unique"]) for i in insp.get_indexes(t)),
                }
            return out
    finally:
        engine.dispose()


def _make_store_before_alembic(url: str) -> None:
    """At ``url``: the store the release before Alembic wrote (the SQLite fixture; on PostgreSQL its DDL
    with the fixture's rows copied in)."""
    path = Path(url[len("sqlite:///"):]) if url.startswith("sqlite:///") else None
    if path is not None:
        shutil.copyfile(BEFORE_ALEMBIC_DB, path)
        return
    src = sqlite3.connect(f"file:{BEFORE_ALEMBIC_DB}?mode=ro", uri=True)
    engine = sa.create_engine(url)
    try:
        with engine.begin() as conn:
            for statement in BEFORE_ALEMBIC_PG_DDL.read_text().split(";"):
                if statement.strip():
                    conn.exec_driver_sql(statement)
            for table in ("schema_version", "runs", "case_specs", "series", "cases", "measurements"):
                cur = src.execute(f"SELECT * FROM {table}")  # noqa: S608 - fixed names
                names = [d[0] for d in cur.description]
                rows = [dict(zip(names, r, strict=True)) for r in cur]
                conn.execute(sa.table(table, *map(sa.column, names)).insert(), rows)
            for table in ("schema_version", "runs", "case_specs", "series"):
                # as after the release's own inserts: the id sequences past the rows
                conn.exec_driver_sql(f"SELECT setval(pg_get_serial_sequence('{table}', 'id'), max(id)) FROM {table}")
    finally:
        engine.dispose()
        src.close()


@pytest.mark.slow
def test_a_store_of_the_release_before_alembic_upgrades_to_head(store_url: str, tmp_path: Path) -> None:
    """A store written by the release before Alembic (its own schema_version at 1) is stamped at the first
    revision and upgraded to head with every run kept, its schema then the same as a new store's."""
    _make_store_before_alembic(store_url)
    before = _schema(store_url)
    assert "alembic_version" not in sa.inspect(sa.create_engine(store_url)).get_table_names()
    with open_store(store_url, create=False) as store:
        assert store.revision == SCHEMA_HEAD
        assert any(n.endswith(f"schema 1 (before Alembic) -> {SCHEMA_HEAD}") for n in store.notes)
        assert run_count(store) == 3
        data = series(store, SeriesFilter(metric="step_time"))
        assert [round(p.value, 6) for p in data["workload_0/smoke/eager/cpu"]] == [0.01, 0.02, 0.03]
        assert add_run(store, _record(3, [0.04, 0.02]))  # the store takes new runs (its id sequences intact)
        with store.engine.connect() as conn:
            assert [r[0] for r in conn.exec_driver_sql("SELECT version_num FROM alembic_version")] == [SCHEMA_HEAD]
    with open_store(store_url, create=False) as store:  # opening it again changes nothing
        assert store.notes == [] and run_count(store) == 4
    assert _schema(store_url) == before
    # a new store made by the migrations has exactly the schema the release before Alembic made
    fresh = resolve_url({}, tmp_path, "sqlite:///fresh.db") if store_url.startswith("sqlite") else None
    if fresh is None:
        return  # PostgreSQL: one database per test; the models check below covers it
    open_store(fresh, create=True).close()
    assert _schema(fresh) == _schema(resolve_url({}, tmp_path, f"sqlite:///{BEFORE_ALEMBIC_DB}"))


@pytest.mark.slow
def test_a_new_stores_schema_is_the_models(store_url: str) -> None:
    """The queries use the models in store.py; the database comes from the migrations: they agree."""
    from alembic.autogenerate import compare_metadata
    from alembic.runtime.migration import MigrationContext

    open_store(store_url, create=True).close()
    engine = sa.create_engine(store_url)
    try:
        with engine.connect() as conn:
            assert compare_metadata(MigrationContext.configure(conn), metadata) == []
    finally:
        engine.dispose()


@pytest.mark.slow
def test_a_new_postgresql_store_has_the_schema_the_release_before_alembic_made(pg_url: str) -> None:
    url = _fresh_pg(pg_url)
    _make_store_before_alembic(url)
    before = _schema(url)
    url = _fresh_pg(pg_url)
    open_store(url, create=True).close()
    assert _schema(url) == before


@pytest.mark.parametrize("made_by", ["alembic", "before-alembic"])
def test_a_newer_sqlite_store_is_refused_untouched(tmp_path: Path, made_by: str) -> None:
    url = resolve_url({}, tmp_path, "sqlite:///h.db")
    with open_store(url, create=True) as store:
        add_run(store, _record(0, [0.01]))
        with store.engine.begin() as conn:
            if made_by == "alembic":
                conn.exec_driver_sql("UPDATE alembic_version SET version_num = 'f00d'")
            else:
                conn.exec_driver_sql("DROP TABLE alembic_version")
                conn.execute(schema_version.update().values(version=99))
    path = tmp_path / "h.db"
    before = _digest(path)
    match = "revision f00d, newer" if made_by == "alembic" else "schema version 99 without Alembic's bookkeeping, newer"
    with pytest.raises(HistoryError, match=match):
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


@pytest.mark.slow
def test_a_foreign_postgresql_database_is_refused(pg_url: str) -> None:
    url = _fresh_pg(pg_url)
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE customers (id INTEGER)")
    engine.dispose()
    with pytest.raises(HistoryError, match="something else"):
        open_store(url, create=True)


@pytest.mark.parametrize("start", ["new", "before-alembic"])
@pytest.mark.slow
def test_concurrent_add_processes_lose_nothing(store_url: str, tmp_path: Path, start: str) -> None:
    """Eight `perfgate history add` processes at once, each with its own runs and one run they all share,
    on a new store or on one of the release before Alembic (which exactly one of them upgrades)."""
    before = 0
    if start == "before-alembic":
        _make_store_before_alembic(store_url)
        before = 3  # runs, each with two of the three cases below
    runs_dir = tmp_path / "runs"
    writers, per_writer = 8, 4
    groups = []
    for w in range(writers):
        folders = [write_run(runs_dir / f"w{w}", make_run(100 + w * per_writer + k, [0.01, 0.02, 0.03]))
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
    assert sum(f"-> {SCHEMA_HEAD}" in out for out, _ in outs) == 1  # the schema made or upgraded once
    added = writers * per_writer + 1
    with open_store(store_url, create=False) as store:
        assert run_count(store) == added + before
        data = series(store, SeriesFilter(metric="step_time"))
    assert len(data) == 3 and sum(map(len, data.values())) == 3 * added + 2 * before


@pytest.mark.slow
def test_opening_an_up_to_date_store_does_not_import_alembic(tmp_path: Path) -> None:
    """`history show` and `detect` open the store on every call: Alembic's 0.1 s import only when upgrading."""
    url = resolve_url({}, tmp_path, "sqlite:///h.db")
    open_store(url, create=True).close()
    code = ("import sys; from perfgate.history.store import open_store; "
            f"open_store({url!r}, create=False).close(); print('alembic' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


def test_a_run_that_recorded_no_commit_is_not_given_todays_head(tmp_path):
    """A run measured before the repository's first commit (or outside a checkout) recorded git_commit null;
    `history add` later, at some commit, once filed it under that commit, beside the runs measured there."""
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "--allow-empty", "-m", "c"],
                   cwd=tmp_path, check=True)
    run = make_run(0, [1e-3] * 5)
    run.environment["git_commit"] = None
    assert ingest.record_from_run(run, None, tmp_path).commit is None
    del run.environment["git_commit"]  # a file that never recorded one: git's at the time of `history add`
    assert ingest.record_from_run(run, None, tmp_path).commit == ingest.git_commit_and_branch(tmp_path)[0]


_STEP_TIME_ROW = "run = 2 AND series = (SELECT id FROM series WHERE metric = 'step_time' LIMIT 1)"


@pytest.mark.parametrize(("tamper", "says"), [
    (f"UPDATE measurements SET value = 'fast' WHERE {_STEP_TIME_ROW}", "value is 'fast'"),
    (f"UPDATE measurements SET value = 9e999 WHERE {_STEP_TIME_ROW}", "value is inf"),  # SQLite's infinity
    (f"UPDATE measurements SET value = 1e200 WHERE {_STEP_TIME_ROW}", "value is 1e+200"),
    (f"UPDATE measurements SET ci_low = x'00' WHERE {_STEP_TIME_ROW}", "ci_low is b'\\x00'"),
    (f"UPDATE measurements SET n = 'many' WHERE {_STEP_TIME_ROW}", "n is 'many'"),
    ("UPDATE runs SET \"commit\" = x'00ff' WHERE id = 2", "commit is bytes"),
    ("UPDATE case_specs SET case_key = x'00' WHERE id = 1", "case key is bytes"),
])
@pytest.mark.slow
def test_a_malformed_row_in_the_store_is_one_line_naming_it(tmp_path: Path, tamper: str, says: str) -> None:
    """A store is input like any file (hand-edited, written by another tool, a PostgreSQL float NaN): a value
    that is text or a blob, an infinity, a count that is not one, was an 'unexpected TypeError' (exit 3) in
    show, detect and report, or an infinity read on as a point that broke the series' statistics and wrote
    `Infinity` into --format json. Now each is refused with one line naming the run, case, metric and column."""
    from perfgate.history import commands
    from perfgate.history import show as show_mod

    url = resolve_url({}, tmp_path, "sqlite:///history.db")
    with open_store(url, create=True) as store:
        for i in range(3):
            add_run(store, _record(i, [0.010, 0.020]))
    con = sqlite3.connect(tmp_path / "history.db")
    con.execute(tamper)
    con.commit()
    con.close()
    with open_store(url, create=False) as store:
        with pytest.raises(HistoryError, match="valid: ") as err:
            show_mod.read(store, "step_time", [], None, None)
        with pytest.raises(HistoryError):
            commands._analyses(store, ["step_time"], [], None, None, None, None)
    assert says in str(err.value) and "\n" not in str(err.value)
    if "case key" not in says:
        assert "run-000001" in str(err.value) and "step_time" in str(err.value)
    env = {k: v for k, v in os.environ.items() if k != "PERFGATE_HISTORY_URL"}
    out = subprocess.run([sys.executable, "-m", "perfgate", "history", "detect", "--history-url", url], cwd=tmp_path,
                         capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1 and says in out.stderr, out.stderr


def test_ingest_keeps_no_value_too_large_to_analyse() -> None:
    """A results.json value of 1e200 (finite, so the reader takes it) was stored, and change detection's sums
    of squares then overflowed (NaN statistics, warnings on stderr); it is dropped like an infinity."""
    import dataclasses as dc

    run = make_run(0, [0.010])
    case = dc.replace(run.cases[0], metrics={"kernels_per_step": 1e200, "peak_rss_bytes": 1.5e8})
    record = ingest.record_from_run(dc.replace(run, cases=[case]), None, ROOT)
    assert {m["metric"] for m in record.measurements} >= {"step_time", "peak_rss_bytes"}
    assert "kernels_per_step" not in {m["metric"] for m in record.measurements}


def test_history_stores_the_interval_the_reports_print_and_none_for_one_process() -> None:
    """History stored every case's pooled-sample CI of the median as a 95% interval: with 2-5 samples a
    range that covers 50-94%, and with thousands of samples of one process an interval as if they were
    independent. It stores the interval the run's reports print (worker processes plus the run-to-run
    term), and none where one process gives none."""
    import dataclasses as dc

    from fixtures.synthetic import synthetic_run

    run = synthetic_run(["rollout"], toggles=("eager", "compile"))
    one = dc.replace(run.cases[1], processes=run.cases[1].processes[:1])
    run = dc.replace(run, cases=[run.cases[0], one])
    got = {(m["case_key"], m["metric"]): m for m in ingest.record_from_run(run, None, ROOT).measurements}
    st = run.step_time(run.cases[0])
    eager = got[(run.cases[0].key, "step_time")]
    assert (eager["ci_low"], eager["ci_high"]) == (st.ci_low, st.ci_high) and st.run_to_run == 0.02
    assert (got[(one.key, "step_time")]["ci_low"], got[(one.key, "step_time")]["ci_high"]) == (None, None)
    assert got[(one.key, "throughput_steps_per_s")]["ci_low"] is None
