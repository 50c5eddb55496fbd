"""A fork server for worker processes: ``import torch`` once, fork a fresh process per worker.

Every worker process used to pay Python's start-up and ``import torch`` (about 2.4 s of the 3.7 s a
worker cost on the 2-core runner, docs/benchmarks.md) before measuring anything. A zygote is one
``python -m perfgate.worker --zygote FD`` process that imports torch and perfgate's worker, then forks a
child per worker request. The child is a new OS process like a spawned worker: its own process group,
PR_SET_PDEATHSIG (it dies with the zygote, which dies with the orchestrator), its own output file,
environment and working folder, its own memory (copy-on-write) and a crash, hang or out-of-memory of its
own; it runs exactly the worker's ``--case`` code path.

The zygote never runs a torch op, so no thread pool and no CUDA context exist when it forks (forking
after CUDA is initialised is unsafe; after import it is not). Where importing left more than one thread
in the zygote (a BLAS pool started by numpy with more threads than one), it says so and the runner spawns
workers the plain way instead. Linux only; elsewhere workers are spawned.

Protocol: one stream socket (a socketpair; the zygote's end passed as FD), one JSON object per line.
zygote -> orchestrator ``{"ready": true, "threads": n}``; orchestrator -> zygote
``{"id": i, "case": ..., "out": ..., "log": ..., "env": {...}, "cwd": ...}`` with any file descriptors the
worker needs attached (SCM_RIGHTS); zygote -> orchestrator ``{"id": i, "pid": p}`` and, when the child
exits, ``{"id": i, "exit": code}`` (a negative code: killed by that signal, as subprocess reports it).
The orchestrator side below imports no torch.
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

LOCKSTEP_FDS_ENV = "PERFGATE_LOCKSTEP_FDS"  # "read,write": the lockstep pipe's fds as the child sees them
FORKED_ENV = "PERFGATE_FORKED"  # set in a forked worker's environment: its results say how it started
START_TIMEOUT_S = 300


class ZygoteUnavailable(RuntimeError):
    """The zygote could not start, or cannot fork safely: spawn workers instead."""


def _send(sock: socket.socket, obj: dict[str, Any], fds: list[int] | None = None) -> None:
    _send_bytes(sock, (json.dumps(obj) + "\n").encode(), fds)


def _send_bytes(sock: socket.socket, data: bytes, fds: list[int] | None = None) -> None:
    if fds:
        socket.send_fds(sock, [data], fds)
    else:
        sock.sendall(data)


# ---------------------------------------------------------------- the orchestrator's side

class ForkedProcess:
    """A worker forked by a zygote, with the parts of subprocess.Popen the runner uses."""

    def __init__(self, zygote: Zygote, request_id: int, pid: int) -> None:
        self.zygote, self.id, self.pid = zygote, request_id, pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            self.zygote.pump(0.0)
            self.returncode = self.zygote.exits.get(self.id)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.perf_counter() + timeout
        while self.poll() is None:
            left = None if deadline is None else deadline - time.perf_counter()
            if left is not None and left <= 0:
                raise subprocess.TimeoutExpired(f"worker {self.pid}", timeout or 0.0)
            self.zygote.pump(left)
        assert self.returncode is not None
        return self.returncode


class Zygote:
    """One fork server: started with ``env`` in ``cwd``; ``work_dir`` (the run's scratch folder) holds its
    log and goes on its command line, which its children share, so they can be found by it."""

    def __init__(self, env: dict[str, str], cwd: Path | None, work_dir: Path, preexec_fn: Any = None) -> None:
        self.sock, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        self._buf = b""
        self._next = 0
        self.exits: dict[int, int] = {}
        self._pids: dict[int, int] = {}
        work_dir.mkdir(parents=True, exist_ok=True)
        self.log_path = work_dir / f"zygote-{os.getpid()}-{id(self):x}.log"
        cmd = [sys.executable, "-m", "perfgate.worker", "--zygote", str(theirs.fileno()), "--tag", str(work_dir)]
        from perfgate.runner import layout_padded_env  # here: runner imports this module

        env = layout_padded_env(cmd, env)
        try:
            with open(self.log_path, "wb") as log:
                self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                             env=env, cwd=cwd, pass_fds=(theirs.fileno(),), preexec_fn=preexec_fn)
        finally:
            theirs.close()
        try:
            hello = self._recv(time.perf_counter() + START_TIMEOUT_S)
        except (EOFError, TimeoutError) as exc:
            err = self._stop()
            raise ZygoteUnavailable(f"the worker fork server did not start: {err[-300:]}") from exc
        if hello.get("threads", 1) != 1:
            self._stop()
            raise ZygoteUnavailable(f"importing torch left {hello.get('threads')} threads in the fork server")
        # an empty request first: the zygote's loop allocates a few things the first time through, so
        # without it the first worker would fork from another heap than every later one
        if self.spawn("", "", "", {}, None).wait(START_TIMEOUT_S) != 0:
            self._stop()
            raise ZygoteUnavailable("the worker fork server could not fork")

    def _recv(self, deadline: float | None) -> dict[str, Any]:
        while b"\n" not in self._buf:
            left = None if deadline is None else max(deadline - time.perf_counter(), 0.0)
            if not select.select([self.sock], [], [], left)[0]:
                raise TimeoutError
            chunk = self.sock.recv(65536)
            if not chunk:
                raise EOFError
            self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        return json.loads(line)

    def pump(self, timeout: float | None) -> None:
        """Take in the zygote's messages for up to ``timeout`` seconds (at least one when there is one)."""
        deadline = None if timeout is None else time.perf_counter() + timeout
        try:
            while True:
                msg = self._recv(deadline)
                if "exit" in msg:
                    self.exits[msg["id"]] = int(msg["exit"])
                    self._pids.pop(msg["id"], None)
                deadline = time.perf_counter()  # then only what is already there
        except TimeoutError:
            return
        except EOFError:  # the zygote died: its children died with it (PR_SET_PDEATHSIG)
            for rid in list(self._pids):
                self.exits[rid] = -signal.SIGKILL
            self._pids.clear()

    def spawn(self, case: str, out: str, log: str, env: dict[str, str], cwd: Path | None,
              fds: tuple[int, ...] = ()) -> ForkedProcess:
        rid = self._next
        env = dict(env)
        if fds:
            env[LOCKSTEP_FDS_ENV] = ""  # filled in by the zygote with the numbers the child sees
        from perfgate.runner import layout_padded_json

        request = {"id": rid, "case": case, "out": out, "log": log, "env": env, "cwd": str(cwd) if cwd else None}
        data = layout_padded_json(request, end="\n").encode()
        if len(data) >= REQUEST_MAX:  # a zygote takes no more: spawn this one
            raise ZygoteUnavailable(f"the worker's request is over {REQUEST_MAX} bytes (its environment)")
        # the zygote numbers the requests it receives itself (it does not parse them): count only those sent
        self._next += 1
        _send_bytes(self.sock, data, list(fds))
        while True:  # one request in flight: the fds attached to it are unambiguous
            try:
                msg = self._recv(time.perf_counter() + 60)
            except (EOFError, TimeoutError) as exc:
                raise ZygoteUnavailable("the worker fork server stopped answering") from exc
            if "exit" in msg:
                self.exits[msg["id"]] = int(msg["exit"])
                self._pids.pop(msg["id"], None)
            elif msg.get("id") == rid:
                if "error" in msg:
                    raise ZygoteUnavailable(f"the worker fork server could not fork: {msg['error']}")
                self._pids[rid] = int(msg["pid"])
                return ForkedProcess(self, rid, int(msg["pid"]))

    def alive(self) -> bool:
        return self.proc.poll() is None

    def _stop(self) -> str:
        try:
            self.sock.close()
        except OSError:
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        try:
            text = self.log_path.read_text(errors="replace")
            self.log_path.unlink()
        except OSError:
            text = ""
        return text

    def close(self) -> None:
        self._stop()


# ---------------------------------------------------------------- the zygote's side

def _threads() -> int:
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return 1


def _child(req: dict[str, Any], fds: list[int], sock: socket.socket, zygote_pid: int) -> None:
    """In the forked child: become a worker process of its own, run the case, exit. Never returns."""
    if not req["case"]:  # the empty request (Zygote.__init__)
        os._exit(0)
    code = 1
    try:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)  # the zygote's own handler is not the worker's
        os.setsid()
        try:
            import ctypes

            ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        except OSError:
            pass
        if os.getppid() != zygote_pid:
            os._exit(1)
        sock.close()
        log = os.open(req["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.close(log)
        os.close(null)
        env = dict(req["env"])
        env[FORKED_ENV] = "1"
        if LOCKSTEP_FDS_ENV in env:
            env[LOCKSTEP_FDS_ENV] = ",".join(str(fd) for fd in fds)
        os.environ.clear()
        os.environ.update(env)
        if req.get("cwd"):
            os.chdir(req["cwd"])
        from perfgate import worker

        code = worker.main(["--case", req["case"], "--out", req["out"]])
    except BaseException:  # noqa: BLE001 - a child must never return into the zygote's loop
        import traceback

        traceback.print_exc()
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def _terminated(signum: int, frame: Any) -> None:
    raise SystemExit(0)


def serve(fd: int) -> int:
    """The zygote's loop: preload, say ready, then fork a child per request and report its exit. A subreaper
    (perfgate.reaper): what a worker leaves behind when it dies comes back here and is ended; when the
    orchestrator goes (the socket closes, or SIGTERM from PR_SET_PDEATHSIG), every descendant is ended
    before this process exits."""
    from perfgate import reaper
    from perfgate.reaper import keep_environment_private

    reaper.become_subreaper()
    # before the first fork: no worker can read this process's memory or attach to it (one that did could
    # change what every later worker of this fork server runs), and its workers inherit the same
    keep_environment_private()
    signal.signal(signal.SIGTERM, _terminated)
    try:
        return _serve(fd, reaper)
    finally:
        reaper.kill_descendants(os.getpid(), reap=True)


REQUEST_MAX = 1 << 18  # the largest request the zygote takes (its environment, mostly), bytes
_MAX_FDS = 16


def _serve(fd: int, reaper: Any) -> int:
    """Every child must start from the same memory: a worker forked after the k-th request inherits the
    zygote's heap as handling k requests left it, and the heap's free chunks decide where the worker's
    tensors land, so a zygote that parsed requests in its own memory gave each process index its own,
    repeatable speed (docs/gate.md: "Why processes of the same code differ"). So the zygote allocates
    nothing of a request's size: it receives each request into one buffer made before the first,
    forks, and the child parses it. What the loop does allocate are a few small objects, the same ones
    every time."""
    import torch  # noqa: F401 - the point of the zygote: paid once

    from perfgate import worker  # noqa: F401 - the children's code path, imported once too

    buf = bytearray(REQUEST_MAX)
    view = memoryview(buf)
    ancillary = socket.CMSG_SPACE(_MAX_FDS * 4)
    sock = socket.socket(fileno=fd)
    _send(sock, {"ready": True, "threads": _threads(), "pid": os.getpid()})
    children: dict[int, int] = {}  # pid -> request id
    pidfds: dict[int, int] = {}  # pid -> a pidfd that turns readable when the child exits (Linux >= 5.3)
    size, fds, next_id = 0, [], 0
    me = os.getpid()
    while True:
        # wake on a request or a child's exit; poll every 20 ms only where pidfds are not available
        polling = any(pid not in pidfds for pid in children)
        readable = select.select([sock, *pidfds.values()], [], [], 0.02 if polling else None)[0]
        if sock in readable:
            got, anc, _, _ = sock.recvmsg_into([view[size:]], ancillary)
            if not got:
                return 0  # the orchestrator is gone; serve() ends what is left
            size += got
            for level, kind, data in anc:
                if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                    fds += [int.from_bytes(data[i:i + 4], sys.byteorder) for i in range(0, len(data) - 3, 4)]
            # one request in flight at a time (Zygote.spawn waits for its answer): it ends with the newline
            if buf[size - 1] == 0x0A or size == REQUEST_MAX:
                rid, next_id = next_id, next_id + 1
                sys.stdout.flush()
                sys.stderr.flush()
                if size == REQUEST_MAX:  # Zygote.spawn sends none that large: not a request
                    return 1
                try:
                    pid = os.fork()
                except OSError as exc:
                    _send(sock, {"id": rid, "error": str(exc)})
                    pid = -1
                if pid == 0:
                    _child(json.loads(bytes(view[:size])), fds, sock, me)
                size = 0
                for f in fds:
                    os.close(f)
                fds = []
                if pid > 0:
                    children[pid] = rid
                    try:
                        pidfds[pid] = os.pidfd_open(pid)
                    except (AttributeError, OSError):
                        pass
                    _send(sock, {"id": rid, "pid": pid})
        worker_ended = False
        while True:  # workers, and the orphans re-parented here (ended below)
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            if pid in pidfds:
                os.close(pidfds.pop(pid))
            if pid in children:
                worker_ended = True
                _send(sock, {"id": children.pop(pid), "exit": os.waitstatus_to_exitcode(status)})
        if worker_ended:  # what it left running is a child of this subreaper now, but no worker's
            reaper.kill_descendants(me, keep=frozenset(children))
