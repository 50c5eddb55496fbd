"""Shared test helpers. End-to-end tests run the real CLI in a subprocess: `python -m perfgate ...`."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

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
