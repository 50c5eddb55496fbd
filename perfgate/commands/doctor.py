"""``perfgate doctor``: what this machine can run, and what to fix, one line per check. No torch here:
torch, CUDA and the toggles are asked of a worker probe (``python -m perfgate.worker.main --probe``).

Each check is a :class:`Finding`: ``ok`` (ready), ``warn`` (perfgate runs, but something is skipped or
noisier than it could be; the line says what to do) or ``fail`` (perfgate cannot measure here).
"""

from __future__ import annotations

import importlib.util
import os
import platform
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

OK, WARN, FAIL = "ok", "warn", "fail"
BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


@dataclass(frozen=True)
class Finding:
    """One check: its status, what was found, and (unless ok) what to do about it."""

    status: str
    check: str
    found: str
    fix: str = ""

    def line(self) -> str:
        text = f"{self.status:<4}  {self.check:<12} {self.found}"
        return f"{text}; fix: {self.fix}" if self.fix else text


def check_python() -> Finding:
    return Finding(OK, "python", f"{platform.python_version()} at {sys.executable}")


def check_torch(probe: dict[str, Any] | None, error: str | None) -> list[Finding]:
    """torch and CUDA, from the worker probe (or its error)."""
    if probe is None:
        last = [line.strip() for line in (error or "").splitlines() if line.strip()]
        return [Finding(FAIL, "torch", f"a worker cannot start: {last[-1] if last else 'no answer'}",
                        "pip install torch (a CPU build: pip install torch --index-url https://download.pytorch.org/whl/cpu)")]
    env = probe.get("environment", {})
    found = [Finding(OK, "torch", f"{env.get('torch')} (CUDA build: {env.get('torch_cuda') or 'no'})")]
    from perfgate.running.environment import nvidia_driver

    driver = nvidia_driver()
    if env.get("cuda_available"):
        found.append(Finding(OK, "cuda", f"{env.get('gpu_count')} GPU(s): {env.get('device_name')} "
                             f"(compute capability {env.get('compute_capability')}), driver {driver or 'unknown'}"))
    elif driver and not env.get("torch_cuda"):
        found.append(Finding(WARN, "cuda", f"an NVIDIA driver ({driver}) but a CPU build of torch",
                             "install a CUDA build of torch (pytorch.org/get-started) to measure on the GPU"))
    elif env.get("torch_cuda"):
        found.append(Finding(WARN, "cuda", f"a CUDA {env.get('torch_cuda')} build of torch, but no GPU it can use",
                             "check nvidia-smi and CUDA_VISIBLE_DEVICES; CUDA cases are skipped until then"))
    else:
        found.append(Finding(WARN, "cuda", "no GPU: CUDA toggles (cuda-graphs, tf32, cudnn-benchmark, ...) are skipped",
                             "run on a machine with an NVIDIA GPU and a CUDA build of torch for the GPU suites"))
    unmet = {t["name"]: t["unmet_here"] for t in probe.get("toggles", []) if t.get("unmet_here")}
    if unmet:
        found.append(Finding(OK if env.get("cuda_available") is False else WARN, "toggles",
                             f"{len(probe.get('toggles', [])) - len(unmet)} of {len(probe.get('toggles', []))} can run "
                             f"here; skipped: {', '.join(sorted(unmet))}"))
    else:
        found.append(Finding(OK, "toggles", f"all {len(probe.get('toggles', []))} can run here"))
    return found


def check_compiler(cuda: bool, which: Callable[[str], str | None] = shutil.which) -> Finding:
    """The compiler torch.compile (inductor) needs: a C++ compiler on CPU, triton on CUDA."""
    for cand in (os.environ.get("CXX"), "g++", "c++", "clang++"):
        path = which(cand) if cand else None
        if path:
            cxx = Finding(OK, "compiler", f"C++ compiler for inductor on CPU: {path}")
            break
    else:
        cxx = Finding(WARN, "compiler", "no C++ compiler: compile toggles on CPU are skipped",
                      "install g++ (apt-get install g++) or set $CXX")
    if not cuda or cxx.status != OK:
        return cxx
    if importlib.util.find_spec("triton") is None:
        return Finding(WARN, "compiler", "no triton: compile toggles on CUDA are skipped",
                       "pip install triton (the CUDA builds of torch bring it)")
    return Finding(OK, "compiler", f"{cxx.found}; triton for inductor on CUDA")


