"""The expectation rule language: the claims a team makes about its workloads, as rules. No torch.

A rule names a case pattern (``workload/size/toggles/device``, each part a glob), a metric, a comparison
and a bound, and whether a miss fails the gate (``fail``, the default) or only warns (``warn``):

    [tool.perfgate.expect]
    "operator_rollout/*/amp-fp16/cuda" = ["speedup_vs_eager >= 1.5", "accuracy == ok"]
    "detector_sim/*/compile/*" = [{rule = "kernel_concentration_80 <= 3", severity = "warn"}]

    [tool.perfgate.expect."simulator_construction/*/compile/*"]
    warm_setup_s = {max = 0.05}
    speedup_vs = {toggle = "eager", min = 1.0}
    status = "ok"

A workload file carries the same table as a class attribute ``expectations``; its rules apply to that
workload's cases only. This module parses and checks rules (the config, a workload file, the rules a
results.json stores); perfgate.judging.expect evaluates them on a run. docs/expectations.md has it all.
"""

from __future__ import annotations

import fnmatch
import math
import re
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any

from perfgate.util.vocabulary import FAILURE_CLASSES, METRIC_KINDS, STATUSES

SEVERITIES = ("fail", "warn")
NUMERIC_OPS = (">=", "<=", ">", "<", "==", "!=")
STRING_OPS = ("==", "!=")

# Metrics a rule may name besides every METRIC_KINDS metric: what each means, in the user's words.
SPECIAL_METRICS: dict[str, str] = {
    "speedup_vs_eager": "eager step time / this case's (ratio of medians, with its CI)",
    "speedup_vs": "speedup_vs(TOGGLE): that toggle's step time / this case's, same workload, size, device",
    "memory_vs_eager": "this case's peak memory / eager's in the same run (CUDA allocated on a GPU, process RSS "
                       "on CPU), with its interval over worker processes",
    "step_time_s": "median step time in seconds, with its CI",
    "first_call_s": "the first call (compile included), slowest worker process; interval over processes",
    "warm_setup_s": "setup per construction after the first compile (setup_per_construction_s)",
    "peak_cuda_bytes": "peak CUDA memory allocated (peak_cuda_allocated_bytes)",
    "kernel_concentration_80": "fewest kernels (ops on CPU) that cover 80% of the step's device time",
    "status": "ok | skipped | failed, or a failure class (oom, compile-error, timeout, ...)",
    "accuracy": "ok | drift: the output against the eager fp32 reference",
    "bound": "compute-bound | memory-bound | overhead-bound (the case's bound class)",
}
ALIASES = {"warm_setup_s": "setup_per_construction_s", "peak_cuda_bytes": "peak_cuda_allocated_bytes"}
STRING_METRICS = {
    "status": (*STATUSES, *FAILURE_CLASSES),
    "accuracy": ("ok", "drift"),
    "bound": ("compute-bound", "memory-bound", "overhead-bound"),
}
_TABLE_KEYS = ("min", "max", "toggle", "severity")
# ratios of two measurements: positive by construction, so a bound of 0 or less is a mistake (always met or
# always missed), refused at load
RATIO_METRICS = ("speedup_vs_eager", "speedup_vs", "memory_vs_eager")


def valid_metrics() -> list[str]:
    return [*SPECIAL_METRICS, *(m for m in METRIC_KINDS if m not in SPECIAL_METRICS)]


class ExpectError(ValueError):
    """A malformed rule: one line naming it and what would be valid (exit code 2)."""


@dataclass(frozen=True)
class Rule:
    """One expectation: ``metric op bound`` on the cases ``pattern`` matches."""

    pattern: str
    metric: str
    op: str
    bound: float | str
    toggle: str | None = None  # speedup_vs only: the toggle set compared with
    severity: str = "fail"
    source: str = "[tool.perfgate.expect]"
    workload: str | None = None  # rules from a workload file apply to that workload's cases only

    @property
    def text(self) -> str:
        metric = f"{self.metric}({self.toggle})" if self.toggle else self.metric
        bound = f"{self.bound:g}" if isinstance(self.bound, float) else self.bound
        return f"{metric} {self.op} {bound}"

    def matches(self, key: str) -> bool:
        parts = key.split("/")
        pats = self.pattern.split("/")
        if len(parts) != 4 or (self.workload is not None and parts[0] != self.workload):
            return False
        return all(fnmatch.fnmatchcase(p, q) for p, q in zip(parts, pats, strict=True))

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "text": self.text}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Rule:
        fields = {k: data[k] for k in ("pattern", "metric", "op", "bound", "toggle", "severity", "source", "workload")
                  if k in data}
        if isinstance(fields.get("bound"), int) and not isinstance(fields.get("bound"), bool):
            fields["bound"] = float(fields["bound"])
        for key in ("pattern", "metric", "op", "severity", "source", "toggle", "workload"):
            if not isinstance(fields.get(key, ""), str) and not (key in ("toggle", "workload") and fields[key] is None):
                raise ExpectError(f"stored rule: {key} must be a string, got {fields[key]!r}")
        rule = cls(**fields)
        _check(rule, f"{rule.source}: {rule.pattern!r}")
        return rule


