"""`perfgate history add|show|detect|report` end to end: the real CLI in a subprocess."""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.fixtures.history import commit_of, make_run, write_run

# slow: runs perfgate history in subprocesses, on SQLite and PostgreSQL (the fast loop, pytest -m "not slow", leaves them to CI)
pytestmark = pytest.mark.slow

STEP_AT = 24


def cli(args: list[str], cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    full = {k: v for k, v in os.environ.items() if k != "PERFGATE_HISTORY_URL"}
    full.update(env or {})
    return subprocess.run([sys.executable, "-m", "perfgate", *args], cwd=cwd, capture_output=True, text=True,
                          env=full, timeout=120)


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A project with [tool.perfgate] history set, and 40 runs where case 0 steps +10% at run 24."""
    root = tmp_path_factory.mktemp("project")
    (root / "pyproject.toml").write_text('[tool.perfgate]\nhistory = "sqlite:///store/h.db"\n')
    rng = np.random.default_rng(3)
    for i in range(40):
        t0 = 0.010 * (1.10 if i >= STEP_AT else 1.0) * rng.normal(1, 0.01)
        write_run(root / "runs", make_run(i, [t0, 0.020 * rng.normal(1, 0.01)]))
    out = cli(["history", "add", "runs"], root)
    assert out.returncode == 0, out.stderr
    assert out.stdout.count("added: ") == 40
    return root


def test_add_twice_is_a_no_op(project: Path) -> None:
    out = cli(["history", "add", "runs/run-000003"], project)
    assert out.returncode == 0 and "already in history: run-000003" in out.stdout


def test_show_table_csv_json(project: Path) -> None:
    out = cli(["history", "show", "-w", "workload_0/*/eager/*", "--last", "5"], project)
    assert out.returncode == 0, out.stderr
    assert "workload_0/smoke/eager/cpu  (step_time, 5 run(s))" in out.stdout
    assert "compile" not in out.stdout
    rows = list(csv.DictReader(io.StringIO(cli(["history", "show", "--format", "csv"], project).stdout)))
    assert len(rows) == 80 and {r["case"] for r in rows} == {"workload_0/smoke/eager/cpu", "workload_0/smoke/compile/cpu"}
    assert rows[0]["commit"] == commit_of(0) and float(rows[0]["value"]) > 0
    data = json.loads(cli(["history", "show", "--format", "json", "--metric", "kernels_per_step"], project).stdout)
    assert len(data) == 80 and data[0]["value"] == 12.0


def test_detect_names_the_commit_range_of_the_step(project: Path) -> None:
    out = cli(["history", "detect"], project)
    assert out.returncode == 0, out.stderr
    lines = [ln for ln in out.stdout.splitlines() if ln.strip().startswith("step")]
    assert len(lines) == 1, out.stdout
    assert "regression" in lines[0] and f"between {commit_of(STEP_AT - 1)[:12]} and {commit_of(STEP_AT)[:12]}" in lines[0]
    data = json.loads(cli(["history", "detect", "--format", "json"], project).stdout)
    cp = [c for a in data for c in a["change_points"]]
    assert len(cp) == 1 and 0.07 < cp[0]["change"] < 0.13 and cp[0]["ci_low"] < cp[0]["change"] < cp[0]["ci_high"]
    assert cli(["history", "detect", "--fail-on-regression"], project).returncode == 1


def test_report_is_a_self_contained_page_with_trend_charts(project: Path) -> None:
    out = cli(["history", "report", "--all-metrics", "--out", "out/history.html"], project)
    assert out.returncode == 0, out.stderr
    html = (project / "out" / "history.html").read_text()
    assert html.count("<svg") >= 2 * 3  # two cases, several metrics each
    assert 'id="trend-workload_0-smoke-eager-cpu-step_time"' in html
    assert f"commit {commit_of(STEP_AT)[:12]}" in html  # hover title of a point
    assert 'class="step regression"' in html and "<script" not in html


def test_bad_inputs_exit_2_with_one_line_and_the_store_untouched(project: Path, tmp_path: Path) -> None:
    store = project / "store" / "h.db"
    before = store.read_bytes()
    (tmp_path / "empty-run").mkdir()
    for args in (["history", "add", str(tmp_path / "empty-run")], ["history", "add", str(tmp_path / "nope")]):
        out = cli(args, project)
        assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1, out.stderr
        assert "results.json" in out.stderr or "no such" in out.stderr
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "results.json").write_text("{not json")
    out = cli(["history", "add", "runs/run-000001", str(tmp_path / "broken")], project)
    assert out.returncode == 2 and "not valid JSON" in out.stderr
    assert store.read_bytes() == before
    corrupt = tmp_path / "corrupt.db"
    corrupt.write_bytes(b"garbage" * 100)
    out = cli(["history", "add", "runs/run-000001"], project, {"PERFGATE_HISTORY_URL": f"sqlite:///{corrupt}"})
    assert out.returncode == 2 and "not a SQLite database" in out.stderr and len(out.stderr.splitlines()) == 1
    assert corrupt.read_bytes() == b"garbage" * 100
    out = cli(["history", "show"], tmp_path)
    assert out.returncode == 2 and "no history store" in out.stderr


@pytest.mark.parametrize("folder", ["a#b?c%d", "50%25 off"])
def test_a_store_in_a_folder_named_with_uri_characters_is_found(tmp_path: Path, folder: str) -> None:
    """'#', '?' and '%' mean something in a URI (fragment, query, escape): the store is opened by its path,
    so show, detect and report read the store `history add` wrote there, not "no history store"."""
    root = tmp_path / folder
    root.mkdir()
    (root / "pyproject.toml").write_text('[tool.perfgate]\nhistory = "sqlite:///store/h.db"\n')
    for i in range(3):
        write_run(root / "runs", make_run(i, [0.010, 0.020]))
    added = cli(["history", "add", "runs"], root)
    assert added.returncode == 0 and added.stdout.count("added: ") == 3, added.stdout + added.stderr
    assert (root / "store" / "h.db").is_file()
    for args in (["history", "show", "--format", "json"], ["history", "detect"],
                 ["history", "report", "--out", str(root / "h.html")]):
        out = cli(args, root)
        assert out.returncode == 0, (args, out.stdout + out.stderr)
    assert len(json.loads(cli(["history", "show", "--format", "json"], root).stdout)) > 0
    assert (root / "h.html").is_file()


def test_history_key_must_be_a_url(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text("[tool.perfgate]\nhistory = 3\n")
    out = cli(["history", "show"], tmp_path)
    assert out.returncode == 2 and "must be a database URL" in out.stderr


def test_filters_since_and_branch(project: Path) -> None:
    data = json.loads(cli(["history", "show", "--format", "json", "--since", "2026-01-01T00:30"], project).stdout)
    assert len(data) == 2 * 10 and min(r["started_at"] for r in data) == "2026-01-01T00:30:00Z"
    assert cli(["history", "show", "--format", "json", "--branch", "other"], project).stdout.strip() == "[]"
    out = cli(["history", "show", "--since", "yesterday"], project)
    assert out.returncode == 2 and "--since 'yesterday'" in out.stderr


def test_untrusted_text_is_refused_or_escaped(tmp_path: Path) -> None:
    """A workload name with markup shows as text in history.html; an overlong one is refused, exit 2."""
    from perfgate.model.results import CaseSpec
    from tests.fixtures.history import case_with

    run = make_run(0, [0.01])
    run.cases.append(case_with(CaseSpec("<script>alert(1)</script>", "smoke", ("eager",), "cpu"), 0.02))
    write_run(tmp_path / "runs", run)
    long_run = make_run(1, [0.01])
    long_run.cases.append(case_with(CaseSpec("w" * 600, "smoke", ("eager",), "cpu"), 0.02))
    write_run(tmp_path / "runs", long_run)
    env = {"PERFGATE_HISTORY_URL": f"sqlite:///{tmp_path / 'h.db'}"}
    out = cli(["history", "add", "runs/run-000001"], tmp_path, env)
    assert out.returncode == 2 and "at most 512 characters" in out.stderr and not (tmp_path / "h.db").exists()
    assert cli(["history", "add", "runs/run-000000"], tmp_path, env).returncode == 0
    assert cli(["history", "report", "--out", "h.html"], tmp_path, env).returncode == 0
    html = (tmp_path / "h.html").read_text()
    assert "<script>" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html


def test_commit_and_branch_overrides(tmp_path: Path) -> None:
    write_run(tmp_path / "runs", make_run(0, [0.01], commit="c" * 40, branch="main"))
    env = {"PERFGATE_HISTORY_URL": f"sqlite:///{tmp_path / 'h.db'}"}
    out = cli(["history", "add", "runs/run-000000", "--commit", "d" * 40, "--branch", "feature"], tmp_path, env)
    assert out.returncode == 0 and f"commit {'d' * 12}, branch feature" in out.stdout
    (row,) = json.loads(cli(["history", "show", "--format", "json", "--branch", "feature"], tmp_path, env).stdout)
    assert row["commit"] == "d" * 40
    out = cli(["history", "add", "runs", "runs/run-000000", "--commit", "e" * 40], tmp_path, env)
    assert out.returncode == 2 and "one run's commit" in out.stderr


# ---------------------------------------------------------------- a store's URL never shows its secrets

SECRETS = ("hunter2", "s3cr3t-key", "p@ss", "pw-user")


def _shapes(host_port: str) -> dict[str, str]:
    """The ways a password rides in a PostgreSQL URL; the store is host_port/perfgate in each."""
    return {
        "userinfo": f"postgresql://perfgate:pw-user@{host_port}/perfgate",
        "?password=": f"postgresql://perfgate@{host_port}/perfgate?password=hunter2",
        "?sslpassword=": f"postgresql://perfgate@{host_port}/perfgate?sslpassword=s3cr3t-key&sslmode=disable",
        "unencoded @": f"postgresql://perfgate:p@ss@{host_port}/perfgate",
    }


def _leaks(text: str) -> list[str]:
    return [s for s in SECRETS if s in text] + (["userinfo"] if "//perfgate" in text else [])


def test_redact_shows_dialect_host_port_and_database_only() -> None:
    from perfgate.history.store import redact

    for shape, url in _shapes("db.example.com:5433").items():
        assert redact(url) == "postgresql://db.example.com:5433/perfgate", shape
        assert redact(url.replace("postgresql:", "postgresql+psycopg:")) == "postgresql://db.example.com:5433/perfgate"
    # whatever the URL's shape, nothing before its host and nothing after its database comes out
    for odd in ("postgresql://u:pa/ss@h/db", "postgresql://u:pa?ss@h", "postgresql://u:pa/s?s@h",
                "postgresql://h/db?password=a@b.example", "mysql://u:p@ss@h/db?password=hunter2", "postgresql:u:p@h"):
        shown = redact(odd)
        assert not any(s in shown for s in ("pa", "ss", "u:", "hunter2", "a@")), (odd, shown)


def test_a_drivers_message_is_scrubbed_of_the_urls_secrets() -> None:
    from perfgate.history.store import scrub

    url = "postgresql+psycopg://bob:p%40ssw0rd@h:5/db?password=hunter2&sslpassword=s3cr3t-key"
    text = scrub(f"auth failed for user bob (p@ssw0rd); options hunter2 s3cr3t-key; dsn {url}", url)
    assert not any(s in text for s in ("bob", "p@ssw0rd", "p%40ssw0rd", "hunter2", "s3cr3t-key")), text
    assert text.startswith("auth failed for user ***")


@pytest.mark.parametrize("shape", list(_shapes("x")))
def test_no_password_in_the_error_line_of_an_unreachable_store(tmp_path: Path, shape: str) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens here once closed
    url = _shapes(f"127.0.0.1:{port}")[shape]
    for args, env in ((["history", "show", "--history-url", url], None),
                      (["history", "report", "--out", str(tmp_path / "h.html")], {"PERFGATE_HISTORY_URL": url})):
        out = cli(args, tmp_path, env)
        assert out.returncode in (2, 3), out.stdout + out.stderr
        assert len(out.stderr.strip().splitlines()) == 1, out.stderr
        assert not _leaks(out.stdout + out.stderr), (shape, out.stderr)
        assert f"127.0.0.1:{port}/perfgate" in out.stderr or "history store" in out.stderr


@pytest.mark.parametrize("url", [
    "postgresql://bob:s3cret99/perf",  # the '@host' forgotten: the password reads as a port
    "postgresql://bob:s3cret99",
    "postgres://bob:s3cret99?sslmode=require",
    "postgresql://:s3cret99/perf",
    "postgresql://[bob:s3cret99/perf",
    "postgresql://bob:s3c%2Fret99/perf",
    "postgresql://bob:s3cret99@db:notaport/perf",
    "postgresql://bob:s3cret99@[::1/perf",
])
def test_a_malformed_url_is_one_line_exit_2_without_its_password(tmp_path: Path, url: str) -> None:
    """SQLAlchemy's own parse errors quote the URL's pieces (`invalid literal for int() with base 10:
    's3cret99'`): each goes through the redaction, one line, exit 2, never an `unexpected ValueError`."""
    for args, env in ((["history", "show", "--history-url", url], None),
                      (["history", "detect"], {"PERFGATE_HISTORY_URL": url})):
        out = cli(args, tmp_path, env)
        assert out.returncode == 2, out.stdout + out.stderr
        assert len(out.stderr.strip().splitlines()) == 1 and "unexpected" not in out.stderr, out.stderr
        assert "s3cret99" not in out.stdout + out.stderr and "s3c/ret99" not in out.stderr, out.stderr


def test_no_password_for_an_unsupported_database() -> None:
    out = cli(["history", "show", "--history-url", "mysql://perfgate:p@ss@h/db?password=hunter2"], Path.cwd())
    assert out.returncode == 2 and "unsupported database" in out.stderr, out.stderr
    assert not _leaks(out.stderr), out.stderr


def test_no_password_in_history_add_output_or_history_html(tmp_path: Path) -> None:
    """A real PostgreSQL (trust authentication: the passwords ride along and are ignored) reached with each
    URL shape that connects: `history add` says where it wrote, history.html names the store, and neither
    shows the password or the user."""
    from tests.fixtures.postgres import PostgresUnavailable, postgres_server

    try:
        with postgres_server() as pg:
            host_port = pg.split("@", 1)[1].split("/", 1)[0]
            folder = write_run(tmp_path / "runs", make_run(0, [0.01, 0.02]))
            for shape, url in _shapes(host_port).items():
                if shape == "unencoded @":  # cannot connect: its error line is the test above
                    continue
                added = cli(["history", "add", str(folder)], tmp_path, {"PERFGATE_HISTORY_URL": url})
                assert added.returncode == 0, added.stderr
                assert f"-> postgresql://{host_port}/perfgate" in added.stdout, added.stdout
                assert not _leaks(added.stdout + added.stderr), (shape, added.stdout)
                page = tmp_path / f"{shape.strip('?=')}.html"
                made = cli(["history", "report", "--out", str(page)], tmp_path, {"PERFGATE_HISTORY_URL": url})
                assert made.returncode == 0, made.stderr
                html = page.read_text()
                assert f"postgresql://{host_port}/perfgate" in html
                assert not _leaks(html + made.stdout + made.stderr), shape
    except PostgresUnavailable as exc:
        pytest.skip(f"no PostgreSQL server for the tests: {exc}")


@pytest.mark.parametrize("values", [[11e-6], [11e-6, 11e-6, 11e-6], [477e-6, 476e-6]])
def test_a_flat_series_gets_y_ticks_that_say_different_values(values: list[float]) -> None:
    """One run, or runs at the same step time: the chart's five y ticks once all read `11 us`."""
    from perfgate.history.detect import SeriesAnalysis
    from perfgate.history.reading import Point
    from perfgate.history.report import trend_chart

    points = [Point(f"r{i}", None, None, f"2026-11-26T21:3{i}:00Z", "m", v, v, v, 100) for i, v in enumerate(values)]
    chart = trend_chart(points, SeriesAnalysis("w/smoke/eager/cpu", "step_time", len(points)))
    labels = [label for _, label in chart.yticks]
    assert len(labels) >= 3 and len(set(labels)) == len(labels), labels


@pytest.mark.parametrize("count, words", [(1, "(1 run)"), (2, "(2 runs)")])
def test_a_chart_heading_counts_its_runs_in_words(count: int, words: str) -> None:
    """A series of one run was headed `step_time (1 runs)`."""
    from perfgate.history.detect import SeriesAnalysis
    from perfgate.history.reading import Point
    from perfgate.history.report import render, trend_chart

    points = [Point(f"r{i}", None, None, f"2026-11-26T21:3{i}:00Z", "m", 1e-3, 1e-3, 1e-3, 100) for i in range(count)]
    chart = trend_chart(points, SeriesAnalysis("w/smoke/eager/cpu", "step_time", count))
    html = render([chart], "history.db", "").decode()
    assert f"step_time {words}</h3>" in html and f"over {words[1:-1]}\"" in html
    assert "1 runs" not in html
