"""How often the intervals perfgate prints hold what another run of the same code measures.

Runs one selection K times as separate `perfgate run` invocations (each its own worker processes, threads
pinned as perfgate pins them, `[tool.perfgate]` of the current directory), then, for every ordered pair of
runs (i, j), i != j, and every case both ran:

- **case coverage**: run i's printed 95% step-time interval holds run j's step time (target >= 80%);
- **speedup coverage**: run i's speedup-against-eager interval holds run j's speedup (target >= 85%);
- **advice flips**: for every unordered pair, whether report.html's adopt/avoid/neutral advice differs,
  and whether it reverses (adopt in one run, avoid in the other; target: never).

The figures are what the reports print (perfgate.reports.base.ReportInput's rows: RunResult.step_time,
RunResult.speedup, the recommendation rule), read back from each run's results.json. A case or speedup
with one process has no interval: it is counted apart, never as held. Prints the figures and writes a JSON.

    python benchmarks/interval_coverage.py --runs 8 --out coverage.json              # the smoke suite
    python benchmarks/interval_coverage.py --runs 8 -w wave_field -t eager -t amp-bf16 --size smoke
    python benchmarks/interval_coverage.py --analyze RUN_DIR... --out coverage.json  # runs made already
    python benchmarks/interval_coverage.py --analyze RUN_DIR... --run-to-run 0.08    # and as another term prints

The analysis (``figures``, ``coverage``, ``report_text``) imports no torch: tests/test_interval_coverage.py
drives it with synthetic results files.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from perfgate.model.results import STATUS_OK, RunResult, load_results  # noqa: E402
from perfgate.reports.base import ReportInput  # noqa: E402
from perfgate.util.stats import RUN_TO_RUN_MAX  # noqa: E402

CASE_TARGET = 0.80
SPEEDUP_TARGET = 0.85


def figures(run: RunResult) -> dict[str, dict[str, Any]]:
    """Per ok case of ``run``: its step time (``median_s``: the figure the tables print) and printed interval, its speedup against eager and
    that interval (None where there is none), and the advice report.html gives (adopt, avoid, neutral...)."""
    out: dict[str, dict[str, Any]] = {}
    for row in ReportInput(run).rows:
        st, sp = row.step_time, row.speedup
        if row.case.status != STATUS_OK or st is None:
            continue
        eager = row.spec.toggles == ("eager",)
        out[row.key] = {
            "median_s": st.value, "ci_low_s": st.ci_low, "ci_high_s": st.ci_high, "processes": st.n_processes,
            "speedup": None if sp is None or eager else sp.value,
            "speedup_low": None if sp is None or eager else sp.low,
            "speedup_high": None if sp is None or eager else sp.high,
            "advice": row.recommendation.action,
        }
    return out


def with_run_to_run(run: RunResult, term: float) -> RunResult:
    """A copy of ``run`` whose every case records ``term`` as its run-to-run term (``sampling.run_to_run``,
    what RunResult.run_to_run reads): its intervals as they would print with that term."""
    cases = [dataclasses.replace(c, metadata={**c.metadata, "sampling": {
        **(c.metadata.get("sampling") if isinstance(c.metadata.get("sampling"), dict) else {}), "run_to_run": term}})
        for c in run.cases]
    return dataclasses.replace(run, cases=cases)


def _share(held: int, pairs: int) -> float | None:
    return held / pairs if pairs else None


def coverage(runs: list[dict[str, dict[str, Any]]]) -> dict[str, Any]:
    """The coverage figures over every ordered pair of ``runs`` (each ``figures`` of one run)."""
    per_case: dict[str, dict[str, int]] = {}
    totals = {"case_pairs": 0, "case_held": 0, "case_no_interval": 0,
              "speedup_pairs": 0, "speedup_held": 0, "speedup_no_interval": 0}
    for i, j in itertools.permutations(range(len(runs)), 2):
        for key in sorted(set(runs[i]) & set(runs[j])):
            a, b = runs[i][key], runs[j][key]
            row = per_case.setdefault(key, {"case_pairs": 0, "case_held": 0, "speedup_pairs": 0,
                                            "speedup_held": 0, "advice_pairs": 0, "advice_changes": 0,
                                            "advice_reversals": 0})
            if a["ci_low_s"] is None or a["ci_high_s"] is None:
                totals["case_no_interval"] += 1
            else:
                held = a["ci_low_s"] <= b["median_s"] <= a["ci_high_s"]
                for d in (totals, row):
                    d["case_pairs"] += 1
                    d["case_held"] += held
            if a["speedup"] is None or b["speedup"] is None:
                continue
            if a["speedup_low"] is None or a["speedup_high"] is None:
                totals["speedup_no_interval"] += 1
                continue
            held = a["speedup_low"] <= b["speedup"] <= a["speedup_high"]
            for d in (totals, row):
                d["speedup_pairs"] += 1
                d["speedup_held"] += held
    advice = {"pairs": 0, "changes": 0, "reversals": 0, "reversed": []}
    for i, j in itertools.combinations(range(len(runs)), 2):
        for key in sorted(set(runs[i]) & set(runs[j])):
            if runs[i][key]["speedup"] is None:
                continue  # eager, or no eager to compare with: its advice is not a judgement
            x, y = runs[i][key]["advice"], runs[j][key]["advice"]
            row = per_case[key]
            advice["pairs"] += 1
            row["advice_pairs"] += 1
            if x != y:
                advice["changes"] += 1
                row["advice_changes"] += 1
            if {x, y} == {"adopt", "avoid"}:
                advice["reversals"] += 1
                row["advice_reversals"] += 1
                advice["reversed"].append({"case": key, "runs": [i, j]})
    return {
        "runs": len(runs),
        "case": {"pairs": totals["case_pairs"], "held": totals["case_held"],
                 "coverage": _share(totals["case_held"], totals["case_pairs"]), "target": CASE_TARGET,
                 "without_interval": totals["case_no_interval"]},
        "speedup": {"pairs": totals["speedup_pairs"], "held": totals["speedup_held"],
                    "coverage": _share(totals["speedup_held"], totals["speedup_pairs"]), "target": SPEEDUP_TARGET,
                    "without_interval": totals["speedup_no_interval"]},
        "advice": advice,
        "per_case": {k: {**v, "case_coverage": _share(v["case_held"], v["case_pairs"]),
                         "speedup_coverage": _share(v["speedup_held"], v["speedup_pairs"])}
                     for k, v in sorted(per_case.items())},
    }


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x * 100:.0f}%"


def report_text(summary: dict[str, Any]) -> str:
    """The figures in a few lines, each against its target."""
    c, s, a = summary["case"], summary["speedup"], summary["advice"]

    def verdict(share: float | None, target: float) -> str:
        return "no pairs" if share is None else ("meets" if share >= target else "MISSES") + f" >= {target:.0%}"

    lines = [
        f"{summary['runs']} runs",
        f"case interval holds another run's step time: {c['held']}/{c['pairs']} = {_pct(c['coverage'])} "
        f"({verdict(c['coverage'], c['target'])}; {c['without_interval']} pair(s) without an interval)",
        f"speedup interval holds another run's speedup: {s['held']}/{s['pairs']} = {_pct(s['coverage'])} "
        f"({verdict(s['coverage'], s['target'])}; {s['without_interval']} pair(s) without an interval)",
        f"advice: changes in {a['changes']}/{a['pairs']} pairs of runs, reverses (adopt <-> avoid) in "
        f"{a['reversals']}" + (" (target: never)" if a["reversals"] else ""),
        "per case: case coverage, speedup coverage, advice changes",
    ]
    for key, v in summary["per_case"].items():
        lines.append(f"  {key:<50} {_pct(v['case_coverage']):>5} {_pct(v['speedup_coverage']):>5} "
                     f"{v['advice_changes']}/{v['advice_pairs']}")
    return "\n".join(lines)


def machine() -> dict[str, Any]:
    """What the figures were measured on and under: host, CPU count, load averages."""
    return {"node": platform.node(), "processor": platform.processor() or platform.machine(),
            "cpus": os.cpu_count(), "loadavg": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
            "python": platform.python_version()}


def run_once(out_dir: Path, selection: list[str], timeout_s: float) -> Path:
    """One `perfgate run` of ``selection`` into ``out_dir``; its results.json, or exit 3 saying why not."""
    cmd = [sys.executable, "-m", "perfgate", "run", *selection, "--out", str(out_dir)]
    started = time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        print(f"interval_coverage: `{' '.join(cmd)}` took more than {timeout_s:g} s (--timeout)", file=sys.stderr)
        raise SystemExit(3) from None
    results = out_dir / "results.json"
    if not results.is_file():
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        print(f"interval_coverage: `{' '.join(cmd)}` wrote no results.json (exit {proc.returncode}): {tail[0]}",
              file=sys.stderr)
        raise SystemExit(3)
    print(f"  {out_dir.name}: exit {proc.returncode}, {time.perf_counter() - started:.0f} s", flush=True)
    return results


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=8, help="separate `perfgate run` invocations (>= 2; 8 for figures)")
    ap.add_argument("--suite", default=None, help="suite to run (default smoke, unless -w/-t choose cases)")
    ap.add_argument("-w", "--workload", action="append", default=[], help="workload (repeatable)")
    ap.add_argument("-t", "--toggle", action="append", default=[], help="toggle set (repeatable)")
    ap.add_argument("--size", default=None, help="size of the workloads chosen with -w")
    ap.add_argument("--dir", default=None, help="where the runs go (default: a new folder under reports/)")
    ap.add_argument("--timeout", type=float, default=3600.0, help="seconds one run may take")
    ap.add_argument("--run-arg", action="append", default=[], metavar="ARG",
                    help="an option passed on to every `perfgate run` (repeatable): --run-arg=--device=cuda")
    ap.add_argument("--analyze", nargs="+", default=None, metavar="RUN_DIR",
                    help="analyse these run folders (or results.json files) instead of running")
    ap.add_argument("--run-to-run", type=float, action="append", default=[], metavar="TERM",
                    help="score the intervals again with this run-to-run term in place of the one each case recorded "
                         "(a relative sd: 0.08); repeatable, each term scored on its own")
    ap.add_argument("--out", default="interval_coverage.json", help="the JSON written")
    args = ap.parse_args(argv)
    if any(not 0 <= t <= RUN_TO_RUN_MAX for t in args.run_to_run):
        ap.error(f"--run-to-run must be in [0, {RUN_TO_RUN_MAX:g}] (a relative sd), got {args.run_to_run}")
    if args.analyze is None and args.runs < 2:
        ap.error(f"--runs must be at least 2 (a pair of runs), got {args.runs}")
    if args.analyze is not None and len(args.analyze) < 2:
        ap.error("--analyze needs at least 2 run folders")

    if args.analyze is not None:
        paths = [Path(p) / "results.json" if Path(p).is_dir() else Path(p) for p in args.analyze]
        selection: list[str] = []
    else:
        selection = [f"--suite={args.suite or 'smoke'}"] if args.suite or not (args.workload or args.toggle) else []
        if not selection:
            selection += [f"--workload={w}" for w in args.workload] + [f"--toggles={t}" for t in args.toggle]
            selection += [f"--size={args.size}"] if args.size else []
        selection += args.run_arg
        root = Path(args.dir) if args.dir else Path("reports") / time.strftime("interval-coverage-%Y%m%d-%H%M%S")
        root.mkdir(parents=True, exist_ok=True)
        print(f"interval_coverage: {args.runs} runs of `perfgate run {' '.join(selection)}` into {root}", flush=True)
        paths = [run_once(root / f"run-{i:02d}", selection, args.timeout) for i in range(args.runs)]
    loaded = [load_results(p) for p in paths]
    runs = [figures(r) for r in loaded]
    summary = {**coverage(runs), "selection": selection, "results": [str(p) for p in paths], "machine": machine()}
    print(report_text(summary))
    if args.run_to_run:
        summary["rescored"] = {}
        for term in args.run_to_run:
            again = coverage([figures(with_run_to_run(r, term)) for r in loaded])
            summary["rescored"][f"{term:g}"] = again
            print(f"\nre-scored with a run-to-run term of {term * 100:g}% in every case:")
            print(report_text(again))
    tmp = Path(args.out).with_suffix(".json.tmp")
    tmp.write_text(json.dumps(summary, indent=1) + "\n")
    tmp.replace(args.out)  # atomic: a reader sees the old file or the whole new one
    print(f"interval_coverage: wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
