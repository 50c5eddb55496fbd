"""The history store: every run kept in a real database through SQLAlchemy (SQLite file or PostgreSQL):
where it is (its URL, shown redacted), its tables, opening it and bringing its schema up to date. Adding a
run is perfgate.history.writing, reading series perfgate.history.reading.

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

import os
import re
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import OperationalError

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
