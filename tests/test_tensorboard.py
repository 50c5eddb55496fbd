"""TensorBoard: scalars written after a run, read back with TensorBoard's own event reader, and a real
TensorBoard process serving the run (perfgate/reports/tensorboard.py, perfgate/commands/tbserver.py): with the
PyTorch Profiler plugin (torch-tb-profiler, the `tensorboard` extra) every case's trace and a regression's
base and head through the plugin's own HTTP API, and without it (an environment that lacks it) the line
that says how to get it."""

from __future__ import annotations

import gzip
import json
import shutil
import signal
import subprocess
import sys
import sysconfig
import time
import urllib.parse
import urllib.request
import venv
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from conftest import REPO, cli_env, run_cli

from perfgate.commands import tbserver
from perfgate.model.results import load_results

# slow: a profiled run and a TensorBoard server (the fast loop, pytest -m "not slow", leaves them to CI)
pytestmark = pytest.mark.slow


def test_scalars_and_hparams_read_back(profiled_run):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    run_dir, _ = profiled_run
    run = load_results(run_dir)
    for case in run.cases:
        ea = EventAccumulator(str(run_dir / "tb" / "tight_conv" / "smoke" / case.spec.toggle_name))
        ea.Reload()
        tags = ea.Tags()["scalars"]
        assert ea.Scalars("counts/aten_ops_per_step")[0].value == case.metrics["aten_ops_per_step"]
        assert abs(ea.Scalars("time/step_median_s")[0].value - case.step_time().median) <= 1e-6 * case.step_time().median
        assert "time/speedup_vs_eager" in tags and "memory/peak_rss_bytes" in tags
        assert "_hparams_/session_start_info" in ea.summary_metadata


def test_an_against_run_has_its_head_sides_scalars_too(against_run):
    """`run --against` wrote traces but no scalars (the plain run's writer was never called on that path)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    run = load_results(against_run.run_dir)
    (case,) = [c for c in run.cases if c.key == "scaled_work/smoke/eager/cpu"]
    ea = EventAccumulator(str(against_run.run_dir / "tb" / "scaled_work" / "smoke" / "eager"))
    ea.Reload()
    median = ea.Scalars("time/step_median_s")[0].value
    assert abs(median - case.step_time().median) <= 1e-6 * case.step_time().median


def _processes_mentioning(text: str) -> list[int]:
    pids = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            if text in (proc / "cmdline").read_bytes().decode(errors="replace"):
                pids.append(int(proc.name))
        except OSError:
            continue
    return pids


def _profiler_runs(url: str, wanted: set[str], wait_s: float = 120) -> list[str]:
    """The profiler plugin's runs once it has loaded ``wanted`` (it parses traces in the background)."""
    deadline, listing = time.monotonic() + wait_s, {}
    while time.monotonic() < deadline:
        listing = tbserver.fetch_json(url + "data/plugin/pytorch_profiler/runs")
        if wanted <= set(listing["runs"]) and not listing["loading"]:
            return listing["runs"]
        time.sleep(0.5)
    raise AssertionError(f"the profiler plugin did not load {sorted(wanted)} in {wait_s:g} s: {listing}")


def test_tensorboard_command_serves_the_run_and_stops(profiled_run, tmp_path):
    """`perfgate tensorboard RUN_DIR` as a user starts it: the run appears, SIGTERM stops TensorBoard too."""
    run_dir, _ = profiled_run
    port = tbserver.free_port()
    url = f"http://127.0.0.1:{port}/"
    log = (tmp_path / "out.txt").open("w")
    proc = subprocess.Popen([sys.executable, "-m", "perfgate", "tensorboard", str(run_dir), "--port", str(port)],
                            stdout=log, stderr=subprocess.STDOUT, env=cli_env(), cwd=REPO)
    try:
        # ready as a user sees it: the URL printed (TensorBoard can answer a moment before that)
        deadline, plugins = time.monotonic() + 90, None
        while time.monotonic() < deadline and proc.poll() is None and (
                plugins is None or url not in (tmp_path / "out.txt").read_text()):
            try:
                plugins = tbserver.fetch_json(url + "data/plugins_listing", timeout_s=2)
            except OSError:
                pass
            time.sleep(0.5)
        assert plugins is not None, (tmp_path / "out.txt").read_text()
        assert "scalars" in plugins
        assert "tight_conv/smoke/eager" in tbserver.fetch_json(url + "data/runs")
        if tbserver.profiler_plugin_installed():
            assert "pytorch_profiler" in plugins
            runs = _profiler_runs(url, {"tight_conv/smoke/eager", "tight_conv/smoke/amp-bf16"})
            assert runs == ["tight_conv/smoke/amp-bf16", "tight_conv/smoke/eager"]  # no compared run: no base runs
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
        log.close()
    out = (tmp_path / "out.txt").read_text()
    assert url in out
    assert tbserver.PLUGIN_HELP in out if tbserver.profiler_plugin_installed() else tbserver.NO_PLUGIN_HELP in out
    deadline = time.monotonic() + 10
    while _processes_mentioning(str(run_dir / "tb")) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _processes_mentioning(str(run_dir / "tb")), "TensorBoard outlived `perfgate tensorboard`"


