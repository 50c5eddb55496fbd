"""What the gate's judging-side mechanisms buy on real workers' runs: each judged again offline, on and off.

Two of the mechanisms issue 40 asks about live in the comparison, not the measurement, so runs already made
can be judged again with each switched on and off (``[tool.perfgate.gate]``; both off by default since this
script measured them, docs/lab-record.md):

| mechanism | on with |
|---|---|
| set-aside of each side's slowed minority of processes (``timechange.set_aside_slowed``) | ``set_aside_slowed = true`` |
| mode-by-mode comparison of sides that fall into performance modes (``timechange.mode_matches``) | ``compare_modes = true`` |

The unpaired floor (``unpaired_min_processes``: a comparison settles only from that many processes) is a rule
about *when* sampling stops: ``--floors 8,1`` replays each comparison's looks on the head's first processes
(the sampler's own schedule and levels, ``sequential.make_sampler``; heads of 16 processes only, no time
budget) once per floor, and scores the look it stopped at and the processes it took. The measurement-side
mechanisms (drawn layouts, layout groups) need new runs: benchmarks/gate_ablation.py.

Two sources of runs, both real worker processes:

- ``--trials DIR``: what ``gate_accuracy.py --modes stored --baseline-runs K --keep-runs DIR`` kept
  (``FAMILY/tNN-base*``, ``FAMILY/tNN-<extra>-...``): each gated run against its trial's pooled baseline; the
  change is real (the knob's extra work);
- ``--repeats DIR``: K runs of the same code (``interval_coverage.py --dir``): every ordered pair of runs is an
  unpaired A/A comparison of each case, and +5% / +10% are the head's samples scaled by 1.05 / 1.10 (a uniform
  change on real noise; a change only some processes pay is not in it).

Each comparison is ``compare_runs`` at the level of the sequential design's look at 3 processes (as
rejudge_pooled.py), the step-time verdict only; the run-to-run term is the gate's default (``--run-to-run``).
It is not the gate: the runs took the processes their own sampling let them take, and nothing is re-measured.

    .venv/bin/python benchmarks/rejudge_mechanisms.py --repeats reports/coverage-runs --trials /tmp/acc-runs
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections import Counter
from itertools import permutations
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from rejudge_pooled import trials  # noqa: E402

from perfgate.judging import baselines, sequential  # noqa: E402
from perfgate.judging.compare import compare_runs  # noqa: E402
from perfgate.judging.gate_settings import GateSettings  # noqa: E402
from perfgate.model.results import CaseResult, RunResult, load_results  # noqa: E402

# name -> the [tool.perfgate.gate] switches
CONFIGS: dict[str, dict[str, bool]] = {
    "defaults": {},  # both off since 2026-11-29
    "set-aside on": {"set_aside_slowed": True},
    "modes on": {"compare_modes": True},
    "both on": {"set_aside_slowed": True, "compare_modes": True},
}
CHANGES = (0.0, 0.05, 0.10)


def scaled(run: RunResult, factor: float) -> RunResult:
    """``run`` with every process's samples ``factor`` times longer: a uniform change on the run's own noise."""
    if factor == 1.0:
        return run
    cases = [dataclasses.replace(c, processes=[dataclasses.replace(p, samples_ns=[s * factor for s in p.samples_ns])
                                               for p in c.processes]) for c in run.cases]
    return dataclasses.replace(run, cases=cases)


def verdicts(head: RunResult, base: RunResult, gate: GateSettings) -> dict[str, tuple[str, float | None]]:
    """{case key: (step-time verdict, ratio)} of ``head`` against ``base`` under ``gate``."""
    cmp = compare_runs(head, base, gate, look_confidence=sequential.look_confidence(gate, 3))
    return {v.case_key: (v.kind, v.ratio) for v in cmp.verdicts if v.metric == "step_time"}


def judge_repeats(runs: list[RunResult], gates: dict[str, GateSettings]) -> list[dict[str, Any]]:
    """One row per ordered pair of runs, case and change: every config's verdict."""
    rows = []
    for i, j in permutations(range(len(runs)), 2):
        for change in CHANGES:
            head = scaled(runs[i], 1 + change)
            got = {name: verdicts(head, runs[j], gate) for name, gate in gates.items()}
            for key in got["defaults"]:
                rows.append({"source": "repeats", "family": key.split("/")[0], "case": key, "pair": [i, j],
                             "change": change, **{name: list(got[name][key]) for name in gates}})
    return rows


def replayed(head: CaseResult, base: CaseResult, gate: GateSettings) -> tuple[str, int]:
    """(the step-time verdict the unpaired looks stop at, the processes taken) when ``head``'s processes
    arrive one look at a time (its first 3, then the schedule's counts) against the whole ``base``."""
    rule = sequential.ComparisonRule(gate, gate.threshold, "threshold", paired=False, base=base,
                                     run_to_run=gate.run_to_run)
    sampler = sequential.make_sampler(gate, 3, rule)
    done = sampler.first
    while True:
        nxt = sampler.next_target(done, 0.0, dataclasses.replace(head, processes=head.processes[:done]))
        if nxt is None:
            return sampler.looks[-1]["result"].split(" ")[0], done
        done = nxt


