"""`perfgate bisect`'s path from GOOD to BAD (bisect.commit_range) on small synthetic git repositories with
merges: no workers, no perfgate runs (tests/test_history_bisect.py measures a real linear one)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from perfgate.history import bisect as bisect_mod
from perfgate.model.config import ConfigError


class Repo:
    """A repository whose commits get names and committer times of the test's choosing."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.names: dict[str, str] = {}  # name -> hash
        self.clock = 1_700_000_000
        path.mkdir()
        self.git("init", "-q", "-b", "main")

    def git(self, *args: str, at: int | None = None) -> str:
        env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com", "GIT_COMMITTER_NAME": "t",
               "GIT_COMMITTER_EMAIL": "t@example.com"}
        if at is not None:
            env["GIT_AUTHOR_DATE"] = env["GIT_COMMITTER_DATE"] = f"@{at} +0000"
        return subprocess.run(["git", *args], cwd=self.path, env=env, capture_output=True, text=True, check=True,
                              timeout=60).stdout.strip()

    def commit(self, name: str, at: int | None = None) -> str:
        """A commit named ``name`` on the checked-out branch (``at``: its time, default the next tick)."""
        self.clock += 60
        (self.path / f"{name}.txt").write_text(name)
        self.git("add", "-A")
        self.git("commit", "-q", "-m", name, at=self.clock if at is None else at)
        self.names[name] = self.git("rev-parse", "HEAD")
        return self.names[name]

    def merge(self, name: str, branch: str, at: int | None = None) -> str:
        self.clock += 60
        self.git("merge", "-q", "--no-ff", "-m", name, branch, at=self.clock if at is None else at)
        self.names[name] = self.git("rev-parse", "HEAD")
        return self.names[name]

    def named(self, hashes: list[str]) -> list[str]:
        by_hash = {h: n for n, h in self.names.items()}
        return [by_hash[h] for h in hashes]

    def parents(self, commit: str) -> list[str]:
        return self.git("rev-list", "--parents", "-n", "1", commit).split()[1:]


def assert_a_path(repo: Repo, commits: list[str]) -> None:
    """Each commit of the range is a child of the one before it: every commit measured holds all the ones
    before it, which is what halving the range assumes."""
    for parent, child in zip(commits, commits[1:], strict=False):
        assert parent in repo.parents(child), (repo.named([parent]), repo.named([child]))


def test_a_merged_side_branch_older_than_good_is_not_bisected_into(tmp_path: Path) -> None:
    """GOOD on main; a side branch that forked before GOOD is merged between GOOD and BAD: the path is
    main's first-parent line (the merge is one step of it), never the side branch's commits, which lack
    GOOD's changes and would read as 'before the step' or after it for reasons of their own."""
    repo = Repo(tmp_path / "r")
    repo.commit("base")
    repo.git("checkout", "-q", "-b", "side")
    repo.commit("side1")
    repo.commit("side2")
    repo.git("checkout", "-q", "main")
    repo.commit("good")
    repo.commit("main1")
    repo.merge("merge-side", "side")
    repo.commit("bad")
    commits = bisect_mod.commit_range(repo.path, repo.names["good"], repo.names["bad"])
    assert repo.named(commits) == ["good", "main1", "merge-side", "bad"]
    assert_a_path(repo, commits)


def test_good_on_a_merged_branch_gives_a_path_not_a_list_by_date(tmp_path: Path) -> None:
    """GOOD on a side branch from which two branches grew and were merged into main one after the other.
    Every commit after GOOD by date was bisected as if it were one line: t1 (without s2) came between s2
    and the merge of s2, so a step made by s2 read as 'before' at t1 and was blamed on the merge, with
    t1's measurement shown as its parent's. Now the path is first parents, and at the merge that brought
    GOOD in, the parent that leads to GOOD."""
    repo = Repo(tmp_path / "r")
    repo.commit("base")
    repo.git("checkout", "-q", "-b", "s")
    repo.commit("good")
    repo.git("checkout", "-q", "-b", "t")
    repo.git("checkout", "-q", "s")
    repo.commit("s2")
    repo.git("checkout", "-q", "t")
    repo.commit("t1")
    repo.git("checkout", "-q", "main")
    repo.commit("p1")
    repo.merge("merge-s", "s")
    repo.merge("merge-t", "t")
    repo.commit("bad")
    commits = bisect_mod.commit_range(repo.path, repo.names["good"], repo.names["bad"])
    assert repo.named(commits) == ["good", "s2", "merge-s", "merge-t", "bad"]
    assert_a_path(repo, commits)


