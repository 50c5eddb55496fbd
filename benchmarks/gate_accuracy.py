"""The gate's own accuracy on this machine: false alarms on A/A, detection of +5% and +10%.

A throwaway project holds one workload, ``gate_knob``: a chain of small matmuls whose count per step
grows by a known fraction (``EXTRA``) without changing the case's identity, as a code change would.

- stored-baseline mode: per round, a fresh baseline run (``perfgate run`` + ``baseline update``), then
  one gated run per condition (A/A, +3%, +5%, +10%; the knob comes from the environment);
- ``--against`` mode: a temporary git repository per condition whose head commit sets ``EXTRA`` (A/A: a
  comment-only commit); each trial is ``perfgate run --against HEAD~1 --gate``.

Only the step-time verdict is scored: the knob also adds aten ops, which the deterministic
``aten_ops_per_step`` verdict catches every time, and that is not what this benchmark measures.
"caught" = a step-time ``regression`` verdict (after the gate's re-measure); ``inconclusive`` is
counted separately; a false alarm is an A/A trial whose step time is judged ``regression`` or ``win``.

    /work/main/.venv/bin/python benchmarks/gate_accuracy.py --trials 20          # the full measurement
    /work/main/.venv/bin/python benchmarks/gate_accuracy.py --trials 5 --modes against
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

WORKLOAD = '''
import os
import torch
from perfgate.workload import Built, Tolerance, Workload

EXTRA = {extra}  # the fraction of work a "code change" adds


class GateKnob(Workload):
    name = "gate_knob"
    description = "small matmul chain with a knob adding a known fraction of work"
    sizes = {{"smoke": {{"n": 32, "reps": 200, "steps": 1}}, "pr": {{"n": 32, "reps": 200, "steps": 1}},
             "full": {{"n": 32, "reps": 200, "steps": 1}}}}
    tolerance = Tolerance(rel_l2=1e-3)
    channels_last_applies = False

    def build(self, params, device, dtype, variants):
        g = torch.Generator(device="cpu").manual_seed(0)
        w = torch.randn(params["n"], params["n"], generator=g) / params["n"] ** 0.5
        x = torch.randn(params["n"], params["n"], generator=g)
        extra = EXTRA + float(os.environ.get("GATE_KNOB_EXTRA", "0"))
        return Built(model=w, state=x, extra={{"reps": round(params["reps"] * (1 + extra))}})

    def step(self, model, state, built, params):
        y = state
        for _ in range(built.extra["reps"]):
            y = torch.tanh(y @ model)
        return state + 0.0 * y
'''

PYPROJECT = """
[tool.perfgate]
workloads_dirs = ["workloads"]
processes = {processes}

[tool.perfgate.suites.smoke]
workloads = ["gate_knob"]
toggles = ["eager"]
device = "cpu"

