"""Lockstep sampling (perfgate.protocol.lockstep, runner.run_lockstep): the protocol over real pipes, then real
worker processes side by side, one of them failing or hanging."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest
from conftest import TEST_WORKLOADS

from perfgate.model.config import Settings, TimingSettings
from perfgate.model.results import CaseSpec
from perfgate.protocol import lockstep
from perfgate.running import runner, workers


def pipe_pair() -> tuple[lockstep.Channel, lockstep.Channel]:
    """(orchestrator's end, worker's end) of two pipes."""
    to_w_r, to_w_w = os.pipe()
    from_w_r, from_w_w = os.pipe()
    return lockstep.Channel(from_w_r, to_w_w), lockstep.Channel(to_w_r, from_w_w)


def test_drive_alternates_turns_and_stops_when_both_have_enough():
    log: list[tuple[str, int]] = []
    served: dict[str, list[int]] = {}
    ends, threads = [], []
    for name, sample_ns in (("A", 1_000_000.0), ("B", 4_000_000.0)):
        mine, theirs = pipe_pair()
        ends.append(mine)

        def worker(name=name, ch=theirs, sample_ns=sample_ns):
            def take(n):
                log.append((name, n))
                return [int(sample_ns)] * n
            served[name] = lockstep.serve(ch, sample_ns, take, lambda: log.append((name, 0)))
        threads.append(threading.Thread(target=worker))
    for t in threads:
        t.start()
    sides = lockstep.drive(ends, samples=10, min_time_s=0.1, max_time_s=30, deadline=time.perf_counter() + 30,
                           burst_s=0.02)
    for t in threads:
        t.join(5)
    timed = [(n, k) for n, k in log if k]
    # a burst of ~20 ms each: 20 samples of 1 ms, 5 of 4 ms; turns A B, B A, A B ...
    assert timed[:4] == [("A", 20), ("B", 5), ("B", 5), ("A", 20)]
    assert [n for n, k in log if k == 0][:4] == ["A", "B", "B", "A"]  # a re-warm unit before every burst
    # enough when both have >= 10 samples and >= 0.1 s: B needs 0.1 s / 20 ms = 5 bursts
    assert len(sides[0].bursts) == len(sides[1].bursts) == 5
    assert served["A"] == [20] * 5 and served["B"] == [5] * 5
    assert all(s.ready and not s.done and not s.timed_out for s in sides)


def test_a_side_that_never_gets_ready_stops_the_other():
    a, a_worker = pipe_pair()
    b, b_worker = pipe_pair()
    a_worker.close()  # A skipped or failed before warm-up: its pipe closes without "ready"
    result = {}
    t = threading.Thread(target=lambda: result.update(
        b=lockstep.serve(b_worker, 1e6, lambda n: [1_000_000] * n, lambda: None)))
    t.start()
    sides = lockstep.drive([a, b], samples=10, min_time_s=0.1, max_time_s=30, deadline=time.perf_counter() + 30)
    t.join(5)
    assert sides[0].done and not sides[0].ready
    assert sides[1].ready and sides[1].bursts == [] and result["b"] == []  # told to stop, no burst taken


def test_a_side_that_hangs_is_timed_out():
    a, a_worker = pipe_pair()  # A never answers
    sides = lockstep.drive([a], samples=10, min_time_s=0.1, max_time_s=30, deadline=time.perf_counter() + 0.3)
    assert sides[0].timed_out
    a_worker.close()


def settings(timeout_s: float = 120.0) -> Settings:
    return Settings(root=Path("."), source=None, workloads_dirs=(TEST_WORKLOADS,), baselines_dir=Path("b"),
                    reports_dir=Path("r"), timeout_s=timeout_s,
                    timing=TimingSettings(samples=8, min_time_s=0.2))


def job(tmp_path: Path, workload: str, index: int) -> runner.LockstepJob:
    spec = CaseSpec(workload=workload, size="smoke", toggles=("eager",), device="cpu",
                    params=(("steps", 2), ("n", 8)))
    cfg = runner.case_config(spec, str(TEST_WORKLOADS / "faults.py"), settings(), index, tmp_path, profile=False)
    return runner.LockstepJob(cfg, tmp_path / ".work")


@pytest.mark.slow
def test_real_workers_sample_in_turns_on_the_same_cpus(tmp_path):
    outs = runner.run_lockstep([job(tmp_path, "tiny", 0), job(tmp_path, "tiny", 1)], settings(), rotate=1)
    a, b = (o.result for o in outs)
    assert a["status"] == b["status"] == "ok", (a, b)
    pa, pb = a["process"], b["process"]
    assert pa["bursts"] and len(pa["bursts"]) == len(pb["bursts"])
    assert sum(pa["bursts"]) == len(pa["samples_ns"]) >= 8
    assert sum(pa["samples_ns"]) >= 0.2e9 or len(pa["bursts"]) >= 3
    assert not list((tmp_path / ".work").glob("case-*"))  # scratch files cleaned up
    if hasattr(os, "sched_getaffinity") and len(os.sched_getaffinity(0)) > 1:
        assert runner.shared_cpus(1, 1) == [sorted(os.sched_getaffinity(0))[1]]


@pytest.mark.parametrize("fault, failure_class, timeout_s", [("fault_raise", "error", 120.0),
                                                             ("fault_hang", "timeout", 3.0)])
@pytest.mark.slow
def test_one_failing_worker_ends_the_pair_cleanly(tmp_path, fault, failure_class, timeout_s):
    s = settings(timeout_s)
    outs = runner.run_lockstep([job(tmp_path, "tiny", 0), job(tmp_path, fault, 0)], s)
    ok, bad = (o.result for o in outs)
    assert bad["status"] == "failed" and bad["failure_class"] == failure_class, bad
    assert ok["status"] == "ok" and ok["process"]["bursts"] == []  # stopped before any burst
    assert all(o.returncode is not None or o.result["failure_class"] == "timeout" for o in outs)


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts open fds in /proc/self/fd (Linux)")
@pytest.mark.slow
def test_a_side_that_fails_to_start_leaves_no_worker_and_no_pipe(tmp_path, monkeypatch):
    """The second side cannot start (a fork server gone, no fds left): the first, already running, is ended
    with its files, and neither side's pipes stay open in the orchestrator."""
    real_start, started = workers.start_worker, []

    def start_worker(*args, **kwargs):
        if started:
            raise OSError(24, "Too many open files")
        started.append(real_start(*args, **kwargs))
        return started[-1]

    monkeypatch.setattr(runner, "start_worker", start_worker)
    fds_before = set(os.listdir("/proc/self/fd"))
    with pytest.raises(OSError):
        runner.run_lockstep([job(tmp_path, "tiny", 0), job(tmp_path, "tiny", 1)], settings())
    (first,) = started
    assert first.proc.poll() is not None  # ended, not left to sample alone until perfgate exits
    workers.close_zygotes(tmp_path)  # the fork server this run started, and its socket
    assert set(os.listdir("/proc/self/fd")) <= fds_before
    assert not list((tmp_path / ".work").glob("case-*"))
