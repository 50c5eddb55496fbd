"""The baseline store: schema versions, upgrade of old files, one-line errors naming the file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from perfgate import baselines
from perfgate.model import CaseResult, CaseSpec, ProcessSamples, RunResult, SchemaError

FIXTURES = Path(__file__).parent / "fixtures"


def test_version_1_is_upgraded_on_read():
    b = baselines.load_baseline(FIXTURES / "baseline-v1.json")
    assert b.machine_key == "test-cpu-1t" and b.suite == "smoke"
    assert b.calibration == {}
    assert b.updated_at == "2026-11-01T12:02:00+0000"
    (case,) = b.run.cases
    assert case.key == "scaled_work/smoke/eager/cpu" and len(case.processes) == 2
    assert b.to_json()["schema"] == baselines.SCHEMA


def test_round_trip_keeps_raw_samples_and_calibration(tmp_path):
    b = baselines.load_baseline(FIXTURES / "baseline-v1.json")
    b.calibration["scaled_work/smoke/eager/cpu"] = {"threshold": 0.08}
    path = baselines.write_baseline(b, tmp_path / "m" / "smoke.json")
    again = baselines.load_baseline(path)
    assert again.calibration == {"scaled_work/smoke/eager/cpu": {"threshold": 0.08}}
    assert again.run.cases[0].processes[1].samples_ns == [1020000, 1000000, 1005000]
    assert again.environment["torch"] == "2.13.0"
    assert any("scaled_work" in line for line in baselines.describe(again))


@pytest.mark.parametrize("text, message", [
    ("{not json", "baseline is not valid JSON"),
    ('{"schema": "perfgate.baseline/99", "results": {}}', "unknown baseline schema 'perfgate.baseline/99'"),
    ('["a list"]', "not a perfgate baseline"),
    ('{"schema": "perfgate.baseline/2", "results": {"schema": "perfgate.results/1", "run_id": "r", "cases": []}}',
     "baseline holds no cases"),
])
def test_bad_baselines_get_one_line_naming_the_file(tmp_path, text, message):
    path = tmp_path / "smoke.json"
    path.write_text(text)
    with pytest.raises(SchemaError, match=message) as err:
        baselines.load_baseline(path)
    assert str(path) in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize("value", [-0.01, 0.7, "2%", True])
def test_a_calibrated_run_to_run_outside_its_range_is_refused(tmp_path, value):
    """The gate widens every unpaired step-time CI by the stored run-to-run spread: a baseline file (read as
    untrusted) cannot set it to nonsense."""
    b = baselines.load_baseline(FIXTURES / "baseline-v1.json")
    b.calibration["scaled_work/smoke/eager/cpu"] = {"threshold": 0.08, "run_to_run": value}
    path = tmp_path / "smoke.json"
    path.write_text(json.dumps(b.to_json()))
    with pytest.raises(SchemaError, match="calibration.scaled_work/smoke/eager/cpu.run_to_run") as err:
        baselines.load_baseline(path)
    assert "\n" not in str(err.value)


def test_missing_file_says_how_to_make_one(tmp_path):
    with pytest.raises(SchemaError, match="perfgate baseline update"):
        baselines.load_baseline(tmp_path / "nope.json")


def test_a_baseline_lacking_the_runs_cases_is_refused():
    b = baselines.load_baseline(FIXTURES / "baseline-v1.json")
    spec = CaseSpec("other", "smoke", ("eager",), "cpu")
    run = RunResult("r", "smoke", {}, [CaseResult(spec, "ok", [ProcessSamples([1])])])
    with pytest.raises(SchemaError, match="lacks this run's cases"):
        baselines.check_covers(b, run)


def test_update_refuses_failures_and_reports_changes():
    old = baselines.load_baseline(FIXTURES / "baseline-v1.json")
    data = json.loads((FIXTURES / "baseline-v1.json").read_text())["run"]
    data["cases"][0]["processes"][0]["samples_ns"] = [2000000, 2000000, 2000000]
    data["cases"][0]["processes"][1]["samples_ns"] = [2000000, 2000000, 2000000]
    failed = dict(data["cases"][0], spec={**data["cases"][0]["spec"], "toggles": ["compile"]}, status="failed")
    data["cases"].append(failed)
    run = RunResult.from_json(data)
    with pytest.raises(SchemaError, match="1 failed case"):
        baselines.refuse_failed(run, "results.json")
    new = baselines.from_run(run, old)
    lines = "\n".join(baselines.changes(old, new))
    assert "scaled_work/smoke/eager/cpu: step time" in lines and "(+99.5%)" in lines
    assert "scaled_work/smoke/compile/cpu: added (failed)" in lines
