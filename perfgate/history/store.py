"""The history store: every run kept in a real database through SQLAlchemy (SQLite file or PostgreSQL).

Tables (their revision in Alembic's ``alembic_version``; see perfgate/history/migrations/):

- ``runs``: one row per ingested run, unique ``run_id``; commit, branch, time, machine key, suite,
  environment and settings (JSON text), where it came from.
- ``case_specs``: one row per case ever seen: key (workload/size/toggles/device) and its parts.
- ``series``: one row per case x metric.
- ``cases``: one row per case of a run: its status (and failure class).
- ``measurements``: one row per run x series: value with its CI (step time: median and the 95% CI of
  the median) and the number of samples behind it. ``history show`` and ``detect`` read series from here.
  Keys and metric names are stored once (in case_specs and series), so 10,000 runs of 50 cases stay small.

Schema migrations are Alembic revisions shipped in perfgate/history/migrations/versions/; opening a
store runs ``upgrade head`` in one transaction under the write lock. ``schema_version`` marks the
database as a perfgate history. A store made before Alembic (``schema_version`` at 1, no
``alembic_version``) is stamped at the first revision, whose schema it has, then upgraded. An older
store is upgraded, never dropped; a store at a revision this code does not know (made by a newer
perfgate) is refused (HistoryError, exit 2) and left as it is.

Concurrent writers: SQLite runs in WAL mode with a busy timeout and every write transaction begins
IMMEDIATE (it takes the write lock up front, so two writers queue instead of deadlocking); PostgreSQL
relies on transactions and the unique constraint on ``runs.run_id``. No torch here.
"""

from __future__ import annotations

import json
import math
import os
import re
import sqlite3
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import IntegrityError, OperationalError, SQLAlchemyError

from perfgate.model.config import ConfigError

DEFAULT_URL = "sqlite:///.perfgate/history.db"
URL_ENV = "PERFGATE_HISTORY_URL"
SQLITE_BUSY_TIMEOUT_S = 60.0
# The largest magnitude a measurement may have (ingest keeps no larger one; a store holding one is refused):
# change detection squares and sums differences over thousands of points, which stays finite below it.
# No step time, byte count or FLOP rate comes near it.
MAX_MAGNITUDE = 1e150


class HistoryError(ConfigError):
    """The store cannot be used as asked (corrupt, foreign, newer, unreachable): one line, exit 2."""


# The tables as the newest revision (SCHEMA_HEAD) leaves them, for the queries below. The database's
# schema comes from the migrations, never from these: a change here needs a new revision there.
metadata = sa.MetaData()

schema_version = sa.Table(
    "schema_version", metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("version", sa.Integer, nullable=False),
    sa.Column("application", sa.String(64), nullable=False),
)

runs = sa.Table(
    "runs", metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("run_id", sa.String(255), nullable=False, unique=True),
    sa.Column("suite", sa.String(255)),
    sa.Column("commit", sa.String(64)),
    sa.Column("branch", sa.String(255)),
    sa.Column("started_at", sa.String(64), nullable=False),  # ISO 8601, as in results.json
    sa.Column("added_at", sa.Float, nullable=False),  # unix time of ingest
    sa.Column("machine_key", sa.String(255)),
    sa.Column("environment", sa.Text, nullable=False),  # JSON
    sa.Column("settings", sa.Text, nullable=False),  # JSON
    sa.Column("source", sa.Text),
    sa.Index("ix_runs_started", "started_at"),
)

case_specs = sa.Table(
    "case_specs", metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("case_key", sa.String(512), nullable=False, unique=True),
    sa.Column("workload", sa.String(255), nullable=False),
    sa.Column("size", sa.String(255), nullable=False),
    sa.Column("toggles", sa.String(255), nullable=False),
    sa.Column("device", sa.String(64), nullable=False),
)

