"""Fault injection: test-only workloads that raise, hang, abort, run out of memory, hit an unsupported op or
fail to compile. Each must come back classified, and the healthy cases of the same run must still finish."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from conftest import REPO, TEST_WORKLOADS, run_cli

from perfgate.model.results import CaseSpec
from perfgate.running.runner import case_from_results
from perfgate.running.workers import LOG_TAIL_BYTES, WorkerHandle, _bounded_message, _classify_death

EXPECTED = {
    "fault_raise": ("error", "ValueError: boom"),
    "fault_hang": ("timeout", "exceeded the 12 s timeout"),
    "fault_abort": ("crash", "SIGABRT"),
    "fault_oom": ("oom", "can't allocate memory"),
    "fault_unsupported": ("unsupported", "clamp is not supported for complex types"),
    "fault_compile": ("compile-error", "InvalidBackend"),
    "fault_not_tensor": ("error", "workload 'fault_not_tensor': step returned str 'not a tensor', not a tensor"),
    "fault_none_later": ("error", "workload 'fault_none_later': step returned NoneType None, not a tensor"),
    # the worker is in a session of its own: no terminal's Ctrl-C reaches it, the workload raised this one
    "fault_interrupt": ("error", "KeyboardInterrupt: raised by fault_interrupt's step"),
    "fault_huge_message": ("error", "ValueError: yyyy"),
    # its worker's result used to stop the whole run (exit 2: "process.steps_per_unit must be an integer >= 1")
    "fault_no_steps": ("error", "workload 'fault_no_steps': steps_per_unit returned int -3, not an integer >= 1"),
    "fault_no_loss": ("error", "workload 'fault_no_loss': loss() returned NoneType None, not a one-element tensor "
                               "that requires grad"),
}
HEALTHY = ("tiny", "operator_rollout", "hostile_metrics_threads")


@pytest.fixture(scope="module")
def fault_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("faults") / "run"
    # healthy cases first and last: the run must go on past every failure. The timeout covers the worker
    # start (a fork of a server that imported torch) too: 12 s is 6x a healthy case here.
    proc = run_cli("run", "--workloads-dir", str(TEST_WORKLOADS), "-w", "tiny", "-w", "fault_*",
                   "-w", "operator_rollout", "-w", "hostile_*", "-t", "eager", "--processes", "1", "--samples", "3",
                   "--timeout", "12", "--max-memory-mb", "1500", "--out", str(out))
    data = json.loads((out / "results.json").read_text())
    return proc, {c["spec"]["workload"]: c for c in data["cases"]}, out


@pytest.mark.slow
def test_the_run_goes_on_and_exits_0(fault_run):
    proc, cases, _ = fault_run
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    assert all(cases[w]["status"] == "ok" for w in HEALTHY)
    assert len(cases) == len(HEALTHY) + len(EXPECTED)


@pytest.mark.parametrize("workload", sorted(EXPECTED))
@pytest.mark.slow
def test_each_fault_is_classified_with_its_error_tail(fault_run, workload):
    _, cases, _ = fault_run
    failure_class, needle = EXPECTED[workload]
    case = cases[workload]
    assert case["status"] == "failed"
    assert case["failure_class"] == failure_class
    assert needle in case["message"]
    assert case["processes"] == [] and case["derived"] == {}


@pytest.mark.slow
def test_a_workload_that_breaks_the_api_fails_with_one_line_naming_it(fault_run):
    _, cases, _ = fault_run
    for workload in ("fault_no_loss", "fault_not_tensor", "fault_no_steps"):
        message = cases[workload]["message"]
        assert message.startswith(f"workload {workload!r}: ") and "\n" not in message, message


@pytest.mark.slow
def test_the_table_shows_the_failure_classes(fault_run):
    proc, _, _ = fault_run
    for failure_class, _ in EXPECTED.values():
        assert f"[{failure_class}]" in proc.stdout


@pytest.mark.slow
def test_messages_stay_short_whatever_the_workload_raised(fault_run):
    """A 10 MB exception message used to go whole into results.json, junit.xml and the console."""
    _, cases, _ = fault_run
    assert all(len(c.get("message") or "") < 20_000 for c in cases.values())
    assert "more characters]" in cases["fault_huge_message"]["message"]


@pytest.mark.slow
def test_metrics_results_json_cannot_hold_are_left_out_and_said(fault_run, tmp_path):
    """A string or tensor returned by metrics() used to be written as a string, and `perfgate report`
    then refused the run's results.json ("must be a number"); NaN made it JSON other tools refuse."""
    _, cases, out = fault_run
    case = cases["hostile_metrics_threads"]
    assert not {"s", "t", "n", "(1, 2)"} & set(case["metrics"])
    left_out = case["metadata"]["metrics_left_out"]
    assert len(left_out) == 4 and all("hostile_metrics_threads" in line for line in left_out)
    assert all(len(line) < 1000 for line in left_out)
    proc = run_cli("report", str(out), "--out", str(tmp_path))
    assert proc.returncode == 0, proc.stderr


