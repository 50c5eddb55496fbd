"""`perfgate init` (perfgate/commands/init.py): what it writes into someone else's repository, what it refuses, and the
first hour of a new user, run for real on a throwaway git repository made here (not perfgate's own)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import dev_tool, run_cli, zizmor_findings

from perfgate.commands import init

# slow: runs perfgate init and the generated project's first run (the fast loop, pytest -m "not slow", leaves them to CI)
pytestmark = pytest.mark.slow

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

WORKFLOW_FILES = ("perfgate.yml", "perfgate-baselines.yml")
GPU_WORKFLOW_FILES = ("perfgate-gpu.yml", "perfgate-label.yml")  # with --gpu-runner
REPO_WORKFLOWS = Path(__file__).resolve().parent.parent / ".github" / "workflows"


def _git(repo: Path, *args: str) -> str:
    proc = subprocess.run(["git", "-c", "user.name=New User", "-c", "user.email=new@example.com", *args],
                          cwd=repo, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def _new_repo(path: Path, pyproject: str | None = None) -> Path:
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    path.mkdir(parents=True, exist_ok=True)
    _git(path, "init", "-q", "-b", "main")
    if pyproject is not None:
        (path / "pyproject.toml").write_text(pyproject)
    return path


def _snapshot(repo: Path) -> dict[str, str]:
    return {str(p.relative_to(repo)): p.read_text() for p in sorted(repo.rglob("*"))
            if p.is_file() and ".git" not in p.relative_to(repo).parts}


OTHER_TABLES = """[project]
name = "their-model"   # a comment that must survive
version = "1.2"
dependencies = ["numpy"]

