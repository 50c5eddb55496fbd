"""Stored-mode trials judged again, offline: per-process step times unpaired (what the gate does) or paired
by process index (what each index's fixed heap offset would allow).

Every worker process of a case gets the same heap offset by its index in every run (perfgate.worker.main), so in
some layout sets one index runs fast or slow by the same amount in every run (docs/gate.md, "How far
whole runs move"). Against a stored baseline the gate compares the two sides' processes unpaired, so those
fixed differences count as noise. This script takes the run folders that ``gate_accuracy.py --modes stored
--keep-runs DIR`` kept (``tNN-base``, ``tNN-0.00``, ``tNN-0.05``, ``tNN-0.10``) and judges each gated run
against its trial's baseline both ways with the gate's own statistics (``perfgate.judging.timechange.time_change`` and
``judge_time``; 10th percentile per process, the 1% run-to-run term, 5% threshold, 95%), on the processes
each run took. It is not the gate: no looks, no re-measure, one confidence level for both; it compares the
two statistics on the same data.

    /work/main/.venv/bin/python benchmarks/rejudge_by_index.py DIR [--out rejudged.json]
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

from perfgate.judging.compare import judge_time  # noqa: E402
from perfgate.judging.gate_settings import GateSettings  # noqa: E402
from perfgate.judging.timechange import time_change  # noqa: E402
from perfgate.model.results import load_results  # noqa: E402


def processes(run_dir: Path) -> dict[int, list[float]]:
    """The run's one case: each process's step times (seconds), by process index."""
    (case,) = load_results(run_dir / "results.json").cases
    return {p.process_index: p.step_times_s for p in case.processes}


def judge(base: dict[int, list[float]], head: dict[int, list[float]], by_index: bool,
          gate: GateSettings) -> dict[str, object]:
    if by_index:
        common = sorted(set(base) & set(head))
        change = time_change([base[i] for i in common], [head[i] for i in common], paired=True,
                             confidence=gate.confidence, run_to_run=gate.run_to_run, quantile=gate.process_quantile)
    else:
        change = time_change(list(base.values()), list(head.values()), confidence=gate.confidence,
                             run_to_run=gate.run_to_run, quantile=gate.process_quantile)
    kind, _, _ = judge_time(change, gate.threshold, "global threshold")
    return {"kind": kind, "ratio": change.ratio, "low": change.low, "high": change.high}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", type=Path, help="the folder of tNN-base, tNN-0.00, ... run folders")
    ap.add_argument("--out", type=Path, default=None, help="write every trial's two verdicts as JSON")
    args = ap.parse_args()
    bases = sorted(args.runs.glob("t*-base"))
    if not bases:
        ap.error(f"{args.runs}: no tNN-base run folders in it (gate_accuracy.py --keep-runs DIR keeps them)")
    gate = GateSettings()
    rows = []
    for base_dir in bases:
        trial = base_dir.name.split("-")[0]
        base = processes(base_dir)
        for head_dir in sorted(args.runs.glob(f"{trial}-0.*")):
            head = processes(head_dir)
            row = {"trial": trial, "extra": float(head_dir.name.split("-")[1]), "n_base": len(base),
                   "n_head": len(head), "pairs": len(set(base) & set(head))}
            for how in ("unpaired", "by_index"):
                row[how] = judge(base, head, how == "by_index", gate)
            rows.append(row)
            print(f"{trial} +{row['extra']:.0%}  {len(base):2d}/{len(head):2d}  " + "   ".join(
                f"{how} {row[how]['kind']:<12} {row[how]['ratio']:.3f} [{row[how]['low']:.3f}, {row[how]['high']:.3f}]"
                for how in ("unpaired", "by_index")), flush=True)
    print()
    for extra in sorted({r["extra"] for r in rows}):
        group = [r for r in rows if r["extra"] == extra]
        label = "A/A" if extra == 0 else f"+{extra:.0%}"
        for how in ("unpaired", "by_index"):
            kinds = Counter(r[how]["kind"] for r in group)
            width = statistics.median(math.log(r[how]["high"] / r[how]["low"]) / 2 for r in group)
            print(f"{label:>4} {how:<9} {len(group)} trials: " + ", ".join(f"{k} {v}" for k, v in sorted(kinds.items()))
                  + f"; median CI half-width {math.expm1(width):.1%}")
    if args.out:
        args.out.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
