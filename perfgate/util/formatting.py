"""How numbers and names print in every report: units (seconds from perfgate.util.stats, bytes, counts,
rates), ratios with their CI, a metric's value in its unit, and the element id that report.html and
history.html share. Standard library and perfgate.util.stats only, so the exporters and the history pages
(independent of each other) both print through it."""

from __future__ import annotations

import json
import re
from typing import Any

from perfgate.util.stats import format_seconds

__all__ = ["inert", "failure_note", "format_bytes", "format_count", "format_environment", "format_rate",
           "format_ratio", "format_seconds", "format_value", "plural", "trend_anchor"]


def plural(n: float, one: str, many: str | None = None, *, shown: str | None = None) -> str:
    """'1 case', '3 cases', '1 process', '2 processes': ``n`` (or ``shown``, its text where it is formatted
    otherwise) and the noun that agrees with it (``many``, else ``one`` + "s")."""
    return f"{n if shown is None else shown} {one if n == 1 else many or one + 's'}"


def format_bytes(n: float | None) -> str:
    if n is None:
        return "-"
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(n) >= size:
            return f"{n / size:.3g} {unit}"
    return f"{n:.0f} B"


def failure_note(failure_class: str | None, message: str | None, limit: int = 200) -> str:
    """Why a case did not run, for a line or table whose status column already says skipped or failed:
    ``[class] `` and the last non-empty line of the message (where Python puts the exception), shortened."""
    lines = [ln.strip() for ln in (message or "").strip().splitlines() if ln.strip()]
    note = (f"[{failure_class}] " if failure_class else "") + (lines[-1] if lines else "")
    return note if len(note) <= limit else note[: limit - 3] + "..."


def format_environment(value: Any) -> str:
    """An environment entry as a person reads it: text as is, nothing recorded (no CUDA, no driver, not a
    git checkout) as "none", anything else as JSON (false, 2, a list)."""
    if value is None:
        return "none"
    return value if isinstance(value, str) else json.dumps(value, default=str)


def format_count(x: float | None) -> str:
    if x is None:
        return "-"
    return f"{x:.0f}" if float(x).is_integer() else f"{x:.3g}"


def format_rate(x: float | None, unit: str = "FLOP/s") -> str:
    if x is None:
        return "-"
    for prefix, size in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(x) >= size:
            return f"{x / size:.3g} {prefix}{unit}"
    return f"{x:.3g} {unit}"


def format_ratio(value: float | None, low: float | None = None, high: float | None = None) -> str:
    if value is None:
        return "-"
    if low is None or high is None:
        return f"{value:.3f}x"
    return f"{value:.3f}x [{low:.3f}, {high:.3f}]"


def format_value(metric: str, x: float | None) -> str:
    """A verdict's baseline or current value in the metric's unit: seconds, bytes or a count."""
    if x is None:
        return "-"
    if metric == "step_time" or metric.endswith("_s"):
        return format_seconds(x)
    if metric.endswith("_per_s"):
        return format_rate(x, "/s")
    if "bytes" in metric.split("_"):  # peak_rss_bytes, cpu_bytes_allocated_per_step, bytes_per_step
        return format_bytes(x)
    return format_count(x)


def trend_anchor(case_key: str, metric: str) -> str:
    """The element id of a case's chart in history.html: report.html links there."""
    return "trend-" + re.sub(r"[^A-Za-z0-9_-]+", "-", f"{case_key}-{metric}").strip("-")


# A CSV cell a spreadsheet would read as a formula (OWASP "CSV injection"): a workload name, branch or
# failure message of `=HYPERLINK("https://...")` or `@SUM(...)` from an untrusted results.json ran as one
# when report.csv or `history show --format csv` was opened. Such text gets a leading ' (text; inert).
FORMULA_START = ("=", "+", "-", "@", "\t", "\r", "\n")


def inert(value: object) -> object:
    """``value``, with a ' in front where it is text a spreadsheet would take for a formula."""
    return "'" + value if isinstance(value, str) and value.startswith(FORMULA_START) else value
