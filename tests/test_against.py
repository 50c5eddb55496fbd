"""perfgate.running.against: a SIGTERM'd `run --against` removes its worktree; stale worktrees of killed perfgates
are pruned at the next start, and a running perfgate's are left alone."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import REPO, cli_env
from fixtures.against import against_repo as _against_repo

# slow: perfgate run --against in git repositories (the fast loop, pytest -m "not slow", leaves them to CI)
from perfgate.model import config
from perfgate.running import against

# slow: perfgate run --against in git repositories (the fast loop, pytest -m "not slow", leaves them to CI)
pytestmark = pytest.mark.slow


def _worktrees(repo: Path) -> list[str]:
    out = subprocess.run(["git", "worktree", "list", "--porcelain"], cwd=repo, capture_output=True, text=True,
                         check=True).stdout
    return [line.split(" ", 1)[1] for line in out.splitlines() if line.startswith("worktree ")]


def test_sigterm_during_against_removes_the_worktree_and_its_registration(tmp_path):
    repo = _against_repo(tmp_path, remeasure=False)
    proc = subprocess.Popen([sys.executable, "-m", "perfgate", "run", "--against", "HEAD~1", "--out",
                             str(tmp_path / "ab")], cwd=repo, env=cli_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and len(_worktrees(repo)) < 2:
            time.sleep(0.05)
        (worktree,) = _worktrees(repo)[1:]
        time.sleep(0.5)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, err
    assert err.strip().splitlines()[-1] == "perfgate: error: interrupted; its worker processes were ended and any temporary worktrees removed"
    assert len(_worktrees(repo)) == 1 and not Path(worktree).parent.exists()


def test_stale_worktrees_are_pruned_and_a_running_perfgates_kept(tmp_path):
    repo = _against_repo(tmp_path, remeasure=False)
    # a perfgate killed (SIGKILL: no handler runs) while it had a worktree
    killed = subprocess.run(
        [sys.executable, "-c", "import os, signal\nfrom perfgate.running import against\nfrom perfgate.model import config\n"
         f"b = against.checkout(config.load(cwd={str(repo)!r}), 'HEAD~1')\nprint(b.path, flush=True)\n"
         "os.kill(os.getpid(), signal.SIGKILL)\n"], cwd=REPO, env=cli_env(), capture_output=True, text=True,
        timeout=120)
    stale = Path(killed.stdout.strip())
    assert killed.returncode == -signal.SIGKILL and str(stale) in _worktrees(repo)
    settings = config.load(cwd=repo)
    live = against.checkout(settings, "HEAD~1")  # starting prunes the stale one
    try:
        assert str(stale) not in _worktrees(repo) and not stale.parent.exists()
        assert str(live.path) in _worktrees(repo)
        # another perfgate starting now (bisect, run --against) leaves this running one's worktree alone
        other = subprocess.run([sys.executable, "-c", "from pathlib import Path\nfrom perfgate.running import against\n"
                                f"print(against.prune_stale_worktrees(Path({str(repo)!r})))"],
                               cwd=REPO, env=cli_env(), capture_output=True, text=True, timeout=60)
        assert other.stdout.strip() == "[]", other.stderr
        assert str(live.path) in _worktrees(repo) and (live.path / "workloads").is_dir()
    finally:
        live.close()
    assert len(_worktrees(repo)) == 1


SCALED_WORK = REPO / "tests" / "workloads" / "scaled_work.py"


def _scaled_work_repo(repo: Path, *sources: str) -> Path:
    """A git repository with one case (scaled_work, eager, one process pair) whose workload file is each of
    ``sources`` in turn, one commit each. min_time_s 0.05: one process a side is compared on its raw
    samples (a bootstrap over every head x base pair of them), and the default half second of ~0.1 ms
    steps made that comparison cost more than both workers; these tests need a verdict, not a resolution."""
    (repo / "workloads").mkdir(parents=True)
    (repo / "pyproject.toml").write_text(
        '[tool.perfgate]\nworkloads_dirs = ["workloads"]\nprocesses = 1\n'
        '[tool.perfgate.timing]\nsamples = 3\nmin_time_s = 0.05\n'
        '[tool.perfgate.suites.smoke]\nworkloads = ["scaled_work"]\ntoggles = ["eager"]\ndevice = "cpu"\n')
    (repo / ".gitignore").write_text("runs/\n")
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    for i, text in enumerate(sources):
        (repo / "workloads" / "scaled_work.py").write_text(text)
        for args in (("add", "."), ("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", f"commit {i}")):
            subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True)
    return repo


def _against(repo: Path, ref: str, run_dir: Path, env: dict[str, str], *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "perfgate", "run", "--against", ref, *extra, "--out", str(run_dir)],
                          cwd=repo, env=env, capture_output=True, text=True, timeout=600)


def test_base_workers_keep_the_users_pythonpath(tmp_path):
    """The base side's workers put the base's perfgate first and keep the rest of the user's PYTHONPATH, as
    the head's do: on the first GPU check (2026-11-26, an H200 whose packages lay on PYTHONPATH) every base
    worker failed to import pydantic, and the gate passed with the case called `fixed`. Here the workload
    imports a module found only through the user's PYTHONPATH: both sides run it and are compared."""
    deps = tmp_path / "userpkgs"
    deps.mkdir()
    (deps / "pg_userdep.py").write_text("FACTOR = 1\n")
    source = SCALED_WORK.read_text().replace("import torch\n", "import pg_userdep\nimport torch\n", 1)
    repo = _scaled_work_repo(tmp_path / "repo", source)
    env = cli_env()
    env["PYTHONPATH"] = os.pathsep.join((env["PYTHONPATH"], str(deps)))
    run_dir = repo / "runs" / "aa"
    proc = _against(repo, "HEAD", run_dir, env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (base_case,) = json.loads((run_dir / "base" / "results.json").read_text())["cases"]
    assert base_case["status"] == "ok", base_case.get("message")
    kinds = {v["metric"]: v["kind"] for v in json.loads((run_dir / "comparison.json").read_text())["verdicts"]}
    assert "step_time" in kinds and kinds.get("status") not in ("new", "fixed"), kinds


def test_the_worker_probe_fails_where_a_case_could_not_run():
    """The probe imports every perfgate module a case needs, so an environment that lacks one of their
    packages (there: pydantic, for perfgate.model.results) fails at the probe with one line, before any case."""
    code = "import sys; sys.modules['pydantic'] = None\nfrom perfgate.worker import main as worker\nworker.probe([])\n"
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=cli_env(), capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode != 0 and "pydantic" in proc.stderr.strip().splitlines()[-1], proc.stderr


def test_a_fixed_case_rests_on_a_head_that_ran_its_steps(tmp_path):
    """The base commit's step raises, the head's works: `fixed`, and the head's case holds timed samples
    (in a lockstep pair the failing base stops its partner before sampling; the head is then measured
    alone), so the report shows what the fix costs rather than an `ok` with no step time."""
    source = SCALED_WORK.read_text()
    broken = source.replace("        y = state\n", "        raise ValueError('broken at the base')\n", 1)
    assert broken != source
    repo = _scaled_work_repo(tmp_path / "repo", broken, source)
    run_dir = repo / "runs" / "fix"
    proc = _against(repo, "HEAD~1", run_dir, cli_env(), "--gate")
    # the only case is `fixed`: nothing was compared with the base, and a gate on that is no evidence (exit 3)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert proc.stderr.strip().splitlines() == [
        "perfgate: error: the gate has no evidence: none of the 1 case(s) was compared with the base (each is new "
        "to it or fixed); see the verdicts above"]
    assert "NO EVIDENCE" in (run_dir / "summary.md").read_text()
    kinds = {v["metric"]: v["kind"] for v in json.loads((run_dir / "comparison.json").read_text())["verdicts"]}
    assert kinds.get("status") == "fixed", kinds
    (head_case,) = json.loads((run_dir / "results.json").read_text())["cases"]
    assert head_case["status"] == "ok" and head_case["processes"]
    assert all(p["samples_ns"] for p in head_case["processes"]), head_case["processes"]


