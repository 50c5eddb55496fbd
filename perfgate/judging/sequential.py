"""How much to measure: worker processes are added to a case until its step time is settled, or its
budget is spent. No torch. docs/gate.md ("How much the gate measures") explains every rule below.

The unit of evidence is a worker process (perfgate.judging.compare); on a shared runner processes of identical
code differ by several percent, so a fixed small number of them leaves most verdicts ``inconclusive``,
and a fixed large number wastes minutes on quiet cases. So the orchestrator measures in **looks**: a
first batch of processes, then more, on a schedule growing by about 1.5x (2, 3, 5, 8, 12, 16), and after
each look asks a **rule** whether the case is settled:

- ``ComparisonRule`` (``run --gate``, ``--against``, the re-measure): the step-time verdict against the
  baseline is ``regression``, ``win`` or ``unchanged``, judged at the *look's* confidence;
- ``PrecisionRule`` (a plain run, which will become somebody's baseline): the case's own step-time CI is
  within +/- ``precision``.

Looking at the data again and again and stopping when it looks decided inflates the false-alarm rate of a
fixed-level test. The comparison rule therefore spends the error rate over its looks (Lan-DeMets alpha
spending, Pocock-type function ``alpha * ln(1 + (e - 1) * t)``, ``t`` the share of the process budget
used) and gives each look only its increment, so the chance of any false significant result over all
looks is at most ``alpha``. Each look's level is the exact group-sequential boundary for its increment
(``boundaries``: successive looks share their processes, so their statistics are correlated, and the
boundary is computed from that correlation rather than by Bonferroni, which would ignore it and judge the
late looks at needlessly wide intervals). A look that no further look can follow (the process or time
budget would be exceeded) spends all that is left.
"""

from __future__ import annotations

import functools
import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from perfgate.judging.compare import case_time_change, judge_time
from perfgate.judging.gate_settings import GateSettings, gate_settings
from perfgate.model.config import Settings
from perfgate.model.results import STATUS_OK, CaseResult
from perfgate.util.formatting import plural
from perfgate.util.stats import process_half_width

GROWTH = 1.5  # each look has about this many times the processes of the one before


def look_schedule(first: int, most: int) -> list[int]:
    """Process counts (per side) after which a case is judged: ``first``, then about 1.5x each time,
    ending at ``most``. ``first >= most``: one look."""
    first = max(1, first)
    if first >= most:
        return [first]
    out = [first]
    while out[-1] < most:
        out.append(min(most, max(out[-1] + 1, math.ceil(out[-1] * GROWTH))))
    return out


def spent_alpha(alpha: float, fraction: float) -> float:
    """Error rate spent once ``fraction`` of the budget is used: Lan-DeMets' Pocock-type function."""
    return alpha * math.log(1.0 + (math.e - 1.0) * min(1.0, max(0.0, fraction)))


GRID = 401  # points per look in the numerical integration of ``boundaries``


def _excess(c: float, mass: Any, grid: Any, root_n: float, root_d: float, inc: float) -> float:
    """The chance of rejecting first at this look with boundary ``c``, less its share ``inc``: ``mass``
    is the surviving density of the previous sum on ``grid``; this look adds a sum over ``root_d ** 2``
    processes, and rejects when the total leaves +/- c * ``root_n``."""
    import numpy as np
    from scipy import stats

    tail = stats.norm.sf((c * root_n - grid) / root_d) + stats.norm.cdf((-c * root_n - grid) / root_d)
    return float(np.sum(mass * tail)) - inc


