"""A step-time verdict's rule said from its facts (perfgate.model.rule_text): the same words comparison.json
always held, the same words again from a verdict read back, and every fact in them. No torch, no workers."""

from __future__ import annotations

import json
import re
from dataclasses import replace

import pytest
from fixtures.golden import assert_golden
from fixtures.rule_scenarios import scenarios

from perfgate.gating.comparison_file import comparison_from_json
from perfgate.model import rule_text
from perfgate.model.comparison import Comparison, TimeFacts, Verdict
from perfgate.util.validation import SchemaError


@pytest.fixture(scope="module")
def judged() -> dict[str, Verdict]:
    return scenarios()


def test_the_rules_are_the_words_comparison_json_always_held(judged):
    """tests/data/golden/rule_texts.json was written by the perfgate that built each rule as prose, piece
    by piece: judged from facts, every scenario's rule (and kind) is the same text, byte for byte."""
    text = json.dumps({name: {"kind": v.kind, "rule": v.rule} for name, v in judged.items()}, indent=1,
                      sort_keys=True) + "\n"
    assert_golden("rule_texts.json", text)


def test_the_scenarios_cover_every_shape_of_the_rule(judged):
    facts = [v.facts for v in judged.values() if v.facts is not None]
    assert {f.decided for f in facts} >= {"past-min-effect", "within-margin", "past-margin"}
    assert {f.settled_by for f in facts} == {"measurement", "remeasure", "lockstep"}
    assert {f.remeasure for f in facts} == {None, "confirmed", "contradicted", "not-repeated", "no-time"}
    assert any(f.one_process for f in facts) and any(f.host_busy for f in facts) and any(f.throttled for f in facts)
    assert any(f.other_parameters for f in facts) and any(f.look for f in facts) and any(f.notes for f in facts)
    assert any(max(f.modes) > 1 for f in facts)


def test_a_verdict_read_back_from_comparison_json_says_the_rule_it_stores(judged):
    cmp = Comparison(verdicts=list(judged.values()))
    back = comparison_from_json(json.loads(json.dumps(cmp.to_json())), "comparison.json")
    assert back.verdicts == cmp.verdicts
    worded = [v for v in back.verdicts if v.facts is not None]
    assert len(worded) > 20
    for v in worded:
        assert rule_text.time_rule(v) == v.rule, v.case_key


def test_an_older_comparison_json_keeps_its_stored_rule():
    """Facts an older perfgate wrote (no ``decided``) read; the rule is the one stored, never re-said."""
    data = {"case_key": "w/smoke/eager/cpu", "metric": "step_time", "kind": "regression", "ratio": 1.2,
            "rule": "as an older perfgate said it",
            "facts": {"paired": False, "processes": [4, 4], "confidence": 0.95, "run_to_run": 0.02}}
    v = Verdict.from_json(data)
    assert v.rule == "as an older perfgate said it" and v.facts is not None and v.facts.processes == (4, 4)
    assert rule_text.worded(replace(v, facts=None)) == replace(v, facts=None)
    with pytest.raises(ValueError, match="no facts to say its rule from"):
        rule_text.time_rule(v)
    assert rule_text.noted(v, "acknowledged").rule == "as an older perfgate said it; acknowledged"


@pytest.mark.parametrize("field, value, said", [
    ("processes", [4], "must be a [base, head] pair of integers >= 0"),
    ("processes", [4, -1], "must be a [base, head] pair of integers >= 0"),
    ("decided", "gut feeling", "must be one of no-estimate, past-min-effect"),
    ("look", 0, "must be an integer >= 1"),
    ("notes", "one note", "must be an array of strings"),
    ("one_process", 1, "must be true or false"),
])
def test_malformed_facts_are_one_line_naming_the_field(field, value, said):
    data = {"case_key": "k", "metric": "step_time", "kind": "unchanged",
            "facts": {"paired": False, "processes": [4, 4], "confidence": 0.95, "run_to_run": 0.02, field: value}}
    with pytest.raises(SchemaError, match=re.escape(f"c.json: verdicts[0].facts.{field} {said}")):
        Verdict.from_json(data, "c.json", "verdicts[0]")


BASE = Verdict("w/smoke/eager/cpu", "step_time", "regression", ratio=1.2, ratio_low=1.1, ratio_high=1.3,
               threshold=0.05, facts=TimeFacts(
                   paired=False, processes=(4, 5), confidence=0.95, run_to_run=0.02, run_to_run_source="configured",
                   decided="past-min-effect", significant=True, min_effect=0.05, margin=0.05,
                   test="Mann-Whitney U on per-process p10s", threshold_source="global threshold"))
BEFORE = dict(before_kind="regression", before_ratio=1.25, before_ratio_low=1.15, before_ratio_high=1.35)


