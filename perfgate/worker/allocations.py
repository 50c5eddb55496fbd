"""Where one step allocates memory: its allocation sites, the Python function (and on CPU the op) that asked.

The profile pass (perfgate.worker.profiling.profile_pass) calls ``allocation_sites`` once, after its profiler
window, for one more step of the case; a memory regression's report diffs base and head sites
(perfgate.reports.allocations). Two sources, one shape (``profile["memory_sites"]`` in results.json):

- CPU: torch.profiler with ``profile_memory=True`` and ``with_stack=True`` over one step. Each op's own
  allocations (net of what it frees itself, ``self_cpu_memory_usage``) go to the innermost Python function
  outside torch, perfgate and the standard library that it runs inside (its line: the function's first),
  with the outermost aten op of the call (``aten::zeros``, not the ``aten::empty`` inside it).
- CUDA: the caching allocator's history (``torch.cuda.memory._record_memory_history``, Python stacks only)
  over one step (a captured graph: one replay); every ``alloc`` of the step goes to its first Python frame
  outside torch and perfgate (its line: the allocating one). The allocator's snapshot is written beside the case's trace
  (``memory_snapshot.pickle``) for https://pytorch.org/memory_viz.

A site is keyed by function and file name, not line or folder: a base checked out elsewhere, or a change that
moves lines, still names the same site. Memory a case holds from its build (weights, buffers made once)
is in its peaks, not in one step's sites.
"""

from __future__ import annotations

import functools
import os
import pickle
import re
import sys
import sysconfig
from collections.abc import Iterable
from pathlib import Path
from typing import Any

SITES = 15  # sites kept per case, most bytes first
MAX_ENTRIES = 200_000  # allocator history entries kept while one step runs
SNAPSHOT_NAME = "memory_snapshot.pickle"
NO_FRAME = "(no Python frame outside torch)"
_FRAME = re.compile(r"^(?P<file>.*)\((?P<line>\d+)\): (?P<name>.*)$")


def _internal_roots() -> tuple[str, ...]:
    """Folders whose frames are not a user's allocation site: torch, perfgate, the standard library."""
    import torch

    roots = {str(Path(torch.__file__).resolve().parent), str(Path(__file__).resolve().parents[1])}  # torch, perfgate/
    for key in ("stdlib", "platstdlib"):
        path = sysconfig.get_paths().get(key)
        if path:
            roots.add(str(Path(path).resolve()))
    return tuple(r + os.sep for r in roots)


@functools.lru_cache(maxsize=4096)
def resolve(filename: str) -> str:
    """``filename`` as a full path: the profiler's tracer names a file relative to the ``sys.path`` entry it
    was found under (``torch/nn/modules/conv.py``), so a relative name is looked up there; as given where
    no entry holds it."""
    try:
        path = Path(filename)
        if path.is_absolute():
            return str(path.resolve())
        for entry in sys.path:
            candidate = Path(entry or ".") / path
            if candidate.is_file():
                return str(candidate.resolve())
    except (OSError, RuntimeError, ValueError):
        pass
    return filename


def _is_user(filename: str, roots: tuple[str, ...]) -> bool:
    if not filename or filename.startswith("<"):
        return False
    return not resolve(filename).startswith(roots)


def user_frame(frames: Iterable[tuple[str, int, str]], roots: tuple[str, ...]) -> tuple[str, int, str] | None:
    """The innermost frame (``frames`` innermost first: file, line, function) outside ``roots``."""
    for frame in frames:
        if _is_user(frame[0], roots):
            return frame
    return None


def _site(frame: tuple[str, int, str] | None) -> dict[str, Any]:
    if frame is None:
        return {"site": NO_FRAME, "file": None, "line": None}
    file, line, name = frame
    return {"site": f"{name} ({Path(file).name})", "file": resolve(file), "line": int(line)}


def _add(sites: dict[tuple[str, str | None], dict[str, Any]], frame: tuple[str, int, str] | None, op: str | None,
         size: float) -> None:
    where = _site(frame)
    entry = sites.setdefault((where["site"], op), {**where, "op": op, "bytes_per_step": 0.0,
                                                   "allocations_per_step": 0.0})
    entry["bytes_per_step"] += size
    entry["allocations_per_step"] += 1


def _summary(sites: dict[tuple[str, str | None], dict[str, Any]], source: str, steps: int) -> dict[str, Any]:
    rows = sorted(sites.values(), key=lambda r: (-r["bytes_per_step"], r["site"], r["op"] or ""))
    for r in rows:
        r["bytes_per_step"] /= steps
        r["allocations_per_step"] /= steps
    return {"source": source, "steps": steps, "total_bytes_per_step": sum(r["bytes_per_step"] for r in rows),
            "sites": rows[:SITES]}


# ---------------------------------------------------------------- CPU: the profiler's memory events