@functools.lru_cache(maxsize=256)
def boundaries(counts: tuple[int, ...], increments: tuple[float, ...]) -> tuple[float, ...]:
    """Two-sided z boundaries of a group-sequential test: look k, after ``counts[k]`` processes, rejects
    when |Z_k| >= the k-th boundary, chosen so that under no change the chance of rejecting *first* at
    look k is exactly ``increments[k]``. Z_k is the standardized sum of the first ``counts[k]`` independent
    processes, so successive looks are correlated (sqrt(n_j / n_k)); the chance is computed by recursive
    numerical integration of the sum's density over the region no earlier look rejected (Armitage,
    McPherson and Rowe, 1969). Bonferroni (each look at 1 - its increment) ignores that correlation and
    gives wider intervals than the error rate needs: 2.63 instead of 2.36 at the last of five looks."""
    import numpy as np
    from scipy import optimize, stats

    out: list[float] = []
    grid = weights = density = None  # the surviving density of S_{k-1} on a grid, with trapezoid weights
    prev = 0
    for n, inc in zip(counts, increments, strict=True):
        d = n - prev
        inc = min(max(inc, 1e-12), 0.5)
        if density is None:
            c = float(stats.norm.isf(inc / 2))
        else:
            args = (weights * density, grid, math.sqrt(n), math.sqrt(d), inc)
            c = float(optimize.brentq(_excess, 0.0, 12.0, args=args, xtol=1e-6)) if _excess(0.0, *args) > 0 else 0.0
        half = c * math.sqrt(n)
        new_grid = np.linspace(-half, half, GRID)
        if density is None:
            new_density = stats.norm.pdf(new_grid / math.sqrt(n)) / math.sqrt(n)
        else:
            kernel = stats.norm.pdf((new_grid[:, None] - grid[None, :]) / math.sqrt(d)) / math.sqrt(d)  # type: ignore[index]  # set with density
            new_density = kernel @ (weights * density)
        step = new_grid[1] - new_grid[0] if GRID > 1 else 0.0
        weights = np.full(GRID, step)
        weights[[0, -1]] = step / 2
        grid, density, prev = new_grid, new_density, n
        out.append(c)
    return tuple(out)


@dataclass(frozen=True)
class Budget:
    """A case's sampling budget: the first look, at most ``max_processes`` per side, about ``max_seconds``."""

    first: int = 2
    max_processes: int = 16
    max_seconds: float = 60.0
    adaptive: bool = True
    # one look (max_processes = first) that only screens: a case it does not settle `unchanged` is settled
    # in lockstep afterwards (perfgate.gating.gate.settle_stored; docs/gate.md, "Settling in lockstep ...")
    screen: bool = False

    @property
    def schedule(self) -> list[int]:
        return look_schedule(self.first, self.max_processes) if self.adaptive else [self.first]


@dataclass
class Decision:
    settled: bool
    why: str
    verdict: str | None = None  # the step-time verdict at this look (comparison rules)


class PrecisionRule:
    """Settled when the case's own step time is known to within +/- ``precision`` from its processes
    (``stats.process_half_width``: a 95% t interval of the mean log per-process step time, every process
    counted, as the run tables' interval counts them). Its line also gives the interval the tables print,
    with the ``run_to_run`` term added: one function makes both, so the two never disagree."""

    kind = "precision"

    def __init__(self, precision: float, quantile: float = 0.1, confidence: float = 0.95,
                 run_to_run: float = 0.0, min_processes: int = 2) -> None:
        self.precision, self.quantile, self.confidence = precision, quantile, confidence
        self.run_to_run = run_to_run
        self.min_processes = min_processes  # a baseline's floor (`run --baseline-precision`): see performance modes

    def _times(self, head: CaseResult) -> list[float]:
        return [p.step_time(self.quantile) for p in head.processes if p.samples_ns]

    def half_width(self, head: CaseResult) -> float | None:
        """The relative half-width of the case's step-time CI over its processes, or None with fewer than 2."""
        return process_half_width(self._times(head), self.confidence)

    def decide(self, head: CaseResult, base: CaseResult | None, confidence: float) -> Decision:
        h = self.half_width(head)
        if h is None:
            return Decision(False, "one process gives no spread")
        printed = process_half_width(self._times(head), self.confidence, self.run_to_run)
        again = (f"; +/-{printed * 100:.1f}% for another run (+{self.run_to_run * 100:g}% run-to-run)"
                 if printed is not None and self.run_to_run > 0 else "")
        if len(head.processes) < self.min_processes:
            return Decision(False, f"step time within +/-{h * 100:.1f}%{again}; a baseline settles from "
                                   f"{plural(self.min_processes, 'process', 'processes')}")
        if h <= self.precision:
            return Decision(True, f"step time within +/-{h * 100:.1f}% (target +/-{self.precision * 100:g}%){again}")
        return Decision(False, f"step time within +/-{h * 100:.1f}%, target +/-{self.precision * 100:g}%{again}")


