"""What drawn layouts and layout groups cost a gated run: wall time of stored gated runs without a commit.

One family (benchmarks/gate_accuracy.py's ``conv16``, ``transformer``, ``rollout`` or ``matmul``), three
configurations: ``drawn`` (the defaults: a drawn layout a process, one group), ``none``
(``PERFGATE_LAYOUT=none``: nothing drawn) and ``groups3`` (drawn, ``[tool.perfgate.timing] layouts = 3``).
Each records one baseline, then runs ``perfgate run --gate --baseline ...`` on unchanged code (A/A) once a
round, the order rotated each round, so a drift of the machine falls on every configuration alike. Without
a commit every case runs to the 16-process budget, so wall times compare like for like; a run that
re-measured (``results-remeasure.json``) did more work and is left out of the medians.

    .venv/bin/python benchmarks/layout_wall.py --family transformer --rounds 4 --out wall.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import gate_ablation  # noqa: E402
import gate_accuracy  # noqa: E402

# name -> (gate_ablation configuration of the project, environment)
CONFIGS: dict[str, tuple[str, dict[str, str]]] = {
    "drawn": ("defaults", {}),
    "none": ("defaults", {"PERFGATE_LAYOUT": "none"}),
    "groups3": ("layout groups on", {}),
}


def row(name: str, rnd: int, wall: float, out: Path) -> dict:
    """One gated run's figures from its folder: processes, case seconds a process, layout groups a process
    (the median over processes of how many groups each sampled: ``layout_groups`` holds one count a group)."""
    (case,) = json.loads((out / "results.json").read_text())["cases"]
    procs = case["processes"]
    return {"round": rnd, "name": name, "wall_s": round(wall, 2),
            "remeasure": (out / "results-remeasure.json").exists(), "processes": len(procs),
            "s_per_process": round(case["duration_s"] / len(procs), 3),
            "groups": statistics.median(len(p["layout_groups"] or [1]) for p in procs),
            "load": round(os.getloadavg()[0], 2)}


def summarize(rows: list[dict]) -> list[str]:
    """Per configuration: median wall and seconds a process over runs that did not re-measure, and the
    median of each round's wall against ``none``'s in the same round."""
    lines = []
    none_wall = {r["round"]: r["wall_s"] for r in rows if r["name"] == "none" and not r["remeasure"]}
    for name in CONFIGS:
        kept = [r for r in rows if r["name"] == name and not r["remeasure"]]
        if not kept:
            continue
        ratios = [r["wall_s"] / none_wall[r["round"]] for r in kept if name != "none" and r["round"] in none_wall]
        against = (f", against none in its round {statistics.median(ratios):.3f}x "
                   f"({min(ratios):.3f}-{max(ratios):.3f})") if ratios else ""
        lines.append(f"{name:<8} {len(kept)} runs: wall {statistics.median(r['wall_s'] for r in kept):.1f} s, "
                     f"{statistics.median(r['s_per_process'] for r in kept):.3f} s a process{against}")
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--family", default="transformer")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--out", type=Path, help="write every run's figures here as JSON")
    args = ap.parse_args()
    print(f"load before {os.getloadavg()}; family {args.family}, {args.rounds} rounds", flush=True)
    names = list(CONFIGS)
    rows: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="layout-wall-") as tmp:
        projects: dict[str, tuple[Path, Path]] = {}  # configuration -> (project, its baseline file)
        for config in dict.fromkeys(c for c, _ in CONFIGS.values()):
            proj = gate_ablation.project(Path(tmp) / config.replace(" ", "-"), config, args.family)
            baseline = gate_ablation.record_baseline(proj, proj / "runs" / "base", {})
            if baseline is None:
                return 3
            projects[config] = (proj, baseline)
        for rnd in range(args.rounds):
            for name in names[rnd % len(names):] + names[:rnd % len(names)]:
                config, env = CONFIGS[name]
                proj, baseline = projects[config]
                out = proj / "runs" / f"g{rnd}-{name}"
                t0 = time.perf_counter()
                proc = gate_accuracy.perfgate(["run", "--gate", "--baseline", str(baseline), "--out", str(out)],
                                              proj, {"GATE_KNOB_EXTRA": "0.00", **env})
                wall = time.perf_counter() - t0
                if proc.returncode not in (0, 1):
                    print(proc.stdout[-2000:], proc.stderr[-2000:])
                    return 3
                rows.append(row(name, rnd, wall, out))
                print(json.dumps(rows[-1]), flush=True)
                if args.out:
                    args.out.write_text(json.dumps(rows, indent=1) + "\n")
    print("\n".join(summarize(rows)))
    print(f"load after {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