@pytest.mark.parametrize("facts, said", [
    ({}, "significantly slower (CI [1.100, 1.300] excludes 1), estimate past the minimum effect 5%"),
    ({"decided": "not-significant"}, "slower by its estimate (past the minimum effect 5%), but not significant"),
    ({"decided": "within-margin"}, "a real but small change: estimate within the minimum effect 5%"),
    ({"decided": "within-margin", "significant": False}, "no significant change: estimate within"),
    ({"decided": "past-margin", "margin": 0.08}, "reaches past the equivalence margin +/-8%"),
    ({"decided": "no-estimate"}, "no finite estimate (1.2, CI [1.100, 1.300])"),
    ({"min_effect": 0.025}, "past the minimum effect 2.5%"),
    ({"test": "Wilcoxon signed-rank"}, "; Wilcoxon signed-rank, 4 vs 5 processes"),
    ({"throttled": "1 base process(es) set aside as throttled (hw_slowdown)"},
     "p10s (1 base process(es) set aside as throttled (hw_slowdown)), 4 vs 5"),
    ({"processes": (6, 7)}, ", 6 vs 7 processes (per-process step times)"),
    ({"paired": True}, "processes (paired base/head processes)"),
    ({"threshold_source": "per-toggle threshold"}, "; per-toggle threshold 5%"),
    ({"decided": "past-margin", "modes": (2, 1)}, "the processes fall into 2 performance modes: estimate within"),
    ({"one_process": True, "processes": (1, 5)}, "; but one process in the baseline hides the between-process noise"),
    ({"one_process": True, "processes": (1, 1)}, "one process in the baseline and this run hides"),
    ({"run_to_run": 0.035}, "; run-to-run 3.5% (configured)"),
    ({"run_to_run_source": "pooled runs"}, "; run-to-run 2% (pooled runs)"),
    ({"look": 6, "confidence": 0.9876}, "; judged at 98.76% confidence (the sequential look at 6 processes)"),
    ({"host_busy": "this run: other processes used 3.0 CPUs"},
     "host busy: this run: other processes used 3.0 CPUs; measured alone, a regression (significantly"),
    ({"other_parameters": "T=100 -> T=50"}, "; the baseline measured this case with other parameters (T=100 -> T=50)"),
    ({"settled_by": "remeasure", "remeasure": "confirmed", **BEFORE},
     "; confirmed by a re-measure (first measurement 1.250x [1.150, 1.350])"),
    ({"settled_by": "remeasure", "remeasure": "not-repeated", **BEFORE},
     "; the first measurement 1.250x [1.150, 1.350] regressed, the re-measure did not"),
    ({"settled_by": "remeasure", "remeasure": "contradicted", **BEFORE, "before_kind": "win"},
     "the first measurement 1.250x [1.150, 1.350] was faster, the re-measure regressed (significantly"),
    ({"remeasure": "no-time", "remeasure_gave": "missing: no step-time samples on one side"},
     "the re-measure gave no step time to confirm it (missing: no step-time samples on one side), so the first "
     "measurement 1.200x [1.100, 1.300] stands"),
    ({"settled_by": "lockstep", "commit": "0123456789ab", **BEFORE},
     "; settled in lockstep against the baseline's commit 0123456789ab (the stored comparison: regression at "
     "1.250x [1.150, 1.350])"),
    ({"settled_by": "full-sampler", **BEFORE, "before_kind": "inconclusive"},
     "; measured with the full sampler, lockstep could not settle it (the screen: inconclusive at 1.250x)"),
    ({"notes": ("acknowledged by acknowledge[0] (until 2026-12-31)", "two")},
     "; acknowledged by acknowledge[0] (until 2026-12-31); two"),
])
def test_each_fact_is_in_the_words(facts, said):
    v = replace(BASE, facts=replace(BASE.facts, **facts))
    text = rule_text.time_rule(v)
    assert said in text, text
    if facts:
        assert said not in rule_text.time_rule(BASE)


def test_a_win_said_with_other_parameters_and_one_that_no_re_measure_repeated():
    win = replace(BASE, ratio=0.8, ratio_low=0.7, ratio_high=0.9)
    text = rule_text.time_rule(replace(win, facts=replace(BASE.facts, other_parameters="T=100 -> T=50")))
    assert text.endswith("; but the baseline measured this case with other parameters (T=100 -> T=50): a win "
                         "cannot be told from a smaller problem")
    gone = rule_text.time_rule(replace(win, facts=replace(BASE.facts, remeasure="no-time", remeasure_gave="x: y")))
    assert gone == "the first measurement 0.800x [0.700, 0.900] was faster; the re-measure gave no step time to " \
                   "confirm it (x: y)"