def test_tensorboard_command_rejects_a_run_without_traces(tmp_path):
    proc = run_cli("tensorboard", str(tmp_path), "--port", "0")
    assert proc.returncode == 2
    assert "no TensorBoard folder" in proc.stderr


needs_plugin = pytest.mark.skipif(
    not tbserver.profiler_plugin_installed(),
    reason="torch-tb-profiler is not installed here (pip install -e '.[tensorboard]'; .ci/run installs it)")

# against_run's regressed case (head does 30x the base's matmuls per step) and a case only the head has
CASE_RUN, NEW_RUN = "scaled_work/smoke/eager", "newer_work/smoke/eager"
BASE_RUN = f"{CASE_RUN}/base"
WORKER = "scaled_work.smoke.eager.cpu"


@contextmanager
def serving(run_dir: Path, out: Path, python: str = sys.executable) -> Iterator[tuple[str, int]]:
    """`perfgate tensorboard RUN_DIR` run as a user runs it, until it has printed its URL: (url, pid);
    stopped with SIGTERM on the way out."""
    port = tbserver.free_port()
    url = f"http://127.0.0.1:{port}/"
    with out.open("w") as log:
        proc = subprocess.Popen([python, "-m", "perfgate", "tensorboard", str(run_dir), "--port", str(port)],
                                stdout=log, stderr=subprocess.STDOUT, env=cli_env(), cwd=REPO)
        try:
            deadline = time.monotonic() + 90
            while url not in out.read_text():
                assert proc.poll() is None and time.monotonic() < deadline, out.read_text()
                time.sleep(0.3)
            yield url, port
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=30)


def _get(url: str, **params: str) -> Any:
    """A JSON answer of the profiler plugin (some come gzip-encoded, as to a browser)."""
    with urllib.request.urlopen(f"{url}?{urllib.parse.urlencode(params)}", timeout=60) as resp:  # noqa: S310
        body = resp.read()
        return json.loads(gzip.decompress(body) if resp.headers.get("Content-Encoding") == "gzip" else body)


def _logdir_of_tensorboard(port: int) -> Path:
    """The --logdir of the TensorBoard process listening on ``port`` (read from its command line)."""
    for pid in _processes_mentioning("tensorboard.main"):
        args = Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")
        if str(port) in args:
            return Path(args[args.index("--logdir") + 1])
    raise AssertionError(f"no TensorBoard process on port {port}")


@needs_plugin
def test_profiler_plugin_shows_each_trace_and_diffs_a_regressions_base_and_head(against_run, tmp_path):
    """A compared run (`--against HEAD~1 --gate`): every head trace is a run of the PyTorch Profiler tab, the
    regression's base trace is the run <case>/base, the plugin's Diff compares them op by op, and the run
    folder is left as it was (the extra run lives in a temporary folder, removed when TensorBoard stops)."""
    run_dir = against_run.run_dir
    files_before = sorted(p.relative_to(run_dir) for p in run_dir.rglob("*"))
    with serving(run_dir, tmp_path / "out.txt") as (url, port):
        logdir = _logdir_of_tensorboard(port)
        assert logdir.is_dir() and not logdir.is_relative_to(run_dir)
        assert _profiler_runs(url, {CASE_RUN, BASE_RUN, NEW_RUN}) == [NEW_RUN, CASE_RUN, BASE_RUN]
        api = url + "data/plugin/pytorch_profiler/"
        spans = {}
        for run, folder in ((CASE_RUN, run_dir / "tb" / CASE_RUN), (BASE_RUN, run_dir / "base" / "tb" / CASE_RUN)):
            assert {"Overview", "Operator", "Trace", "Memory"} <= set(_get(api + "views", run=run))
            assert _get(api + "workers", run=run, view="Overview") == [WORKER]
            spans[run] = _get(api + "spans", run=run, worker=WORKER)[0]
            overview = _get(api + "overview", run=run, worker=WORKER, span=spans[run])
            assert overview["steps"]["rows"], overview  # the recorded ProfilerStep windows, one row each
            served = _get(api + "trace", run=run, worker=WORKER, span=spans[run])
            (trace_file,) = folder.glob("*.pt.trace.json")
            assert len(served["traceEvents"]) == len(json.loads(trace_file.read_text())["traceEvents"])
        diff = _get(api + "diff", run=BASE_RUN, worker=WORKER, span=spans[BASE_RUN],
                    exp_run=CASE_RUN, exp_worker=WORKER, exp_span=spans[CASE_RUN])
        calls = {side: {a["name"]: a["calls"] for a in diff[side]["aggs"]} for side in ("left", "right")}
        assert calls["right"]["aten::mm"] == 30 * calls["left"]["aten::mm"] > 0  # head: 30x the matmuls
    assert not logdir.exists(), "the temporary folder outlived `perfgate tensorboard`"
    assert sorted(p.relative_to(run_dir) for p in run_dir.rglob("*")) == files_before
    out = (tmp_path / "out.txt").read_text()
    assert (f"Diff scaled_work/smoke/eager/cpu: PyTorch Profiler tab, Diff panel (left, next to Normal), "
            f"baseline run {BASE_RUN}, experimental run {CASE_RUN}") in out


