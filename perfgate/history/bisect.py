"""``perfgate bisect GOOD BAD -w CASE``: the first commit of a step in one case's step time.

Every commit measured is checked out in a temporary git worktree (perfgate.running.against.checkout, detached:
no branch is created or moved, the user's checkout is never touched) and removed afterwards, also on
Ctrl-C or SIGTERM. A measurement is one ``--against`` pair: GOOD's and the commit's worker processes side
by side, sampling in lockstep (runner.run_lockstep), judged by the gate's paired statistic
(compare.judge_case: the median per-pair ratio with its CI).

The search: GOOD against BAD first (the step to find: ratio R). Then like ``git bisect --first-parent``,
on the path from GOOD to BAD (commit_range): the middle commit is measured against GOOD, and counts as
"after the step" when its ratio moved more than half of R's way (in log terms; ``--threshold`` sets the
line instead). 16 commits take 1 + log2(16) = 5 measurements. A merge named as the first commit is said
to be one, with the branch it brought in. No torch here.
"""

from __future__ import annotations

import math
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from perfgate.judging.compare import judge_case
from perfgate.judging.gate_settings import gate_settings
from perfgate.model.comparison import Verdict
from perfgate.model.config import ConfigError, Settings, Suite
from perfgate.model.results import STATUS_OK, CaseResult, CaseSpec
from perfgate.running import against, runner, workers
from perfgate.running.plan import Catalog, plan_cases

Echo = Callable[[str], None]


@dataclass(frozen=True)
class Measurement:
    """One commit measured against GOOD: head/base step-time ratio with its 95% CI."""

    commit: str
    ratio: float
    low: float
    high: float
    base_s: float | None
    head_s: float | None
    wall_s: float

    def text(self) -> str:
        return f"{self.ratio:.3f}x [{self.low:.3f}, {self.high:.3f}]"


@dataclass
class BisectResult:
    first_bad: str  # the first commit after the step
    before: Measurement | None  # its parent against GOOD (None: the parent is GOOD itself)
    after: Measurement  # the first bad commit against GOOD
    step: Measurement  # BAD against GOOD
    measurements: list[Measurement]
    commits_in_range: int
    # commits that could not be measured (the case failed or was skipped there, or its workload is missing):
    # (commit, why), like `git bisect skip`
    skipped: list[tuple[str, str]] = field(default_factory=list)
    # when skipped commits lie right before first_bad: each of them could be the first commit of the step
    candidates: list[str] = field(default_factory=list)
    path_parent: str | None = None  # first_bad's parent on the path bisected (for a merge: the branch not entered)
    last_before: str | None = None  # the last commit of the path measured before the step (GOOD when none)
    case_key: str = ""


def _git(root: Path, *args: str) -> str:
    out = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, timeout=60)
    if out.returncode != 0:
        raise ConfigError(f"git {' '.join(args)}: {out.stderr.strip().splitlines()[-1] if out.stderr.strip() else 'failed'}")
    return out.stdout.strip()


def commit_range(root: Path, good: str, bad: str) -> list[str]:
    """[GOOD, c1, ..., BAD], oldest first: a path in which each commit is a child of the one before, so
    each commit measured holds every change before it (what halving the range assumes). From BAD it
    follows first parents, like ``git bisect --first-parent``: a merge is one step, its side branch is not
    entered (those commits lack GOOD's, or main's, changes). When GOOD is on a branch merged in (not on
    BAD's first-parent line), the merge that brought it in is left by the parent that leads to GOOD."""
    resolved = []
    for name, ref in (("GOOD", good), ("BAD", bad)):
        out = subprocess.run(["git", "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}"], cwd=root,
                             capture_output=True, text=True, timeout=60)
        if out.returncode != 0:
            raise ConfigError(f"bisect: {name} {ref!r} is not a commit in {root} (a branch, tag or hash is valid)")
        resolved.append(out.stdout.strip())
    g, b = resolved
    if g == b:
        raise ConfigError(f"bisect: GOOD and BAD are the same commit ({g[:12]})")
    if subprocess.run(["git", "merge-base", "--is-ancestor", g, b], cwd=root, timeout=60).returncode != 0:
        raise ConfigError(f"bisect: GOOD {good} is not an ancestor of BAD {bad}")
    # every descendant of GOOD that BAD holds, with its parents: "commit parent1 parent2 ..."
    parents = {c: ps for c, *ps in (line.split() for line in
                                    _git(root, "rev-list", "--parents", "--ancestry-path", f"{g}..{b}").splitlines())}
    path = [b]
    while path[-1] != g:
        # the first parent when it still descends from GOOD (or is GOOD), else the parent that does
        path.append(next(p for p in parents[path[-1]] if p == g or p in parents))
    return path[::-1]


