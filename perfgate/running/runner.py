"""Spawns worker processes, enforces timeouts, classifies failures, and keeps results.json current.

No torch and no workload is ever imported here: a crash, hang or out-of-memory in one case cannot take
the orchestrator or the other cases with it.
"""

from __future__ import annotations

import atexit
import concurrent.futures
import functools
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
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
from perfgate.protocol import layout, lockstep, reaper
from perfgate.running import zygote
from perfgate.util.storage import atomic_write_text

PROBE_TIMEOUT_S = 300
STDERR_TAIL_LINES = 25
# a worker's output and result message come from workload code, which may print megabytes: the runner reads
# the end of the log only, and keeps lines and messages to a size results.json and a console can carry
LOG_TAIL_BYTES = 64 * 1024
LINE_CHARS = 500
MESSAGE_CHARS = 8000


class InfrastructureError(RuntimeError):
    """The machinery itself failed (no Python, a probe that dies): exit code 3."""


def package_parent() -> str:
    return str(Path(__file__).resolve().parents[2])  # perfgate/running/runner.py: the folder holding perfgate


# What a worker inherits from perfgate's environment: nothing else (tokens, cloud keys and the history
# store's URL stay with the orchestrator; docs/configuration.md "Worker environment"). A workload config adds
# names with ``worker_env = ["NAME", "PREFIX_*"]`` in [tool.perfgate].
WORKER_ENV_NAMES = frozenset({
    "PATH", "HOME", "USER", "LOGNAME", "SHELL", "TERM", "LANG", "LANGUAGE", "TZ", "TMPDIR", "TEMP", "TMP",
    "PYTHONPATH", "PYTHONHASHSEED", "PYTHONNOUSERSITE", "PYTHONDONTWRITEBYTECODE", "PYTHONWARNINGS",
    "PYTHONMALLOC", "PYTHONFAULTHANDLER", "VIRTUAL_ENV", "LD_LIBRARY_PATH", "LD_PRELOAD", "CC", "CXX",
    "GLIBC_TUNABLES",
    "XDG_CACHE_HOME", "NUMEXPR_MAX_THREADS",
    # GitHub's runner ends, after a job, every process whose environment carries its tracking id: kept, so a
    # process a workload leaves running is ended there too, whatever perfgate itself missed
    "RUNNER_TRACKING_ID",
})
WORKER_ENV_PREFIXES = (
    "LC_", "OMP_", "MKL_", "KMP_", "GOMP_", "OPENBLAS_", "NUMEXPR_", "TORCH_", "TORCHINDUCTOR_", "TORCHDYNAMO_",
    "PYTORCH_", "TRITON_", "CUDA_", "CUBLAS_", "CUBLASLT_", "CUDNN_", "NVIDIA_", "HIP_", "ROCR_", "ROCM_",
    "PERFGATE_", "MALLOC_",  # glibc's malloc knobs (MALLOC_ARENA_MAX, MALLOC_MMAP_THRESHOLD_...), jemalloc's MALLOC_CONF
)
WORKER_ENV_WITHHELD = frozenset({"PERFGATE_HISTORY_URL"})  # in perfgate's own namespace, but a credential
_config_env_names: tuple[str, ...] = ()


def set_config_env_names(names: Sequence[str]) -> None:
    """The names (``NAME`` or ``PREFIX*``) the workload config adds to what workers inherit."""
    global _config_env_names
    _config_env_names = tuple(names)


def passed_to_workers(name: str, extra_names: Sequence[str] | None = None) -> bool:
    """True when the variable ``name`` goes to workers: on the allow-list or named by the config, and never
    when it is withheld (``WORKER_ENV_WITHHELD``: a credential), whatever the config names."""
    if name in WORKER_ENV_WITHHELD:
        return False
    for pattern in _config_env_names if extra_names is None else extra_names:
        if name == pattern or (pattern.endswith("*") and name.startswith(pattern[:-1])):
            return True
    return name in WORKER_ENV_NAMES or name.startswith(WORKER_ENV_PREFIXES)