series_table = sa.Table(
    "series", metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("case_spec", sa.Integer, sa.ForeignKey("case_specs.id"), nullable=False),
    sa.Column("metric", sa.String(128), nullable=False),
    sa.UniqueConstraint("case_spec", "metric", name="uq_series_case_metric"),
)

cases = sa.Table(
    "cases", metadata,
    sa.Column("run", sa.Integer, sa.ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True),
    sa.Column("case_spec", sa.Integer, sa.ForeignKey("case_specs.id"), primary_key=True),
    sa.Column("status", sa.String(32), nullable=False),
    sa.Column("failure_class", sa.String(64)),
)

# one row per run x series; the primary key (series, run) is the index a series read goes through
measurements = sa.Table(
    "measurements", metadata,
    sa.Column("series", sa.Integer, sa.ForeignKey("series.id"), primary_key=True),
    sa.Column("run", sa.Integer, sa.ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True),
    sa.Column("value", sa.Float, nullable=False),
    sa.Column("ci_low", sa.Float),
    sa.Column("ci_high", sa.Float),
    sa.Column("n", sa.Integer),
)

APPLICATION = "perfgate.history"

# Alembic's scripts (env.py, versions/) inside the package, so a wheel carries them.
MIGRATIONS_DIR = Path(__file__).resolve().parent / "migrations"
# The newest revision in MIGRATIONS_DIR/versions. Kept here so that opening a store that is already up
# to date does not import Alembic (0.1 s of `history show`'s start-up); a test checks it is Alembic's head.
SCHEMA_HEAD = "0001"
# The revision whose schema a store made before Alembic (its own schema_version at 1) has.
FIRST_REVISION = "0001"


# ---------------------------------------------------------------- where the store is

def resolve_url(settings_extra: dict[str, Any], root: Path, override: str | None = None) -> str:
    """The store's URL: ``override`` (--history-url), else $PERFGATE_HISTORY_URL, else ``history`` in
    [tool.perfgate], else the default SQLite file. A relative SQLite path is relative to ``root``."""
    url = override or os.environ.get(URL_ENV) or settings_extra.get("history") or DEFAULT_URL
    if not isinstance(url, str) or not url.strip():
        raise HistoryError(f"[tool.perfgate] history must be a database URL string, got {'an empty one' if isinstance(url, str) else type(url).__name__}; "
                           f"e.g. {DEFAULT_URL!r} or 'postgresql://user@host/db'")
    url = url.strip()
    scheme = url.split(":", 1)[0].lower()
    if scheme == "sqlite":
        prefix = "sqlite:///"
        if not url.startswith(prefix) or url == prefix:
            raise HistoryError(f"history URL {redact(url)!r}: a SQLite store is sqlite:///PATH (relative to the project "
                               "root) or sqlite:////ABSOLUTE/PATH")
        path = Path(url[len(prefix):])
        if not path.is_absolute():
            path = root / path
        return prefix + str(path)
    if scheme in ("postgresql", "postgres", "postgresql+psycopg"):
        rest = url.split(":", 1)[1]
        if rest.split("?", 1)[0].count("@") > 1:  # SQLAlchemy would take the password's tail for the host
            raise HistoryError(f"history URL {redact(url)!r}: its user or password holds an unencoded '@'; "
                               "write it as %40")
        return "postgresql+psycopg:" + rest
    raise HistoryError(f"history URL {redact(url)!r}: unsupported database; valid: sqlite:///PATH, postgresql://...")


_SHOWN_HOST = re.compile(r"(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9._-]+)(:[0-9]{1,5})?")
_SHOWN_DATABASE = re.compile(r"[A-Za-z0-9._$-]*")