[tool.ruff]
line-length = 100
"""


# ---------------------------------------------------------------- pyproject.toml


def test_creates_pyproject_with_a_table_perfgate_reads(tmp_path):
    repo = _new_repo(tmp_path / "r")
    proc = run_cli("init", cwd=repo)
    assert proc.returncode == 0, proc.stderr
    data = tomllib.loads((repo / "pyproject.toml").read_text())
    assert data["tool"]["perfgate"]["default_suite"] == "smoke"
    assert data["tool"]["perfgate"]["suites"]["smoke"]["device"] == "cpu"
    assert (repo / "workloads" / "example_mlp.py").is_file()
    assert all((repo / ".github" / "workflows" / f).is_file() for f in WORKFLOW_FILES)
    lines = proc.stdout.splitlines()
    assert [line.split()[0] for line in lines[:4]] == ["create"] * 4
    commands = [line.strip() for line in lines[lines.index("next:") + 1:] if line.startswith("  ")]
    # the workloads committed before the baseline is made, so that the baseline records a commit that has
    # them (a gate settles a changed case in lockstep against it); once the commit came last
    assert len(commands) == 3 and commands[0].startswith("git add .gitignore pyproject.toml workloads .github")
    assert commands[1].startswith("perfgate run && perfgate baseline update")
    assert commands[2].startswith("git add baselines")


def test_merges_into_an_existing_pyproject_keeping_every_other_byte(tmp_path):
    repo = _new_repo(tmp_path / "r", OTHER_TABLES)
    assert run_cli("init", "--suite-only", cwd=repo).returncode == 0
    text = (repo / "pyproject.toml").read_text()
    assert text.startswith(OTHER_TABLES)
    data = tomllib.loads(text)
    assert data["project"]["dependencies"] == ["numpy"] and data["tool"]["ruff"] == {"line-length": 100}
    assert not (repo / ".github").exists()  # --suite-only: no workflows


def test_running_twice_changes_nothing(tmp_path):
    repo = _new_repo(tmp_path / "r", OTHER_TABLES)
    assert run_cli("init", cwd=repo).returncode == 0
    before = _snapshot(repo)
    proc = run_cli("init", cwd=repo)
    assert proc.returncode == 0, proc.stderr
    assert _snapshot(repo) == before
    assert [line.split()[0] for line in proc.stdout.splitlines()[:4]] == ["unchanged"] * 4


def test_refuses_an_existing_perfgate_table_without_force_and_writes_nothing(tmp_path):
    mine = OTHER_TABLES + '\n[tool.perfgate]\nreports_dir = "build/perf"\n\n[tool.perfgate.suites.nightly]\nsizes = ["full"]\n'
    repo = _new_repo(tmp_path / "r", mine)
    proc = run_cli("init", cwd=repo)
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "pyproject.toml" in proc.stderr and "--force" in proc.stderr
    assert _snapshot(repo) == {"pyproject.toml": mine}  # nothing else written either
    proc = run_cli("init", "--force", cwd=repo)
    assert proc.returncode == 0, proc.stderr
    text = (repo / "pyproject.toml").read_text()
    assert text.startswith(OTHER_TABLES)
    data = tomllib.loads(text)
    assert "nightly" not in data["tool"]["perfgate"]["suites"] and "reports_dir" in data["tool"]["perfgate"]
    assert data["tool"]["perfgate"]["reports_dir"] == "reports"


def test_refuses_to_overwrite_a_changed_workload_without_force(tmp_path):
    repo = _new_repo(tmp_path / "r")
    assert run_cli("init", cwd=repo).returncode == 0
    edited = repo / "workloads" / "example_mlp.py"
    edited.write_text(edited.read_text().replace("DEPTH = 4", "DEPTH = 6"))
    before = _snapshot(repo)
    proc = run_cli("init", "--gpu-runner", "gpu-a100", cwd=repo)
    assert proc.returncode == 2 and "example_mlp.py" in proc.stderr
    assert _snapshot(repo) == before  # the pyproject and workflow changes were not written either


@pytest.mark.parametrize("pyproject, why", [
    ("[project\nname = 1\n", "not valid TOML"),
    ('[tool]\nperfgate.reports_dir = "x"\n', "dotted keys"),
])
def test_bad_pyproject_is_one_line_and_exit_2(tmp_path, pyproject, why):
    repo = _new_repo(tmp_path / "r", pyproject)
    proc = run_cli("init", "--force", cwd=repo)
    assert proc.returncode == 2 and why in proc.stderr and proc.stderr.count("\n") == 1
    assert (repo / "pyproject.toml").read_text() == pyproject


@pytest.mark.parametrize("args, what", [
    (["--gpu-runner", "gpu; rm -rf /"], "--gpu-runner"),
    (["--gpu-runner", "a]\n  evil: x"], "--gpu-runner"),
    (["--action", "someone/perfgate@v1"], "--action"),
    (["--action", "x/y@" + "0" * 40 + "\n"], "--action"),
])
def test_values_that_land_in_workflows_are_validated(tmp_path, args, what):
    repo = _new_repo(tmp_path / "r")
    proc = run_cli("init", *args, cwd=repo)
    assert proc.returncode == 2 and what in proc.stderr
    assert _snapshot(repo) == {}


def test_outside_a_git_repository_is_exit_2(tmp_path):
    proc = run_cli("init", cwd=tmp_path)
    assert proc.returncode == 2 and "git" in proc.stderr
    assert list(tmp_path.iterdir()) == []


def test_never_writes_through_a_symbolic_link(tmp_path):
    repo = _new_repo(tmp_path / "r")
    outside = tmp_path / "outside"
    outside.mkdir()
    (repo / "workloads").symlink_to(outside)
    proc = run_cli("init", cwd=repo)
    assert proc.returncode == 2 and "symbolic link" in proc.stderr
    assert list(outside.iterdir()) == [] and not (repo / "pyproject.toml").exists()


def test_a_file_where_a_folder_goes_is_exit_2_before_anything_is_written(tmp_path):
    """`.github/workflows` is a file: init used to write pyproject.toml and workloads/, then fail (exit 3)."""
    repo = _new_repo(tmp_path / "r")
    (repo / ".github").mkdir()
    (repo / ".github" / "workflows").write_text("not a folder\n")
    proc = run_cli("init", cwd=repo)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1 and "workflows: exists and is not a folder" in proc.stderr
    assert _snapshot(repo) == {".github/workflows": "not a folder\n"}


def test_a_pyproject_that_is_not_utf8_is_exit_2_and_untouched(tmp_path):
    repo = _new_repo(tmp_path / "r")
    (repo / "pyproject.toml").write_bytes(b'[project]\nname = "caf\xe9"\n')
    proc = run_cli("init", cwd=repo)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1 and "not UTF-8" in proc.stderr
    assert (repo / "pyproject.toml").read_bytes() == b'[project]\nname = "caf\xe9"\n'
    assert sorted(p.name for p in repo.iterdir()) == [".git", "pyproject.toml"]


def test_a_pyproject_over_the_size_cap_is_exit_2_and_untouched(tmp_path):
    from conftest import cli_env

    repo = _new_repo(tmp_path / "r", '[project]\nname = "x"\n' + "# padding\n" * 110_000)
    before = (repo / "pyproject.toml").read_bytes()
    proc = run_cli("init", cwd=repo, env=cli_env(PERFGATE_MAX_FILE_MB="1"))
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1 and "larger than 1 MiB" in proc.stderr
    assert (repo / "pyproject.toml").read_bytes() == before
    assert sorted(p.name for p in repo.iterdir()) == [".git", "pyproject.toml"]


def test_gpu_runner_warns_that_runner_groups_are_required(tmp_path):
    repo = _new_repo(tmp_path / "r")
    proc = run_cli("init", "--gpu-runner", "gpu-a100", cwd=repo)
    assert proc.returncode == 0, proc.stderr
    assert "runner groups are required" in proc.stderr and "gpu-a100 + perfgate-pr" in proc.stderr
    assert "runner group" not in run_cli("init", "--force", cwd=_new_repo(tmp_path / "cpu")).stderr


# ---------------------------------------------------------------- the generated workflows


@pytest.fixture(scope="module", params=[[], ["--gpu-runner", "gpu-a100"]], ids=["cpu", "gpu-runner"])
def generated(request, tmp_path_factory):
    repo = _new_repo(tmp_path_factory.mktemp("generated") / "r")
    proc = run_cli("init", *request.param, cwd=repo)
    assert proc.returncode == 0, proc.stderr
    return repo, request.param


def _generated_files(args: list[str]) -> tuple[str, ...]:
    return WORKFLOW_FILES + (GPU_WORKFLOW_FILES if args else ())


def test_generated_workflows_match_the_github_schema(generated):
    repo, args = generated
    assert sorted(p.name for p in (repo / ".github" / "workflows").iterdir()) == sorted(_generated_files(args))
    files = [str(repo / ".github" / "workflows" / f) for f in _generated_files(args)]
    proc = subprocess.run([dev_tool("check-jsonschema"), "--builtin-schema", "vendor.github-workflows", *files],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def _zizmor(repo: Path, *extra: str, ignored: bool = False) -> set[tuple[str, str]]:
    """(audit, file) of zizmor's findings: those not suppressed, or with ``ignored`` only the suppressed."""
    return {(f["ident"], Path(f["locations"][0]["symbolic"]["key"]["Local"]["verbatim_path"]).name)
            for f in zizmor_findings(repo / ".github" / "workflows", *extra) if bool(f.get("ignored")) == ignored}