class ComparisonRule:
    """Settled when the step-time verdict against ``base`` (a stored baseline's case, or the base side
    measured alongside) is regression, win or unchanged at the look's confidence."""

    kind = "comparison"

    def __init__(self, gate: GateSettings, threshold: float, threshold_source: str, paired: bool,
                 base: CaseResult | None = None, run_to_run: float | None = None) -> None:
        self.gate, self.threshold, self.source, self.paired, self.base = gate, threshold, threshold_source, paired, base
        self.run_to_run = run_to_run  # the case's term (GateSettings.run_to_run_term), as the final judge uses

    def decide(self, head: CaseResult, base: CaseResult | None, confidence: float) -> Decision:
        base = base if base is not None else self.base
        if base is None or base.status != STATUS_OK:
            return Decision(True, "no baseline to compare with")
        change = case_time_change(base, head, self.gate, paired=self.paired, confidence=confidence,
                                  run_to_run=self.run_to_run)
        if change is None:
            return Decision(True, "no step-time samples on one side")
        kind = judge_time(change, self.threshold, self.source)[0]
        ci = f"{change.ratio:.3f}x [{change.low:.3f}, {change.high:.3f}]"
        floor = self.gate.unpaired_min_processes
        if not self.paired and change.n_head < floor:
            # too few processes to see performance modes: look again (the last look judges what there is;
            # a stored baseline's processes are what they are)
            return Decision(False, f"{kind} at {ci}; unpaired, it settles from {plural(floor, 'process', 'processes')}", kind)
        return Decision(kind in ("regression", "win", "unchanged"), f"{kind} at {ci}", kind)


Rule = PrecisionRule | ComparisonRule


