"""benchmarks/interval_coverage.py's analysis, on results whose coverage is known (no torch, no workers)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from conftest import REPO
from fixtures.synthetic import synthetic_run

sys.path.insert(0, str(REPO / "benchmarks"))
import interval_coverage  # noqa: E402


def _case(median, low, high, speedup=None, sp_low=None, sp_high=None, advice="neutral"):
    return {"median_s": median, "ci_low_s": low, "ci_high_s": high, "processes": 4, "speedup": speedup,
            "speedup_low": sp_low, "speedup_high": sp_high, "advice": advice}


def test_coverage_counts_every_ordered_pair_of_runs():
    runs = [
        {"w/eager": _case(1.00, 0.97, 1.03), "w/compile": _case(0.50, 0.49, 0.51, 2.00, 1.90, 2.10, "adopt")},
        {"w/eager": _case(1.02, 1.01, 1.03), "w/compile": _case(0.52, 0.51, 0.53, 1.96, 1.94, 1.98, "adopt")},
        {"w/eager": _case(1.10, 1.05, 1.15), "w/compile": _case(0.50, None, None, 2.20, None, None, "neutral")},
    ]
    s = interval_coverage.coverage(runs)
    # (i -> j: eager held?, compile held?) 0->1 yes, no | 0->2 no, yes | 1->0 no, no | 1->2 no, no |
    # 2->0 no, no interval | 2->1 no, no interval
    assert (s["case"]["pairs"], s["case"]["held"], s["case"]["without_interval"]) == (10, 2, 2)
    assert s["case"]["coverage"] == pytest.approx(0.2)
    # speedups: 0->1 1.96 in [1.90, 2.10] yes; 0->2 2.20 no; 1->0 2.00 no; 1->2 no; run 2 has no interval
    assert (s["speedup"]["pairs"], s["speedup"]["held"], s["speedup"]["without_interval"]) == (4, 1, 2)
    assert s["advice"] == {"pairs": 3, "changes": 2, "reversals": 0, "reversed": []}
    assert s["per_case"]["w/eager"]["case_coverage"] == pytest.approx(1 / 6)
    assert s["per_case"]["w/eager"]["speedup_pairs"] == 0  # eager has no speedup to cover


def test_an_adopt_that_turns_into_avoid_is_a_reversal():
    runs = [{"w/amp": _case(1.0, 0.9, 1.1, 1.2, 1.1, 1.3, "adopt")},
            {"w/amp": _case(1.0, 0.9, 1.1, 0.8, 0.7, 0.9, "avoid")}]
    s = interval_coverage.coverage(runs)
    assert s["advice"]["reversals"] == 1 and s["advice"]["reversed"] == [{"case": "w/amp", "runs": [0, 1]}]
    assert "reverses (adopt <-> avoid) in 1 (target: never)" in interval_coverage.report_text(s)


def test_figures_are_what_the_reports_print():
    run = synthetic_run(["rollout"], toggles=("eager", "compile"))
    got = interval_coverage.figures(run)
    eager, compile_ = run.case("rollout/smoke/eager/cpu"), run.case("rollout/smoke/compile/cpu")
    st, sp = run.step_time(compile_), run.speedup(compile_)
    assert got["rollout/smoke/compile/cpu"] == {
        "median_s": st.value, "ci_low_s": st.ci_low, "ci_high_s": st.ci_high, "processes": 2,
        "speedup": sp.value, "speedup_low": sp.low, "speedup_high": sp.high, "advice": "adopt"}
    assert got[eager.key]["speedup"] is None and got[eager.key]["advice"] == "reference"


@pytest.mark.slow
def test_the_script_analyses_results_files_and_writes_its_json(tmp_path):
    dirs = []
    for seed in range(3):
        d = tmp_path / f"run-{seed}"
        d.mkdir()
        (d / "results.json").write_text(synthetic_run(["rollout", "field"], toggles=("eager", "compile"),
                                                      seed=seed).dumps())
        dirs.append(str(d))
    out = tmp_path / "coverage.json"
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "interval_coverage.py"), "--analyze", *dirs,
                           "--out", str(out)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(out.read_text())
    assert summary["runs"] == 3 and summary["case"]["pairs"] == 3 * 2 * 4
    assert summary["speedup"]["pairs"] == 3 * 2 * 2 and set(summary["machine"]) >= {"cpus", "loadavg"}
    assert "case interval holds another run's step time" in proc.stdout


def test_fewer_than_two_runs_is_bad_input_exit_2():
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "interval_coverage.py"), "--runs", "1"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "--runs must be at least 2" in proc.stderr


def test_rescoring_with_another_term_widens_every_interval_and_leaves_the_run_alone():
    run = synthetic_run(["rollout"], toggles=("eager", "compile"))
    key = "rollout/smoke/compile/cpu"
    narrow = interval_coverage.figures(interval_coverage.with_run_to_run(run, 0.0))[key]
    wide = interval_coverage.figures(interval_coverage.with_run_to_run(run, 0.2))[key]
    assert wide["ci_low_s"] < narrow["ci_low_s"] < narrow["ci_high_s"] < wide["ci_high_s"]
    assert wide["median_s"] == narrow["median_s"]
    assert run.run_to_run(run.case(key)) == 0.02  # the synthetic project's term, untouched
    again = interval_coverage.with_run_to_run(run, 0.2)
    assert again.run_to_run(again.case(key)) == 0.2
