"""Starting a real TensorBoard process on a run's tb folder, and knowing when it answers. No torch."""

from __future__ import annotations

import importlib.util
import json
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from perfgate.config import ConfigError

# What `perfgate tensorboard` says about traces: TensorBoard's profiler plugin (torch-tb-profiler) was
# removed upstream, so traces open in Perfetto; TensorBoard keeps the scalars and hparams.
TRACES_HELP = (
    "TensorBoard shows the run's scalars and hparams. Traces open in Perfetto: `perfgate trace CASE` prints "
    "a case's trace file(s) and the steps (https://ui.perfetto.dev, \"Open trace file\"; the browser reads "
    "the file, nothing is uploaded); they lie under {tb_dir}/<workload>/<size>/<toggles>/."
)


@dataclass
class TensorBoardProcess:
    process: subprocess.Popen
    url: str
    logdir: Path

    def stop(self, timeout_s: float = 10.0) -> None:
        """Terminate TensorBoard and wait for it (kill if it does not go)."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def profiler_plugin_installed() -> bool:
    """An old torch-tb-profiler still installed: its tab reads the traces too (perfgate no longer offers it)."""
    return importlib.util.find_spec("torch_tb_profiler") is not None


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def fetch_json(url: str, timeout_s: float = 5.0) -> object:
    with urllib.request.urlopen(url, timeout=timeout_s) as resp:  # noqa: S310 - loopback URL we built
        return json.loads(resp.read().decode())


def start(logdir: Path, host: str = "127.0.0.1", port: int = 6006, wait_s: float = 60.0) -> TensorBoardProcess:
    """Start ``tensorboard --logdir LOGDIR`` and return once it answers ``/data/plugins_listing``.

    Raises ConfigError for a missing folder and RuntimeError when TensorBoard exits or does not answer
    within ``wait_s`` (with the tail of its output)."""
    if not logdir.is_dir():
        raise ConfigError(f"no TensorBoard folder at {logdir} (runs write tb/ when they profile)")
    cmd = [sys.executable, "-m", "tensorboard.main", "--logdir", str(logdir), "--host", host,
           "--port", str(port), "--reload_interval", "5"]
    # output to a file, not a pipe: a pipe nobody reads fills up and stalls a long-lived TensorBoard
    log = tempfile.TemporaryFile("w+")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, text=True)
    url = f"http://{host}:{port}/"
    deadline = time.monotonic() + wait_s
    try:
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                log.seek(0)
                out = log.read()
                raise RuntimeError(f"tensorboard exited with code {proc.returncode}: {out.strip()[-800:]}")
            try:
                fetch_json(url + "data/plugins_listing", timeout_s=2.0)
                return TensorBoardProcess(proc, url, logdir)
            except (urllib.error.URLError, ConnectionError, OSError, json.JSONDecodeError):
                time.sleep(0.3)
        raise RuntimeError(f"tensorboard did not answer on {url} within {wait_s:g} s")
    except BaseException:  # no answer in time, Ctrl-C or a SIGTERM while it starts: leave no TensorBoard
        TensorBoardProcess(proc, url, logdir).stop()
        raise