def test_a_base_worker_the_machine_killed_is_measured_again_before_fixed(tmp_path):
    """The base commit's worker is killed once (SIGKILL: what the OOM killer does on a loaded runner), the
    head's runs: the case ended `fixed` and the gate passed without the head's time ever judged. The pair is
    measured once more, and the second pair's step times are compared."""
    source = SCALED_WORK.read_text()
    killed_once = source.replace(
        "        y = state\n",
        "        marker = os.environ['PERFGATE_TEST_KILLED_ONCE']\n"
        "        if not os.path.exists(marker):\n"
        "            open(marker, 'w').close()\n"
        "            os.kill(os.getpid(), 9)\n"
        "        y = state\n", 1)
    assert killed_once != source
    repo = _scaled_work_repo(tmp_path / "repo", killed_once, source)
    run_dir = repo / "runs" / "killed"
    marker = tmp_path / "killed-once"
    proc = _against(repo, "HEAD~1", run_dir, cli_env(PERFGATE_TEST_KILLED_ONCE=str(marker)), "--gate")
    assert marker.exists(), proc.stdout + proc.stderr
    assert "measuring scaled_work/smoke/eager/cpu once more against HEAD~1: its base side failed (crash)" in proc.stdout
    kinds = {v["metric"]: v["kind"] for v in json.loads((run_dir / "comparison.json").read_text())["verdicts"]}
    assert "step_time" in kinds and kinds.get("status") != "fixed", kinds
    (base_case,) = json.loads((run_dir / "base" / "results.json").read_text())["cases"]
    assert base_case["status"] == "ok", base_case.get("message")


