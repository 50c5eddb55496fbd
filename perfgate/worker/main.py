"""The measuring process: ``python -m perfgate.worker.main``. One process per case and repetition.

  --probe [--workloads-dir D]... [--out OUT.json]
                                   print the catalog (workloads, toggles, torch environment) as JSON,
                                   or write it to OUT.json
  --case SPEC.json --out OUT.json  measure one case; write one process result to OUT.json

The worker always writes its result file when it can, failures included (classified here); the runner
classifies what the worker cannot report itself (timeouts, signals, a dead interpreter).
"""

from __future__ import annotations

import argparse
import functools
import gc
import json
import math
import numbers
import os
import platform
import random
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from perfgate.protocol import host_quiet
from perfgate.protocol import layout as layout_mod
from perfgate.protocol.zygote_protocol import FORKED_ENV, LOCKSTEP_FDS_ENV
from perfgate.util.storage import atomic_write_json
from perfgate.worker import gpu_clocks, zygote_server

TAIL_LINES = 25
LINE_CHARS = 500  # of one line of a message from workload code


def torch_environment() -> dict[str, Any]:
    """The torch side of the environment fingerprint; every CUDA call guarded (CPU builds vary)."""
    import torch

    env: dict[str, Any] = {
        "torch": torch.__version__,
        "torch_cuda": getattr(torch.version, "cuda", None),
        "cudnn": None,
        "cuda_available": False,
        "device_name": None,
        "compute_capability": None,
        "gpu_count": 0,
    }
    try:
        env["cudnn"] = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    except Exception:
        pass
    try:
        env["cuda_available"] = bool(torch.cuda.is_available())
        if env["cuda_available"]:
            env["gpu_count"] = torch.cuda.device_count()
            env["device_name"] = torch.cuda.get_device_name(0)
            major, minor = torch.cuda.get_device_capability(0)
            env["compute_capability"] = f"{major}.{minor}"
    except Exception as exc:
        env["cuda_error"] = str(exc)
    return env


PACKAGES_MAX = 5000  # distributions recorded at most (an environment's list is data, not a dump)


def python_environment() -> dict[str, Any]:
    """The interpreter and the distributions it imports (``name==version``, names normalized as pip does,
    sorted; of two installs of one name the one first on sys.path): what `run --base-python` names when two
    environments differ (perfgate.model.environment_keys.package_diff)."""
    import re
    from importlib import metadata

    versions: dict[str, str] = {}
    for dist in metadata.distributions():
        try:
            name, version = dist.metadata["Name"], dist.version
        except Exception:  # noqa: BLE001 - a broken distribution's metadata: left out, not a failed probe
            continue
        if isinstance(name, str) and name and isinstance(version, str):
            versions.setdefault(re.sub(r"[-_.]+", "-", name).lower(), version)
    return {"python": platform.python_version(), "python_implementation": platform.python_implementation(),
            "packages": [f"{k}=={v}" for k, v in sorted(versions.items())][:PACKAGES_MAX]}


def probe(workloads_dirs: list[str], toggles_here: bool = False) -> dict[str, Any]:
    """The catalog; with ``toggles_here``, each toggle's ``unmet_here`` on this machine (`perfgate list` and
    `doctor` print it; asking whether dynamo runs here imports it, about 2 s, which a run need not pay)."""
    # every module a case needs: an environment that lacks one of their packages fails here, with one line
    from perfgate.model import results as model  # noqa: F401
    from perfgate.worker import measure, toggles  # noqa: F401
    from perfgate.worker.discovery import discover

    found = discover(workloads_dirs)
    env = torch_environment()
    workloads = {}
    for name, (cls, path) in sorted(found.workloads.items()):
        # a case's toggles are the registry's and the workload's variants in one list: a variant of a
        # toggle's name would be taken for the toggle
        clash = sorted(set(cls.variants) & set(toggles.TOGGLES_BY_NAME))
        if clash:
            found.errors.append({"file": str(path), "error": f"{path}: workload {name!r}: variant {clash[0]!r} "
                                                             "has the name of a perfgate toggle"})
            continue
        info = cls.describe()
        info["file"] = str(path)
        workloads[name] = info
    toggle_list = toggles.catalog()
    for t in toggle_list if toggles_here else ():
        # availability on the default device of this machine
        device = "cuda" if env["cuda_available"] else "cpu"
        t["unmet_here"] = toggles.unavailable_here(t["name"], device)
    return {
        "environment": env,
        "workloads": workloads,
        "workload_errors": found.errors,
        "toggles": toggle_list,
    }


