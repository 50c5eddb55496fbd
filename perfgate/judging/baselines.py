"""The baseline store: ``baselines/<machine-key>/<suite>.json``, committed and reviewed like code. No torch.

A baseline is a results document (every case with its raw samples per worker process, so the gate's
rank tests have the evidence they need) wrapped with what the gate needs besides: the machine key, the
full environment it was measured in, where it came from, and per-case thresholds from calibration.

Schema history (``perfgate.baseline/N``):
  1  the results document under "run", with machine_key and suite; no calibration.
  2  results under "results"; adds "calibration" ({case key: {threshold, noise...}}), "updated_at" and
     "source" (the run it was made from). Version 1 files are upgraded on read.
"""

from __future__ import annotations

import fnmatch
import json
import math
import os
import statistics
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Annotated, Any

from pydantic import ConfigDict

from perfgate.judging import expect, runspread
from perfgate.model.config import ConfigError
from perfgate.model.environment_keys import environment_diff
from perfgate.model.results import (
    STATUS_FAILED,
    STATUS_OK,
    CaseResult,
    ResultsDocument,
    RunResult,
    SchemaError,
    checked,
    read_json_file,
)
from perfgate.model.results_file import readable
from perfgate.util.formatting import format_environment, format_value, plural
from perfgate.util.paths import CEILINGS_FILE, component, contained
from perfgate.util.stats import PROCESS_QUANTILE, RUN_TO_RUN_MAX, format_seconds, run_to_run_log
from perfgate.util.storage import atomic_write_text, unwritable
from perfgate.util.validation import (
    NOT_STORED,
    Document,
    Measured,
    Name,
    Stored,
    Text,
    check,
    document,
    expected,
    from_document,
    satisfying,
)
from perfgate.util.vocabulary import METRIC_KINDS

SCHEMA = "perfgate.baseline/2"
SCHEMA_HISTORY = {
    "perfgate.baseline/1": "results under 'run'; no calibration",
    "perfgate.baseline/2": "results under 'results'; calibration, updated_at, source",
}


# A baseline file as declared (validation.check reads it; docs/schemas/ is generated from it).

Threshold = Annotated[Measured, satisfying(lambda v: 0 < v <= 10),
                      expected("a finite number in (0, 10]: a relative change")]
CalibrationValue = Annotated[Measured | str | list[Any] | dict[str, Any] | None,
                             expected("a number, a string, a list, an object or null")]


RunToRun = Annotated[Measured, satisfying(lambda v: 0 <= v <= RUN_TO_RUN_MAX),
                     expected(f"a finite number in [0, {RUN_TO_RUN_MAX:g}]: a relative spread")]


class CalibrationDocument(Document):
    """One case's entry as `perfgate calibrate --write` stores it: the case's noise figures. ``threshold``
    is read from entries written before the noise floor had its key, and never used: the gate judges
    with max(configured threshold, noise floor), gate_settings.GateSettings.threshold_for."""

    model_config = ConfigDict(extra="allow")
    noise_floor: Threshold | None = None  # the smallest change detectable here, rounded up to 0.5%
    threshold: Threshold | None = None
    run_to_run: RunToRun | None = None  # the spread of whole runs calibrate measured: its upper bound
    __pydantic_extra__: dict[str, CalibrationValue]


def _calibration(entries: dict[str, Any] | None) -> dict[str, Any]:
    """The calibration of the file as a baseline holds it: each case's entry as the file set it."""
    return {key: entry.model_dump(exclude_unset=True) for key, entry in (entries or {}).items()}


@dataclass(eq=False)
class Baseline:
    """A stored baseline: the run it holds, its environment, and per-case calibration."""

    # the results document of the run (the file's "results"), written as results.json is
    run: Annotated[RunResult, Stored(ResultsDocument, key="results")]
    # the file may leave the machine and suite out: they are then the run's (parse_baseline)
    machine_key: Annotated[str, Stored(Name | None, default=None)]
    suite: Annotated[str | None, Stored(Name | None, default=None)]
    # {case key: noise figures} as `perfgate calibrate --write` stores them
    calibration: Annotated[dict[str, Any], Stored(dict[str, CalibrationDocument] | None, default=None,
                                                  read=_calibration)] = field(default_factory=dict)
    updated_at: Text = ""
    source: Text | None = None  # the run it was made from
    path: Annotated[Path | None, NOT_STORED] = None  # where it was read from or written to
    # the version the file was written in (older ones are upgraded on read)
    file_schema: Annotated[str | None, NOT_STORED] = field(default=SCHEMA, init=False)

    def __post_init__(self) -> None:
        self.calibration = dict(self.calibration or {})  # its own: a baseline made from another keeps its entries

    @property
    def environment(self) -> dict[str, Any]:
        return self.run.environment

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "suite": self.suite,
            "machine_key": self.machine_key,
            "updated_at": self.updated_at,
            "source": self.source,
            "environment": self.run.environment,
            "calibration": self.calibration,
            "results": self.run.to_json(),
        }

    def dumps(self) -> str:
        return json.dumps(self.to_json(), indent=1, default=str) + "\n"