# Of what workers inherit, the variables that tune how they run (threads, allocators, compilers, math and
# kernel libraries): recorded in results.json (environment.tuning_env) so that a baseline and a run that
# differ in one say so (perfgate.model.environment_keys.environment_diff). Left out: where things are kept (a cache or log folder,
# a path: perfgate sets some per case), which devices a job sees (a shard's GPU), the thread counts perfgate
# pins itself, and the variables a project's `worker_env` names (its own; they may hold credentials).
TUNING_PREFIXES = ("OMP_", "MKL_", "KMP_", "GOMP_", "OPENBLAS_", "NUMEXPR_", "TORCH_", "TORCHINDUCTOR_",
                   "TORCHDYNAMO_", "PYTORCH_", "TRITON_", "CUDA_", "CUBLAS_", "CUBLASLT_", "CUDNN_", "MALLOC_")
TUNING_NAMES = frozenset({"LD_PRELOAD", "PYTHONMALLOC", "GLIBC_TUNABLES"})
_NOT_TUNING = re.compile(r".*(_DIR|_HOME|_PATH|_ROOT|_FILE|_CACHE|_LOGS?|_VISIBLE_DEVICES)$|(OMP|MKL|OPENBLAS|NUMEXPR)_NUM_THREADS$")
TUNING_VALUE_CHARS = 200


def tuning_environment(environ: dict[str, str] | None = None) -> dict[str, str]:
    """The variables of ``environ`` (this process's) that tune what workers measure, name to value, sorted."""
    environ = dict(os.environ) if environ is None else environ
    return {k: v[:TUNING_VALUE_CHARS] for k, v in sorted(environ.items())
            if (k in TUNING_NAMES or k.startswith(TUNING_PREFIXES)) and not _NOT_TUNING.fullmatch(k)
            and k not in WORKER_ENV_WITHHELD}


@dataclass(frozen=True)
class Interpreter:
    """The Python a side's workers run under and the variables set for every one of them, its fork server
    included (a variable read when torch is imported must be there when the fork server imports it):
    ``run --base-python PATH --base-env NAME=VALUE``. The default: this interpreter, nothing added."""

    python: str = ""  # "" : sys.executable
    env: tuple[tuple[str, str], ...] = ()

    @property
    def executable(self) -> str:
        return self.python or sys.executable

    def key(self) -> tuple[str, tuple[tuple[str, str], ...]]:
        return self.executable, self.env


THIS_INTERPRETER = Interpreter()


def worker_env(threads: int, extra: dict[str, str] | None = None) -> dict[str, str]:
    """The worker's environment: the allow-listed part of this one (``passed_to_workers``), threads pinned
    for every math library, perfgate importable."""
    env = {k: v for k, v in os.environ.items() if passed_to_workers(k)}
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "NUMEXPR_NUM_THREADS"):
        env[var] = str(threads)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_parent(), env.get("PYTHONPATH", "")) if p)
    env["PYTHONUNBUFFERED"] = "1"
    if layout.fixed_layout_wanted():
        env.setdefault("PYTHONHASHSEED", "0")  # with ASLR off, the rest of the layout: the same in every worker
    env.update(extra or {})
    return env


LAYOUT_ENV = layout.LAYOUT_ENV  # "drawn" (default) or "fixed": no address-space randomization; "random"
ADDR_NO_RANDOMIZE = 0x0040000  # linux/personality.h
_PERSONALITY_QUERY = 0xFFFFFFFF


def _no_address_randomization(libc: Any) -> None:
    """Turn off ASLR for the program about to be exec'd (personality(2)). Why: an interpreter's address-space
    layout decides, once at start, whether a workload runs fast or slow (on the conv rollout here about one
    interpreter in three ran 24% slow, at random; docs/gate.md). Refused (a container's seccomp filter):
    the layout stays random, and ``address_layout()`` says so."""
    current = libc.personality(_PERSONALITY_QUERY)
    if current != -1:
        libc.personality(current | ADDR_NO_RANDOMIZE)


