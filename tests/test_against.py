"""perfgate.against: a SIGTERM'd `run --against` removes its worktree; stale worktrees of killed perfgates
are pruned at the next start, and a running perfgate's are left alone."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

from conftest import REPO, cli_env
from test_gate import _against_repo

from perfgate import against, config


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
    assert err.strip().splitlines()[-1] == "perfgate: error: interrupted; temporary worktrees were removed"
    assert len(_worktrees(repo)) == 1 and not Path(worktree).parent.exists()


def test_stale_worktrees_are_pruned_and_a_running_perfgates_kept(tmp_path):
    repo = _against_repo(tmp_path, remeasure=False)
    # a perfgate killed (SIGKILL: no handler runs) while it had a worktree
    killed = subprocess.run(
        [sys.executable, "-c", "import os, signal\nfrom perfgate import against, config\n"
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
        other = subprocess.run([sys.executable, "-c", "from pathlib import Path\nfrom perfgate import against\n"
                                f"print(against.prune_stale_worktrees(Path({str(repo)!r})))"],
                               cwd=REPO, env=cli_env(), capture_output=True, text=True, timeout=60)
        assert other.stdout.strip() == "[]", other.stderr
        assert str(live.path) in _worktrees(repo) and (live.path / "workloads").is_dir()
    finally:
        live.close()
    assert len(_worktrees(repo)) == 1
