"""`perfgate run --shard I/N`: every case in exactly one shard, balanced by expected cost, deterministic."""

from __future__ import annotations

import random

import pytest
from conftest import run_cli
from fixtures.shards import suite_cases

from perfgate.model.config import ConfigError
from perfgate.model.results import load_results
from perfgate.running.plan import (
    Shard,
    costs_from_results,
    estimated_cost_s,
    expected_costs,
    parse_shard,
    partition_cases,
    shard_cases,
)


@pytest.mark.parametrize("count", range(1, 9))
def test_every_case_in_exactly_one_shard(count):
    cases = suite_cases()
    parts = partition_cases(cases, count)
    assert len(parts) == count
    keys = [c.key for part in parts for c in part]
    assert sorted(keys) == sorted(c.key for c in cases)
    assert len(keys) == len(set(keys))
    # shard_cases is the same split, one part at a time
    assert [shard_cases(cases, Shard(i, count)) for i in range(1, count + 1)] == parts


@pytest.mark.parametrize("count", range(1, 9))
def test_shards_balance_timed_costs(count):
    rng = random.Random(count)
    cases = suite_cases()
    costs = {c.key: rng.uniform(1.0, 60.0) for c in cases}
    parts = partition_cases(cases, count, costs)
    loads = [sum(costs[c.key] for c in part) for part in parts]
    # Greedy longest-first: no shard exceeds the ideal share by more than the longest single case.
    assert max(loads) <= sum(costs.values()) / count + max(costs.values()) + 1e-9
    # and it beats cutting the list into equal-count slices
    naive = [cases[i::count] for i in range(count)]
    assert max(loads) <= max(sum(costs[c.key] for c in part) for part in naive) + 1e-9


def test_one_slow_case_gets_a_shard_of_its_own():
    cases = suite_cases(workloads=2, toggles=4)
    costs = {c.key: 1.0 for c in cases}
    slow = cases[5].key
    costs[slow] = 100.0
    parts = partition_cases(cases, 2, costs)
    assert [c.key for c in parts[0]] == [slow]
    assert len(parts[1]) == len(cases) - 1


def test_partition_is_deterministic_and_independent_of_input_order():
    cases = suite_cases()
    costs = expected_costs(cases)
    shuffled = cases[:]
    random.Random(7).shuffle(shuffled)
    a = partition_cases(cases, 3, costs)
    b = partition_cases(shuffled, 3, costs)
    assert [{c.key for c in p} for p in a] == [{c.key for c in p} for p in b]
    # within a shard the plan's order is kept
    order = {c.key: i for i, c in enumerate(cases)}
    for part in a:
        assert [order[c.key] for c in part] == sorted(order[c.key] for c in part)


def test_more_shards_than_cases_leaves_empty_shards():
    cases = suite_cases(workloads=1, toggles=2)
    parts = partition_cases(cases, 5)
    assert sum(len(p) for p in parts) == 2 and sum(1 for p in parts if not p) == 3


def test_estimate_weighs_compile_above_eager():
    eager, compiled, autotune = suite_cases(workloads=1, toggles=3)
    assert estimated_cost_s(eager) < estimated_cost_s(compiled) < estimated_cost_s(autotune)


def test_untimed_cases_are_scaled_to_the_timed_ones():
    cases = suite_cases(workloads=1, toggles=2)  # eager, compile
    timed = {cases[0].key: estimated_cost_s(cases[0]) * 0.1}  # this machine runs 10x faster than the estimate
    costs = expected_costs(cases, timed)
    assert costs[cases[0].key] == timed[cases[0].key]
    assert costs[cases[1].key] == pytest.approx(estimated_cost_s(cases[1]) * 0.1)


def test_costs_from_results_and_baseline_shapes():
    cases = suite_cases(workloads=1, toggles=2)
    results = {"cases": [{"spec": cases[0].to_json(), "duration_s": 3.5},
                         {"key": cases[1].key, "duration_s": 0}]}
    assert costs_from_results(results) == {cases[0].key: 3.5}
    keyed = {"cases": {cases[1].key: {"duration_s": 2.0}}}
    assert costs_from_results(keyed) == {cases[1].key: 2.0}
    for untrusted in (None, 3, "cases", True):  # a file's "cases" that holds none: no costs, no traceback
        assert costs_from_results({"cases": untrusted}) == {}


@pytest.mark.parametrize("text", ["1/4", " 4/4", "1/1"])
def test_parse_shard_accepts(text):
    shard = parse_shard(text)
    assert 1 <= shard.index <= shard.count


@pytest.mark.parametrize("text", ["0/4", "5/4", "1/0", "2", "a/b", "1/2/3", "-1/2", "",
                                  # str.isdigit() took these: int() then raised (exit 3, 'unexpected ValueError')
                                  "1/\u00b2", "\u2460/2", "1/" + "9" * 5000,
                                  # a count no results.json may hold (merge walks 1..N): the run's own file unreadable
                                  "1/10001", "1/99999999999"])
def test_parse_shard_rejects_with_a_hint(text):
    with pytest.raises(ConfigError, match="--shard"):
        parse_shard(text)


@pytest.mark.parametrize("text", ["0/3", "x", "1/\u00b2", "1/20000"])
@pytest.mark.slow
def test_cli_bad_shard_is_one_line_exit_2(text):
    proc = run_cli("run", "--shard", text, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().count("\n") == 0
    assert "--shard" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.slow
def test_cli_shard_costs_unreadable_is_exit_2(tmp_path):
    bad = tmp_path / "costs.json"
    bad.write_text("{not json")
    proc = run_cli("run", "-w", "operator_rollout", "-t", "eager", "--shard", "1/2", "--shard-costs", str(bad),
                   "--out", str(tmp_path / "run"), timeout=300)
    assert proc.returncode == 2, proc.stderr
    assert "--shard-costs" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.slow
def test_cli_a_shard_without_cases_writes_an_empty_run(tmp_path):
    out = tmp_path / "run"
    proc = run_cli("run", "-w", "operator_rollout", "-t", "eager", "--shard", "2/2", "--out", str(out), timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "nothing to run in shard 2/2" in proc.stdout
    run = load_results(out)
    assert run.cases == [] and run.settings["shard"]["plan"] == ["operator_rollout/smoke/eager/cpu"]