def _die_with_parent(parent_pid: int, death_signal: int = signal.SIGKILL) -> None:
    """In the child before exec: its own process group (so a timeout kills everything it started) and,
    on Linux, SIGKILL when the orchestrator dies, so a killed `perfgate run` leaves no worker behind; and
    the same address-space layout in every worker (``layout.fixed_layout_wanted``). The fork server asks for
    SIGTERM instead, which it answers by ending its workers' descendants first (perfgate.protocol.reaper)."""
    os.setsid()
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            libc = ctypes.CDLL("libc.so.6", use_errno=True)
            libc.prctl(1, death_signal)  # PR_SET_PDEATHSIG
            if layout.fixed_layout_wanted():
                _no_address_randomization(libc)
        except OSError:
            pass
        # the orchestrator may have died before prctl took effect: then no signal would ever come
        if os.getppid() != parent_pid:
            os._exit(1)


_launcher: list[concurrent.futures.ThreadPoolExecutor] = []
_launcher_lock = threading.Lock()


def from_lasting_thread(start: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``start(*args, **kwargs)`` (a Popen, a fork server) called from a thread that lives as long as this
    process: the main thread, or one kept for it. Why: PR_SET_PDEATHSIG fires when the *thread* that
    forked a child exits, not the process, so perfgate used from a short-lived thread (the notebook API run
    in a thread, a thread pool's task) would see its workers and fork servers killed when that thread ends."""
    if threading.current_thread() is threading.main_thread():
        return start(*args, **kwargs)
    with _launcher_lock:
        if not _launcher:  # its one thread waits for work until the interpreter exits
            _launcher.append(concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="perfgate-start"))
    return _launcher[0].submit(start, *args, **kwargs).result()


@functools.lru_cache(maxsize=1)
def address_layout() -> str:
    """"fixed" when workers start without address-space randomization, else "random" (asked for with
    PERFGATE_LAYOUT=random, not Linux, or refused here); recorded in every run's environment."""
    if not layout.fixed_layout_wanted():
        return "random"
    try:
        out = subprocess.run(["cat", "/proc/self/personality"], capture_output=True, text=True, timeout=30,
                             preexec_fn=functools.partial(_die_with_parent, os.getpid()))
        return "fixed" if int(out.stdout.strip() or "0", 16) & ADDR_NO_RANDOMIZE else "random"
    except (OSError, ValueError, subprocess.SubprocessError):
        return "random"


def _clip(line: str, chars: int = LINE_CHARS) -> str:
    return line if len(line) <= chars else f"{line[:chars]}... [{len(line) - chars} more characters]"


def _tail(text: str, lines: int = STDERR_TAIL_LINES) -> str:
    return "\n".join(_clip(line) for line in text.rstrip().splitlines()[-lines:])


def _bounded_message(result: dict[str, Any]) -> dict[str, Any]:
    """``result`` (a worker's, or an older perfgate's worker's) with its message at most MESSAGE_CHARS."""
    message = result.get("message")
    if isinstance(message, str) and len(message) > MESSAGE_CHARS:
        result = {**result, "message": f"{message[:MESSAGE_CHARS]}... [{len(message) - MESSAGE_CHARS} more characters]"}
    return result


def _signal_name(num: int) -> str:
    try:
        return signal.Signals(num).name
    except ValueError:
        return f"signal {num}"


def run_worker_command(args: Sequence[str], threads: int, timeout_s: float, env_extra: dict[str, str] | None = None,
                       cwd: Path | None = None, interpreter: Interpreter = THIS_INTERPRETER
                       ) -> subprocess.CompletedProcess[str]:
    """Run ``python ARGS`` (the probe, which imports the workload files; the ceilings) as a worker runs: the
    worker's environment, its own session, killed when perfgate dies, and nothing it starts outlives it
    (perfgate.protocol.reaper: it ends its descendants, and what it leaves when it dies comes back to perfgate).
    Output goes to files, not pipes, so a process that keeps them open cannot hold perfgate up. Raises
    subprocess.TimeoutExpired past ``timeout_s``, after killing it and all it started."""
    if list(args[:2]) == ["-m", WORKER_MODULE]:  # a probe: of the perfgate this worker will import
        args = ["-m", _worker_module_for(env_extra), *args[2:]]
    cmd = [interpreter.executable, *args]
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        reaper.adopt_orphans()
        try:
            proc = from_lasting_thread(subprocess.Popen, cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                       env=worker_env(threads, {**(env_extra or {}), **dict(interpreter.env)}), cwd=cwd,
                                       preexec_fn=functools.partial(_die_with_parent, os.getpid()))
        except BaseException:
            reaper.ended(None)
            raise
        reaper.started(proc.pid)
        try:
            proc.wait(timeout=timeout_s)
        finally:
            if proc.returncode is None:  # past the timeout, or interrupted
                reaper.kill_tree(proc.pid)
                proc.wait()
            reaper.ended(proc.pid)
        out.seek(0)
        err.seek(0)
        return subprocess.CompletedProcess(cmd, proc.returncode, out.read().decode(errors="replace"),
                                           err.read().decode(errors="replace"))


WORKER_MODULE = "perfgate.worker.main"
# the worker of a perfgate from before its modules moved into packages (an --against base that old)
FLAT_WORKER_MODULE = "perfgate.worker"


def worker_module(package_parent: str | Path) -> str | None:
    """The module a worker runs as in the perfgate package under ``package_parent``: this layout's, the flat
    one's before the package move, or None where that folder holds no perfgate package."""
    pkg = Path(package_parent) / "perfgate"
    if (pkg / "worker" / "main.py").is_file():
        return WORKER_MODULE
    if (pkg / "worker.py").is_file():
        return FLAT_WORKER_MODULE
    return None


def _worker_module_for(env_extra: dict[str, str] | None) -> str:
    """The worker module of the perfgate a worker will import: the one first on the PYTHONPATH it is given
    (an --against base's own perfgate), else this one."""
    first = (env_extra or {}).get("PYTHONPATH", "").split(os.pathsep)[0]
    return (worker_module(first) if first else None) or WORKER_MODULE


def probe_args(workloads_dirs: Sequence[Path | str]) -> list[str]:
    """The worker's command line for a probe of ``workloads_dirs``."""
    args = ["-m", WORKER_MODULE, "--probe"]
    for d in workloads_dirs:
        args += ["--workloads-dir", str(d)]
    return args


def run_probe(workloads_dirs: Sequence[Path], threads: int = 1, work_dir: Path | None = None) -> dict[str, Any]:
    """Ask a worker what it can see: workloads, toggles, torch and CUDA. Raises InfrastructureError.

    With ``work_dir`` (the run's scratch folder, where its workers are forked): a child of the run's fork
    server answers, the same one its workers then come from (``_zygote_for``), so the run imports torch once,
    not once for the probe and once more for the fork server. Without it, with ``PERFGATE_WORKER_START=spawn``,
    or where that fork server cannot answer: a fresh interpreter, as a spawned worker. Either way the probe
    records how it started (``environment.probe_start``: ``fork`` | ``spawn``)."""
    try:
        z = _zygote_for(threads, None, None, work_dir) if work_dir is not None else None
    except OSError as exc:  # the scratch folder cannot be made: the probe needs none when spawned
        print(f"perfgate: the worker fork server could not start ({exc}); spawning the probe", file=sys.stderr)
        z = None
    if z is not None:
        assert work_dir is not None
        answer = _forked_probe(z, workloads_dirs, threads, work_dir)
        if answer is not None:
            return answer
    try:
        proc = run_worker_command(probe_args(workloads_dirs), threads, PROBE_TIMEOUT_S)
    except subprocess.TimeoutExpired as exc:
        raise InfrastructureError(f"the worker probe did not answer within {PROBE_TIMEOUT_S} s") from exc
    if proc.returncode != 0:
        raise InfrastructureError(f"the worker probe failed (exit {proc.returncode}): {_tail(proc.stderr, 5)}")
    try:
        return json.loads(proc.stdout.strip().splitlines()[-1])
    except (json.JSONDecodeError, IndexError) as exc:
        raise InfrastructureError(f"the worker probe printed no catalog: {_tail(proc.stdout + proc.stderr, 5)}") from exc


def _forked_probe(z: Any, workloads_dirs: Sequence[Path], threads: int, work_dir: Path) -> dict[str, Any] | None:
    """The probe in a child of the fork server ``z``: isolated as a forked worker is (its own session,
    PR_SET_PDEATHSIG, a subreaper that ends what the workload files start, killed with all it started past
    the timeout), writing the catalog to a file. None: spawn it instead (the fork server could not fork, or
    is an older perfgate's, whose child exits at once on a request with no case and writes nothing)."""
    work_dir.mkdir(parents=True, exist_ok=True)
    fd, log_path = tempfile.mkstemp(prefix="probe-", suffix=".log", dir=work_dir)
    os.close(fd)
    out_path = log_path[:-4] + ".out.json"
    try:
        proc = z.spawn("", out_path, log_path, worker_env(threads), None, probe=[str(d) for d in workloads_dirs])
    except zygote.ZygoteUnavailable as exc:
        print(f"perfgate: {exc}; spawning the probe instead", file=sys.stderr)
        os.unlink(log_path)
        return None
    handle = WorkerHandle(proc, out_path, out_path, log_path, time.perf_counter())
    try:
        try:
            proc.wait(timeout=PROBE_TIMEOUT_S)
        except subprocess.TimeoutExpired as exc:
            handle.kill()
            raise InfrastructureError(f"the worker probe did not answer within {PROBE_TIMEOUT_S} s") from exc
        except BaseException:  # interrupted: the probe ends now, not when the caller's interpreter does
            handle.abandon()
            raise
        log = handle._stderr()
        if proc.returncode != 0:
            raise InfrastructureError(f"the worker probe failed (exit {proc.returncode}): {_tail(log, 5)}")
        try:
            text = Path(out_path).read_text()
        except FileNotFoundError:
            return None  # an older fork server: its child exited without probing
        try:
            return json.loads(text)
        except json.JSONDecodeError as exc:
            raise InfrastructureError(f"the worker probe wrote no catalog: {_tail(log, 5)}") from exc
    finally:
        handle._cleanup(out_path, log_path)


@dataclass
class ProcessOutcome:
    """One worker process: its own result dict, or the runner's classification of its death."""

    result: dict[str, Any]
    returncode: int | None
    wall_s: float


def _classify_death(returncode: int, stderr: str) -> tuple[str, str]:
    lowered = stderr.lower()
    if "memoryerror" in lowered or "out of memory" in lowered:
        return "oom", _tail(stderr)
    if returncode < 0:
        sig = _signal_name(-returncode)
        hint = " (often the kernel's out-of-memory killer)" if -returncode == signal.SIGKILL else ""
        return "crash", f"worker killed by {sig}{hint}\n{_tail(stderr)}".rstrip()
    return "crash", f"worker exited with code {returncode} without a result\n{_tail(stderr)}".rstrip()


@dataclass
class WorkerHandle:
    """A started worker process; ``finish`` waits for it (killing its process group past the timeout)."""

    proc: Any  # subprocess.Popen, or zygote.ForkedProcess (the same poll / wait / pid / returncode)
    spec_path: str
    out_path: str
    log_path: str
    t0: float

    def _stderr(self) -> str:
        """The end of the worker's output (LOG_TAIL_BYTES): enough for a tail, whatever it printed."""
        try:
            with open(self.log_path, "rb") as fh:
                size = fh.seek(0, os.SEEK_END)
                fh.seek(max(size - LOG_TAIL_BYTES, 0))
                return fh.read().decode(errors="replace")
        except OSError:
            return ""

    def _cleanup(self, *paths: str) -> None:
        for p in paths:
            try:
                os.unlink(p)
            except FileNotFoundError:
                pass

    def kill(self) -> None:
        """Kill the worker and every process it started, in its process group or not (perfgate.protocol.reaper). A
        forked worker through its fork server, which reaps it at once when it exits: its pid, signalled from
        here, could by then be another process's."""
        if not (isinstance(self.proc, zygote.ForkedProcess) and self.proc.kill()):
            reaper.kill_tree(self.proc.pid)
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.proc.wait()
        self._ended()

    def _ended(self) -> None:
        """A spawned worker has been waited for: end what it left behind (perfgate.protocol.reaper.ended)."""
        if isinstance(self.proc, subprocess.Popen):
            reaper.ended(self.proc.pid)

    def abandon(self) -> None:
        """Kill the worker and all it started, and remove its files: nothing will read its result (an
        interrupt). Used from Python (a notebook, a script), the caller lives on after a KeyboardInterrupt, and
        so would the worker: PR_SET_PDEATHSIG fires only when its parent (perfgate, or the fork server) dies."""
        if self.proc.poll() is None:
            self.kill()
        else:
            self._ended()
        self._cleanup(self.spec_path, self.out_path, self.log_path)

    def timed_out(self, timeout_s: float) -> ProcessOutcome:
        """Kill the worker and report it as a timeout."""
        self.kill()
        stderr = self._stderr()
        self._cleanup(self.spec_path, self.out_path, self.log_path)
        result = {
            "status": STATUS_FAILED,
            "failure_class": "timeout",
            "message": f"worker exceeded the {timeout_s:g} s timeout and was killed\n{_tail(stderr, 10)}".rstrip(),
        }
        return ProcessOutcome(result, None, time.perf_counter() - self.t0)

    def finish(self, timeout_s: float, wait_s: float | None = None) -> ProcessOutcome:
        """Wait at most ``wait_s`` (default: what is left of ``timeout_s`` since the start) for the result."""
        wait = timeout_s - (time.perf_counter() - self.t0) if wait_s is None else wait_s
        try:
            self.proc.wait(timeout=max(wait, 0.0))
        except subprocess.TimeoutExpired:
            return self.timed_out(timeout_s)
        except BaseException:  # Ctrl-C (a SIGTERM turned into one) while waiting: the worker ends here, now
            self.abandon()
            raise
        wall = time.perf_counter() - self.t0
        self._ended()
        try:
            result = _bounded_message(json.loads(Path(self.out_path).read_text()))
        except (OSError, json.JSONDecodeError):
            failure_class, message = _classify_death(self.proc.returncode, self._stderr())
            result = {"status": STATUS_FAILED, "failure_class": failure_class, "message": message}
        self._cleanup(self.spec_path, self.out_path, self.log_path)
        return ProcessOutcome(result, self.proc.returncode, wall)


def run_work_dir(run_dir: Path) -> Path:
    """The run's scratch folder: its workers' case and output files, the fork server they come from (whose
    key it is part of, so the probe and the workers of a run share one)."""
    return run_dir / ".work"


WORKER_START_ENV = "PERFGATE_WORKER_START"  # "spawn": a fresh interpreter per worker; "fork" (default on Linux)
# (threads, PYTHONPATH, cwd, work_dir, interpreter) -> Zygote, or None: spawn
_zygotes: dict[tuple[Any, ...], Any] = {}


def _zygote_for(threads: int, env_extra: dict[str, str] | None, cwd: Path | None, work_dir: Path,
                interpreter: Interpreter = THIS_INTERPRETER) -> Any:
    """The fork server (perfgate.running.zygote) for workers of this kind, started on first use; None: spawn."""
    if os.environ.get(WORKER_START_ENV, "fork") == "spawn" or not sys.platform.startswith("linux"):
        return None
    python_path = (env_extra or {}).get("PYTHONPATH")
    key = (threads, python_path, str(cwd) if cwd else None, str(work_dir), interpreter.key())
    z = _zygotes.get(key, False)
    if z is False or (z is not None and not z.alive()):
        env = worker_env(threads, {**({"PYTHONPATH": python_path} if python_path else {}), **dict(interpreter.env)})
        try:
            z = from_lasting_thread(zygote.Zygote, env, cwd, work_dir,
                                    preexec_fn=functools.partial(_die_with_parent, os.getpid(), signal.SIGTERM),
                                    python=interpreter.executable)
        except zygote.ZygoteUnavailable as exc:
            print(f"perfgate: {exc}; spawning each worker instead", file=sys.stderr)
            z = None
        else:
            reaper.started(z.proc.pid, runs_workload=False)  # never taken for a worker's orphan
        if not _zygotes:
            atexit.register(close_zygotes)
        _zygotes[key] = z
    return z


def close_zygotes(under: Path | None = None) -> None:
    """Stop every fork server (their children have exited, or die with them); with ``under`` (a run folder),
    only those whose workers' scratch folder lies in it: the run's, once it is over. Used from Python (a
    notebook, a script, a test), the interpreter outlives the run, and each run's fork servers (torch
    imported in each; the base side's running in a worktree already removed) would otherwise live on until
    it exits, one more set per run."""
    for key in list(_zygotes):
        if under is not None and not Path(key[3]).is_relative_to(under):
            continue
        z = _zygotes.pop(key)
        if z is not None:
            z.close()
            reaper.ended(z.proc.pid)


def start_worker(cfg: dict[str, Any], threads: int, work_dir: Path, env_extra: dict[str, str] | None = None,
                 cwd: Path | None = None, pass_fds: Sequence[int] = (),
                 interpreter: Interpreter = THIS_INTERPRETER) -> WorkerHandle:
    """Start one worker on ``cfg``: forked from a zygote that has torch imported already, or spawned
    (``PERFGATE_WORKER_START=spawn``, or no fork server here). Its output goes to a file (a pipe could fill
    up and stall a worker that the orchestrator is not reading, in lockstep). ``cwd``: the worker's folder
    (``--against`` runs the base ref's workers inside its checkout)."""
    work_dir.mkdir(parents=True, exist_ok=True)
    fd, spec_path = tempfile.mkstemp(prefix="case-", suffix=".json", dir=work_dir)
    with os.fdopen(fd, "w") as fh:
        fh.write(layout.padded_json(cfg))
    try:
        return _start_worker(spec_path, threads, work_dir, env_extra, cwd, pass_fds, interpreter)
    except BaseException:  # nothing started: no case file left behind either
        for path in (spec_path, spec_path[:-5] + ".log"):
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
        raise


def _start_worker(spec_path: str, threads: int, work_dir: Path, env_extra: dict[str, str] | None,
                  cwd: Path | None, pass_fds: Sequence[int], interpreter: Interpreter) -> WorkerHandle:
    out_path = spec_path[:-5] + ".out.json"
    log_path = spec_path[:-5] + ".log"
    env = worker_env(threads, {**(env_extra or {}), **dict(interpreter.env)})
    z = _zygote_for(threads, env_extra, cwd, work_dir, interpreter)
    if z is not None:
        try:
            proc: Any = z.spawn(spec_path, out_path, log_path, env, cwd, tuple(pass_fds))
            return WorkerHandle(proc, spec_path, out_path, log_path, time.perf_counter())
        except zygote.ZygoteUnavailable as exc:
            print(f"perfgate: {exc}; spawning this worker instead", file=sys.stderr)
    cmd = [interpreter.executable, "-m", _worker_module_for(env_extra), "--case", spec_path, "--out", out_path]
    reaper.adopt_orphans()  # what a spawned worker leaves when it dies comes back here (perfgate.protocol.reaper)
    try:
        with open(log_path, "wb") as log:
            proc = from_lasting_thread(
                subprocess.Popen, cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=layout.padded_env(cmd, env),
                preexec_fn=functools.partial(_die_with_parent, os.getpid()), cwd=cwd, pass_fds=tuple(pass_fds),
            )
    except BaseException:
        reaper.ended(None)
        raise
    reaper.started(proc.pid)
    return WorkerHandle(proc, spec_path, out_path, log_path, time.perf_counter())


def run_worker(cfg: dict[str, Any], timeout_s: float, threads: int, work_dir: Path,
               env_extra: dict[str, str] | None = None, cwd: Path | None = None,
               interpreter: Interpreter = THIS_INTERPRETER) -> ProcessOutcome:
    """Run one worker on ``cfg`` to its end; never raises for anything the worker does."""
    return start_worker(cfg, threads, work_dir, env_extra, cwd, interpreter=interpreter).finish(timeout_s)


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


# ---------------------------------------------------------------- run folders

LATEST_FILE = "LATEST"


def new_run_id(suite: str | None, now: float | None = None) -> str:
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(now))
    return f"{stamp}-{suite}" if suite else stamp