def test_generated_workflows_are_zizmor_clean_offline(generated):
    repo, args = generated
    assert _zizmor(repo) == set()
    # What the auditor persona adds is what --gpu-runner asks for: the self-hosted GPU runners (the PR pool
    # for the approved commit, the main pool for baselines), as in perfgate's own workflows.
    expected = {("self-hosted-runner", "perfgate-baselines.yml"), ("self-hosted-runner", "perfgate-gpu.yml")}
    assert _zizmor(repo, "--persona=auditor") == (expected if args else set())
    # the only suppressions: pull_request_target in the two GPU-gate workflows, each with its reason inline
    suppressed = _zizmor(repo, "--no-ignores", ignored=True)
    assert suppressed == ({("dangerous-triggers", f) for f in GPU_WORKFLOW_FILES} if args else set())


def test_generated_workflows_carry_the_protections_of_perfgates_own(generated):
    yaml = pytest.importorskip("ruamel.yaml")
    repo, args = generated
    wfs = {f: yaml.YAML(typ="safe").load((repo / ".github" / "workflows" / f).read_text())
           for f in _generated_files(args)}
    for name, wf in wfs.items():
        assert wf["permissions"] == {}, name
        if name != "perfgate-label.yml":  # it runs no Python: one API call
            assert wf["env"]["PYTHONNOUSERSITE"] == "1", name
        for job in wf["jobs"].values():
            for step in job["steps"]:
                if step.get("uses", "").startswith("actions/checkout"):
                    assert step["with"]["persist-credentials"] is False
    gate = wfs["perfgate.yml"]
    assert set(gate["on"]) == {"pull_request"}  # a fork-editable trigger: hosted runners only
    assert all(job["runs-on"] == "ubuntu-latest" for job in gate["jobs"].values())
    final = gate["jobs"]["cpu-gate"]
    assert final["if"] == "always()" and final["needs"] == ["cpu-smoke"]
    (step,) = [s for s in gate["jobs"]["cpu-smoke"]["steps"] if "perfgate" in s.get("uses", "")]
    assert step["uses"] == init.ACTION and step["with"]["against"] == "${{ github.event.pull_request.base.sha }}"
    baselines = wfs["perfgate-baselines.yml"]
    assert set(baselines["on"]) == {"push", "workflow_dispatch"} and baselines["on"]["push"]["branches"] == ["main"]
    assert baselines["jobs"]["measure"]["runs-on"] == (["self-hosted", "gpu-a100", "perfgate-main"] if args
                                                       else "ubuntu-latest")
    assert baselines["env"]["PIP_NO_CACHE_DIR"] == "1"