def classify(exc: BaseException) -> str:
    """Failure class of an exception raised while building, compiling or running a case."""
    text = f"{type(exc).__name__}: {exc}"
    module = type(exc).__module__ or ""
    if isinstance(exc, MemoryError) or type(exc).__name__ == "OutOfMemoryError":
        return "oom"
    lowered = text.lower()
    if "out of memory" in lowered or "can't allocate memory" in lowered or "cannot allocate memory" in lowered:
        return "oom"
    from perfgate.worker.toggles import ToggleUnsupported

    if isinstance(exc, ToggleUnsupported):  # tried and found impossible here (a failed CUDA graph capture)
        return "unsupported"
    if module.startswith(("torch._dynamo", "torch._inductor", "torch.jit", "torch._C._jit")) or "torchscript" in lowered:
        return "compile-error"
    if isinstance(exc, NotImplementedError) or "not implemented for" in lowered or "not supported" in lowered:
        return "unsupported"
    frames = traceback.extract_tb(exc.__traceback__)
    if any("/torch/_inductor/" in f.filename or "/torch/_dynamo/" in f.filename for f in frames) and (
        "compile" in lowered or "lowering" in lowered or "backend" in lowered
    ):
        return "compile-error"
    return "error"


def clip_line(line: str, chars: int = LINE_CHARS) -> str:
    """``line`` cut to ``chars`` characters, saying how much was left out."""
    return line if len(line) <= chars else f"{line[:chars]}... [{len(line) - chars} more characters]"


def error_tail(exc: BaseException, lines: int = TAIL_LINES) -> str:
    """The last ``lines`` lines of ``exc``'s traceback, each cut to LINE_CHARS: a workload's exception
    message may be megabytes, and it goes into results.json, the reports and the console."""
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)).rstrip().splitlines()
    return "\n".join(clip_line(line) for line in text[-lines:])


def _set_threads(n: int) -> None:
    import torch

    torch.set_num_threads(n)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:  # already set (parallel work started): harmless for timing
        pass


def _threads_kept(n: int, where: str, changed: dict[str, int], repin: bool) -> None:
    """Whether workload code changed torch's thread count from the pinned ``n`` (``torch.set_num_threads``
    in build or step): recorded in ``changed`` under ``where``; ``repin``: pinned back to ``n``, so the
    samples run on the threads the run says (a change inside the steps cannot be undone: recorded only)."""
    import torch

    seen = torch.get_num_threads()
    if seen != n:
        changed[where] = seen
        if repin:
            torch.set_num_threads(n)


def _workload_metrics(workload: Any, built: Any) -> tuple[dict[str, float], list[str]]:
    """What ``workload.metrics(built)`` returned that results.json can hold (metric names to finite numbers),
    and one line per entry left out: a string, a tensor or NaN there made the run's results.json one that
    ``perfgate report`` and ``compare`` refuse. An exception there fails the case, as in ``step``."""
    from collections.abc import Mapping

    from perfgate.util.validation import MAX_NAME

    raw = workload.metrics(built)
    who = f"workload {workload.name!r}: metrics()"
    if not isinstance(raw, Mapping):
        return {}, [clip_line(f"{who} returned {type(raw).__name__}, not a dict of metric names to numbers")]
    kept: dict[str, float] = {}
    problems: list[str] = []
    for name, value in raw.items():
        if not (isinstance(name, str) and 0 < len(name) <= MAX_NAME and name.isprintable()):
            problems.append(clip_line(f"{who}: the name {name!r} is not a printable string of at most "
                                      f"{MAX_NAME} characters: left out"))
        elif (number := _finite(value)) is None:
            shown = clip_line(repr(value), 80)
            problems.append(clip_line(f"{who}: {name!r} is {type(value).__name__} {shown}, not a finite "
                                      "number: left out"))
        else:
            kept[name] = number
    return kept, problems[:TAIL_LINES]