# baselines/<machine-key>/<suite>.json as Baseline declares it, named by its schema version, with a copy of
# the results' environment for readers of the file (the run's is the one read back)
BaselineDocument = document(
    Baseline, "BaselineDocument", version=SCHEMA, environment=(dict[str, Any], {}),
    doc="baselines/<machine-key>/<suite>.json: a results document and what the gate needs besides.")


def baseline_path(baselines_dir: Path, machine_key: str, suite: str) -> Path:
    """Where the baseline of ``suite`` on the machine ``machine_key`` lives. Both names may come from a
    results.json, so each is made one safe path component and the path must stay inside ``baselines_dir``
    (SchemaError otherwise)."""
    return contained(Path(baselines_dir), machine_key, component(suite) + ".json", what="baseline")


def upgrade(data: dict[str, Any]) -> dict[str, Any]:
    """Bring an older baseline document up to the current schema (one step per version)."""
    if data.get("schema") == "perfgate.baseline/1":
        data = {
            "schema": "perfgate.baseline/2",
            "suite": data.get("suite"),
            "machine_key": data.get("machine_key"),
            "updated_at": data.get("created_at", ""),
            "source": None,
            "environment": data.get("run", {}).get("environment", {}) if isinstance(data.get("run"), dict) else {},
            "calibration": {},
            "results": data.get("run"),
        }
    return data


def parse_baseline(data: Any, source: str) -> Baseline:
    """A Baseline from a decoded document; SchemaError naming ``source`` for anything wrong."""
    if not isinstance(data, dict):
        raise SchemaError(f"{source}: not a perfgate baseline (expected a JSON object, got {type(data).__name__})")
    schema = data.get("schema")
    if isinstance(schema, str) and schema.startswith("perfgate.results/"):  # not "a newer perfgate wrote it"
        raise SchemaError(f"{source}: a run's results ({schema}), not a baseline; `perfgate baseline update {source}` "
                          "makes a baseline of it, or compare with it as a run (`perfgate compare`, `report --against-results`)")
    if not isinstance(schema, str) or schema not in SCHEMA_HISTORY:
        raise SchemaError(f"{source}: unknown baseline schema {schema!r}; this perfgate reads "
                          f"{', '.join(SCHEMA_HISTORY)} (a newer perfgate wrote it? upgrade perfgate)")
    data = upgrade(data)
    results = data.get("results")
    if not isinstance(results, dict) or not isinstance(results.get("cases"), list) or not results["cases"]:
        raise SchemaError(f"{source}: baseline holds no cases; recreate it with `perfgate baseline update`")
    doc = check(BaselineDocument, {**data, "results": readable(results, source, "results")}, source)
    baseline = from_document(Baseline, doc)
    checked(baseline.run, source)
    baseline.machine_key = baseline.machine_key or baseline.run.environment.get("machine_key", "")
    baseline.suite = baseline.suite if baseline.suite is not None else baseline.run.suite
    return baseline


def load_baseline(path: str | Path) -> Baseline:
    """Read a baseline file; SchemaError (exit 2) naming the file when missing, corrupt or unknown."""
    p = Path(path)
    data = read_json_file(p, "baseline", "create one with `perfgate baseline update` after a run on this machine")
    b = parse_baseline(data, str(p))
    b.path = p
    b.file_schema = data.get("schema") if isinstance(data, dict) else None
    return b


def check_covers(baseline: Baseline, run: RunResult) -> None:
    """SchemaError when the baseline holds none of the run's cases: the wrong file, or another suite's."""
    check_shares(baseline.run, run, str(baseline.path or "baseline"), "baseline", baseline.suite,
                 "pass the right --baseline or update it")