def resolve_case(text: str) -> Suite:
    """``workload`` (its smoke size, eager, on cpu) or a full key ``workload/size/toggles/device``, as a
    one-case suite that plan_cases validates against GOOD's workloads."""
    parts = text.split("/")
    if len(parts) == 1 and parts[0]:
        return Suite("bisect", (parts[0],), ("smoke",), ("eager",), "cpu")
    if len(parts) == 4 and all(parts):
        return Suite("bisect", (parts[0],), (parts[1],), (parts[2],), parts[3])
    raise ConfigError(f"bisect -w {text!r}: give a workload name or a case key workload/size/toggles/device")


def plan_case(suite: Suite, catalog: Catalog) -> CaseSpec:
    cases = plan_cases(suite, catalog)
    if len(cases) != 1:
        raise ConfigError(f"bisect: {suite.workloads[0]} selects {len(cases)} cases at GOOD; name one case")
    return cases[0]


@contextmanager
def _removed(path: Path) -> Iterator[None]:
    try:
        yield
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _workload_file(good: against.BaseCheckout, other: against.BaseCheckout, spec: CaseSpec) -> str | None:
    """The case's workload file in ``other``: GOOD's file at the same place in the tree (one probe, GOOD's,
    serves every commit), when it exists there."""
    if good.catalog is None or spec.workload not in good.catalog.workloads:
        return None
    file = Path(good.catalog.workloads[spec.workload]["file"]).resolve()
    try:
        rel = file.relative_to(good.path.resolve())
    except ValueError:  # a workloads folder outside the repository: every commit shares it
        return str(file)
    path = other.path / rel
    return str(path) if path.is_file() else None


def measure(spec: CaseSpec, good: against.BaseCheckout, other: against.BaseCheckout, settings: Settings,
            work: Path) -> Measurement:
    """``other`` against GOOD: ``settings.processes`` pairs of worker processes sampling in lockstep, each
    side with its own checkout's perfgate and workloads, judged like ``run --against``."""
    t0 = time.perf_counter()
    good_file = _workload_file(good, good, spec)
    other_file = _workload_file(good, other, spec)
    if other_file is None and good_file is not None:
        raise Unmeasurable(f"bisect: workload {spec.workload!r} does not exist at {other.commit[:12]}",
                           missing_workload=True)
    if good_file is None or other_file is None:
        raise ConfigError(f"bisect: workload {spec.workload!r} does not exist at "
                          f"{(good if good_file is None else other).commit[:12]}")
    base_dir, head_dir = work / f"{good.commit[:12]}-base", work / other.commit[:12]
    (head_env, head_cache), (base_env, base_cache) = against.side_compile_caches(spec, head_dir, base_dir,
                                                                                 settings.compile_cache)
    base_env["PYTHONPATH"], head_env["PYTHONPATH"] = good.python_path, other.python_path
    base_results: list[dict[str, Any]] = []
    head_results: list[dict[str, Any]] = []
    try:
        for i in range(settings.processes):
            base_job = runner.LockstepJob(runner.case_config(spec, good_file, settings, i, base_dir, profile=False),
                                          base_dir / ".work", base_env, good.path)
            head_job = runner.LockstepJob(runner.case_config(spec, other_file, settings, i, head_dir, profile=False),
                                          head_dir / ".work", head_env, other.path)
            base_out, head_out = against.lockstep_pair(base_job, head_job, settings, i)
            base_results.append(base_out.result)
            head_results.append(head_out.result)
            if any(r.get("status") != STATUS_OK for r in (base_out.result, head_out.result)):
                break
    finally:
        workers.close_zygotes()  # each checkout had its own fork server: do not keep them all alive
    base = runner.case_from_results(spec, base_results, settings.processes, t0, base_cache)
    head = runner.case_from_results(spec, head_results, settings.processes, t0, head_cache)
    for side, case, commit in (("GOOD", base, good.commit), ("measured", head, other.commit)):
        if case.status != STATUS_OK:
            last = (case.message or "").strip().splitlines()[-1:] or [""]
            error = workers.InfrastructureError if side == "GOOD" else Unmeasurable
            raise error(f"bisect: {spec.key} {case.status} at {side} commit {commit[:12]}: {last[0]}")
    v = _step_verdict(spec, base, head, settings)
    return Measurement(other.commit, v.ratio or 1.0, v.ratio_low or 1.0, v.ratio_high or 1.0, v.baseline, v.current,
                       time.perf_counter() - t0)


