"""perfgate/util/storage.py: atomic writes leave files with the usual umask modes, not mkstemp's 0600."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys

import pytest
from conftest import REPO, cli_env
from fixtures.synthetic import synthetic_run

from perfgate.util.storage import atomic_write_json, atomic_write_text, current_umask


def _mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


@pytest.mark.parametrize("mask, expected", [(0o022, 0o644), (0o002, 0o664), (0o077, 0o600)])
def test_an_atomic_write_gets_the_umask_mode(tmp_path, mask, expected):
    old = os.umask(mask)
    try:
        assert current_umask() == mask
        a = atomic_write_text(tmp_path / "a.txt", "x")
        b = atomic_write_json(tmp_path / "sub" / "b.json", {"k": 1})
        a.chmod(0o600)
        atomic_write_text(a, "replaced")  # a rewrite gets the umask mode again, like a fresh file
    finally:
        os.umask(old)
    assert _mode(a) == expected and _mode(b) == expected
    assert a.read_text() == "replaced" and json.loads(b.read_text()) == {"k": 1}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.txt", "sub"]  # no temporary left behind


@pytest.mark.slow
def test_reports_and_baselines_written_by_the_cli_are_world_readable_under_umask_022(tmp_path):
    project = tmp_path / "project"
    run_dir = project / "run"
    run_dir.mkdir(parents=True)
    (project / "pyproject.toml").write_text('[tool.perfgate]\nbaselines_dir = "baselines"\n')
    (run_dir / "results.json").write_text(json.dumps(synthetic_run(["rollout"], toggles=("eager",)).to_json()))
    for args in (["report", str(run_dir), "--format", "html,md,junit"], ["baseline", "update", str(run_dir)]):
        proc = subprocess.run(["sh", "-c", 'umask 022 && exec "$@"', "sh", sys.executable, "-m", "perfgate", *args],
                              cwd=project, env=cli_env(PYTHONPATH=str(REPO)), capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr
    written = [run_dir / n for n in ("report.html", "summary.md", "junit.xml")]
    written += list((project / "baselines").rglob("*.json"))
    assert len(written) == 4
    assert {p.name: oct(_mode(p)) for p in written} == {p.name: "0o644" for p in written}


def test_a_write_the_disk_refuses_is_one_line_naming_the_file_and_leaves_no_temporary(tmp_path, monkeypatch):
    from perfgate.util.storage import UnwritableError

    def full(*args, **kwargs):
        raise OSError(28, "No space left on device")

    target = atomic_write_text(tmp_path / "b.json", "old")
    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(UnwritableError, match=r"cannot write .*b\.json: No space left on device$"):
        atomic_write_text(target, "new")
    assert target.read_text() == "old" and sorted(p.name for p in tmp_path.iterdir()) == ["b.json"]


@pytest.mark.slow
def test_baseline_update_into_an_unwritable_place_is_exit_2_and_one_line(tmp_path):
    """`baseline update --baseline FILE/x.json` (a parent that is a file; a read-only or full disk alike) was
    exit 3, 'unexpected FileExistsError ... this is a perfgate bug'."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "results.json").write_text(json.dumps(synthetic_run(["operator_rollout"], toggles=("eager",)).to_json()))
    proc = subprocess.run([sys.executable, "-m", "perfgate", "baseline", "update", str(run), "--baseline",
                           str(run / "results.json" / "x.json")], capture_output=True, text=True, cwd=tmp_path,
                          env=cli_env(), timeout=120)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"perfgate: error: cannot write {run / 'results.json' / 'x.json'}: ")
    assert "unexpected" not in lines[0]
