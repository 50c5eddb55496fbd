"""Runs cases: each case's worker processes back to back (or side by side in lockstep pairs), their results
joined into the case's CaseResult, and results.json rewritten atomically after every case.

No torch and no workload is ever imported here: a crash, hang or out-of-memory in one case cannot take
the orchestrator or the other cases with it (the processes themselves: perfgate.running.workers).
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from perfgate.judging import expect
from perfgate.model.config import Settings
from perfgate.model.results import (
    STATUS_FAILED,
    STATUS_OK,
    STATUS_SKIPPED,
    CaseResult,
    CaseSpec,
    ProcessSamples,
    RunResult,
    SchemaError,
)
from perfgate.protocol import layout, lockstep
from perfgate.running.inherit import THIS_INTERPRETER, Interpreter
from perfgate.running.run_folders import run_work_dir
from perfgate.running.workers import ProcessOutcome, WorkerHandle, run_worker, start_worker
from perfgate.util.storage import atomic_write_text


@dataclass
class LockstepJob:
    """One side of a lockstep pair: its worker config, environment, folder and scratch folder."""

    cfg: dict[str, Any]
    work_dir: Path
    env_extra: dict[str, str] | None = None
    cwd: Path | None = None
    interpreter: Interpreter = THIS_INTERPRETER


def shared_cpus(threads: int, rotate: int = 0) -> list[int] | None:
    """``threads`` CPUs of those this process may use, starting at the ``rotate``-th; None where there is
    nothing to choose (all of them needed, or no CPU affinity on this platform)."""
    if not hasattr(os, "sched_getaffinity"):
        return None
    allowed = sorted(os.sched_getaffinity(0))
    if threads >= len(allowed):
        return None
    k = rotate % len(allowed)
    return (allowed[k:] + allowed[:k])[:threads]


def run_lockstep(jobs: Sequence[LockstepJob], settings: Settings, rotate: int = 0) -> list[ProcessOutcome]:
    """Run worker processes side by side, sampling in turns (perfgate.protocol.lockstep): they start, compile and warm
    up together, then sample the same moments of the machine, **on the same CPUs** (a virtual CPU's speed
    changes over seconds on its own, with what else runs on its host core: two processes on two vCPUs
    see two different machines). ``rotate`` picks which CPUs, so successive pairs visit all of them.
    The pair gets the per-process timeout once for start-up and once more for sampling in turns, as two
    processes one after the other would."""
    handles: list[WorkerHandle] = []
    channels: list[lockstep.Channel] = []
    cpus = shared_cpus(settings.threads, rotate)
    timeout_s = settings.timeout_s * len(jobs)
    t = settings.timing
    # one try for starting and driving: a side that fails to start (a fork server gone, no fds left) must
    # not leave the side already started running, nor any pipe open
    try:
        for job in jobs:
            to_worker_r, to_worker_w = os.pipe()
            try:
                from_worker_r, from_worker_w = os.pipe()
            except BaseException:
                os.close(to_worker_r)
                os.close(to_worker_w)
                raise
            channels.append(lockstep.Channel(from_worker_r, to_worker_w))  # the orchestrator's ends
            cfg = {**job.cfg, "lockstep": {"read_fd": to_worker_r, "write_fd": from_worker_w}, "cpus": cpus}
            try:
                handles.append(start_worker(cfg, settings.threads, job.work_dir, job.env_extra, job.cwd,
                                            pass_fds=(to_worker_r, from_worker_w), interpreter=job.interpreter))
            finally:
                os.close(to_worker_r)
                os.close(from_worker_w)
        deadline = time.perf_counter() + timeout_s
        sides = lockstep.drive(channels, samples=t.samples, min_time_s=t.min_time_s, max_time_s=t.max_time_s,
                               deadline=deadline)
        finish_by = time.perf_counter() + settings.timeout_s
        return [h.timed_out(timeout_s) if side.timed_out else h.finish(timeout_s, finish_by - time.perf_counter())
                for h, side in zip(handles, sides, strict=True)]
    finally:
        for c in channels:
            c.close()
        for h in handles:
            if h.proc.poll() is None:  # only when something above raised: its files go with it
                h.abandon()


def case_config(spec: CaseSpec, workload_file: str, settings: Settings, process_index: int,
                run_dir: Path, profile: bool) -> dict[str, Any]:
    return {
        "spec": spec.to_json(),
        "workload_file": workload_file,
        "process_index": process_index,
        "layout": layout.draw(process_index).to_json(),
        "threads": settings.threads,
        "seed": settings.seed,
        "max_memory_mb": settings.max_memory_mb,
        **({"device_memory_gb": settings.device_memory_gb} if settings.device_memory_gb else {}),
        # "layouts" only when it asks for more than one: a worker of an older perfgate (an --against base)
        # does not know the key, and lockstep pairs, the only runs that reach one, never regroup
        "timing": {k: v for k, v in settings.timing.__dict__.items() if k != "layouts" or v != 1},
        "run_dir": str(run_dir),
        "profile": profile,
    }


COMPILE_CACHE_FRESH, COMPILE_CACHE_COLD, COMPILE_CACHE_WARM = "fresh", "persistent-cold", "persistent-warm"


def compile_cache_env(run_dir: Path, spec: CaseSpec, persistent: Path | None = None) -> tuple[dict[str, str], str]:
    """The case's compiler caches (as worker environment) and how they start.

    Without ``persistent`` (the ``compile_cache`` setting): a cache of the case's own under the run folder,
    emptied now, so process 0 compiles cold ("fresh"), even when a case is measured again in this run.
    With it: the case's part of that folder, kept between runs: "persistent-warm" when it holds earlier
    compiles, else "persistent-cold"."""
    slug = spec.key.replace("/", "__").replace("+", "_")
    if persistent is None:
        base = run_dir / ".work" / "compile-cache" / slug
        shutil.rmtree(base, ignore_errors=True)
        state = COMPILE_CACHE_FRESH
    else:
        base = persistent / slug
        state = COMPILE_CACHE_WARM if base.is_dir() and any(base.iterdir()) else COMPILE_CACHE_COLD
    return {"TORCHINDUCTOR_CACHE_DIR": str(base / "inductor"), "TRITON_CACHE_DIR": str(base / "triton")}, state


def case_from_results(spec: CaseSpec, results: Sequence[dict[str, Any]], processes: int, t0: float,
                      cache_state: str) -> CaseResult:
    """One case's CaseResult from its worker processes' results, in process order: the first that did not
    end ok ends the case (skipped or failed); the first carries metrics, profile and accuracy."""
    samples: list[ProcessSamples] = []
    results = list(results)
    for i, r in enumerate(results):
        if r.get("status") != STATUS_OK:
            continue
        try:
            samples.append(ProcessSamples.from_json(r.get("process"), "the worker's result"))
        except SchemaError as exc:  # what workload code made of it (a unit of -3 steps): this case fails, not the run
            results[i] = {"status": STATUS_FAILED, "failure_class": "error", "message": str(exc)}
    bad = next((i for i, r in enumerate(results) if r.get("status") != STATUS_OK), None)
    if bad is not None:
        res = results[bad]
        status = res.get("status", STATUS_FAILED)
        return CaseResult(spec=spec, status=status, failure_class=res.get("failure_class"), message=res.get("message"),
                          processes=samples[:bad], duration_s=time.perf_counter() - t0,
                          metadata={"failed_process": bad} if status == STATUS_FAILED else {})
    first = results[0]
    metadata = dict(first.get("metadata", {}))
    metadata["processes"] = processes
    hosts = [r.get("metadata", {}).get("host") for r in results]
    if any(h is not None for h in hosts):  # one reading per process: was the host quiet (perfgate.protocol.host_quiet)
        metadata["host"] = hosts
    metrics = dict(first.get("metrics", {}))
    compile_s = [float(r["compile"]["compile_s"]) for r in results if "compile" in r]
    if compile_s:
        metadata["compile_cache"] = cache_state
        # process 0 compiles cold only into an empty cache; process 1 always finds it warm
        names = ("compile_warm_s",) if cache_state == COMPILE_CACHE_WARM else ("compile_cold_s", "compile_warm_s")
        metrics.update(zip(names, compile_s, strict=False))
    return CaseResult(spec=spec, status=STATUS_OK, processes=samples, metrics=metrics,
                      profile=first.get("profile", {}), accuracy=first.get("accuracy", {}),
                      duration_s=time.perf_counter() - t0, metadata=metadata)


def run_case(spec: CaseSpec, workload_file: str, settings: Settings, run_dir: Path,
             env_extra: dict[str, str] | None = None,
             configure: Callable[[dict[str, Any]], None] | None = None, sampler: Any = None) -> CaseResult:
    """The worker processes of one case, back to back. A skip or failure in any process ends the case.

    Without ``sampler``: ``settings.processes`` of them. With one (perfgate.judging.sequential.Sampler): its first
    look's count, then as many more as it asks for after each look; what it decided goes into the case's
    ``metadata["sampling"]``."""
    t0 = time.perf_counter()
    cache_env, cache_state = compile_cache_env(run_dir, spec, settings.compile_cache)
    env_extra = {**cache_env, **(env_extra or {})}
    results: list[dict[str, Any]] = []
    target: int | None = sampler.first if sampler is not None else settings.processes
    while target is not None:
        while len(results) < target:
            cfg = case_config(spec, workload_file, settings, len(results), run_dir, profile=not results)
            if configure:
                configure(cfg)
            results.append(run_worker(cfg, settings.timeout_s, settings.threads, run_work_dir(run_dir), env_extra).result)
            if results[-1].get("status") != STATUS_OK:
                break
        case = case_from_results(spec, results, len(results), t0, cache_state)
        if sampler is None or case.status != STATUS_OK:
            if sampler is not None:
                sampler.end(f"a process ended {case.status}")
            target = None
        else:
            target = sampler.next_target(len(results), time.perf_counter() - t0, case)
    if sampler is not None:
        case.metadata["sampling"] = sampler.record(len(case.processes), time.perf_counter() - t0)
    return case


Progress = Callable[[str, int, int, CaseSpec, CaseResult | None, float], None]


def write_results(run: RunResult, path: Path) -> None:
    """Write ``run`` as results.json at ``path``, atomically, its expectations judged on its cases now."""
    atomic_write_text(path, expect.judge(run).dumps())


def execute(cases: Sequence[CaseSpec], workload_files: dict[str, str], settings: Settings, run: RunResult,
            run_dir: Path, progress: Progress | None = None,
            after_case: Callable[[RunResult], None] | None = None,
            sampler_for: Callable[[CaseSpec], Any] | None = None) -> RunResult:
    """Run every case, rewriting results.json atomically after each one. Returns the completed run.
    ``sampler_for(spec)``: each case's perfgate.judging.sequential.Sampler (how many processes it gets)."""
    results_path = run_dir / "results.json"
    write_results(run, results_path)
    t0 = time.perf_counter()
    for k, spec in enumerate(cases, start=1):
        if progress:
            progress("start", k, len(cases), spec, None, time.perf_counter() - t0)
        result = run_case(spec, workload_files[spec.workload], settings, run_dir,
                          sampler=sampler_for(spec) if sampler_for else None)
        run = run.with_case(result)
        write_results(run, results_path)
        if after_case:
            after_case(run)
        if progress:
            progress("done", k, len(cases), spec, result, time.perf_counter() - t0)
    return run


def summary_status(run: RunResult) -> str:
    counts = run.counts()
    return ", ".join(f"{counts[s]} {s}" for s in (STATUS_OK, STATUS_SKIPPED, STATUS_FAILED) if counts[s])
