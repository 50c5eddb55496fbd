"""perfgate.reports.traces: both traces of a regression, their kernel (op) difference, `perfgate trace CASE`.

End to end on a real `perfgate run --against HEAD~1` in a throwaway git repository whose head commit runs
30 times the matmuls per step (tests/workloads/scaled_work.py) and adds a workload its base lacks
(conftest's session fixture `against_run`, read only, shared with test_gate and test_repro): the traces are
the ones torch.profiler wrote in this environment. The rest on trace files of the same shape built here: per-step
normalisation, ordering, missing and malformed files, paths that try to leave the run folder.
"""

from __future__ import annotations

import copy
import json
import re
import shutil
from dataclasses import replace
from pathlib import Path
from urllib.parse import unquote

import pytest
from conftest import run_cli
from fixtures.against import CASE, NEW_CASE
from fixtures.synthetic import scenario

from perfgate.model.config import ConfigError
from perfgate.reports import traces
from perfgate.reports.base import ReportInput
from perfgate.reports.html import HtmlExporter
from perfgate.reports.markdown import MarkdownExporter
from perfgate.util.validation import SchemaError


def _hrefs(html: str) -> list[str]:
    return re.findall(r'href="([^"#][^"]*)"', html)


def _trace_block(html: str) -> str:
    start = html.index('class="trace-pair"')
    return html[start:html.index("</div>\n</div>", start)]


@pytest.mark.slow
def test_a_regression_links_both_real_traces_and_shows_the_ops_that_moved(against_run):
    _, run_dir, _ = against_run
    html = (run_dir / "report.html").read_text()
    assert html.count('class="trace-pair"') == 1  # the regressed case's; newer_work is new, no pair
    block = _trace_block(html)
    base_href = re.search(r'<li class="trace-base">base: <a class="mono" href="([^"]+)"', block).group(1)
    head_href = re.search(r'<li class="trace-head">head: <a class="mono" href="([^"]+)"', block).group(1)
    assert base_href.startswith("base/tb/scaled_work/smoke/eager/") and base_href.endswith(".pt.trace.json")
    assert head_href.startswith("tb/scaled_work/smoke/eager/") and head_href.endswith(".pt.trace.json")
    for href in (base_href, head_href):  # relative links that land on the files torch.profiler wrote
        trace = json.loads((run_dir / unquote(href)).read_text())
        assert any(e.get("name", "").startswith("ProfilerStep#") for e in trace["traceEvents"])
    # the diff, top movers first: the chain's ops went from 20 to 600 calls per step
    rows = re.findall(r'<tr><td class="mono msg" title="([^"]+)">.*?</td><td>([^<]+)</td>'
                      r'(?:<td class="num">([^<]*)</td>){5}', block)
    names = [r[0] for r in rows]
    assert set(names[:3]) == {"aten::tanh", "aten::matmul", "aten::mm"}, names
    assert all(r[1] == "count changed" for r in rows[:3])
    pair = ReportInput(_load(run_dir), _comparison(run_dir), run_dir=run_dir).trace_pairs[CASE]
    deltas = [abs(c.delta_us) for c in pair.changes]
    assert deltas == sorted(deltas, reverse=True) and len(pair.changes) >= 3
    tanh = next(c for c in pair.changes if c.name == "aten::tanh")
    assert (tanh.base_count, tanh.head_count) == (20, 600)  # per step: the trace's 3 steps divided out
    assert pair.base_totals.steps == pair.head_totals.steps == 3
    assert pair.changes[0].name in {"aten::tanh", "aten::matmul", "aten::mm"}

    md = (run_dir / "summary.md").read_text()
    (line,) = [ln for ln in md.splitlines() if ln.startswith("- Traces of ")]
    assert f"base `{unquote(base_href)}`" in line and f"head `{unquote(head_href)}`" in line
    assert "top mover: `aten::" in line and "20 -> 600 calls" in line
    assert "https://ui.perfetto.dev" in md