@dataclass
class Sampler:
    """Drives one case's looks: ``next_target`` says how many processes (per side) to have before the next
    look, or None to stop; ``record()`` is what goes into the case's metadata (``sampling``)."""

    budget: Budget
    rule: Rule | None
    alpha: float = 0.05
    looks: list[dict[str, Any]] = field(default_factory=list)
    stopped: str = ""
    confidence: float | None = None  # the confidence of the look that settled (or ended) the case
    # the run-to-run term the case's printed interval adds for another run, and where it came from (a
    # calibration of the case on this machine, or the device's default): recorded for every report
    run_to_run: tuple[float, str] | None = None
    _spent: float = 0.0
    _increments: list[float] = field(default_factory=list)  # the error rate given to each look so far
    _counts: list[int] = field(default_factory=list)  # processes (per side) at each look so far

    @property
    def first(self) -> int:
        return self.budget.schedule[0]

    def next_target(self, done: int, elapsed_s: float, head: CaseResult, base: CaseResult | None = None) -> int | None:
        """After ``done`` processes (per side) in ``elapsed_s``: the next count to reach, or None to stop."""
        schedule = self.budget.schedule
        nxt = next((n for n in schedule if n > done), None)
        per_process = elapsed_s / max(done, 1)
        fits = nxt is not None and elapsed_s + per_process * (nxt - done) <= self.budget.max_seconds
        final = not fits
        if self.rule is None or head.status != STATUS_OK:
            self.stopped = "fixed number of processes" if head.status == STATUS_OK else f"case {head.status}"
            return None
        confidence = self._look_confidence(done, final)
        decision = self.rule.decide(head, base, confidence)
        self.looks.append({"processes": done, "seconds": round(elapsed_s, 2), "confidence": round(confidence, 5),
                           "result": decision.why})
        if decision.settled:
            self.stopped, self.confidence = f"settled: {decision.why}", confidence
            return None
        if final:
            why = ("screened: one look" if self.budget.screen
                   else f"budget: {plural(self.budget.max_processes, 'process', 'processes')}" if nxt is None
                   else f"budget: {self.budget.max_seconds:g} s (another look would take about "
                        f"{elapsed_s + per_process * (nxt - done):.0f} s)")
            self.stopped, self.confidence = f"{why}; {decision.why}", confidence
            return None
        return nxt

    def _look_confidence(self, done: int, final: bool) -> float:
        """The confidence this look is judged at (comparison rules): the two-sided level of its
        group-sequential boundary for its share of alpha; the plain confidence for a precision rule."""
        if not isinstance(self.rule, ComparisonRule):
            return 1.0 - self.alpha
        total = spent_alpha(self.alpha, done / self.budget.max_processes) if not final else self.alpha
        share = max(total - self._spent, 1e-6)
        self._spent = max(total, self._spent)
        if self._counts and done <= self._counts[-1]:  # no new process since the last look: no new information
            return 1.0 - share
        self._counts.append(done)
        self._increments.append(share)
        z = boundaries(tuple(self._counts), tuple(self._increments))[-1]
        return 2.0 * statistics.NormalDist().cdf(z) - 1.0  # the two-sided level of boundary z

    def end(self, why: str) -> None:
        """The case ended without a look's say (a process skipped or failed)."""
        self.stopped = why

    def record(self, processes: int, seconds: float) -> dict[str, Any]:
        out: dict[str, Any] = {"rule": self.rule.kind if self.rule else "fixed", "processes": processes,
                               "seconds": round(seconds, 2), "stopped": self.stopped or "fixed number of processes",
                               "looks": self.looks,
                               "budget": {"first": self.first, "max_processes": self.budget.max_processes,
                                          "max_seconds": self.budget.max_seconds}}
        if isinstance(self.rule, ComparisonRule) and self.confidence is not None:
            # the step-time verdict of this case is judged at this confidence, never the nominal one
            out["confidence"] = self.confidence
        if self.run_to_run is not None:
            out["run_to_run"], out["run_to_run_source"] = self.run_to_run
        return out


def sampling_text(case: CaseResult) -> str:
    """'5 processes (settled: ...)': how many processes a case took and why it stopped; '' for a case
    measured before adaptive sampling (no ``sampling`` metadata)."""
    info = case.metadata.get("sampling")
    if not isinstance(info, dict) or not isinstance(info.get("processes"), int):
        return ""
    n = info["processes"]
    return f"{plural(n, 'process', 'processes')} ({str(info.get('stopped', ''))[:160]})"


def make_sampler(gate: GateSettings, processes: int, rule: Rule | None, screen: bool = False) -> Sampler:
    """A case's Sampler under ``[tool.perfgate.gate]``: looks from ``processes`` (3 at least when comparing:
    two a side cannot settle a comparison and would only spend its error rate) up to the budget; with
    ``screen``, the first look only (what it does not settle, lockstep pairs settle afterwards)."""
    first = max(processes, 3) if isinstance(rule, ComparisonRule) and gate.adaptive else processes
    budget = Budget(first=first, max_processes=first if screen else max(first, gate.max_processes),
                    max_seconds=gate.max_case_s, adaptive=gate.adaptive, screen=screen)
    return Sampler(budget, rule if gate.adaptive else None, alpha=1.0 - gate.confidence)


def _recorded_seconds(case: CaseResult, processes: int) -> float | None:
    """The measuring side's elapsed seconds at the case's last look, when its record has one for exactly
    ``processes``: evidence (like the samples), used only to tell whether the time budget ended the case."""
    info = case.metadata.get("sampling")
    looks = info.get("looks") if isinstance(info, dict) else None
    last = looks[-1] if isinstance(looks, list) and looks and isinstance(looks[-1], dict) else {}
    seconds = last.get("seconds")
    if last.get("processes") != processes or isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
        return None
    return float(seconds) if 0 <= seconds < 1e9 else None


