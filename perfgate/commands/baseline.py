"""`perfgate baseline update` and `baseline show`: a run (or several runs of one commit, pooled) made its
suite's stored baseline, whole or case by case, with what changed, what it cost and how precise it is; a
stored baseline printed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from perfgate.judging import baselines
from perfgate.judging.gate_settings import gate_settings
from perfgate.judging.sequential import PrecisionRule
from perfgate.model.config import ConfigError, Settings
from perfgate.model.results import load_results
from perfgate.reports.console import echo
from perfgate.running import run_folders


def update(settings: Settings, results: tuple[str, ...], allow_failed: bool, baseline_file: str | None,
           cases: tuple[str, ...]) -> None:
    """Make ``results`` (default: the latest run) the baseline of its suite on its machine, or only ``cases``
    of it, and print what changed."""
    if not results:
        latest = run_folders.latest_run_dir(settings.reports_dir)
        if latest is None:
            raise ConfigError(f"no run under {settings.reports_dir}; run `perfgate run` first or name RESULTS")
        results = (str(latest),)
    gs = gate_settings(settings)
    run = baselines.pooled([load_results(r) for r in results], results, gs.process_quantile)
    source = " + ".join(results)
    path = Path(baseline_file) if baseline_file else baselines.baseline_path(
        settings.baselines_dir, run.environment.get("machine_key", "unknown-machine"), run.suite or settings.default_suite)
    with baselines.updating(path):  # another update of this folder's baselines waits (no lost update)
        previous = baselines.load_baseline(path) if path.exists() else None
        new = baselines.updated(run, previous, source, cases, allow_failed=allow_failed)
        baselines.write_baseline(new, path)
    chosen = [c.key for c in baselines.select_cases(run, cases, source)] if cases else None
    echo(f"baseline {path} <- {source}" + (f" ({', '.join(cases)} only)" if cases else ""))
    reach = baselines.commit_less_reach(
        new.run, lambda c: gs.run_to_run_term(None, c.key, new.calibration, base=c),
        lambda c: gs.threshold_for(c, c.key, new.calibration)[0], gs.confidence, only=chosen)
    for line in baselines.changes(previous, new, only=chosen) + _recording_lines(run, len(results), gs, chosen) + reach:
        echo(line)
    single = [c.key for c in new.run.cases if c.status == "ok" and len(c.processes) < 2]
    if single:  # compare.judge_time: a one-process side never settles a step-time change
        echo(f"perfgate: warning: {len(single)} case(s) of the baseline hold one worker process "
             f"({', '.join(single[:3])}{', ...' if len(single) > 3 else ''}): against them a step-time change is "
             "always inconclusive, never a regression; update from a run with 2 or more processes per case")
    kept = [c.key for c in new.run.cases if "git_commit" in c.metadata] if cases else []
    if kept:  # baselines.with_cases_from: each is settled against the commit its numbers come from
        echo(f"{len(kept)} case(s) kept from another commit than {source}'s keep theirs, and a gate settles each "
             f"against it ({', '.join(kept[:3])}{', ...' if len(kept) > 3 else ''}; `perfgate baseline show`)")


def _recording_lines(run: Any, runs: int, gs: Any, chosen: list[str] | None) -> list[str]:
    """`baseline update`'s cost and precision lines (perfgate.judging.baselines.recording_lines), a baseline's target
    judged as a run's settling judges its own (perfgate.judging.sequential.PrecisionRule)."""
    rule = PrecisionRule(gs.plain_precision() * baselines.BASELINE_PRECISION_SHARE, gs.process_quantile, gs.confidence)
    return baselines.recording_lines(run, runs, gs.plain_precision(), rule.half_width, only=chosen)


def show(settings: Settings, path: str | None) -> None:
    """Print the baseline at ``path`` (default: every baseline under baselines_dir)."""
    paths = [Path(path)] if path else baselines.list_baselines(settings.baselines_dir)
    if not paths:
        echo(f"no baselines under {settings.baselines_dir}; `perfgate baseline update` makes one")
    for p in paths:
        for line in baselines.describe(baselines.load_baseline(p)):
            echo(line)
