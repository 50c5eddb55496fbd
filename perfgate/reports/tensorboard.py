"""TensorBoard scalars and hparams per case, written after a run from its results.

Each case gets the folder its profiler trace already lives in (``tb/<workload>/<size>/<toggles>/``), so
TensorBoard's Scalars and HParams dashboards list the same run names. Written with the tensorboard
package alone (imported inside the function), never torch's SummaryWriter: the orchestrator stays free of
torch.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from perfgate.model.results import STATUS_OK, CaseResult, RunResult
from perfgate.util.paths import case_tb_dir

# scalar tag -> metric name in CaseResult.metrics, for the metrics worth a chart
METRIC_TAGS = {
    "memory/peak_cuda_allocated_bytes": "peak_cuda_allocated_bytes",
    "memory/peak_cuda_reserved_bytes": "peak_cuda_reserved_bytes",
    "memory/peak_rss_bytes": "peak_rss_bytes",
    "memory/cpu_bytes_allocated_per_step": "cpu_bytes_allocated_per_step",
    "counts/aten_ops_per_step": "aten_ops_per_step",
    "counts/kernels_per_step": "kernels_per_step",
    "counts/memcpy_per_step": "memcpy_per_step",
    "counts/syncs_per_step": "syncs_per_step",
    "counts/flops_per_step": "flops_per_step",
    "counts/achieved_flops_per_s": "achieved_flops_per_s",
    "compile/graph_breaks": "graph_breaks",
    "compile/unique_graphs": "unique_graphs",
    "compile/recompiles": "recompiles",
    "compile/cold_s": "compile_cold_s",
    "compile/warm_s": "compile_warm_s",
}


def case_dir(tb_dir: Path, case: CaseResult) -> Path:
    """The case's TensorBoard run folder; the same one its profiler trace is in."""
    spec = case.spec
    return case_tb_dir(tb_dir, spec.workload, spec.size, spec.toggle_name)


def case_scalars(run: RunResult, case: CaseResult) -> dict[str, float]:
    """Every scalar written for ``case``: step time, speedup against eager, memory, counts, compile."""
    out: dict[str, float] = {}
    st = case.step_time()
    if st is not None:
        out["time/step_s"] = st.value
        out["time/step_median_s"] = st.median
        out["time/throughput_steps_per_s"] = 1.0 / st.value if st.value > 0 else 0.0
    if case.first_call_s is not None:
        out["time/first_call_s"] = case.first_call_s
    speedup = run.speedup(case)
    if speedup is not None:
        out["time/speedup_vs_eager"] = speedup.value
    for tag, name in METRIC_TAGS.items():
        if name in case.metrics:
            out[tag] = float(case.metrics[name])
    if case.accuracy.get("rel_l2") is not None:
        out["accuracy/rel_l2"] = float(case.accuracy["rel_l2"])
        out["accuracy/max_abs"] = float(case.accuracy["max_abs"])
    return out


def case_hparams(run: RunResult, case: CaseResult) -> dict[str, Any]:
    spec = case.spec
    return {
        "workload": spec.workload, "size": spec.size, "toggles": spec.toggle_name, "device": spec.device,
        "run_id": run.run_id, "accuracy": case.accuracy.get("verdict", "-"),
    }


def write_tensorboard(run: RunResult, tb_dir: Path) -> None:
    """Write scalars and an hparams record for every ok case of ``run`` under ``tb_dir`` (step 0), through
    the tensorboard package's own event writer and protos: the orchestrating process never imports torch
    (docs/architecture.md), and TensorBoard reads these files as it reads torch's SummaryWriter's."""
    from tensorboard.compat.proto import event_pb2, summary_pb2
    from tensorboard.plugins.hparams import summary_v2 as hp
    from tensorboard.summary.writer.event_file_writer import EventFileWriter

    now = time.time()
    for case in run.cases:
        if case.status != STATUS_OK:
            continue
        scalars = case_scalars(run, case)
        hparams = case_hparams(run, case)
        # the hparams record in the case's own folder, so HParams rows are the same runs as Scalars
        summaries = [hp.hparams_config_pb(hparams=[hp.HParam(k) for k in hparams],
                                          metrics=[hp.Metric(tag) for tag in scalars], time_created_secs=now),
                     hp.hparams_pb(hparams, trial_id=f"{run.run_id}/{case.key}", start_time_secs=now),
                     summary_pb2.Summary(value=[summary_pb2.Summary.Value(tag=tag, simple_value=float(value))
                                                for tag, value in scalars.items()])]
        writer = EventFileWriter(str(case_dir(tb_dir, case)))
        try:
            for summary in summaries:
                writer.add_event(event_pb2.Event(wall_time=now, step=0, summary=summary))
        finally:
            writer.close()