def test_refusals_are_unchanged(tmp_path: Path) -> None:
    repo = Repo(tmp_path / "r")
    repo.commit("a")
    repo.commit("b")
    with pytest.raises(ConfigError, match="not an ancestor"):
        bisect_mod.commit_range(repo.path, repo.names["b"], repo.names["a"])
    with pytest.raises(ConfigError, match="same commit"):
        bisect_mod.commit_range(repo.path, repo.names["a"], repo.names["a"])
    with pytest.raises(ConfigError, match="not a commit"):
        bisect_mod.commit_range(repo.path, "nope", repo.names["a"])
    assert repo.named(bisect_mod.commit_range(repo.path, repo.names["a"], repo.names["b"])) == ["a", "b"]


def test_a_merge_named_as_the_first_commit_says_what_it_merged(tmp_path: Path) -> None:
    """A merge on the first-parent path is one step of it: when the step comes with the merged branch, the
    merge is named, and the report says that it is a merge, what it brought in (unmeasured) and how to bisect
    inside that branch. It read as an ordinary commit whose own change made the step."""
    from perfgate.history.bisect import BisectResult, Measurement

    repo = Repo(tmp_path / "r")
    repo.commit("base")
    repo.git("checkout", "-q", "-b", "side")
    repo.commit("side1")
    repo.git("checkout", "-q", "main")
    repo.commit("good")
    repo.merge("merge-side", "side")
    repo.commit("bad")
    m = Measurement("x", 1.2, 1.1, 1.3, 0.01, 0.012, 1.0)
    result = BisectResult(first_bad=repo.names["merge-side"], before=None, after=m, step=m, measurements=[m],
                          commits_in_range=2, path_parent=repo.names["good"], case_key="w/smoke/eager/cpu")
    text = "\n".join(bisect_mod.report_lines(result, repo.path))
    assert f"{repo.names['merge-side'][:12]} is a merge" in text
    assert f"merged {repo.names['side1'][:7]}" in text and "side1" in text
    assert f"perfgate bisect {repo.names['base'][:12]} {repo.names['side1'][:12]} -w w/smoke/eager/cpu" in text
    ordinary = BisectResult(first_bad=repo.names["bad"], before=None, after=m, step=m, measurements=[m],
                            commits_in_range=2, path_parent=repo.names["merge-side"])
    assert "merge" not in "\n".join(bisect_mod.report_lines(ordinary, repo.path)).replace("merge-side", "")


def test_skipped_commits_are_preceded_by_the_commit_before_them_on_the_path(tmp_path: Path) -> None:
    """When skipped commits right before the step are named as candidates, the 'last commit before them' line
    named the first candidate's first parent (first^): where the path left a merge by its second parent
    (GOOD on a merged branch), that is a main-line commit never measured, shown with GOOD..s2's ratio."""
    from perfgate.history.bisect import BisectResult, Measurement

    repo = Repo(tmp_path / "r")
    repo.commit("base")
    repo.git("checkout", "-q", "-b", "s")
    repo.commit("good")
    repo.commit("s2")
    repo.git("checkout", "-q", "main")
    repo.commit("p1")
    repo.merge("merge-s", "s")
    repo.commit("after")
    repo.commit("bad")
    commits = bisect_mod.commit_range(repo.path, repo.names["good"], repo.names["bad"])
    assert repo.named(commits) == ["good", "s2", "merge-s", "after", "bad"]
    m = Measurement("x", 1.2, 1.1, 1.3, 0.01, 0.012, 1.0)
    before = Measurement(repo.names["s2"], 1.0, 0.99, 1.01, 0.01, 0.01, 1.0)
    result = BisectResult(first_bad=repo.names["after"], before=before, after=m, step=m, measurements=[before, m],
                          commits_in_range=4, skipped=[(repo.names["merge-s"], "failed")],
                          candidates=[repo.names["merge-s"], repo.names["after"]], path_parent=repo.names["merge-s"],
                          last_before=repo.names["s2"])
    line = next(ln for ln in bisect_mod.report_lines(result, repo.path) if "last commit before them" in ln)
    assert f"({repo.names['s2'][:7]} s2)" in line and "p1" not in line
