"""TensorBoard: scalars written after a run, read back with TensorBoard's own event reader, and a real
TensorBoard process serving the run (perfgate/exporters/tensorboard.py, perfgate/tbserver.py)."""

from __future__ import annotations

import time

from conftest import run_cli

from perfgate import tbserver
from perfgate.model import load_results


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


def test_tensorboard_serves_the_run(profiled_run):
    run_dir, _ = profiled_run
    tb = tbserver.start(run_dir / "tb", port=tbserver.free_port(), wait_s=60)
    try:
        plugins = tbserver.fetch_json(tb.url + "data/plugins_listing")
        assert "scalars" in plugins
        assert "tight_conv/smoke/eager" in tbserver.fetch_json(tb.url + "data/runs")
        if tbserver.profiler_plugin_installed():
            assert "pytorch_profiler" in plugins
            deadline, runs = time.monotonic() + 60, []
            while time.monotonic() < deadline and "tight_conv/smoke/eager" not in runs:
                runs = tbserver.fetch_json(tb.url + "data/plugin/pytorch_profiler/runs").get("runs", [])
                time.sleep(0.5)
            assert "tight_conv/smoke/eager" in runs
    finally:
        tb.stop()
    assert tb.process.poll() is not None


def test_tensorboard_command_rejects_a_run_without_traces(tmp_path):
    proc = run_cli("tensorboard", str(tmp_path), "--port", "0")
    assert proc.returncode == 2
    assert "no TensorBoard folder" in proc.stderr