def look_confidence(gate: GateSettings, processes: int, *, screen: bool = False) -> Callable[[CaseResult], float]:
    """The judge's confidence for a case's step time: the level of the look, in the judging side's own
    sequential design (``make_sampler`` with ``gate`` and ``processes``, the judge's settings), that ends at
    the case's process count, its earlier looks replayed on the design's schedule. Not adaptive: the gate's
    confidence. The level a results file records is never read: the measuring side may be the pull
    request's code (docs/ci.md, "What the judge reads"). The process count and the elapsed seconds are
    evidence: they choose among the levels this design allows, they do not set one."""

    def level(case: CaseResult) -> float:
        # any comparison rule: only its kind matters to the schedule and the levels, never its decisions
        sampler = make_sampler(gate, processes, ComparisonRule(gate, gate.threshold, "", paired=False),
                               screen=screen)
        n = len(case.processes)
        if sampler.rule is None or n < 1:
            return gate.confidence
        schedule = sampler.budget.schedule
        nxt = next((k for k in schedule if k > n), None)
        seconds = _recorded_seconds(case, n)
        # the sampler's own test: a look is final when no look follows it or the next would pass max_seconds
        final = nxt is None or (seconds is not None and seconds / n * nxt > sampler.budget.max_seconds)
        for done in [k for k in schedule if k < n]:
            sampler._look_confidence(done, False)
        return sampler._look_confidence(n, final)

    return level


def short_of_design(gate: GateSettings, processes: int, case: CaseResult, kind: str) -> str:
    """Why a compared case's sampling falls short of the judging side's own design (``make_sampler`` with
    ``gate`` and ``processes``, the judge's settings), '' when it does not: fewer processes than the design's
    first look, or a step time ``kind`` left ``inconclusive`` at a count after which the design would look
    again (the budget neither spent nor, by the case's recorded seconds, out of time). The measuring side
    chose its own settings (a pull request's pyproject.toml): what it measured is evidence, not its floor."""
    design = make_sampler(gate, processes, ComparisonRule(gate, gate.threshold, "", paired=True))
    n = len(case.processes)
    if n < design.first:
        return (f"measured with {plural(n, 'process', 'processes')} a side, fewer than the "
                f"{design.first} of this judge's design")
    if design.rule is None or kind != "inconclusive":
        return ""
    nxt = next((k for k in design.budget.schedule if k > n), None)
    seconds = _recorded_seconds(case, n)
    if nxt is None or (seconds is not None and seconds / n * nxt > design.budget.max_seconds):
        return ""
    return (f"stopped inconclusive at {plural(n, 'process', 'processes')} a side, where this judge's design "
            f"looks again at {nxt} (up to {design.budget.max_processes}, {design.budget.max_seconds:g} s)")


SamplerFactory = Callable[[Any], "Sampler | None"]  # CaseSpec -> a Sampler for it (None: fixed processes)


def with_sampling(settings: Settings, *, processes: int | None = None, samples: int | None = None,
                  max_processes: int | None = None, max_case_s: float | None = None) -> Settings:
    """Settings with the command line's sampling: exactly ``processes`` worker processes per case (adaptive
    sampling off), ``samples`` per process, and the adaptive budget in ``[tool.perfgate.gate]`` (validated
    there)."""
    settings = settings.with_overrides(processes=processes,
                                       timing=replace(settings.timing, samples=samples) if samples else None)
    overrides: dict[str, Any] = {k: v for k, v in (("max_processes", max_processes), ("max_case_s", max_case_s))
                                 if v is not None}
    if processes is not None:
        overrides["adaptive"] = False
    if not overrides:
        return settings
    gate = {**(settings.extra.get("gate") or {}), **overrides}
    return replace(settings, extra={**settings.extra, "gate": gate})


def sampling_plan(settings: Settings) -> str:
    """How many worker processes each case gets, in words, for the run's first line."""
    gs = gate_settings(settings)
    if not gs.adaptive:
        return f"{settings.processes} process(es) each"
    return f"{settings.processes} to {gs.max_processes} process(es) each as needed (at most {gs.max_case_s:g} s)"