# ---------------------------------------------------------------- parsing

_RULE_RE = re.compile(r"^\s*(?P<metric>[A-Za-z_][A-Za-z0-9_]*)\s*(?:\(\s*(?P<arg>[^()]*?)\s*\))?\s*"
                      r"(?P<op>>=|<=|==|!=|=|<|>)\s*(?P<value>.+?)\s*$")


def _number(text: Any) -> float | None:
    if isinstance(text, bool):
        return None
    if isinstance(text, (int, float)):
        return float(text) if math.isfinite(text) else None
    try:
        v = float(str(text))
    except ValueError:
        return None
    return v if math.isfinite(v) else None


def _check(rule: Rule, where: str) -> Rule:
    """Validate a rule's metric, operator and bound; ExpectError naming what would be valid."""
    metric = rule.metric
    if metric not in SPECIAL_METRICS and metric not in METRIC_KINDS:
        raise ExpectError(f"{where}: unknown metric {metric!r}; valid: {', '.join(valid_metrics())}")
    if rule.severity not in SEVERITIES:
        raise ExpectError(f"{where}: severity {rule.severity!r} is not one of {', '.join(SEVERITIES)}")
    pats = rule.pattern.split("/")
    if len(pats) != 4 or not all(pats):
        raise ExpectError(f"{where}: case pattern {rule.pattern!r} must be workload/size/toggles/device "
                          "(each a glob, e.g. operator_rollout/*/amp-fp16/cuda)")
    if metric == "speedup_vs":
        if not rule.toggle:
            raise ExpectError(f"{where}: speedup_vs needs the toggle set to compare with: speedup_vs(compile) >= 1, "
                              "or speedup_vs = {toggle = \"compile\", min = 1.0}")
    elif rule.toggle:
        raise ExpectError(f"{where}: only speedup_vs takes a toggle, not {metric}")
    if metric in STRING_METRICS:
        valid = STRING_METRICS[metric]
        if rule.op not in STRING_OPS:
            raise ExpectError(f"{where}: {metric} compares with == or !=, not {rule.op}")
        if rule.bound not in valid:
            raise ExpectError(f"{where}: {metric} value {rule.bound!r} is not one of {', '.join(valid)}")
    else:
        if rule.op not in NUMERIC_OPS:
            raise ExpectError(f"{where}: operator {rule.op!r} is not one of {', '.join(NUMERIC_OPS)}")
        if not isinstance(rule.bound, float):
            raise ExpectError(f"{where}: {metric} needs a number, got {rule.bound!r}")
        if metric in RATIO_METRICS and rule.bound <= 0:
            raise ExpectError(f"{where}: {metric} is a ratio, always above 0; give a bound above 0 "
                              f"(e.g. {metric} <= 0.7), got {rule.bound:g}")
    return rule


def parse_rule_text(text: str, pattern: str, *, severity: str = "fail", source: str = "[tool.perfgate.expect]",
                    workload: str | None = None) -> Rule:
    """``"speedup_vs_eager >= 1.5"``, ``"speedup_vs(compile) >= 1"``, ``"accuracy == ok"`` -> Rule."""
    where = f"{source}: {pattern!r}: rule {text!r}"
    m = _RULE_RE.match(text) if isinstance(text, str) else None
    if m is None:
        raise ExpectError(f"{where}: not a rule; write METRIC OP VALUE, e.g. 'speedup_vs_eager >= 1.5' "
                          f"(operators: {', '.join(NUMERIC_OPS)})")
    metric, arg, op, value = m["metric"], m["arg"], m["op"], m["value"].strip().strip("'\"")
    op = "==" if op == "=" else op
    number = _number(value)
    bound: float | str = value if metric in STRING_METRICS else (number if number is not None else value)
    return _check(Rule(pattern, metric, op, bound, arg or None, severity, source, workload), where)


