"""A step-time verdict's rule in words, said from its numbers and its facts (perfgate.model.comparison.TimeFacts):
the one place those words are made. Judging fills the facts and keeps the words in the verdict's ``rule``
(``worded``, which comparison.json stores); a verdict read back from a comparison.json says the same from the
same facts (``time_rule``). No torch, and nothing of judging: the words follow the facts, never the policy.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

from perfgate.model.comparison import TimeFacts, Verdict
from perfgate.util.formatting import plural


def ratio_text(ratio: float | None, low: float | None = None, high: float | None = None) -> str:
    """A ratio and its interval as rules quote them: '1.106x [1.079, 1.131]', '1.106x', 'no ratio'."""
    if ratio is None:
        return "no ratio"
    ci = f" [{low:.3f}, {high:.3f}]" if low is not None and high is not None else ""
    return f"{ratio:.3f}x{ci}"


def decided_kind(decided: str, ratio: float) -> str:
    """The verdict the decision rule's part ``decided`` (comparison.DECISIONS) gives at ``ratio``."""
    if decided == "past-min-effect":
        return "regression" if ratio >= 1.0 else "win"
    return "unchanged" if decided == "within-margin" else "inconclusive"


def decision_why(decided: str, ratio: float, low: float, high: float, significant: bool, min_effect: float,
                 margin: float) -> str:
    """Which part of the step-time decision rule decided (comparison.DECISIONS), with the figures it read."""
    ci = f"CI [{low:.3f}, {high:.3f}]"
    min_pct, margin_pct = f"{min_effect * 100:g}%", f"{margin * 100:g}%"
    direction = "slower" if ratio >= 1.0 else "faster"
    if decided == "no-estimate":
        return f"no finite estimate ({ratio:g}, {ci})"
    if decided == "past-min-effect":
        return f"significantly {direction} ({ci} excludes 1), estimate past the minimum effect {min_pct}"
    if decided == "not-significant":
        return f"{direction} by its estimate (past the minimum effect {min_pct}), but not significant ({ci})"
    if decided == "within-margin":
        small = "a real but small change" if significant else "no significant change"
        return (f"{small}: estimate within the minimum effect {min_pct} and the {ci} within the equivalence margin "
                f"+/-{margin_pct}")
    return (f"estimate within the minimum effect {min_pct}, but the {ci} reaches past the equivalence margin "
            f"+/-{margin_pct}")


def _numbers(v: Verdict) -> tuple[float, float, float, float]:
    """(ratio, low, high, threshold) of a step-time verdict; NaN where one is missing."""
    return tuple(math.nan if x is None else float(x)  # type: ignore[return-value]  # four, as listed
                 for x in (v.ratio, v.ratio_low, v.ratio_high, v.threshold))


def _facts(v: Verdict) -> TimeFacts:
    if v.facts is None or v.facts.decided is None:
        raise ValueError(f"{v.case_key} {v.metric}: no facts to say its rule from (not a step-time verdict, or "
                         "one an older perfgate wrote)")
    return v.facts


def measured_kind(v: Verdict) -> str:
    """The kind the step-time comparison gave ``v`` as measured (perfgate.judging.compare.judge_case), before
    anything settled it: the decision's, left inconclusive by one process a side, a busy host, or (a win)
    other parameters in the baseline."""
    f = _facts(v)
    kind = decided_kind(f.decided or "", _numbers(v)[0])
    if f.one_process or f.host_busy:
        return "inconclusive"
    return "inconclusive" if kind == "win" and f.other_parameters else kind


def measured_rule(v: Verdict) -> str:
    """The decision and the evidence it was applied to (perfgate.judging.compare.judge_time's words): which
    part of the rule decided, the test, the processes a side, the threshold and where it came from; the
    performance modes that left it inconclusive, the one process a side that hides the noise."""
    f = _facts(v)
    ratio, low, high, threshold = _numbers(v)
    decided = f.decided or ""
    why = decision_why(decided, ratio, low, high, f.significant, f.min_effect, f.margin)
    test = f"{f.test} ({f.throttled})" if f.throttled else f.test
    mode = "paired base/head processes" if f.paired else "per-process step times"
    rule = (f"{why}; {test}, {f.processes[0]} vs {f.processes[1]} processes ({mode}); {f.threshold_source} "
            f"{threshold * 100:g}%")
    if decided_kind(decided, ratio) == "inconclusive" and max(f.modes) > 1:
        rule = f"the processes fall into {max(f.modes)} performance modes: {rule}"
    if f.one_process:
        sides = [side for side, n in (("the baseline", f.processes[0]), ("this run", f.processes[1])) if n < 2]
        rule = f"{rule}; but one process in {' and '.join(sides)} hides the between-process noise"
    return rule