def _finite(value: Any) -> float | None:
    """``value`` as a float when it is a finite real number (a numpy scalar too; not a bool), else None."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return None
    try:
        number = float(value)
    except (OverflowError, TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def _seed(seed: int) -> None:
    import torch

    random.seed(seed)
    torch.manual_seed(seed)
    try:
        import numpy

        numpy.random.seed(seed)
    except ImportError:
        pass


def run_case(cfg: dict[str, Any]) -> dict[str, Any]:
    """Measure one case in this process; return the process result (status, samples, metrics...)."""
    from perfgate.model.results import CaseSpec
    from perfgate.worker import toggles as toggles_mod
    from perfgate.worker.discovery import load_file
    from perfgate.worker.measure import measure, timer_for
    from perfgate.workload import WorkloadError, check_step_output

    spec = CaseSpec.from_json(cfg["spec"])
    timing = cfg.get("timing", {})
    started = time.perf_counter()
    result: dict[str, Any] = {"status": "ok", "metrics": {}, "profile": {}, "accuracy": {}, "metadata": {}}
    threads = int(cfg.get("threads", 1))
    threads_changed: dict[str, int] = {}
    _set_threads(threads)
    _seed(int(cfg.get("seed", 0)))
    index = int(cfg.get("process_index", 0))
    # this process's own memory layout, drawn by the orchestrator from the run's seed (perfgate.protocol.layout);
    # before anything of the workload, so that its allocations land where the draw put them
    layout = _layout_of(cfg, index)
    malloc_held = layout_mod.hold_malloc()  # the C allocator's thresholds fixed: no process-by-process modes
    allocator = malloc_held["malloc"]
    layout_mod.apply(layout)

    classes: dict[str, Any] = {}
    for c in load_file(Path(cfg["workload_file"])):
        classes.setdefault(c.name, c)  # the first of a name, as discovery keeps it (a second is an error there)
    if spec.workload not in classes:
        raise RuntimeError(f"workload {spec.workload!r} not found in {cfg['workload_file']}")
    workload = classes[spec.workload]()
    info = workload.describe()
    known = set(toggles_mod.TOGGLES_BY_NAME)
    variants = frozenset(t for t in spec.toggles if t not in known)
    registry_toggles = tuple(t for t in spec.toggles if t in known and t != "eager")

    reason = toggles_mod.skip_reason(spec.toggles, spec.device, info)
    if reason:
        result.update(status="skipped", message=reason)
        return result

    params = spec.param_dict
    steps = workload.steps_per_unit(params)
    if isinstance(steps, bool) or not isinstance(steps, numbers.Integral) or steps < 1:
        raise WorkloadError(f"workload {spec.workload!r}: steps_per_unit returned {type(steps).__name__} "
                            f"{clip_line(repr(steps), 80)}, not an integer >= 1 (a unit of work is at least one step)")
    compiled = toggles_mod.compile_mode(registry_toggles) is not None
    if compiled:
        from perfgate.worker import compile_stats

        compile_stats.reset_compile_counters()
    capped = cap_device_memory(cfg.get("device_memory_gb"), spec.device)  # before anything is built on it
    if capped:
        result["metadata"]["device_memory_cap"] = capped
    prepared = toggles_mod.prepare(workload, params, spec.device, registry_toggles, variants)
    _threads_kept(threads, "build", threads_changed, repin=True)
    timer = timer_for(spec.device)
    sync = _sync_for(spec.device)
    timed_context = prepared.timed()[1]  # the unit: measure() gets it from relayout(0) when it regroups
    lockstep = None
    if cfg.get("lockstep"):  # sampled in turns with a paired process, as the orchestrator says (--against)
        from perfgate.protocol import lockstep as lockstep_mod

        # forked by a zygote, the pipe's fds were passed along and renumbered: the environment says which
        fds = os.environ.get(LOCKSTEP_FDS_ENV) or f"{cfg['lockstep']['read_fd']},{cfg['lockstep']['write_fd']}"
        read_fd, write_fd = (int(x) for x in fds.split(","))
        channel = lockstep_mod.Channel(read_fd, write_fd)

        def lockstep(sample_ns, take, rewarm):
            if cfg.get("cpus") and hasattr(os, "sched_setaffinity"):
                # warm-up ran wherever the OS put it; the pair samples on the same CPUs (perfgate.protocol.lockstep)
                os.sched_setaffinity(0, cfg["cpus"])
            return lockstep_mod.serve(channel, sample_ns, take, rewarm)

    relayout = None
    moved_to: list[Any] = []
    if (layout.policy == "drawn" and not compiled and not prepared.captured and lockstep is None
            and not spec.device.startswith("cuda") and int(timing.get("layouts", 1)) > 1):
        def relayout(group: int) -> Any:
            """The workload built anew on the process's ``group``-th layout (perfgate.protocol.layout): a new heap
            offset and reservation first, so its tensors and what its steps allocate land elsewhere."""
            nonlocal prepared
            if group == 0:  # the first build's unit, handed to measure() alone (it drops it before group 1)
                return prepared.timed()[0]
            # the earlier build first (measure() has dropped its unit): kept, it would stay in the process's
            # peak resident memory with every later build (peak_rss_bytes counting one model per layout)
            prepared = None
            gc.collect()
            moved = layout_mod.draw(index, layout.seed, "drawn", group)
            layout_mod.apply(moved)
            moved_to.append(moved.to_json())
            _seed(int(cfg.get("seed", 0)))  # the same weights and state as the first build: only where they live moves
            prepared = toggles_mod.prepare(workload, params, spec.device, registry_toggles, variants)
            _threads_kept(threads, "build", threads_changed, repin=True)
            return prepared.timed()[0]

    # was the host quiet as timing starts (perfgate.protocol.host_quiet)? Lockstep pairs share its moments: not read
    host = (None if lockstep is not None else
            host_quiet.read_host(threads, gpu_clocks.other_gpu_processes(spec.device)))
    clocks = gpu_clocks.recorder_for(spec.device)  # None on CPU or without nvidia-ml-py
    try:
        with timed_context():
            m = measure(None if relayout is not None else prepared.timed()[0], timer, sync=sync, lockstep=lockstep,
                        check=functools.partial(check_step_output, spec.workload), relayout=relayout,
                        around_samples=clocks.at if clocks is not None else None, faults=_minor_faults, **timing)
    finally:
        if clocks is not None:
            clocks.close()
    _threads_kept(threads, "steps", threads_changed, repin=True)
    result["process"] = {
        "samples_ns": m.samples_ns,
        "loops": m.loops,
        "steps_per_unit": int(steps),
        "first_call_s": m.first_call_s,
        "warmup_units": m.warmup_units,
        "timer": m.timer,
        "process_index": index,
        "heap_offset": layout.heap_offset,
        "layout": {**layout.to_json(), "malloc": allocator, **({"moved_to": moved_to} if moved_to else {}),
                   **({"malloc_library": layout_mod.preloaded_malloc()} if allocator == "preloaded" else {}),
                   # what held in this process, as it found it: each threshold perfgate set, each left to the user
                   "malloc_set": malloc_held["set"], "malloc_user": malloc_held["user"]},
        "layout_groups": m.layout_groups,
        "bursts": m.bursts,
        "gpu_clocks": clocks.record() if clocks is not None else None,
    }
    from perfgate.worker.peak_memory import process_peaks

    result["process"].update(process_peaks(prepared.unit, spec.device))  # every process: memory_vs_eager's spread
    if m.faults is not None and m.samples_ns:
        # what the steady allocator hides from the step time (docs/gate.md): temporaries faulted in anew every
        # step show here as a count, whatever the allocator policy
        result["metrics"]["page_faults_per_step"] = m.faults / (len(m.samples_ns) * m.loops * int(steps))
    workload_metrics, metrics_left_out = _workload_metrics(workload, prepared.built)
    result["metrics"].update(workload_metrics)
    result["metadata"] = {
        "warmup_stable": m.stable,
        "warmup_ns": m.warmup_ns,
        "threads": threads,
        "seed": int(cfg.get("seed", 0)),
        "variants": sorted(variants),
        "worker_start": "fork" if os.environ.get(FORKED_ENV) else "spawn",  # set by the fork server
        **({"host": host} if host is not None else {}),
    }
    trainer = getattr(prepared.built, "trainer", None)
    if trainer is not None:  # a training step: its optimizer, scaler and compile, as they ran
        result["metadata"]["training"] = trainer.describe()
    if threads_changed:  # {"build": n} pinned back before timing; {"steps": n}: the samples ran on n
        result["metadata"]["threads_changed_by_workload"] = threads_changed
    if metrics_left_out:
        result["metadata"]["metrics_left_out"] = metrics_left_out
    if compiled:
        from perfgate.worker import compile_stats

        # every process reports it; the runner names process 0 cold (fresh cache) and process 1 warm
        result["compile"] = compile_stats.compile_time(m.first_call_s, m.samples_ns, m.loops)
    if cfg.get("profile", False):
        from perfgate.worker import profiling

        profiling.profile_pass(cfg, spec, workload, prepared, result)
    result["duration_s"] = time.perf_counter() - started
    return result


def _minor_faults() -> int:
    """This process's minor page faults so far (a page mapped in without I/O: a fresh temporary's pages)."""
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def _layout_of(cfg: dict[str, Any], index: int) -> layout_mod.Layout:
    """The layout the case file names (drawn by the orchestrator), or this index's draw when it names none."""
    raw = cfg.get("layout")
    if isinstance(raw, dict):
        try:
            return layout_mod.Layout(str(raw["policy"]), raw.get("seed"), int(raw["heap_offset"]), int(raw["mmap_pages"]))
        except (KeyError, TypeError, ValueError):
            pass
    return layout_mod.draw(index)


