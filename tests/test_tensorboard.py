"""TensorBoard: scalars written after a run, read back with TensorBoard's own event reader, and a real
TensorBoard process serving the run (perfgate/exporters/tensorboard.py, perfgate/tbserver.py)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import REPO, cli_env, run_cli

from perfgate import tbserver
from perfgate.model import load_results

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


def _processes_mentioning(text: str) -> list[int]:
    pids = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            if text in (proc / "cmdline").read_bytes().decode(errors="replace"):
                pids.append(int(proc.name))
        except OSError:
            continue
    return pids


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
            deadline, runs = time.monotonic() + 60, []
            while time.monotonic() < deadline and "tight_conv/smoke/eager" not in runs:
                runs = tbserver.fetch_json(url + "data/plugin/pytorch_profiler/runs").get("runs", [])
                time.sleep(0.5)
            assert "tight_conv/smoke/eager" in runs
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
        log.close()
    out = (tmp_path / "out.txt").read_text()
    assert url in out
    assert "ui.perfetto.dev" in out
    deadline = time.monotonic() + 10
    while _processes_mentioning(str(run_dir / "tb")) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _processes_mentioning(str(run_dir / "tb")), "TensorBoard outlived `perfgate tensorboard`"


def test_tensorboard_command_rejects_a_run_without_traces(tmp_path):
    proc = run_cli("tensorboard", str(tmp_path), "--port", "0")
    assert proc.returncode == 2
    assert "no TensorBoard folder" in proc.stderr