def check_shares(base: RunResult, run: RunResult, where: str, what: str = "baseline", suite: str | None = None,
                 fix: str = "compare with a run of the same suite") -> None:
    """SchemaError when ``base`` (a baseline's run, or another run's results) holds none of ``run``'s cases:
    every case would be `new` to it, and a gate would pass having compared nothing."""
    keys = {c.key for c in base.cases}
    if run.cases and not any(c.key in keys for c in run.cases):
        sample = ", ".join(sorted(keys)[:3]) or "none"
        raise SchemaError(f"{where}: {what} lacks this run's cases (it holds {len(keys)} case(s) of suite "
                          f"{suite if suite is not None else base.suite!r}, e.g. {sample}); {fix}")


def from_run(run: RunResult, previous: Baseline | None = None, source: str | None = None) -> Baseline:
    """A new baseline from ``run``, keeping the previous baseline's calibration for cases still present."""
    keys = {c.key for c in run.cases}
    calibration = {k: v for k, v in (previous.calibration if previous else {}).items() if k in keys}
    return Baseline(run=run, machine_key=run.environment.get("machine_key", "unknown-machine"), suite=run.suite,
                    calibration=calibration, updated_at=time.strftime("%Y-%m-%dT%H:%M:%S%z"), source=source)


def select_cases(run: RunResult, patterns: Sequence[str], source: str) -> list[CaseResult]:
    """The run's cases each pattern names (a case key, or a glob of keys); ConfigError naming a pattern that
    matches none, with the valid keys."""
    chosen: list[CaseResult] = []
    for pattern in patterns:
        found = [c for c in run.cases if c.key == pattern] or [c for c in run.cases
                                                               if fnmatch.fnmatchcase(c.key, pattern)]
        if not found:
            keys = [c.key for c in run.cases]
            raise ConfigError(f"--case {pattern!r} matches no case of {source}; valid: "
                              f"{', '.join(keys[:20]) + (', ...' if len(keys) > 20 else '') or '(none)'}")
        chosen.extend(c for c in found if c not in chosen)
    return chosen


# A case of a baseline measured at another commit than the one its environment records (a case
# `baseline update --case` kept) names its own in its metadata: lockstep settles it, and `perfgate repro`
# reproduces it, against the commit its numbers come from.
CASE_COMMIT_KEYS = ("git_commit", "git_dirty")


def commit_of(run: RunResult, key: str) -> tuple[Any, Any]:
    """(commit, dirty) the case ``key`` of ``run`` was measured at: its own where its metadata names one,
    else the run's environment's. Read from a file: the caller validates both."""
    case = run.case(key)
    own = case.metadata if case is not None else {}
    if "git_commit" in own:
        return own.get("git_commit"), own.get("git_dirty")
    return run.environment.get("git_commit"), run.environment.get("git_dirty")


def with_commit(case: CaseResult, commit: tuple[Any, Any], environment: dict[str, Any]) -> CaseResult:
    """``case`` marked as measured at ``commit`` (commit, dirty) inside a run whose environment is
    ``environment``: its own commit in its metadata only where the two differ."""
    metadata = {k: v for k, v in case.metadata.items() if k not in CASE_COMMIT_KEYS}
    if commit != (environment.get("git_commit"), environment.get("git_dirty")):
        metadata.update(zip(CASE_COMMIT_KEYS, commit, strict=True))
    return case if metadata == case.metadata else replace(case, metadata=metadata)