def _load(run_dir: Path):
    from perfgate.model.results import load_results

    return load_results(run_dir)


def _comparison(run_dir: Path):
    from perfgate.gating.comparison_file import read_comparison

    comparison = read_comparison(run_dir / "comparison.json")
    return replace(comparison, baseline=_load(run_dir / "base"))


@pytest.mark.slow
def test_perfgate_trace_prints_both_paths_and_the_perfetto_steps(against_run):
    repo, run_dir, _ = against_run
    proc = run_cli("trace", CASE, "--results", str(run_dir), cwd=repo)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    head = Path(next(ln for ln in lines if ln.startswith("  head: "))[len("  head: "):])
    base = Path(next(ln for ln in lines if ln.startswith("  base: "))[len("  base: "):])
    assert head.is_file() and base.is_file() and run_dir / "base" in base.parents
    assert "ops that moved most" in proc.stdout and "calls 20 -> 600" in proc.stdout
    assert "https://ui.perfetto.dev" in proc.stdout and "Open trace file" in proc.stdout
    # a glob names the same case; the latest run is the default (none here: this run has --out elsewhere)
    again = run_cli("trace", "scaled_work/*/eager/*", "--results", str(run_dir / "results.json"), cwd=repo)
    assert again.returncode == 0 and str(head) in again.stdout


@pytest.mark.slow
def test_perfgate_trace_of_no_case_is_one_line_naming_the_valid_ones(against_run):
    repo, run_dir, _ = against_run
    proc = run_cli("trace", "nope/*", "--results", str(run_dir), cwd=repo)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [proc.stderr.strip()]
    # the shared run's head has newer_work too (a workload its base lacks): both are named
    assert "'nope/*'" in proc.stderr and f"valid: {NEW_CASE}, {CASE}" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.slow
def test_a_report_written_elsewhere_links_nothing_outside_its_folder(against_run, tmp_path):
    repo, run_dir, _ = against_run
    out = tmp_path / "out"
    proc = run_cli("report", str(run_dir), "--against-results", str(run_dir / "base"), "--out", str(out), cwd=repo)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    html = (out / "report.html").read_text()
    block = _trace_block(html)
    assert "<a " not in block  # both traces lie outside out/: shown as text
    assert str((run_dir / "base" / "tb").resolve()) in block and str((run_dir / "tb").resolve()) in block
    for href in _hrefs(html):
        assert not href.startswith(("/", "file:", "..")), href
    assert "aten::tanh" in block


@pytest.mark.slow
def test_a_missing_and_a_malformed_trace_are_one_line_notes(against_run, tmp_path):
    repo, original, _ = against_run
    run_dir = tmp_path / "ab"
    shutil.copytree(original, run_dir)
    (head,) = (run_dir / "tb" / "scaled_work").rglob("*.pt.trace.json")  # CASE's (newer_work has one too)
    head.unlink()
    (base,) = (run_dir / "base" / "tb").rglob("*.pt.trace.json")  # the base lacks newer_work: CASE's only
    base.write_text('{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "dur": "slow"}]}')
    proc = run_cli("report", str(run_dir), "--against-results", str(run_dir / "base"), cwd=repo)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    block = _trace_block((run_dir / "report.html").read_text())
    assert f"missing: {run_dir / 'tb'}" in block and "does not exist" in block
    (note,) = re.findall(r'<p class="meta trace-note">([^<]*)</p>', block)
    assert note.startswith("base trace unreadable: ") and "traceEvents[0].dur must be a finite number" in note
    assert "kernel-diff" not in block
    md = (run_dir / "summary.md").read_text()
    assert "head: none (`missing: " in md and "base trace unreadable" in md
    trace = run_cli("trace", CASE, "--results", str(run_dir), cwd=repo)
    assert trace.returncode == 0, trace.stderr
    assert "head: none: missing: " in trace.stdout and "note: base trace unreadable" in trace.stdout