def test_generated_gpu_gate_keeps_the_approval_pinning_and_base_judging_of_perfgates_own(tmp_path):
    """The GPU gate init writes is perfgate's own perfgate-gpu.yml with the user's runner label and the pinned
    action: the approve script is the very one tests/test_workflows.py runs against a fake gh."""
    yaml = pytest.importorskip("ruamel.yaml")
    load = yaml.YAML(typ="safe").load
    repo = _new_repo(tmp_path / "r")
    assert run_cli("init", "--gpu-runner", "gpu-a100", cwd=repo).returncode == 0
    gen = load((repo / ".github" / "workflows" / "perfgate-gpu.yml").read_text())
    own = load((REPO_WORKFLOWS / "perfgate-gpu.yml").read_text())
    assert gen["on"] == own["on"] == {"pull_request_target": {"types": ["labeled"]}}
    assert gen["concurrency"] == own["concurrency"] and gen["env"]["PIP_NO_CACHE_DIR"] == "1"
    for job_id in ("approve", "comment", "gpu-gate"):
        mine = json.dumps(own["jobs"][job_id]).replace("the pr suite passed", "the gpu suite passed")
        assert json.dumps(gen["jobs"][job_id]) == mine, job_id
    gpu = gen["jobs"]["gpu"]
    assert gpu["runs-on"] == ["self-hosted", "gpu-a100", "perfgate-pr"] and gpu["permissions"] == {"contents": "read"}
    assert gpu["steps"][0]["with"]["ref"] == "${{ needs.approve.outputs.sha }}"
    assert gpu["steps"][1] == own["jobs"]["gpu"]["steps"][1]  # refuse anything but the approved commit
    # measured with the runner's read-only Python (docs/ci.md), never setup-python's writable tool cache
    assert not [s for s in gpu["steps"] if s.get("uses", "").split("@")[0] in ("actions/setup-python",
                                                                               init.ACTION.split("@")[0])]
    install = next(s["run"] for s in gpu["steps"] if "install the pinned perfgate" in s.get("name", ""))
    assert '"${PERFGATE_RUNNER_PYTHON:-python3}" -m venv --system-site-packages "$RUNNER_TEMP/venv"' in install
    assert f"perfgate @ git+https://github.com/{init.ACTION.split('@')[0]}@{init.ACTION.split('@')[1]}" in install
    run = next(s["run"] for s in gpu["steps"] if "-m perfgate run" in s.get("run", ""))
    assert "--suite gpu" in run and '--against "$BASE_SHA"' in run and "--gate" not in run
    assert '--shard "$SHARD/$PERFGATE_SHARDS"' in run and gpu["env"]["BASE_SHA"] == "${{ needs.approve.outputs.base }}"
    # then the same sweep as perfgate's own, and the upload
    sweep = [s for s in gpu["steps"] if s.get("name") == "end every process the pull request's code left"]
    assert sweep == [s for s in own["jobs"]["gpu"]["steps"] if s.get("name") == sweep[0]["name"]]
    assert gpu["steps"][-1] == own["jobs"]["gpu"]["steps"][-1] and gen["env"]["PIP_CONFIG_FILE"] == "/dev/null"
    merge = gen["jobs"]["merge"]
    assert merge["runs-on"] == "ubuntu-latest" and merge["steps"][0]["with"]["ref"] == "${{ needs.approve.outputs.base }}"
    install = [s["run"] for s in merge["steps"] if "install the pinned perfgate" in s.get("name", "")][0]
    sha = init.ACTION.split("@")[1]
    assert f"git+https://github.com/{init.ACTION.split('@')[0]}@{sha}" in install and "-e ." not in install
    # merge --gate --rejudge --expect-suite (the gpu suite here, perfgate's own pr), upload, junit, fail
    own_steps = json.loads(json.dumps(own["jobs"]["merge"]["steps"][-4:]).replace("--expect-suite pr", "--expect-suite gpu"))
    assert merge["steps"][-4:] == own_steps and "--expect-suite gpu" in merge["steps"][-4]["run"]
    label = load((repo / ".github" / "workflows" / "perfgate-label.yml").read_text())
    assert label["jobs"] == load((REPO_WORKFLOWS / "perfgate-label.yml").read_text())["jobs"]
    data = tomllib.loads((repo / "pyproject.toml").read_text())
    assert data["tool"]["perfgate"]["suites"]["gpu"]["device"] == "cuda"


