"""`perfgate report`: a stored run's report files (report.html, summary.md, junit.xml, csv, json), compared
with a baseline file or another run, or with the verdicts its own comparison.json holds."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from perfgate.gating.comparison_file import load_comparison_file
from perfgate.model.config import ConfigError, Settings
from perfgate.model.results import load_results
from perfgate.reports import ReportInput, load_comparison, parse_formats, write_all
from perfgate.reports.console import echo
from perfgate.util.storage import check_writable_dir


def write_reports(results: str, baseline: str | None, against_results: str | None, out: str | None, formats: str,
                  load_settings: Callable[[], Settings]) -> None:
    """Write the ``formats`` of the run at ``results`` into ``out`` (default: next to it) and print each file and
    the verdict's headline; ``load_settings`` is called only for a comparison made here."""
    chosen = parse_formats(formats)
    run = load_results(results)
    run_dir = Path(results) if Path(results).is_dir() else Path(results).parent
    out_dir = Path(out) if out else run_dir
    problem = check_writable_dir(out_dir)
    if problem:
        raise ConfigError(problem)
    if baseline or against_results:
        comparison = load_comparison(run, baseline, against_results, load_settings())
    else:  # the verdicts the run's gate, or the latest `perfgate compare` of it, wrote beside it (if any)
        comparison = load_comparison_file(run_dir)
    report = ReportInput(run, comparison, run_dir=run_dir.resolve(), report_dir=out_dir.resolve())
    for path in write_all(report, out_dir, chosen):
        echo(f"wrote {path}")
    echo(report.verdict.headline)
