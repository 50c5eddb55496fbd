"""`perfgate report` end to end: the real CLI in a subprocess on the fixed results file."""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path

import pandas as pd
import pytest
from conftest import run_cli

# slow: runs perfgate report in subprocesses (the fast loop, pytest -m "not slow", leaves them to CI)
pytestmark = pytest.mark.slow

DATA = Path(__file__).parent / "data" / "reports"


def _results(tmp_path: Path) -> Path:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    shutil.copy(DATA / "current.json", run_dir / "results.json")
    return run_dir


def test_report_writes_every_format_next_to_the_results(tmp_path):
    run_dir = _results(tmp_path)
    proc = run_cli("report", str(run_dir / "results.json"), "--format", "html,md,junit,csv,json")
    assert proc.returncode == 0, proc.stderr
    for name in ("report.html", "summary.md", "junit.xml", "report.csv", "report.json"):
        assert (run_dir / name).stat().st_size > 0, name
        assert f"wrote {run_dir / name}" in proc.stdout
    assert "NOT COMPARED: 12 case(s) measured (7 ok, 2 skipped, 3 failed)" in proc.stdout
    html = (run_dir / "report.html").read_text()
    assert f"perfgate tensorboard {run_dir.resolve()}" in html
    table = pd.read_csv(run_dir / "report.csv")
    assert len(table) == 12 and list(table.columns[:6]) == ["key", "workload", "size", "toggles", "device", "status"]
    # the CPU default run-to-run term (6%) leaves compile's 1.31x [1.05, 1.64] neutral; channels-last 0.57x is avoided
    assert table.loc[table.key == "operator_rollout/smoke/channels-last/cpu", "recommendation"].item() == "avoid"


def test_report_to_another_folder_with_default_formats(tmp_path):
    run_dir = _results(tmp_path)
    proc = run_cli("report", str(run_dir), "--out", str(tmp_path / "out"))
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["junit.xml", "report.html", "summary.md"]


def test_bad_input_is_one_line_and_exit_2(tmp_path):
    run_dir = _results(tmp_path)
    proc = run_cli("report", str(run_dir), "--format", "html,pdf")
    assert proc.returncode == 2
    assert proc.stderr.strip() == ("perfgate: error: unknown report format 'pdf'; "
                                   "valid: html, md, junit, csv, json")
    (run_dir / "results.json").write_text("{not json")
    proc = run_cli("report", str(run_dir))
    assert proc.returncode == 2 and "not valid JSON" in proc.stderr and "Traceback" not in proc.stderr


def test_against_results_needs_the_comparison_module(tmp_path):
    run_dir = _results(tmp_path)
    base = tmp_path / "base.json"
    shutil.copy(DATA / "baseline.json", base)
    proc = run_cli("report", str(run_dir), "--against-results", str(base))
    if importlib.util.find_spec("perfgate.judging.compare") is None:
        assert proc.returncode == 2
        assert "--against-results needs perfgate.judging.compare" in proc.stderr and "Traceback" not in proc.stderr
    else:
        assert proc.returncode == 0, proc.stderr
        assert "regression" in (run_dir / "summary.md").read_text()


def test_re_rendering_a_compared_run_keeps_its_verdicts(tmp_path):
    """`perfgate report RUN` with no --baseline re-renders a gated or compared run with the verdicts in its
    comparison.json: it once rewrote the run's own summary.md and report.html as an uncompared run."""
    run_dir = _results(tmp_path)
    base = tmp_path / "base.json"
    shutil.copy(DATA / "baseline.json", base)
    compared = run_cli("compare", str(run_dir), str(base))
    assert compared.returncode == 0 and (run_dir / "comparison.json").is_file(), compared.stderr
    # compare rewrote the run's reports with its verdicts, as `run --gate` does: they agree with comparison.json
    assert "FAIL: " in (run_dir / "summary.md").read_text() and "regression" in (run_dir / "report.html").read_text()
    proc = run_cli("report", str(run_dir / "results.json"), "--format", "md,json")
    assert proc.returncode == 0, proc.stderr
    assert "FAIL: " in proc.stdout and "NOT COMPARED" not in proc.stdout
    summary = (run_dir / "summary.md").read_text()
    assert "FAIL: " in summary and "### Regressions" in summary


def test_an_environment_difference_that_is_not_a_pair_is_bad_input(tmp_path):
    """comparison.json is untrusted: an environment_diff entry other than [baseline, this run] made report.html
    fail with "unexpected UndefinedError ... a perfgate bug" and exit 3."""
    run_dir = _results(tmp_path)
    verdict = {"case_key": "operator_rollout/smoke/compile/cpu", "metric": "step_time", "kind": "regression"}
    for bad in (["2.12.0"], [], "2.12.0 -> 2.13.0", ["a", "b", "c"]):
        (run_dir / "comparison.json").write_text(json.dumps({"verdicts": [verdict], "environment_diff": {"torch": bad}}))
        proc = run_cli("report", str(run_dir), "--format", "html")
        assert proc.returncode == 2, proc.stderr
        assert proc.stderr.strip().splitlines() == [
            f"perfgate: error: {run_dir / 'comparison.json'}: environment_diff.torch must be a [baseline, this run] "
            f"pair, got {ascii(bad)}"]
    pair = {"torch": ["2.12.0", "2.13.0"], "$TORCHINDUCTOR_MAX_AUTOTUNE": [None, "1"]}
    (run_dir / "comparison.json").write_text(json.dumps({"verdicts": [verdict], "environment_diff": pair}))
    assert run_cli("report", str(run_dir), "--format", "html").returncode == 0
    html = (run_dir / "report.html").read_text()
    assert '<td class="mono">$TORCHINDUCTOR_MAX_AUTOTUNE</td><td class="mono">none</td><td class="mono">1</td>' in html
