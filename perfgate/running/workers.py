"""Worker processes on the orchestrator's side: each started in isolation (its own session, killed when
perfgate dies, its memory layout), forked from the run's fork server or spawned, waited for, killed with all
it started past its timeout, its death classified when it wrote no result; and the probe, the worker that
says what it can see. No torch and no workload is ever imported here.
"""

from __future__ import annotations

import atexit
import concurrent.futures
import functools
import json
import os
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

from perfgate.model.results import STATUS_FAILED
from perfgate.protocol import layout, reaper
from perfgate.running import zygote
from perfgate.running.inherit import THIS_INTERPRETER, Interpreter, worker_env

PROBE_TIMEOUT_S = 300
STDERR_TAIL_LINES = 25
# a worker's output and result message come from workload code, which may print megabytes: the runner reads
# the end of the log only, and keeps lines and messages to a size results.json and a console can carry
LOG_TAIL_BYTES = 64 * 1024
LINE_CHARS = 500
MESSAGE_CHARS = 8000


class InfrastructureError(RuntimeError):
    """The machinery itself failed (no Python, a probe that dies): exit code 3."""


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


def probe_args(workloads_dirs: Sequence[Path | str], toggles_here: bool = False) -> list[str]:
    """The worker's command line for a probe of ``workloads_dirs`` (``toggles_here``: perfgate.worker.main.probe)."""
    args = ["-m", WORKER_MODULE, "--probe", *(["--toggles-here"] if toggles_here else [])]
    for d in workloads_dirs:
        args += ["--workloads-dir", str(d)]
    return args


def run_probe(workloads_dirs: Sequence[Path], threads: int = 1, work_dir: Path | None = None,
              toggles_here: bool = False) -> dict[str, Any]:
    """Ask a worker what it can see: workloads, toggles, torch and CUDA (with ``toggles_here``, whether each
    toggle can run on this machine: `perfgate list`, `doctor`). Raises InfrastructureError.

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
        answer = _forked_probe(z, workloads_dirs, threads, work_dir, toggles_here)
        if answer is not None:
            return answer
    try:
        proc = run_worker_command(probe_args(workloads_dirs, toggles_here), threads, PROBE_TIMEOUT_S)
    except subprocess.TimeoutExpired as exc:
        raise InfrastructureError(f"the worker probe did not answer within {PROBE_TIMEOUT_S} s") from exc
    if proc.returncode != 0:
        raise InfrastructureError(f"the worker probe failed (exit {proc.returncode}): {_tail(proc.stderr, 5)}")
    try:
        return json.loads(proc.stdout.strip().splitlines()[-1])
    except (json.JSONDecodeError, IndexError) as exc:
        raise InfrastructureError(f"the worker probe printed no catalog: {_tail(proc.stdout + proc.stderr, 5)}") from exc


def _forked_probe(z: Any, workloads_dirs: Sequence[Path], threads: int, work_dir: Path,
                  toggles_here: bool = False) -> dict[str, Any] | None:
    """The probe in a child of the fork server ``z``: isolated as a forked worker is (its own session,
    PR_SET_PDEATHSIG, a subreaper that ends what the workload files start, killed with all it started past
    the timeout), writing the catalog to a file. None: spawn it instead (the fork server could not fork, or
    is an older perfgate's, whose child exits at once on a request with no case and writes nothing)."""
    work_dir.mkdir(parents=True, exist_ok=True)
    fd, log_path = tempfile.mkstemp(prefix="probe-", suffix=".log", dir=work_dir)
    os.close(fd)
    out_path = log_path[:-4] + ".out.json"
    try:
        proc = z.spawn("", out_path, log_path, worker_env(threads), None, probe=[str(d) for d in workloads_dirs],
                       toggles_here=toggles_here)
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
