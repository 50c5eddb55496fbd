"""perfgate.load / load_samples / load_verdicts / load_history on real run folders made by the real CLI:
a base run, a head run whose work per step is 30x (tests/workloads/scaled_work.py), `perfgate compare`
between them, and both added to a SQLite history store."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pandas as pd
import pytest
from conftest import REPO, TEST_WORKLOADS, cli_env, run_cli

import perfgate
from perfgate.history.store import HistoryError
from perfgate.util.validation import SchemaError

EAGER = "scaled_work/smoke/eager/cpu"
SKIPPED = "scaled_work/smoke/cuda-graphs/cpu"  # needs CUDA: skipped on this CPU run, no samples


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    """(root, base run folder, head run folder, history URL): head compared against base, both in history."""
    root = tmp_path_factory.mktemp("notebook")
    (root / "pyproject.toml").write_text("[tool.perfgate]\n")
    selection = ("--workloads-dir", str(TEST_WORKLOADS), "-w", "scaled_work", "-t", "eager", "-t", "cuda-graphs",
                 "--processes", "2", "--samples", "3")
    for name, scale in (("base", "1"), ("head", "30")):
        proc = run_cli("run", *selection, "--out", str(root / name), cwd=root,
                       env=cli_env(PERFGATE_TEST_WORK_SCALE=scale))
        assert proc.returncode == 0, proc.stdout + proc.stderr
    proc = run_cli("compare", str(root / "head"), str(root / "base"), cwd=root)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    url = f"sqlite:///{root / 'store' / 'history.db'}"
    proc = run_cli("history", "add", str(root / "base"), str(root / "head"), "--history-url", url, cwd=root)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return root, root / "base", root / "head", url


@pytest.mark.slow
def test_importing_perfgate_imports_neither_pandas_nor_torch():
    code = ("import sys, perfgate; before = ('pandas' in sys.modules, 'torch' in sys.modules); "
            "load = perfgate.load; print(*before, 'pandas' in sys.modules, 'torch' in sys.modules, "
            "callable(load), 'load_history' in dir(perfgate))")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120,
                         env=cli_env())
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "False", "True", "False", "True", "True"]


@pytest.mark.slow
def test_loading_a_compared_run_and_its_history_imports_no_torch(project):
    root, _, head, url = project
    code = (f"import sys, perfgate; perfgate.load({str(head)!r}); perfgate.load_samples({str(head)!r}); "
            f"perfgate.load_verdicts({str(head)!r}); perfgate.load_history({url!r}); print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=120,
                         env=cli_env())
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


def test_an_unknown_attribute_of_perfgate_is_an_attribute_error():
    with pytest.raises(AttributeError, match="no attribute 'lode'"):
        perfgate.lode  # noqa: B018


@pytest.mark.slow
def test_load_is_one_row_per_case_with_spec_step_time_and_every_metric(project):
    _, base, _, _ = project
    data = json.loads((base / "results.json").read_text())
    frame = perfgate.load(base)
    assert list(frame.index) == [c["key"] for c in data["cases"]] and frame.index.name == "case"
    eager, skipped = frame.loc[EAGER], frame.loc[SKIPPED]
    assert (eager["workload"], eager["size"], eager["toggles"], eager["device"], eager["dtype"]) == (
        "scaled_work", "smoke", "eager", "cpu", "float32")
    assert (eager["param.n"], eager["param.reps"]) == (32, 20)
    assert eager.run_id == data["run_id"] == frame.attrs["run_id"]
    assert eager.status == "ok" and skipped.status == "skipped" and "CUDA" in skipped.message

    # the step-time statistics are the ones results.json derived from the same samples
    derived = next(c for c in data["cases"] if c["key"] == EAGER)["derived"]["step_time_s"]
    for column, name in (("step_time_s", "estimate"), ("step_time_median_s", "median"), ("step_time_ci_low_s", "ci_low"),
                         ("step_time_ci_high_s", "ci_high"), ("step_time_q1_s", "q1"), ("step_time_q3_s", "q3"),
                         ("step_time_min_s", "minimum"), ("step_time_max_s", "maximum")):
        assert eager[column] == pytest.approx(derived[name], rel=1e-12), column
    assert eager.samples == derived["n"] and eager.processes == 2
    assert eager.step_time_ci_low_s <= eager.step_time_s <= eager.step_time_ci_high_s
    assert eager.throughput_steps_per_s == pytest.approx(1 / eager.step_time_s)
    assert eager.speedup_vs_eager == 1.0 and eager.accuracy_verdict == "ok"
    assert math.isnan(skipped.step_time_s) and pd.isna(skipped.samples) and math.isnan(skipped.speedup_vs_eager)

    # every metric any case carries is a column of its own, with the case's value
    metrics = next(c for c in data["cases"] if c["key"] == EAGER)["metrics"]
    assert metrics and set(metrics) <= set(frame.columns)
    for name, value in metrics.items():
        assert eager[name] == pytest.approx(value), name
    assert math.isnan(skipped["peak_rss_bytes"])

    # not compared: no verdict columns
    assert not [c for c in frame.columns if c.startswith("verdict")] and "comparison" not in frame.attrs


@pytest.mark.slow
def test_load_takes_the_results_file_as_well_as_the_folder(project):
    _, base, _, _ = project
    pd.testing.assert_frame_equal(perfgate.load(base / "results.json"), perfgate.load(str(base)))


@pytest.mark.slow
def test_a_compared_run_has_the_verdicts_of_its_comparison(project):
    _, base, head, _ = project
    frame = perfgate.load(head)
    comparison = json.loads((head / "comparison.json").read_text())
    verdicts = {(v["case_key"], v["metric"]): v for v in comparison["verdicts"]}
    for (key, metric), v in verdicts.items():
        if key in frame.index:
            assert frame.loc[key, f"verdict.{metric}"] == v["kind"], (key, metric)
    step = verdicts[(EAGER, "step_time")]
    eager = frame.loc[EAGER]
    assert eager.step_time_ratio == pytest.approx(step["ratio"])
    assert (eager.step_time_ratio_low, eager.step_time_ratio_high) == pytest.approx((step["ratio_low"], step["ratio_high"]))
    assert eager.step_time_baseline_s == pytest.approx(step["baseline"])
    assert eager.step_time_current_s == pytest.approx(step["current"])
    assert eager.step_time_ratio > 5  # 30x the work per step
    assert eager.gate_fails == any(v["kind"] in ("regression", "newly-failing")
                                   for (k, _), v in verdicts.items() if k == EAGER)
    assert eager.verdict in {v["kind"] for (k, _), v in verdicts.items() if k == EAGER}
    assert frame.attrs["comparison"]["baseline_source"] == str(base)
    # the head run measured the same case slower than the base run did
    assert eager.step_time_s > 5 * perfgate.load(base).loc[EAGER, "step_time_s"]


@pytest.mark.slow
def test_load_verdicts_is_one_row_per_verdict(project):
    _, base, head, _ = project
    frame = perfgate.load_verdicts(head)
    comparison = json.loads((head / "comparison.json").read_text())
    assert len(frame) == len(comparison["verdicts"])
    assert list(zip(frame.case, frame.metric, frame.kind, strict=True)) == [
        (v["case_key"], v["metric"], v["kind"]) for v in comparison["verdicts"]]
    step = frame[(frame.case == EAGER) & (frame.metric == "step_time")].iloc[0]
    assert step.ratio > 5 and step.rule
    empty = perfgate.load_verdicts(base)
    assert empty.empty and list(empty.columns)[:3] == ["case", "metric", "kind"]


@pytest.mark.slow
def test_load_samples_is_every_sample_of_every_process(project):
    _, base, _, _ = project
    data = json.loads((base / "results.json").read_text())
    frame = perfgate.load_samples(base)
    assert list(frame.columns) == ["run_id", "case", "process", "sample", "layout_group", "burst", "step_time_s"]
    (case,) = [c for c in data["cases"] if c["processes"]]  # the skipped case has none
    assert set(frame.case) == {case["key"]}
    for p in case["processes"]:
        rows = frame[frame.process == p["process_index"]]
        per_step = [ns * 1e-9 / (p["loops"] * p["steps_per_unit"]) for ns in p["samples_ns"]]
        assert rows.step_time_s.tolist() == pytest.approx(per_step, rel=1e-12)
        assert rows["sample"].tolist() == list(range(len(per_step)))
        groups = p["layout_groups"] or [len(per_step)]
        assert rows.layout_group.value_counts().sort_index().tolist() == groups
        assert rows.burst.isna().all()  # not sampled in lockstep
    assert len(frame) == sum(len(p["samples_ns"]) for p in case["processes"])
    assert frame.step_time_s.median() == pytest.approx(perfgate.load(base).loc[case["key"], "step_time_median_s"])


@pytest.mark.slow
def test_samples_groups_that_do_not_add_up_are_missing_not_made_up(project, tmp_path):
    _, base, _, _ = project
    data = json.loads((base / "results.json").read_text())
    process = next(c for c in data["cases"] if c["processes"])["processes"][0]
    process["layout_groups"] = [1, 1]  # fewer than its samples
    process["bursts"] = [len(process["samples_ns"]) - 1, 1]
    (tmp_path / "results.json").write_text(json.dumps(data))
    frame = perfgate.load_samples(tmp_path)
    first = frame[frame.process == process["process_index"]]
    assert first.layout_group.isna().all()
    assert first.burst.tolist() == [0] * (len(process["samples_ns"]) - 1) + [1]


@pytest.mark.slow
def test_load_history_is_the_stores_series(project):
    root, base, head, url = project
    frame = perfgate.load_history(url)
    assert list(frame.columns) == ["case", "workload", "size", "toggles", "device", "metric", "run_id", "commit",
                                   "branch", "started_at", "machine_key", "value", "ci_low", "ci_high", "n"]
    assert set(frame.metric) == {"step_time"} and set(frame.case) == {EAGER}
    assert frame.run_id.tolist() == ["base", "head"]  # run order
    runs = {name: perfgate.load(folder).loc[EAGER] for name, folder in (("base", base), ("head", head))}
    for row in frame.itertuples():
        assert row.value == pytest.approx(runs[row.run_id].step_time_s)
        assert row.ci_low == pytest.approx(runs[row.run_id].step_time_ci_low_s)
        assert row.n == runs[row.run_id].samples
        assert (row.workload, row.toggles, row.device) == ("scaled_work", "eager", "cpu")
    assert str(frame.started_at.dt.tz) == "UTC" and frame.started_at.notna().all()

    # a path is a SQLite file; several metrics, or every one; the filters of `history show`
    db = root / "store" / "history.db"
    assert perfgate.load_history(db).equals(frame)
    both = perfgate.load_history(url, metric=["step_time", "peak_rss_bytes"])
    assert set(both.metric) == {"step_time", "peak_rss_bytes"} and len(both) == 4
    every = perfgate.load_history(url, metric=None)
    assert {"step_time", "first_call_s", "peak_rss_bytes"} <= set(every.metric)
    assert perfgate.load_history(url, last=1).run_id.tolist() == ["head"]
    assert perfgate.load_history(url, cases="other_workload").empty
    assert len(perfgate.load_history(url, cases=["scaled_*"])) == 2
    assert perfgate.load_history(url, since="2999-01-01").empty


@pytest.mark.slow
def test_load_history_finds_the_store_as_the_cli_does(project, monkeypatch):
    root, _, _, url = project
    monkeypatch.setenv("PERFGATE_HISTORY_URL", url)
    monkeypatch.chdir(root)
    assert perfgate.load_history().run_id.tolist() == ["base", "head"]


@pytest.mark.parametrize("make, expected", [
    (lambda d: d / "nope", r"no such file or folder; expected a perfgate run folder \(holding results.json\) or a results.json file"),
    (lambda d: d, r"not a perfgate run folder \(no results.json in it\)"),
    (lambda d: _write(d / "results.json", '{"schema": "perfgate.results/2", "run_id": '), "results is not valid JSON"),
    (lambda d: _write(d / "results.json", '{"schema": "perfgate.baseline/2"}'), "unknown schema 'perfgate.baseline/2'; this perfgate reads"),
    (lambda d: _write(d / "results.json", json.dumps({"schema": "perfgate.results/1", "run_id": "r",
                                                      "cases": [{"spec": {}, "status": "ok"}]})),
     r"cases\[0\]\.spec\.workload is missing"),
])
def test_bad_input_is_one_line_naming_the_path(tmp_path, make, expected):
    path = make(tmp_path)
    for loader in (perfgate.load, perfgate.load_samples, perfgate.load_verdicts):
        with pytest.raises(SchemaError, match=expected) as exc:
            loader(path)
        assert isinstance(exc.value, ValueError)
        assert str(path) in str(exc.value) and "\n" not in str(exc.value)


@pytest.mark.slow
def test_a_malformed_comparison_beside_the_run_is_one_line_naming_it(project, tmp_path):
    _, _, head, _ = project
    (tmp_path / "results.json").write_text((head / "results.json").read_text())
    (tmp_path / "comparison.json").write_text('{"verdicts": [{"case_key": "x", "metric": "step_time", "kind": "worse"}]}')
    with pytest.raises(SchemaError, match="kind must be one of") as exc:
        perfgate.load(tmp_path)
    assert str(tmp_path / "comparison.json") in str(exc.value) and "\n" not in str(exc.value)


def test_a_path_that_is_not_a_path_is_a_schema_error():
    with pytest.raises(SchemaError, match="not a path; perfgate.load takes a perfgate run folder"):
        perfgate.load(42)


def test_a_missing_or_foreign_history_store_is_one_line(tmp_path):
    with pytest.raises(HistoryError, match="no history store at .*history add") as exc:
        perfgate.load_history(tmp_path / "none.db")
    assert isinstance(exc.value, ValueError) and "\n" not in str(exc.value)
    foreign = _write(tmp_path / "notes.db", "just text")
    with pytest.raises(HistoryError, match=f"{foreign} is not a SQLite database"):
        perfgate.load_history(foreign)
    with pytest.raises(HistoryError, match="unsupported database; valid: sqlite:///PATH"):
        perfgate.load_history("mysql://db/x")
    with pytest.raises(HistoryError, match="last=0: expected a whole number"):
        perfgate.load_history(tmp_path / "none.db", last=0)


def _write(path, text):
    path.write_text(text)
    return path


@pytest.mark.slow
def test_the_docs_example_runs_on_a_real_run(project):
    """docs/notebook.md's example, with its run folder and store pointed at the fixture's."""
    _, _, head, url = project
    text = (REPO / "docs" / "notebook.md").read_text()
    code = text[text.index("```python\n") + len("```python\n"):text.index("```\n")]
    code = code.replace('"reports/RUN"', repr(str(head))).replace('"sqlite:///.perfgate/history.db"', repr(url))
    scope: dict = {}
    exec(compile(code, "docs/notebook.md", "exec"), scope)
    assert list(scope["trend"].columns) == [EAGER] and len(scope["trend"]) == 2
    assert set(scope["per_process"].index.get_level_values("case")) == {EAGER}


def test_load_gives_the_reports_intervals_and_nan_where_one_process_gives_none(tmp_path):
    """The notebook's step-time and speedup intervals are those report.html prints (worker processes plus
    the run-to-run term), and NaN for a case of one process, not an interval from its samples pooled."""
    import dataclasses as dc

    from fixtures.synthetic import synthetic_run

    run = synthetic_run(["rollout"], toggles=("eager", "compile", "amp-bf16"))
    one = dc.replace(run.cases[2], processes=run.cases[2].processes[:1])
    run = dc.replace(run, cases=[run.cases[0], run.cases[1], one])
    (tmp_path / "results.json").write_text(run.dumps())
    df = perfgate.load(tmp_path)
    compile_ = run.cases[1]
    st, sp = run.step_time(compile_), run.speedup(compile_)
    assert df.loc[compile_.key, "step_time_ci_low_s"] == pytest.approx(st.ci_low)
    assert (df.loc[compile_.key, "speedup_low"], df.loc[compile_.key, "speedup_high"]) == (
        pytest.approx(sp.low), pytest.approx(sp.high))
    assert math.isnan(df.loc[one.key, "step_time_ci_low_s"]) and math.isnan(df.loc[one.key, "speedup_high"])
    assert df.loc[one.key, "step_time_s"] == pytest.approx(run.step_time(one).value)
