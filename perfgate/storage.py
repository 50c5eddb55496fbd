"""Atomic file writes: a reader (or a crash) sees the old file or the new one, never half of either."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any


def atomic_write_text(path: str | Path, text: str) -> Path:
    """Write ``text`` to ``path`` through a temporary file in the same folder and an atomic rename."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=p.parent)
    try:
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
