"""`perfgate run --base-python PATH` (perfgate.running.against.same_tree, perfgate.gating.gate.execute_against):
an upgrade as the change under test. Two virtual environments share this one's torch (a .pth file pointing
at its site-packages: no second torch download) and differ in a small local package the workload imports,
at two versions, the second doing four times the work; and in a variable set with --base-env. The gate
catches the slower side, calls the A/A pair `unchanged`, names the difference; a base side that cannot
import perfgate or the workload fails at the probe with one line naming its interpreter (exit 3)."""

from __future__ import annotations

import json
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
from conftest import cli_env

from perfgate.model.environment_keys import change_text, package_diff

DEP = "pg_upgrade_dep"
CASE = "dep_work/smoke/eager/cpu"

WORKLOAD = '''
import torch
import pg_upgrade_dep

from perfgate.workload import Built, Tolerance, Workload


class DepWork(Workload):
    name = "dep_work"
    description = "a matmul chain whose length the installed pg_upgrade_dep decides (tests/test_upgrades.py)"
    sizes = {"smoke": {"n": 32, "reps": 20, "steps": 1}, "pr": {"n": 64, "reps": 20, "steps": 1},
             "full": {"n": 128, "reps": 20, "steps": 1}}
    tolerance = Tolerance(rel_l2=1e-3)
    channels_last_applies = False

    def build(self, params, device, dtype, variants):
        g = torch.Generator(device="cpu").manual_seed(0)
        w = torch.randn(params["n"], params["n"], generator=g) / params["n"] ** 0.5
        x = torch.randn(params["n"], params["n"], generator=g)
        return Built(model=w.to(device=device, dtype=dtype), state=x.to(device=device, dtype=dtype),
                     extra={"reps": params["reps"] * pg_upgrade_dep.WORK})

    def step(self, model, state, built, params):
        y = state
        for _ in range(built.extra["reps"]):
            y = torch.tanh(y @ model)
        return state + 0.0 * y
'''

PYPROJECT = """
[tool.perfgate]
workloads_dirs = ["workloads"]
processes = 1

[tool.perfgate.timing]
samples = 3
min_time_s = 0.05

[tool.perfgate.suites.smoke]
workloads = ["dep_work"]
toggles = ["eager"]
device = "cpu"

[tool.perfgate.gate]
threshold = 0.5
remeasure = false
max_host_load = 0
"""


def _site_packages(venv: Path) -> Path:
    return venv / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"