# ---------------------------------------------------------------- .gitignore: run output stays out of commits

def _ignored(repo: Path, *paths: str) -> list[str]:
    """Which of ``paths`` git ignores in ``repo``."""
    proc = subprocess.run(["git", "check-ignore", *paths], cwd=repo, capture_output=True, text=True, timeout=60)
    return proc.stdout.split()


def test_init_keeps_run_output_and_the_history_store_out_of_git(tmp_path):
    """A user's first `git add .` after init committed reports/ (every run's output) and .perfgate/ (the
    history store): init wrote no .gitignore for them."""
    repo = _new_repo(tmp_path / "r")
    proc = run_cli("init", cwd=repo)
    assert proc.returncode == 0, proc.stderr
    assert "   create  .gitignore" in proc.stdout.splitlines()
    (repo / "reports" / "20261126-run").mkdir(parents=True)
    (repo / "reports" / "20261126-run" / "results.json").write_text("{}")
    (repo / "reports" / "LATEST").write_text("20261126-run")
    (repo / ".perfgate").mkdir()
    (repo / ".perfgate" / "history.db").write_text("")
    paths = ["reports/20261126-run/results.json", "reports/LATEST", ".perfgate/history.db"]
    assert _ignored(repo, *paths, "workloads/example_mlp.py", "pyproject.toml") == paths
    _git(repo, "add", ".")
    assert not any(f.startswith(("reports/", ".perfgate/")) for f in _git(repo, "diff", "--cached", "--name-only").split())
    assert "git add .gitignore pyproject.toml workloads .github" in proc.stdout


@pytest.mark.parametrize("before, added", [
    ("node_modules/\n*.log\n", "/reports/\n/.perfgate/\n"),
    ("node_modules/", "/reports/\n/.perfgate/\n"),  # no newline at the end
    ("# mine\nreports/\n", "/.perfgate/\n"),  # one already there, in another spelling
    ("/reports/*\n!/reports/README.md\n", "/.perfgate/\n"),
    ("", "/reports/\n/.perfgate/\n"),
    # a later line takes reports/ back: before 2026-12 it counted as ignored and runs were committed
    ("reports/\n!reports/\n.perfgate/\n", "/reports/\n"),
    ("reports/\n.perfgate/\n!/.perfgate/\n", "/.perfgate/\n"),
])
def test_init_appends_to_an_existing_gitignore_without_duplicating(tmp_path, before, added):
    repo = _new_repo(tmp_path / "r")
    (repo / ".gitignore").write_text(before)
    assert run_cli("init", "--suite-only", cwd=repo).returncode == 0
    after = (repo / ".gitignore").read_text()
    assert after.startswith(before) and after.endswith(added)
    assert "\n" + added in "\n" + after[len(before):]  # on lines of their own
    assert after.count("reports") == before.count("reports") + added.count("reports")
    proc = run_cli("init", "--suite-only", cwd=repo)  # twice: nothing more
    assert proc.returncode == 0 and (repo / ".gitignore").read_text() == after
    assert "unchanged  .gitignore" in proc.stdout