# ---------------------------------------------------------------- traces of the same shape, built here


def chrome_trace(ops: dict[str, tuple[int, float]], steps: int = 3, category: str = "cpu_op") -> dict:
    """A trace shaped as torch.profiler's export_chrome_trace writes it: metadata, ``steps`` ProfilerStep
    windows (host side; on CUDA a GPU-side copy too), and per step ``count`` events of ``dur`` us per name."""
    events: list[dict] = [{"ph": "M", "name": "process_name", "pid": 1, "tid": 0, "args": {"name": "python"}}]
    ts = 1000.0
    for s in range(steps):
        events.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{s + 2}", "pid": 1, "tid": 1,
                       "ts": ts, "dur": 500.0, "args": {}})
        if category == "kernel":
            events.append({"ph": "X", "cat": "gpu_user_annotation", "name": f"ProfilerStep#{s + 2}", "pid": 0,
                           "tid": 7, "ts": ts, "dur": 480.0})
            events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
                           "ts": ts, "dur": 3.0})
        for name, (count, dur) in ops.items():
            for _ in range(count):
                events.append({"ph": "X", "cat": category, "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur,
                               "args": {"External id": 1}})
                ts += dur
        events.append({"ph": "i", "cat": "cpu_instant_event", "name": "[memory]", "pid": 1, "tid": 1, "ts": ts,
                       "s": "t", "args": {"Bytes": 64}})
        ts += 500
    return {"schemaVersion": 1, "traceEvents": events, "traceName": "x.pt.trace.json"}


def _write(path: Path, data: object) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data) if not isinstance(data, str) else data)
    return path


def test_totals_are_per_recorded_step_and_count_only_the_device_kernels_on_cuda(tmp_path):
    ops = {"sgemm_128x64": (2, 10.0), "elementwise_kernel": (5, 1.0)}
    path = _write(tmp_path / "k.pt.trace.json", chrome_trace(ops, steps=4, category="kernel"))
    totals = traces.read_trace(path, "kernel")
    assert totals.steps == 4
    assert totals.count == {"sgemm_128x64": 2, "elementwise_kernel": 5}  # no runtime calls, no annotations
    assert totals.time_us == {"sgemm_128x64": 20.0, "elementwise_kernel": 5.0}
    assert totals.step_wall_us == 500.0
    # a captured CUDA graph replays a unit of 5 steps per profiler step
    graph = traces.read_trace(path, "kernel", steps_per_profiler_step=5)
    assert graph.count["sgemm_128x64"] == pytest.approx(0.4) and graph.step_wall_us == 100.0
    # the same file read for CPU ops holds none
    assert traces.read_trace(path, "cpu_op").time_us == {}


def test_the_diff_puts_the_top_movers_first_and_leaves_out_what_did_not_move(tmp_path):
    base = traces.read_trace(_write(tmp_path / "b.pt.trace.json", chrome_trace(
        {"aten::conv2d": (1, 50.0), "aten::relu": (2, 5.0), "aten::add": (1, 3.0), "aten::gone": (1, 8.0)})), "cpu_op")
    head = traces.read_trace(_write(tmp_path / "h.pt.trace.json", chrome_trace(
        {"aten::conv2d": (1, 45.0), "aten::relu": (6, 5.0), "aten::add": (1, 3.0), "aten::new": (3, 10.0)})), "cpu_op")
    changes = traces.kernel_diff(base, head)
    assert [(c.name, c.change) for c in changes] == [
        ("aten::new", "added"), ("aten::relu", "count changed"), ("aten::gone", "removed"),
        ("aten::conv2d", "time changed")]
    assert [c.delta_us for c in changes] == [30.0, 20.0, -8.0, -5.0]
    assert changes[0].relative_text == "new" and changes[1].relative_text == "+200%"
    assert traces.format_delta_us(changes[3].delta_us) == "-5 us"