def redact(url: str) -> str:
    """How a store is shown anywhere (messages, `history add`, history.html): ``dialect://host:port/db``,
    never its user, password or query (``?password=``, ``?sslpassword=``...). Parsed by hand, not by
    SQLAlchemy, which reads a password holding an unencoded '@' as part of the host; a host or database
    that is not plainly one (the URL is malformed) is shown as '?'."""
    scheme, sep, rest = url.partition("://")
    dialect = scheme.split("+", 1)[0].lower()
    if not sep or not re.fullmatch(r"[a-z][a-z0-9.-]*", dialect):
        return "(a database URL)"
    if dialect == "sqlite":  # a local file: its path, never a query
        return "sqlite:///" + rest[1:].split("?", 1)[0] if rest.startswith("/") else "sqlite://?"
    # the query starts at the first '?' after the last '/' (a password may hold '/' or '?'); the host follows
    # the last '@' before the query (a password may hold '@')
    last_slash = rest.rfind("/")
    query = rest.find("?", last_slash + 1)
    before_query = (rest if query < 0 else rest[:query]).split("#", 1)[0]
    if "@" in rest and "@" not in before_query:  # an '@' only past the cut: the cut was inside the userinfo
        return f"{dialect}://?"
    host, _, database = before_query.rpartition("@")[2].partition("/")
    host = host if _SHOWN_HOST.fullmatch(host) else "?"
    database = database if _SHOWN_DATABASE.fullmatch(database) else "?"
    return f"{dialect}://{host}/{database}"


def scrub(text: str, url: str) -> str:
    """``text`` (a driver's error message) without the parts of ``url`` that may be secret: the URL itself,
    its userinfo and each of its parts, and every query value, each replaced by '***'."""
    _, _, rest = url.partition("://")
    secrets = {url, rest}
    if "@" in rest:
        userinfo = rest.rsplit("@", 1)[0]
        secrets |= {userinfo, *userinfo.split(":"), *userinfo.split("@")}
    else:
        # a 'user:password' whose '@host' was forgotten reads as host:port: a port that is not a number is the
        # password, and the host the user
        netloc = re.split(r"[/?#]", rest, maxsplit=1)[0]
        pieces = netloc.split(":")
        if any(not p.isdigit() for p in pieces[1:]):
            secrets |= {netloc, *pieces}
    for _, _, value in (part.partition("=") for part in re.split(r"[?&]", rest)[1:]):
        secrets.add(value)
    secrets |= {unquote(s) for s in secrets}  # the driver sees (and may quote) them percent-decoded
    for secret in sorted((s for s in secrets if len(s) >= 3), key=len, reverse=True):
        text = text.replace(secret, "***")
    return text


def sqlite_path(url: str) -> Path | None:
    return Path(url[len("sqlite:///"):]) if url.startswith("sqlite:///") else None


# ---------------------------------------------------------------- opening

@dataclass
class Store:
    """An open history store. ``url`` is the SQLAlchemy URL; ``engine`` its engine."""

    url: str
    engine: Engine
    revision: str = ""  # the schema revision (Alembic's) the store is at once open
    notes: list[str] = field(default_factory=list)

    @property
    def is_sqlite(self) -> bool:
        return self.engine.dialect.name == "sqlite"

    def describe(self) -> str:
        path = sqlite_path(self.url)
        return str(path) if path else redact(self.url)

    def close(self) -> None:
        self.engine.dispose()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _check_sqlite_file(path: Path) -> bool:
    """Look at an existing file before SQLAlchemy (or WAL mode) touches it: True when it is a perfgate
    store, False when it is empty (a new store); HistoryError for anything else, the file left as it is."""
    if not path.exists():
        return False
    if path.is_dir():
        raise HistoryError(f"history store {path} is a directory; expected a SQLite file")
    if path.stat().st_size == 0:
        return False
    with open(path, "rb") as fh:
        head = fh.read(16)
    if head != b"SQLite format 3\x00":
        raise HistoryError(f"history store {path} is not a SQLite database (corrupt or another kind of file); "
                           "move it away or point [tool.perfgate] history / PERFGATE_HISTORY_URL elsewhere")
    try:
        # quoted: in a URI a '?' starts the query, a '#' the fragment and a '%' an escape, so a folder named
        # with one would open another file (or none) than the store's
        con = sqlite3.connect(f"file:{quote(str(path))}?mode=ro", uri=True, timeout=SQLITE_BUSY_TIMEOUT_S)
        try:
            names = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        finally:
            con.close()
    except sqlite3.DatabaseError as exc:
        raise HistoryError(f"history store {path} is a corrupt SQLite database ({exc})") from exc
    if not names:
        return False
    if "schema_version" not in names:
        raise HistoryError(f"history store {path} is a SQLite database of something else (tables: "
                           f"{', '.join(sorted(names)[:5])}); not a perfgate history")
    return True


