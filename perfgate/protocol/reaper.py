"""Ending every process a worker started, whatever process group or session it put them in.

A workload may start processes of its own (a data loader, a simulator, a shell pipeline), in the worker's
process group or in a session of their own (``start_new_session=True``, a daemon's double fork). Killing the
worker's process group misses the latter, and a killed worker's children are re-parented to init, out of
reach. So (Linux):

- every worker makes itself a *child subreaper* (``prctl(PR_SET_CHILD_SUBREAPER)``): a process orphaned
  below it is re-parented to it, not to init, so all its descendants stay in its process tree while it runs;
- a worker ends its descendants before it exits (``kill_descendants``), and the orchestrator ends a timed-out
  worker's descendants before the worker itself (the worker stopped first, so it cannot start more);
- the fork server (perfgate.worker.zygote_server) is a subreaper too: what a dead worker left behind comes back to
  it and is ended there, and when the orchestrator dies it ends all its descendants before it exits.

The orchestrator itself is a subreaper while a worker process it spawned runs (a spawned worker, the
probe): what such a worker leaves behind when it dies without ending it (killed, ``os._exit``, a crash) comes
back to the orchestrator, which ends it when the worker has been waited for (``ended``). Only then: between
workers it is no subreaper, so a daemon that git or another tool detaches is not taken for a worker's.

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


def become_subreaper(on: bool = True) -> bool:
    """Make this process the subreaper of its descendants (``on=False``: no longer); False where that is not
    possible."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes

        return ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, int(on), 0, 0, 0) == 0
    except OSError:
        return False


def _stat_fields(pid: int) -> list[str] | None:
    """/proc/PID/stat after the command name: state, parent, process group, session, ...; None when gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1].split()
    except (OSError, IndexError):
        return None


def _state(pid: int) -> str | None:
    """The process's state letter (R, S, Z...), None when it is gone."""
    fields = _stat_fields(pid)
    return fields[0] if fields else None


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


# ---------------------------------------------------------------- the orchestrator's side

_own: set[int] = set()  # processes this one started and has not waited for yet (workers, probes, fork servers)
_watched: set[int] = set()  # of those, the ones that run workload code directly below this process
_had: frozenset[int] = frozenset()  # its children when it became their subreaper: not ours to end
_adopting = False


def adopt_orphans() -> None:
    """Call before starting a process that runs workload code directly below this one: from now until
    ``ended`` has been called for every such process, this process is a subreaper, so whatever they leave
    behind comes back here to be ended."""
    global _had, _adopting
    if not _adopting and sys.platform.startswith("linux"):
        _had = frozenset(children(os.getpid()))
        _adopting = become_subreaper()


def started(pid: int, runs_workload: bool = True) -> None:
    """``pid`` is a process this one started (``runs_workload``: a worker or probe, after ``adopt_orphans``;
    else a fork server, which ends its own workers' orphans): never taken for an orphan."""
    _own.add(pid)
    if runs_workload:
        _watched.add(pid)


def ended(pid: int | None) -> int:
    """``pid`` (from ``started``; None: a start that failed) has been waited for: end every orphan that came
    back to this process, and stop being a subreaper when no worker is left. Returns how many processes
    were ended."""
    global _adopting
    if pid is not None:
        _own.discard(pid)
        _watched.discard(pid)
    if not _adopting:
        return 0
    killed = end_orphans()
    if not _watched:
        become_subreaper(False)
        _adopting = False
    return killed


def end_orphans() -> int:
    """Kill (and collect) every child of this process that it did not start and did not have before it became
    a subreaper, with everything below it: processes re-parented here when a worker died. A child in this
    process's own session is never one (a worker and all it starts live in sessions of their own)."""
    me, session = os.getpid(), os.getsid(0)
    killed = 0
    for _ in range(_MAX_ROUNDS):
        found = []
        for pid in children(me):
            fields = _stat_fields(pid)
            if pid not in _own and pid not in _had and fields and int(fields[3]) != session:
                found.append((pid, fields[0]))
        if not found:
            break
        for pid, state in found:
            if state != "Z":
                kill_tree(pid)
                killed += 1
            try:
                os.waitpid(pid, 0)  # ours now: collect it, and only it (never another child's exit status)
            except ChildProcessError:
                pass
    return killed


PR_SET_DUMPABLE = 4  # linux/prctl.h


def keep_environment_private() -> bool:
    """Mark this process not dumpable (``prctl(PR_SET_DUMPABLE, 0)``): another process of the same user, a
    workload among them, can then read neither its /proc/PID/environ (PERFGATE_HISTORY_URL, cloud keys:
    what the allow-list keeps from workers) nor its memory, nor attach a debugger to it. Not a boundary
    against root or CAP_SYS_PTRACE (docs/ci.md, "What the worker allow-list is and is not"). A program this
    process starts is dumpable again once it execs; a process it forks without exec (the fork server's
    workers) stays as this one is. False where that is not possible (not Linux)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes

        return ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) == 0
    except OSError:
        return False
