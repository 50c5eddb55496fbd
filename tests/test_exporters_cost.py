"""The cost line (perfgate/reports/cost.py): wall time, device-minutes, cases measured, re-measured and
skipped, per shard and in all, in summary.md and report.html."""

from __future__ import annotations

from dataclasses import replace

from fixtures.shards import suite_cases, write_shard_runs
from fixtures.synthetic import synthetic_run

from perfgate.gating.merge import merge_runs
from perfgate.model.results import STATUS_SKIPPED, load_results
from perfgate.reports import write_run_reports
from perfgate.reports.cost import read_cost, run_cost, wall_seconds
from perfgate.running.runner import write_results


def _timed(run, seconds: float = 30.0):
    cases = [replace(c, duration_s=seconds) for c in run.cases]
    cases[-1] = replace(cases[-1], status=STATUS_SKIPPED, duration_s=0.5)
    return replace(run, cases=cases, started_at="2026-01-01T10:00:00+0000", finished_at="2026-01-01T10:06:00+0000")


def test_a_cpu_runs_cost_counts_its_workers_time_and_its_cases():
    run = _timed(synthetic_run(["a"], toggles=("eager", "compile", "tf32")))
    cost = run_cost(run)
    assert cost.device == "CPU" and cost.wall_s == 360.0
    assert cost.device_s == 60.5
    assert cost.text() == ("Cost: 6.0 min wall, 1.0 CPU-minutes in workers; 2 case(s) measured, 0 re-measured, "
                           "1 skipped.")


def test_a_cuda_run_is_counted_in_gpu_minutes_and_a_remeasure_adds_its_time(tmp_path):
    run = _timed(synthetic_run(["a"], toggles=("eager", "compile", "tf32"), device="cuda"))
    again = [replace(run.cases[0], duration_s=90.0)]
    write_results(replace(run, cases=again), tmp_path / "results-remeasure.json")
    cost = read_cost(run, tmp_path)
    assert cost.device == "GPU" and cost.device_s == 150.5
    assert "2.5 GPU-minutes" in cost.text() and "1 re-measured" in cost.text()


def test_an_unfinished_run_says_so_and_unreadable_times_give_no_wall():
    run = replace(_timed(synthetic_run(["a"])), finished_at=None)
    assert "(running) wall" in run_cost(run).text()
    assert wall_seconds("yesterday", "2026-01-01T10:06:00+0000") is None


def test_a_merge_keeps_each_shards_cost_and_sums_them(tmp_path):
    paths = write_shard_runs(tmp_path, suite_cases(), 3)
    run, _ = merge_runs(paths, tmp_path / "merged")
    write_results(run, tmp_path / "merged" / "results.json")
    cost = run_cost(load_results(tmp_path / "merged" / "results.json"))
    assert [s.shard for s in cost.shards] == ["1/3", "2/3", "3/3"]
    assert cost.wall_s == 3 * 600.0  # each shard held its runner 10 minutes
    assert cost.count("measured") == len(suite_cases()) and cost.device_s == len(suite_cases()) * 1.0
    assert "30.0 min wall summed over 3 shard(s)" in cost.text() and "shard 2/3 10.0 min wall" in cost.text()


def test_summary_and_report_carry_the_cost_line(tmp_path):
    run = _timed(synthetic_run(["a"], toggles=("eager", "compile", "tf32")))
    write_run_reports(run, tmp_path)
    line = "Cost: 6.0 min wall, 1.0 CPU-minutes in workers; 2 case(s) measured, 0 re-measured, 1 skipped."
    assert line in (tmp_path / "summary.md").read_text()
    assert line in (tmp_path / "report.html").read_text()