def _sqlite_engine(path: Path) -> Engine:
    # the path as the URL's database field, not parsed out of the URL text, where a '?' in a folder's name
    # would start the query
    engine = sa.create_engine(sa.engine.URL.create("sqlite", database=str(path)),
                              connect_args={"timeout": SQLITE_BUSY_TIMEOUT_S})

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        # the driver's own transaction handling off: we BEGIN IMMEDIATE ourselves (below)
        dbapi_conn.isolation_level = None
        cur = dbapi_conn.cursor()
        cur.execute(f"PRAGMA busy_timeout = {int(SQLITE_BUSY_TIMEOUT_S * 1000)}")
        cur.execute("PRAGMA journal_mode = WAL")
        cur.execute("PRAGMA synchronous = NORMAL")
        cur.execute("PRAGMA foreign_keys = ON")
        cur.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        conn.exec_driver_sql("BEGIN IMMEDIATE")

    return engine


def open_store(url: str, *, create: bool, migrations_dir: Path | None = None) -> Store:
    """Open (and with ``create``, make or upgrade) the store at ``url`` (from resolve_url).

    ``create=False`` (show, detect, report): a store that does not exist yet is a HistoryError naming how
    to make one; an older store is upgraded either way (reading needs the current schema).
    ``migrations_dir`` defaults to MIGRATIONS_DIR (tests pass a copy with revisions of their own).
    """
    path = sqlite_path(url)
    if path is not None:
        exists = _check_sqlite_file(path)
        if not exists and not create:
            raise HistoryError(f"no history store at {path}; `perfgate history add RUN` (or `perfgate run "
                               "--history`) creates it")
        if not exists:
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise HistoryError(f"cannot create the history store's folder {path.parent}: {exc.strerror or exc}") from exc
        engine = _sqlite_engine(path)
    else:
        try:
            engine = sa.create_engine(url, connect_args={"connect_timeout": 10})
        except ModuleNotFoundError as exc:
            raise HistoryError(f"a PostgreSQL history store needs psycopg: pip install 'perfgate[postgres]' ({exc})") from exc
        except Exception as exc:  # noqa: BLE001 - any parse error may quote the URL: only through scrub
            # (a forgotten '@host' makes the password a port: SQLAlchemy's ValueError quotes it)
            raise HistoryError(f"history URL {redact(url)!r} is not valid: {scrub(_first_line(exc), url)}") from exc
    store = Store(url, engine)
    try:
        store.revision = _migrate(store, migrations_dir, create)
    except HistoryError:
        engine.dispose()
        raise
    except OperationalError as exc:
        engine.dispose()
        raise HistoryError(f"cannot reach the history store {store.describe()}: "
                           f"{scrub(_first_line(exc.orig or exc), url)}") from exc
    except Exception as exc:  # noqa: BLE001 - the driver's errors (and its URL parsing) may quote the URL
        engine.dispose()
        raise HistoryError(f"history store {store.describe()} cannot be used: "
                           f"{scrub(_first_line(getattr(exc, 'orig', None) or exc), url)}") from exc
    return store


def _first_line(exc: Any) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


# What _read_revision finds in a perfgate store made before Alembic: its schema is FIRST_REVISION's.
BEFORE_ALEMBIC = "1 (before Alembic)"


