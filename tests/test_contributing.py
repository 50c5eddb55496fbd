"""The contributors' habits as checks: the slow-mark guard, .ci/run's lint and type steps, pre-commit's
local hooks and the ruff rules (CONTRIBUTING.md)."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys

import conftest
import pytest
import yaml
from conftest import REPO, dev_tool, heavy_process

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib


@pytest.mark.parametrize("argv", [
    [sys.executable, "-m", "perfgate", "run", "--suite", "smoke"],
    [sys.executable, "-m", "perfgate", "compare", "a", "b"],
    [sys.executable, "-m", "perfgate.worker.main", "--case", "spec.json", "--out", "out.json"],
    [sys.executable, "-m", "perfgate.worker.main", "--zygote", "5", "--tag", "x"],
    ["/home/u/.venv/bin/perfgate", "report", "runs/1"],
    f"{sys.executable} -m perfgate run -w rollout",
    ["bash", "-c", "python -m perfgate run --suite smoke"],
    [sys.executable, "-m", "tensorboard.main", "--logdir", "tb"],
    [sys.executable, "-m", "venv", "/tmp/v"],
    ["/usr/lib/postgresql/16/bin/initdb", "-D", "data"],
    ["/usr/bin/g++", "-shared", "x.cpp"],
])
def test_the_guard_knows_a_heavy_process(argv):
    assert heavy_process(argv) is not None


@pytest.mark.parametrize("argv", [
    ["git", "status"],
    ["git", "-C", "/work/perfgate", "log"],
    [sys.executable, "-c", "print(1)"],
    ["cat", "/proc/self/personality"],
    "git rev-parse HEAD",
])
def test_the_guard_lets_quick_processes_start(argv):
    assert heavy_process(argv) is None


def test_a_test_without_the_slow_mark_cannot_start_a_worker(request):
    """The guard stops the process before it starts and fails the test, naming what it started."""
    with pytest.raises(pytest.fail.Exception, match="perfgate.worker.main.*not marked slow"):
        subprocess.run([sys.executable, "-m", "perfgate.worker.main", "--probe"], capture_output=True, timeout=60)
    del request.node.stash[conftest._STARTED]  # this test's own failure was the point


@pytest.mark.slow
def test_a_test_with_the_slow_mark_may_start_one():
    proc = subprocess.run([sys.executable, "-m", "perfgate", "--version"], capture_output=True, text=True,
                          timeout=120, env=conftest.cli_env())
    assert proc.returncode == 0, proc.stderr


def test_the_slow_mark_is_registered_and_marks_are_strict():
    pytest_ini = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    assert any(m.startswith("slow:") for m in pytest_ini["markers"])
    assert "--strict-markers" in pytest_ini["addopts"].split()


def _commands(script: str) -> list[str]:
    return [line.strip() for line in script.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def test_ci_runs_ruff_and_mypy_after_installing_and_ends_with_the_readmes_test_command():
    commands = _commands((REPO / ".ci" / "run").read_text())
    assert commands[-1] == "python -m pytest -q"
    assert "python -m pytest -q" in (REPO / "README.md").read_text()
    install = max(i for i, c in enumerate(commands) if "pip install" in c and ".[dev" in c)  # [dev] or [dev,...]
    ruff, mypy = commands.index("ruff check ."), commands.index("mypy")
    assert install < ruff < len(commands) - 1 and install < mypy < len(commands) - 1


def test_pre_commit_hooks_are_local_and_run_ruff_and_mypy():
    config = yaml.safe_load((REPO / ".pre-commit-config.yaml").read_text())
    assert [r["repo"] for r in config["repos"]] == ["local"], "hooks are fetched from nowhere: CI has no network"
    hooks = {h["id"]: h for r in config["repos"] for h in r["hooks"]}
    assert hooks["ruff"]["language"] == hooks["mypy"]["language"] == "system"
    assert shlex.split(hooks["ruff"]["entry"])[:2] == ["ruff", "check"]
    assert shlex.split(hooks["mypy"]["entry"]) == ["mypy"] and hooks["mypy"]["pass_filenames"] is False


def test_the_dev_extra_pins_the_checkers_ci_runs():
    dev = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]["dev"]
    for tool in ("ruff", "mypy", "pre-commit"):
        assert any(d.startswith(f"{tool}==") for d in dev), f"{tool} is not pinned in the dev extra"


def test_ruff_check_is_clean():
    proc = subprocess.run([dev_tool("ruff"), "check", "."], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.fixture(scope="module")
def ends_with_a_heavy_process():
    """Like the PostgreSQL fixture: set up by a slow test, ended (pg_ctl stop) after the module's last test."""
    yield
    subprocess.run([sys.executable, "-m", "pip", "--version"], capture_output=True, timeout=120)


@pytest.mark.slow
def test_a_slow_test_sets_a_module_fixture_up(ends_with_a_heavy_process):
    assert ends_with_a_heavy_process is None


def test_the_modules_last_quick_test_is_not_failed_by_a_fixtures_teardown(ends_with_a_heavy_process):
    """The guard watches setup and the test itself, not teardown: ending a module's server after a quick
    last test failed that test (test_history_store.py's last test, in CI on 2026-11-28). Keep this test last."""
    assert ends_with_a_heavy_process is None


PARALLEL_TESTS = '''
import json, os, time
import pytest

def _record(name):
    start = time.monotonic()
    time.sleep(0.5)
    with open(os.path.join(os.environ["SPANS"], name), "w") as f:
        json.dump([start, time.monotonic()], f)
'''


def test_a_timing_test_runs_alone_while_the_others_run_in_parallel(tmp_path):
    """tests/fixtures/xdist_lock.py under a real `pytest -n 2`: the two files' plain tests overlap, and no test
    runs while a `timing` one does."""
    (tmp_path / "test_one.py").write_text(PARALLEL_TESTS + "".join(
        f"\ndef test_plain_{i}():\n    _record('one-{i}')\n" for i in range(3)))
    (tmp_path / "test_two.py").write_text(PARALLEL_TESTS + "\ndef test_plain():\n    _record('two-0')\n"
                                          "\n@pytest.mark.timing\ndef test_alone():\n    _record('two-timing')\n"
                                          "\ndef test_plain_after():\n    _record('two-2')\n")
    spans = tmp_path / "spans"
    spans.mkdir()
    env = {**conftest.cli_env(), "SPANS": str(spans),
           "PYTHONPATH": os.pathsep.join([str(REPO / "tests"), str(REPO)])}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "fixtures.xdist_lock",
                           "-n", "2", "--dist", "loadfile", "-W", "ignore::pytest.PytestUnknownMarkWarning", "."],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    got = {p.name: json.loads(p.read_text()) for p in spans.iterdir()}
    assert len(got) == 6, got

    def overlap(a: str, b: str) -> bool:
        return got[a][0] < got[b][1] and got[b][0] < got[a][1]

    assert not any(overlap("two-timing", other) for other in got if other != "two-timing"), got
    assert any(overlap(f"one-{i}", plain) for i in range(3) for plain in ("two-0", "two-2")), got
