"""Why memory grew: the allocation sites of a case's base and head, and which account for the difference. No torch.

The profile pass records where one step allocates (``profile["memory_sites"]``, perfgate.worker.allocations:
the profiler's memory events per op on CPU, the CUDA allocator's history on a GPU, whose snapshot file
``profile["memory_snapshot"]`` opens in https://pytorch.org/memory_viz). For a case with a memory
regression (a verdict on a memory metric: peak_rss_bytes, peak_cuda_allocated_bytes, ...), ``memory_growth``
lines base and head sites up by site and op, largest growth first: the report's "where memory grew"
beside the op and kernel diff. Sites come from an untrusted results file: read through the declared
ProfileDocument, so a malformed one reads as none.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from perfgate.model.comparison import Comparison, Verdict
from perfgate.model.results import STATUS_OK, CaseResult
from perfgate.util.formatting import format_bytes
from perfgate.util.vocabulary import METRIC_KINDS

MEMORY_VIZ_URL = "https://pytorch.org/memory_viz"
GROWTH_ROWS = 10  # sites a report shows per case; the rest are counted


@dataclass(frozen=True)
class SiteChange:
    """One allocation site (function and file, and the op on CPU) in base and head, bytes per step."""

    site: str
    op: str | None
    line: int | None  # the head's line, else the base's
    base_bytes: float
    head_bytes: float
    base_allocations: float
    head_allocations: float

    @property
    def delta_bytes(self) -> float:
        return self.head_bytes - self.base_bytes

    @property
    def site_text(self) -> str:
        """'grow_buffer (memory_growth.py:21)': the site with its line."""
        if self.line is not None and self.site.endswith(")"):
            return f"{self.site[:-1]}:{self.line})"
        return self.site

    @property
    def where(self) -> str:
        """'grow_buffer (memory_growth.py:21) via aten::zeros'."""
        return f"{self.site_text} via {self.op}" if self.op else self.site_text

    @property
    def text(self) -> str:
        """'grow_buffer (memory_growth.py:21) via aten::zeros +32 MiB/step (0 B -> 32 MiB)'."""
        sign = "+" if self.delta_bytes >= 0 else "-"
        return (f"{self.where} {sign}{format_bytes(abs(self.delta_bytes))}/step "
                f"({format_bytes(self.base_bytes)} -> {format_bytes(self.head_bytes)})")


@dataclass
class MemoryGrowth:
    """A memory regression's sites, base against head, and the snapshot files where there are some."""

    case_key: str
    metrics: list[str]  # the memory metrics that regressed
    changes: list[SiteChange] = field(default_factory=list)  # every site that moved, largest growth first
    base_total: float | None = None  # bytes per step over all recorded sites (each side's own total)
    head_total: float | None = None
    base_snapshot: Path | None = None
    head_snapshot: Path | None = None
    source: str = ""
    note: str = ""  # why there is no site diff, where there is none

    @property
    def grown(self) -> list[SiteChange]:
        """The sites that grew: what accounts for the difference."""
        return [c for c in self.changes if c.delta_bytes > 0]

    @property
    def shown(self) -> list[SiteChange]:
        return self.changes[:GROWTH_ROWS]

    @property
    def more(self) -> int:
        return max(0, len(self.changes) - GROWTH_ROWS)

    @property
    def delta_total(self) -> float | None:
        if self.base_total is None or self.head_total is None:
            return None
        return self.head_total - self.base_total

    @property
    def headline(self) -> str:
        """One line: the sites that grew most, or why none are named."""
        if self.note:
            return self.note
        grown = self.grown[:3]
        if not grown:
            return "no allocation site of one step grew (the growth is in memory held outside the step)"
        return "; ".join(c.text for c in grown)


def memory_regressions(verdicts: list[Verdict]) -> list[str]:
    """The memory metrics (METRIC_KINDS ``memory``) among ``verdicts`` that fail the gate or regressed."""
    return [v.metric for v in verdicts
            if METRIC_KINDS.get(v.metric) == "memory" and (v.kind == "regression" or v.fails_gate)]


