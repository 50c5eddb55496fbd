"""Expectations evaluated: each rule (perfgate.model.rules) on each case of a run it matches. No torch.

Every rule is evaluated on each case it matches, with the measured value and, where the metric has one,
its interval (the step time's CI, the speedup's CI, the peak memory ratio's interval over worker processes,
the range of the worker processes' first calls):
``met`` when the whole interval satisfies the bound, ``missed`` when none of it does, ``unknown`` when the
interval straddles the bound or the case has no such value (it did not run, or the metric was not
measured). A missed ``fail`` rule fails ``--gate``. ``judge`` stores the outcomes on the run as plain data,
what results.json carries; the writers of results.json and of baselines call it. docs/expectations.md
has it all.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from perfgate.judging import roofline
from perfgate.model.results import STATUS_FAILED, STATUS_OK, CaseResult, RunResult
from perfgate.model.rules import ALIASES, STRING_METRICS, Rule, parse_rules
from perfgate.util.stats import NO_INTERVAL, ratio_of

OUTCOMES = ("met", "missed", "unknown")


# ---------------------------------------------------------------- evaluation


@dataclass(frozen=True)
class Outcome:
    """One rule on one case: met, missed or unknown, with the value and interval that decided it."""

    rule: Rule
    case_key: str
    outcome: str
    value: float | str | None = None
    low: float | None = None
    high: float | None = None
    reason: str = ""

    @property
    def fails_gate(self) -> bool:
        return self.outcome == "missed" and self.rule.severity == "fail"

    @property
    def value_text(self) -> str:
        if self.value is None:
            return "-"
        if isinstance(self.value, str):
            return self.value
        if self.low is not None and self.high is not None and (self.low, self.high) != (self.value, self.value):
            return f"{self.value:.4g} [{self.low:.4g}, {self.high:.4g}]"
        return f"{self.value:.4g}"

    def to_json(self, rule_index: int) -> dict[str, Any]:
        return {"rule": rule_index, "text": self.rule.text, "severity": self.rule.severity, "case_key": self.case_key,
                "outcome": self.outcome, "value": self.value, "low": self.low, "high": self.high,
                "reason": self.reason}


@dataclass
class Evaluation:
    """Every rule of a run evaluated on the cases it matched; rules that matched no case listed apart."""

    rules: list[Rule]
    outcomes: list[Outcome] = field(default_factory=list)
    unmatched: list[Rule] = field(default_factory=list)

    @property
    def gate_failed(self) -> bool:
        return any(o.fails_gate for o in self.outcomes)

    def counts(self) -> dict[str, int]:
        out = dict.fromkeys(OUTCOMES, 0)
        for o in self.outcomes:
            out[o.outcome] += 1
        return out

    @property
    def failing(self) -> list[Outcome]:
        return [o for o in self.outcomes if o.fails_gate]

    @property
    def warnings(self) -> list[Outcome]:
        return [o for o in self.outcomes if o.outcome == "missed" and not o.fails_gate]

    def for_case(self, key: str) -> list[Outcome]:
        return [o for o in self.outcomes if o.case_key == key]

    @property
    def headline(self) -> str:
        c = self.counts()
        text = f"expectations: {c['met']} met, {c['missed']} missed, {c['unknown']} unknown"
        if self.failing:
            text += f" ({len(self.failing)} failing the gate)"
        return text

    def to_json(self) -> dict[str, Any]:
        index = {id(r): i for i, r in enumerate(self.rules)}
        return {"rules": [r.to_json() for r in self.rules],
                "outcomes": [o.to_json(index[id(o.rule)]) for o in self.outcomes],
                "unmatched": [index[id(r)] for r in self.unmatched],
                "counts": self.counts(), "gate_failed": self.gate_failed}


def _judge(op: str, bound: float, value: float, low: float, high: float) -> str:
    """met / missed / unknown for ``value op bound`` where the truth lies somewhere in [low, high]."""
    def holds(x: float) -> bool:
        return {">=": x >= bound, "<=": x <= bound, ">": x > bound, "<": x < bound,
                "==": x == bound, "!=": x != bound}[op]

    if op == "==":
        return "met" if low == high == bound else ("missed" if not low <= bound <= high else "unknown")
    if op == "!=":
        return "missed" if low == high == bound else ("met" if not low <= bound <= high else "unknown")
    lo_ok, hi_ok = holds(low), holds(high)
    if lo_ok and hi_ok:
        return "met"
    if not lo_ok and not hi_ok:
        return "missed"
    return "unknown"


def _measure(rule: Rule, case: CaseResult, run: RunResult) -> tuple[float | None, float | None, float | None, str]:
    """(value, low, high, why not) of a numeric metric of an ok case."""
    metric = rule.metric
    if metric in ("speedup_vs_eager", "speedup_vs"):
        toggle = "eager" if metric == "speedup_vs_eager" else rule.toggle
        spec = case.spec
        other = run.case(f"{spec.workload}/{spec.size}/{toggle}/{spec.device}")
        if other is None:
            return None, None, None, f"no {toggle} case of {spec.workload}/{spec.size} on {spec.device} in this run"
        if other.key == case.key:
            return 1.0, 1.0, 1.0, ""
        a, b = run.step_time(other), run.step_time(case)
        ratio = ratio_of(a, b, run.run_to_run(case))
        if ratio is None:
            return None, None, None, f"{toggle if a is None else 'this case'} has no step time"
        return ratio.value, ratio.low, ratio.high, "" if ratio.low is not None else f"the speedup's {NO_INTERVAL}"
    if metric == "memory_vs_eager":
        spec = case.spec
        if run.eager_for(case) is None:
            return None, None, None, f"no eager case of {spec.workload}/{spec.size} on {spec.device} in this run"
        compared = run.memory_vs_eager(case)
        if compared is None:
            return None, None, None, "no peak memory measured here or in eager (or eager did not run)"
        name, mem = compared
        return mem.value, mem.low, mem.high, "" if mem.low is not None else f"the {name} ratio's interval: {NO_INTERVAL}"
    if metric == "step_time_s":
        st = run.step_time(case)
        if st is None:
            return None, None, None, "no step-time samples"
        return st.value, st.ci_low, st.ci_high, "" if st.ci_low is not None else f"the step time's {NO_INTERVAL}"
    if metric == "first_call_s":
        firsts = [p.first_call_s for p in case.processes if p.first_call_s is not None]
        return (max(firsts), min(firsts), max(firsts), "") if firsts else (None, None, None, "no first call timed")
    name = ALIASES.get(metric, metric)
    v = case.metrics.get(name)
    if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v):
        return None, None, None, f"{name} was not measured for this case"
    return float(v), float(v), float(v), ""


def _string_value(rule: Rule, case: CaseResult, run: RunResult) -> tuple[str | None, bool, str]:
    """(value shown, does it equal the rule's bound, why unknown) for status / accuracy / bound."""
    if rule.metric == "status":
        # a failure without a class is an "error" (as shown): `status == error` matches it
        failure = (case.failure_class or "error") if case.status == STATUS_FAILED else None
        shown = case.status if failure is None else f"failed ({failure})"
        return shown, rule.bound in (case.status, failure), ""
    if case.status != STATUS_OK:
        return None, False, f"the case did not run ({case.status})"
    if rule.metric == "accuracy":
        v = case.accuracy.get("verdict")
        return (v, v == rule.bound, "") if v else (None, False, "accuracy was not checked for this case")
    b = roofline.case_bound(case, run.ceilings)
    if b is not None and b.bound == roofline.UNCLASSIFIED:  # not a class to match or miss: unknown
        return None, False, f"no bound class: {b.reason}"
    return (b.bound, b.bound == rule.bound, "") if b else (None, False, "no bound class (no profile)")


def evaluate_case(rule: Rule, case: CaseResult, run: RunResult) -> Outcome:
    if case.skipped_as_unchanged:  # `run --changed-since` left it out: no claim about it is met or missed
        return Outcome(rule, case.key, "unknown", reason=(case.message or "skipped: unchanged")[:200])
    if rule.metric in STRING_METRICS:
        shown, equal, why = _string_value(rule, case, run)
        if shown is None:
            return Outcome(rule, case.key, "unknown", reason=why)
        met = equal if rule.op == "==" else not equal
        return Outcome(rule, case.key, "met" if met else "missed", shown,
                       reason=f"{rule.metric} is {shown}")
    if case.status != STATUS_OK:
        return Outcome(rule, case.key, "unknown", reason=f"the case did not run ({case.status}"
                       + (f", {case.failure_class})" if case.failure_class else ")"))
    value, low, high, why = _measure(rule, case, run)
    if value is None or low is None or high is None:
        return Outcome(rule, case.key, "unknown", reason=why)
    assert isinstance(rule.bound, float)
    outcome = _judge(rule.op, rule.bound, value, low, high)
    interval = f"[{low:.4g}, {high:.4g}]" if low != high else f"{value:.4g}"
    reason = {"met": f"{interval} {rule.op} {rule.bound:g}",
              "missed": f"{interval} fails {rule.op} {rule.bound:g}",
              "unknown": f"the interval {interval} straddles {rule.bound:g}"}[outcome]
    return Outcome(rule, case.key, outcome, value, low, high, reason)


def evaluate(run: RunResult, rules: list[Rule] | None = None) -> Evaluation:
    """Every rule (default: the run's own) on every case of ``run`` it matches."""
    rules = list(run_rules(run) if rules is None else rules)
    ev = Evaluation(rules)
    for rule in rules:
        matched = [c for c in run.cases if rule.matches(c.key)]
        if not matched:
            ev.unmatched.append(rule)
        ev.outcomes.extend(evaluate_case(rule, c, run) for c in matched)
    return ev


def judge(run: RunResult) -> RunResult:
    """``run`` with its rules evaluated on its cases and the outcomes stored on it as plain data
    (``RunResult.expectation_outcomes``: outcomes, unmatched rules, counts, gate_failed), its rules in their
    canonical form: what results.json and a baseline carry. The writers of both call it, so what a file
    says was met is what its cases show. A run with no rules carries no outcomes."""
    if not run.expectations:
        return replace(run, expectation_outcomes={})
    judged = evaluate(run).to_json()
    return replace(run, expectations=judged.pop("rules"), expectation_outcomes=judged)


def run_rules(run: RunResult) -> list[Rule]:
    """The rules stored with a run (results.json ``expectations.rules``)."""
    return [Rule.from_json(r) for r in run.expectations]


def rules_for_run(config_rules: list[Rule], workloads: dict[str, dict[str, Any]], names: Iterable[str]) -> list[Rule]:
    """The config's rules, then those of each workload in ``names`` (from the probe's describe())."""
    out = list(config_rules)
    for name in sorted(set(names)):
        info = workloads.get(name, {})
        out.extend(parse_rules(info.get("expectations") or None, source=f"workload {name} ({info.get('file', '?')})",
                               workload=name))
    return out


def rules_json(settings: Any, workloads: dict[str, dict[str, Any]], cases: Iterable[Any]) -> list[dict[str, Any]]:
    """What `perfgate run` stores in results.json: the config's rules and those of the run's workloads."""
    rules = rules_for_run(list(settings.expectations), workloads, {c.workload for c in cases})
    return [r.to_json() for r in rules]


def console_text(ev: Evaluation) -> str:
    """What `perfgate run` prints: the headline and every rule that was not met."""
    if not ev.rules:
        return ""
    lines = [ev.headline]
    for o in ev.outcomes:
        if o.outcome != "met":
            tag = {"missed": "MISSED" if o.rule.severity == "fail" else "missed (warn)", "unknown": "unknown"}[o.outcome]
            lines.append(f"  {tag:<13} {o.case_key}: {o.rule.text} ({o.reason})")
    return "\n".join(lines)
