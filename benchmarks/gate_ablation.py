"""What each of the gate's mechanisms against per-process performance states buys: each switched (on or off)
on its own, then all off together, against the defaults; A/A, +5% and +10%, stored baseline and ``--against``.

The mechanisms and their switches:

| mechanism | switched with |
|---|---|
| set-aside of slowed processes (``timechange.set_aside_slowed``; off by default) | ``[tool.perfgate.gate] set_aside_slowed = true`` |
| mode-by-mode comparison (``timechange.performance_modes`` / ``mode_matches``; off by default) | ``[tool.perfgate.gate] compare_modes = true`` |
| the unpaired floor (``unpaired_min_processes``) | ``[tool.perfgate.gate] unpaired_min_processes = 1`` |
| layout groups within a process (off by default since 2026-12-06) | ``[tool.perfgate.timing] layouts = 3`` |
| drawn layouts (heap offsets, reserved pages; groups too) | ``PERFGATE_LAYOUT=none`` |

Two parts:

- ``--simulated`` (seconds): perfgate.judging.gatesim's hierarchical model through the real looks and verdict, for
  the three mechanisms that live in the comparison (a layout is not simulated), with and without
  performance modes, and a regression that only some processes pay;
- real workers (hours): benchmarks/gate_accuracy.py's projects and trials (``--stored-knob env``: the stored
  comparison alone, not settled in lockstep), one project per configuration.

    .venv/bin/python benchmarks/gate_ablation.py --simulated --trials 100
    .venv/bin/python benchmarks/gate_ablation.py --trials 20 --families conv16,transformer,rollout
    .venv/bin/python benchmarks/gate_ablation.py --table trials.json   # the tables of a run's --out file

Where every verdict is `inconclusive` (a stored comparison without a commit, whose interval carries the CPU
run-to-run default), the configurations still differ in how far their estimates scatter: the ``ratio sd``
column, and an F test of each configuration's against the defaults'.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import gate_accuracy  # noqa: E402

from perfgate.judging.gate_settings import GateSettings  # noqa: E402
from perfgate.judging.gatesim import Scenario, rates  # noqa: E402

# name -> ([tool.perfgate.gate] lines, [tool.perfgate.timing] lines, environment)
CONFIGS: dict[str, tuple[dict[str, str], dict[str, str], dict[str, str]]] = {
    "defaults": ({}, {}, {}),
    "set-aside on": ({"set_aside_slowed": "true"}, {}, {}),
    "modes on": ({"compare_modes": "true"}, {}, {}),
    "no unpaired floor": ({"unpaired_min_processes": "1"}, {}, {}),
    "layout groups on": ({}, {"layouts": "3"}, {}),
    "no drawn layouts": ({}, {}, {"PERFGATE_LAYOUT": "none"}),
    "all off": ({"set_aside_slowed": "false", "compare_modes": "false", "unpaired_min_processes": "1"},
                {"layouts": "1"}, {"PERFGATE_LAYOUT": "none"}),
}
SIMULATED = ("defaults", "set-aside on", "modes on", "no unpaired floor", "all off")

# the simulated scenarios: (name, Scenario keywords); the modes are the conv rollout's under glibc's
# default allocator (docs/gate.md, "Performance modes"), the partial regression a cost only some layouts pay
SCENARIOS = (
    ("steady", {}),
    ("modes", {"fast_share": 0.45, "slowed": 0.1}),
    ("30% pay +15%", {"paying": 0.3}),
)


def simulated(args: argparse.Namespace) -> None:
    print(f"simulated: {args.trials} trials per row, seed {args.seed}; perfgate.judging.gatesim defaults otherwise")
    print(f"{'config':<18} {'scenario':<13} {'mode':<8} {'A/A alarms':>10} {'+5% caught':>10} {'+10% caught':>11} "
          f"{'wrong dir':>9} {'A/A unch':>8} {'procs A/A':>9}")
    for scenario_name, extra in SCENARIOS:
        for mode in ("stored", "against"):
            for name in SIMULATED:
                gate_lines = CONFIGS[name][0]
                gate = dataclasses.replace(GateSettings(), bootstrap_resamples=args.resamples, **{
                    k: (v == "true") if v in ("true", "false") else int(v) for k, v in gate_lines.items()})
                row = {}
                for change in (0.0, 0.05, 0.10):
                    kw = dict(extra)
                    if "paying" in kw:  # the partial regression: a change only some processes pay, sized apart
                        change = 0.15 if change else 0.0
                    row[change] = rates(Scenario(change=change, paired=mode == "against", **kw), gate,
                                        trials=args.trials, seed=args.seed)
                aa = row[0.0]
                changed = [r for c, r in row.items() if c]
                wrong = sum(r.count("win") for r in changed)
                five, ten = (row.get(0.05), row.get(0.10)) if 0.05 in row else (None, row[0.15])
                print(f"{name:<18} {scenario_name:<13} {mode:<8} "
                      f"{aa.count('regression') + aa.count('win'):>10} "
                      f"{(five.count('regression') if five else '-'):>10} {ten.count('regression'):>11} {wrong:>9} "
                      f"{aa.count('unchanged'):>8} {aa.median_processes:>9}", flush=True)


def project(root: Path, name: str, family: str) -> Path:
    """gate_accuracy's stored-mode project (knob in the environment) with ``name``'s switches set."""
    gate_lines, timing_lines, _ = CONFIGS[name]
    proj = gate_accuracy.make_project(root, 0.0, None, None, family)
    text = (proj / "pyproject.toml").read_text()
    for table, lines in (("gate", gate_lines), ("timing", timing_lines)):
        if lines:
            text += f"\n[tool.perfgate.{table}]\n" + "".join(f"{k} = {v}\n" for k, v in lines.items())
    (proj / "pyproject.toml").write_text(text)
    return proj


def repo_of(root: Path, name: str, family: str, extra: float) -> Path:
    """gate_accuracy.make_repo with ``name``'s switches in the project: HEAD~1 the base, HEAD adds ``extra``."""
    repo = project(root, name, family)
    gate_accuracy.git(repo, "init", "-q")
    gate_accuracy.git(repo, "add", ".")
    gate_accuracy.git(repo, "commit", "-qm", "base")
    text = gate_accuracy.workload_text(family, extra)
    (repo / "workloads" / "gate_knob.py").write_text(text if extra else text + "# an A/A head commit\n")
    gate_accuracy.git(repo, "commit", "-qam", f"head: +{extra:.0%} work")
    return repo


