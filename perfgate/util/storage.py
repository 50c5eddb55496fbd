"""Atomic file writes: a reader (or a crash) sees the old file or the new one, never half of either."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any


class UnwritableError(OSError):
    """A file perfgate was to write could not be written (a read-only or full disk, a parent that is a file,
    no permission): the CLI says it in one line, exit 2, and the old file, if any, is intact."""


def atomic_write_text(path: str | Path, text: str) -> Path:
    """Write ``text`` to ``path`` through a temporary file in the same folder and an atomic rename;
    UnwritableError (one line naming ``path``) when the disk refuses."""
    p = Path(path)
    try:
        return _atomic_write_text(p, text)
    except UnwritableError:
        raise
    except OSError as exc:
        raise unwritable(p, exc) from exc


def unwritable(p: Path, exc: OSError) -> UnwritableError:
    """The one-line UnwritableError for ``p``, which ``exc`` kept perfgate from writing."""
    where = f" ({exc.filename})" if exc.filename and str(exc.filename) != str(p) else ""
    error = UnwritableError(f"cannot write {p}: {exc.strerror or exc}{where}")
    error.errno = exc.errno
    return error


def _atomic_write_text(p: Path, text: str) -> Path:
    p.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=p.parent)
    try:
        # mkstemp makes the file 0600; reports and baselines are shared files: give them the mode a plain
        # open() would (0666 less the umask)
        os.fchmod(fd, 0o666 & ~current_umask())
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, p)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    return p


def current_umask() -> int:
    """The process umask, read without changing it where Linux tells it (/proc), else set and restored."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def atomic_write_json(path: str | Path, data: Any) -> Path:
    return atomic_write_text(path, json.dumps(data, indent=1, default=str) + "\n")


def check_writable_dir(path: str | Path) -> str | None:
    """None when ``path`` (created if missing) accepts files; otherwise a one-line reason."""
    p = Path(path)
    try:
        p.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".perfgate-write-check.", dir=p)
        os.close(fd)
        os.unlink(tmp)
    except OSError as exc:
        return f"output directory {p} is not writable: {exc.strerror or exc}"
    return None
