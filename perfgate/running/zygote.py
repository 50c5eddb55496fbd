"""A fork server for worker processes: ``import torch`` once, fork a fresh process per worker.

Every worker process used to pay Python's start-up and ``import torch`` (about 2.4 s of the 3.7 s a
worker cost on the 2-core runner, docs/lab-record.md) before measuring anything. A zygote is one
``python -m perfgate.worker.main --zygote FD`` process that imports torch and perfgate's worker, then forks a
child per worker request. The child is a new OS process like a spawned worker: its own process group,
PR_SET_PDEATHSIG (it dies with the zygote, which dies with the orchestrator), its own output file,
environment and working folder, its own memory (copy-on-write) and a crash, hang or out-of-memory of its
own; it runs exactly the worker's ``--case`` code path.

The zygote never runs a torch op, so no thread pool and no CUDA context exist when it forks (forking
after CUDA is initialised is unsafe; after import it is not). Where importing left more than one thread
in the zygote (a BLAS pool started by numpy with more threads than one), it says so and the runner spawns
workers the plain way instead. Linux only; elsewhere workers are spawned.

This module is the orchestrator's side (Zygote, ForkedProcess), used by perfgate.running.workers: it imports no
torch and none of the worker's code. The fork server's loop, which does, is perfgate.worker.zygote_server; the
protocol between the two, and the names both set in a worker's environment, are perfgate.protocol.zygote_protocol.
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

from perfgate.protocol import layout
from perfgate.protocol.zygote_protocol import LOCKSTEP_FDS_ENV, REQUEST_MAX, send_bytes

START_TIMEOUT_S = 300


class ZygoteUnavailable(RuntimeError):
    """The zygote could not start, or cannot fork safely: spawn workers instead."""


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

    def kill(self) -> bool:
        """End this worker and all it started through the fork server (``Zygote.kill``); False where it
        cannot: then the caller signals the pid itself."""
        return self.zygote.kill(self.id)

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

    def __init__(self, env: dict[str, str], cwd: Path | None, work_dir: Path, preexec_fn: Any = None,
                 python: str | None = None) -> None:
        self.sock, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        self._buf = b""
        self._next = 0
        self.exits: dict[int, int] = {}
        self._pids: dict[int, int] = {}
        work_dir.mkdir(parents=True, exist_ok=True)
        self.log_path = work_dir / f"zygote-{os.getpid()}-{id(self):x}.log"
        cmd = [python or sys.executable, "-m", "perfgate.worker.main", "--zygote", str(theirs.fileno()), "--tag", str(work_dir)]
        env = layout.padded_env(cmd, env)
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
        self.kills = bool(hello.get("kill"))  # an older perfgate's fork server (an --against base) cannot
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
              fds: tuple[int, ...] = (), probe: list[str] | None = None, toggles_here: bool = False) -> ForkedProcess:
        """Fork a worker on ``case``; with ``probe`` (workloads folders) and no case, a probe that writes the
        catalog to ``out`` (an older fork server takes it for the empty request: its child writes nothing)."""
        rid = self._next
        env = dict(env)
        if fds:
            env[LOCKSTEP_FDS_ENV] = ""  # filled in by the zygote with the numbers the child sees
        request: dict[str, Any] = {"id": rid, "case": case, "out": out, "log": log, "env": env,
                                   "cwd": str(cwd) if cwd else None}
        if probe is not None:
            request["probe"] = probe
            if toggles_here:
                request["toggles_here"] = True
        data = layout.padded_json(request, end="\n").encode()
        if len(data) >= REQUEST_MAX:  # a zygote takes no more: spawn this one
            raise ZygoteUnavailable(f"the worker's request is over {REQUEST_MAX} bytes (its environment)")
        # the zygote numbers the requests it receives itself (it does not parse them): count only those sent
        self._next += 1
        send_bytes(self.sock, data, list(fds))
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

    def kill(self, request_id: int) -> bool:
        """Have the fork server end worker ``request_id`` and all it started (it has not reaped it, so the
        pid is still that worker's: one signalled from here may belong to another process by now, the
        worker having exited and been reaped since). True once done, or when the fork server is gone (its
        workers died with it); False where it cannot (an older fork server, or no answer)."""
        if not self.kills or not self.alive():
            return False
        try:
            send_bytes(self.sock, f"K{request_id}\n".encode())
            while True:
                msg = self._recv(time.perf_counter() + 60)
                if "exit" in msg:
                    self.exits[msg["id"]] = int(msg["exit"])
                    self._pids.pop(msg["id"], None)
                elif msg.get("killed") == request_id:
                    return True
        except (EOFError, OSError):  # gone: its children died with it (PR_SET_PDEATHSIG), as pump() records
            self.pump(0.0)
            return True
        except TimeoutError:
            return False

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