def record_baseline(proj: Path, base_dir: Path, env: dict[str, str]) -> Path | None:
    """A plain run of unchanged code into ``base_dir``, stored by ``baseline update``: the baseline file, or
    None (after printing what failed) when either command did."""
    for cmd in (["run", "--out", str(base_dir)], ["baseline", "update", str(base_dir)]):
        proc = gate_accuracy.perfgate(cmd, proj, {**env, "GATE_KNOB_EXTRA": "0.00"})
        if proc.returncode != 0:
            print(proc.stdout[-2000:], proc.stderr[-2000:])
            return None
    (baseline_file,) = (proj / "baselines").glob("*/smoke.json")
    return baseline_file


def real(args: argparse.Namespace) -> int:
    """Trials are the outer loop and configurations alternate inside it, so a slow drift of the machine
    falls on every configuration alike and a run stopped early leaves balanced cells."""
    extras = [float(x) for x in args.extras.split(",")]
    families, names = args.families.split(","), args.configs.split(",")
    results: list[dict] = []
    print(f"load before: {os.getloadavg()}", flush=True)
    with tempfile.TemporaryDirectory(prefix="gate-ablation-") as tmp:
        cells = [(family, name, Path(tmp) / family / name.replace(" ", "-")) for family in families for name in names]
        for family, name, root in cells:
            if "stored" in args.modes:
                project(root / "stored", name, family)
            if "against" in args.modes:
                for extra in extras:
                    repo_of(root / f"repo-{extra}", name, family, extra)
        for trial in range(args.trials):
            for family, name, root in cells:
                env = {**CONFIGS[name][2]}
                start = len(results)
                if "stored" in args.modes:
                    proj = root / "stored"
                    baseline_file = record_baseline(proj, proj / "runs" / f"t{trial:02d}-base", env)
                    if baseline_file is None:
                        return 3
                    for extra in extras:
                        out = proj / "runs" / f"t{trial:02d}-{extra:.2f}"
                        t0 = time.perf_counter()
                        proc = gate_accuracy.perfgate(["run", "--gate", "--baseline", str(baseline_file), "--out",
                                                       str(out)], proj, {**env, "GATE_KNOB_EXTRA": f"{extra:.2f}"})
                        gate_accuracy.record(results, "stored", extra, proc, out, time.perf_counter() - t0, family)
                if "against" in args.modes:
                    for extra in extras:
                        repo = root / f"repo-{extra}"
                        out = root / "ab" / f"t{trial}-{extra}"
                        t0 = time.perf_counter()
                        proc = gate_accuracy.perfgate(["run", "--against", "HEAD~1", "--gate", "--out", str(out)],
                                                      repo, env)
                        gate_accuracy.record(results, "against", extra, proc, out, time.perf_counter() - t0, family)
                for r in results[start:]:
                    r["config"], r["trial"] = name, trial
                if args.out:
                    args.out.write_text(json.dumps(results, indent=1) + "\n")
            print(f"trial {trial + 1}/{args.trials} done, load {os.getloadavg()}", flush=True)
    print(f"\nload after: {os.getloadavg()}")
    table(results)
    for mode in args.modes.split(","):
        print("\n".join(spread_against_defaults(results, mode)))
    return 0


