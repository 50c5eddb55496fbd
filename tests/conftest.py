"""Shared test helpers. End-to-end tests run the real CLI in a subprocess: `python -m perfgate ...`."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

import pytest
from fixtures.against import against_repo
from fixtures.xdist_lock import pytest_runtest_protocol, pytest_unconfigure  # noqa: F401 - hooks: a timing test runs alone

REPO = Path(__file__).resolve().parent.parent
TEST_WORKLOADS = REPO / "tests" / "workloads"


def cli_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    env.pop("GITHUB_STEP_SUMMARY", None)
    env.update(extra)
    return env


def run_cli(*args: str, cwd: Path | str = REPO, timeout: float = 600, env: dict[str, str] | None = None,
            ) -> subprocess.CompletedProcess:
    """Run `python -m perfgate ARGS` as a user would; returns the completed process (text output)."""
    return subprocess.run(
        [sys.executable, "-m", "perfgate", *args],
        cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env or cli_env(),
    )


@pytest.fixture
def cli():
    return run_cli


def _profiled_run(out: Path, *args: str) -> dict:
    """`perfgate run` on the profile-pass test workloads (tests/workloads/profiled.py); results.json."""
    import json

    proc = run_cli("run", "--workloads-dir", str(TEST_WORKLOADS), "--processes", "1", "--samples", "3",
                   "--out", str(out), *args)
    assert proc.returncode == 0, proc.stderr + proc.stdout
    return json.loads((out / "results.json").read_text())


@pytest.fixture(scope="session")
def profiled_run(tmp_path_factory):
    """One shared run: tight_conv eager and amp-bf16, one process each (a few seconds)."""
    out = tmp_path_factory.mktemp("profiled") / "run"
    return out, _profiled_run(out, "-w", "tight_conv", "-t", "eager", "-t", "amp-bf16")


class AgainstRun(NamedTuple):
    repo: Path
    run_dir: Path
    proc: subprocess.CompletedProcess


@pytest.fixture(scope="session")
def against_run(tmp_path_factory) -> AgainstRun:
    """One `perfgate run --against HEAD~1 --gate --processes 3 --samples 3` (no re-measure) of
    fixtures.against's repository: head does 30x the work of HEAD~1 and adds newer_work, which the base lacks.
    test_gate.py, test_repro.py and test_traces.py read it; a test that writes into the repository or the
    run folder copies it first. The fixed 3 processes and 3 samples are what test_repro checks its printed
    command carries (the adaptive --against path is test_against's and test_gate's re-measure test's)."""
    root = tmp_path_factory.mktemp("against")
    repo = against_repo(root, remeasure=False)
    run_dir = root / "ab"
    proc = run_cli("run", "--against", "HEAD~1", "--gate", "--processes", "3", "--samples", "3",
                   "--out", str(run_dir), cwd=repo)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    return AgainstRun(repo, run_dir, proc)


def dev_tool(name: str) -> str:
    """The tool next to this Python (the dev extra installs it there) or on PATH; skip if absent."""
    here = Path(sys.executable).parent / name
    found = str(here) if here.exists() else shutil.which(name)
    if not found:
        pytest.skip(f"{name} is not installed (pip install -e '.[dev]')")
    return found


def zizmor_findings(target: Path, *extra: str) -> list[dict]:
    """zizmor's findings (JSON, offline) on the workflows or action at ``target``."""
    proc = subprocess.run([dev_tool("zizmor"), "--offline", "--format", "json", "--no-exit-codes", *extra, str(target)],
                          capture_output=True, text=True, timeout=120, cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout or "[]")


# The fast loop (`pytest -m "not slow"`, CONTRIBUTING.md) stays a loop of minutes only while every test that
# starts a heavy process carries the `slow` mark. A test without it that starts one fails, naming what it
# started, before the process runs: any perfgate process (a worker, a fork server, the CLI: a `python -m
# perfgate` costs seconds of imports before it does anything), compilers, TensorBoard, browsers,
# PostgreSQL, venv and package builds.
HEAVY_MODULES = {"tensorboard.main", "torch._inductor.compile_worker", "venv", "pip", "build"}
HEAVY_PROGRAMS = {"initdb", "pg_ctl", "postgres", "chromium", "chromium-browser", "gcc", "g++", "c++", "cc", "clang"}


def heavy_process(args) -> str | None:
    """What `args` (a Popen's) starts, when it is a heavy process; None otherwise."""
    if isinstance(args, (str, bytes, os.PathLike)):
        text = os.fsdecode(args)
        try:
            argv = shlex.split(text)
        except ValueError:
            argv = text.split()
    else:
        argv = [os.fsdecode(a) if isinstance(a, (str, bytes, os.PathLike)) else str(a) for a in args]
    for i, arg in enumerate(argv):
        name = Path(arg).name
        after_m = i > 0 and argv[i - 1] == "-m"
        if (after_m and arg in HEAVY_MODULES) or name in HEAVY_PROGRAMS or "playwright" in arg:
            return " ".join(argv[: i + 1])
        if (after_m and arg.startswith("perfgate")) or (i == 0 and name == "perfgate"):
            return " ".join(argv[i:i + 2])
        if " -m perfgate" in arg or arg.startswith("perfgate "):  # a shell's command line
            return arg
    return None


def _guarded(item):
    """Outside the `slow` mark, starting a heavy process fails the test (setup included: a session fixture
    that measures is set up by its first test). Teardown is not guarded: a module's fixture that a slow test
    set up (a PostgreSQL server) ends after the module's last test, which may be a quick one."""
    if item.get_closest_marker("slow") is not None:
        return (yield)
    real = subprocess.Popen._execute_child  # type: ignore[attr-defined]

    def guarded(self, args, *rest, **kwargs):
        started = heavy_process(args)
        if started is not None:
            item.stash[_STARTED] = started
            pytest.fail(f"{item.nodeid} starts {started!r} but is not marked slow: add @pytest.mark.slow "
                        "(or `pytestmark = pytest.mark.slow` for a module of such tests)", pytrace=False)
        return real(self, args, *rest, **kwargs)

    subprocess.Popen._execute_child = guarded  # type: ignore[attr-defined]
    try:
        return (yield)
    finally:
        subprocess.Popen._execute_child = real  # type: ignore[attr-defined]


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item):
    return (yield from _guarded(item))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    return (yield from _guarded(item))


_STARTED = pytest.StashKey[str]()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    """A test whose code caught the guard's failure still fails."""
    report = yield
    started = item.stash.get(_STARTED, None)
    if started is not None and report.when == "call" and report.passed:
        report.outcome = "failed"
        report.longrepr = f"{item.nodeid} starts {started!r} but is not marked slow: add @pytest.mark.slow"
    return report
