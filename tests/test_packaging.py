"""The package a user installs: `python -m build` makes an sdist and a wheel that carry the templates (report,
history, and what `perfgate init` writes); both install into a fresh venv (with the local CPU torch), where
`perfgate list` and `perfgate init` work from outside the source tree, importing nothing from the checkout."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest
from conftest import REPO

TORCH = "torch==2.13.0"  # the local CPU build, as CI installs it
TEMPLATES = {"templates/report.html.j2", "templates/report_traces.html.j2", "templates/history.html.j2", "templates/init/example_workload.py",
             "templates/init/pyproject-table.toml", "templates/init/workflow-perfgate.yml",
             "templates/init/workflow-baselines.yml"}


def _env() -> dict[str, str]:
    """An environment that cannot reach the checkout: no PYTHONPATH, no user site-packages, no venv."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    env["PYTHONNOUSERSITE"] = "1"
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep)
                                  if not p.startswith(str(Path(sys.executable).parent)))
    return env


def _run(cmd: list[str], cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess:
    proc = subprocess.run(cmd, cwd=cwd, env=_env(), capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"{cmd}: {proc.stdout[-2000:]}{proc.stderr[-2000:]}"
    return proc


@pytest.fixture(scope="module")
def dists(tmp_path_factory) -> tuple[Path, Path]:
    if importlib_missing("build"):
        pytest.skip("build is not installed (pip install -e '.[dev]')")
    out = tmp_path_factory.mktemp("dist")
    proc = subprocess.run([sys.executable, "-m", "build", "--outdir", str(out), str(REPO)], capture_output=True,
                          text=True, timeout=600)
    if proc.returncode != 0 and "Could not find a version that satisfies" in proc.stdout + proc.stderr:
        pytest.skip("no package index reachable for the build's isolated environment (setuptools)")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (wheel,) = out.glob("*.whl")
    (sdist,) = out.glob("*.tar.gz")
    return wheel, sdist


def importlib_missing(name: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(name) is None


@pytest.fixture(scope="module")
def fresh_venv(tmp_path_factory) -> Path:
    """A new venv with only the local CPU torch in it (pip's configured index, as CI installs it)."""
    venv = tmp_path_factory.mktemp("venv") / "v"
    _run([sys.executable, "-m", "venv", str(venv)], cwd=venv.parent)
    proc = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", TORCH], cwd=venv.parent,
                          env=_env(), capture_output=True, text=True, timeout=900)
    if proc.returncode != 0:
        pytest.skip(f"cannot install {TORCH} into a fresh venv here: {proc.stderr.strip().splitlines()[-1:]}")
    return venv


@pytest.mark.slow
def test_wheel_and_sdist_carry_the_templates(dists):
    wheel, sdist = dists
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {f"perfgate/{t}" for t in TEMPLATES} <= names
    with tarfile.open(sdist) as tar:
        members = {m.name.split("/", 1)[1] for m in tar.getmembers() if "/" in m.name}
    assert {f"perfgate/{t}" for t in TEMPLATES} <= members


def _check_installed(venv: Path, work: Path) -> None:
    """`perfgate list` and `perfgate init` from outside the source tree, with the installed package."""
    python, perfgate = str(venv / "bin" / "python"), str(venv / "bin" / "perfgate")
    where = _run([python, "-c", "import perfgate, sys; print(perfgate.__file__)"], cwd=work).stdout.strip()
    assert Path(where).is_relative_to(venv) and not Path(where).is_relative_to(REPO), where
    listed = _run([perfgate, "list"], cwd=work).stdout
    assert "eager" in listed and "operator_rollout" not in listed  # perfgate's own workloads stay home
    repo = work / "their-repo"
    repo.mkdir()
    _run(["git", "init", "-q"], cwd=repo)
    init = _run([perfgate, "init"], cwd=repo).stdout
    assert "create  workloads/example_mlp.py" in init and "create  .github/workflows/perfgate.yml" in init
    listed = _run([perfgate, "list"], cwd=repo).stdout  # a worker imports the example with the venv's torch
    assert "example_mlp" in listed


@pytest.mark.slow
def test_wheel_installs_into_a_fresh_venv_and_works_outside_the_checkout(dists, fresh_venv, tmp_path):
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    wheel, _ = dists
    _run([str(fresh_venv / "bin" / "python"), "-m", "pip", "install", "-q", str(wheel)], cwd=tmp_path, timeout=900)
    _check_installed(fresh_venv, tmp_path)


@pytest.mark.slow
def test_sdist_installs_into_a_fresh_venv_and_works_outside_the_checkout(dists, fresh_venv, tmp_path):
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    _, sdist = dists
    python = str(fresh_venv / "bin" / "python")
    _run([python, "-m", "pip", "uninstall", "-q", "-y", "perfgate"], cwd=tmp_path)  # the wheel's, if installed
    _run([python, "-m", "pip", "install", "-q", str(sdist)], cwd=tmp_path, timeout=900)
    _check_installed(fresh_venv, tmp_path)


def _release(version: str) -> tuple[int, ...]:
    """A release number without its trailing zeros: 8.1 and 8.1.0 are the same floor."""
    parts = [int(p) for p in version.split(".")]
    while parts and parts[-1] == 0:
        parts.pop()
    return tuple(parts)


def _floors() -> dict[str, tuple[int, ...]]:
    """pyproject.toml's runtime floors, {lowercase name: version}, torch and Python-version-only ones aside."""
    import re

    from perfgate.model.config import read_toml

    floors = {}
    for dep in read_toml(REPO / "pyproject.toml")["project"]["dependencies"]:
        m = re.fullmatch(r"([A-Za-z0-9_.-]+)>=([0-9][0-9.]*)(;.*)?", dep.replace(" ", ""))
        assert m, f"{dep!r}: every runtime dependency has a floor (name>=version)"
        if m[1] != "torch" and not m[3]:
            floors[m[1].lower()] = _release(m[2])
    return floors


def test_the_lowest_versions_constraints_pin_exactly_the_declared_floors():
    """The lowest-versions CI job installs .ci/lowest-constraints.txt: it must be pyproject's floors, all of them."""
    pins = {}
    for line in (REPO / ".ci" / "lowest-constraints.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, _, version = line.partition("==")
            pins[name.lower()] = _release(version)
    assert pins == _floors()
    assert {"numpy", "scipy", "pydantic"} <= set(pins)  # imported by perfgate, so declared
