"""One GPU check anyone can run: does perfgate's CUDA half hold on this machine, in about 9 minutes?

    python benchmarks/gpu_check.py --out DIR

On one CUDA GPU, every step bounded by its own timeout (a step that runs out keeps what it wrote):
  1. ceilings     peak FLOP/s and memory bandwidth (perfgate.worker.ceilings, in a worker)
  2. workloads    every workload at pr size with the CUDA toggles (eager, amp-fp16, amp-bf16, tf32,
                  cudnn-benchmark, channels-last, cuda-graphs; compile-reduce-overhead on the headline
                  rollout, or everywhere with --compile-all), 1 process per case, one run and one time
                  budget per workload: DIR/pr/<workload>
  3. lockstep     `run --against HEAD~1 --gate` on a small conv rollout in throwaway git repositories whose
                  head commit adds 0 (A/A), 5% and 10% of the work: DIR/lockstep-aa, -5pct, -10pct
and writes ONE summary, DIR/gpu-check.json: device, driver, torch, CUDA; the ceilings; per case its status
(failure class and first line of the message), step time, processes and why sampling stopped, speedup vs
eager, drift (verdict, rel_l2, reason), bound class and wall time; the cases a workload's budget did not
reach (not_reached) and those left out (not_run);
per lockstep condition its step-time verdict and
ratio; per step its wall time and whether it ran out. Without CUDA it exits 3 with one line saying so,
and writes nothing. --steps and --workloads run a part of it. docs/gpu.md says how to run it; docs/lab-record.md records each run.

--rehearse runs the same steps on the CPU at smoke size (the CUDA-only toggles skipped with their reason,
the compiled toggle only with --compile-all) so the script itself is proven before a lent GPU's minutes
are spent on it: every perfgate command it builds, the summary it reads back, the lockstep repositories.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

# compile-reduce-overhead last: a workload that runs out of its budget loses its slowest case first
CUDA_TOGGLES = ("eager", "amp-fp16", "amp-bf16", "tf32", "cudnn-benchmark", "channels-last", "cuda-graphs",
                "compile-reduce-overhead")
COMPILE_TOGGLES = ("compile-reduce-overhead",)
# the compiled toggle on the headline rollout only (--compile-all: on every workload; about a minute each)
COMPILE_WORKLOADS = ("operator_rollout",)
STEPS = ("ceilings", "workloads", "lockstep")
# Seconds (caps; a step that finishes sooner ends sooner), from the GPU checks of 2026-11-26 on one H200
# with 16 cores: a case of 2 worker processes took 8-12 s (the first process about 4 s to start, profile
# and warm up, about 2 s each after it), message_passing's eager case 15.6 s with one process, the
# rollout's compile-reduce-overhead 23.8 s with two, and the ceilings more than 27 s with torch's and
# CUDA's start-up. So the workloads run 1 process per case (status, step time, speedup, drift, bound;
# the statistics are the lockstep step's), whose pairs took 37-42 s per condition.
BUDGET = {"ceilings": 75, "case": 20, "compile_case": 60, "workload_start": 10, "lockstep": 50}
LOCKSTEP_CASE_S = 20  # --max-case-s of each lockstep run: its pairs stop there, inside the step's budget
LOCKSTEP_EXTRAS = (0.0, 0.05, 0.10)


def no_cuda_reason() -> str | None:
    """None when a CUDA device is usable here; else the one line that says why not."""
    try:
        import torch
    except ImportError as exc:
        return f"gpu_check: torch is not importable ({exc}); it needs torch with CUDA and one GPU"
    if not torch.cuda.is_available():
        return (f"gpu_check: no CUDA device here (torch {torch.__version__}, CUDA build "
                f"{torch.version.cuda or 'none'}: torch.cuda.is_available() is False); run it on a machine with a GPU")
    return None


def bounded(cmd: list[str], cwd: Path, timeout_s: float, log: Path) -> dict[str, Any]:
    """Run ``cmd`` in its own process group, output to ``log``; past ``timeout_s`` the whole group gets
    SIGTERM, then SIGKILL 10 s later (perfgate's workers included). Returns {rc, wall_s, timed_out}."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    started = time.perf_counter()
    with log.open("w") as out:
        proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        timed_out = False
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
            for sig, grace in ((signal.SIGTERM, 10), (signal.SIGKILL, 10)):
                try:
                    os.killpg(proc.pid, sig)
                except ProcessLookupError:
                    break
                try:
                    proc.wait(timeout=grace)
                    break
                except subprocess.TimeoutExpired:
                    continue
    return {"rc": proc.returncode, "wall_s": round(time.perf_counter() - started, 1), "timed_out": timed_out,
            "log": log.name}


def last_line(text: str | None) -> str | None:
    """The line of a failure message that names the error (a traceback's last), cut to 300 characters."""
    lines = (text or "").strip().splitlines()
    return lines[-1][:300] if lines else None


def perfgate_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "perfgate", *args]