def test_report_says_how_to_open_a_regressions_diff_view(against_run):
    html = (against_run.run_dir / "report.html").read_text()
    regressions = html[html.index('<section id="regressions">'):]
    regressions = regressions[:regressions.index("</section>")]
    assert (f"run <code>perfgate tensorboard {against_run.run_dir}</code> and in its Diff panel (left, next to "
            f"Normal) choose the baseline run <code>{BASE_RUN}</code> and the experimental run <code>{CASE_RUN}</code>"
            ) in regressions


def _python_without_the_plugin(root: Path) -> str:
    """A real environment that lacks torch-tb-profiler: a venv whose site-packages links every entry of this
    one's but the plugin's package and its metadata (so neither an import nor TensorBoard's entry point
    finds it)."""
    venv.create(root, with_pip=False, symlinks=True)
    here = Path(sysconfig.get_paths()["purelib"])
    there = Path(subprocess.run([str(root / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                capture_output=True, text=True, check=True).stdout.strip())
    for entry in here.iterdir():
        if not entry.name.startswith("torch_tb_profiler"):
            (there / entry.name).symlink_to(entry)
    return str(root / "bin" / "python")


def test_without_the_plugin_it_says_how_to_get_it_and_serves_the_scalars(profiled_run, tmp_path):
    run_dir, _ = profiled_run
    python = _python_without_the_plugin(tmp_path / "venv")
    check = subprocess.run([python, "-c", "import importlib.util as u; print(u.find_spec('torch_tb_profiler'))"],
                           capture_output=True, text=True, env=cli_env(), timeout=60)
    assert check.stdout.strip() == "None", check.stderr
    with serving(run_dir, tmp_path / "out.txt", python) as (url, _):
        assert "pytorch_profiler" not in tbserver.fetch_json(url + "data/plugins_listing")
        assert "tight_conv/smoke/eager" in tbserver.fetch_json(url + "data/runs")
        scalars = tbserver.fetch_json(url + "data/plugin/scalars/tags")
        assert "time/step_median_s" in scalars["tight_conv/smoke/eager"]
    out = (tmp_path / "out.txt").read_text().splitlines()
    assert tbserver.NO_PLUGIN_HELP in out
    assert "pip install 'perfgate[tensorboard]'" in tbserver.NO_PLUGIN_HELP and "https://ui.perfetto.dev" in tbserver.NO_PLUGIN_HELP


def test_an_unreadable_comparison_still_serves_the_run_and_says_why_no_base(profiled_run, tmp_path):
    """The folder TensorBoard reads (tbserver.logdir_for) for a run whose comparison.json is broken: its own
    tb/, untouched, and one line saying why no base trace is shown."""
    run_dir, _ = profiled_run
    copy = tmp_path / "run"
    shutil.copytree(run_dir, copy, symlinks=True)
    (copy / "comparison.json").write_text("{ not json")
    with tbserver.logdir_for(copy) as logdir:
        assert logdir.path == copy / "tb" and not logdir.temporary and not logdir.diffs
        (note,) = logdir.notes
        assert note.startswith("base traces not shown") and "comparison.json" in note
        assert note in tbserver.traces_help(True, logdir)
    assert (copy / "tb").is_dir()