def test_one_preempted_step_does_not_make_a_host_op_a_top_mover(tmp_path):
    """On a shared machine one step's op can be descheduled for milliseconds: a host op's time per step is
    the median of the recorded steps' times, so the op whose count grew stays the top mover; an op with an
    event outside every step window keeps the plain per-step total."""
    base = traces.read_trace(_write(tmp_path / "b.pt.trace.json", chrome_trace(
        {"aten::tanh": (20, 0.5), "aten::add": (1, 1.0)})), "cpu_op")
    slow = chrome_trace({"aten::tanh": (600, 0.5), "aten::add": (1, 1.0)})  # inside the 500 us windows
    adds = [e for e in slow["traceEvents"] if e.get("name") == "aten::add"]
    adds[1]["dur"] = 4000.0  # preempted once, in the second of three steps
    head = traces.read_trace(_write(tmp_path / "h.pt.trace.json", slow), "cpu_op")
    assert head.time_us["aten::add"] == 1.0 and head.count["aten::add"] == 1
    assert head.time_us["aten::tanh"] == 300.0
    changes = traces.kernel_diff(base, head)
    assert [c.name for c in changes] == ["aten::tanh"]  # add's median did not move at all
    # an event outside the step windows: that name is the total over the steps, as before
    slow["traceEvents"].append({"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 1,
                                "ts": 1.0, "dur": 3.0})
    head = traces.read_trace(_write(tmp_path / "h2.pt.trace.json", slow), "cpu_op")
    assert head.time_us["aten::add"] == pytest.approx((1.0 + 4000.0 + 1.0 + 3.0) / 3)
    # fewer than three steps: the total over the steps
    two = traces.read_trace(_write(tmp_path / "t.pt.trace.json", chrome_trace({"aten::add": (1, 1.0)}, steps=2)),
                            "cpu_op")
    assert two.time_us == {"aten::add": 1.0} and two.steps == 2


@pytest.mark.parametrize("content, words", [
    ("{not json", "not valid JSON"),
    ('{"traceEvents": {}}', "traceEvents must be an array of objects"),
    ('{"traceEvents": [1]}', "traceEvents must be an array of objects"),
    ('{"events": []}', "traceEvents is missing"),
    ('{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "a", "dur": -1}]}', "traceEvents[0].dur must be"),
    ('{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": 5, "dur": 1}]}', "traceEvents[0].name must be a string"),
    ('{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "a"}]}', "traceEvents[0].dur is missing"),
])
def test_a_malformed_trace_is_a_schema_error_naming_the_file(tmp_path, content, words):
    path = _write(tmp_path / "bad.pt.trace.json", content)
    with pytest.raises(SchemaError) as err:
        traces.read_trace(path, "cpu_op")
    assert str(path) in str(err.value) and words in str(err.value)
    assert "\n" not in str(err.value)


def test_a_trace_over_the_size_cap_is_refused_before_it_is_parsed(tmp_path, monkeypatch):
    monkeypatch.setenv("PERFGATE_MAX_FILE_MB", "1")
    path = _write(tmp_path / "big.pt.trace.json", chrome_trace({"aten::add": (4000, 1.0)}, steps=3))
    assert path.stat().st_size > 2**20
    with pytest.raises(SchemaError, match="larger than 1 MiB"):
        traces.read_trace(path, "cpu_op")


def test_mutated_traces_are_read_or_refused_never_a_crash(tmp_path):
    """Each field of each kind of event replaced by a value of another type, or deleted."""
    good = chrome_trace({"aten::mm": (1, 2.0)}, steps=1)
    path = tmp_path / "m.pt.trace.json"
    for i, event in enumerate(good["traceEvents"]):
        for key in event:
            mutations = []
            for value in (None, "a", -1, 1e308, [], {}, True, "\ud800", 2**70):
                mutated = copy.deepcopy(good)
                mutated["traceEvents"][i][key] = value
                mutations.append(mutated)
            deleted = copy.deepcopy(good)
            del deleted["traceEvents"][i][key]
            for doc in [*mutations, deleted]:
                _write(path, json.dumps(doc))
                try:
                    traces.read_trace(path, "cpu_op")
                except SchemaError:
                    pass


