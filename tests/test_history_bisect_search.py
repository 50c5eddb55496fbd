"""`perfgate bisect`'s search on made-up measurements: no git, no workers (tests/test_history_bisect.py runs
the real thing on a throwaway repository)."""

from __future__ import annotations

import contextlib
from pathlib import Path
from types import SimpleNamespace

import pytest

from perfgate.history import bisect as bisect_mod
from perfgate.history.bisect import Measurement
from perfgate.running import against, workers

# what measure raises when the case fails at the measured commit (before: workers.InfrastructureError)
Unmeasurable = getattr(bisect_mod, "Unmeasurable", workers.InfrastructureError)

COMMITS = [f"{i:02d}" + "0" * 38 for i in range(17)]  # GOOD, then 16 commits up to BAD


def run_bisect(monkeypatch: pytest.MonkeyPatch, step_at: int, broken: set[int],
               measure_override=None) -> tuple[bisect_mod.BisectResult, list[str]]:  # noqa: ANN001
    """Commits from ``step_at`` on measure 1.25x against GOOD; at those in ``broken`` the case fails."""
    @contextlib.contextmanager
    def checked_out(settings, commit):  # noqa: ANN001, ANN202
        yield SimpleNamespace(commit=commit)

    def measure(spec, good, other, settings, work):  # noqa: ANN001, ANN202
        i = COMMITS.index(other.commit)
        if i in broken:
            raise Unmeasurable(f"bisect: {spec.key} failed at measured commit {other.commit[:12]}: RuntimeError")
        r = 1.25 if i >= step_at else 1.0
        return Measurement(other.commit, r, r * 0.98, r * 1.02, 0.01, 0.01 * r, 1.0)

    monkeypatch.setattr(bisect_mod, "_git", lambda root, *args: str(root))
    monkeypatch.setattr(bisect_mod, "commit_range", lambda root, good, bad: list(COMMITS))
    monkeypatch.setattr(against, "interruptible", contextlib.nullcontext)
    monkeypatch.setattr(against, "checked_out", checked_out)
    monkeypatch.setattr(against, "probe_base", lambda good, threads: None)
    monkeypatch.setattr(bisect_mod, "plan_case", lambda case, catalog: SimpleNamespace(key="w/smoke/eager/cpu"))
    monkeypatch.setattr(bisect_mod, "measure", measure_override or measure)
    lines: list[str] = []
    settings = SimpleNamespace(root=Path("."), processes=1, threads=1)
    return bisect_mod.bisect(settings, "good", "bad", None, lines.append), lines


def test_a_commit_where_the_case_fails_is_skipped_not_the_end_of_the_bisection(monkeypatch: pytest.MonkeyPatch) -> None:
    """The case crashes at commit 8 (the first middle): the bisection ended there with an error, every
    measurement lost; now commit 8 is skipped and the search goes on to name commit 11."""
    result, lines = run_bisect(monkeypatch, 11, {8})
    assert result.first_bad == COMMITS[11] and result.candidates == []
    assert result.skipped and result.skipped[0][0] == COMMITS[8]
    assert any("skipped" in ln for ln in lines)


def test_skipped_commits_right_before_the_step_are_named_as_candidates(monkeypatch: pytest.MonkeyPatch) -> None:
    result, _ = run_bisect(monkeypatch, 11, {9, 10})
    assert result.first_bad == COMMITS[11]
    assert result.candidates == COMMITS[9:12]  # 9, 10 (skipped) or 11: which, no measurement can tell
    assert result.before is not None and result.before.commit == COMMITS[8]
    text = "\n".join(bisect_mod.report_lines(result, Path(".")))
    assert "is one of 3" in text and "2 commit(s) skipped" in text


def test_without_failures_the_search_is_unchanged(monkeypatch: pytest.MonkeyPatch) -> None:
    for step_at in (1, 5, 11, 16):
        result, _ = run_bisect(monkeypatch, step_at, set())
        assert result.first_bad == COMMITS[step_at] and not result.skipped and not result.candidates
        assert len(result.measurements) <= 5


def test_a_workload_missing_at_bad_is_still_a_usage_error(monkeypatch: pytest.MonkeyPatch) -> None:
    from perfgate.model.config import ConfigError

    real = Unmeasurable

    def missing(*args, **kw):  # noqa: ANN002, ANN003, ANN202
        raise real("bisect: workload 'w' does not exist at 160000000000", missing_workload=True)

    with pytest.raises(ConfigError):
        run_bisect(monkeypatch, 11, set(), measure_override=missing)