def _sync_for(device: str):
    if device.startswith("cuda"):
        import torch

        return torch.cuda.synchronize
    return lambda: None


def memory_fraction(cap_gb: float, total_bytes: int) -> float:
    """The share of a device of ``total_bytes`` that ``cap_gb`` GiB is, at most all of it."""
    return min(1.0, cap_gb * 2**30 / total_bytes)


def cap_device_memory(cap_gb: float | None, device: str) -> dict[str, Any] | None:
    """Cap this process's CUDA caching allocator at ``cap_gb`` GiB of ``device`` (the team's smaller card on
    a bigger one): an allocation past it raises torch's OutOfMemoryError, a case failing ``oom``. None on
    CPU or without a cap (the orchestrator refuses a cap on a CPU run before any worker starts)."""
    if not cap_gb or not device.startswith("cuda"):
        return None
    import torch

    index = torch.device(device).index
    index = torch.cuda.current_device() if index is None else index
    total = torch.cuda.get_device_properties(index).total_memory
    fraction = memory_fraction(float(cap_gb), total)
    torch.cuda.set_per_process_memory_fraction(fraction, index)
    return {"gb": float(cap_gb), "fraction": round(fraction, 6), "device_total_bytes": int(total)}


def capped_oom_message(cap_gb: float | None, failure_class: str, message: str) -> str:
    """An ``oom`` under a device memory cap says so first: the case would not fit the capped card."""
    if cap_gb and failure_class == "oom":
        return f"over the {float(cap_gb):g} GB device memory cap (--device-memory-gb): {message}"
    return message


