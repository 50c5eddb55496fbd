"""The gate's own accuracy on this machine: false alarms on A/A, detection of +5% and +10%.

A throwaway project holds one workload, ``gate_knob``: a chain of small matmuls whose count per step
grows by a known fraction (``EXTRA``) without changing the case's identity, as a code change would.

- stored-baseline mode: per round, a fresh baseline run (``perfgate run`` + ``baseline update``), then
  one gated run per condition (A/A, +3%, +5%, +10%). By default (``--stored-knob commit``) the project is
  a git repository, the baseline is recorded from its base commit and each condition is a commit on top
  of it, as a pull request would be, so the gate settles what its stored comparison does not in lockstep
  against the baseline's commit (``settle_in_lockstep``); ``--stored-knob env`` sets the knob in the
  environment of one commit-less project instead: the stored comparison alone, as before 2026-11-26;
- ``--against`` mode: a temporary git repository per condition whose head commit sets ``EXTRA`` (A/A: a
  comment-only commit); each trial is ``perfgate run --against HEAD~1 --gate``.

Only the step-time verdict is scored: the knob also adds aten ops, which the deterministic
``aten_ops_per_step`` verdict catches every time, and that is not what this benchmark measures.
"caught" = a step-time ``regression`` verdict (after the gate's re-measure); ``inconclusive`` is
counted separately; a false alarm is an A/A trial whose step time is judged ``regression`` or ``win``.

    /work/main/.venv/bin/python benchmarks/gate_accuracy.py --trials 20          # the full measurement
    /work/main/.venv/bin/python benchmarks/gate_accuracy.py --trials 5 --modes against
    # stored mode against baselines recorded as the baselines job does: 3 pooled --baseline-precision runs
    /work/main/.venv/bin/python benchmarks/gate_accuracy.py --modes stored --baseline-runs 3 --baseline-precision
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
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

ROLLOUT = '''
import sys
sys.path.insert(0, {workloads_dir!r})
import os
from operator_rollout import OperatorRollout, _size

EXTRA = {extra}  # the fraction of work a "code change" adds: more rollout steps in every unit


class RolloutKnob(OperatorRollout):
    name = "gate_knob"
    description = "conv/normalization rollout (7 blocks, 64x64, batch 2) with a knob adding steps"
    sizes = {{s: _size(T=40, grid=64, batch=2, channels=8, stochastic=True, blocks=7)
             for s in ("smoke", "pr", "full")}}

    def run_unit(self, model, built, params):
        # the parent runs steps_per_unit (T) steps; the knob adds `extra` of them, and the step time (the
        # unit's time over T) grows by `extra` while the case's identity does not change
        extra = EXTRA + float(os.environ.get("GATE_KNOB_EXTRA", "0"))
        state = super().run_unit(model, built, params)
        for _ in range(round(params["T"] * extra)):
            state = self.step(model, state, built, params)
        return state
'''

# Two families from outside the project, as a user would write them (the layout issue's reproduction): a
# conv rollout of Conv2d-InstanceNorm-GELU blocks (64x64, 16 channels) and a small transformer block. Both
# run T steps a unit; the knob adds steps, as a code change would add work.
OUTSIDE = '''
import os
import torch
from torch import nn
from perfgate.workload import Built, Tolerance, Workload

EXTRA = {extra}  # the fraction of work a "code change" adds: more steps in every unit


class Knob(Workload):
    name = "gate_knob"
    tolerance = Tolerance(rel_l2=1e-3)
%s
    def steps_per_unit(self, params):
        return params["T"]

    def run_unit(self, model, built, params):
        extra = EXTRA + float(os.environ.get("GATE_KNOB_EXTRA", "0"))
        state = built.state
        for _ in range(round(params["T"] * (1 + extra))):
            state = self.step(model, state, built, params)
        return state
'''

CONV16 = OUTSIDE % '''
    description = "user's conv rollout: 3 Conv2d-InstanceNorm-GELU blocks, 64x64, 16 channels, batch 2"
    sizes = {{s: {{"T": 20, "grid": 64, "channels": 16, "batch": 2}} for s in ("smoke", "pr", "full")}}

    def build(self, params, device, dtype, variants):
        torch.manual_seed(0)
        c = params["channels"]
        layers = [nn.Conv2d(2, c, 1)]
        for _ in range(3):
            layers += [nn.Conv2d(c, c, 3, padding=1), nn.InstanceNorm2d(c, affine=True), nn.GELU()]
        model = nn.Sequential(*layers, nn.Conv2d(c, 2, 1)).eval()
        g = torch.Generator().manual_seed(0)
        x = torch.randn(params["batch"], 2, params["grid"], params["grid"], generator=g)
        return Built(model=model, state=x)

    def step(self, model, state, built, params):
        return 0.5 * model(state) + 0.5 * state
'''

TRANSFORMER = OUTSIDE % '''
    description = "user's small transformer block: 64 tokens, width 128, 4 heads, batch 2"
    # T = 20, as the conv rollout's: with 8, "+5%" was round(8.4) = 8 steps, no change at all (until 2026-11-28)
    sizes = {{s: {{"T": 20, "tokens": 64, "width": 128, "batch": 2}} for s in ("smoke", "pr", "full")}}
    channels_last_applies = False

    def build(self, params, device, dtype, variants):
        torch.manual_seed(0)
        model = nn.TransformerEncoderLayer(params["width"], 4, dim_feedforward=4 * params["width"],
                                           dropout=0.0, batch_first=True).eval()
        g = torch.Generator().manual_seed(0)
        x = torch.randn(params["batch"], params["tokens"], params["width"], generator=g)
        return Built(model=model, state=x)

    def step(self, model, state, built, params):
        return torch.nn.functional.layer_norm(model(state), state.shape[-1:])
'''

FAMILIES = {"matmul": WORKLOAD, "rollout": ROLLOUT, "conv16": CONV16, "transformer": TRANSFORMER}

PYPROJECT = """
[tool.perfgate]
workloads_dirs = ["workloads"]
worker_env = ["GATE_KNOB_EXTRA"]
{processes}
[tool.perfgate.suites.smoke]
workloads = ["gate_knob"]
toggles = ["eager"]
device = "cpu"
{gate}"""


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


def workload_text(family: str, extra: float) -> str:
    return FAMILIES[family].format(extra=extra, workloads_dir=str(REPO / "workloads"))


def make_project(root: Path, extra: float, processes: int | None, threshold: float | None, family: str) -> Path:
    """A project with the gate_knob workload and nothing set that a new user would not set: the defaults,
    unless --processes / --threshold are given."""
    (root / "workloads").mkdir(parents=True)
    (root / "pyproject.toml").write_text(PYPROJECT.format(
        processes=f"processes = {processes}" if processes else "",
        gate=f"[tool.perfgate.gate]\nthreshold = {threshold}\n" if threshold else ""))
    (root / "workloads" / "gate_knob.py").write_text(workload_text(family, extra))
    return root


def git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.name=bench", "-c", "user.email=bench@localhost", *args], cwd=cwd,
                   check=True, capture_output=True)


def make_repo(root: Path, extra: float, processes: int | None, threshold: float | None, family: str) -> Path:
    """A git repository whose HEAD~1 is the base and HEAD adds ``extra`` of the work (A/A: a comment)."""
    make_project(root, 0.0, processes, threshold, family)
    git(root, "init", "-q")
    git(root, "add", ".")
    git(root, "commit", "-qm", "base")
    path = root / "workloads" / "gate_knob.py"
    text = workload_text(family, extra)
    path.write_text(text if extra else text + "# an A/A head commit: no change in work\n")
    git(root, "commit", "-qam", f"head: +{extra:.0%} work")
    return root


def make_branches(root: Path, extras: list[float], family: str) -> None:
    """Stored mode with commits: ``root`` becomes a git repository whose branch ``base`` has no extra work
    and ``head-X`` adds X of it in one commit on top (X = 0: a comment only); run folders and baselines
    stay untracked (a clean tree, as a CI checkout)."""
    (root / ".gitignore").write_text("runs/\nbaselines/\nreports/\n")
    git(root, "init", "-q", "-b", "base")
    git(root, "add", ".")
    git(root, "commit", "-qm", "base")
    path = root / "workloads" / "gate_knob.py"
    for extra in extras:
        git(root, "checkout", "-q", "-b", f"head-{extra:.2f}", "base")
        text = workload_text(family, extra)
        path.write_text(text if extra else text + "# an A/A head commit: no change in work\n")
        git(root, "commit", "-qam", f"head: +{extra:.0%} work")
    git(root, "checkout", "-q", "base")


def record(results: list[dict], mode: str, extra: float, proc: subprocess.CompletedProcess, run_dir: Path,
           wall: float, family: str) -> None:
    try:
        v = step_verdict(run_dir)
    except (OSError, ValueError, json.JSONDecodeError):
        print(proc.stdout[-2000:], proc.stderr[-2000:])
        raise
    case = json.loads((run_dir / "results.json").read_text())["cases"][0]
    sampling = case.get("metadata", {}).get("sampling", {})
    row = {"family": family, "mode": mode, "extra": extra, "kind": v["kind"], "ratio": v["ratio"],
           "low": v["ratio_low"], "high": v["ratio_high"], "p": v["p_value"], "exit": proc.returncode,
           "wall_s": wall, "processes": sampling.get("processes"), "stopped": sampling.get("stopped")}
    lockstep = run_dir / "lockstep" / "results.json"
    if lockstep.is_file():  # stored mode settled in lockstep against the baseline's commit: the pairs it took
        pairs = json.loads(lockstep.read_text())["cases"][0].get("metadata", {}).get("sampling", {})
        row.update(lockstep_pairs=pairs.get("processes"), lockstep_stopped=pairs.get("stopped"),
                   screen=v["rule"].rsplit("(the stored comparison: ", 1)[-1].rstrip(")"))
    results.append(row)
    settled = f"; lockstep {row['lockstep_pairs']} pairs: {str(row['lockstep_stopped'])[:70]}" if "screen" in row else ""
    print(f"  {family:<7} {mode:<8} +{extra:4.0%}  {v['kind']:<12} ratio {v['ratio']:.3f} [{v['ratio_low']:.3f}, "
          f"{v['ratio_high']:.3f}]  exit {proc.returncode}  {wall:.1f} s  {sampling.get('processes')} proc: "
          f"{str(sampling.get('stopped'))[:90]}{settled}", flush=True)


def summarize(results: list[dict]) -> None:
    """Per family, mode and condition: verdict counts, CI coverage of the cross-trial median, wall time."""
    print(f"{'family':<8} {'mode':<8} {'work':>5} {'trials':>6} {'regr':>5} {'win':>4} {'inconcl':>7} "
          f"{'unch':>5} {'CI covers median':>16} {'ratio min-med-max':>20} {'wall s med (max)':>17} {'processes':>10}")
    for family in sorted({r["family"] for r in results}):
        for mode in ("stored", "against"):
            for extra in sorted({r["extra"] for r in results}):
                rows = [r for r in results if (r["family"], r["mode"], r["extra"]) == (family, mode, extra)]
                if not rows:
                    continue
                count = {k: sum(r["kind"] == k for r in rows) for k in ("regression", "win", "inconclusive", "unchanged")}
                ratios = sorted(r["ratio"] for r in rows)
                med = ratios[len(ratios) // 2]
                covered = sum(r["low"] <= med <= r["high"] for r in rows)
                walls = sorted(r["wall_s"] for r in rows)
                procs = sorted(r["processes"] or 0 for r in rows)
                label = "A/A" if extra == 0 else f"+{extra:.0%}"
                print(f"{family:<8} {mode:<8} {label:>5} {len(rows):>6} {count['regression']:>5} {count['win']:>4} "
                      f"{count['inconclusive']:>7} {count['unchanged']:>5} {f'{covered}/{len(rows)}':>16} "
                      f"{f'{ratios[0]:.3f}-{med:.3f}-{ratios[-1]:.3f}':>20} "
                      f"{f'{walls[len(walls) // 2]:.0f} ({walls[-1]:.0f})':>17} {f'{procs[0]}-{procs[-1]}':>10}")
    recorded = sorted({(r["family"], r["baseline_s"], r["baseline_runs"]) for r in results if "baseline_s" in r})
    for family in sorted({f for f, _, _ in recorded}):
        costs = sorted(sec for f, sec, _ in recorded if f == family)
        runs = max(k for f, _, k in recorded if f == family)
        print(f"  {family:<8} baseline recording ({runs} run(s) pooled): median {costs[len(costs) // 2]:.0f} s, "
              f"max {costs[-1]:.0f} s, over {len(costs)} trial(s)")
    print("\ntargets (20 trials, defaults): A/A false alarms <= 1/20; +10% caught >= 19/20; +5% caught "
          ">= 18/20; no wrong-direction verdict; A/A CIs cover the cross-trial median >= 18/20; median wall <= 60 s")
    for family in sorted({r["family"] for r in results}):
        for mode in ("stored", "against"):
            def tally(extra: float, kinds: tuple[str, ...], family: str = family, mode: str = mode) -> str:
                rows = [r for r in results if (r["family"], r["mode"], r["extra"]) == (family, mode, extra)]
                return f"{sum(r['kind'] in kinds for r in rows)}/{len(rows)}" if rows else "-"
            wrong = sum((r["extra"] > 0 and r["kind"] == "win") for r in results
                        if (r["family"], r["mode"]) == (family, mode))
            print(f"  {family:<8} {mode:<8} A/A false alarms {tally(0.0, ('regression', 'win'))}; +10% caught "
                  f"{tally(0.10, ('regression',))}; +5% caught {tally(0.05, ('regression',))}; "
                  f"wrong-direction {wrong}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=20, help="trials per family, mode and condition")
    ap.add_argument("--processes", type=int, default=None, help="set `processes` in the project (default: unset)")
    ap.add_argument("--threshold", type=float, default=None, help="set the gate's threshold (default: unset, 5%%)")
    ap.add_argument("--extras", default="0,0.05,0.10",
                    help="work added per condition (0 = A/A; 0.03 shows what the half-threshold line costs)")
    ap.add_argument("--modes", default="stored,against")
    ap.add_argument("--stored-knob", choices=("commit", "env"), default="commit",
                    help="stored mode: each condition a commit on the baseline's (default), or the knob in the "
                         "environment of one commit-less project (the stored comparison alone)")
    ap.add_argument("--families", default="matmul,rollout",
                    help="matmul (small matmul chain), rollout (operator_rollout's conv blocks), conv16 (a user's "
                         "Conv2d-InstanceNorm-GELU rollout, 64x64, 16 channels), transformer (a small encoder block)")
    ap.add_argument("--vary-paths", action="store_true",
                    help="stored mode: baseline and gated runs from two checkouts whose paths differ in length, "
                         "into run folders whose names differ in length trial by trial (what a user's --out and "
                         "CI checkouts do); the gated runs name the baseline with --baseline")
    ap.add_argument("--baseline-runs", type=int, default=1,
                    help="stored mode: record each trial's baseline from this many runs of the base, pooled by "
                         "`perfgate baseline update RUN1 RUN2 ...` (default 1: one run, as a plain update)")
    ap.add_argument("--baseline-precision", action="store_true",
                    help="stored mode: record the baseline's runs with `perfgate run --baseline-precision`")
    ap.add_argument("--out", type=Path, default=None, help="write every trial as JSON here (rewritten per trial)")
    ap.add_argument("--keep-runs", type=Path, default=None,
                    help="copy each stored-mode run's results.json and comparison.json here, as FAMILY/tNN-EXTRA "
                         "(benchmarks/rejudge_by_index.py reads them)")
    args = ap.parse_args()
    extras = [float(x) for x in args.extras.split(",")]
    modes = args.modes.split(",")
    results: list[dict] = []
    print(f"load before: {os.getloadavg()}  trials {args.trials}, processes {args.processes or 'default'}, "
          f"threshold {args.threshold or 'default'}, baseline runs {args.baseline_runs}"
          + (" (--baseline-precision)" if args.baseline_precision else ""), flush=True)

    def save() -> None:
        if args.out:
            args.out.write_text(json.dumps(results, indent=1) + "\n")

    with tempfile.TemporaryDirectory(prefix="gate-accuracy-") as tmp:
        tmpdir = Path(tmp)
        for family in args.families.split(","):
            if "stored" in modes:
                proj = make_project(tmpdir / family / "stored", 0.0, args.processes, args.threshold, family)
                if args.stored_knob == "commit":
                    make_branches(proj, extras, family)
                other = proj
                if args.vary_paths:  # a second checkout of the same project, at a path of another length
                    other = tmpdir / family / ("stored-checkout-at-a-longer-path-" + "p" * 40)
                    shutil.copytree(proj, other)
                for trial in range(args.trials):
                    # baseline and gated runs as two CI jobs would run them: the same variables set (only the
                    # knob's value differs); with --vary-paths from checkouts and into folders whose names
                    # differ in length, which move a worker's memory layout (docs/gate.md)
                    base_proj, gate_proj = (proj, other) if trial % 2 == 0 else (other, proj)
                    if args.stored_knob == "commit":
                        git(base_proj, "checkout", "-q", "base")
                    # the baseline as the baselines job records it: --baseline-runs runs (each with
                    # --baseline-precision when asked), pooled; its cost is kept with every gated trial
                    t0 = time.perf_counter()
                    base_dirs = []
                    for index in range(max(1, args.baseline_runs)):
                        base_dir = base_proj / "runs" / (f"t{trial:02d}-base" + (f"-{index}" if index else ""))
                        base = perfgate(["run", "--out", str(base_dir)]
                                        + (["--baseline-precision"] if args.baseline_precision else []),
                                        base_proj, {"GATE_KNOB_EXTRA": f"{0:.2f}"})
                        if base.returncode != 0:
                            print(base.stdout[-2000:], base.stderr[-2000:])
                            return 3
                        base_dirs.append(str(base_dir))
                    update = perfgate(["baseline", "update", *base_dirs], base_proj)
                    if update.returncode != 0:
                        print(update.stdout[-2000:], update.stderr[-2000:])
                        return 3
                    baseline_s = time.perf_counter() - t0
                    print(f"  {family:<7} baseline of {len(base_dirs)} run(s) recorded in {baseline_s:.0f} s: "
                          + " | ".join(line.strip() for line in update.stdout.splitlines()
                                       if "recorded from" in line or "precision" in line)[:300], flush=True)
                    (baseline_file,) = (base_proj / "baselines").glob("*/smoke.json")
                    for extra in extras:
                        name = f"t{trial:02d}-{extra:.2f}"
                        if args.vary_paths:
                            name += "-" + "n" * ((17 * trial + 29 * round(extra * 100)) % 90)
                        out = gate_proj / "runs" / name
                        knob = extra
                        if args.stored_knob == "commit":  # the change is in the commit; the variable stays 0
                            git(gate_proj, "checkout", "-q", f"head-{extra:.2f}")
                            knob = 0.0
                        t0 = time.perf_counter()
                        proc = perfgate(["run", "--gate", "--baseline", str(baseline_file), "--out", str(out)],
                                        gate_proj, {"GATE_KNOB_EXTRA": f"{knob:.2f}"})
                        record(results, "stored", extra, proc, out, time.perf_counter() - t0, family)
                        results[-1].update(baseline_s=baseline_s, baseline_runs=len(base_dirs),
                                           baseline_precision=args.baseline_precision)
                        save()
                    if args.keep_runs:  # after every trial: a run cut short keeps what it measured
                        for run_dir in [*(proj / "runs").iterdir(), *((other / "runs").iterdir() if other != proj else [])]:
                            keep = args.keep_runs / family / run_dir.name
                            keep.mkdir(parents=True, exist_ok=True)
                            for name in ("results.json", "comparison.json"):
                                if (run_dir / name).is_file():
                                    shutil.copyfile(run_dir / name, keep / name)
            if "against" in modes:
                repos = {extra: make_repo(tmpdir / family / f"repo-{extra}", extra, args.processes, args.threshold,
                                          family) for extra in extras}
                for trial in range(args.trials):
                    for extra, repo in repos.items():
                        out = tmpdir / family / "ab" / f"t{trial}-{extra}"
                        t0 = time.perf_counter()
                        proc = perfgate(["run", "--against", "HEAD~1", "--gate", "--out", str(out)], repo)
                        record(results, "against", extra, proc, out, time.perf_counter() - t0, family)
                        save()
    print(f"\nload after: {os.getloadavg()}")
    summarize(results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
