"""Starting a real TensorBoard process on a run's tb folder, and knowing when it answers. No torch.

TensorBoard shows the scalars and hparams perfgate writes (exporters/tensorboard.py) and, with the PyTorch
Profiler plugin installed (torch-tb-profiler, the `tensorboard` extra), every case's trace: the plugin lists
each folder holding ``*.pt.trace.json`` files as a run, so ``tb/<workload>/<size>/<toggles>/`` is one run
per case. For a compared run, each regression's base trace is added as the run ``<that run>/base``, so the
plugin's Diff view compares the two (logdir_for)."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from perfgate.gating.comparison_file import load_comparison_file
from perfgate.model.comparison import Comparison
from perfgate.model.config import ConfigError
from perfgate.model.results import load_results
from perfgate.reports import traces
from perfgate.reports.console import echo
from perfgate.reports.traces import PERFETTO_URL
from perfgate.running.workers import InfrastructureError
from perfgate.util.validation import SchemaError

PLUGIN_INSTALL = "pip install 'perfgate[tensorboard]'"
# What `perfgate tensorboard` says without torch-tb-profiler: how to get its tab, and Perfetto instead
NO_PLUGIN_HELP = (
    f"No PyTorch Profiler tab here: `{PLUGIN_INSTALL}` adds it (torch-tb-profiler); or open a case's trace in "
    f"Perfetto: `perfgate trace CASE` prints its file, then {PERFETTO_URL}, \"Open trace file\" (nothing is uploaded)."
)
# the plugin's pages load Google Charts (www.gstatic.com) and a web-components polyfill (cdnjs.cloudflare.com)
# before they draw anything: a browser without internet access shows a spinner, so the line says so
PLUGIN_HELP = ("Traces: the PyTorch Profiler tab (PYTORCH_PROFILER) lists each case's trace as the run "
               "<workload>/<size>/<toggles>, read in the background; its pages need the browser to reach "
               f"www.gstatic.com and cdnjs.cloudflare.com (offline: `perfgate trace CASE`, then {PERFETTO_URL}).")


@dataclass(frozen=True)
class DiffRuns:
    """A regressed case whose base and head traces TensorBoard shows as two runs, for the plugin's Diff view."""

    case_key: str
    base_run: str
    head_run: str

    @property
    def help(self) -> str:
        return (f"Diff {self.case_key}: PyTorch Profiler tab, Diff panel (left, next to Normal), "
                f"baseline run {self.base_run}, experimental run {self.head_run}")


@dataclass
class LogDir:
    """The folder TensorBoard reads: the run's tb/ itself, or, for a compared run with regressions, a
    temporary folder of links to tb/'s files with each regression's base trace beside its head's."""

    path: Path
    diffs: list[DiffRuns] = field(default_factory=list)
    temporary: bool = False
    notes: list[str] = field(default_factory=list)  # why a compared run's base traces are not shown

    def remove(self) -> None:
        if self.temporary:
            shutil.rmtree(self.path, ignore_errors=True)

    def __enter__(self) -> LogDir:
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()


def regression_diffs(run_dir: Path, comparison: Comparison | None) -> list[tuple[DiffRuns, Path]]:
    """Each regressed case of ``run_dir`` whose base and head traces both exist: its two run names and the
    base trace file (read from results.json and the base side's run, never from the traces)."""
    if comparison is None or not (run_dir / "results.json").is_file():
        return []
    regressed = {v.case_key for v in comparison.verdicts if v.fails_gate or v.kind == "regression"}
    run = load_results(run_dir / "results.json")
    bases = traces.base_runs(run_dir, comparison)
    out = []
    for case in run.cases:
        if case.key not in regressed:
            continue
        base, head = traces.trace_sides(case, bases, run_dir)
        names = traces.tensorboard_runs(base, head, run_dir / "tb")
        if names is not None and base.path is not None:
            out.append((DiffRuns(case.key, *names), base.path))
    return out


def logdir_for(run_dir: Path) -> LogDir:
    """What TensorBoard reads for ``run_dir``: its tb/ folder, plus each regression's base trace as the run
    ``<head run>/base`` where the run was compared (its comparison.json) and kept both sides' traces. The
    run folder itself is never written: the extra runs live in a temporary folder of symbolic links, removed
    by LogDir.remove (or on leaving ``with``)."""
    tb_dir = run_dir / "tb"
    if not tb_dir.is_dir():
        raise ConfigError(f"no TensorBoard folder at {tb_dir} (runs write tb/ when they profile)")
    try:
        diffs = regression_diffs(run_dir, load_comparison_file(run_dir))
    except SchemaError as exc:  # the scalars and head traces are still worth serving
        note = " ".join(str(exc).split())[:300]
        return LogDir(tb_dir, notes=[f"base traces not shown (the run's results cannot be read): {note}"])
    if not diffs:
        return LogDir(tb_dir)
    view = Path(tempfile.mkdtemp(prefix="perfgate-tensorboard-"))
    try:
        for folder, _, files in os.walk(tb_dir):
            mirror = view / Path(folder).relative_to(tb_dir)
            mirror.mkdir(parents=True, exist_ok=True)
            for name in files:
                (mirror / name).symlink_to(Path(folder, name).resolve())
        for diff, base_trace in diffs:
            base_folder = view / diff.base_run
            base_folder.mkdir(parents=True, exist_ok=True)
            (base_folder / base_trace.name).symlink_to(base_trace.resolve())
    except BaseException:
        shutil.rmtree(view, ignore_errors=True)
        raise
    return LogDir(view, [d for d, _ in diffs], temporary=True)


def traces_help(plugin_installed: bool, logdir: LogDir) -> list[str]:
    """The lines `perfgate tensorboard` prints about the traces under its URL."""
    if not plugin_installed:
        return [NO_PLUGIN_HELP]
    return [PLUGIN_HELP, *(d.help for d in logdir.diffs), *logdir.notes]


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
    """TensorBoard's PyTorch Profiler plugin (torch-tb-profiler, the `tensorboard` extra) is importable here."""
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


def serve(run_path: Path, host: str, port: int) -> None:
    """`perfgate tensorboard`: TensorBoard on ``run_path``'s traces and scalars until Ctrl-C or a SIGTERM;
    InfrastructureError (exit 3) when it does not start."""
    import signal

    # a SIGTERM (CI, a supervisor), also one while TensorBoard starts, stops TensorBoard too
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    with logdir_for(run_path) as logdir:  # a compared run's extra runs are removed on the way out
        try:
            tb = start(logdir.path, host=host, port=port or free_port(host))
        except RuntimeError as exc:
            raise InfrastructureError(str(exc)) from exc
        echo(f"TensorBoard on {run_path / 'tb'}: {tb.url}  (Ctrl-C to stop)")
        for line in traces_help(profiler_plugin_installed(), logdir):
            echo(line)
        try:
            tb.process.wait()
        except KeyboardInterrupt:
            pass
        finally:
            tb.stop()