def test_trace_paths_from_a_results_file_stay_inside_its_run_folder(tmp_path):
    run, _ = scenario(["rollout"])
    case = run.cases[0]
    outside = _write(tmp_path / "secret.pt.trace.json", chrome_trace({"a": (1, 1.0)}))
    folder = tmp_path / "run"
    (folder / "tb").mkdir(parents=True)
    (folder / "tb" / "link").symlink_to(tmp_path, target_is_directory=True)
    for rel in ("../secret.pt.trace.json", str(outside), "tb/link/secret.pt.trace.json", "results.json",
                "tb/a\x00.pt.trace.json"):
        side = traces.trace_of(replace(case, profile={**case.profile, "trace_file": rel}), folder, "head", "this run")
        assert side.path is None and "not a .pt.trace.json file inside its run folder" in side.note, rel
    for rel in (None, 5, ""):
        side = traces.trace_of(replace(case, profile={**case.profile, "trace_file": rel}), folder, "head", "this run")
        assert side.path is None and side.note == "the case recorded no trace in this run"


def test_a_stored_baseline_keeps_no_trace_and_the_report_says_so(tmp_path):
    """Against a stored baseline file: its trace paths are relative to a run folder that is not here."""
    run, comparison = scenario(["rollout"])
    comparison = replace(comparison, baseline_source=str(tmp_path / "baselines" / "m" / "smoke.json"))
    report = ReportInput(run, comparison, run_dir=tmp_path / "run")
    assert report.trace_pairs, "the scenario has regressions"
    for pair in report.trace_pairs.values():
        assert pair.base.path is None and pair.base.note.startswith("not kept: the stored baseline ")
        status = run.case(pair.case_key).status
        expected = "missing: " if status == "ok" else f"the case {status} in this run"
        assert pair.head.path is None and pair.head.note.startswith(expected), pair.head.note
        assert not pair.compared and not pair.changes
    html = HtmlExporter().render(report).decode()
    assert html.count('class="trace-pair"') == len(report.trace_pairs)
    assert "not kept: the stored baseline" in html and "kernel-diff" not in html
    md = MarkdownExporter().render(report).decode()
    assert md.count("- Traces of ") == len(report.trace_pairs) and "base: none (`not kept" in md


def test_against_synthetic_traces_the_report_links_both_and_the_diff_reads_them(tmp_path):
    run, comparison = scenario(["rollout"])
    run_dir = tmp_path / "run"
    key = next(iter(ReportInput(run, comparison).regression_rows)).key
    head_rel, base_rel = "tb/h/head x.pt.trace.json", "tb/b/base.pt.trace.json"
    run = replace(run, cases=[replace(c, profile={**c.profile, "trace_file": head_rel}) if c.key == key else c
                              for c in run.cases])
    base_run = replace(comparison.baseline, cases=[replace(c, profile={**c.profile, "trace_file": base_rel})
                                                   if c.key == key else c for c in comparison.baseline.cases])
    _write(run_dir / head_rel, chrome_trace({"aten::convolution": (2, 40.0), "aten::gelu": (1, 4.0)}))
    _write(run_dir / "base" / base_rel, chrome_trace({"aten::convolution": (1, 40.0), "aten::gelu": (1, 4.0)}))
    report = ReportInput(run, replace(comparison, mode="against", baseline=base_run), run_dir=run_dir)
    pair = report.trace_pairs[key]
    assert [(c.name, c.base_count, c.head_count) for c in pair.changes] == [("aten::convolution", 1, 2)]
    html = HtmlExporter().render(report).decode()
    assert 'href="tb/h/head%20x.pt.trace.json"' in html and 'href="base/tb/b/base.pt.trace.json"' in html
    assert "+40\u00a0us" in html  # time change, its unit kept with it


