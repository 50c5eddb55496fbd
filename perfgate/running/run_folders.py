"""Run folders: a run's id and its folder under the reports folder (reserved atomically), the LATEST marker
and the newest run, and a run's scratch folder.
"""

from __future__ import annotations

import time
from pathlib import Path

from perfgate.util.storage import atomic_write_text


def run_work_dir(run_dir: Path) -> Path:
    """The run's scratch folder: its workers' case and output files, the fork server they come from (whose
    key it is part of, so the probe and the workers of a run share one)."""
    return run_dir / ".work"


LATEST_FILE = "LATEST"


def new_run_id(suite: str | None, now: float | None = None) -> str:
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(now))
    return f"{stamp}-{suite}" if suite else stamp


def unique_run_dir(reports_dir: Path, run_id: str, reserve: bool = False) -> Path:
    """``reports_dir/run_id``, or ``run_id-2``, ``-3``... where that is taken. ``reserve``: create the folder,
    atomically (``mkdir``, never ``exist_ok``), so that two runs started in the same second into the same
    reports folder (two terminals, shards run side by side) never share one: a folder merely checked free
    could be taken by the other run before this one creates it, and the two would overwrite each other's
    results.json. OSError when ``reports_dir`` refuses the folder."""
    path, n = reports_dir / run_id, 1
    while True:
        if reserve:
            try:
                path.mkdir()
                return path
            except FileExistsError:
                pass
        elif not path.exists():
            return path
        n += 1
        path = reports_dir / f"{run_id}-{n}"


def mark_latest(reports_dir: Path, run_dir: Path) -> None:
    atomic_write_text(reports_dir / LATEST_FILE, run_dir.name + "\n")


def _latest_named(reports_dir: Path, marker: Path) -> Path | None:
    """The run folder LATEST names, or None where it names none perfgate could have written: LATEST holds one
    folder name of ``reports_dir`` (a name with a separator, ``..``, an absolute path, a link out of the
    folder, bytes that are not UTF-8 or a file of any size are ignored, as a missing LATEST is)."""
    try:
        with open(marker, "rb") as fh:
            name = fh.read(4096).decode("utf-8").strip()
    except (OSError, UnicodeDecodeError):
        return None
    if not name or name in (".", "..") or "/" in name or "\\" in name or "\0" in name:
        return None
    cand = reports_dir / name
    try:
        if cand.resolve().parent != reports_dir.resolve():
            return None
    except (OSError, RuntimeError):
        return None
    return cand


def latest_run_dir(reports_dir: Path) -> Path | None:
    """The newest run under ``reports_dir``: the one LATEST names, else the newest results.json."""
    marker = reports_dir / LATEST_FILE
    if marker.is_file():
        cand = _latest_named(reports_dir, marker)
        if cand is not None and (cand / "results.json").is_file():
            return cand
    inside = reports_dir.resolve()
    runs = sorted((p for p in reports_dir.glob("*/results.json") if p.parent.resolve().parent == inside),
                  key=lambda p: p.stat().st_mtime)  # a folder that is a link out of reports_dir is no run of it
    return runs[-1].parent if runs else None