def case_rows(run_dir: Path) -> list[dict[str, Any]]:
    """Per case of a run folder: status, step time, processes, speedup, drift, bound (from the report's rows)."""
    from perfgate.model.results import load_results
    from perfgate.reports.base import ReportInput

    path = run_dir / "results.json"
    if not path.is_file():
        return []
    rows = []
    for r in ReportInput(load_results(path), None).rows:
        sampling = r.case.metadata.get("sampling", {}) if isinstance(r.case.metadata, dict) else {}
        acc = r.case.accuracy or {}
        rows.append({
            "case": r.key, "status": r.case.status, "failure_class": r.case.failure_class,
            "message": last_line(r.case.message),
            "step_time_s": {k: getattr(r.step_time, k) for k in ("median", "ci_low", "ci_high")} if r.step_time else None,
            "processes": len(r.case.processes), "sampling_stopped": sampling.get("stopped"),
            "speedup_vs_eager": r.speedup.to_json() if r.speedup else None,
            "peak_memory_bytes": r.memory_bytes,
            "drift": {k: acc.get(k) for k in ("verdict", "rel_l2", "amplified", "reason")} if acc else None,
            "bound": r.bound.bound if r.bound else None,
            "wall_s": round(r.case.duration_s, 1),
        })
    return rows


def lockstep_condition(root: Path, extra: float, out: Path, timeout_s: float, device: str = "cuda") -> dict[str, Any]:
    """``run --against HEAD~1 --gate --device cuda`` in a throwaway repository whose head adds ``extra``."""
    from gate_accuracy import make_repo, step_verdict

    repo = make_repo(root / f"repo-{extra:.2f}", extra, None, None, "rollout")
    step = bounded(perfgate_cmd("run", "--against", "HEAD~1", "--gate", "--device", device,
                                "--max-case-s", str(LOCKSTEP_CASE_S), "--out", str(out)),
                   repo, timeout_s, out.parent / f"{out.name}.log")
    try:
        v = step_verdict(out)
        step.update(verdict=v["kind"], ratio=v["ratio"], ci=[v["ratio_low"], v["ratio_high"]])
    except (OSError, ValueError, KeyError):
        step.update(verdict=None, note="no step-time verdict (see the log)")
    return {"extra": extra, **step}