def limit_memory(max_memory_mb: int | None) -> None:
    """Cap this process's address space, so an allocation past the cap fails here (MemoryError or an
    allocator error, classified ``oom``) instead of the host swapping or its OOM killer picking a victim."""
    if not max_memory_mb:
        return
    import resource

    limit = int(max_memory_mb) * 1024 * 1024
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))


def _ending_what_it_starts(run: Callable[[], int]) -> int:
    """``run()`` in a worker that ends, before it returns, every process the workload code started, in its
    own session or not: they stay below this process while it runs (perfgate.protocol.reaper)."""
    from perfgate.protocol import reaper

    reaper.become_subreaper()
    try:
        return run()
    finally:
        reaper.kill_descendants(os.getpid(), reap=True)


def _print_probe(workloads_dirs: list[str], out_file: str | None = None, toggles_here: bool = False) -> int:
    """The catalog as one line of JSON on stdout, or into ``out_file`` (a probe forked by the fork server)."""
    data = probe(workloads_dirs, toggles_here)
    data["environment"].update(python_environment())
    data["environment"]["python_executable"] = sys.executable
    data["environment"]["worker_platform"] = platform.platform()
    data["environment"]["pid"] = os.getpid()
    data["environment"]["probe_start"] = "fork" if os.environ.get(FORKED_ENV) else "spawn"  # set by the fork server
    if out_file:
        atomic_write_json(out_file, data)
        return 0
    # on a line of its own: the runner reads the last line, and a workload file may have printed on import
    # without ending its line
    sys.stdout.write("\n")
    json.dump(data, sys.stdout)
    sys.stdout.write("\n")
    return 0