def ratio_spread(rows: list[dict]) -> tuple[float, int]:
    """The spread of ``rows``' step-time estimates: the sd of their log ratios around the mean of their own
    condition (one mean per work added, so the knob's true size drops out), pooled over the conditions, and
    its degrees of freedom. Every verdict of a configuration can be `inconclusive` while its estimates still
    differ in spread: this is the figure that compares them then."""
    ss, dof = 0.0, 0
    for extra in {r["extra"] for r in rows}:
        logs = [math.log(r["ratio"]) for r in rows if r["extra"] == extra and r.get("ratio")]
        if len(logs) > 1:
            mean = statistics.fmean(logs)
            ss += sum((x - mean) ** 2 for x in logs)
            dof += len(logs) - 1
    return (math.sqrt(ss / dof) if dof else math.nan), dof


def table(results: list[dict]) -> None:
    print(f"{'family':<12} {'config':<18} {'mode':<8} {'A/A alarms':>10} {'A/A unch':>8} {'+5% caught':>10} "
          f"{'+10% caught':>11} {'wrong dir':>9} {'ratio sd':>8} {'wall s (median)':>15} {'s a process':>11}")
    for family in [*sorted({r["family"] for r in results}), "all"]:
        for name in CONFIGS:
            for mode in ("stored", "against"):
                rows = [r for r in results if (r["family"] if family != "all" else "all", r.get("config"), r["mode"])
                        == (family, name, mode)]
                if not rows:
                    continue

                def tally(extra: float, kinds: tuple[str, ...], rows: list[dict] = rows) -> str:
                    some = [r for r in rows if r["extra"] == extra]
                    return f"{sum(r['kind'] in kinds for r in some)}/{len(some)}" if some else "-"

                wrong = sum(r["extra"] > 0 and r["kind"] == "win" for r in rows)
                walls = sorted(r["wall_s"] for r in rows)
                sd, dof = ratio_spread(rows) if family != "all" else across_families(rows)
                print(f"{family:<12} {name:<18} {mode:<8} {tally(0.0, ('regression', 'win')):>10} "
                      f"{tally(0.0, ('unchanged',)):>8} {tally(0.05, ('regression',)):>10} "
                      f"{tally(0.10, ('regression',)):>11} {wrong:>9} {sd * 100:>7.2f}% {walls[len(walls) // 2]:>15.0f} "
                      f"{statistics.median(r['wall_s'] / r['processes'] for r in rows if r.get('processes')):>11.2f}")


def spread_against_defaults(results: list[dict], mode: str) -> list[str]:
    """For each configuration but the defaults, its estimates' spread over every family against the defaults',
    with a two-sided F test of the two variances (lines to print; none without the defaults' spread)."""
    from scipy import stats as sps

    def spread(name: str) -> tuple[float, int]:
        return across_families([r for r in results if r.get("config") == name and r["mode"] == mode])

    base, base_dof = spread("defaults")
    lines = []
    for name in CONFIGS:
        sd, dof = spread(name)
        if name == "defaults" or not dof or not base_dof or not base > 0:
            continue
        f = (sd / base) ** 2
        p = min(1.0, 2 * min(sps.f.cdf(f, dof, base_dof), sps.f.sf(f, dof, base_dof)))
        lines.append(f"{mode}: {name} ratio sd {sd * 100:.2f}% ({dof} dof) against the defaults' {base * 100:.2f}% "
                     f"({base_dof} dof): variance ratio {f:.2f}, F test p = {p:.2g}")
    return lines


def across_families(rows: list[dict]) -> tuple[float, int]:
    """``ratio_spread`` of each family's ``rows`` pooled into one (sd, degrees of freedom): the spread around
    each family's own condition means."""
    parts = [ratio_spread([r for r in rows if r["family"] == f]) for f in sorted({r["family"] for r in rows})]
    dof = sum(d for _, d in parts)
    return (math.sqrt(sum(sd * sd * d for sd, d in parts if d) / dof) if dof else math.nan), dof


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--simulated", action="store_true", help="the simulated part only (seconds)")
    ap.add_argument("--trials", type=int, default=20)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--resamples", type=int, default=1000, help="simulated: the gate's bootstrap resamples")
    ap.add_argument("--extras", default="0,0.05,0.10")
    ap.add_argument("--modes", default="stored,against")
    ap.add_argument("--families", default="conv16,transformer,rollout")
    ap.add_argument("--configs", default=",".join(CONFIGS), help=f"comma-separated, of: {', '.join(CONFIGS)}")
    ap.add_argument("--out", type=Path, default=None, help="write every real trial as JSON here")
    ap.add_argument("--table", type=Path, default=None, help="print the tables of a --out file, and run nothing")
    ap.add_argument("--first-trials", type=int, default=None, help="--table: only the first N trials")
    args = ap.parse_args()
    if args.table:
        results = [r for r in json.loads(args.table.read_text())
                   if args.first_trials is None or r.get("trial", 0) < args.first_trials]
        table(results)
        for mode in sorted({r["mode"] for r in results}):
            print("\n".join(spread_against_defaults(results, mode)))
        return 0
    unknown = [c for c in args.configs.split(",") if c not in CONFIGS]
    if unknown:
        print(f"unknown --configs {', '.join(unknown)}; valid: {', '.join(CONFIGS)}", file=sys.stderr)
        return 2
    if args.simulated:
        simulated(args)
        return 0
    return real(args)


if __name__ == "__main__":
    sys.exit(main())