def other_parameters_note(differs: str, won: bool) -> str:
    """What a verdict's rule adds where the baseline measured the case with other parameters (``differs``):
    for a win (``won``), why it is no evidence."""
    note = f"the baseline measured this case with other parameters ({differs})"
    return f"but {note}: a win cannot be told from a smaller problem" if won else note


def screen_note(kind: str, ratio: float | None) -> str:
    """What a verdict the stored comparison's full sampler settled says of the screen before it."""
    shown = f"{ratio:.3f}x" if ratio is not None else "no ratio"
    return f"measured with the full sampler, lockstep could not settle it (the screen: {kind} at {shown})"


def time_rule(v: Verdict) -> str:
    """The rule of step-time verdict ``v`` in words, from its numbers and facts: ``measured_rule``, the
    run-to-run term and its source, the sequential look's confidence, a busy host, other parameters in the
    baseline, what settled it, and the notes said after it all. ValueError for a verdict without them."""
    f = _facts(v)
    ratio, low, high, _ = _numbers(v)
    kind = decided_kind(f.decided or "", ratio)
    rule = measured_rule(v) + f"; run-to-run {f.run_to_run * 100:g}% ({f.run_to_run_source})"
    if f.look is not None:
        rule += (f"; judged at {f.confidence * 100:.2f}% confidence (the sequential look at "
                 f"{plural(f.look, 'process', 'processes')})")
    if f.host_busy:
        rule = f"host busy: {f.host_busy}; measured alone, a {kind} ({rule})"
    if f.other_parameters:
        rule += "; " + other_parameters_note(f.other_parameters, kind == "win" and not (f.one_process or f.host_busy))
    before = ratio_text(f.before_ratio, f.before_ratio_low, f.before_ratio_high)
    if f.settled_by == "remeasure":
        first = f"first measurement {before}"
        was = "regressed" if f.before_kind == "regression" else "was faster"
        if f.remeasure == "confirmed":
            rule = f"{rule}; confirmed by a re-measure ({first})"
        elif f.remeasure == "contradicted":
            again = "was faster" if measured_kind(v) == "win" else "regressed"
            rule = f"the {first} {was}, the re-measure {again} ({rule})"
        else:
            rule = f"{rule}; the {first} {was}, the re-measure did not"
    elif f.settled_by == "lockstep":
        rule = (f"{rule}; settled in lockstep against the baseline's commit {f.commit} (the stored comparison: "
                f"{f.before_kind} at {before})")
    elif f.settled_by == "full-sampler":
        rule = f"{rule}; {screen_note(f.before_kind or '', f.before_ratio)}"
    if f.remeasure == "no-time":  # this measurement's verdict stands: a regression as it was, a win no longer
        first = f"first measurement {ratio_text(v.ratio, v.ratio_low, v.ratio_high)}"
        if measured_kind(v) == "regression":
            rule = f"{rule}; the re-measure gave no step time to confirm it ({f.remeasure_gave}), so the {first} stands"
        else:
            rule = f"the {first} was faster; the re-measure gave no step time to confirm it ({f.remeasure_gave})"
    return rule + "".join(f"; {note}" for note in f.notes)


def worded(v: Verdict) -> Verdict:
    """``v`` with its rule said from its facts (``time_rule``); a verdict without facts as it is."""
    return v if v.facts is None else replace(v, rule=time_rule(v))


def with_facts(v: Verdict, kind: str | None = None, **facts: Any) -> Verdict:
    """Step-time verdict ``v`` with ``facts`` changed (and its ``kind``), its rule said again from them."""
    assert v.facts is not None, "a step-time verdict is judged with its facts"
    return worded(replace(v, kind=kind or v.kind, facts=replace(v.facts, **facts)))


def settled(v: Verdict, by: str, before: Verdict, kind: str | None = None, **facts: Any) -> Verdict:
    """Step-time verdict ``v`` as what ``by`` (comparison.SETTLED_BY) settled, replacing ``before``."""
    return with_facts(v, kind, settled_by=by, before_kind=before.kind, before_ratio=before.ratio,
                      before_ratio_low=before.ratio_low, before_ratio_high=before.ratio_high, **facts)


def noted(v: Verdict, *notes: str) -> Verdict:
    """``v`` with ``notes`` said after its rule: a fact of a step-time verdict, words of any other."""
    if v.facts is not None and v.facts.decided is not None:
        return with_facts(v, notes=(*v.facts.notes, *notes))
    return replace(v, rule=v.rule + "".join(f"; {note}" for note in notes))
