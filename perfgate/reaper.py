"""Ending every process a worker started, whatever process group or session it put them in.

A workload may start processes of its own (a data loader, a simulator, a shell pipeline), in the worker's
process group or in a session of their own (``start_new_session=True``, a daemon's double fork). Killing the
worker's process group misses the latter, and a killed worker's children are re-parented to init, out of
reach. So (Linux):

- every worker makes itself a *child subreaper* (``prctl(PR_SET_CHILD_SUBREAPER)``): a process orphaned
  below it is re-parented to it, not to init, so all its descendants stay in its process tree while it runs;
- a worker ends its descendants before it exits (``kill_descendants``), and the orchestrator ends a timed-out
  worker's descendants before the worker itself (the worker stopped first, so it cannot start more);
- the fork server (perfgate.zygote) is a subreaper too: what a dead worker left behind comes back to it and
  is ended there, and when the orchestrator dies it ends all its descendants before it exits.

No torch here. Elsewhere than Linux these are no-ops (workers still get their own process group).
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

PR_SET_CHILD_SUBREAPER = 36  # linux/prctl.h
_MAX_ROUNDS = 200


def become_subreaper() -> bool:
    """Make this process the subreaper of its descendants; False where that is not possible."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes

        return ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except OSError:
        return False


def _state(pid: int) -> str | None:
    """The process's state letter (R, S, Z...), None when it is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1][0]
    except (OSError, IndexError):
        return None


def children(pid: int) -> list[int]:
    """The direct children of ``pid`` (zombies included), from /proc."""
    found: list[int] = []
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return found
    for task in tasks:
        try:
            found += [int(c) for c in (task / "children").read_text().split()]
        except OSError:  # a kernel without /proc/PID/task/TID/children: look at every process's parent
            return _children_by_scan(pid)
    return found


def _children_by_scan(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if int((entry / "stat").read_text().rsplit(") ", 1)[1].split()[1]) == pid:
                    found.append(int(entry.name))
            except (OSError, IndexError, ValueError):
                pass
    return found


def descendants(pid: int, keep: frozenset[int] = frozenset()) -> list[int]:
    """Every live (not zombie) process below ``pid``, parents before their children; without the processes
    in ``keep`` and their own descendants."""
    out, todo, seen = [], [c for c in children(pid) if c not in keep], {pid}
    while todo:
        p = todo.pop(0)
        if p in seen:
            continue
        seen.add(p)
        if _state(p) not in (None, "Z"):
            out.append(p)
        todo += children(p)
    return out


def _reap() -> None:
    """Collect this process's exited children (orphans re-parented to a subreaper come back as zombies)."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def kill_descendants(pid: int, keep: frozenset[int] = frozenset(), reap: bool = False) -> int:
    """SIGKILL every process below ``pid`` except ``keep`` (and theirs), until none is left: processes it
    kills cannot start more, and their orphans come back under ``pid`` when it is a live subreaper, to be
    found in the next round. ``reap``: ``pid`` is this process; collect the zombies as they come. Returns
    how many processes it killed."""
    killed = 0
    for _ in range(_MAX_ROUNDS):
        if reap:
            _reap()
        found = descendants(pid, keep)
        if not found:
            break
        for p in found:
            try:
                os.kill(p, signal.SIGKILL)
                killed += 1
            except (ProcessLookupError, PermissionError):
                pass
        time.sleep(0.005)
    if reap:
        _reap()
    return killed


def kill_tree(pid: int) -> None:
    """End ``pid`` and everything below it: stop it (so it starts nothing more and, a subreaper, keeps
    what is orphaned below it), kill its descendants, then it."""
    try:
        os.kill(pid, signal.SIGSTOP)
    except ProcessLookupError:
        return
    if sys.platform.startswith("linux"):
        kill_descendants(pid)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