def _step_verdict(spec: CaseSpec, base: CaseResult, head: CaseResult, settings: Settings) -> Verdict:
    for v in judge_case(spec.key, base, head, gate_settings(settings), paired=True):
        if v.metric == "step_time" and v.ratio is not None:
            return v
    raise workers.InfrastructureError(f"bisect: no step-time comparison for {spec.key}")


def is_after_step(m: Measurement, step: Measurement, threshold: float | None) -> bool:
    """Has ``m`` (a commit against GOOD) moved past the line: half of the step's log ratio, or
    ``threshold`` in the step's direction."""
    sign = 1.0 if step.ratio >= 1 else -1.0
    line = math.log1p(threshold) if threshold else abs(math.log(step.ratio)) / 2
    return sign * math.log(m.ratio) > line


def bisect(settings: Settings, good_ref: str, bad_ref: str, case: Suite, echo: Echo,
           threshold: float | None = None) -> BisectResult:
    """Find the first commit of the step between GOOD and BAD in the step time of ``case`` (resolve_case)."""
    top = Path(_git(settings.root, "rev-parse", "--show-toplevel"))
    commits = commit_range(top, good_ref, bad_ref)
    measurements: list[Measurement] = []
    work_root = Path(tempfile.mkdtemp(prefix="perfgate-bisect-"))  # scratch for workers, removed at the end
    with against.interruptible(), _removed(work_root):
        with against.checked_out(settings, commits[0]) as good:
            spec = plan_case(case, against.probe_base(good, settings.threads))
            echo(f"perfgate bisect: {spec.key}, {len(commits) - 1} commit(s) after GOOD {commits[0][:12]} up to "
                 f"BAD {commits[-1][:12]}; {settings.processes} lockstep pair(s) per measurement")

            def measure_commit(index: int) -> Measurement:
                with against.checked_out(settings, commits[index]) as other:
                    m = measure(spec, good, other, settings, work_root)
                measurements.append(m)
                echo(f"  {commits[index][:12]} ({index} of {len(commits) - 1}) against GOOD: {m.text()}  "
                     f"({m.wall_s:.1f} s)")
                return m

            try:
                step = measure_commit(len(commits) - 1)
            except Unmeasurable as exc:
                if exc.missing_workload:  # at BAD: a usage error (exit 2), as before
                    raise ConfigError(str(exc)) from None
                raise
            line = (f"{threshold * 100:g}%" if threshold else
                    f"half of it, {(math.sqrt(step.ratio) - 1) * 100:+.1f}%")
            significant = step.low > 1 or step.high < 1
            if not significant or (threshold and abs(math.log(step.ratio)) <= math.log1p(threshold)):
                raise NoStep(f"bisect: BAD measures {step.text()} against GOOD: no step to bisect "
                             f"{'(the CI includes 1x)' if not significant else f'(within --threshold {threshold:g})'}")
            echo(f"  the step: {step.text()}; a commit is after it when it moved past {line}")
            lo, hi = 0, len(commits) - 1
            found: dict[int, Measurement] = {hi: step}
            skipped: dict[int, str] = {}
            while True:
                # the middle of what is left, else the commit nearest to it that can be measured
                open_ = sorted((i for i in range(lo + 1, hi) if i not in skipped), key=lambda i: abs(i - (lo + hi) / 2))
                if not open_:
                    break
                mid = open_[0]
                try:
                    m = measure_commit(mid)
                except Unmeasurable as exc:  # a commit where the case fails: skip it, like `git bisect skip`
                    skipped[mid] = str(exc)
                    echo(f"  {commits[mid][:12]} ({mid} of {len(commits) - 1}) skipped: {exc}")
                    continue
                found[mid] = m
                if is_after_step(m, step, threshold):
                    hi = mid
                else:
                    lo = mid
    candidates = [commits[i] for i in range(lo + 1, hi + 1)] if hi - lo > 1 else []
    return BisectResult(first_bad=commits[hi], before=found.get(lo), after=found[hi], step=step,
                        measurements=measurements, commits_in_range=len(commits) - 1,
                        skipped=[(commits[i], why) for i, why in sorted(skipped.items())], candidates=candidates,
                        path_parent=commits[hi - 1], last_before=commits[lo], case_key=spec.key)


