"""The host side of a run's environment fingerprint (no torch): Python, CPU, git. The torch side
(versions, CUDA device) comes from the worker probe and is merged in by the runner."""

from __future__ import annotations

import os
import platform
import re
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

from perfgate.util.version import __version__


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _git(root: Path, *args: str) -> str | None:
    try:
        out = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def git_state(root: Path) -> dict[str, Any]:
    commit = _git(root, "rev-parse", "HEAD")
    if commit is None:
        return {"git_commit": None, "git_dirty": None}
    status = _git(root, "status", "--porcelain", "--untracked-files=no")
    return {"git_commit": commit, "git_dirty": bool(status)}


def nvidia_driver() -> str | None:
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=10,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else None


def host_environment(root: Path, threads: int) -> dict[str, Any]:
    return {
        "perfgate": __version__,
        "python": platform.python_version(),
        "python_implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpu_model": cpu_model(),
        "cpu_count": os.cpu_count(),
        "threads": threads,
        "hostname": socket.gethostname(),
        "nvidia_driver": nvidia_driver(),
        "executable": sys.executable,
        **git_state(root),
    }


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def machine_key(env: dict[str, Any], device: str) -> str:
    """A readable name for the hardware a baseline belongs to: the GPU model, or CPU model and threads."""
    if device.startswith("cuda") and env.get("device_name"):
        return slug(env["device_name"])
    return f"{slug(env.get('cpu_model') or 'cpu')}-{env.get('threads', 1)}t"