def test_a_case_the_pull_request_dropped_from_the_suite_fails_the_gate(tmp_path):
    """The head deletes a workload file the base's suite ran: the base side ran only the head's plan, so the
    case was never seen and the gate passed. REF's suite, planned from its own configuration and catalog,
    holds it: `newly-failing`, as a stored comparison of the whole suite calls it."""
    source = SCALED_WORK.read_text()
    repo = _scaled_work_repo(tmp_path / "repo", source)
    (repo / "pyproject.toml").write_text((repo / "pyproject.toml").read_text().replace(
        'workloads = ["scaled_work"]', 'workloads = ["*"]'))
    (repo / "workloads" / "gone_work.py").write_text(source.replace('name = "scaled_work"', 'name = "gone_work"'))
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qam", "two workloads"],
                   cwd=repo, check=True)
    subprocess.run(["git", "add", "."], cwd=repo, check=True)
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "gone_work"], cwd=repo,
                   check=True)
    subprocess.run(["git", "rm", "-q", "workloads/gone_work.py"], cwd=repo, check=True)
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "drop it"], cwd=repo,
                   check=True)
    run_dir = repo / "runs" / "dropped"
    proc = _against(repo, "HEAD~1", run_dir, cli_env(), "--gate")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    verdicts = json.loads((run_dir / "comparison.json").read_text())["verdicts"]
    (gone,) = [v for v in verdicts if v["case_key"] == "gone_work/smoke/eager/cpu"]
    assert gone["kind"] == "newly-failing" and "in suite 'smoke' at HEAD~1 (" in gone["rule"], gone
    assert "GATE FAILED" in proc.stdout and "gone_work/smoke/eager/cpu (newly-failing status)" in proc.stdout


def test_a_case_its_base_commit_lacks_says_so_naming_the_commit(tmp_path, monkeypatch):
    """Settling in lockstep against a baseline's commit that has no such workload said `settled: no baseline
    to compare with`: it names the commit and says the workload does not exist there. No worker runs."""
    from perfgate.gating.gate import sampler_factory
    from perfgate.model.results import CaseSpec, ProcessSamples
    from perfgate.running.plan import Catalog
    from perfgate.running.workers import ProcessOutcome

    commit = "0123456789abcdef" * 2 + "01234567"
    settings = config.load(cwd=tmp_path)
    base = against.BaseCheckout(ref=commit, commit=commit, path=tmp_path / "base", repo_top=tmp_path,
                                python_path="", workloads_dirs=(), catalog=Catalog(workloads={}, toggles=[]))
    samples = ProcessSamples(samples_ns=[1_000_000, 1_100_000, 1_050_000], process_index=0).to_json()
    calls = []

    def worker(cfg, *args, **kwargs):
        calls.append(cfg)
        return ProcessOutcome({"status": "ok", "process": {**samples, "process_index": len(calls) - 1}}, 0, 0.1)

    monkeypatch.setattr(against.workers, "run_worker", worker)
    spec = CaseSpec("newload", "smoke", ("eager",), "cpu")
    head, base_case = against.run_pair(spec, str(tmp_path / "newload.py"), base, settings, tmp_path / "run",
                                       tmp_path / "run" / "base", sampler=sampler_factory(settings, "against")(spec))
    assert base_case is None and calls
    stopped = head.metadata["sampling"]["stopped"]
    assert stopped == f"not compared: workload 'newload' does not exist at commit {commit[:12]}", stopped
    assert "no baseline" not in stopped and head.metadata["against"] in stopped
    # a named ref keeps its name, with the commit it is at
    named = against.BaseCheckout(ref="main", commit=commit, path=tmp_path, repo_top=tmp_path, python_path="",
                                 workloads_dirs=(), catalog=Catalog(workloads={}, toggles=[]))
    assert against.base_has(named, spec) == f"workload 'newload' does not exist at main ({commit[:12]})"