@pytest.mark.parametrize("text, missing", [
    ("reports/\n.perfgate/\n", []),
    ("reports/\n!reports/\n.perfgate/\n", ["/reports/"]),
    ("!reports/\nreports/*\n.perfgate\n", []),
    ("# !reports/\nreports\n!.perfgate/\n", ["/.perfgate/"]),
])
def test_without_git_the_gitignore_is_read_in_order(tmp_path, text, missing):
    """Where git cannot answer (no repository here), init reads the file itself, negations included."""
    (tmp_path / ".gitignore").write_text(text)
    planned = init.planned_gitignore(tmp_path)
    assert planned.text == text + ("\n" + "\n".join([init.GITIGNORE_HEADER, *missing]) + "\n" if missing else "")


def test_init_leaves_a_gitignore_that_has_both_alone(tmp_path):
    repo = _new_repo(tmp_path / "r")
    mine = "reports\n.perfgate/\n"
    (repo / ".gitignore").write_text(mine)
    proc = run_cli("init", cwd=repo)
    assert proc.returncode == 0 and "unchanged  .gitignore" in proc.stdout
    assert (repo / ".gitignore").read_text() == mine


def test_init_never_writes_a_gitignore_through_a_link(tmp_path):
    repo = _new_repo(tmp_path / "r")
    outside = tmp_path / "elsewhere"
    outside.write_text("x\n")
    (repo / ".gitignore").symlink_to(outside)
    proc = run_cli("init", cwd=repo)
    assert proc.returncode == 2 and ".gitignore" in proc.stderr and proc.stderr.count("\n") == 1
    assert outside.read_text() == "x\n" and not (repo / "pyproject.toml").exists()


# ---------------------------------------------------------------- the first hour, as a new user would


@pytest.mark.timing
@pytest.mark.slow
def test_first_hour_init_run_baseline_slow_commit_is_caught_and_revert_passes(tmp_path):
    """init, edit nothing, run, baseline update, commit; a commit that adds a fifth layer to the example's
    four (+25% work) fails `run --against HEAD~1 --gate` with the case named; its revert passes."""
    repo = _new_repo(tmp_path / "their-repo", OTHER_TABLES)
    assert run_cli("init", cwd=repo).returncode == 0

    proc = run_cli("run", cwd=repo)
    assert proc.returncode == 0, proc.stderr + proc.stdout
    assert "example_mlp" in proc.stdout
    proc = run_cli("baseline", "update", cwd=repo)
    assert proc.returncode == 0, proc.stderr + proc.stdout
    assert list((repo / "baselines").rglob("smoke.json"))
    _git(repo, "add", "pyproject.toml", "workloads", "baselines", ".github")
    _git(repo, "commit", "-qm", "perfgate: gate performance")

    workload = repo / "workloads" / "example_mlp.py"
    workload.write_text(workload.read_text().replace("DEPTH = 4", "DEPTH = 5"))
    _git(repo, "commit", "-qam", "one more layer")
    out = tmp_path / "slow"
    proc = run_cli("run", "--against", "HEAD~1", "--gate", "--out", str(out), cwd=repo)
    assert proc.returncode == 1, proc.stderr + proc.stdout
    summary = (out / "summary.md").read_text()
    assert "example_mlp/smoke/eager/cpu" in summary
    # the timing caught it, not only the operator counts that a fifth layer also changes
    verdicts = {v["metric"]: v for v in json.loads((out / "comparison.json").read_text())["verdicts"]
                if v["case_key"] == "example_mlp/smoke/eager/cpu"}
    assert verdicts["step_time"]["kind"] == "regression", verdicts["step_time"]
    assert 1.1 < verdicts["step_time"]["ratio"] < 1.5

    _git(repo, "revert", "--no-edit", "HEAD")
    proc = run_cli("run", "--against", "HEAD~1", "--gate", "--out", str(tmp_path / "reverted"), cwd=repo)
    assert proc.returncode == 0, proc.stderr + proc.stdout
    verdicts = {v["metric"]: v["kind"] for v in
                json.loads((tmp_path / "reverted" / "comparison.json").read_text())["verdicts"]}
    assert verdicts["step_time"] != "regression"
