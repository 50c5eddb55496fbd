"""The GitHub Actions workflows: schema-valid, audited by zizmor, and shaped by the threat model of
docs/ci.md (a GPU gate forks cannot reach, an approved commit pinned, no Python
state shared between jobs, one aggregate verdict per workflow, the base's perfgate as the judge). The
steps that decide something (pinning the approved commit, the aggregate verdicts) are run here as
bash scripts against a fake `gh`; the CPU job's script is run exactly as the workflow runs it.

Nothing here can run on GitHub itself: these tests read the YAML and run its scripts locally."""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from conftest import REPO, cli_env, dev_tool, zizmor_findings

WORKFLOWS = REPO / ".github" / "workflows"
WORKFLOW_FILES = sorted(WORKFLOWS.glob("*.yml"))
ACTION = REPO / "action.yml"  # the reusable composite action perfgate.yml and `perfgate init` use
CI_DOC = REPO / "docs" / "ci.md"
SMOKE_SCRIPT = REPO / ".ci" / "smoke-gate.sh"
SEVERITIES = ("unknown", "informational", "low", "medium", "high")
# The deliberate suppressions: both workflows need pull_request_target. perfgate-label.yml checks out
# nothing (asserted below) and makes one API call; perfgate-gpu.yml runs pull-request code only in the
# approved, label-gated `gpu` job on the ephemeral PR pool, with a read-only token (asserted below).
ALLOWED_IGNORES = {("dangerous-triggers", "perfgate-label.yml"), ("dangerous-triggers", "perfgate-gpu.yml")}
# What `zizmor --persona=auditor` still reports, each explained in docs/ci.md ("zizmor findings"):
# the two jobs that run on self-hosted runners by design.
AUDITOR_FINDINGS = {("self-hosted-runner", "perfgate-gpu.yml", "gpu"),
                    ("self-hosted-runner", "perfgate-baselines.yml", "measure"),
                    ("self-repository", "perfgate.yml", "cpu-smoke")}
# PR text an attacker controls; none of it may be expanded by the runner inside a shell script.
UNTRUSTED = re.compile(
    r"\$\{\{[^}]*github\.(event\.(pull_request\.(title|body|head\.ref|head\.label|user)|label\.description"
    r"|comment|review|issue)|head_ref)[^}]*\}\}"
)
# Triggers whose workflow file GitHub takes from the pull request itself (a fork can edit it).
FORK_EDITABLE_TRIGGERS = {"pull_request", "pull_request_review", "pull_request_review_comment"}
PR_POOL, MAIN_POOL = "perfgate-pr", "perfgate-main"
APPROVED = "${{ needs.approve.outputs.sha }}"
BASE = "${{ needs.approve.outputs.base }}"


def _load(path: Path) -> dict:
    yaml = pytest.importorskip("ruamel.yaml")
    return yaml.YAML(typ="safe").load(path.read_text())


@pytest.fixture(scope="module")
def workflows() -> dict[str, dict]:
    return {p.name: _load(p) for p in WORKFLOW_FILES}


@pytest.fixture(scope="module")
def gpu_wf(workflows) -> dict:
    assert "perfgate-gpu.yml" in workflows, "the GPU gate must have a workflow of its own"
    return workflows["perfgate-gpu.yml"]


def _steps(job: dict) -> list[dict]:
    return job.get("steps", [])


def _triggers(wf: dict) -> set[str]:
    on = wf["on"]
    return {on} if isinstance(on, str) else set(on)


def _labels(job: dict) -> list[str]:
    runs_on = job["runs-on"]
    if isinstance(runs_on, dict):
        return [runs_on.get("group", ""), *runs_on.get("labels", [])]
    return [runs_on] if isinstance(runs_on, str) else list(runs_on)


def _self_hosted_jobs(workflows) -> list[tuple[str, str, dict]]:
    return [(name, job_id, job) for name, wf in workflows.items() for job_id, job in wf["jobs"].items()
            if any("self-hosted" in str(label) for label in _labels(job))]


def _checkouts(job: dict) -> list[dict]:
    return [s for s in _steps(job) if s.get("uses", "").startswith("actions/checkout")]


def _step(job: dict, name_part: str) -> dict:
    found = [s for s in _steps(job) if name_part in s.get("name", "")]
    assert len(found) == 1, f"one step named like {name_part!r}, found {len(found)}"
    return found[0]


def _final_job(wf: dict) -> tuple[str, dict]:
    """The job no other job needs and that needs every other job (the aggregate verdict)."""
    jobs = wf["jobs"]
    needed = {n for job in jobs.values() for n in ([job["needs"]] if isinstance(job.get("needs"), str)
                                                    else job.get("needs", []))}
    finals = [(job_id, job) for job_id, job in jobs.items() if job_id not in needed and job.get("needs")]
    assert len(finals) == 1, f"exactly one final job, found {[j for j, _ in finals]}"
    return finals[0]


# ---------------------------------------------------------------- running the workflows' bash steps

FAKE_GH = """#!{python}
# A stand-in for the GitHub CLI: `gh api [--paginate] [--method M] PATH [--jq EXPR] [-f k=v]...`
# answers from $FAKE_GH_DIR/<PATH with / as _>.json (a list of pages for --paginate) and logs each call.
import json, os, subprocess, sys
args = sys.argv[1:]
root = os.environ["FAKE_GH_DIR"]
with open(os.path.join(root, "calls.log"), "a") as log:
    log.write(json.dumps(args) + "\\n")
assert args[0] == "api", args
jq, path, paginate, rest = None, None, False, args[1:]
i = 0
while i < len(rest):
    a = rest[i]
    if a == "--jq":
        jq = rest[i + 1]; i += 2
    elif a in ("--method", "-f", "-F", "-H"):
        i += 2
    elif a == "--paginate":
        paginate = True; i += 1
    elif a.startswith("-"):
        i += 1
    else:
        path = path or a; i += 1
fname = os.path.join(root, path.replace("/", "_") + ".json")
if not os.path.exists(fname):
    sys.exit(0)  # a POST with no canned answer: recorded in calls.log only
data = json.load(open(fname))
pages = data if paginate else [data]
for page in pages:
    text = json.dumps(page)
    if jq:
        text = subprocess.run(["jq", "-r", jq], input=text, capture_output=True, text=True, check=True).stdout
    sys.stdout.write(text if text.endswith("\\n") else text + "\\n")
"""


@pytest.fixture
def fake_gh(tmp_path):
    """A directory of canned GitHub API answers, and the environment to run a step against them."""
    if not shutil.which("jq"):
        pytest.skip("jq is not installed (the workflows' steps use it; GitHub's runners have it)")
    bin_dir, api = tmp_path / "bin", tmp_path / "api"
    bin_dir.mkdir()
    api.mkdir()
    gh = bin_dir / "gh"
    gh.write_text(FAKE_GH.replace("{python}", sys.executable))
    gh.chmod(0o755)

    def answer(path: str, data) -> None:
        (api / (path.replace("/", "_") + ".json")).write_text(json.dumps(data))

    def calls() -> list[list[str]]:
        log = api / "calls.log"
        return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []

    env = {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "FAKE_GH_DIR": str(api)}
    return answer, calls, env


def _run_step(step: dict, env: dict[str, str], tmp_path: Path, cwd: Path | None = None
              ) -> tuple[subprocess.CompletedProcess, dict[str, str]]:
    """Run a `run:` step as GitHub's default shell does (bash -e -o pipefail), with its outputs file."""
    assert "${{" not in step["run"]
    script = tmp_path / "step.sh"
    script.write_text(step["run"])
    output = tmp_path / "github_output"
    output.write_text("")
    full_env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "GITHUB_OUTPUT": str(output), **env}
    proc = subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", str(script)], env=full_env,
                          cwd=cwd or tmp_path, capture_output=True, text=True, timeout=60)
    outputs = dict(line.split("=", 1) for line in output.read_text().splitlines() if "=" in line)
    return proc, outputs


# ---------------------------------------------------------------- schema and zizmor

def test_the_four_workflows_exist():
    assert {p.name for p in WORKFLOW_FILES} >= {"perfgate.yml", "perfgate-gpu.yml", "perfgate-baselines.yml",
                                                 "perfgate-label.yml"}


