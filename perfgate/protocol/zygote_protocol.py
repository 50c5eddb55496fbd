"""What the fork server's two sides share: its request protocol and the names it sets in a worker's
environment. Standard library only: the orchestrator's side (perfgate.running.zygote, used by perfgate.running.workers), the
fork server (perfgate.worker.zygote_server) and the worker (perfgate.worker.main) all import this module, and none of
them imports another's code through it.

The fork server is started as ``python -m perfgate.worker.main --zygote FD --tag RUN_WORK_DIR`` (FD: its end of
a socketpair; the tag only names the run's folder on its command line). On that stream socket, one JSON
object per line:

- fork server -> orchestrator, once: ``{"ready": true, "threads": n, "pid": p}``;
- orchestrator -> fork server, one at a time: ``{"id": i, "case": ..., "out": ..., "log": ..., "env":
  {...}, "cwd": ...}``, padded with spaces to whole pages (perfgate.protocol.layout.padded_json) and at most
  ``REQUEST_MAX`` bytes, with any file descriptors the worker needs attached (SCM_RIGHTS, at most
  ``MAX_FDS``); a request whose ``case`` is empty forks a child that exits at once, unless it carries
  ``"probe": [workloads folders]``: then the child is the worker probe and writes the catalog to ``out``
  (a fork server older than probe requests takes one for the empty request: its child writes nothing, and
  the orchestrator spawns the probe instead);
- fork server -> orchestrator: ``{"id": i, "pid": p}`` (or ``{"id": i, "error": ...}`` when it could not
  fork) and, when the child exits, ``{"id": i, "exit": code}`` (a negative code: killed by that signal, as
  subprocess reports it);
- orchestrator -> fork server, to a fork server whose ready message says ``"kill": true``: ``K<i>\n`` (a
  timeout: end worker ``i`` and all it started; the fork server, its parent, has not reaped it, so its pid is
  still its own), answered with ``{"killed": i, "found": bool}`` (false: it had exited already).
"""

from __future__ import annotations

import json
import socket
from typing import Any

LOCKSTEP_FDS_ENV = "PERFGATE_LOCKSTEP_FDS"  # "read,write": the lockstep pipe's fds as the child sees them
FORKED_ENV = "PERFGATE_FORKED"  # set in a forked worker's environment: its results say how it started
REQUEST_MAX = 1 << 18  # the largest request the fork server takes (its environment, mostly), bytes
MAX_FDS = 16  # the most file descriptors one request may carry
KILL_REQUEST = ord("K")  # the first byte of a kill request (a fork request is JSON: "{")


def send(sock: socket.socket, obj: dict[str, Any], fds: list[int] | None = None) -> None:
    """``obj`` as one line of JSON, with ``fds`` attached."""
    send_bytes(sock, (json.dumps(obj) + "\n").encode(), fds)


def send_bytes(sock: socket.socket, data: bytes, fds: list[int] | None = None) -> None:
    """``data`` (one whole message), with ``fds`` attached."""
    if fds:
        socket.send_fds(sock, [data], fds)
    else:
        sock.sendall(data)