def with_cases_from(previous: Baseline, run: RunResult, patterns: Sequence[str], source: str, *,
                    allow_failed: bool = False) -> Baseline:
    """``previous`` with the cases ``patterns`` name replaced by (or, when new to it, added from) ``run``'s;
    every other case, the calibration and the expectations stay. The environment's commit becomes the run's
    (the replaced cases were measured there); each case kept names in its metadata the commit it was
    measured at where that is another (``commit_of``), so a gate settles it against its own numbers' code,
    never against a commit where an unaccepted change of it is already in. ConfigError when the run was
    measured in another environment (update the whole baseline then)."""
    chosen = select_cases(run, patterns, source)
    if not allow_failed:
        refuse_failed(replace(run, cases=chosen), source)
    old_env, new_env = previous.run.environment, run.environment
    # the keys and tuning variables a gate would name as an environment difference, a key recorded on one side
    # only included: one baseline holding cases of both would judge every later run against a mixture
    differ = [f"{k} {format_environment(a)} vs {format_environment(b)}"
              for k, (a, b) in environment_diff(old_env, new_env, one_sided=True).items()]
    if differ:
        raise ConfigError(f"cannot replace only some cases of {previous.path or 'the baseline'}: {source} was measured "
                          f"in another environment ({'; '.join(differ[:3])}); update the whole baseline (no --case)")
    env = {**old_env, **{k: new_env.get(k) for k in CASE_COMMIT_KEYS if k in new_env}}
    new_cases = {c.key: with_commit(c, commit_of(run, c.key), env) for c in chosen}
    cases = [new_cases.pop(c.key) if c.key in new_cases else with_commit(c, commit_of(previous.run, c.key), env)
             for c in previous.run.cases] + list(new_cases.values())
    merged = replace(previous.run, cases=cases, environment=env)
    return Baseline(run=merged, machine_key=previous.machine_key, suite=previous.suite, calibration=previous.calibration,
                    updated_at=time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                    source=f"{previous.source or previous.run.run_id}; {len(chosen)} case(s) from {source}")


def updated(run: RunResult, previous: Baseline | None, source: str, patterns: Sequence[str] = (), *,
            allow_failed: bool = False) -> Baseline:
    """`perfgate baseline update`: the whole run as the new baseline, or with ``patterns`` (``--case``) only
    the cases they name replaced in ``previous`` (which must exist). ConfigError when ``previous`` is the
    baseline of another suite (a `--baseline FILE` of another suite): its cases would be judged as this one's."""
    if previous is not None and previous.suite and run.suite and previous.suite != run.suite:
        raise ConfigError(f"{previous.path or 'the baseline'} is the baseline of suite {previous.suite!r}, and {source} "
                          f"a run of suite {run.suite!r}; name a baseline of suite {run.suite!r}, or leave out --baseline")
    # a case `run --changed-since` skipped as unchanged measured nothing: never a baseline's entry
    run = replace(run, cases=[c for c in run.cases if not c.skipped_as_unchanged])
    if not patterns:
        if not allow_failed:
            refuse_failed(run, source)
        refuse_dropping(run, previous, source)
        return from_run(run, previous, source=source)
    if previous is None:
        raise ConfigError("--case replaces cases in a stored baseline, and there is none yet; run "
                          "`perfgate baseline update` without --case to make one")
    return with_cases_from(previous, run, patterns, source, allow_failed=allow_failed)


def pooled(runs: Sequence[RunResult], sources: Sequence[str], quantile: float = PROCESS_QUANTILE) -> RunResult:
    """One run of ``runs`` (several runs of one commit: `perfgate baseline update RUN1 RUN2 ...`): each case's
    worker processes pooled, and its metadata (``runspread.BASELINE_RUNS``) holding how many runs it pools
    and the per-run spread they show (their levels' sd, with its upper bound: perfgate.judging.runspread), which the
    gate's unpaired comparisons then use (GateSettings.run_to_run_term). ConfigError, one line, for runs that
    are not of one suite, commit, machine and environment, that hold other cases, or that have uncommitted
    changes (nothing says they measured the same code)."""
    first, where = runs[0], sources[0]
    if len(runs) == 1:
        return first
    for run, source in zip(runs, sources, strict=True):
        if run.environment.get("git_dirty"):
            raise ConfigError(f"cannot pool {source}: it was measured with uncommitted changes, so nothing says the runs "
                              "measured the same code; pool runs of one clean commit")
        if run is first:
            continue
        # what runs pooled into one baseline must share: the same code, measured on the same machine the
        # same way (environment_keys: the one list the gate and `--case` read too)
        differ = [f"{k} {a} vs {b}" for k, (a, b) in
                  environment_diff(first.environment, run.environment, one_sided=True).items()]
        if first.environment.get("git_commit") != run.environment.get("git_commit"):
            differ.insert(0, f"git_commit {first.environment.get('git_commit')} vs {run.environment.get('git_commit')}")
        if run.suite != first.suite:
            differ.insert(0, f"suite {first.suite} vs {run.suite}")
        if differ:
            raise ConfigError(f"cannot pool {source} with {where}: they differ ({'; '.join(differ[:3])}); a baseline "
                              "pools runs of one commit, machine and environment")
        keys, others = [c.key for c in first.cases], [c.key for c in run.cases]
        if sorted(keys) != sorted(others):
            odd = sorted(set(keys) ^ set(others))
            raise ConfigError(f"cannot pool {source} with {where}: they hold other cases ({', '.join(odd[:3])}"
                              f"{', ...' if len(odd) > 3 else ''}); pool runs of the same selection")
    cases = [_pooled_case([run.case(c.key) for run in runs], quantile) for c in first.cases]
    return replace(first, cases=cases)