def test_a_dirty_head_against_its_own_commit_says_so_and_the_base_side_is_recorded_clean(tmp_path):
    """Head is the working tree, base is REF's commit as committed: with uncommitted changes the two differ
    though both name one commit. The console says so, and base/results.json recorded the head's
    `git_dirty = true` for a clean worktree (a reproduction then said the base was measured with
    uncommitted changes)."""
    source = SCALED_WORK.read_text()
    repo = _scaled_work_repo(tmp_path / "repo", source)
    (repo / "workloads" / "scaled_work.py").write_text(source + "\n# an uncommitted change\n")
    run_dir = repo / "runs" / "dirty"
    proc = _against(repo, "HEAD", run_dir, cli_env())
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "note: the head side is this working tree, with uncommitted changes" in proc.stdout
    head_env = json.loads((run_dir / "results.json").read_text())["environment"]
    base_env = json.loads((run_dir / "base" / "results.json").read_text())["environment"]
    assert head_env["git_dirty"] is True and head_env["git_commit"] == base_env["git_commit"]
    assert base_env["git_dirty"] is False and base_env["git_ref"] == "HEAD"


def test_a_workload_whose_file_fails_to_import_at_the_base_is_not_called_missing_there(tmp_path):
    """REF holds the workload's file but it fails to import there (the head fixes it): the case is `new`
    and said to be `does not exist at REF`, which was false; it now says the file failed to import there."""
    source = SCALED_WORK.read_text()
    broken = source.replace("import torch\n", "import perfgate_no_such_module\nimport torch\n", 1)
    assert broken != source
    repo = _scaled_work_repo(tmp_path / "repo", source, broken, source)
    run_dir = repo / "runs" / "broken"
    proc = _against(repo, "HEAD~1", run_dir, cli_env())
    assert proc.returncode == 0, proc.stdout + proc.stderr
    verdicts = json.loads((run_dir / "comparison.json").read_text())["verdicts"]
    assert [v["kind"] for v in verdicts if v["metric"] == "status"] == ["new"], verdicts
    (head_case,) = json.loads((run_dir / "results.json").read_text())["cases"]
    why = head_case["metadata"]["against"]
    assert why.startswith("workload 'scaled_work' could not be loaded at HEAD~1 (") and "does not exist" not in why
    assert why.endswith("its file failed to import there (ModuleNotFoundError: No module named "
                        "'perfgate_no_such_module')"), why


def test_workloads_in_a_git_submodule_are_refused_with_one_line(tmp_path):
    """`git worktree add` checks no submodule out: with the workloads in a submodule, REF's side found an
    empty folder, every case was `new` and `run --against HEAD --gate` passed having compared nothing. It is
    now exit 2 with one line, before any worktree or temporary folder exists."""
    git = ("git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "protocol.file.allow=always")
    sub = tmp_path / "wl"
    sub.mkdir()
    (sub / "scaled_work.py").write_text(SCALED_WORK.read_text())
    subprocess.run(["git", "init", "-q"], cwd=sub, check=True)
    for args in (("add", "."), ("commit", "-qm", "workloads")):
        subprocess.run([*git, *args], cwd=sub, check=True, capture_output=True)
    repo = _scaled_work_repo(tmp_path / "repo", SCALED_WORK.read_text())
    for args in (("rm", "-rq", "workloads"), ("submodule", "add", "-q", str(sub), "workloads"),
                 ("commit", "-qm", "workloads in a submodule")):
        subprocess.run([*git, *args], cwd=repo, check=True, capture_output=True)
    temp = tmp_path / "tmp"
    temp.mkdir()
    proc = _against(repo, "HEAD", repo / "runs" / "sub", cli_env(TMPDIR=str(temp)), "--gate")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.strip().splitlines() == [
        "perfgate: error: --against HEAD: the workloads dir workloads lies in the git submodule workloads at "
        f"{_head(repo)[:12]}, and a worktree of HEAD holds no submodule's files: its side would have no workloads "
        "to compare with; keep the workloads in the repository itself"], proc.stderr
    assert len(_worktrees(repo)) == 1 and not any(p.name.startswith(against.HOLDER_PREFIX) for p in temp.iterdir())


def _head(repo: Path) -> str:
    return subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True,
                          check=True).stdout.strip()