def test_matching_cases_refuses_a_pattern_that_names_nothing():
    run, _ = scenario(["rollout"])
    assert [c.key for c in traces.matching_cases(run, run.cases[0].key, "r")] == [run.cases[0].key]
    assert len(traces.matching_cases(run, "rollout/*", "r")) == len(run.cases)
    with pytest.raises(ConfigError, match=r"no case of r matches 'x'; valid: rollout/"):
        traces.matching_cases(run, "x", "r")


def test_an_op_that_runs_in_some_steps_only_keeps_its_mean_time_and_is_the_top_mover(tmp_path):
    """Head adds a 5 ms host op in 2 of 5 recorded steps (a periodic sync, a checkpoint): 2 ms per step. The
    median of its step times (0, 5000, 0, 5000, 0) read 0 us, so it sorted below an op that moved 10 us and
    showed as '0 ns -> 0 ns'; now it keeps its mean and is the top mover."""
    def trace(slow_steps: set[int], extra_us: float) -> dict:
        events, ts = [], 1000.0
        for s in range(5):
            events.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{s + 2}", "pid": 1,
                           "tid": 1, "ts": ts, "dur": 8000.0})
            events.append({"ph": "X", "cat": "cpu_op", "name": "aten::addmm", "pid": 1, "tid": 1, "ts": ts + 1,
                           "dur": 100.0 + extra_us})
            if s in slow_steps:
                events.append({"ph": "X", "cat": "cpu_op", "name": "aten::_local_scalar_dense", "pid": 1, "tid": 1,
                               "ts": ts + 200, "dur": 5000.0})
            ts += 10000.0
        return {"traceEvents": events}

    base = traces.read_trace(_write(tmp_path / "b.pt.trace.json", trace(set(), 0.0)), "cpu_op")
    head = traces.read_trace(_write(tmp_path / "h.pt.trace.json", trace({1, 3}, 10.0)), "cpu_op")
    assert head.time_us["aten::_local_scalar_dense"] == pytest.approx(2000.0)
    assert head.time_us["aten::addmm"] == pytest.approx(110.0)  # in every step: still the median
    changes = traces.kernel_diff(base, head)
    assert [c.name for c in changes] == ["aten::_local_scalar_dense", "aten::addmm"]


# ---------------------------------------------------------------- kernels belong to the step that launched them


def _gpu_step_trace(leaked: int = 0, late: int = 0, after: int = 0, flows_only: bool = False) -> dict:
    """Three ProfilerStep windows (host), each launching 2 ``gemm`` and 3 ``relu`` kernels: a
    cudaLaunchKernel inside the window and its kernel with the same correlation id (on the GPU timeline).
    ``leaked`` kernels of the warm-up step before the window (their launches not recorded: the host side was
    not profiled) run early in the first window; the last step's ``late`` kernels run after its host window
    ends (launched inside it); ``after`` kernels are launched after the last window. ``flows_only``: the
    runtime calls carry no correlation, the ac2g flow events link them instead."""
    events: list[dict] = []
    corr = 100
    for c in range(leaked):  # launched in the warm-up step: no runtime call in the trace
        events.append({"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": 1001.0 + c, "dur": 40.0,
                       "args": {"correlation": 10 + c, "stream": 7}})

    def launch(ts: float, name: str, kernel_ts: float, dur: float) -> None:
        nonlocal corr
        corr += 1
        runtime = {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": ts,
                   "dur": 2.0, "args": {} if flows_only else {"correlation": corr}}
        events.append(runtime)
        if flows_only:
            events.append({"ph": "s", "cat": "ac2g", "name": "ac2g", "id": corr, "pid": 1, "tid": 1, "ts": ts})
            events.append({"ph": "f", "cat": "ac2g", "name": "ac2g", "id": corr, "pid": 0, "tid": 7, "ts": kernel_ts,
                           "bp": "e"})
        events.append({"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7, "ts": kernel_ts, "dur": dur,
                       "args": {"correlation": corr, "stream": 7}})

    for s in range(3):
        start = 1000.0 + s * 1000
        events.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{s + 2}", "pid": 1, "tid": 1,
                       "ts": start, "dur": 500.0, "args": {}})
        events.append({"ph": "X", "cat": "gpu_user_annotation", "name": f"ProfilerStep#{s + 2}", "pid": 0,
                       "tid": 7, "ts": start + 50, "dur": 480.0})
        for k in range(2):
            launch(start + 10 + k, "gemm", start + 100 + 20 * k, 10.0)
        for k in range(3):
            launch(start + 20 + k, "relu", start + 200 + 5 * k, 1.0)
        if s == 2:
            for k in range(late):  # launched at the window's end, run after it
                launch(start + 490 + k * 0.1, "gemm", start + 600 + 20 * k, 10.0)
    for k in range(after):
        launch(4000.0 + k, "relu", 4100.0 + k, 1.0)
    return {"schemaVersion": 1, "traceEvents": events}