def sites_of(case: CaseResult | None) -> tuple[dict[tuple[str, str | None], dict[str, Any]], dict[str, Any]] | None:
    """A case's recorded sites by (site, op), and the record around them; None where it recorded none."""
    if case is None:
        return None
    record = case.profile.get("memory_sites")
    if not isinstance(record, dict) or not isinstance(record.get("sites"), list):
        return None
    out: dict[tuple[str, str | None], dict[str, Any]] = {}
    for s in record["sites"]:
        if isinstance(s, dict) and isinstance(s.get("site"), str):
            key = (s["site"], s.get("op") if isinstance(s.get("op"), str) else None)
            if key in out:  # one key twice (a hand-made file): add them up
                out[key] = {**s, "bytes_per_step": _number(out[key].get("bytes_per_step"))
                            + _number(s.get("bytes_per_step"))}
            else:
                out[key] = s
    return out, record


def _number(x: Any) -> float:
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else 0.0


def _line(x: Any) -> int | None:
    return x if isinstance(x, int) and not isinstance(x, bool) else None


def site_diff(base: dict[tuple[str, str | None], dict[str, Any]],
              head: dict[tuple[str, str | None], dict[str, Any]]) -> list[SiteChange]:
    """Every site whose bytes per step differ between ``base`` and ``head``, largest growth first (a site in
    one side's top list only counts 0 on the other)."""
    changes = []
    for key in base.keys() | head.keys():
        b, h = base.get(key, {}), head.get(key, {})
        change = SiteChange(key[0], key[1], _line(h.get("line")) or _line(b.get("line")),
                            _number(b.get("bytes_per_step")), _number(h.get("bytes_per_step")),
                            _number(b.get("allocations_per_step")), _number(h.get("allocations_per_step")))
        if change.delta_bytes != 0:
            changes.append(change)
    changes.sort(key=lambda c: (-c.delta_bytes, c.site, c.op or ""))
    return changes


def _snapshot(case: CaseResult | None, folder: Path | None) -> Path | None:
    """The case's snapshot file where it lies inside ``folder`` (its run folder), else None."""
    rel = case.profile.get("memory_snapshot") if case is not None else None
    if not isinstance(rel, str) or folder is None:
        return None
    path = (folder / rel).resolve()
    root = folder.resolve()
    return path if path.is_relative_to(root) and path.is_file() else None


def memory_growth(case: CaseResult, base: CaseResult | None, verdicts: list[Verdict], run_dir: Path | None = None,
                  base_dir: Path | None = None) -> MemoryGrowth | None:
    """The sites that account for ``case``'s memory regression against ``base``; None without one."""
    metrics = memory_regressions(verdicts)
    if not metrics:
        return None
    growth = MemoryGrowth(case.key, metrics, base_snapshot=_snapshot(base, base_dir),
                          head_snapshot=_snapshot(case, run_dir))
    head, old = sites_of(case if case.status == STATUS_OK else None), sites_of(base)
    if head is None:
        growth.note = "this run recorded no allocation sites for the case"
    elif old is None:
        growth.note = "the baseline recorded no allocation sites for the case (measured before perfgate recorded them?)"
    if head is None or old is None:
        return growth
    growth.changes = site_diff(old[0], head[0])
    growth.base_total = _number(old[1].get("total_bytes_per_step")) if "total_bytes_per_step" in old[1] else None
    growth.head_total = _number(head[1].get("total_bytes_per_step")) if "total_bytes_per_step" in head[1] else None
    source = head[1].get("source")
    growth.source = source if isinstance(source, str) else ""
    return growth


def growth_by_case(rows: list[Any], comparison: Comparison | None, run_dir: Path | None,
                   base_dirs: dict[str, Path]) -> dict[str, MemoryGrowth]:
    """MemoryGrowth by case key for every row (perfgate.reports.rows.CaseRow) with a memory regression;
    ``base_dirs``: the base side's run folder per case, where one is kept (``--against``)."""
    if comparison is None:
        return {}
    out = {}
    for r in rows:
        g = memory_growth(r.case, r.baseline_case, r.verdicts, run_dir, base_dirs.get(r.key))
        if g is not None:
            out[r.key] = g
    return out


def console_lines(comparison: Comparison, run: Any, run_dir: Path | None) -> list[str]:
    """Under the console's regressions: per memory regression, the sites that grew most."""
    if comparison.baseline is None or run is None:
        return []
    lines = []
    for key in dict.fromkeys(v.case_key for v in comparison.verdicts):
        case = run.case(key)
        if case is None:
            continue
        g = memory_growth(case, comparison.baseline.case(key), comparison.for_case(key), run_dir)
        if g is not None:
            lines.append(f"  memory of {key} grew at: {g.headline}")
    return lines