def _run_case_file(spec_file: str, out_file: str) -> int:
    cfg = json.loads(Path(spec_file).read_text())
    try:
        limit_memory(cfg.get("max_memory_mb"))
        result = run_case(cfg)
    except BaseException as exc:  # noqa: BLE001 - every failure becomes a classified result
        # a KeyboardInterrupt too: the worker runs in a session of its own, out of reach of the terminal's
        # Ctrl-C, so one here was raised (or signalled) by the workload: its case fails `error`, with its tail
        failure_class = classify(exc)
        from perfgate.workload import WorkloadError

        # a workload that breaks the API is told so in one line naming it and what would be valid
        message = clip_line(str(exc)) if isinstance(exc, WorkloadError) else error_tail(exc)
        result = {
            "status": "failed",
            "failure_class": failure_class,
            "message": capped_oom_message(cfg.get("device_memory_gb"), failure_class, message),
        }
    atomic_write_json(out_file, result)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m perfgate.worker.main", description=__doc__)
    parser.add_argument("--probe", action="store_true")
    parser.add_argument("--workloads-dir", action="append", default=[])
    parser.add_argument("--toggles-here", action="store_true", help="with --probe: whether each toggle runs here")
    parser.add_argument("--case")
    parser.add_argument("--out")
    parser.add_argument("--zygote", type=int, metavar="FD", help="serve as a fork server on this socket")
    parser.add_argument("--tag", help="ignored: names the run's folder on the fork server's command line")
    args = parser.parse_args(argv)
    if args.zygote is not None:  # each child it forks runs this function again, on its case
        code = zygote_server.serve(args.zygote, main)
        # its descendants are ended and it holds nothing to save: skip the interpreter's teardown (torch's
        # takes most of a second, which every run would wait for at its end)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    if args.probe:  # imports the workload files: their code runs here as a case's would
        return _ending_what_it_starts(functools.partial(_print_probe, args.workloads_dir, args.out, args.toggles_here))
    if not (args.case and args.out):
        parser.error("either --probe or both --case and --out")
    return _ending_what_it_starts(functools.partial(_run_case_file, args.case, args.out))


if __name__ == "__main__":
    sys.exit(main())