[tool.perfgate.gate]
threshold = {threshold}
"""


def perfgate(args: list[str], cwd: Path, extra_env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    env.update(extra_env or {})
    return subprocess.run([sys.executable, "-m", "perfgate", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=1200)


def step_verdict(run_dir: Path) -> dict:
    data = json.loads((run_dir / "comparison.json").read_text())
    (v,) = [v for v in data["verdicts"] if v["metric"] == "step_time"]
    return v


def make_project(root: Path, extra: float, processes: int, threshold: float) -> Path:
    (root / "workloads").mkdir(parents=True)
    (root / "pyproject.toml").write_text(PYPROJECT.format(processes=processes, threshold=threshold))
    (root / "workloads" / "gate_knob.py").write_text(WORKLOAD.format(extra=extra))
    return root


def git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.name=bench", "-c", "user.email=bench@localhost", *args], cwd=cwd,
                   check=True, capture_output=True)


def make_repo(root: Path, extra: float, processes: int, threshold: float) -> Path:
    """A git repository whose HEAD~1 is the base and HEAD adds ``extra`` of the work (A/A: a comment)."""
    make_project(root, 0.0, processes, threshold)
    git(root, "init", "-q")
    git(root, "add", ".")
    git(root, "commit", "-qm", "base")
    path = root / "workloads" / "gate_knob.py"
    text = WORKLOAD.format(extra=extra)
    path.write_text(text if extra else text + "# an A/A head commit: no change in work\n")
    git(root, "commit", "-qam", f"head: +{extra:.0%} work")
    return root


def record(results: list[dict], mode: str, extra: float, proc: subprocess.CompletedProcess, run_dir: Path,
           wall: float) -> None:
    try:
        v = step_verdict(run_dir)
    except (OSError, ValueError, json.JSONDecodeError):
        print(proc.stdout[-2000:], proc.stderr[-2000:])
        raise
    results.append({"mode": mode, "extra": extra, "kind": v["kind"], "ratio": v["ratio"], "low": v["ratio_low"],
                    "high": v["ratio_high"], "p": v["p_value"], "exit": proc.returncode, "wall_s": wall})
    print(f"  {mode:<8} +{extra:4.0%}  {v['kind']:<12} ratio {v['ratio']:.3f} [{v['ratio_low']:.3f}, "
          f"{v['ratio_high']:.3f}]  p={v['p_value']:.3g}  exit {proc.returncode}  {wall:.1f} s", flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=20, help="trials per mode and condition")
    ap.add_argument("--processes", type=int, default=6, help="worker processes per side")
    ap.add_argument("--threshold", type=float, default=0.05)
    ap.add_argument("--extras", default="0,0.03,0.05,0.10",
                    help="work added per condition (0 = A/A; +3%% shows what the half-threshold line costs)")
    ap.add_argument("--modes", default="stored,against")
    ap.add_argument("--out", type=Path, default=None, help="write every trial as JSON here")
    args = ap.parse_args()
    extras = [float(x) for x in args.extras.split(",")]
    modes = args.modes.split(",")
    results: list[dict] = []
    print(f"load before: {os.getloadavg()}  trials {args.trials}, processes {args.processes}, "
          f"threshold {args.threshold:.0%}", flush=True)
    with tempfile.TemporaryDirectory(prefix="gate-accuracy-") as tmp:
        tmpdir = Path(tmp)
        if "stored" in modes:
            proj = make_project(tmpdir / "stored", 0.0, args.processes, args.threshold)
            for trial in range(args.trials):
                base = perfgate(["run", "--out", str(proj / "runs" / f"base-{trial}")], proj)
                if base.returncode != 0:
                    print(base.stdout[-2000:], base.stderr[-2000:])
                    return 3
                perfgate(["baseline", "update", str(proj / "runs" / f"base-{trial}")], proj)
                for extra in extras:
                    out = proj / "runs" / f"t{trial}-{extra}"
                    t0 = time.perf_counter()
                    proc = perfgate(["run", "--gate", "--out", str(out)], proj, {"GATE_KNOB_EXTRA": str(extra)})
                    record(results, "stored", extra, proc, out, time.perf_counter() - t0)
        if "against" in modes:
            repos = {extra: make_repo(tmpdir / f"repo-{extra}", extra, args.processes, args.threshold)
                     for extra in extras}
            for trial in range(args.trials):
                for extra, repo in repos.items():
                    out = tmpdir / "ab" / f"t{trial}-{extra}"
                    t0 = time.perf_counter()
                    proc = perfgate(["run", "--against", "HEAD~1", "--gate", "--out", str(out)], repo)
                    record(results, "against", extra, proc, out, time.perf_counter() - t0)
    print(f"\nload after: {os.getloadavg()}")
    print(f"{'mode':<8} {'work':>5} {'trials':>6} {'regression':>10} {'win':>4} {'inconclusive':>12} "
          f"{'unchanged':>9} {'median wall s':>13}")
    for mode in modes:
        for extra in extras:
            rows = [r for r in results if r["mode"] == mode and r["extra"] == extra]
            if not rows:
                continue
            count = {k: sum(r["kind"] == k for r in rows) for k in ("regression", "win", "inconclusive", "unchanged")}
            walls = sorted(r["wall_s"] for r in rows)
            label = "A/A" if extra == 0 else f"+{extra:.0%}"
            print(f"{mode:<8} {label:>5} {len(rows):>6} {count['regression']:>10} {count['win']:>4} "
                  f"{count['inconclusive']:>12} {count['unchanged']:>9} {walls[len(walls) // 2]:>13.1f}")
    if args.out:
        args.out.write_text(json.dumps(results, indent=1) + "\n")
    print("\ntargets (issue 4, 20 trials):")
    for mode in modes:
        def tally(extra: float, kinds: tuple[str, ...], mode: str = mode) -> str:
            rows = [r for r in results if r["mode"] == mode and r["extra"] == extra]
            return f"{sum(r['kind'] in kinds for r in rows)}/{len(rows)}" if rows else "-"
        print(f"  {mode:<8} false alarms on A/A {tally(0.0, ('regression', 'win'))} (target <= 1/20); "
              f"+10% caught {tally(0.10, ('regression',))} (>= 19/20); +5% caught {tally(0.05, ('regression',))}"
              + (" (>= 18/20)" if mode == "against" else "") + f"; +3% flagged {tally(0.03, ('regression',))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