@pytest.mark.slow
def test_threads_a_workload_sets_in_build_are_pinned_back_and_recorded(fault_run):
    """torch.set_num_threads(4) in build used to hold for the samples while the case said 1 thread."""
    _, cases, _ = fault_run
    case = cases["hostile_metrics_threads"]
    assert case["metrics"]["threads_in_steps"] == 1.0
    assert case["metadata"]["threads"] == 1
    assert case["metadata"]["threads_changed_by_workload"] == {"build": 4}


def test_a_python_memory_error_under_the_cap_is_oom():
    """limit_memory() is what the worker applies for --max-memory-mb; a host MemoryError is then `oom`."""
    code = ("from perfgate.worker.main import classify, limit_memory\n"
            "limit_memory(256)\n"
            "try:\n    bytearray(2**30)\nexcept MemoryError as exc:\n    print(classify(exc))\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "oom", out.stderr


@pytest.mark.parametrize("returncode,stderr,expected", [
    (-6, "", ("crash", "worker killed by SIGABRT")),
    (-11, "Fatal Python error: Segmentation fault", ("crash", "worker killed by SIGSEGV")),
    (-9, "", ("crash", "often the kernel's out-of-memory killer")),
    (1, "MemoryError", ("oom", "MemoryError")),
    (3, "", ("crash", "worker exited with code 3 without a result")),
])
def test_deaths_the_worker_cannot_report(returncode, stderr, expected):
    failure_class, message = _classify_death(returncode, stderr)
    assert failure_class == expected[0] and expected[1] in message


def test_a_worker_that_printed_megabytes_is_read_from_its_end_only(tmp_path):
    """The runner read a dead worker's whole log, and put a 20 MB line of it into the case's message."""
    log = tmp_path / "case.log"
    log.write_text("o" * 20_000_000 + "\nFatal: the last words\n")
    stderr = WorkerHandle(None, "", "", str(log), 0.0)._stderr()
    assert len(stderr) <= LOG_TAIL_BYTES and stderr.endswith("the last words\n")
    failure_class, message = _classify_death(3, stderr)
    assert failure_class == "crash" and len(message) < 20_000 and message.endswith("Fatal: the last words")


def test_a_result_message_is_kept_to_a_size_a_report_can_carry():
    result = {"status": "failed", "failure_class": "error", "message": "z" * 1_000_000}
    bounded = _bounded_message(result)
    assert len(bounded["message"]) < 20_000 and bounded["message"].endswith("more characters]")
    assert bounded["failure_class"] == "error" and _bounded_message({"status": "ok"}) == {"status": "ok"}


def test_a_worker_result_the_run_cannot_read_fails_its_case_not_the_run():
    """A result the data model refuses (what workload code made of a field) raised SchemaError out of the
    run loop: `perfgate run` stopped with exit 2 and the cases after it were never run."""
    spec = CaseSpec("w", "smoke", ("eager",), "cpu")
    good = {"samples_ns": [100, 110], "loops": 1, "steps_per_unit": 1, "first_call_s": 0.1, "warmup_units": 3,
            "timer": "perf_counter_ns"}
    results = [{"status": "ok", "process": good}, {"status": "ok", "process": {**good, "steps_per_unit": -3}}]
    case = case_from_results(spec, results, 2, 0.0, "fresh")
    assert case.status == "failed" and case.failure_class == "error"
    assert "steps_per_unit must be an integer >= 1, got -3" in case.message
    assert len(case.processes) == 1 and case.metadata == {"failed_process": 1}
    assert case_from_results(spec, [{"status": "ok"}], 1, 0.0, "fresh").failure_class == "error"
