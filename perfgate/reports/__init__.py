"""What a person reads (the console, the report formats, trace pairs, repro commands); the formats share one interface,
ReportInput in, bytes out, one module per format, one registry.

``write_all`` renders the chosen formats and writes each file atomically next to results.json.
No torch here (the TensorBoard writer lives apart, in exporters/tensorboard.py).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from perfgate.model.comparison import Comparison
from perfgate.model.config import ConfigError
from perfgate.model.results import RunResult, load_results
from perfgate.reports.base import Exporter, ReportInput
from perfgate.util.storage import atomic_write_text

# What every `perfgate run` writes next to results.json, rewritten after each case.
RUN_FORMATS = ("html", "md", "junit")


def registry() -> dict[str, Exporter]:
    """Every exporter by its --format name."""
    from perfgate.reports.csv import CsvExporter
    from perfgate.reports.html import HtmlExporter
    from perfgate.reports.json import JsonExporter
    from perfgate.reports.junit import JunitExporter
    from perfgate.reports.markdown import MarkdownExporter

    exporters: list[Exporter] = [HtmlExporter(), MarkdownExporter(), JunitExporter(), CsvExporter(), JsonExporter()]
    return {e.name: e for e in exporters}


def parse_formats(text: str | Iterable[str]) -> list[str]:
    """'html,md' -> ['html', 'md']; raises ConfigError naming the valid formats for anything else."""
    items = text.split(",") if isinstance(text, str) else list(text)
    names = [s.strip().lower() for s in items if s.strip()]
    known = registry()
    aliases = {"markdown": "md", "xml": "junit"}
    out = []
    for n in names:
        n = aliases.get(n, n)
        if n not in known:
            raise ConfigError(f"unknown report format {n!r}; valid: {', '.join(known)}")
        if n not in out:
            out.append(n)
    if not out:
        raise ConfigError(f"no report format given; valid: {', '.join(known)}")
    return out


def write_all(report: ReportInput, out_dir: str | Path, formats: Iterable[str] = RUN_FORMATS) -> list[Path]:
    """Render each format and write it atomically under ``out_dir``; returns the paths written."""
    known = registry()
    out = Path(out_dir)
    written = []
    for name in formats:
        exporter = known[name]
        data = exporter.render(report)
        written.append(atomic_write_bytes(out / exporter.filename, data))
    return written


def atomic_write_bytes(path: Path, data: bytes) -> Path:
    # every exporter produces UTF-8 text; storage's atomic writer takes str
    return atomic_write_text(path, data.decode("utf-8"))


__all__ = ["Exporter", "ReportInput", "RUN_FORMATS", "parse_formats", "registry", "write_all"]


def write_run_reports(run: RunResult, run_dir: str | Path, comparison: Comparison | None = None) -> list[Path]:
    """What `perfgate run` calls before the first case and after every case: report.html, summary.md
    and junit.xml next to results.json, so a crash part-way still leaves a report of what finished."""
    return write_all(ReportInput(run, comparison, run_dir=Path(run_dir)), run_dir, RUN_FORMATS)


def load_comparison(run: RunResult, baseline: str | None = None, against_results: str | None = None,
                    settings: Any = None) -> Comparison | None:
    """The Comparison `perfgate report` shows: none, against a stored baseline file (with its calibration), or
    against another run's results.json, judged with ``settings``' gate (the defaults without) at the
    confidence `perfgate compare` would use, never a level the file states, with ``settings``'
    acknowledgements applied."""
    if baseline is None and against_results is None:
        return None
    if baseline is not None and against_results is not None:
        raise ConfigError("give --baseline or --against-results, not both")
    from perfgate.judging import baselines, compare
    from perfgate.judging.gate_settings import gate_settings
    from perfgate.judging.sequential import look_confidence

    calibration = None
    if against_results:
        other, source = load_results(against_results), str(against_results)
    else:
        stored = baselines.load_baseline(baseline)  # type: ignore[arg-type]  # one of the two is given
        other, source, calibration = stored.run, str(baseline), stored.calibration
    gate = gate_settings(settings) if settings is not None else None
    comparison = compare.compare_runs(run, other, gate, baseline_source=source, calibration=calibration,
                                      look_confidence=look_confidence(gate, settings.processes) if gate else None)
    return compare.acknowledged(comparison, settings)