def _pooled_case(cases: list[Any], quantile: float) -> CaseResult:
    """One case of several runs as one: its processes pooled (renumbered), their count and spread noted."""
    bad = next((c for c in cases if c.status != STATUS_OK), None)
    if bad is not None:  # a failed run of it: the case stays failed (refuse_failed says so)
        return bad
    levels, sampling_var = runspread.case_levels(cases, quantile)
    spread = runspread.level_spread(levels, sampling_var) if len(levels) == len(cases) else None
    processes = [replace(p, process_index=i) for i, p in enumerate(p for c in cases for p in c.processes)]
    metadata = dict(cases[0].metadata)
    metadata[runspread.BASELINE_RUNS] = {"runs": len(cases), "processes": [len(c.processes) for c in cases],
                                         "run_spread": None if spread is None else spread.to_json()}
    if isinstance(metadata.get("sampling"), dict):
        metadata["sampling"] = {**metadata["sampling"], "processes": len(processes),
                                "stopped": f"pooled from {len(cases)} runs"}
    return replace(cases[0], processes=processes, duration_s=sum(c.duration_s for c in cases), metadata=metadata)


BASELINE_PRECISION_SHARE = 0.5  # a baseline's target: half a plain run's (GateSettings.plain_precision)


HalfWidth = Callable[[CaseResult], "float | None"]  # a case's relative step-time CI half-width (None: < 2 processes)


def thin_cases(run: RunResult, target: float, half_width: HalfWidth) -> list[tuple[str, float | None]]:
    """The ok cases of ``run`` whose step time is not known to within +/- ``target`` (key, half-width), each
    judged by ``half_width`` (a plain run's settling rule: perfgate.judging.sequential.PrecisionRule.half_width)."""
    out = []
    for case in run.cases:
        if case.status == STATUS_OK:
            h = half_width(case)
            if h is None or h > target:
                out.append((case.key, h))
    return out


def recording_lines(run: RunResult, runs: int, plain_precision: float, half_width: HalfWidth,
                    only: Sequence[str] | None = None) -> list[str]:
    """For `perfgate baseline update`: what recording the baseline cost (processes, seconds of measuring),
    whether each case reached a baseline's precision (``BASELINE_PRECISION_SHARE`` of a plain run's) and,
    where it did not, what to do; for pooled runs, the run-to-run spread they showed."""
    cases = [c for c in run.cases if c.status == STATUS_OK and (only is None or c.key in only)]
    if not cases:
        return []
    target = plain_precision * BASELINE_PRECISION_SHARE
    per_case = statistics.median(len(c.processes) for c in cases)
    lines = [f"recorded from {plural(runs, 'run')}: {per_case:g} processes per case (median), "
             f"{format_seconds(sum(c.duration_s for c in cases))} of measuring for {plural(len(cases), 'case')}"]
    spreads = [c.metadata.get(runspread.BASELINE_RUNS, {}).get("run_spread") for c in cases]
    spreads = [s for s in spreads if isinstance(s, dict)]
    if spreads:
        lines.append(f"  spread between the runs (per run): median {statistics.median(s['estimate'] for s in spreads) * 100:.1f}%, "
                     f"upper bound {statistics.median(s['upper'] for s in spreads) * 100:.1f}% ({spreads[0]['dof']} dof); "
                     "the gate's unpaired comparisons use it where it is below the configured term or its estimate above")
    thin = thin_cases(replace(run, cases=cases), target, half_width)
    if thin:
        named = ", ".join(f"{k} ({'one process' if h is None else f'+/-{h * 100:.1f}%'})" for k, h in thin[:3])
        lines.append(f"perfgate: warning: {len(thin)} case(s) short of a baseline's precision (step time within "
                     f"+/-{target * 100:g}%, half a plain run's): {named}{', ...' if len(thin) > 3 else ''}; gates "
                     "against them stay wide: record with `perfgate run --baseline-precision`, or run this commit "
                     "again and pool the runs (`perfgate baseline update RUN1 RUN2 ...`)")
    else:
        lines.append(f"  every case's step time within +/-{target * 100:g}% (a baseline's precision)")
    return lines