def _from_table(metric: str, value: Any, pattern: str, severity: str, source: str,
                workload: str | None) -> list[Rule]:
    where = f"{source}: {pattern!r}: {metric}"
    if metric not in SPECIAL_METRICS and metric not in METRIC_KINDS:
        raise ExpectError(f"{where}: unknown metric {metric!r}; valid: {', '.join(valid_metrics())}")
    if isinstance(value, str):
        return [_check(Rule(pattern, metric, "==", value, None, severity, source, workload), where)]
    if not isinstance(value, dict):
        raise ExpectError(f"{where}: give a table {{min = X}} / {{max = X}} (numbers) or a string (status, "
                          f"accuracy, bound), got {value!r}")
    unknown = set(value) - set(_TABLE_KEYS)
    if unknown:
        raise ExpectError(f"{where}: unknown key(s) {', '.join(sorted(unknown))}; valid: {', '.join(_TABLE_KEYS)}")
    if "min" not in value and "max" not in value:
        raise ExpectError(f"{where}: needs min or max (or both)")
    sev = value.get("severity", severity)
    toggle = value.get("toggle")
    if toggle is not None and not isinstance(toggle, str):
        raise ExpectError(f"{where}: toggle must be a string such as \"compile\", got {toggle!r}")
    rules = []
    for key, op in (("min", ">="), ("max", "<=")):
        if key in value:
            bound = _number(value[key])
            if bound is None:
                raise ExpectError(f"{where}: {key} must be a finite number, got {value[key]!r}")
            rules.append(_check(Rule(pattern, metric, op, bound, toggle, sev, source, workload), where))
    return rules


def parse_rules(raw: Any, source: str = "[tool.perfgate.expect]", workload: str | None = None) -> list[Rule]:
    """Every rule of an expect table ({pattern: [rules] | {metric: value}}); ExpectError on the first bad one.

    ``workload``: the table comes from that workload's file; its patterns' workload part must match it."""
    if raw is None:
        return []
    if not isinstance(raw, dict):
        raise ExpectError(f"{source}: expectations must be a table of case pattern -> rules, got {raw!r}")
    rules: list[Rule] = []
    for pattern, body in raw.items():
        if not isinstance(pattern, str):
            raise ExpectError(f"{source}: case pattern {pattern!r} must be a string")
        if workload is not None and not fnmatch.fnmatchcase(workload, pattern.split("/")[0]):
            raise ExpectError(f"{source}: pattern {pattern!r} cannot match workload {workload!r}: a workload's "
                              f"expectations apply to its own cases ({workload}/SIZE/TOGGLES/DEVICE)")
        if isinstance(body, str) or (isinstance(body, dict) and "rule" in body):
            rules.extend(_from_items([body], pattern, "fail", source, workload))
        elif isinstance(body, list):
            rules.extend(_from_items(body, pattern, "fail", source, workload))
        elif isinstance(body, dict):  # [tool.perfgate.expect."PATTERN"]: metric = value, severity, rules
            severity = body.get("severity", "fail")
            if severity not in SEVERITIES:
                raise ExpectError(f"{source}: {pattern!r}: severity {severity!r} is not one of {', '.join(SEVERITIES)}")
            for metric, value in body.items():
                if metric == "rules":
                    rules.extend(_from_items(value if isinstance(value, list) else [value], pattern, severity,
                                             source, workload))
                elif metric != "severity":
                    rules.extend(_from_table(metric, value, pattern, severity, source, workload))
        else:
            raise ExpectError(f"{source}: {pattern!r}: rules must be a list of strings like "
                              f"'speedup_vs_eager >= 1.5' or a table of metric = value, got {body!r}")
    return rules


def _from_items(items: Iterable[Any], pattern: str, severity: str, source: str, workload: str | None) -> list[Rule]:
    out = []
    for item in items:
        if isinstance(item, str):
            out.append(parse_rule_text(item, pattern, severity=severity, source=source, workload=workload))
        elif isinstance(item, dict) and "rule" in item:
            unknown = set(item) - {"rule", "severity"}
            if unknown:
                raise ExpectError(f"{source}: {pattern!r}: unknown key(s) {', '.join(sorted(unknown))} in "
                                  f"{item!r}; valid: rule, severity")
            out.append(parse_rule_text(item["rule"], pattern, severity=item.get("severity", severity),
                                       source=source, workload=workload))
        else:
            raise ExpectError(f"{source}: {pattern!r}: a rule is a string like 'speedup_vs_eager >= 1.5' or "
                              f"{{rule = '...', severity = 'warn'}}, got {item!r}")
    return out
