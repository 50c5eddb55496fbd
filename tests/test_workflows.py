"""The GitHub Actions workflows: schema-valid, clean under zizmor, and shaped by the security model of
docs/ci.md; and the CPU job's script, run here exactly as the workflow runs it (with tiny settings)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO, cli_env

WORKFLOWS = REPO / ".github" / "workflows"
WORKFLOW_FILES = sorted(WORKFLOWS.glob("*.yml"))
SMOKE_SCRIPT = REPO / ".ci" / "smoke-gate.sh"
SEVERITIES = ("unknown", "informational", "low", "medium", "high")
# The one deliberate suppression: the label-removal workflow needs pull_request_target for a write token
# on fork pull requests; it checks out nothing (asserted below) and makes one API call.
ALLOWED_IGNORES = {("dangerous-triggers", "perfgate-label.yml")}
# PR text an attacker controls; none of it may be expanded by the runner inside a shell script.
UNTRUSTED = re.compile(
    r"\$\{\{[^}]*github\.(event\.(pull_request\.(title|body|head\.ref|head\.label|user)|label\.description"
    r"|comment|review|issue)|head_ref)[^}]*\}\}"
)


def _tool(name: str) -> str:
    """The tool next to this Python (the dev extra installs it there) or on PATH; skip if absent."""
    here = Path(sys.executable).parent / name
    found = str(here) if here.exists() else shutil.which(name)
    if not found:
        pytest.skip(f"{name} is not installed (pip install -e '.[dev]')")
    return found


def _load(path: Path) -> dict:
    yaml = pytest.importorskip("ruamel.yaml")
    return yaml.YAML(typ="safe").load(path.read_text())


@pytest.fixture(scope="module")
def workflows() -> dict[str, dict]:
    return {p.name: _load(p) for p in WORKFLOW_FILES}


def _steps(job: dict) -> list[dict]:
    return job.get("steps", [])


def test_the_three_workflows_exist():
    assert {p.name for p in WORKFLOW_FILES} >= {"perfgate.yml", "perfgate-baselines.yml", "perfgate-label.yml"}


def test_workflows_match_the_github_workflow_schema():
    proc = subprocess.run([_tool("check-jsonschema"), "--builtin-schema", "vendor.github-workflows",
                           *map(str, WORKFLOW_FILES)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def _zizmor(*extra: str) -> list[dict]:
    proc = subprocess.run([_tool("zizmor"), "--offline", "--format", "json", "--no-exit-codes", *extra,
                           str(WORKFLOWS)], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout or "[]")


def _at_least_medium(finding: dict) -> bool:
    return SEVERITIES.index(finding["determinations"]["severity"].lower()) >= SEVERITIES.index("medium")


def _where(finding: dict) -> str:
    return Path(finding["locations"][0]["symbolic"]["key"]["Local"]["verbatim_path"]).name


def test_zizmor_offline_finds_nothing_at_medium_or_above():
    findings = [f for f in _zizmor() if _at_least_medium(f) and not f.get("ignored")]
    assert findings == [], [(f["ident"], _where(f)) for f in findings]


def test_zizmor_suppressions_are_only_the_documented_one():
    suppressed = {(f["ident"], _where(f)) for f in _zizmor("--no-ignores") if _at_least_medium(f)}
    assert suppressed <= ALLOWED_IGNORES


def test_every_action_is_pinned_by_full_commit_sha_with_its_version_noted():
    for path in WORKFLOW_FILES:
        for line in path.read_text().splitlines():
            m = re.match(r"\s*(?:-\s+)?uses:\s*(\S+)(.*)", line)
            if not m or m.group(1).startswith("./"):
                continue
            assert re.fullmatch(r"[\w.-]+/[\w./-]+@[0-9a-f]{40}", m.group(1)), f"{path.name}: {line.strip()}"
            assert re.search(r"#\s*v\d", m.group(2)), f"{path.name}: no version comment: {line.strip()}"


def test_permissions_are_minimal_per_job(workflows):
    for name, wf in workflows.items():
        assert wf.get("permissions") == {}, f"{name}: top-level permissions must be {{}}"
        for job_id, job in wf["jobs"].items():
            assert "permissions" in job, f"{name}:{job_id} declares no permissions"
    writers = {job_id for job_id, job in workflows["perfgate.yml"]["jobs"].items()
               if any(v == "write" for v in job["permissions"].values())}
    assert writers == {"comment"}
    assert workflows["perfgate.yml"]["jobs"]["comment"]["permissions"] == {"pull-requests": "write"}


def test_no_pull_request_target_job_checks_out_code(workflows):
    for name, wf in workflows.items():
        if "pull_request_target" not in wf["on"]:
            continue
        for job_id, job in wf["jobs"].items():
            uses = [s.get("uses", "") for s in _steps(job)]
            assert not any(u.startswith("actions/checkout") for u in uses), f"{name}:{job_id}"
            assert not any("git " in s.get("run", "") for s in _steps(job)), f"{name}:{job_id}"


def test_pull_request_text_never_reaches_a_shell(workflows):
    for name, wf in workflows.items():
        for job_id, job in wf["jobs"].items():
            for step in _steps(job):
                script = step.get("run", "") + step.get("with", {}).get("script", "")
                assert "${{" not in step.get("run", ""), f"{name}:{job_id}: expression inside run:, use env"
                assert not UNTRUSTED.search(script), f"{name}:{job_id}: PR text in a script"


def test_gpu_job_runs_for_forks_only_on_the_maintainers_label(workflows):
    wf = workflows["perfgate.yml"]
    assert set(wf["on"]) == {"pull_request"}
    assert "labeled" in wf["on"]["pull_request"]["types"]
    gpu = wf["jobs"]["gpu"]
    assert gpu["runs-on"] == ["self-hosted", "linux", "gpu"]
    cond = " ".join(gpu["if"].split())
    # same repository: any push; otherwise only the labeled event of perf-gate-ok itself, so a push
    # after the label (whose payload still lists the label) never reaches the GPU runner
    assert "github.event.pull_request.head.repo.full_name == github.repository" in cond
    assert "github.event.action == 'labeled' && github.event.label.name == 'perf-gate-ok'" in cond
    assert "contains(github.event.pull_request.labels" not in cond
    checkout = next(s for s in _steps(gpu) if s.get("uses", "").startswith("actions/checkout"))
    assert checkout["with"]["ref"] == "${{ github.event.pull_request.head.sha }}"
    label = workflows["perfgate-label.yml"]
    assert label["on"]["pull_request_target"]["types"] == ["synchronize"]
    assert "perf-gate-ok" in _steps(label["jobs"]["remove-perf-gate-ok"])[0]["run"]


def test_checkouts_do_not_persist_credentials(workflows):
    for name, wf in workflows.items():
        for job_id, job in wf["jobs"].items():
            for s in _steps(job):
                if s.get("uses", "").startswith("actions/checkout"):
                    assert s["with"]["persist-credentials"] is False, f"{name}:{job_id}"


def test_gate_shape_shards_merge_comment_and_concurrency(workflows):
    wf = workflows["perfgate.yml"]
    assert wf["concurrency"]["cancel-in-progress"] is True
    assert "github.event.pull_request.number" in wf["concurrency"]["group"]
    jobs = wf["jobs"]
    shards = jobs["gpu"]["strategy"]["matrix"]["shard"]
    assert shards == list(range(1, int(wf["env"]["PERFGATE_SHARDS"]) + 1))
    gpu_run = " ".join(s.get("run", "") for s in _steps(jobs["gpu"]))
    assert "--suite pr" in gpu_run and '--shard "$SHARD/$PERFGATE_SHARDS"' in gpu_run
    assert '--against "$BASE_SHA"' in gpu_run
    assert any(s.get("uses", "").startswith("actions/upload-artifact") for s in _steps(jobs["gpu"]))
    merge_run = " ".join(s.get("run", "") for s in _steps(jobs["merge"]))
    assert "perfgate merge shards" in merge_run and "--gate" in merge_run
    assert jobs["merge"]["needs"] == "gpu" and jobs["comment"]["needs"] == "merge"
    assert "<!-- perfgate:pr-gate -->" in _steps(jobs["comment"])[-1]["with"]["script"]
    assert any("junit" in s.get("uses", "") for s in _steps(jobs["merge"]))


def test_cpu_job_runs_the_repository_script_with_caches(workflows):
    job = workflows["perfgate.yml"]["jobs"]["cpu-smoke"]
    assert job["runs-on"] == "ubuntu-latest"
    runs = [s.get("run", "") for s in _steps(job)]
    assert ".ci/smoke-gate.sh" in runs
    cached = [s["with"]["path"] for s in _steps(job) if s.get("uses", "").startswith("actions/cache")]
    assert "~/.cache/pip" in cached and ".cache/perfgate-compile" in cached
    assert job["env"]["PERFGATE_COMPILE_CACHE"].endswith(".cache/perfgate-compile")
    script = (REPO / ".ci" / "smoke-gate.sh").read_text()
    assert '--compile-cache "$PERFGATE_COMPILE_CACHE"' in script


def test_baselines_workflow_opens_a_pull_request_and_never_pushes_main(workflows):
    wf = workflows["perfgate-baselines.yml"]
    assert set(wf["on"]) == {"push", "workflow_dispatch"}
    assert wf["on"]["push"]["branches"] == ["main"]
    assert wf["jobs"]["measure"]["runs-on"] == ["self-hosted", "linux", "gpu"]
    script = _steps(wf["jobs"]["open-pr"])[-1]["run"]
    assert "gh pr create --base main" in script
    pushes = [line for line in script.splitlines() if "git push" in line]
    assert pushes and all('"$branch"' in line and "main" not in line for line in pushes)


# ---------------------------------------------------------------- the CPU job's script, run here

@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory):
    """.ci/smoke-gate.sh as the workflow calls it (against a git ref, as PERFGATE_AGAINST is set to the
    pull request's base there), narrowed to one workload, eager only, one process, 2 samples."""
    pytest.importorskip("perfgate.gate", reason="`perfgate run --gate` (issue 4) is not on this branch yet")
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True)
    if head.returncode != 0:
        pytest.skip("not a git checkout: --against needs one")
    tmp = tmp_path_factory.mktemp("smoke")
    summary = tmp / "step-summary.md"
    summary.write_text("earlier step\n")
    env = cli_env(PERFGATE_PYTHON=sys.executable, PERFGATE_OUT=str(tmp / "out"), GITHUB_STEP_SUMMARY=str(summary),
                  PERFGATE_AGAINST=head.stdout.strip(), PERFGATE_COMPILE_CACHE=str(tmp / "compile-cache"))
    proc = subprocess.run(["bash", str(SMOKE_SCRIPT), "-w", "operator_rollout", "-t", "eager",
                           "--samples", "2", "--processes", "1"],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    return proc, tmp / "out", summary


@pytest.mark.slow
def test_smoke_script_runs_the_gate_and_leaves_its_outputs(smoke_run):
    proc, out, _ = smoke_run
    assert proc.returncode in (0, 1), proc.stdout + proc.stderr  # 1 only if the gate itself failed
    data = json.loads((out / "results.json").read_text())
    assert [c["key"] for c in data["cases"]] == ["operator_rollout/smoke/eager/cpu"]
    assert data["cases"][0]["status"] == "ok"
    assert (out / "summary.md").read_text().strip()
    assert (out / "base" / "results.json").is_file()  # the base ref ran next to the head
    assert json.loads((out / "comparison.json").read_text())["mode"] == "against"
    assert "smoke-gate: perfgate exited" in proc.stdout
    assert (out.parent / "compile-cache").is_dir()  # PERFGATE_COMPILE_CACHE reached perfgate run


@pytest.mark.slow
def test_smoke_script_appends_the_summary_to_the_job_summary(smoke_run):
    _, out, summary = smoke_run
    text = summary.read_text()
    assert text.startswith("earlier step\n")  # appended, not replaced
    assert (out / "summary.md").read_text().strip() in text


def test_smoke_script_passes_perfgate_usage_errors_through(tmp_path):
    pytest.importorskip("perfgate.gate", reason="`perfgate run --gate` (issue 4) is not on this branch yet")
    env = cli_env(PERFGATE_PYTHON=sys.executable, PERFGATE_SUITE="no-such-suite", PERFGATE_OUT=str(tmp_path / "o"))
    proc = subprocess.run(["bash", str(SMOKE_SCRIPT)], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "no-such-suite" in proc.stderr