def environment(device: str = "cuda") -> dict[str, Any]:
    import torch

    if device == "cpu":  # a rehearsal
        return {"device": "cpu (rehearsal)", "torch": torch.__version__, "cuda": torch.version.cuda,
                "cpu_count": os.cpu_count(), "driver": None}
    env: dict[str, Any] = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__,
                           "cuda": torch.version.cuda, "cudnn": torch.backends.cudnn.version(),
                           "gpu_count": torch.cuda.device_count(), "cpu_count": os.cpu_count()}
    try:
        smi = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20)
        env["driver"] = smi.stdout.strip().splitlines()[0] if smi.returncode == 0 and smi.stdout.strip() else None
    except (OSError, subprocess.TimeoutExpired):
        env["driver"] = None
    return env


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True, help="folder for the summary and the run folders")
    ap.add_argument("--scale", type=float, default=1.0, help="multiply every step's time budget (default 1)")
    ap.add_argument("--steps", default=",".join(STEPS),
                    help=f"which steps, comma-separated, of {', '.join(STEPS)} (default: all)")
    ap.add_argument("--workloads", default=None, help="only these workloads, comma-separated (default: all)")
    ap.add_argument("--compile-all", action="store_true",
                    help=f"compile-reduce-overhead on every workload (default: {', '.join(COMPILE_WORKLOADS)})")
    ap.add_argument("--rehearse", action="store_true",
                    help="the same steps on the CPU at smoke size, to prove the script without a GPU")
    args = ap.parse_args(argv)
    device, size = ("cpu", "smoke") if args.rehearse else ("cuda", "pr")
    steps = [x for x in args.steps.split(",") if x]
    if not steps or any(x not in STEPS for x in steps):
        ap.error(f"--steps {args.steps!r}: give steps from {', '.join(STEPS)}, comma-separated")
    reason = None if args.rehearse else no_cuda_reason()
    if reason:
        print(reason, file=sys.stderr)
        return 3
    from perfgate.worker.discovery import discover

    found = sorted(discover([REPO / "workloads"]).workloads)
    wanted = args.workloads.split(",") if args.workloads else found
    unknown = [w for w in wanted if w not in found]
    if unknown:
        ap.error(f"--workloads: {', '.join(unknown)} not among {', '.join(found)}")
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    budget = {k: v * args.scale for k, v in BUDGET.items()}
    summary: dict[str, Any] = {"started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "environment": environment(device),
                               "budget_s": budget, "steps": {}}
    summary_path = out / "gpu-check.json"

    def save() -> None:  # after every step: a check cut short keeps what it measured
        tmp = summary_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(summary, indent=1, default=str) + "\n")
        tmp.replace(summary_path)

    from perfgate.commands import calibrate

    started = time.perf_counter()
    if "ceilings" in steps:
        try:
            summary["ceilings"] = calibrate.measure_ceilings(1, budget_s=2.0, timeout_s=budget["ceilings"])
            summary["steps"]["ceilings"] = {"wall_s": round(time.perf_counter() - started, 1), "timed_out": False}
        except RuntimeError as exc:
            summary["steps"]["ceilings"] = {"wall_s": round(time.perf_counter() - started, 1), "error": str(exc)}
        save()

    if "workloads" in steps:
        summary["cases"], summary["not_reached"], summary["not_run"] = [], [], []
        for workload in wanted:
            compiled = args.compile_all or (workload in COMPILE_WORKLOADS and not args.rehearse)
            toggles = [t for t in CUDA_TOGGLES if t not in COMPILE_TOGGLES or compiled]
            summary["not_run"].extend(f"{workload}/{size}/{t}/{device}" for t in CUDA_TOGGLES if t not in toggles)
            seconds = budget["workload_start"] + sum(
                budget["compile_case"] if t in COMPILE_TOGGLES else budget["case"] for t in toggles)
            run_dir = out / "pr" / workload
            cmd = perfgate_cmd("run", "--suite", "pr", "-w", workload, "--size", size, "--device", device,
                               "--processes", "1", "--timeout", str(int(budget["compile_case"])), "--out",
                               str(run_dir), *(a for t in toggles for a in ("-t", t)))
            run_dir.parent.mkdir(parents=True, exist_ok=True)
            summary["steps"][workload] = bounded(cmd, REPO, seconds, out / "pr" / f"{workload}.log")
            rows = case_rows(run_dir)
            summary["cases"].extend(rows)
            reached = {r["case"].split("/")[2] for r in rows}
            summary["not_reached"].extend(f"{workload}/{size}/{t}/{device}" for t in toggles if t not in reached)
            save()

    if "lockstep" in steps:
        summary["lockstep"] = []
        with tempfile.TemporaryDirectory(prefix="gpu-check-") as tmp:
            for extra in LOCKSTEP_EXTRAS:
                label = "aa" if extra == 0 else f"{extra * 100:.0f}pct"
                summary["lockstep"].append(
                    lockstep_condition(Path(tmp), extra, out / f"lockstep-{label}", budget["lockstep"], device))
                save()
    summary["finished_at"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    summary["wall_s"] = round(time.perf_counter() - started, 1)
    save()
    print(f"gpu_check: {summary_path} ({summary['wall_s']:.0f} s)")
    for row in summary.get("cases", []):
        st = (row["step_time_s"] or {}).get("median")
        sp = (row["speedup_vs_eager"] or {}).get("value")
        drift = (row["drift"] or {}).get("verdict")
        print(f"  {row['case']:<48} {row['status']:<8} {f'{st * 1e3:.3f} ms' if st else '-':>12} "
              f"{f'{sp:.2f}x' if sp else '-':>7} {row['processes']:>2} proc  drift {drift or '-'}  "
              f"{row['bound'] or '-'}  {row['failure_class'] or ''}")
    for c in summary.get("lockstep", []):
        print(f"  lockstep +{c['extra']:.0%}: {c.get('verdict')} {c.get('ratio')}  ({c['wall_s']} s"
              f"{', ran out' if c['timed_out'] else ''})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