def _venv(path: Path, dep_version: str | None = None, work: int = 1, *, share: bool = True) -> Path:
    """A virtual environment (no pip) that sees this one's packages through a .pth file when ``share``, with
    ``pg_upgrade_dep`` at ``dep_version`` installed (a package and its dist-info, as pip leaves them), whose
    ``WORK`` multiplies the workload's steps. Returns its python."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True, capture_output=True,
                   timeout=120)
    site = _site_packages(path)
    assert site.is_dir(), site
    if share:
        (site / "shared-torch.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    if dep_version is not None:
        (site / DEP).mkdir()
        # a knob read on import, as a library reads its build or backend settings
        (site / DEP / "__init__.py").write_text(f"import os\n__version__ = {dep_version!r}\n"
                                                f"WORK = {work} * int(os.environ.get('PG_UPGRADE_WORK', '1'))\n")
        info = site / f"{DEP}-{dep_version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: pg-upgrade-dep\nVersion: {dep_version}\n")
    return path / "bin" / "python"


@pytest.fixture(scope="module")
def envs(tmp_path_factory):
    """The project, and its environments: v1 and v1b (the dependency at 1.0, twice: an A/A pair), v2 (2.0,
    four times the work), nodep (no dependency), bare (nothing shared: no torch, no perfgate's packages)."""
    root = tmp_path_factory.mktemp("upgrades")
    project = root / "project"
    (project / "workloads").mkdir(parents=True)
    (project / "pyproject.toml").write_text(PYPROJECT)
    (project / "workloads" / "dep_work.py").write_text(WORKLOAD)
    return {"project": project, "v1": _venv(root / "v1", "1.0"), "v1b": _venv(root / "v1b", "1.0"),
            "v2": _venv(root / "v2", "2.0", work=4), "nodep": _venv(root / "nodep"),
            "bare": _venv(root / "bare", share=False)}


def _run(envs, head: str, run_dir: Path, *args: str) -> subprocess.CompletedProcess:
    """`perfgate run` with the orchestrator and the head side under environment ``head``: pairs added until
    the verdict is settled (3 for the 4x changes here), 6 at most."""
    return subprocess.run([str(envs[head]), "-m", "perfgate", "run", "--out", str(run_dir),
                           "--max-processes", "6", *args],
                          cwd=envs["project"], env=cli_env(), capture_output=True, text=True, timeout=600)


def _verdicts(run_dir: Path) -> tuple[dict[str, str], dict]:
    comparison = json.loads((run_dir / "comparison.json").read_text())
    return {v["metric"]: v["kind"] for v in comparison["verdicts"]}, comparison


@pytest.mark.timing
@pytest.mark.slow  # worker processes under two interpreters
def test_an_upgraded_dependency_that_does_more_work_fails_the_gate_naming_the_package(envs, tmp_path):
    run_dir = tmp_path / "upgrade"
    proc = _run(envs, "v2", run_dir, "--base-python", str(envs["v1"]), "--base-env", "PG_UPGRADE_KNOB=on",
                "--gate")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out
    kinds, comparison = _verdicts(run_dir)
    assert kinds["step_time"] == "regression", kinds
    diff = comparison["environment_diff"]
    assert diff["package pg-upgrade-dep"] == ["1.0", "2.0"], diff
    assert diff["$PG_UPGRADE_KNOB"] == ["on", None], diff
    assert not [k for k in diff if k in ("torch", "python")], diff  # the shared torch, one Python
    assert comparison["baseline_source"] == f"this tree under {envs['v1']} with PG_UPGRADE_KNOB=on"
    summary = (run_dir / "summary.md").read_text()
    headline = summary.splitlines()[0]
    assert "FAIL: " in headline and headline.endswith(
        "the change under test is the environment: $PG_UPGRADE_KNOB on -> none, package pg-upgrade-dep 1.0 -> 2.0`")
    assert ("**Change under test** (base side -> this run): `the environment: $PG_UPGRADE_KNOB on -> none, "
            "package pg-upgrade-dep 1.0 -> 2.0`.") in summary
    assert ("The change under test (base side -> this run) is the environment: $PG_UPGRADE_KNOB on -> none, "
            "package pg-upgrade-dep 1.0 -> 2.0") in out
    assert ("perfgate: base side: this tree under {} with PG_UPGRADE_KNOB=on; the environments differ in: "
            "$PG_UPGRADE_KNOB on -> none, package pg-upgrade-dep 1.0 -> 2.0").format(envs["v1"]) in out
    # both sides measured, each under its own interpreter, the base side's record saying which
    base = json.loads((run_dir / "base" / "results.json").read_text())
    head = json.loads((run_dir / "results.json").read_text())
    assert base["environment"]["executable"] == str(envs["v1"]) and "pg-upgrade-dep==1.0" in base["environment"]["packages"]
    assert "pg-upgrade-dep==2.0" in head["environment"]["packages"]
    assert head["settings"]["base_python"] == str(envs["v1"]) and head["settings"]["base_env"] == ["PG_UPGRADE_KNOB=on"]
    # each regression's op diff, as --against gives it: the upgrade runs four times the matmuls
    # what moved, as for a code change: the upgrade runs four times the ops and FLOPs per step
    assert kinds["aten_ops_per_step"] == "regression" and kinds["flops_per_step"] == "regression", kinds


@pytest.mark.timing
@pytest.mark.slow  # worker processes under two interpreters
def test_an_a_a_pair_of_environments_is_unchanged_and_names_no_difference(envs, tmp_path):
    run_dir = tmp_path / "aa"
    proc = _run(envs, "v1", run_dir, "--base-python", str(envs["v1b"]), "--gate")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    kinds, comparison = _verdicts(run_dir)
    assert kinds["step_time"] == "unchanged", kinds
    assert comparison["environment_diff"] == {}
    assert "the environments differ in: nothing recorded (an A/A pair)" in proc.stdout
    assert "Change under test" not in (run_dir / "summary.md").read_text()


@pytest.mark.timing
@pytest.mark.slow  # worker processes under two interpreters
def test_a_knob_set_for_the_base_side_reaches_its_workers(envs, tmp_path):
    """--base-env reaches the base side's workers before they import the workload: the dependency reads
    PG_UPGRADE_WORK on import, the base side does four times the work, and the head wins."""
    run_dir = tmp_path / "knob"
    proc = _run(envs, "v1", run_dir, "--base-env", "PG_UPGRADE_WORK=4")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    kinds, comparison = _verdicts(run_dir)
    assert kinds["step_time"] == "win", kinds
    assert comparison["environment_diff"] == {"$PG_UPGRADE_WORK": ["4", None]}
    assert comparison["baseline_source"] == "this tree with PG_UPGRADE_WORK=4"


@pytest.mark.slow  # a worker probe under another interpreter
@pytest.mark.parametrize(("env", "missing"), [
    ("nodep", "cannot import the workload file {file}: ModuleNotFoundError: No module named 'pg_upgrade_dep'"),
    ("bare", "cannot run perfgate's worker: ModuleNotFoundError: No module named "),
])
def test_a_base_side_that_cannot_run_fails_at_the_probe_naming_its_interpreter(envs, tmp_path, env, missing):
    run_dir = tmp_path / "probe"
    proc = _run(envs, "v1", run_dir, "--base-python", str(envs[env]), "--gate")
    assert proc.returncode == 3, proc.stdout + proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    expected = (f"perfgate: error: the base side's Python {envs[env]} "
                + missing.format(file=envs["project"].resolve() / "workloads" / "dep_work.py"))
    assert last.startswith(expected), last
    assert not (run_dir / "comparison.json").exists()  # no case judged `new` or `fixed`


@pytest.mark.slow  # worker processes under two interpreters
def test_a_base_python_that_is_no_program_is_a_usage_error(envs, tmp_path):
    proc = _run(envs, "v1", tmp_path / "bad", "--base-python", str(tmp_path / "nothing" / "python"))
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1] == (
        f"perfgate: error: --base-python {tmp_path / 'nothing' / 'python'}: not an executable file; give the "
        "Python of the environment the base side runs in (e.g. .venv-base/bin/python)")
    proc = _run(envs, "v1", tmp_path / "bad", "--base-env", "1X=2")
    assert proc.returncode == 2 and "--base-env '1X=2': expected NAME=VALUE" in proc.stderr