def _stack_frames(stack: Iterable[str]) -> list[tuple[str, int, str]]:
    """The profiler's ``"file(line): function"`` stack entries, innermost first, as tuples."""
    out = []
    for entry in stack:
        m = _FRAME.match(str(entry))
        if m:
            out.append((m["file"], int(m["line"]), m["name"]))
    return out


def _outermost_op(evt: Any) -> Any:
    """The outermost aten op of the call ``evt`` belongs to (``aten::zeros`` for the ``aten::empty`` in it)."""
    top = evt
    parent = getattr(evt, "cpu_parent", None)
    while parent is not None:
        if str(parent.name).startswith("aten::"):
            top = parent
        parent = getattr(parent, "cpu_parent", None)
    return top


def _stack_of(evt: Any) -> list[str]:
    """``evt``'s Python stack, or its nearest ancestor's (an op called from C++ may record none); where no
    event carries one, the Python function events it runs inside (``with_stack``'s tracer names them
    ``"file(line): function"``), innermost first."""
    event = evt
    while event is not None:
        stack = getattr(event, "stack", None)
        if stack:
            return list(stack)
        event = getattr(event, "cpu_parent", None)
    parents = []
    event = getattr(evt, "cpu_parent", None)
    while event is not None:
        if _FRAME.match(str(event.name)):
            parents.append(str(event.name))
        event = getattr(event, "cpu_parent", None)
    return parents


def cpu_sites(step: Any) -> dict[str, Any]:
    """The allocation sites of one call of ``step`` on the CPU, from the profiler's memory events."""
    from torch.profiler import ProfilerActivity, profile

    roots = _internal_roots()
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True, with_stack=True,
                 record_shapes=False) as prof:
        step()
    sites: dict[tuple[str, str | None], dict[str, Any]] = {}
    for evt in prof.events():
        size = float(getattr(evt, "self_cpu_memory_usage", 0) or 0)
        if size <= 0 or not str(evt.name).startswith("aten::"):
            continue
        top = _outermost_op(evt)
        _add(sites, user_frame(_stack_frames(_stack_of(evt)), roots), str(top.name), size)
    return _summary(sites, "torch.profiler memory events over one step (op's own allocations, net of its "
                           "own frees)", 1)


# ---------------------------------------------------------------- CUDA: the caching allocator's history


def _trace_frames(entry: dict[str, Any]) -> list[tuple[str, int, str]]:
    out = []
    for f in entry.get("frames") or []:
        if isinstance(f, dict):
            out.append((str(f.get("filename", "")), int(f.get("line", 0) or 0), str(f.get("name", "?"))))
    return out


def snapshot_sites(snapshot: dict[str, Any], device_index: int, roots: tuple[str, ...]) -> dict[str, Any]:
    """The allocation sites of the ``alloc`` entries of one device's history in an allocator ``snapshot``."""
    traces = snapshot.get("device_traces") or []
    entries = traces[device_index] if device_index < len(traces) else []
    sites: dict[tuple[str, str | None], dict[str, Any]] = {}
    for entry in entries:
        if isinstance(entry, dict) and entry.get("action") == "alloc":
            _add(sites, user_frame(_trace_frames(entry), roots), None, float(entry.get("size", 0) or 0))
    return _summary(sites, "CUDA caching allocator history over one step (every allocation)", 1)


def cuda_sites(step: Any, device: str, out_dir: Path) -> tuple[dict[str, Any], Path]:
    """The allocation sites of one call of ``step`` on ``device`` from the allocator's history, and the
    snapshot file written for memory_viz."""
    import torch

    index = torch.device(device).index
    index = torch.cuda.current_device() if index is None else index
    torch.cuda.synchronize()
    record = torch.cuda.memory._record_memory_history
    record(enabled="all", context="alloc", stacks="python", max_entries=MAX_ENTRIES, device=index,
           clear_history=True)
    try:
        step()
        torch.cuda.synchronize()
        snapshot = torch.cuda.memory._snapshot()
    finally:
        record(enabled=None, device=index)
    path = out_dir / SNAPSHOT_NAME
    with path.open("wb") as f:
        pickle.dump(snapshot, f)
    return snapshot_sites(snapshot, index, _internal_roots()), path


def allocation_sites(spec: Any, prepared: Any, out_dir: Path, run_dir: Path) -> dict[str, Any]:
    """What the profile pass adds to a case's profile: ``memory_sites`` of one step (a captured CUDA graph:
    one replay) and, on CUDA, ``memory_snapshot`` (the snapshot's path relative to the run folder)."""
    state = prepared.built.state

    def step() -> Any:
        return prepared.unit() if prepared.captured else prepared.step(state)

    if spec.device.startswith("cuda"):
        detail, path = cuda_sites(step, spec.device, out_dir)
        return {"memory_sites": detail, "memory_snapshot": str(path.resolve().relative_to(run_dir.resolve()))}
    return {"memory_sites": cpu_sites(step)}