def unique_run_dir(reports_dir: Path, run_id: str, reserve: bool = False) -> Path:
    """``reports_dir/run_id``, or ``run_id-2``, ``-3``... where that is taken. ``reserve``: create the folder,
    atomically (``mkdir``, never ``exist_ok``), so that two runs started in the same second into the same
    reports folder (two terminals, shards run side by side) never share one: a folder merely checked free
    could be taken by the other run before this one creates it, and the two would overwrite each other's
    results.json. OSError when ``reports_dir`` refuses the folder."""
    path, n = reports_dir / run_id, 1
    while True:
        if reserve:
            try:
                path.mkdir()
                return path
            except FileExistsError:
                pass
        elif not path.exists():
            return path
        n += 1
        path = reports_dir / f"{run_id}-{n}"


def mark_latest(reports_dir: Path, run_dir: Path) -> None:
    atomic_write_text(reports_dir / LATEST_FILE, run_dir.name + "\n")


def _latest_named(reports_dir: Path, marker: Path) -> Path | None:
    """The run folder LATEST names, or None where it names none perfgate could have written: LATEST holds one
    folder name of ``reports_dir`` (a name with a separator, ``..``, an absolute path, a link out of the
    folder, bytes that are not UTF-8 or a file of any size are ignored, as a missing LATEST is)."""
    try:
        with open(marker, "rb") as fh:
            name = fh.read(4096).decode("utf-8").strip()
    except (OSError, UnicodeDecodeError):
        return None
    if not name or name in (".", "..") or "/" in name or "\\" in name or "\0" in name:
        return None
    cand = reports_dir / name
    try:
        if cand.resolve().parent != reports_dir.resolve():
            return None
    except (OSError, RuntimeError):
        return None
    return cand


def latest_run_dir(reports_dir: Path) -> Path | None:
    """The newest run under ``reports_dir``: the one LATEST names, else the newest results.json."""
    marker = reports_dir / LATEST_FILE
    if marker.is_file():
        cand = _latest_named(reports_dir, marker)
        if cand is not None and (cand / "results.json").is_file():
            return cand
    inside = reports_dir.resolve()
    runs = sorted((p for p in reports_dir.glob("*/results.json") if p.parent.resolve().parent == inside),
                  key=lambda p: p.stat().st_mtime)  # a folder that is a link out of reports_dir is no run of it
    return runs[-1].parent if runs else None
