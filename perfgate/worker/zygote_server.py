"""The fork server's loop, in the ``python -m perfgate.worker.main --zygote FD`` process (perfgate.running.zygote says
why there is one): import torch once, say ready, then fork one child per request; each child becomes a
worker process of its own and runs the worker's ``--case`` (or ``--probe``) code path, handed in by
perfgate.worker.main (``serve(fd, worker.main)``), so this module does not import the worker back, and nothing
of the orchestrator's. The protocol is perfgate.protocol.zygote_protocol.
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import sys
from collections.abc import Callable
from typing import Any

from perfgate.protocol import reaper
from perfgate.protocol.zygote_protocol import FORKED_ENV, KILL_REQUEST, LOCKSTEP_FDS_ENV, MAX_FDS, REQUEST_MAX, send

RunWorker = Callable[[list[str]], int]  # the worker's main: its command line -> exit code


def _threads() -> int:
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return 1


def _child(req: dict[str, Any], fds: list[int], sock: socket.socket, zygote_pid: int,
           run_worker: RunWorker) -> None:
    """In the forked child: become a worker process of its own, run the case, exit. Never returns."""
    probe = req.get("probe")
    if not req["case"] and probe is None:  # the empty request (perfgate.running.zygote.Zygote's first)
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
        if probe is not None:  # the probe: the catalog of these workloads folders, written to "out"
            code = run_worker(["--probe", *(a for d in probe for a in ("--workloads-dir", d)), "--out", req["out"],
                               *(["--toggles-here"] if req.get("toggles_here") else [])])
        else:
            code = run_worker(["--case", req["case"], "--out", req["out"]])
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


def serve(fd: int, run_worker: RunWorker) -> int:
    """The zygote's loop on the socket ``fd``: preload, say ready, then fork a child per request, which runs
    ``run_worker(["--case", CASE, "--out", OUT])`` (a probe request: ``["--probe", ..., "--out", OUT]``), and
    report its exit. A subreaper (perfgate.protocol.reaper): what a worker leaves behind when it dies comes back here
    and is ended; when the orchestrator goes (the socket closes, or SIGTERM from PR_SET_PDEATHSIG), every
    descendant is ended before this process exits."""
    reaper.become_subreaper()
    # before the first fork: no worker can read this process's memory or attach to it (one that did could
    # change what every later worker of this fork server runs), and its workers inherit the same
    reaper.keep_environment_private()
    signal.signal(signal.SIGTERM, _terminated)
    try:
        return _serve(fd, run_worker)
    finally:
        # the orchestrator's death both closes the socket and sends SIGTERM (PR_SET_PDEATHSIG): a SIGTERM that
        # lands while this cleans up must not end the cleanup halfway, with the workload's processes alive
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        reaper.kill_descendants(os.getpid(), reap=True)


def _kill_child(rid: int, children: dict[int, int], sock: socket.socket) -> None:
    """End worker ``rid`` and all it started, when it has not been reaped yet: only this process (its parent)
    reaps it, and only in its loop, so until then its pid (and its process group's) cannot have been given to
    another process, as it could be by the time the orchestrator signalled the number itself."""
    pid = next((p for p, r in children.items() if r == rid), None)
    if pid is not None:
        reaper.kill_tree(pid)
        try:
            os.killpg(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    send(sock, {"killed": rid, "found": pid is not None})


def _serve(fd: int, run_worker: RunWorker) -> int:
    """Every child must start from the same memory: a worker forked after the k-th request inherits the
    zygote's heap as handling k requests left it, and the heap's free chunks decide where the worker's
    tensors land, so a zygote that parsed requests in its own memory gave each process index its own,
    repeatable speed (docs/gate.md: "Why processes of the same code differ"). So the zygote allocates
    nothing of a request's size: it receives each request into one buffer made before the first,
    forks, and the child parses it. What the loop does allocate are a few small objects, the same ones
    every time."""
    import torch  # noqa: F401 - the point of the zygote: paid once (the worker's modules: this runs in it)

    buf = bytearray(REQUEST_MAX)
    view = memoryview(buf)
    ancillary = socket.CMSG_SPACE(MAX_FDS * 4)
    sock = socket.socket(fileno=fd)
    send(sock, {"ready": True, "threads": _threads(), "pid": os.getpid(), "kill": True})
    children: dict[int, int] = {}  # pid -> request id
    pidfds: dict[int, int] = {}  # pid -> a pidfd that turns readable when the child exits (Linux >= 5.3)
    size, fds, next_id = 0, [], 0
    me = os.getpid()
    while True:
        # wake on a request or a child's exit; poll every 20 ms only where pidfds are not available
        polling = any(pid not in pidfds for pid in children)
        readable = select.select([sock, *pidfds.values()], [], [], 0.02 if polling else None)[0]  # type: ignore[type-var]  # a socket and ints
        if sock in readable:
            got, anc, _, _ = sock.recvmsg_into([view[size:]], ancillary)
            if not got:
                return 0  # the orchestrator is gone; serve() ends what is left
            size += got
            for level, kind, data in anc:
                if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                    fds += [int.from_bytes(data[i:i + 4], sys.byteorder) for i in range(0, len(data) - 3, 4)]
            # one request in flight at a time (the orchestrator waits for each answer): it ends with a newline
            if buf[0] == KILL_REQUEST and buf[size - 1] == 0x0A:  # no fork, no request number
                _kill_child(int(bytes(view[1:size - 1])), children, sock)
                size = 0
                for f in fds:
                    os.close(f)
                fds = []
            elif buf[size - 1] == 0x0A or size == REQUEST_MAX:
                rid, next_id = next_id, next_id + 1
                sys.stdout.flush()
                sys.stderr.flush()
                if size == REQUEST_MAX:  # the orchestrator sends none that large: not a request
                    return 1
                try:
                    pid = os.fork()
                except OSError as exc:
                    send(sock, {"id": rid, "error": str(exc)})
                    pid = -1
                if pid == 0:
                    _child(json.loads(bytes(view[:size])), fds, sock, me, run_worker)
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
                    send(sock, {"id": rid, "pid": pid})
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
                send(sock, {"id": children.pop(pid), "exit": os.waitstatus_to_exitcode(status)})
        if worker_ended:  # what it left running is a child of this subreaper now, but no worker's
            reaper.kill_descendants(me, keep=frozenset(children))