Term = Callable[[CaseResult], "tuple[float, str]"]  # a case's unpaired run-to-run term and its source


def commit_less_reach(run: RunResult, term: Term, threshold: Callable[[CaseResult], float],
                      confidence: float, only: Sequence[str] | None = None) -> list[str]:
    """For `perfgate baseline update`: what a stored gate against this baseline can settle where it cannot
    reach the baseline's commit (no lockstep): each ok case's unpaired run-to-run ``term`` (GateSettings.
    run_to_run_term: calibrate's, the pooled runs', or the default) alone spans +/- z * term at
    ``confidence``, so changes inside that are never settled, and `unchanged` is within reach only where
    that is inside the case's ``threshold`` (docs/lab-record.md, "What no baseline takes away")."""
    cases = [c for c in run.cases if c.status == STATUS_OK and (only is None or c.key in only)]
    if not cases:
        return []
    terms = [term(c) for c in cases]
    spans = [math.expm1(run_to_run_log(t, confidence)) for t, _ in terms]
    within = sum(span < threshold(c) for c, span in zip(cases, spans, strict=True))
    sources = Counter(source for _, source in terms).most_common()
    median_span = statistics.median(spans)
    lines = [f"  a stored gate that cannot reach this commit (no lockstep) carries each case's run-to-run term "
             f"(median {statistics.median(t for t, _ in terms) * 100:.1f}%: {sources[0][0]}"
             f"{f'; {len(sources) - 1} other source(s)' if len(sources) > 1 else ''}), alone +/-{median_span * 100:.0f}% "
             f"at {confidence * 100:g}%: it settles only changes past about {median_span * 100:.0f}%, and `unchanged` "
             f"is within reach for {within} of {plural(len(cases), 'case')}"]
    if within < len(cases):
        lines.append("  (a gate that reaches the commit settles the rest in lockstep; `perfgate calibrate --write` "
                     "measures the term on this runner)")
    return lines


def refuse_dropping(run: RunResult, previous: Baseline | None, source: str) -> None:
    """ConfigError when ``run`` is part of its suite (``RunResult.part_of_suite``) and making it the whole baseline would
    drop cases ``previous`` holds: they would be `new` to every later gate, never judged again."""
    part = run.part_of_suite
    if previous is None or not part:
        return
    dropped = [c.key for c in previous.run.cases if run.case(c.key) is None]
    if dropped:
        only = " ".join(f"--case '{w}/*'" for w in sorted({c.spec.workload for c in run.cases}))
        raise ConfigError(f"{source} is {part} of suite {run.suite!r}: making it the whole baseline would drop "
                          f"{len(dropped)} case(s) of {previous.path or 'the baseline'} ({', '.join(dropped[:3])}"
                          f"{', ...' if len(dropped) > 3 else ''}); replace only its cases with `perfgate baseline update {source} "
                          f"{only}`, or update from a run of the whole suite (`perfgate merge` of every shard)")


def refuse_failed(run: RunResult, source: str) -> None:
    failed = [c.key for c in run.cases if c.status == STATUS_FAILED]
    if failed:
        raise SchemaError(f"{source}: {len(failed)} failed case(s) ({', '.join(failed[:3])}"
                          f"{', ...' if len(failed) > 3 else ''}); a baseline of failures hides regressions; "
                          "fix them or pass --allow-failed")


@contextmanager
def updating(path: str | Path) -> Iterator[None]:
    """Held around reading a baseline, changing it and writing it back (`baseline update`, `calibrate
    --write`): two perfgates updating baselines of one folder at once take turns, so neither writes back a
    baseline read before the other's write (its cases or calibration silently lost). An exclusive flock on
    the baseline's folder itself: no lock file among the committed baselines, and the kernel lets it go
    however the process ends. Where the folder cannot be locked (no flock), a no-op."""
    folder = Path(path).parent
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:  # a parent that is a file, a read-only disk: the write could not happen either
        raise unwritable(Path(path), exc) from exc
    try:
        import fcntl

        fd = os.open(folder, os.O_RDONLY)
    except (ImportError, OSError):
        yield
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
        except OSError:
            pass
        yield
    finally:
        os.close(fd)