def _read_revision(conn: Connection) -> str | None:
    """The store's schema revision: Alembic's, or BEFORE_ALEMBIC for a store made by the release before
    Alembic; None when the database has no tables at all (a new, empty one). HistoryError for a database
    that is not a perfgate history, or a pre-Alembic one at a version no release made."""
    names = set(sa.inspect(conn).get_table_names())
    if not names:
        return None
    if "schema_version" not in names:
        raise HistoryError(f"database holds tables of something else ({', '.join(sorted(names)[:5])}); "
                           "not a perfgate history store")
    row = conn.execute(sa.select(schema_version.c.version, schema_version.c.application)).first()
    if row is None or row.application != APPLICATION:
        raise HistoryError("database has a schema_version table that is not perfgate's; not a perfgate history store")
    if "alembic_version" in names:
        revs = [r[0] for r in conn.exec_driver_sql("SELECT version_num FROM alembic_version")]
        if len(revs) != 1:
            raise HistoryError(f"history store has {len(revs)} schema revisions recorded in alembic_version "
                               f"({', '.join(revs) or 'none'}); expected one")
        return revs[0]
    # The release before Alembic counted its own migrations in schema_version; it shipped one.
    if row.version != 1:
        raise HistoryError(f"history store has schema version {row.version} without Alembic's bookkeeping, "
                           "newer than this perfgate knows (1); upgrade perfgate to read it")
    return BEFORE_ALEMBIC


def _alembic_config(conn: Connection, migrations_dir: Path) -> Any:
    from alembic.config import Config

    config = Config()
    # ConfigParser interpolation: a '%' in the install path must be doubled
    config.set_main_option("script_location", str(migrations_dir).replace("%", "%%"))
    config.attributes["connection"] = conn  # env.py runs the migrations on it, inside our transaction
    return config


def _migrate(store: Store, migrations_dir: Path | None, create: bool) -> str:
    """Bring the store to the head revision of ``migrations_dir``; that revision."""
    with store.engine.connect() as conn:
        with conn.begin():
            revision = _read_revision(conn)
    if revision == SCHEMA_HEAD and migrations_dir is None:
        return revision  # up to date, without importing Alembic
    if revision is None and not create:
        raise HistoryError(f"history store {store.describe()} is empty; `perfgate history add RUN` fills it")

    from alembic import command
    from alembic.script import ScriptDirectory
    from alembic.util import CommandError

    where = migrations_dir or MIGRATIONS_DIR
    try:
        script = ScriptDirectory(str(where))
        head = script.get_current_head()
        known = {s.revision for s in script.walk_revisions()}
    except CommandError as exc:  # an install without its migration scripts
        raise HistoryError(f"perfgate's schema migrations in {where} cannot be read ({_first_line(exc)}); "
                           "reinstall perfgate") from exc

    def check_known(rev: str | None) -> None:
        if rev is not None and rev != BEFORE_ALEMBIC and rev not in known:
            raise HistoryError(f"history store {store.describe()} is at schema revision {rev}, newer than this "
                               f"perfgate knows (head {head}); upgrade perfgate to read it")

    check_known(revision)
    if revision == head:
        return head  # type: ignore[return-value]  # perfgate ships its migrations: a head
    # Upgrade under the write lock (SQLite: BEGIN IMMEDIATE; PostgreSQL: an advisory lock), re-reading the
    # revision inside it: two processes opening an old store at once upgrade it once.
    with store.engine.connect() as conn:
        with conn.begin():
            if not store.is_sqlite:
                conn.exec_driver_sql("SELECT pg_advisory_xact_lock(7316016)")
            revision = _read_revision(conn)
            check_known(revision)
            if revision != head:
                config = _alembic_config(conn, where)
                if revision == BEFORE_ALEMBIC:
                    command.stamp(config, FIRST_REVISION)
                command.upgrade(config, "head")
                was = "none (a new store)" if revision is None else revision
                store.notes.append(f"history store {store.describe()}: schema {was} -> {head}")
    return head  # type: ignore[return-value]  # as above


# ---------------------------------------------------------------- writing

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


# ---------------------------------------------------------------- reading

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