def test_workflows_match_the_github_workflow_schema():
    proc = subprocess.run([dev_tool("check-jsonschema"), "--builtin-schema", "vendor.github-workflows",
                           *map(str, WORKFLOW_FILES)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def _zizmor(*extra: str) -> list[dict]:
    return zizmor_findings(WORKFLOWS, *extra)


def _at_least_medium(finding: dict) -> bool:
    return SEVERITIES.index(finding["determinations"]["severity"].lower()) >= SEVERITIES.index("medium")


def _where(finding: dict) -> str:
    return Path(finding["locations"][0]["symbolic"]["key"]["Local"]["verbatim_path"]).name


def _job_of(finding: dict) -> str:
    route = [part.get("Key") for part in finding["locations"][0]["symbolic"]["route"]["route"]]
    return route[1] if len(route) > 1 and route[0] == "jobs" else ""


def test_zizmor_offline_finds_nothing_at_medium_or_above():
    findings = [f for f in _zizmor() if _at_least_medium(f) and not f.get("ignored")]
    assert findings == [], [(f["ident"], _where(f)) for f in findings]


def test_zizmor_default_persona_reports_exactly_what_the_docs_say():
    findings = {(f["ident"], _where(f), _job_of(f), f["determinations"]["severity"].lower())
                for f in _zizmor() if not f.get("ignored")}
    assert findings == {("self-repository", "perfgate.yml", "cpu-smoke", "low")}
    section = CI_DOC.read_text().split("### zizmor findings", 1)[1]
    assert "reports one low finding, `self-repository` for\n`perfgate.yml` job `cpu-smoke`" in section


def test_zizmor_suppressions_are_only_the_documented_ones():
    suppressed = {(f["ident"], _where(f)) for f in _zizmor("--no-ignores") if _at_least_medium(f)}
    assert suppressed == ALLOWED_IGNORES


def test_zizmor_auditor_findings_are_exactly_the_documented_ones():
    findings = {(f["ident"], _where(f), _job_of(f)) for f in _zizmor("--persona=auditor") if not f.get("ignored")}
    assert findings == AUDITOR_FINDINGS
    section = CI_DOC.read_text().split("### zizmor findings", 1)[1].split("\n## ", 1)[0]
    for ident, where, job in AUDITOR_FINDINGS:
        assert ident in section and where in section and f"`{job}`" in section, f"{ident} in {where}:{job}"
    for ident, where in ALLOWED_IGNORES:
        assert ident in section and where in section, f"docs/ci.md does not explain {ident} in {where}"


def test_action_matches_the_github_action_schema():
    proc = subprocess.run([dev_tool("check-jsonschema"), "--builtin-schema", "vendor.github-actions", str(ACTION)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_zizmor_offline_finds_nothing_in_the_action():
    findings = [f for f in zizmor_findings(ACTION, "--persona=auditor") if not f.get("ignored")]
    assert findings == [], [(f["ident"], f["desc"]) for f in findings]


def test_action_inputs_reach_its_shell_only_through_the_environment():
    action = _load(ACTION)
    assert action["runs"]["using"] == "composite"
    assert {"suite", "against", "shard", "gate", "python-version", "torch-version", "artifact-name"} <= set(
        action["inputs"])
    assert {"verdict", "report"} <= set(action["outputs"])
    for step in action["runs"]["steps"]:
        assert "${{" not in step.get("run", ""), step.get("name")
        if "run" in step:
            assert step["env"]["PYTHONNOUSERSITE"] == "1", step.get("name")


def test_every_action_is_pinned_by_full_commit_sha_with_its_version_noted():
    for path in [*WORKFLOW_FILES, ACTION]:
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
    writers = {(name, job_id): {k for k, v in job["permissions"].items() if v == "write"}
               for name, wf in workflows.items() for job_id, job in wf["jobs"].items()
               if "write" in job["permissions"].values()}
    assert writers == {
        ("perfgate-gpu.yml", "comment"): {"pull-requests"},
        ("perfgate-gpu.yml", "gpu-gate"): {"statuses"},
        ("perfgate-label.yml", "remove-perf-gate-ok"): {"pull-requests"},
        ("perfgate-baselines.yml", "open-pr"): {"contents", "pull-requests"},
    }
    # the jobs that write check out nothing (no pull-request code near a write token)
    for name, job_id in writers:
        if name != "perfgate-baselines.yml":
            assert not _checkouts(workflows[name]["jobs"][job_id]), f"{name}:{job_id}"


def test_pull_request_text_never_reaches_a_shell(workflows):
    for name, wf in workflows.items():
        for job_id, job in wf["jobs"].items():
            for step in _steps(job):
                script = step.get("run", "") + step.get("with", {}).get("script", "")
                assert "${{" not in step.get("run", ""), f"{name}:{job_id}: expression inside run:, use env"
                assert not UNTRUSTED.search(script), f"{name}:{job_id}: PR text in a script"


def test_checkouts_do_not_persist_credentials(workflows):
    for name, wf in workflows.items():
        for job_id, job in wf["jobs"].items():
            for s in _checkouts(job):
                assert s["with"]["persist-credentials"] is False, f"{name}:{job_id}"


# ---------------------------------------------------------------- item 1: a GPU gate forks cannot reach

def test_no_self_hosted_job_in_a_workflow_a_pull_request_can_edit(workflows):
    """pull_request runs the workflow file of the PR's merge commit: a fork controls every `if:` there."""
    for name, wf in workflows.items():
        if _triggers(wf) & FORK_EDITABLE_TRIGGERS:
            for job_id, job in wf["jobs"].items():
                assert not any("self-hosted" in str(label) for label in _labels(job)), \
                    f"{name}:{job_id} reaches a self-hosted runner from a workflow a fork can edit"
                assert "write" not in job.get("permissions", {}).values(), f"{name}:{job_id}"


def test_self_hosted_jobs_live_only_in_default_branch_workflows(workflows):
    """Each self-hosted job runs from the default branch: label-gated pull_request_target (after the
    approval job) or push to main / manual dispatch."""
    found = {(name, job_id) for name, job_id, _ in _self_hosted_jobs(workflows)}
    assert found == {("perfgate-gpu.yml", "gpu"), ("perfgate-baselines.yml", "measure")}
    assert _triggers(workflows["perfgate-baselines.yml"]) == {"push", "workflow_dispatch"}
    assert workflows["perfgate-baselines.yml"]["on"]["push"]["branches"] == ["main"]


def test_gpu_workflow_runs_from_the_default_branch_on_the_label_only(gpu_wf):
    assert gpu_wf["on"] == {"pull_request_target": {"types": ["labeled"]}}
    jobs = gpu_wf["jobs"]
    assert jobs["approve"]["if"] == "github.event.label.name == 'perf-gate-ok'"
    assert jobs["gpu"]["needs"] == "approve"  # no approval, no GPU
    assert "if" not in jobs["gpu"]  # runs only when `approve` succeeded
    assert jobs["gpu"]["permissions"] == {"contents": "read"}
    assert jobs["approve"]["permissions"] == {"pull-requests": "read"}
    # no caches: nothing a pull request's job writes is restored by another (pull_request_target
    # shares the default branch's cache scope)
    for job in jobs.values():
        for s in _steps(job):
            assert not s.get("uses", "").startswith("actions/cache"), s
            assert "cache" not in s.get("with", {}), s  # e.g. setup-python's own cache
            assert "--compile-cache" not in s.get("run", ""), s
    assert gpu_wf["env"]["PIP_NO_CACHE_DIR"] == "1"


def test_pull_request_target_jobs_check_out_only_the_approved_head_or_the_base(workflows, gpu_wf):
    for name, wf in workflows.items():
        if "pull_request_target" not in _triggers(wf):
            continue
        for job_id, job in wf["jobs"].items():
            refs = [s["with"].get("ref") for s in _checkouts(job)]
            expected = {("perfgate-gpu.yml", "gpu"): [APPROVED], ("perfgate-gpu.yml", "merge"): [BASE]}
            assert refs == expected.get((name, job_id), []), f"{name}:{job_id} checks out {refs}"
            for s in _steps(job):  # no other way in for pull-request code
                assert not re.search(r"\bgit (fetch|checkout|switch|pull)\b|gh pr checkout", s.get("run", "")), \
                    f"{name}:{job_id}"
    assert not any(s.get("uses", "").startswith("actions/download-artifact") for s in _steps(gpu_wf["jobs"]["gpu"]))


def test_docs_describe_the_runner_group_restriction_and_fork_approval():
    doc = CI_DOC.read_text()
    assert "Selected workflows" in doc
    for workflow in ("perfgate-gpu.yml@main", "perfgate-baselines.yml@main"):
        assert workflow in doc
    assert "Require approval for all external contributors" in doc
    assert "## Threat model" in doc
    # the label alone is no longer presented as the protection
    assert "reach the GPU only with a maintainer's label" not in doc


# ---------------------------------------------------------------- item 2: the approved commit is pinned

HEAD_SHA, OLD_SHA, BASE_SHA = "a" * 40, "b" * 40, "c" * 40


def _approve(gpu_wf, fake_gh, tmp_path, *, reviews: list[list[dict]] | None = None, live_head: str = HEAD_SHA,
             labeller: str = "maintainer", author: str = "contributor", head_repo: str = "fork/perfgate",
             head_sha: str = HEAD_SHA, base_ref: str = "main"):
    answer, _, env = fake_gh
    answer("repos/org/perfgate/pulls/7", {"head": {"sha": live_head}})
    answer("repos/org/perfgate/pulls/7/reviews", reviews if reviews is not None else [[]])
    step = _step(gpu_wf["jobs"]["approve"], "pin the approved commit")
    env = {**env, "REPO": "org/perfgate", "PR_NUMBER": "7", "HEAD_SHA": head_sha, "BASE_SHA": BASE_SHA,
           "BASE_REF": base_ref, "HEAD_REPO": head_repo, "AUTHOR": author, "LABELLER": labeller, "GH_TOKEN": "x"}
    return _run_step(step, env, tmp_path)


def _review(user: str, state: str, commit: str) -> dict:
    return {"user": {"login": user}, "state": state, "commit_id": commit}


def test_approve_pins_the_head_the_labeller_approved(gpu_wf, fake_gh, tmp_path):
    proc, out = _approve(gpu_wf, fake_gh, tmp_path, reviews=[[_review("maintainer", "APPROVED", HEAD_SHA)]])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert out == {"sha": HEAD_SHA, "base": BASE_SHA, "base-ref": "main"}


@pytest.mark.parametrize("base_ref", ["main; echo x", "release/1 2", "", "x" * 101, "feature/`id`"])
def test_approve_refuses_a_base_branch_name_it_would_not_put_in_a_status(gpu_wf, fake_gh, tmp_path, base_ref):
    proc, out = _approve(gpu_wf, fake_gh, tmp_path, reviews=[[_review("maintainer", "APPROVED", HEAD_SHA)]],
                         base_ref=base_ref)
    assert proc.returncode == 1 and out == {}, proc.stdout + proc.stderr
    assert "the base branch's name" in proc.stdout


def test_approve_refuses_a_head_pushed_after_the_review(gpu_wf, fake_gh, tmp_path):
    """Reviewed at OLD, then a push: the label approves whatever the head is, the review does not."""
    proc, out = _approve(gpu_wf, fake_gh, tmp_path, reviews=[[_review("maintainer", "APPROVED", OLD_SHA)]])
    assert proc.returncode == 1 and "sha" not in out
    assert f"approves {OLD_SHA}, not the head {HEAD_SHA}" in proc.stdout


def test_approve_refuses_when_the_head_moved_after_the_label(gpu_wf, fake_gh, tmp_path):
    proc, out = _approve(gpu_wf, fake_gh, tmp_path, live_head=OLD_SHA,
                         reviews=[[_review("maintainer", "APPROVED", HEAD_SHA)]])
    assert proc.returncode == 1 and "sha" not in out
    assert "head moved" in proc.stdout


@pytest.mark.parametrize("reviews", [
    [[]],  # nobody reviewed
    [[_review("someone-else", "APPROVED", HEAD_SHA)]],  # another person's approval is not the labeller's
    [[_review("maintainer", "APPROVED", HEAD_SHA)], [_review("maintainer", "CHANGES_REQUESTED", HEAD_SHA)]],
    [[_review("maintainer", "DISMISSED", HEAD_SHA)]],
], ids=["no-review", "other-reviewer", "changes-requested-later", "dismissed"])
def test_approve_refuses_without_the_labellers_standing_approval(gpu_wf, fake_gh, tmp_path, reviews):
    proc, out = _approve(gpu_wf, fake_gh, tmp_path, reviews=reviews)
    assert proc.returncode == 1 and "sha" not in out, proc.stdout + proc.stderr
    assert "::error::perf-gate-ok refused" in proc.stdout


def test_approve_reads_every_page_of_reviews(gpu_wf, fake_gh, tmp_path):
    reviews = [[_review("maintainer", "CHANGES_REQUESTED", OLD_SHA)], [_review("x", "COMMENTED", HEAD_SHA)],
               [_review("maintainer", "COMMENTED", HEAD_SHA), _review("maintainer", "APPROVED", HEAD_SHA)]]
    proc, out = _approve(gpu_wf, fake_gh, tmp_path, reviews=reviews)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert out["sha"] == HEAD_SHA


def test_approve_lets_an_author_label_their_own_branch_of_this_repository(gpu_wf, fake_gh, tmp_path):
    proc, out = _approve(gpu_wf, fake_gh, tmp_path, labeller="maintainer", author="maintainer",
                         head_repo="org/perfgate")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert out["sha"] == HEAD_SHA
    # ... but not a fork's author, whose branch anyone they allow can push to
    proc, out = _approve(gpu_wf, fake_gh, tmp_path, labeller="maintainer", author="maintainer")
    assert proc.returncode == 1 and "sha" not in out


def test_approve_refuses_a_sha_that_is_not_one(gpu_wf, fake_gh, tmp_path):
    proc, _ = _approve(gpu_wf, fake_gh, tmp_path, head_sha="main; rm -rf /",
                       reviews=[[_review("maintainer", "APPROVED", HEAD_SHA)]])
    assert proc.returncode == 1 and "is not a commit SHA" in proc.stdout
    _, calls, _ = fake_gh
    assert calls() == []  # refused before any API call


def test_gpu_job_checks_out_the_approved_commit_and_refuses_any_other(gpu_wf, tmp_path):
    job = gpu_wf["jobs"]["gpu"]
    (checkout,) = _checkouts(job)
    assert checkout["with"]["ref"] == APPROVED
    assert job["env"]["APPROVED_SHA"] == APPROVED
    approve = gpu_wf["jobs"]["approve"]
    assert approve["outputs"]["sha"] == "${{ steps.pin.outputs.sha }}"
    assert _step(approve, "pin the approved commit")["env"]["HEAD_SHA"] == "${{ github.event.pull_request.head.sha }}"
    # the check right after checkout, run in a real repository with two commits
    refuse = _step(job, "refuse anything but the approved commit")
    assert _steps(job).index(refuse) == _steps(job).index(checkout) + 1
    repo = tmp_path / "repo"
    repo.mkdir()
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"]
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    shas = []
    for i in range(2):
        subprocess.run([*git, "commit", "-q", "--allow-empty", "-m", str(i)], cwd=repo, check=True)
        shas.append(subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True,
                                   check=True).stdout.strip())
    proc, _ = _run_step(refuse, {"APPROVED_SHA": shas[0]}, tmp_path, cwd=repo)
    assert proc.returncode == 1 and f"the approved commit is {shas[0]}" in proc.stdout
    proc, _ = _run_step(refuse, {"APPROVED_SHA": shas[1]}, tmp_path, cwd=repo)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_label_is_removed_on_every_push(workflows):
    label = workflows["perfgate-label.yml"]
    assert label["on"]["pull_request_target"]["types"] == ["synchronize"]
    job = label["jobs"]["remove-perf-gate-ok"]
    assert "perf-gate-ok" in _steps(job)[0]["run"]
    assert not _checkouts(job)


# ---------------------------------------------------------------- item 3: nothing shared between jobs

def _effective_env(wf: dict, job: dict) -> dict:
    return {**wf.get("env", {}), **job.get("env", {})}


def test_python_ignores_user_site_packages_wherever_it_runs_on_a_self_hosted_runner(workflows):
    jobs = _self_hosted_jobs(workflows)
    assert jobs
    for name, job_id, job in jobs:
        env = _effective_env(workflows[name], job)
        assert env.get("PYTHONNOUSERSITE") == "1", f"{name}:{job_id}"
        assert env.get("PIP_NO_CACHE_DIR") == "1", f"{name}:{job_id}"  # no pip cache shared between jobs
        assert env.get("PIP_CONFIG_FILE") == "/dev/null", f"{name}:{job_id}"  # no pip.conf of the runner user
        for step in _steps(job):
            assert step.get("env", {}).get("PYTHONNOUSERSITE", "1") == "1", f"{name}:{job_id}"
            # the job's Python lives in a fresh per-job venv, never in a shared one
            if "-m venv" in step.get("run", ""):
                assert '-m venv --system-site-packages "$RUNNER_TEMP/venv"' in step["run"]


def test_pull_request_and_main_jobs_use_separate_runner_pools(workflows):
    for name, job_id, job in _self_hosted_jobs(workflows):
        labels = _labels(job)
        if "pull_request_target" in _triggers(workflows[name]):
            assert PR_POOL in labels and MAIN_POOL not in labels, f"{name}:{job_id}: {labels}"
        else:
            assert MAIN_POOL in labels and PR_POOL not in labels, f"{name}:{job_id}: {labels}"


def test_docs_require_ephemeral_runners():
    doc = CI_DOC.read_text()
    assert "--ephemeral" in doc and "PYTHONNOUSERSITE" in doc
    assert "Prefer ephemeral runners" not in doc  # a requirement now, not advice


# ---------------------------------------------------------------- item 4: one verdict per workflow

@pytest.mark.parametrize("name", ["perfgate.yml", "perfgate-gpu.yml"])
def test_final_job_needs_every_job_and_always_runs(workflows, name):
    wf = workflows[name]
    job_id, job = _final_job(wf)
    needs = [job["needs"]] if isinstance(job["needs"], str) else job["needs"]
    assert set(needs) == set(wf["jobs"]) - {job_id}
    assert job["if"].split("&&")[0].strip() == "always()"


@pytest.mark.parametrize("name", ["perfgate.yml", "perfgate-gpu.yml"])
@pytest.mark.parametrize("results,ok", [
    ({"a": "success", "b": "success"}, True),
    ({"a": "success", "b": "skipped"}, False),  # a skipped job must not pass the gate
    ({"a": "failure", "b": "success"}, False),
    ({"a": "cancelled"}, False),
    ({}, False),
])
def test_final_job_fails_unless_every_job_it_needs_succeeded(workflows, tmp_path, name, results, ok):
    if not shutil.which("jq"):
        pytest.skip("jq is not installed (the workflows' steps use it; GitHub's runners have it)")
    _, job = _final_job(workflows[name])
    step = _step(job, "fail unless every job it needs succeeded")
    assert step["env"]["NEEDS"] == "${{ toJSON(needs) }}"
    needs = {k: {"result": v, "outputs": {}} for k, v in results.items()}
    proc, out = _run_step(step, {"NEEDS": json.dumps(needs)}, tmp_path)
    assert (proc.returncode == 0) is ok, proc.stdout + proc.stderr
    if name == "perfgate-gpu.yml":
        assert out["state"] == ("success" if ok else "failure")


def test_gpu_verdict_is_a_commit_status_on_the_approved_commit(gpu_wf, fake_gh, tmp_path):
    """Checks of a pull_request_target run belong to the default branch's commit; the status is what a
    branch rule can require, and it sits on exactly the commit that was measured."""
    job_id, job = _final_job(gpu_wf)
    assert job_id == "gpu-gate" and job["name"] == "perfgate GPU gate"
    assert job["if"] == "always() && github.event.label.name == 'perf-gate-ok'"
    post = _step(job, "post the verdict")
    assert post["if"].startswith("always()")
    assert post["env"]["SHA"] == APPROVED
    _, calls, env = fake_gh
    proc, _ = _run_step(post, {**env, "REPO": "org/perfgate", "SHA": HEAD_SHA, "STATE": "failure", "BASE_REF": "main",
                               "RUN_URL": "https://github.com/org/perfgate/actions/runs/1"}, tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (call,) = calls()
    assert call[:4] == ["api", "--method", "POST", f"repos/org/perfgate/statuses/{HEAD_SHA}"]
    assert "state=failure" in call and "context=perfgate GPU gate (main)" in call


def test_a_pass_against_another_branch_is_no_pass_for_main(gpu_wf, fake_gh, tmp_path):
    """A pull request approved and measured against `release` keeps its status when it is retargeted to
    `main`: the status names the base branch it was judged against, so `perfgate GPU gate (main)`, the
    required check, is still missing."""
    _, job = _final_job(gpu_wf)
    post = _step(job, "post the verdict")
    assert post["env"]["BASE_REF"] == "${{ needs.approve.outputs.base-ref }}"
    approve = gpu_wf["jobs"]["approve"]
    assert approve["outputs"]["base-ref"] == "${{ steps.pin.outputs.base-ref }}"
    assert _step(approve, "pin the approved commit")["env"]["BASE_REF"] == "${{ github.event.pull_request.base.ref }}"
    _, calls, env = fake_gh
    proc, _ = _run_step(post, {**env, "REPO": "org/perfgate", "SHA": HEAD_SHA, "STATE": "success", "BASE_REF": "release",
                               "RUN_URL": "https://github.com/org/perfgate/actions/runs/1"}, tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (call,) = calls()
    contexts = [arg.split("=", 1)[1] for arg in call if arg.startswith("context=")]
    assert contexts == ["perfgate GPU gate (release)"]


def test_labels_start_no_cpu_run_and_gpu_runs_have_their_own_concurrency(workflows, gpu_wf):
    cpu = workflows["perfgate.yml"]
    assert _triggers(cpu) == {"pull_request"}
    assert "labeled" not in cpu["on"]["pull_request"]["types"]
    cpu_group, gpu_group = cpu["concurrency"]["group"], gpu_wf["concurrency"]["group"]
    assert cpu_group.split("$")[0] != gpu_group.split("$")[0]  # different prefixes: never the same group
    assert "github.event.pull_request.number" in cpu_group and "github.event.pull_request.number" in gpu_group
    # another label's run gets a group of its own and cannot cancel a running gate
    assert "github.event.label.name == 'perf-gate-ok'" in gpu_group and "github.run_id" in gpu_group
    assert cpu["concurrency"]["cancel-in-progress"] is True and gpu_wf["concurrency"]["cancel-in-progress"] is True


def test_docs_name_the_required_checks():
    doc = CI_DOC.read_text()
    assert "`perfgate CPU gate`" in doc and "`perfgate GPU gate (main)`" in doc


# ---------------------------------------------------------------- item 5: the base's perfgate judges

def test_merge_job_judges_with_the_base_commits_perfgate(gpu_wf):
    job = gpu_wf["jobs"]["merge"]
    (checkout,) = _checkouts(job)
    assert checkout["with"]["ref"] == BASE
    approve = _step(gpu_wf["jobs"]["approve"], "pin the approved commit")
    assert approve["env"]["BASE_SHA"] == "${{ github.event.pull_request.base.sha }}"
    assert gpu_wf["jobs"]["approve"]["outputs"]["base"] == "${{ steps.pin.outputs.base }}"
    text = json.dumps(job)
    assert "head.sha" not in text and "outputs.sha" not in text
    install = _step(job, "install the base commit's perfgate")
    assert "pip install -e ." in install["run"]
    steps = _steps(job)
    assert steps.index(checkout) < steps.index(install)
    assert job["permissions"] == {"contents": "read"}


def test_merge_job_reads_shard_artifacts_as_data_only(gpu_wf):
    job = gpu_wf["jobs"]["merge"]
    (download,) = [s for s in _steps(job) if s.get("uses", "").startswith("actions/download-artifact")]
    # outside the checkout: nothing in an artifact can replace a file of the base's perfgate
    assert download["with"]["path"].startswith("${{ runner.temp }}/")
    gate = _step(job, "merge shards and gate")
    assert gate["env"]["SHARDS_DIR"] == download["with"]["path"]
    # the shard folders are only ever arguments of `perfgate merge` (or tested for existence)
    for line in gate["run"].splitlines():
        if "SHARDS_DIR" in line or '"${shards[@]}"' in line:
            assert re.match(r'\s*(\[\[ -d "\$SHARDS_DIR/|python -m perfgate merge "\$\{shards\[@\]\}"|for |shards\+=)',
                            line), line
    # judged again from the raw samples by the base's rules: the shards' own verdicts are not read
    assert 'python -m perfgate merge "${shards[@]}" --out reports/pr --gate --rejudge' in gate["run"]
    # the judge plans the shards' suite itself: a case no shard measured (dropped by the pull request) fails
    assert "--rejudge --expect-suite pr \\\n" in gate["run"]
    # the report the comment job posts comes from this job (the base's code), not from a shard: by the id
    # this job's upload answered, never by a name another job could also upload under
    comment = gpu_wf["jobs"]["comment"]
    (download,) = [s for s in _steps(comment) if s.get("uses", "").startswith("actions/download")]
    assert download["with"] == {"artifact-ids": "${{ needs.merge.outputs.report-id }}",
                                "path": "${{ runner.temp }}/perfgate-report"}
    assert job["outputs"]["report-id"] == "${{ steps.report.outputs.artifact-id }}"


def test_gate_shape_shards_merge_comment(gpu_wf):
    jobs = gpu_wf["jobs"]
    shards = jobs["gpu"]["strategy"]["matrix"]["shard"]
    assert shards == list(range(1, int(gpu_wf["env"]["PERFGATE_SHARDS"]) + 1))
    gpu_run = " ".join(s.get("run", "") for s in _steps(jobs["gpu"]))
    assert "--suite pr" in gpu_run and '--shard "$SHARD/$PERFGATE_SHARDS"' in gpu_run
    assert '--against "$BASE_SHA"' in gpu_run and jobs["gpu"]["env"]["BASE_SHA"] == BASE
    assert any(s.get("uses", "").startswith("actions/upload-artifact") for s in _steps(jobs["gpu"]))
    assert set(jobs["merge"]["needs"]) == {"approve", "gpu"} and jobs["comment"]["needs"] == "merge"
    assert "<!-- perfgate:pr-gate -->" in _steps(jobs["comment"])[-1]["with"]["script"]
    assert any("junit" in s.get("uses", "") for s in _steps(jobs["merge"]))


def test_cpu_job_runs_the_repository_script_with_caches(workflows):
    """The CPU job calls this repository's own action (action.yml), which runs .ci/smoke-gate.sh."""
    job = workflows["perfgate.yml"]["jobs"]["cpu-smoke"]
    assert job["runs-on"] == "ubuntu-latest"
    (gate,) = [s for s in _steps(job) if s.get("uses") == "./"]
    assert gate["with"]["against"] == "${{ github.event.pull_request.base.sha }}"
    assert gate["with"]["compile-cache"] == ".cache/perfgate-compile"
    cached = [s["with"]["path"] for s in _steps(job) if s.get("uses", "").startswith("actions/cache")]
    assert "~/.cache/pip" in cached
    action = _load(ACTION)
    runs = [s.get("run", "") for s in action["runs"]["steps"]]
    assert any('"$GITHUB_ACTION_PATH/.ci/smoke-gate.sh"' in r for r in runs)
    cached = [s["with"]["path"] for s in action["runs"]["steps"] if s.get("uses", "").startswith("actions/cache")]
    # the compile cache, and the base side's environment when a pull request changes a dependency file
    assert cached == ["${{ inputs.compile-cache }}", "${{ runner.temp }}/perfgate-base-env"]
    run_step = [s for s in action["runs"]["steps"] if s.get("id") == "run"][0]
    assert run_step["env"]["PERFGATE_COMPILE_CACHE"] == "${{ inputs.compile-cache }}"
    script = (REPO / ".ci" / "smoke-gate.sh").read_text()
    assert '--compile-cache "$PERFGATE_COMPILE_CACHE"' in script


def test_baselines_workflow_opens_a_pull_request_and_never_pushes_main(workflows):
    wf = workflows["perfgate-baselines.yml"]
    assert set(wf["on"]) == {"push", "workflow_dispatch"}
    assert wf["on"]["push"]["branches"] == ["main"]
    assert wf["jobs"]["measure"]["runs-on"] == ["self-hosted", "linux", "gpu", MAIN_POOL]
    script = _steps(wf["jobs"]["open-pr"])[-1]["run"]
    assert "gh pr create --base main" in script
    pushes = [line for line in script.splitlines() if "git push" in line]
    assert pushes and all('"$branch"' in line and "main" not in line for line in pushes)


# ---------------------------------------------------------------- the CPU job's script, run here

@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory):
    """.ci/smoke-gate.sh as the workflow calls it (against a git ref, as PERFGATE_AGAINST is set to the
    pull request's base there), narrowed to one workload, eager only, one process, 2 samples."""
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
    env = cli_env(PERFGATE_PYTHON=sys.executable, PERFGATE_SUITE="no-such-suite", PERFGATE_OUT=str(tmp_path / "o"))
    proc = subprocess.run(["bash", str(SMOKE_SCRIPT)], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "no-such-suite" in proc.stderr


# ---------------------------------------------------------------- the action's run step, run here


def _action_run_step() -> dict:
    (step,) = [s for s in _load(ACTION)["runs"]["steps"] if s.get("id") == "run"]
    return step


def _action_env(repo: Path, **inputs: str) -> dict[str, str]:
    """The step's environment as GitHub builds it from the inputs (defaults from action.yml)."""
    defaults = {k: str(v.get("default", "")) for k, v in _load(ACTION)["inputs"].items()}
    values = {**defaults, **inputs}
    env = {}
    for name, expr in _action_run_step()["env"].items():
        m = re.fullmatch(r"\$\{\{ inputs\.([\w-]+) \}\}", str(expr))
        if m:
            env[name] = values[m.group(1)]
        elif str(expr).startswith("${{ steps.deps.outputs.changed == 'true' && "):
            # the base-environment step runs only with `against` (none here): its output is '', so is this
            env[name] = ""
        else:
            env[name] = str(expr)
    env["PERFGATE_WORKDIR"] = str(repo)  # ${{ github.workspace }}
    return {**env, "GITHUB_ACTION_PATH": str(REPO), "PERFGATE_PYTHON": sys.executable,
            "PYTHONPATH": str(REPO)}


@pytest.fixture(scope="module")
def user_repo(tmp_path_factory) -> Path:
    """A throwaway repository set up by `perfgate init`, where the action runs as in a user's workflow."""
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    repo = tmp_path_factory.mktemp("user") / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    proc = subprocess.run([sys.executable, "-m", "perfgate", "init", "--suite-only"], cwd=repo, env=cli_env(),
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return repo


@pytest.mark.slow
def test_action_runs_the_users_suite_and_answers_with_verdict_and_report(user_repo, tmp_path):
    proc, outputs = _run_step(_action_run_step(), _action_env(user_repo, gate="false", out="reports/ci"), tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert outputs == {"exit-code": "0", "verdict": "pass", "report": "reports/ci"}
    data = json.loads((user_repo / "reports" / "ci" / "results.json").read_text())
    assert [c["key"] for c in data["cases"]] == ["example_mlp/smoke/eager/cpu"]
    assert (user_repo / "reports" / "ci" / "junit.xml").is_file()


@pytest.mark.parametrize("inputs, verdict", [({"suite": "no-such-suite"}, "usage-error"),
                                             ({"gate": "maybe"}, "usage-error")])
@pytest.mark.slow
def test_action_names_a_usage_error_and_fails_the_step(user_repo, tmp_path, inputs, verdict):
    proc, outputs = _run_step(_action_run_step(), _action_env(user_repo, **inputs), tmp_path)
    assert proc.returncode == 2 and outputs["verdict"] == verdict and outputs["exit-code"] == "2"


def test_a_job_tests_every_dependency_at_its_declared_floor(workflows):
    """The lowest-versions job installs the floors (.ci/lowest-constraints.txt) and tests."""
    wf = workflows["perfgate.yml"]
    job = wf["jobs"]["lowest-versions"]
    script = "\n".join(s.get("run", "") for s in _steps(job))
    assert "-c .ci/lowest-constraints.txt" in script and "python -m pytest" in script
    assert (REPO / ".ci" / "lowest-constraints.txt").is_file()
    assert "lowest-versions" in _final_job(wf)[1]["needs"]  # its failure fails the required check


# ---------------------------------------------------------------- the measuring job's token

SWEEP_STEP = "end every process the pull request's code left"
COPY_STEP = "copy the shard's plain files for the upload"


def test_gpu_job_ends_every_process_the_pull_request_left_before_it_uploads(gpu_wf):
    """Once pull-request code has run, the only `uses:` step of the `gpu` job is the upload (its environment
    holds the job's Actions token), and right before it a step of this file ends every process of the
    runner user but the runner's. The workflow init writes has the same step, byte for byte."""
    steps = _steps(gpu_wf["jobs"]["gpu"])
    sweep = _step(gpu_wf["jobs"]["gpu"], SWEEP_STEP)
    first_pr_code = next(i for i, s in enumerate(steps) if "perfgate" in s.get("run", "") or "pip install" in s.get("run", ""))
    after = steps[first_pr_code:]
    assert [s["uses"].split("@")[0] for s in after if "uses" in s] == ["actions/upload-artifact"]
    upload = next(s for s in after if "uses" in s)
    copy = _step(gpu_wf["jobs"]["gpu"], COPY_STEP)
    assert steps.index(sweep) == steps.index(copy) - 1 == steps.index(upload) - 2 and sweep["if"] == "always()"
    template = (REPO / "perfgate" / "templates" / "init" / "workflow-gpu.yml").read_text()
    assert sweep["run"] in template.replace("\n          ", "\n")  # the same script, as YAML indents it


def test_the_merged_report_replaces_an_artifact_of_its_name_the_measuring_job_could_have_uploaded(gpu_wf):
    """merge always uploads (`if-no-files-found: error`: never a step that uploads nothing and leaves an older
    artifact of the name in place), replacing any artifact of its name, and the comment reads the report by
    the id that upload answered (upload-artifact v4 outputs `artifact-id`; download-artifact takes
    `artifact-ids` from v4.3.0 on)."""
    merge = gpu_wf["jobs"]["merge"]
    upload = next(s for s in _steps(merge) if s.get("uses", "").startswith("actions/upload-artifact"))
    (download,) = [s for s in _steps(gpu_wf["jobs"]["comment"]) if s.get("uses", "").startswith("actions/download")]
    assert upload["with"]["name"] == "perfgate-report" and upload["id"] == "report" and upload["if"] == "always()"
    assert upload["with"]["overwrite"] is True and upload["with"]["if-no-files-found"] == "error"
    assert download["with"]["artifact-ids"] == "${{ needs.merge.outputs.report-id }}" and "name" not in download["with"]
    assert download["uses"].endswith("# v4.3.0") or "@d3f86a106a0bac45b974a628896c90dbdf5c8093" in download["uses"]
    summary = _step(gpu_wf["jobs"]["comment"], "post or update the perfgate comment")["env"]["SUMMARY_FILE"]
    assert summary == "${{ runner.temp }}/perfgate-report/perfgate-report/summary.md"  # by id: a folder per artifact


def test_merge_always_writes_a_report_to_upload(gpu_wf, tmp_path):
    """With no shard to merge (every GPU job failed) the gate step wrote nothing, so the upload found no
    files, warned, and left in place any `perfgate-report` uploaded earlier in the run. Now it writes a
    summary saying so, and says exit 3."""
    gate = _step(gpu_wf["jobs"]["merge"], "merge shards and gate")
    shards = tmp_path / "shards"
    shards.mkdir()
    work = tmp_path / "work"
    work.mkdir()
    proc, outputs = _run_step(gate, {"SHARDS_DIR": str(shards), "PERFGATE_SHARDS": "2"}, tmp_path, cwd=work)
    assert proc.returncode == 0 and outputs == {"exit": "3"}, proc.stdout + proc.stderr
    assert "exit 3" in (work / "reports" / "pr" / "summary.md").read_text()


def test_the_sweep_ends_a_daemon_of_the_same_user_and_spares_its_ancestors(gpu_wf, tmp_path):
    """The step's script, run for real inside a PID namespace of its own (so that it can only see, and end,
    the processes of this test): a double-forked daemon and a process that made itself not dumpable are
    ended; the shell that started the script (its ancestor, as the runner is) survives."""
    if not sys.platform.startswith("linux") or not shutil.which("unshare"):
        pytest.skip("needs Linux and unshare")
    script = tmp_path / "sweep.sh"
    script.write_text(_step(gpu_wf["jobs"]["gpu"], SWEEP_STEP)["run"])
    undumpable = ("import ctypes, time; ctypes.CDLL('libc.so.6').prctl(4, 0, 0, 0, 0); time.sleep(300)")
    inside = f"""
[[ $$ -eq 1 ]] || exit 97  # not a namespace of our own: never run the sweep outside one
(( $(ls -d /proc/[0-9]* | wc -l) < 20 )) || exit 98
setsid sh -c 'sleep 300 & echo $! > {tmp_path}/daemon' &
{sys.executable} -c "{undumpable}" &
echo $! > {tmp_path}/undumpable
sleep 1
bash --noprofile --norc -eo pipefail {script}
echo "sweep exit $?"
for f in daemon undumpable; do
  state="$(cut -d' ' -f3 /proc/$(cat {tmp_path}/$f)/stat 2>/dev/null || true)"  # a zombie is gone
  if [[ -n "$state" && "$state" != Z ]]; then echo "$f alive"; else echo "$f gone"; fi
done
"""
    unshare = ["unshare", "--pid", "--fork", "--mount-proc"] + ([] if os.geteuid() == 0 else ["--user", "--map-root-user"])
    proc = subprocess.run([*unshare, "bash", "-c", inside], capture_output=True, text=True, timeout=60)
    if proc.returncode in (97, 98) or "unshare failed" in proc.stderr or "Operation not permitted" in proc.stderr:
        pytest.skip(f"no PID namespace here: {proc.stderr.strip()[-200:]}")
    assert "sweep exit 0" in proc.stdout, proc.stdout + proc.stderr
    assert "daemon gone" in proc.stdout and "undumpable gone" in proc.stdout, proc.stdout + proc.stderr


# ---------------------------------------------------------------- the sandbox the pull request's code runs in

SANDBOX_STEP = "in a sandbox"
SANDBOX_CALLS = "# -- the pull request's code, in the sandbox"
# What the runner gives a step and the pull request's code must never see.
RUNNER_SECRETS = ("ACTIONS_RUNTIME_TOKEN", "ACTIONS_RUNTIME_URL", "ACTIONS_RESULTS_URL", "ACTIONS_CACHE_URL",
                  "ACTIONS_ID_TOKEN_REQUEST_TOKEN", "ACTIONS_ID_TOKEN_REQUEST_URL", "GITHUB_TOKEN", "GH_TOKEN",
                  "GITHUB_ENV", "GITHUB_PATH", "GITHUB_OUTPUT", "GITHUB_STATE", "GITHUB_STEP_SUMMARY")


def _sandbox_script(gpu_wf) -> tuple[str, str]:
    """The sandbox step's script: the sandbox's definition, and what runs in it."""
    definition, calls = _step(gpu_wf["jobs"]["gpu"], SANDBOX_STEP)["run"].split(SANDBOX_CALLS, 1)
    return definition, SANDBOX_CALLS + calls


def test_pull_request_code_runs_only_inside_the_sandbox(gpu_wf):
    """The install (which runs the pull request's build) and `perfgate run` (which imports its workloads)
    are the commands given to `sandbox`; nothing else of the job runs them. The install has the network,
    the measurement does not. The upload reads the shard's folder only once the step has checked it."""
    job = gpu_wf["jobs"]["gpu"]
    runs = [s for s in _steps(job) if "venv/bin/python" in s.get("run", "") or "pip install" in s.get("run", "")]
    assert [s["name"] for s in runs] == ["pr suite, shard ${{ matrix.shard }}, in a sandbox"]
    definition, calls = _sandbox_script(gpu_wf)
    commands = dict(re.findall(r"^sandbox (network|no-network) '([^']*)'", calls, flags=re.M))
    assert set(commands) == {"network", "no-network"}
    assert "pip install -e ." in commands["network"] and "perfgate run" not in commands["network"]
    assert "-m perfgate run --suite pr" in commands["no-network"] and "pip" not in commands["no-network"]
    outside = re.sub(r"^sandbox (network|no-network) '[^']*'", "", calls, flags=re.M)
    assert "python" not in outside and "pip" not in outside and "perfgate run" not in outside
    # the measuring step's output is the pull request's to write: nothing reads it
    assert "steps.measure.outputs" not in json.dumps(gpu_wf)
    assert '--net' in definition and "--map-root-user" in definition and "--kill-child" in definition
    upload = next(s for s in _steps(job) if s.get("uses", "").startswith("actions/upload-artifact"))
    # and only once the sweep ended every process the pull request's code left (its failure: no upload)
    assert upload["if"] == "always() && steps.copy.outcome == 'success'"
    assert upload["with"]["path"] == "${{ runner.temp }}/perfgate-upload/shard-${{ matrix.shard }}"
    assert _step(job, COPY_STEP)["if"] == "always() && steps.sweep.outcome == 'success'"
    assert _step(job, SANDBOX_STEP)["id"] == "measure"
    assert _step(job, "end every process the pull request's code left")["id"] == "sweep"


def test_the_workflow_init_writes_has_the_same_sandbox(gpu_wf):
    """`perfgate init --gpu-runner` writes the same sandbox, byte for byte, around its own commands: the
    pinned perfgate's install (with the network) and the `gpu` suite (without); its upload waits for the
    same check."""
    definition, calls = _sandbox_script(gpu_wf)
    template = (REPO / "perfgate" / "templates" / "init" / "workflow-gpu.yml").read_text().replace("\n          ", "\n")
    assert definition in template
    assert "sandbox network '" in template and "-m perfgate run --suite gpu" in template
    after = calls.split("measured=0", 1)[1].split("--out \"reports/shard-$SHARD\"' || measured=$?", 1)[1]
    assert after in template
    assert _step(gpu_wf["jobs"]["gpu"], COPY_STEP)["run"] in template.replace("\n          ", "\n")
    assert "if: always() && steps.copy.outcome == 'success'" in template


def _sandbox_unavailable() -> str | None:
    if not sys.platform.startswith("linux"):
        return "the sandbox needs Linux namespaces"
    for tool in ("unshare", "setpriv", "mount", "mountpoint"):
        if not shutil.which(tool):
            return f"{tool} (util-linux) is not installed"
    probe = subprocess.run(["unshare", "--user", "--map-root-user", "--mount", "--pid", "--fork", "--mount-proc",
                            "--net", "true"], capture_output=True, text=True, timeout=30)
    if probe.returncode != 0:
        return f"no unprivileged user namespaces here: {probe.stderr.strip()[-200:]}"
    return None


@pytest.fixture
def runner_layout(tmp_path):
    """A runner's folders as GitHub lays them out (home, runner folder, work folder, RUNNER_TEMP with the
    files later steps read, a git checkout), and the environment a step gets, tokens included. They live
    under the home folder of whoever runs the tests rather than under /tmp, which the sandbox replaces
    with a private one anyway: so the sandbox's own covers are what hides them."""
    reason = _sandbox_unavailable()
    if reason:
        pytest.skip(reason)
    home = Path.home()
    writable = home.is_dir() and os.access(home, os.W_OK) and not str(home.resolve()).startswith("/tmp")
    base = Path(tempfile.mkdtemp(prefix=".perfgate-sandbox-test-", dir=home if writable else tmp_path))
    runner_home = base / "home"
    runner_dir = runner_home / "actions-runner"
    work = runner_dir / "_work"
    temp = work / "_temp"
    commands = temp / "_runner_file_commands"
    checkout = work / "perfgate" / "perfgate"
    for folder in (commands, checkout, work / "_tool", runner_home / ".ssh"):
        folder.mkdir(parents=True)
    (runner_dir / ".credentials").write_text("runner-credentials\n")
    (runner_home / ".ssh" / "id_ed25519").write_text("ssh-key\n")
    files = {"GITHUB_ENV": "set_env_1", "GITHUB_PATH": "add_path_1", "GITHUB_OUTPUT": "set_output_1",
             "GITHUB_STATE": "save_state_1", "GITHUB_STEP_SUMMARY": "step_summary_1"}
    env = {name: str(commands / file) for name, file in files.items()}
    for path in env.values():
        Path(path).write_text("")
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"]
    subprocess.run(["git", "init", "-q", str(checkout)], check=True)
    subprocess.run([*git, "commit", "-q", "--allow-empty", "-m", "head"], cwd=checkout, check=True)
    env.update({"HOME": str(runner_home), "RUNNER_TEMP": str(temp), "RUNNER_WORKSPACE": str(checkout.parent),
                "RUNNER_TOOL_CACHE": str(work / "_tool"), "SHARD": "1", "PERFGATE_SHARDS": "2",
                "ACTIONS_RUNTIME_TOKEN": "runtime-token-value", "ACTIONS_RUNTIME_URL": "https://results.invalid/",
                "ACTIONS_RESULTS_URL": "https://results.invalid/", "ACTIONS_CACHE_URL": "https://cache.invalid/",
                "ACTIONS_ID_TOKEN_REQUEST_TOKEN": "oidc-token-value",
                "ACTIONS_ID_TOKEN_REQUEST_URL": "https://oidc.invalid/", "GITHUB_TOKEN": "github-token-value",
                "GH_TOKEN": "gh-token-value"})
    yield {"base": base, "home": runner_home, "runner": runner_dir, "work": work, "temp": temp,
           "checkout": checkout, "env": env}
    shutil.rmtree(base, ignore_errors=True)


def _snapshot(root: Path, skip: tuple[Path, ...]) -> dict[str, bytes]:
    """Every file and folder under root (but the skipped ones) with its content."""
    found = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if Path(dirpath, d) not in skip]
        found[dirpath] = b""
        for name in filenames:
            path = Path(dirpath, name)
            found[str(path)] = path.read_bytes() if not path.is_symlink() else b"link"
    return found


def _in_sandbox(gpu_wf, layout: dict, tmp_path: Path, commands: str, env: dict[str, str] | None = None):
    """The workflow's sandbox definition, then `commands` instead of the install and `perfgate run`, run
    as the step runs in the checkout."""
    definition, _ = _sandbox_script(gpu_wf)
    script = definition + 'mkdir -p "$RUNNER_TEMP/venv" .git/worktrees\n' + commands
    return _run_step({"run": script}, {**layout["env"], **(env or {})}, tmp_path, cwd=layout["checkout"])


def test_the_sandbox_keeps_the_pull_requests_code_from_the_runner_and_the_token(gpu_wf, runner_layout, tmp_path):
    """A stand-in for `perfgate run` that tries what pull-request code could do to get the job's token:
    write the runner's files that later steps read, read the runner's credentials, find a process outside
    (one holding a token in its environment), read the token from its own environment, leave a daemon
    running, undo the mounts. It can write its results and nothing else, and no process of it outlives
    the sandbox."""
    layout = runner_layout
    token_holder = subprocess.Popen(["sleep", "300"], env={"ACTIONS_RUNTIME_TOKEN": "outside-token-value"})
    daemon_marker = f"{os.getpid() % 1000}.{token_holder.pid}1357"
    writes = [layout["base"] / "planted", layout["env"]["GITHUB_ENV"], layout["env"]["GITHUB_PATH"], layout["temp"] / "planted",
              layout["home"] / ".bashrc", layout["runner"] / ".env", layout["work"] / "planted",
              layout["checkout"].parent / "planted", layout["work"] / "_tool" / "planted",
              layout["checkout"] / ".git" / "config", layout["checkout"] / ".git" / "hooks" / "post-checkout"]
    reads = [layout["runner"] / ".credentials", layout["home"] / ".ssh" / "id_ed25519",
             f"/proc/{token_holder.pid}/environ"]
    attacker = layout["checkout"] / "attacker.sh"
    attacker.write_text(f"""set +e
out=reports/shard-1
mkdir -p "$out"
say() {{ echo "$*" >> "$out/findings.txt"; }}
for target in {' '.join(f"'{w}'" for w in writes)}; do
  echo 'BASH_ENV=/tmp/evil' 2>/dev/null >> "$target" && say "wrote $target"
done
for target in {' '.join(f"'{r}'" for r in reads)}; do
  cat "$target" 2>/dev/null | tr '\\0' '\\n' | grep -q . && say "read $target"
done
for environ in /proc/[0-9]*/environ; do
  tr '\\0' '\\n' < "$environ" 2>/dev/null | grep -q token-value && say "token in $environ"
done
say "processes $(ls -d /proc/[0-9]* | wc -l)"
say "env $(env | cut -d= -f1 | sort | tr '\\n' ' ')"
grep -E '^(NoNewPrivs|CapEff|CapBnd):' /proc/self/status | tr -d '\\t' | while read -r line; do say "$line"; done
say "interfaces $(tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' ' | tr '\\n' ' ')"
umount -l '{layout["home"]}' 2>/dev/null && say "unmounted the home cover"
mount -o remount,rw / 2>/dev/null && say "remounted / writable"
unshare --user --mount sh -c "umount -l '{layout["home"]}' && cat '{layout["runner"]}/.credentials'" 2>/dev/null \\
  | grep -q credentials && say "read the credentials after unmounting in a namespace of its own"
git worktree add -q --detach /tmp/base HEAD 2>/dev/null && say "worktree added"
setsid sleep {daemon_marker} < /dev/null > /dev/null 2>&1 &
sleep 0.2
kill -0 $! && say "daemon started"
echo '{{"cases": []}}' > "$out/results.json" && say "wrote results"
exit 0
""")
    skip = (layout["checkout"], layout["temp"] / "venv")
    before = _snapshot(layout["base"], skip)
    try:
        proc, _ = _in_sandbox(gpu_wf, layout, tmp_path, "sandbox no-network 'bash attacker.sh'\n")
        assert proc.returncode == 0, proc.stdout + proc.stderr
        findings = (layout["checkout"] / "reports" / "shard-1" / "findings.txt").read_text().splitlines()
        wrong = [f for f in findings if f.startswith(("wrote /", "read ", "token ", "unmounted", "remounted"))]
        assert wrong == [], "\n".join(findings)
        assert {"wrote results", "daemon started", "worktree added", "NoNewPrivs:1", "CapEff:0000000000000000",
                "CapBnd:0000000000000000", "interfaces lo "} <= set(findings), findings
        processes = int(next(f for f in findings if f.startswith("processes ")).split()[1])
        assert processes < 10, findings  # the sandbox's own, not the machine's
        names = set(next(f for f in findings if f.startswith("env ")).split()[1:])
        assert names.isdisjoint(RUNNER_SECRETS), names
        assert "HOME" in names and "PATH" in names
        # nothing outside the checkout changed: the runner's files, its home, the work folder
        assert _snapshot(layout["base"], skip) == before
        assert "BASH_ENV" not in (layout["checkout"] / ".git" / "config").read_text()
        assert json.loads((layout["checkout"] / "reports" / "shard-1" / "results.json").read_text()) == {"cases": []}
        assert token_holder.poll() is None  # the process outside was never reached
        # the daemon ended with the sandbox: no process anywhere runs it
        for _ in range(50):
            alive = [p for p in Path("/proc").glob("[0-9]*") if _cmdline(p).endswith(f"sleep {daemon_marker}")]
            if not alive:
                break
            time.sleep(0.1)
        assert alive == []
    finally:
        token_holder.kill()
        token_holder.wait()


def _cmdline(proc_dir: Path) -> str:
    try:
        return (proc_dir / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def test_the_install_sandbox_has_the_network_namespace_of_the_runner(gpu_wf, runner_layout, tmp_path):
    """`network` keeps the runner's network (the install downloads packages); everything else is the same."""
    proc, _ = _in_sandbox(gpu_wf, runner_layout, tmp_path,
                          "sandbox network 'readlink /proc/self/ns/net > ns; grep -c . /proc/net/dev > count'\n")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (runner_layout["checkout"] / "ns").read_text() == os.readlink("/proc/self/ns/net") + "\n"


@pytest.mark.parametrize("broken", ["unshare", "mount"])
def test_the_sandbox_fails_closed_with_one_line(gpu_wf, runner_layout, tmp_path, broken):
    """A runner where the namespaces cannot be made (no unprivileged user namespaces, AppArmor's
    restriction) or a mount fails: the step fails with one line and the command never runs."""
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    fake = fake_bin / broken
    fake.write_text(f"#!/bin/sh\necho '{broken}: Operation not permitted' >&2\nexit 1\n")
    fake.chmod(0o755)
    path = f"{fake_bin}{os.pathsep}{os.environ['PATH']}"
    proc, _ = _in_sandbox(gpu_wf, runner_layout, tmp_path, "sandbox no-network 'touch ran'\n", env={"PATH": path})
    assert proc.returncode == 125, proc.stdout + proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("::error::")]
    assert len(errors) == 1 and errors[0].startswith("::error::perfgate sandbox: "), proc.stderr
    assert "the pull request's code did not run" in errors[0]
    assert not (runner_layout["checkout"] / "ran").exists()


@pytest.mark.parametrize("plant, uploads", [
    ("echo '{}' > reports/shard-1/results.json && mkdir reports/shard-1/tb && echo t > reports/shard-1/tb/x", True),
    ("ln -s \"$HOME/.credentials\" reports/shard-1/traces", False),
    ("ln -s / reports/shard-1/tb", False),
    ("mkdir -p elsewhere/shard-1 && rmdir reports/shard-1 reports && ln -s elsewhere reports", False),
    ("mkfifo reports/shard-1/pipe", False),
    ("rmdir reports/shard-1", False),
])
def test_the_upload_gets_a_copy_of_plain_files_only(gpu_wf, tmp_path, plant, uploads):
    """The upload runs outside the sandbox and follows symbolic links. A step that runs no code of the pull
    request copies the shard's folder (in the copy of the checkout the pull request's code ran in) and
    succeeds, which is what lets the upload run, only for plain files and folders; the upload reads that
    copy. Its message names no file of the folder."""
    step = _step(gpu_wf["jobs"]["gpu"], COPY_STEP)
    temp = tmp_path / "temp"
    (temp / "pr" / "reports" / "shard-1").mkdir(parents=True)
    subprocess.run(["bash", "-c", plant], cwd=temp / "pr", check=True)
    proc, outputs = _run_step(step, {"RUNNER_TEMP": str(temp), "SHARD": "1"}, tmp_path)
    copy = temp / "perfgate-upload" / "shard-1"
    assert outputs == {}
    if uploads:
        assert proc.returncode == 0, proc.stdout + proc.stderr
        kinds = {p.relative_to(copy).as_posix(): p.is_file() for p in copy.rglob("*") if not p.is_symlink()}
        assert kinds == {"results.json": True, "tb": False, "tb/x": True}
    else:
        assert proc.returncode == 1, proc.stdout + proc.stderr
        assert "::error::reports/shard-1 " in proc.stdout and "it is not uploaded" in proc.stdout
        assert not (temp / "perfgate-upload").exists()


def _fake_runner_python(layout: dict, attack: str) -> Path:
    """A stand-in for the runner's Python, outside the folders the sandbox hides: `-m venv DIR` makes
    DIR/bin/python, a copy of itself; `-m perfgate run` (the workloads' import, in the sandbox) runs
    ``attack`` in the checkout it is given, then writes a results.json."""
    python = layout["base"] / "bin" / "python3"
    python.parent.mkdir()
    python.write_text(f"""#!/bin/bash
set -e
if [[ "$1 $2" == "-m venv" ]]; then mkdir -p "${{@: -1}}/bin"; cp "$0" "${{@: -1}}/bin/python"; exit 0; fi
if [[ "$1 $2" == "-m perfgate" ]]; then
  mkdir -p "reports/shard-$SHARD"
  {attack}
  echo '{{"cases": []}}' > "reports/shard-$SHARD/results.json"
fi
exit 0
""")
    python.chmod(0o755)
    return python


# The checkout action's post step (actions/checkout v4.2.2, src/git-auth-helper.ts): run in the checkout,
# outside any sandbox, with the job's Actions token in its environment.
CHECKOUT_POST_STEP = ["git", "submodule", "foreach", "--recursive",
                      "sh -c \"git config --local --name-only --get-regexp 'http\\.https\\:\\/\\/github\\.com\\/\\.extraheader' "
                      "&& git config --local --unset-all 'http.https://github.com/.extraheader' || :\""]


def test_the_pull_requests_code_leaves_no_tree_where_git_runs_later(gpu_wf, runner_layout, tmp_path):
    """The measuring step, all of it, on a runner's layout whose checkout has a submodule (a gitlink and
    its .gitmodules): the stand-in for `perfgate run` makes a repository in the submodule's folder with
    core.fsmonitor set to a command, as pull-request code in a build hook or a workload import could. The
    sandbox wrote the checkout, where the checkout action's post step later runs `git submodule foreach`
    outside it: the command ran there, with the job's token. Now the pull request's code runs on a copy:
    the checkout is as it was, and the post step runs nothing. And the job's GIT_CONFIG_* alone stops the
    command even in the tree the pull request's code wrote."""
    layout = runner_layout
    checkout = layout["checkout"]
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"]
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=checkout, capture_output=True, text=True,
                          check=True).stdout.strip()
    (checkout / ".gitmodules").write_text('[submodule "vendor"]\n\tpath = vendor\n\turl = https://example.invalid/v\n')
    subprocess.run(["git", "update-index", "--add", "--cacheinfo", f"160000,{head},vendor"], cwd=checkout, check=True)
    subprocess.run(["git", "add", ".gitmodules"], cwd=checkout, check=True)
    subprocess.run([*git, "commit", "-q", "-m", "a submodule"], cwd=checkout, check=True)
    (checkout / "vendor").mkdir()  # what a checkout without submodules leaves: an empty folder
    marker = layout["base"] / "fsmonitor-ran"
    attack = (f"git init -q vendor && git -C vendor config core.fsmonitor 'echo ran >> {marker}; false'\n"
              f"  git config core.fsmonitor 'echo ran >> {marker}; false' || true")
    python = _fake_runner_python(layout, attack)
    before = _snapshot(checkout, ())
    step = _step(gpu_wf["jobs"]["gpu"], SANDBOX_STEP)
    env = {**layout["env"], "PERFGATE_RUNNER_PYTHON": str(python), "BASE_SHA": head}
    proc, _ = _run_step({"run": step["run"]}, env, tmp_path, cwd=checkout)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert _snapshot(checkout, ()) == before
    outside = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    post = subprocess.run(CHECKOUT_POST_STEP, cwd=checkout, env=outside, capture_output=True, text=True, timeout=60)
    assert post.returncode == 0, post.stderr
    assert not marker.exists()
    copy = layout["temp"] / "pr"
    assert (copy / "reports" / "shard-1" / "results.json").is_file()
    assert (copy / "vendor" / ".git").is_dir()  # the attack ran, in the copy
    # the attack is real: the post step, run in the tree the pull request's code wrote, runs its command ...
    subprocess.run(CHECKOUT_POST_STEP, cwd=copy, env=outside, capture_output=True, timeout=60)
    assert marker.exists()
    marker.unlink()
    # ... and not with the job's git configuration
    job_env = {k: str(v) for k, v in gpu_wf["jobs"]["gpu"]["env"].items() if k.startswith("GIT_CONFIG_")}
    assert {job_env[f"GIT_CONFIG_KEY_{i}"]: job_env[f"GIT_CONFIG_VALUE_{i}"]
            for i in range(int(job_env["GIT_CONFIG_COUNT"]))} == {"core.fsmonitor": "false",
                                                                  "core.hooksPath": "/dev/null",
                                                                  "safe.bareRepository": "explicit"}
    subprocess.run(CHECKOUT_POST_STEP, cwd=copy, env={**outside, **job_env}, capture_output=True, timeout=60)
    subprocess.run(["git", "status", "--short"], cwd=copy / "vendor", env={**outside, **job_env},
                   capture_output=True, timeout=60)
    assert not marker.exists()


def _runner_reads(proc: subprocess.CompletedProcess) -> list[str]:
    """The lines GitHub's runner reads from a step's output: split at a newline or a carriage return,
    leading whitespace trimmed."""
    return [line.lstrip() for line in re.split(r"\r\n|\r|\n", proc.stdout + "\n" + proc.stderr)]


def test_nothing_the_sandbox_prints_is_a_workflow_command(gpu_wf, runner_layout, tmp_path):
    """The pull request's code prints workflow commands on stdout and stderr: `::set-output`, which set the
    step output that gated the upload, `::add-mask::`, `::stop-commands::`, `::error::`, the legacy `##[`
    anywhere in a line, one hidden after a carriage return. The runner reads every line of it as data: each
    is prefixed, a carriage return starts a new prefixed line, `##[` is broken up."""
    layout = runner_layout
    commands = ["::set-output name=upload::yes", "  ::add-mask::runtime-token-value", "::stop-commands::tok",
                "::error file=a.py::forged", "progress ##[error]legacy", "50%\r::warning::after a carriage return"]
    printed = "\n".join(f"printf '%b\\n' '{c}'; printf '%b\\n' '{c}' >&2" for c in commands)
    python = _fake_runner_python(layout, printed)
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=layout["checkout"], capture_output=True, text=True,
                          check=True).stdout.strip()
    step = _step(gpu_wf["jobs"]["gpu"], SANDBOX_STEP)
    env = {**layout["env"], "PERFGATE_RUNNER_PYTHON": str(python), "BASE_SHA": head}
    proc, _ = _run_step({"run": step["run"]}, env, tmp_path, cwd=layout["checkout"])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = _runner_reads(proc)
    assert [line for line in lines if line.startswith("::") or "##[" in line] == []
    assert lines.count("| ::set-output name=upload::yes") == 2 and lines.count("| ::warning::after a carriage return") == 2
    assert lines.count("| progress ## [error]legacy") == 2
    assert Path(layout["env"]["GITHUB_OUTPUT"]).read_text() == ""


def test_the_command_in_the_sandbox_has_only_the_filtered_stdout_and_stderr(gpu_wf, runner_layout, tmp_path):
    """The sandbox's own refusal is written on fd 3, the step's unfiltered stderr (tested with a broken
    `mount` above); the pull request's code never gets that descriptor, and what it prints is filtered."""
    proc, _ = _in_sandbox(gpu_wf, runner_layout, tmp_path,
                          "sandbox no-network 'ls /proc/$$/fd > fds; echo \"::error::forged\" >&2'\n")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert sorted((runner_layout["checkout"] / "fds").read_text().split()) == ["0", "1", "2"]
    assert [line for line in _runner_reads(proc) if line.startswith("::")] == []
    assert "| ::error::forged" in _runner_reads(proc)


def test_the_sandbox_hides_the_runners_own_folder_found_from_its_processes(gpu_wf, runner_layout, tmp_path):
    """A runner installed outside its user's home (/opt/actions-runner, say): its folder, with the
    runner's credentials, is found from the step's ancestor `Runner.Worker` and hidden all the same."""
    layout = runner_layout
    other_home = layout["base"] / "other-home"
    other_home.mkdir()
    worker = layout["runner"] / "bin" / "Runner.Worker"
    worker.parent.mkdir()
    shutil.copy(shutil.which("bash"), worker)
    definition, _ = _sandbox_script(gpu_wf)
    script = tmp_path / "step.sh"
    script.write_text(definition + 'mkdir -p "$RUNNER_TEMP/venv" .git/worktrees\n'
                      f"sandbox no-network 'cat {layout['runner']}/.credentials > seen || true'\n")
    env = {**layout["env"], "HOME": str(other_home), "PATH": os.environ["PATH"]}
    proc = subprocess.run([str(worker), "--noprofile", "--norc", "-c", f'bash -eo pipefail "{script}"; exit $?'],
                          env=env, cwd=layout["checkout"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (layout["checkout"] / "seen").read_text() == ""


def test_the_sandbox_hides_the_sockets_in_run_but_nvidias(gpu_wf, runner_layout, tmp_path):
    """A UNIX socket answers connect() on a read-only mount: a runner user in the docker group is root through
    /var/run/docker.sock, and /run holds the system bus's and databases' sockets. The sandbox covers /run
    and /var/run, the install's (with the host's network) included, and keeps the NVIDIA persistence
    daemon's socket folder (and the file /etc/resolv.conf points to, when it lies in /run)."""
    run = Path("/run")
    if not os.access(run, os.W_OK):
        pytest.skip("/run is not writable here: no host socket can be planted in it")
    private = next((p for p in ("/tmp", "/var/tmp", "/dev/shm", "/run") if sys.executable.startswith(p + "/")), None)
    if private:
        pytest.skip(f"this Python ({sys.executable}) lies under {private}, which the sandbox replaces: the probe "
                    "could not run inside it")
    host = Path(tempfile.mkdtemp(prefix="perfgate-test-sockets-", dir=run))
    nvidia = run / "nvidia-persistenced"
    made_nvidia = not nvidia.exists()
    nvidia.mkdir(exist_ok=True)
    sockets = [host / "docker.sock", nvidia / f"perfgate-test-{os.getpid()}.sock"]
    servers = []
    try:
        for path in sockets:
            server = socket.socket(socket.AF_UNIX)
            server.bind(str(path))
            server.listen()
            servers.append(server)
        (runner_layout["checkout"] / "probe.py").write_text(
            "import socket, sys\n"
            "for path in sys.argv[1:]:\n"
            "    try:\n"
            "        socket.socket(socket.AF_UNIX).connect(path)\n"
            "        print('reached', path)\n"
            "    except OSError:\n"
            "        print('not reached', path)\n")
        targets = [str(sockets[0]), f"/var/run/{host.name}/docker.sock", str(sockets[1])]
        proc, _ = _in_sandbox(gpu_wf, runner_layout, tmp_path,
                              f"sandbox network '{sys.executable} probe.py {' '.join(targets)} > seen; ls -A /run > run'\n")
        assert proc.returncode == 0, proc.stdout + proc.stderr
        seen = (runner_layout["checkout"] / "seen").read_text().splitlines()
        assert seen == [f"not reached {targets[0]}", f"not reached {targets[1]}", f"reached {targets[2]}"]
        resolv = os.path.realpath("/etc/resolv.conf")
        kept = {"nvidia-persistenced"} | ({resolv.split("/")[2]} if resolv.startswith("/run/") else set())
        listed = set((runner_layout["checkout"] / "run").read_text().split())
        assert kept <= listed <= kept | {"mount"}, listed  # mount: libmount's own record of the sandbox's mounts
    finally:
        for server in servers:
            server.close()
        shutil.rmtree(host, ignore_errors=True)
        sockets[1].unlink(missing_ok=True)
        if made_nvidia:
            nvidia.rmdir()


# ---------------------------------------------------------------- change-aware selection (docs/ci.md)

def _list_files(gpu_wf, fake_gh, tmp_path, pages, changed_files, live_head=HEAD_SHA):
    answer, _, env = fake_gh
    answer("repos/org/perfgate/pulls/7/files", pages)
    answer("repos/org/perfgate/pulls/7", {"head": {"sha": live_head}, "changed_files": changed_files})
    step = _step(gpu_wf["jobs"]["approve"], "list the files the pull request changes")
    return _run_step(step, {**env, "REPO": "org/perfgate", "PR_NUMBER": "7", "HEAD_SHA": HEAD_SHA, "GH_TOKEN": "x"},
                     tmp_path)


def test_approve_lists_the_pull_requests_files_for_the_judge_as_one_line_of_json(gpu_wf, fake_gh, tmp_path):
    pages = [[{"status": "modified", "filename": "workloads/a.py", "sha": "1", "patch": "..."}],
             [{"status": "renamed", "filename": "x\necho=evil", "previous_filename": "y.py"}]]
    proc, out = _list_files(gpu_wf, fake_gh, tmp_path, pages, 2)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert json.loads(out["changes"]) == [
        {"status": "modified", "filename": "workloads/a.py", "previous_filename": None},
        {"status": "renamed", "filename": "x\necho=evil", "previous_filename": "y.py"}]
    assert "echo" not in out  # a newline in a file name set no output of its own
    assert gpu_wf["jobs"]["approve"]["outputs"]["changes"] == "${{ steps.files.outputs.changes }}"


def test_an_incomplete_list_leaves_the_judge_none_and_a_moved_head_is_refused(gpu_wf, fake_gh, tmp_path):
    proc, out = _list_files(gpu_wf, fake_gh, tmp_path, [[{"status": "added", "filename": "a"}]], 3001)
    assert proc.returncode == 0 and out["changes"] == ""
    assert "GitHub listed 1 of the 3001 files the pull request changes: every case runs" in proc.stdout
    proc, _ = _list_files(gpu_wf, fake_gh, tmp_path, [[]], 0, live_head="f" * 40)
    assert proc.returncode == 1 and "the head moved" in proc.stdout


def test_shards_measure_what_changed_and_the_base_judges_which_skips_stand(gpu_wf):
    assert gpu_wf["env"]["PERFGATE_ALL"] == (
        "${{ contains(github.event.pull_request.labels.*.name, 'perf-gate-all') && '1' || '' }}")
    run = _step(gpu_wf["jobs"]["gpu"], "pr suite, shard")["run"]
    assert '--changed-since "$BASE_SHA" ${PERFGATE_ALL:+--all}' in run
    assert "PERFGATE_ALL SHARD BASE_SHA; do" in run  # the label reaches the sandbox
    gate = _step(gpu_wf["jobs"]["merge"], "merge shards and gate")
    assert gate["env"]["CHANGES"] == "${{ needs.approve.outputs.changes }}"
    assert 'selection=(--changed-since "$BASE_SHA" --all)' in gate["run"]
    assert 'if [[ -n "$CHANGES" && -z "$PERFGATE_ALL" ]]; then' in gate["run"]
    assert re.search(r'--expect-suite pr \\\n\s*"\$\{selection\[@\]\}"\n', gate["run"])