def judge_floors(runs: list[RunResult], floors: list[int], gate: GateSettings) -> list[dict[str, Any]]:
    """One row per ordered pair of runs, case of 16 processes in both, and change: each floor's stop."""
    rows = []
    for i, j in permutations(range(len(runs)), 2):
        for change in CHANGES:
            head_run = scaled(runs[i], 1 + change)
            for head in head_run.cases:
                base = runs[j].case(head.key)
                if base is None or len(head.processes) < 16 or len(base.processes) < 2:
                    continue
                row: dict[str, Any] = {"source": "floors", "family": head.key.split("/")[0], "case": head.key,
                                       "pair": [i, j], "change": change}
                for floor in floors:
                    kind, taken = replayed(head, base, dataclasses.replace(gate, unpaired_min_processes=floor))
                    row[f"floor {floor}"] = [kind, None, taken]
                rows.append(row)
    return rows


def judge_trials(root: Path, gates: dict[str, GateSettings]) -> list[dict[str, Any]]:
    """One row per gated run of gate_accuracy.py's kept trials: every config's verdict against the pooled base."""
    rows = []
    for family, trial, bases, gated in trials(root):
        base = baselines.pooled([load_results(b / "results.json") for b in bases], [b.name for b in bases])
        for g in gated:
            head = load_results(g / "results.json")
            got = {name: verdicts(head, base, gate) for name, gate in gates.items()}
            for key in got["defaults"]:
                rows.append({"source": "trials", "family": family, "case": key, "trial": trial,
                             "change": float(g.name.split("-")[1]), **{name: list(got[name][key]) for name in gates}})
    return rows


def score(rows: list[dict[str, Any]], config: str) -> dict[str, Any]:
    """A/A alarms and `unchanged`, +5% and +10% caught, wrong directions, over ``rows`` for one config."""
    out: dict[str, Any] = {}
    for change in CHANGES:
        kinds = Counter(r[config][0] for r in rows if r["change"] == change)
        n = sum(kinds.values())
        if change == 0.0:
            out["a_a"] = {"n": n, "alarms": kinds["regression"] + kinds["win"], "unchanged": kinds["unchanged"]}
        else:
            out[f"+{change * 100:.0f}%"] = {"n": n, "caught": kinds["regression"], "wrong": kinds["win"]}
    return out


def table(rows: list[dict[str, Any]], configs: list[str] | None = None) -> str:
    """The ablation as a markdown table: one line per source, family and config."""
    lines = ["| source | family | config | A/A alarms | A/A unchanged | +5% caught | +10% caught | wrong direction |",
             "|---|---|---|---|---|---|---|---|"]
    groups = sorted({(r["source"], r["family"]) for r in rows})
    for source, family in [*groups, *sorted({(r["source"], "all") for r in rows})]:
        sel = [r for r in rows if r["source"] == source and family in (r["family"], "all")]
        for config in configs or list(CONFIGS):
            s = score(sel, config)
            aa, p5, p10 = s["a_a"], s["+5%"], s["+10%"]
            lines.append(f"| {source} | {family} | {config} | {aa['alarms']}/{aa['n']} | {aa['unchanged']}/{aa['n']} "
                         f"| {p5['caught']}/{p5['n']} | {p10['caught']}/{p10['n']} | {p5['wrong'] + p10['wrong']} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=Path, action="append", default=[],
                    help="a folder of K runs of the same code (each a folder with results.json); repeatable")
    ap.add_argument("--trials", type=Path, action="append", default=[],
                    help="a gate_accuracy.py --keep-runs folder; repeatable")
    ap.add_argument("--run-to-run", type=float, default=None, help="the unpaired term (default: the gate's)")
    ap.add_argument("--floors", default=None, help="with --repeats: replay the looks once per unpaired floor (8,1)")
    ap.add_argument("--resamples", type=int, default=1000, help="bootstrap resamples of each replayed look")
    ap.add_argument("--out", type=Path, default=None, help="the rows as JSON")
    args = ap.parse_args(argv)
    if not args.repeats and not args.trials:
        ap.error("give --repeats and/or --trials")
    base_gate = GateSettings() if args.run_to_run is None else GateSettings(run_to_run=args.run_to_run)
    repeats = []
    for folder in args.repeats:
        runs = [load_results(p) for p in sorted(folder.glob("*/results.json"))]
        if len(runs) < 2:
            ap.error(f"--repeats {folder}: needs at least 2 runs (folders with a results.json), found {len(runs)}")
        repeats.append(runs)
    if args.floors is not None:
        floors = [int(x) for x in args.floors.split(",")]
        replay_gate = dataclasses.replace(base_gate, bootstrap_resamples=args.resamples)
        rows = [r for runs in repeats for r in judge_floors(runs, floors, replay_gate)]
        names = [f"floor {f}" for f in floors]
        print(f"replayed looks, {len(rows)} comparisons; processes taken (mean): " + ", ".join(
            f"{n} {sum(r[n][2] for r in rows) / max(len(rows), 1):.1f}" for n in names))
        print(table(rows, names))
        if args.out:
            args.out.write_text(json.dumps(rows, indent=1))
        return 0
    gates = {name: dataclasses.replace(base_gate, **switches) for name, switches in CONFIGS.items()}
    rows: list[dict[str, Any]] = [r for runs in repeats for r in judge_repeats(runs, gates)]
    for folder in args.trials:
        rows += judge_trials(folder, gates)
    print(f"run-to-run term {base_gate.run_to_run:g}; {len(rows)} judged comparisons")
    print(table(rows))
    if args.out:
        args.out.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