def check_threads(cpu_count: int | None, threads: int) -> Finding:
    cores = cpu_count or 1
    pinned = {k: os.environ[k] for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS") if k in os.environ}
    where = f"{threads} CPU thread(s) per worker of {cores} cores"
    if threads > max(1, cores // 2):
        return Finding(WARN, "threads", f"{where}: base and head workers run side by side and compete",
                       f"set threads = {max(1, cores // 2)} or fewer in [tool.perfgate]")
    extra = f" (workers set OMP/MKL themselves; this shell has {pinned})" if pinned else ""
    return Finding(OK, "threads", where + extra)


def check_allocator(state: str | None = None) -> Finding:
    """The C allocator workers will run with (perfgate.protocol.layout.steady_malloc; docs/gate.md, "The performance
    modes were the C allocator's")."""
    from perfgate.protocol import layout

    state = state or layout.malloc_state()
    if state == "steady":
        return Finding(OK, "allocator", "steady: workers fix glibc's mmap and trim thresholds before the workload")
    if state == "system":
        return Finding(WARN, "allocator", f"{layout.MALLOC_ENV}=system: workers keep glibc's defaults, under which "
                       "processes of one build can differ up to 2x by whether their heaps thrash",
                       f"unset {layout.MALLOC_ENV} unless measuring the allocator itself")
    if state == "preloaded":
        return Finding(WARN, "allocator", f"another allocator is preloaded ({layout.preloaded_malloc()}): workers "
                       "measure it as it is configured; perfgate sets nothing",
                       "unset LD_PRELOAD unless measuring that allocator")
    return Finding(WARN, "allocator", "not glibc: workers keep the C allocator's defaults (nothing to set)",
                   "compare with --against, whose pairs share a machine's minutes, if processes fall into modes")


def check_clock(sysfs: Path = Path("/sys/devices/system/cpu"), which: Callable[[str], str | None] = shutil.which,
                ) -> list[Finding]:
    """The CPU frequency governor and turbo (clock pinning), and a GPU's locked clocks when nvidia-smi is here."""
    governors: dict[str, int] = {}
    for f in sorted(sysfs.glob("cpu[0-9]*/cpufreq/scaling_governor")):
        try:
            g = f.read_text().strip()
        except OSError:
            continue
        governors[g] = governors.get(g, 0) + 1
    if not governors:
        found = [Finding(WARN, "clock", "the CPU frequency governor is not exposed here (a VM or container): the "
                         "clock cannot be pinned", "measure with --against REF (base and head side by side) "
                         "rather than against stored baselines")]
    elif set(governors) == {"performance"}:
        found = [Finding(OK, "clock", f"governor performance on {governors['performance']} CPU(s)")]
    else:
        listed = ", ".join(f"{g} on {n}" for g, n in sorted(governors.items()))
        found = [Finding(WARN, "clock", f"governor {listed}: the clock moves with load",
                         "sudo cpupower frequency-set -g performance")]
    for turbo, on in ((sysfs / "intel_pstate" / "no_turbo", "0"), (sysfs / "cpufreq" / "boost", "1")):
        try:
            value = turbo.read_text().strip()
        except OSError:
            continue
        if value == on:
            found.append(Finding(WARN, "turbo", f"turbo boost is on ({turbo}): the clock depends on temperature",
                                 f"echo {'1' if on == '0' else '0'} | sudo tee {turbo}"))
        else:
            found.append(Finding(OK, "turbo", f"turbo boost is off ({turbo})"))
        break
    smi = which("nvidia-smi")
    if smi:
        try:
            proc = subprocess.run([smi, "--query-gpu=clocks.sm,clocks.max.sm", "--format=csv,noheader,nounits"],
                                  capture_output=True, text=True, timeout=10)
            rows = [r.split(",") for r in proc.stdout.strip().splitlines() if "," in r]
        except (OSError, subprocess.TimeoutExpired):
            rows = []
        if rows:
            found.append(Finding(WARN, "gpu clock", f"SM clock {rows[0][0].strip()} of {rows[0][1].strip()} MHz max, "
                                 "not locked by perfgate", "sudo nvidia-smi --lock-gpu-clocks=<MHz> for steadier timings"))
    return found


def check_tensorboard() -> Finding:
    if importlib.util.find_spec("tensorboard") is None:
        return Finding(WARN, "tensorboard", "not installed: no TensorBoard scalars (traces still open in Perfetto)",
                       "pip install tensorboard")
    if importlib.util.find_spec("torch_tb_profiler") is not None:
        return Finding(OK, "tensorboard", "installed with the PyTorch Profiler plugin: scalars, hparams and every "
                       "case's trace (`perfgate tensorboard`)")
    return Finding(OK, "tensorboard", "installed: scalars and hparams (`perfgate tensorboard`); traces open in "
                   "Perfetto (`perfgate trace CASE`), or in TensorBoard with pip install 'perfgate[tensorboard]'")


def check_browser(which: Callable[[str], str | None] = shutil.which, home: Path | None = None) -> Finding:
    """A browser for the report test (playwright drives Chromium)."""
    for name in BROWSERS:
        path = which(name)
        if path:
            return Finding(OK, "browser", f"{path} (report.html can be checked in a real browser)")
    cache = Path(os.environ.get("PLAYWRIGHT_BROWSERS_PATH") or (home or Path.home()) / ".cache" / "ms-playwright")
    bundled = sorted(cache.glob("chromium*")) if cache.is_dir() else []
    if bundled:
        return Finding(OK, "browser", f"playwright's {bundled[-1].name} in {cache}")
    return Finding(WARN, "browser", "no Chromium: the report's browser test is skipped",
                   "apt-get install chromium, or python -m playwright install chromium")


def check_git(which: Callable[[str], str | None] = shutil.which) -> Finding:
    path = which("git")
    if not path:
        return Finding(WARN, "git", "not on PATH: run --against, bisect and init need it", "install git")
    return Finding(OK, "git", path)


BASELINE_LINES = 8  # baseline files named one by one; the rest summed up in one line


def check_baselines(settings: Any) -> list[Finding]:
    """Per stored baseline: will `run --gate` settle its step times in lockstep against the baseline's
    commit (gate.lockstep_commits), or judge them against the stored numbers alone, and why."""
    from perfgate.gating import gate
    from perfgate.judging.baselines import list_baselines, load_baseline
    from perfgate.judging.gate_settings import gate_settings
    from perfgate.model.config import ConfigError
    from perfgate.util.validation import SchemaError

    gs = gate_settings(settings)
    root = Path(settings.baselines_dir)
    files = list_baselines(root)
    if not files:
        return [Finding(OK, "baselines", f"none in {root} yet (perfgate run && perfgate baseline update)")]
    found = []
    for f in files[:BASELINE_LINES]:
        name = f"{f.parent.name}/{f.name}"
        try:
            baseline = load_baseline(f)
            lockstep, why = gate.lockstep_commits(settings, baseline)
        except (ConfigError, SchemaError) as exc:  # a broken file is named, doctor goes on
            found.append(Finding(WARN, "baselines", f"{name}: {exc}", "perfgate baseline update after a run"))
            continue
        calibrated = check_calibration(name, baseline, gs)
        if lockstep:
            against = lockstep.describe().replace("the baseline's", "its")
            found.append(Finding(OK, "baselines", f"{name}: step times settled in lockstep against {against}"))
        elif why == "settle_in_lockstep = false":
            found.append(Finding(OK, "baselines", f"{name}: step times against the stored numbers alone ({why})"))
        else:
            fix = ("git fetch the commit (in CI: actions/checkout with fetch-depth: 0)" if "not in this repository" in why
                   else "record it with `perfgate run && perfgate baseline update` from a clean checkout")
            found.append(Finding(WARN, "baselines", f"{name}: step times against the stored numbers alone ({why}); "
                                                    "a run that moved as a whole can pass for a code change", fix))
        if calibrated is not None:
            found.append(calibrated)
    if len(files) > BASELINE_LINES:
        found.append(Finding(OK, "baselines", f"... and {len(files) - BASELINE_LINES} more in {root}"))
    return found


BLIND_RATIO = 2.0  # a stored calibration under which an unpaired gate can pass a slowdown this large


def check_calibration(name: str, baseline: Any, gs: Any) -> Finding | None:
    """What a baseline's stored calibration (`perfgate calibrate --write`) does to the gate: how many of its
    cases it holds figures for and the widest; a warning where they let a 2x slowdown pass against the
    stored numbers (a threshold of 100% or more, or a run-to-run term whose share of the CI alone reaches 2x:
    about 42% at 95%, so no 2x ratio is significant), which a hand-edited file can do. None without
    calibration."""
    import math
    import statistics

    keys = [c.key for c in baseline.run.cases if c.key in baseline.calibration]
    if not keys:
        return None
    z = statistics.NormalDist().inv_cdf(1 - (1 - gs.confidence) / 2)
    figures = {}
    for key in keys:
        case = baseline.run.case(key)
        threshold, _ = gs.threshold_for(case, key, baseline.calibration)
        run_to_run, _ = gs.run_to_run_term(case, key, baseline.calibration, base=case)
        figures[key] = (threshold, run_to_run)
    widest = (f"thresholds up to {max(t for t, _ in figures.values()) * 100:g}%, run-to-run terms up to "
              f"{max(r for _, r in figures.values()) * 100:g}%")
    blind = [k for k, (t, r) in figures.items()
             if 1 + t >= BLIND_RATIO or math.exp(z * math.log1p(r)) >= BLIND_RATIO]
    counted = f"{len(keys)} of {len(baseline.run.cases)} case(s) calibrated"
    if not blind:
        return Finding(OK, "calibration", f"{name}: {counted} ({widest})")
    t, r = figures[blind[0]]
    return Finding(WARN, "calibration",
                   f"{name}: {counted}; {len(blind)} judged so wide that a {BLIND_RATIO:g}x slowdown can pass against "
                   f"the stored numbers ({blind[0]}: threshold {t * 100:g}%, run-to-run {r * 100:g}%"
                   f"{', ...' if len(blind) > 1 else ''})",
                   "check who wrote them (`git log -p` on the baseline); `perfgate calibrate --write` again on a "
                   "quieter runner, or delete those cases' calibration entries, and gate with --against REF meanwhile")


def diagnose(probe: dict[str, Any] | None, probe_error: str | None, threads: int) -> list[Finding]:
    """Every check, in the order ``perfgate doctor`` prints them."""
    env = (probe or {}).get("environment", {})
    return [check_python(), *check_torch(probe, probe_error), check_compiler(bool(env.get("cuda_available"))),
            check_threads(os.cpu_count(), threads), check_allocator(), *check_clock(), check_tensorboard(), check_browser(),
            check_git()]


def report(settings: Any) -> bool:
    """`perfgate doctor`: every finding, one line each, the stored baselines' too; True when a check failed
    (perfgate cannot measure here)."""
    from perfgate.reports.console import echo
    from perfgate.running.workers import InfrastructureError, run_probe

    try:
        probe, error = run_probe([], settings.threads, toggles_here=True), None
    except InfrastructureError as exc:
        probe, error = None, str(exc)
    findings = [*diagnose(probe, error, settings.threads), *check_baselines(settings)]
    for finding in findings:
        echo(finding.line())
    return any(f.status == FAIL for f in findings)
