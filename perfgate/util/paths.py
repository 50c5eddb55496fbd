"""Paths built from names perfgate did not choose: a machine key or suite from results.json, a workload,
size or toggle name from a workload file. No torch.

Each name becomes one safe path component (``component``), and the joined path must still resolve inside
its root (``contained``): ``../``, an absolute name or a symlinked folder cannot move a baseline or a
trace folder, or the profiler's cleanup of old traces, out of ``baselines/`` or ``tb/``.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

from perfgate.util.validation import SchemaError

# A machine's measured ceilings (perfgate.judging.roofline), beside its baselines in baselines/<machine-key>/
CEILINGS_FILE = "ceilings.json"

_UNSAFE = re.compile(r"[^A-Za-z0-9._+-]")
MAX_COMPONENT = 100


def component(name: str) -> str:
    """``name`` as one path component: letters, digits and ``. _ + -`` kept, anything else ``_``; no
    leading dot (so never ``.`` or ``..``), never empty. A name that had to change, or was longer than
    100 characters, gets a short hash of the original so that two different names stay two folders."""
    text = str(name)
    safe = _UNSAFE.sub("_", text)
    if safe.startswith(".") or not safe:
        safe = "_" + safe
    if safe != text or len(safe) > MAX_COMPONENT:
        digest = hashlib.sha1(text.encode("utf-8", "surrogatepass")).hexdigest()[:8]
        safe = f"{safe[:MAX_COMPONENT - 9]}-{digest}"
    return safe


def contained(root: Path, *names: str, what: str = "path") -> Path:
    """``root`` joined with each name made a ``component``; SchemaError (exit 2) if the result, symlinks
    resolved, is not inside ``root`` (a folder under root that is a link to elsewhere)."""
    path = Path(root).joinpath(*(component(n) for n in names))
    real_root = Path(root).resolve()
    real = path.resolve()
    if real != real_root and real_root not in real.parents:
        raise SchemaError(f"{what} {path} resolves to {real}, outside {real_root}; perfgate writes only inside it "
                          "(a symbolic link in the folder?)")
    return path


def case_tb_dir(tb_dir: Path, workload: str, size: str, toggle_name: str) -> Path:
    """``tb/<workload>/<size>/<toggles>/``: a case's trace and TensorBoard run folder, inside ``tb_dir``."""
    return contained(tb_dir, workload, size, toggle_name, what="trace folder")


def ceilings_path(baselines_dir: Path, machine_key: str) -> Path:
    """``<baselines_dir>/<machine-key>/ceilings.json``: written by `perfgate calibrate --write`, beside the
    machine's baselines and committed with them; the machine key may come from a results.json, so it is made
    a safe path component and the path must stay inside ``baselines_dir`` (SchemaError otherwise)."""
    return contained(Path(baselines_dir), machine_key, CEILINGS_FILE, what="baseline")


# ---------------------------------------------------------------- globs over a project's files

MAX_GLOB = 200  # characters in one pattern of a workload's depends_on


def bad_project_glob(pattern: object, what: str = "pattern") -> str | None:
    """Why ``pattern`` cannot be a glob over a project's files, or None: a printable string of 1 to MAX_GLOB
    characters, relative to the project's root and kept inside it (no leading ``/``, no drive, no ``\\``,
    no ``..``, ``.`` or empty part). A pattern comes from a workload file: untrusted."""
    if not isinstance(pattern, str) or not pattern or len(pattern) > MAX_GLOB or not pattern.isprintable():
        shown = repr(pattern) if len(repr(pattern)) <= 60 else repr(pattern)[:57] + "..."
        return f"{what} {shown} is not a printable string of 1 to {MAX_GLOB} characters"
    parts = (pattern[:-1] if pattern.endswith("/") else pattern).split("/")
    if pattern.startswith("/") or "\\" in pattern or pattern[1:2] == ":" or any(p in ("..", ".", "") for p in parts):
        return (f"{what} {pattern!r} leaves the project or is not in its plain form: write it relative to the "
                "project's root, parts joined by '/', with no '..', '.' or empty part (e.g. \"src/sim/**\")")
    return None


def project_glob(pattern: str) -> re.Pattern[str]:
    """``pattern`` (checked by bad_project_glob) as a regular expression over a path relative to the project's
    root, parts joined by ``/``: ``**`` any number of whole folders (``src/**`` everything below src),
    ``*`` anything within one part, ``?`` one character within one part, anything else itself; a trailing
    ``/`` stands for everything below that folder."""
    if pattern.endswith("/"):
        pattern += "**"
    out = []
    parts = pattern.split("/")
    for i, part in enumerate(parts):
        last = i == len(parts) - 1
        if part == "**":
            out.append(".*" if last else "(?:[^/]+/)*")
            continue
        text = "".join("[^/]*" if c == "*" else "[^/]" if c == "?" else re.escape(c) for c in part)
        out.append(text if last else text + "/")
    return re.compile("".join(out))


def matches_project_glob(pattern: str, path: str) -> bool:
    """Does ``path`` (relative to the project's root, parts joined by ``/``) match ``pattern``?"""
    return project_glob(pattern).fullmatch(path) is not None
