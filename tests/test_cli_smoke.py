"""The quick start's main job, end to end: the real CLI in a subprocess, tiny settings."""

import json

import pytest
from conftest import run_cli

# slow: measures the smoke suite through the CLI (the fast loop, pytest -m "not slow", leaves them to CI)
pytestmark = pytest.mark.slow


def test_run_eager_rollout_writes_results(tmp_path):
    out = tmp_path / "run"
    proc = run_cli("run", "-w", "operator_rollout", "-t", "eager", "--samples", "3", "--out", str(out))
    assert proc.returncode == 0, proc.stderr + proc.stdout
    data = json.loads((out / "results.json").read_text())
    assert data["schema"] == "perfgate.results/2"
    (case,) = data["cases"]
    assert case["status"] == "ok"
    assert case["key"] == "operator_rollout/smoke/eager/cpu"
    # adaptive sampling (docs/gate.md): 2 processes first, more until the median is precise enough or the
    # budget (16) is spent; the count and the reason are recorded with the case
    sampling = case["metadata"]["sampling"]
    assert sampling["rule"] == "precision" and sampling["budget"]["max_processes"] == 16
    assert 2 <= len(case["processes"]) == sampling["processes"] <= 16
    assert sampling["looks"] and sampling["stopped"]
    assert "operator_rollout [smoke, cpu]" in proc.stdout
    # the reports next to results.json, rewritten after each case (exporters)
    assert f"reports: {out.resolve() / 'report.html'}" in proc.stdout
    assert "operator_rollout" in (out / "report.html").read_text()
    assert "NOT COMPARED: 1 case(s) measured (1 ok" in (out / "summary.md").read_text()
    assert 'name="eager"' in (out / "junit.xml").read_text()