def write_baseline(baseline: Baseline, path: Path) -> Path:
    """Write atomically: a reader (or a crash) sees the old baseline or the new one. The run it holds is
    written as results.json is, its expectations judged on its cases now."""
    baseline.path = Path(path)
    baseline.run = expect.judge(baseline.run)
    return atomic_write_text(path, baseline.dumps())


def _median_step(case: Any) -> float | None:
    st = case.step_time() if case is not None else None
    return st.value if st else None


def changes(previous: Baseline | None, new: Baseline, only: Sequence[str] | None = None) -> list[str]:
    """What changed from the previous baseline, one line per case (``only``: those case keys), for
    `perfgate baseline update`."""
    if previous is None:
        return [f"new baseline with {len(new.run.cases)} case(s)"]
    lines = []
    for c in new.run.cases:
        if only is not None and c.key not in only:
            continue
        old = previous.run.case(c.key)
        if old is None:
            lines.append(f"  + {c.key}: added ({c.status})")
            continue
        if old.status != c.status:
            lines.append(f"  ~ {c.key}: status {old.status} -> {c.status}")
            continue
        a, b = _median_step(old), _median_step(c)
        if a and b:
            lines.append(f"  ~ {c.key}: step time {format_seconds(a)} -> {format_seconds(b)} ({(b / a - 1) * 100:+.1f}%)")
        # the deterministic counts (ops, kernels, FLOPs, graph breaks): times, memory and the figures derived
        # from them move a little in every run
        metric_changes = [f"{m} {format_value(m, old.metrics[m])} -> {format_value(m, v)}"
                          for m, v in c.metrics.items() if METRIC_KINDS.get(m) == "deterministic"
                          and m in old.metrics and old.metrics[m] != v]
        if metric_changes:
            lines.append(f"      {'; '.join(metric_changes)}")
    for old in previous.run.cases:
        if new.run.case(old.key) is None:
            lines.append(f"  - {old.key}: removed")
    env_keys = ("torch", "torch_cuda", "python", "nvidia_driver", "cpu_model", "device_name")
    env = [f"{k} {format_environment(previous.environment.get(k))} -> {format_environment(new.environment.get(k))}"
           for k in env_keys
           if previous.environment.get(k) != new.environment.get(k)]
    if env:
        lines.append("  environment: " + ", ".join(env))
    return lines


def describe(baseline: Baseline) -> list[str]:
    """`perfgate baseline show`: a header and one line per case."""
    env = baseline.environment
    lines = [
        f"{baseline.path or 'baseline'}  schema {baseline.file_schema}"
        + (f" (read as {SCHEMA}; `perfgate baseline update` rewrites it)" if baseline.file_schema != SCHEMA else ""),
        f"  suite {baseline.suite}  machine {baseline.machine_key}  updated {baseline.updated_at or '?'}"
        f"  from {baseline.source or baseline.run.run_id}",
        "  " + "  ".join(f"{label} {format_environment(env.get(key))[:12 if key == 'git_commit' else None]}"
                         for label, key in (("torch", "torch"), ("cuda", "torch_cuda"), ("python", "python"),
                                            ("driver", "nvidia_driver"), ("cpu", "cpu_model"),
                                            ("threads", "threads"), ("git", "git_commit"))),
    ]
    for c in baseline.run.cases:
        med = _median_step(c)
        cal = baseline.calibration.get(c.key, {})
        floor = runspread.calibrated_floor(cal)
        extra = f"  calibrated noise floor {floor * 100:.1f}%" if floor is not None else ""
        runs, _ = runspread.pooled_spread(c, RUN_TO_RUN_MAX)
        if runs > 1:
            extra += f"  pooled from {runs} runs"
        what = format_seconds(med) + f" per step, {len(c.processes)} process(es)" if c.status == STATUS_OK else c.status
        if "git_commit" in c.metadata:  # kept by `baseline update --case` from another commit
            commit, dirty = commit_of(baseline.run, c.key)
            extra += f"  measured at git {str(commit)[:12]}" + (" with uncommitted changes" if dirty else "")
        lines.append(f"  {c.key:<48} {what}{extra}")
    return lines


def list_baselines(baselines_dir: Path) -> list[Path]:
    # ceilings.json beside them is the machine's roofline (perfgate.judging.roofline), not a baseline
    return sorted(p for p in Path(baselines_dir).glob("*/*.json") if p.name != CEILINGS_FILE)
