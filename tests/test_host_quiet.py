"""A quiet host before timing (perfgate/protocol/host_quiet.py): what a worker reads as it starts timing (other
processes' CPU time, NVML's other processes on the GPU), and the gate's rule that an unpaired step-time
regression or win measured on a busy host is `inconclusive (host busy: ...)`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from dataclasses import replace

import pytest
from conftest import REPO, TEST_WORKLOADS, cli_env, run_cli
from fixtures.synthetic import synthetic_run

from perfgate.judging.compare import judge_case
from perfgate.judging.gate_settings import GateSettings, parse_gate
from perfgate.model.config import ConfigError
from perfgate.model.results import load_results
from perfgate.protocol import host_quiet
from perfgate.running.runner import write_results

QUIET = {"cpus": 2, "threads": 1, "other_cpu": 0.1, "load_1m": 0.3, "window_s": 0.2}
BUSY = {**QUIET, "other_cpu": 1.9}
ON_GPU = {**QUIET, "gpu": {"other_processes": 1, "pids": [4242], "error": None}}


def test_a_process_spinning_on_a_core_is_seen_as_other_processes_cpu_time():
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        seen = host_quiet.other_cpu(0.5)
    finally:
        spinner.kill()
        spinner.wait()
    # the spinner holds a core unless others hold both: either way others kept most of a core busy
    assert seen is not None and seen >= 0.8


def test_busy_readings_say_why_and_quiet_or_missing_ones_say_nothing():
    assert host_quiet.busy_reason([QUIET, QUIET], "auto") is None
    assert host_quiet.busy_reason(None, "auto") is None  # results from before the record
    why = host_quiet.busy_reason([QUIET, BUSY, None], "auto")
    assert why == "other processes used 1.9 CPUs (limit 1.5) at the start of 1 of 2 processes"
    assert host_quiet.busy_reason([BUSY], 2.0) is None and host_quiet.busy_reason([BUSY], None) is None
    assert "1 other process(es) on the GPU" in host_quiet.busy_reason([ON_GPU], "auto")


@pytest.mark.parametrize("value, limit", [("auto", "auto"), (0, None), ("none", None), (False, None), (3, 3.0)])
def test_max_host_load_accepts_auto_a_number_or_off(value, limit):
    assert parse_gate({"max_host_load": value}).max_host_load == limit


@pytest.mark.parametrize("value", [-1, "busy", True, float("nan")])
def test_a_bad_max_host_load_is_refused_in_one_line(value):
    with pytest.raises(ConfigError, match="max_host_load must be"):
        parse_gate({"max_host_load": value})


@pytest.mark.slow  # the real CLI
def test_a_bad_max_host_load_exits_2_with_one_line(tmp_path):
    (tmp_path / "pyproject.toml").write_text('[tool.perfgate]\n[tool.perfgate.gate]\nmax_host_load = "loud"\n')
    for name in ("a", "b"):
        write_results(synthetic_run(["a"], toggles=("eager",)), tmp_path / name / "results.json")
    proc = run_cli("compare", str(tmp_path / "a"), str(tmp_path / "b"), cwd=tmp_path, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and "max_host_load must be" in proc.stderr


def _regressed(head_host):
    key = "a/smoke/eager/cpu"
    base = synthetic_run(["a"], toggles=("eager",), seed=1).case(key)
    head = synthetic_run(["a"], toggles=("eager",), seed=1, slow={key: 1.5}).case(key)
    return key, replace(base, metadata={**base.metadata, "host": [QUIET] * 3}), \
        replace(head, metadata={**head.metadata, "host": head_host})


def test_an_unpaired_regression_measured_on_a_busy_host_is_inconclusive():
    key, base, head = _regressed([QUIET, BUSY, QUIET])
    quiet_key, quiet_base, quiet_head = _regressed([QUIET] * 3)
    assert judge_case(quiet_key, quiet_base, quiet_head, GateSettings())[0].kind == "regression"
    v = judge_case(key, base, head, GateSettings())[0]
    assert v.kind == "inconclusive"
    assert v.rule.startswith("host busy: this run: other processes used 1.9 CPUs") and "a regression" in v.rule
    assert "--against" in v.advice
    # the check off, or lockstep pairs (they share the host's moments): the regression stands
    assert judge_case(key, base, head, GateSettings(max_host_load=None))[0].kind == "regression"
    assert judge_case(key, base, head, GateSettings(), paired=True)[0].kind == "regression"


FAKE_NVML = """
    import os
    class _P:
        def __init__(self, pid): self.pid = pid
    def nvmlInit(): pass
    def nvmlShutdown(): pass
    def nvmlDeviceGetHandleByIndex(i): return i
    def nvmlDeviceGetHandleByPciBusId(b): raise RuntimeError("Not Found")
    def nvmlDeviceGetMaxClockInfo(h, kind): return 1980
    NVML_CLOCK_SM = 1
    def nvmlDeviceGetComputeRunningProcesses(h): return [_P(os.getpid()), _P(4242)]
    def nvmlDeviceGetGraphicsRunningProcesses(h): return [_P(777)]