class NoStep(ConfigError):
    """GOOD and BAD measure alike: nothing to bisect (exit 2)."""


class Unmeasurable(workers.InfrastructureError):
    """The case cannot be measured at one commit of the range (it fails or is skipped there, or its workload
    is missing): that commit is skipped. At BAD it ends the bisection: exit 3, or 2 for a missing workload."""

    def __init__(self, message: str, missing_workload: bool = False) -> None:
        super().__init__(message)
        self.missing_workload = missing_workload


def merge_lines(result: BisectResult, root: Path) -> list[str]:
    """When the first commit of the step is a merge: what it merged (its parents off the path bisected, whose
    commits were not measured) and the bisection that looks inside that branch; [] otherwise."""
    if result.path_parent is None:
        return []
    out = subprocess.run(["git", "rev-list", "--parents", "-n", "1", result.first_bad], cwd=root, capture_output=True,
                         text=True, timeout=60)
    merged = [p for p in out.stdout.split()[1:] if p != result.path_parent]
    if out.returncode != 0 or not merged:
        return []
    lines = [f"  {result.first_bad[:12]} is a merge: the step came in with what it merged, whose commits were not "
             f"measured (the path follows first parents, like git bisect --first-parent):"]
    for other in merged:
        subject = subprocess.run(["git", "log", "-1", "--format=%h %s", other], cwd=root, capture_output=True,
                                 text=True, timeout=60).stdout.strip()
        base = subprocess.run(["git", "merge-base", result.path_parent, other], cwd=root, capture_output=True,
                              text=True, timeout=60).stdout.strip()
        inside = (f"; to find the commit in that branch: perfgate bisect {base[:12]} {other[:12]} -w {result.case_key}"
                  if base and base != other and result.case_key else "")
        lines.append(f"    merged {subject}{inside}")
    return lines


def report_lines(result: BisectResult, root: Path) -> list[str]:
    subject = subprocess.run(["git", "log", "-1", "--format=%h %s", result.first_bad], cwd=root, capture_output=True,
                             text=True, timeout=60).stdout.strip()
    before = result.before.text() if result.before else "1.000x (GOOD itself)"
    total = sum(m.wall_s for m in result.measurements)
    skipped = [f"{len(result.skipped)} commit(s) skipped (the case could not be measured there): "
               + ", ".join(c[:12] for c, _ in result.skipped)] if result.skipped else []
    if result.candidates:
        first = result.candidates[0]
        # the commit before them on the path bisected: its parent there, which for a merge left by its
        # second parent (GOOD on a merged branch) is not first^
        before_them = result.last_before or f"{first}^"
        parent = (subprocess.run(["git", "log", "-1", "--format=%h %s", before_them], cwd=root, capture_output=True,
                                 text=True, timeout=60).stdout.strip())
        return [
            f"the first commit of the step is one of {len(result.candidates)}: the skipped commit(s) right before "
            f"{result.first_bad[:12]}, or it: " + ", ".join(c[:12] for c in result.candidates),
            f"  last commit before them ({parent}) against GOOD: {before}",
            f"  {result.first_bad[:12]} against GOOD: {result.after.text()}",
            f"  BAD against GOOD:        {result.step.text()}",
            *skipped,
            f"{len(result.measurements)} measurement(s) over {result.commits_in_range} commit(s), {total:.0f} s",
        ]
    return [
        f"first commit of the step: {result.first_bad}  {subject}",
        f"  its parent against GOOD: {before}",
        f"  it against GOOD:         {result.after.text()}",
        f"  BAD against GOOD:        {result.step.text()}",
        *merge_lines(result, root),
        *skipped,
        f"{len(result.measurements)} measurement(s) over {result.commits_in_range} commit(s), {total:.0f} s",
    ]


def with_sampling(settings: Settings, processes: int | None, samples: int | None) -> Settings:
    return settings.with_overrides(processes=processes,
                                   timing=replace(settings.timing, samples=samples) if samples else None)