def test_gpu_kernels_are_counted_in_the_step_that_launched_them(tmp_path):
    """Before: every kernel event of the trace was summed and divided by the host steps: kernels of the
    warm-up step running inside the window, and kernels launched after it, inflated kernels per step. Now a
    kernel counts in the ProfilerStep window its launching runtime call (same correlation id) lies in;
    kernels launched outside the windows are left out and counted apart."""
    clean = traces.read_trace(_write(tmp_path / "c.pt.trace.json", _gpu_step_trace()), "kernel")
    assert clean.count == {"gemm": 2.0, "relu": 3.0} and clean.time_us == {"gemm": 20.0, "relu": 3.0}
    assert clean.outside == 0
    dirty = traces.read_trace(_write(tmp_path / "d.pt.trace.json", _gpu_step_trace(leaked=3, late=3, after=2)),
                              "kernel")
    # the 3 late kernels were launched inside step 3: they are its kernels, 3 more over 3 steps
    assert dirty.count == {"gemm": 3.0, "relu": 3.0} and dirty.time_us == {"gemm": 30.0, "relu": 3.0}
    assert dirty.outside == 5  # 3 warm-up kernels with no recorded launch, 2 launched after the window
    # the same diffed: only the late launches moved, by exactly one gemm per step
    (change,) = traces.kernel_diff(clean, dirty)
    assert (change.name, change.base_count, change.head_count) == ("gemm", 2.0, 3.0)


def test_kernels_are_linked_to_their_launch_by_flow_events_too(tmp_path):
    totals = traces.read_trace(_write(tmp_path / "f.pt.trace.json", _gpu_step_trace(leaked=2, after=1,
                                                                                     flows_only=True)), "kernel")
    assert totals.count == {"gemm": 2.0, "relu": 3.0} and totals.outside == 3


def test_a_trace_pair_notes_the_kernels_left_out(tmp_path):
    from perfgate.model.results import CaseResult, CaseSpec

    run_dir = tmp_path / "run"
    rel = "tb/w/smoke/eager/w.pt.trace.json"
    _write(run_dir / rel, _gpu_step_trace(leaked=2))
    case = CaseResult(CaseSpec("w", "smoke", ("eager",), "cuda"), "ok", profile={"trace_file": rel})
    base_dir = tmp_path / "base"
    _write(base_dir / rel, _gpu_step_trace())
    from perfgate.model.results import RunResult

    bases = [traces.BaseRun(base_dir, RunResult("b", None, {}, cases=[case]), "the base")]
    pair = traces.trace_pair(case, bases, run_dir)
    assert pair.compared and pair.changes == []
    assert any("head trace: 2 kernels launched outside the recorded steps" in n for n in pair.notes), pair.notes
