"""benchmarks/rejudge_mechanisms.py's judging and scoring, on synthetic runs (no torch, no workers)."""

from __future__ import annotations

import sys

from conftest import REPO
from fixtures.synthetic import synthetic_run

sys.path.insert(0, str(REPO / "benchmarks"))
import rejudge_mechanisms as rm  # noqa: E402


def test_scaled_makes_every_sample_longer_and_leaves_the_run_alone():
    run = synthetic_run(["rollout"], toggles=("eager",))
    longer = rm.scaled(run, 1.10)
    before, after = run.cases[0].processes[0].samples_ns, longer.cases[0].processes[0].samples_ns
    assert after == [s * 1.10 for s in before] and run.cases[0].processes[0].samples_ns == before
    assert rm.scaled(run, 1.0) is run


def test_every_ordered_pair_change_and_config_is_judged():
    runs = [synthetic_run(["rollout"], toggles=("eager", "compile"), seed=s) for s in range(2)]
    gates = {name: rm.dataclasses.replace(rm.GateSettings(), **sw) for name, sw in rm.CONFIGS.items()}
    rows = rm.judge_repeats(runs, gates)
    # 2 runs: 2 ordered pairs, 3 changes, 2 cases
    assert len(rows) == 2 * 3 * 2
    assert {tuple(r["pair"]) for r in rows} == {(0, 1), (1, 0)}
    kinds = {"regression", "win", "unchanged", "inconclusive"}
    assert all(r[name][0] in kinds for r in rows for name in rm.CONFIGS)
    # a 10% longer head is never judged faster than its base
    assert not [r for r in rows if r["change"] == 0.10 and r["defaults"][0] == "win"]


def test_score_and_table_count_alarms_catches_and_wrong_directions():
    def row(change, kind, family="a"):
        return {"source": "repeats", "family": family, "change": change, **{c: [kind, 1.0] for c in rm.CONFIGS}}
    rows = [row(0.0, "unchanged"), row(0.0, "win"), row(0.0, "inconclusive"), row(0.05, "regression"),
            row(0.05, "win"), row(0.10, "regression"), row(0.10, "regression", family="b")]
    s = rm.score(rows, "defaults")
    assert s["a_a"] == {"n": 3, "alarms": 1, "unchanged": 1}
    assert s["+5%"] == {"n": 2, "caught": 1, "wrong": 1} and s["+10%"] == {"n": 2, "caught": 2, "wrong": 0}
    text = rm.table(rows)
    assert "| repeats | all | defaults | 1/3 | 1/3 | 1/2 | 2/2 | 1 |" in text
    assert "| repeats | b | both on | 0/0 | 0/0 | 0/0 | 1/1 | 0 |" in text


def test_a_replayed_floor_stops_no_earlier_than_its_processes():
    """A head 30% slower against a base of 16 processes: with no floor the looks stop at the first (3
    processes) as a regression; with the default floor of 8 they go on to at least 8, and say the same."""
    import random

    from perfgate.model.results import CaseResult, CaseSpec, ProcessSamples

    rnd = random.Random(5)

    def side(step_s: float) -> CaseResult:
        procs = [ProcessSamples([int(step_s * (1 + rnd.gauss(0, 0.01)) * 1e9) for _ in range(10)], process_index=p)
                 for p in range(16)]
        return CaseResult(CaseSpec("w", "smoke", ("eager",), "cpu"), "ok", procs)

    base, head = side(1e-3), side(1.3e-3)
    gate = rm.GateSettings(bootstrap_resamples=200)
    assert rm.replayed(head, base, rm.dataclasses.replace(gate, unpaired_min_processes=1)) == ("regression", 3)
    kind, taken = rm.replayed(head, base, gate)
    assert kind == "regression" and 8 <= taken <= 16
