"""Stored-mode trials against pooled baselines, judged again offline with other run-to-run rules.

``gate_accuracy.py --modes stored --baseline-runs K --keep-runs DIR`` keeps, per family and trial, the K
runs its baseline pooled (``tNN-base``, ``tNN-base-1``, ...) and each gated run (``tNN-0.00-...``,
``tNN-0.05-...``, ``tNN-0.10-...``). This script pools each trial's base runs again
(``perfgate.judging.baselines.pooled``) and judges every gated run against them with the gate's own
``compare_runs`` at the level of the last look of the processes it took, once per rule:

- ``upper``: a pooled baseline whose runs spread more than the default adds their 95% upper bound (the
  rule until 2026-11-28);
- ``moderated``: their spread combined with the default's (``runspread.moderated``, the rule now);
- ``default``: the configured default alone (the pooled runs' spread ignored);

each with every ``--run-to-run`` default given. It is not the gate: the gated runs took the processes the
rule of their day let them take (16, the budget, where nothing settled), and no re-measure runs. Only the
step-time verdict is scored, as gate_accuracy.py scores it.

    .venv/bin/python benchmarks/rejudge_pooled.py DIR [--run-to-run 0.02,0.06] [--out rejudged.json]

``--levels`` instead reads every run of unchanged code the trials kept (each base run and each gated run
at +0%) as a repeat: per family and case, how far those runs' levels (``runspread.case_levels`` at the
gate's process quantile) spread, the part their own processes explain, and what is left, the run effect.
A stored comparison without a commit carries the head run's own move whatever its baseline is, so this is
the spread no baseline takes away (docs/lab-record.md, "What no baseline takes away").

    .venv/bin/python benchmarks/rejudge_pooled.py DIR --levels
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from perfgate.judging import baselines, runspread, sequential  # noqa: E402
from perfgate.judging.compare import compare_runs  # noqa: E402
from perfgate.judging.gate_settings import GateSettings  # noqa: E402
from perfgate.model.results import load_results  # noqa: E402
from perfgate.util.stats import PROCESS_QUANTILE  # noqa: E402

RULES = ("upper", "moderated", "default")


def trials(root: Path) -> list[tuple[str, str, Path, list[Path]]]:
    """(family, trial, baseline folders..., gated run folders) for every complete trial under ``root``."""
    out = []
    for family in sorted(p for p in root.iterdir() if p.is_dir()):
        names = sorted(p.name for p in family.iterdir())
        for trial in sorted({n.split("-")[0] for n in names}):
            bases = [family / n for n in names if n == f"{trial}-base" or n.startswith(f"{trial}-base-")]
            gated = [family / n for n in names if n.startswith(f"{trial}-0.") and (family / n / "results.json").is_file()]
            if bases and gated and all((b / "results.json").is_file() for b in bases):
                out.append((family.name, trial, bases, gated))
    return out


def judge(rule: str, run_to_run: float, bases: list[Path], gated: Path) -> tuple[str, float | None]:
    real = runspread.moderated
    if rule == "upper":
        runspread.moderated = lambda assumed, pooled, *a: pooled.upper  # type: ignore[assignment]
    elif rule == "default":
        runspread.moderated = lambda assumed, pooled, *a: assumed  # type: ignore[assignment]
    try:
        base = baselines.pooled([load_results(b / "results.json") for b in bases], [b.name for b in bases])
        head = load_results(gated / "results.json")
        gs = GateSettings(run_to_run=run_to_run)
        # the level of the look at the head's process count, in the design of the default 3 processes
        cmp = compare_runs(head, base, gs, look_confidence=sequential.look_confidence(gs, 3))
        (v,) = [v for v in cmp.verdicts if v.metric == "step_time"]
        return v.kind, v.ratio
    finally:
        runspread.moderated = real


def unchanged_levels(root: Path, quantile: float = PROCESS_QUANTILE) -> list[dict]:
    """Per family and case, the runs of unchanged code under ``root`` (every trial's base runs and gated runs
    at +0%, in name order): their count, the sd of their levels (log scale), the mean sampling part of one
    level (between-process variance / processes) and the run effect left (both as relative sd)."""
    out = []
    for family in sorted(p for p in root.iterdir() if p.is_dir()):
        runs = [load_results(d / "results.json") for d in sorted(family.iterdir())
                if ("-base" in d.name or "-0.00" in d.name) and (d / "results.json").is_file()]
        for key in sorted({c.key for r in runs for c in r.cases}):
            levels, sampling = runspread.case_levels([c for r in runs for c in r.cases if c.key == key], quantile)
            if len(levels) < 2:
                continue
            var = statistics.variance(levels)
            out.append({"family": family.name, "case": key, "runs": len(levels), "levels_ms": [
                round(math.exp(x) * 1e3, 7) for x in levels], "sd": math.sqrt(var), "sampling_sd": math.sqrt(sampling),
                "run_effect": math.sqrt(max(var - sampling, 0.0))})
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("root", type=Path)
    ap.add_argument("--run-to-run", default="0.02")
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--levels", action="store_true", help="the spread of the kept runs of unchanged code, no judging")
    args = ap.parse_args()
    if args.levels:
        rows = unchanged_levels(args.root)
        for r in rows:
            print(f"{r['family']:12s} {r['case']:40s} {r['runs']:3d} runs: levels sd {r['sd'] * 100:.2f}%, of which "
                  f"sampling {r['sampling_sd'] * 100:.2f}%, run effect {r['run_effect'] * 100:.2f}%")
        if args.out:
            args.out.write_text(json.dumps(rows, indent=1) + "\n")
        return 0
    terms = [float(x) for x in args.run_to_run.split(",")]
    rows = []
    for family, trial, bases, gated in trials(args.root):
        for g in gated:
            extra = g.name.split("-")[1]
            row = {"family": family, "trial": trial, "extra": extra}
            for rule in RULES:
                for term in terms:
                    row[f"{rule}@{term:g}"] = judge(rule, term, bases, g)
            rows.append(row)
    print(f"{len(rows)} gated runs in {len({(r['family'], r['trial']) for r in rows})} trials")
    for family in sorted({r["family"] for r in rows}):
        for extra in sorted({r["extra"] for r in rows}):
            sel = [r for r in rows if r["family"] == family and r["extra"] == extra]
            ratios = [r[f"moderated@{terms[0]:g}"][1] for r in sel if r[f"moderated@{terms[0]:g}"][1]]
            sd = statistics.stdev(math.log(x) for x in ratios) * 100 if len(ratios) > 1 else float("nan")
            line = [f"{family:12s} +{float(extra) * 100:3.0f}%  n={len(sel):2d}  ratios "
                    f"{min(ratios):.3f}-{statistics.median(ratios):.3f}-{max(ratios):.3f} (sd {sd:.1f}%)"]
            for key in [f"{rule}@{t:g}" for rule in RULES for t in terms]:
                c = Counter(r[key][0] for r in sel)
                line.append(f"{key}: " + " ".join(f"{k[:4]} {n}" for k, n in sorted(c.items())))
            print("  ".join(line))
    if args.out:
        args.out.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