def test_package_diff_names_versions_that_differ_and_ignores_what_a_side_did_not_record():
    base = {"packages": ["numpy==1.26.4", "torch==2.4.0", "gone==1", "same==3"]}
    head = {"packages": ["numpy==2.1.0", "torch==2.5.0", "added==0.1", "same==3"]}
    diff = package_diff(base, head)
    assert diff == {"package added": [None, "0.1"], "package gone": ["1", None], "package numpy": ["1.26.4", "2.1.0"]}
    assert package_diff({}, head) == {} and package_diff({"packages": "numpy==1"}, head) == {}
    assert change_text({"torch": ["2.4.0", "2.5.0"], **diff}, limit=2) == \
        "torch 2.4.0 -> 2.5.0, package added none -> 0.1, and 2 more"


DEPENDENCY_ENV = Path(__file__).resolve().parent.parent / ".ci" / "dependency_env.py"


def _commit(repo: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (repo / name).write_text(text)
    for args in (("add", "."), ("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "c")):
        subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, timeout=60)


def _dependency_env(repo: Path, *args: str) -> list[str]:
    proc = subprocess.run([sys.executable, str(DEPENDENCY_ENV), *args], cwd=repo, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.splitlines()


def test_the_action_sees_which_dependency_files_a_pull_request_changes(tmp_path):
    """.ci/dependency_env.py, which the reusable action runs: requirements*.txt at the top and pyproject's
    [project] dependencies are the dependency files; a pyproject change elsewhere is none; the cache key is
    the base's dependencies'; `export` writes a commit's as requirements files."""
    repo = tmp_path / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True, timeout=60)
    pyproject = '[project]\nname = "p"\nversion = "1"\ndependencies = ["numpy==1.26.4"]\n[tool.perfgate]\n'
    _commit(repo, {"pyproject.toml": pyproject, "requirements-dev.txt": "-r requirements.txt\n",
                   "requirements.txt": "einops==0.8.0\n"})
    _commit(repo, {"pyproject.toml": pyproject + "threads = 2\n", "README.md": "x\n"})
    same = _dependency_env(repo, "changed", "HEAD~1")
    assert same[0] == "changed=false" and same[2] == "files=", same
    _commit(repo, {"pyproject.toml": pyproject.replace("1.26.4", "2.1.0"), "requirements.txt": "einops==0.8.1\n"})
    bumped = _dependency_env(repo, "changed", "HEAD~1")
    assert bumped[0] == "changed=true" and bumped[2] == "files=pyproject.toml [project] dependencies, requirements.txt"
    assert bumped[1] == same[1]  # keyed by the base's dependencies (unchanged there), not the head's
    assert _dependency_env(repo, "changed", "HEAD")[1] != same[1]
    written = [Path(p) for p in _dependency_env(repo, "export", "HEAD~2", str(tmp_path / "base-deps"))]
    assert sorted(p.name for p in written) == ["pyproject-dependencies.txt", "requirements-dev.txt", "requirements.txt"]
    assert (tmp_path / "base-deps" / "pyproject-dependencies.txt").read_text() == "numpy==1.26.4\n"
    assert (tmp_path / "base-deps" / "requirements.txt").read_text() == "einops==0.8.0\n"


def test_the_smoke_gate_script_passes_the_base_python_on(tmp_path):
    """The action's run step hands the base environment to .ci/smoke-gate.sh, which passes --base-python."""
    fake = tmp_path / "python"
    fake.write_text('#!/bin/sh\necho "ARGS $*"\nexit 2\n')
    fake.chmod(0o755)
    env = {**cli_env(), "PERFGATE_PYTHON": str(fake), "PERFGATE_WORKDIR": str(tmp_path),
           "PERFGATE_AGAINST": "abc123", "PERFGATE_BASE_PYTHON": "/envs/base/bin/python"}
    proc = subprocess.run(["bash", str(DEPENDENCY_ENV.parent / "smoke-gate.sh")], env=env, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 2
    assert "--against abc123 --base-python /envs/base/bin/python" in proc.stdout, proc.stdout
    action = (DEPENDENCY_ENV.parent.parent / "action.yml").read_text()
    assert "PERFGATE_BASE_PYTHON: ${{ steps.deps.outputs.changed == 'true' &&" in action


def test_a_regressions_reproduction_carries_the_base_side_environment():
    """`perfgate repro`'s command for a --base-python run: the same environment options, no --against where
    the run had none (this tree against itself); an untrusted value no `perfgate run` took is left out."""
    from perfgate.model.results import CaseResult, CaseSpec, RunResult
    from perfgate.reports import repro

    case = CaseResult(spec=CaseSpec(workload="w", size="smoke", toggles=("eager",), device="cpu"), status="ok")

    def argv(settings: dict) -> list[str]:
        run = RunResult(run_id="r", suite="smoke", environment={}, settings=settings, cases=[case])
        return repro.run_command(case, run, repro.Base("0" * 40, "test"))

    alone = argv({"base_python": "/envs/old/bin/python", "base_env": ["KNOB=1", "-x=1", "BAD NAME=2"]})
    assert "--against" not in alone
    assert alone[alone.index("run") + 1:alone.index("run") + 5] == ["--base-python", "/envs/old/bin/python",
                                                                    "--base-env", "KNOB=1"]
    assert alone.count("--base-env") == 1
    with_ref = argv({"against": "main", "base_python": "--gate"})
    assert with_ref[with_ref.index("run") + 1:with_ref.index("run") + 3] == ["--against", "0" * 40]
    assert "--base-python" not in with_ref