"""


def test_a_worker_side_reading_names_the_other_processes_a_fake_nvml_reports(tmp_path):
    (tmp_path / "pynvml.py").write_text(textwrap.dedent(FAKE_NVML))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    code = ("import json; from perfgate.worker import gpu_clocks; from perfgate.protocol import host_quiet; "
            "print(json.dumps(host_quiet.read_host(1, gpu_clocks.other_gpu_processes('cuda:0'), 0.05)))")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    reading = json.loads(out.stdout.strip().splitlines()[-1])
    assert reading["gpu"] == {"other_processes": 2, "pids": [777, 4242], "error": None}
    assert host_quiet.busy_reason([reading], None) is None
    assert "2 other process(es) on the GPU at the start of 1 of 1" in host_quiet.busy_reason([reading], 99.0)


@pytest.mark.timing
@pytest.mark.slow  # a real run beside spinning processes
def test_a_real_run_on_a_host_kept_busy_records_it_and_its_regression_is_inconclusive(tmp_path):
    """The worker reads the host as it starts timing (two processes spinning on this machine's cores), the
    case keeps one reading per process, and the gate turns the unpaired regression into inconclusive."""
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(os.cpu_count() or 1)]
    try:
        out = tmp_path / "run"
        proc = subprocess.run([sys.executable, "-m", "perfgate", "run", "--workloads-dir", str(TEST_WORKLOADS),
                               "-w", "tiny", "-t", "eager", "--processes", "2", "--samples", "3", "--out", str(out)],
                              cwd=REPO, env=cli_env(), capture_output=True, text=True, timeout=300)
    finally:
        for s in spinners:
            s.kill()
            s.wait()
    assert proc.returncode == 0, proc.stdout + proc.stderr
    head = load_results(out / "results.json").cases[0]
    readings = head.metadata["host"]
    assert len(readings) == 2 and all(r["other_cpu"] >= 0.8 and r["threads"] == 1 for r in readings)
    assert "gpu" not in readings[0]  # a CPU case asks NVML nothing
    # 30x: two processes a side under spinning load give a t interval of one degree of freedom, wide
    # enough with the CPU default term (6%) that a 3x change was not significant, so not a regression
    slowed = replace(head, processes=[replace(p, samples_ns=[s * 30 for s in p.samples_ns]) for p in head.processes])
    base = replace(head, metadata={**head.metadata, "host": [QUIET, QUIET]})
    limit = min(r["other_cpu"] for r in readings) - 0.1
    v = judge_case(head.key, base, slowed, GateSettings(max_host_load=limit, adaptive=False))[0]
    assert v.kind == "inconclusive" and v.rule.startswith("host busy: this run: other processes used")
