"""GitHub Actions glue with no torch: the job summary. The gate's markdown itself comes from the
markdown exporter (summary.md); this module only decides where it goes."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

STEP_SUMMARY_VAR = "GITHUB_STEP_SUMMARY"


def step_summary_path(env: Mapping[str, str] | None = None) -> Path | None:
    """The job-summary file GitHub Actions set for this step, or None outside Actions."""
    value = (os.environ if env is None else env).get(STEP_SUMMARY_VAR, "").strip()
    return Path(value) if value else None


def append_step_summary(markdown: str, env: Mapping[str, str] | None = None) -> Path | None:
    """Append ``markdown`` to the job summary when running under GitHub Actions; returns the file written,
    or None when there is none. Appends, never replaces: earlier steps' summaries stay."""
    path = step_summary_path(env)
    if path is None:
        return None
    with path.open("a", encoding="utf-8") as fh:
        fh.write(markdown if markdown.endswith("\n") else markdown + "\n")
    return path


def publish_summary(run_dir: str | Path, env: Mapping[str, str] | None = None) -> Path | None:
    """Append the run's summary.md (written by the markdown exporter) to the job summary, when both
    exist; returns the job-summary file written, or None."""
    summary = Path(run_dir) / "summary.md"
    if not summary.is_file():
        return None
    return append_step_summary(summary.read_text(encoding="utf-8"), env)
