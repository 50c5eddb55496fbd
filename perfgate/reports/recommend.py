"""What pays off here: the documented rule (docs/reports.md) that turns a toggle's speedup against eager
in the same run, its accuracy and its memory into adopt, neutral, avoid or cannot run. No torch here."""

from __future__ import annotations

from dataclasses import dataclass

from perfgate.model.results import STATUS_OK, CaseResult
from perfgate.reports.display import first_line, tolerance_text
from perfgate.util.stats import NO_INTERVAL, Ratio


@dataclass
class Recommendation:
    """The "what pays off here" decision for one toggle; the rule is in ``recommend``."""

    action: str  # adopt | neutral | avoid | cannot run | reference
    reason: str


# Why a case has no speedup against eager to recommend by (``recommend``'s ``no_speedup``).
NO_EAGER = "no eager case in this run to compare with"
EAGER_DID_NOT_RUN = "eager did not run here (skipped or failed): nothing to compare with"
ZERO_STEP_TIME = "a step time of 0 (a timer that reads 0, here or in eager): no speedup can be judged"


def recommend(case: CaseResult, speedup: Ratio | None, memory_change: float | None, threshold: float,
              no_speedup: str = NO_EAGER) -> Recommendation:
    """The documented rule (docs/reports.md), judged against eager in the same run:

    - a skipped or failed case: cannot run, with its reason (eager too);
    - eager itself is the reference;
    - accuracy verdict "drift": avoid, whatever the speed;
    - speedup CI entirely above 1 + threshold: adopt;
    - speedup CI entirely below 1 - threshold: avoid (it is slower);
    - otherwise (CI within or straddling the band, or no speedup: ``no_speedup`` says why): neutral.
    Memory growth never decides but is named in the reason, since it is the usual price of a speedup.
    """
    if case.status != STATUS_OK:
        cls = f"{case.failure_class}: " if case.failure_class else ""
        return Recommendation("cannot run", f"{case.status}: {cls}{first_line(case.message, 160)}".rstrip(": "))
    if case.spec.toggles == ("eager",):
        return Recommendation("reference", "eager fp32: what every other toggle is measured against")
    mem = ""
    if memory_change is not None and abs(memory_change - 1) >= 0.05:
        mem = f"; peak memory {memory_change:.2f}x eager"
    if case.accuracy.get("verdict") == "drift":
        tol = tolerance_text(case.accuracy.get("tolerance"))
        why = case.accuracy.get("reason")
        return Recommendation("avoid", f"output drifts from the fp32 reference beyond tolerance"
                                       f"{f' ({tol})' if tol else ''}{f': {why}' if why else ''}{mem}")
    if case.accuracy.get("amplified"):  # named, since its rel_l2 alone looks like drift
        mem = f"{mem}; accuracy {case.accuracy.get('reason', 'amplified by the dynamics, not damaged')}"
    if speedup is None:
        return Recommendation("neutral", no_speedup + mem)
    band = f"{threshold * 100:.0f}%"
    if speedup.low is None or speedup.high is None:
        return Recommendation("neutral", f"{speedup.value:.2f}x ({NO_INTERVAL}): not judged{mem}")
    if speedup.low > 1 + threshold:
        return Recommendation("adopt", f"{speedup.value:.2f}x faster, CI [{speedup.low:.2f}, {speedup.high:.2f}] "
                                       f"clears +{band}{mem}")
    if speedup.high < 1 - threshold:
        return Recommendation("avoid", f"{speedup.value:.2f}x: slower than eager, CI [{speedup.low:.2f}, "
                                       f"{speedup.high:.2f}] below -{band}{mem}")
    return Recommendation("neutral", f"{speedup.value:.2f}x, CI [{speedup.low:.2f}, {speedup.high:.2f}] "
                                     f"not clearly beyond ±{band}{mem}")
