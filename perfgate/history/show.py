"""``perfgate history show``: each case's series as a table, CSV or JSON (for pandas). No torch here."""

from __future__ import annotations

import csv
import fnmatch
import io
import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from perfgate.history.reading import Point, SeriesFilter, case_keys, series
from perfgate.history.store import HistoryError, Store
from perfgate.util.formatting import format_value, inert

FORMATS = ("table", "csv", "json")


def select_cases(store: Store, metric: str, patterns: Sequence[str]) -> list[str]:
    """Case keys with ``metric`` matching any pattern: a glob over the workload name or the whole key
    (workload/size/toggles/device); every case without patterns."""
    keys = case_keys(store, metric)
    if not patterns:
        return keys
    return [k for k in keys if any(fnmatch.fnmatchcase(k.split("/")[0], p) or fnmatch.fnmatchcase(k, p)
                                   for p in patterns)]


def parse_since(text: str | None) -> str | None:
    """``--since``: a date or a time (UTC), as the store's time text, for comparison with run start times."""
    if text is None:
        return None
    for fmt in ("%Y-%m-%d", "%Y-%m-%dT%H:%M", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d %H:%M", "%Y-%m-%d %H:%M:%S"):
        try:
            return datetime.strptime(text, fmt).strftime("%Y-%m-%dT%H:%M:%SZ")
        except ValueError:
            continue
    raise HistoryError(f"--since {text!r}: expected a date YYYY-MM-DD or a UTC time YYYY-MM-DDTHH:MM[:SS]")


def read(store: Store, metric: str, patterns: Sequence[str], since: str | None, last: int | None,
         branch: str | None = None, machine_key: str | None = None) -> dict[str, list[Point]]:
    since = parse_since(since)
    keys = select_cases(store, metric, patterns)
    if not keys:
        return {}
    return series(store, SeriesFilter(metric=metric, case_keys=tuple(keys), since=since, last=last, branch=branch,
                                      machine_key=machine_key))


def _ci_text(metric: str, p: Point) -> str:
    if p.ci_low is None or p.ci_high is None:
        return ""
    return f"{format_value(metric, p.ci_low)} .. {format_value(metric, p.ci_high)}"


def render(data: dict[str, list[Point]], metric: str, fmt: str) -> str:
    """The series in ``fmt``: table (one block per case), csv or json (one row per point, long format)."""
    if fmt == "json":
        rows: list[dict[str, Any]] = [{"case": k, "metric": metric, **p.to_json()} for k, pts in data.items() for p in pts]
        return json.dumps(rows, indent=1) + "\n"
    if fmt == "csv":
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(["case", "metric", "run_id", "commit", "branch", "started_at", "machine_key", "value", "ci_low",
                    "ci_high", "n"])
        for k, pts in data.items():
            for p in pts:
                w.writerow([*(inert(t) for t in (k, metric, p.run_id, p.commit or "", p.branch or "", p.started_at,
                                                   p.machine_key or "")),
                            repr(p.value), "" if p.ci_low is None else repr(p.ci_low),
                            "" if p.ci_high is None else repr(p.ci_high), "" if p.n is None else p.n])
        return buf.getvalue()
    lines: list[str] = []
    for k, pts in data.items():
        lines.append(f"{k}  ({metric}, {len(pts)} run(s))")
        lines.append(f"  {'commit':<12}  {'date':<25}  {'value':>12}  95% CI")
        for p in pts:
            lines.append(f"  {(p.commit or '-')[:12]:<12}  {p.started_at[:25]:<25}  {format_value(metric, p.value):>12}  "
                         f"{_ci_text(metric, p)}")
        lines.append("")
    return "\n".join(lines)
