"""Shared test helpers. End-to-end tests run the real CLI in a subprocess: `python -m perfgate ...`."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

import pytest
from fixtures.against import against_repo

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
