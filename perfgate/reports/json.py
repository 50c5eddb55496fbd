"""report.json: the report's computed rows, recommendations and verdicts, for scripts and dashboards."""

from __future__ import annotations

import json
from typing import Any

from perfgate.reports.base import ReportInput
from perfgate.reports.rows import CaseRow


def _growth(report: ReportInput, key: str) -> dict[str, Any] | None:
    """Why a case's memory grew (perfgate.reports.allocations), for a case with a memory regression."""
    g = report.memory_growth.get(key)
    if g is None:
        return None
    return {"metrics": g.metrics, "note": g.note or None, "source": g.source or None,
            "base_total_bytes_per_step": g.base_total, "head_total_bytes_per_step": g.head_total,
            "sites": [{**vars(c), "delta_bytes": c.delta_bytes} for c in g.changes],
            "base_snapshot": str(g.base_snapshot) if g.base_snapshot else None,
            "head_snapshot": str(g.head_snapshot) if g.head_snapshot else None}


def _row(r: CaseRow, report: ReportInput) -> dict[str, Any]:
    return {
        "key": r.key,
        "workload": r.spec.workload,
        "size": r.spec.size,
        "toggles": list(r.spec.toggles),
        "device": r.spec.device,
        "status": r.case.status,
        "failure_class": r.case.failure_class,
        "message": r.case.message,
        "step_time_s": r.step_time.to_json() if r.step_time else None,
        "speedup_vs_eager": r.speedup.to_json() if r.speedup else None,
        "peak_memory_bytes": r.memory_bytes,
        "memory_vs_eager": {**r.memory_ratio.to_json(), "metric": r.memory_metric} if r.memory_ratio else None,
        "metrics": r.case.metrics,
        "accuracy": r.case.accuracy,
        "recommendation": {"action": r.recommendation.action, "reason": r.recommendation.reason},
        "verdicts": [v.to_json() for v in r.verdicts],
        "op_diff": [vars(c) for c in r.op_diff],
        "memory_growth": _growth(report, r.key),
        "trace_dir": r.trace_dir,
        "trace_file": r.trace_file,
    }


class JsonExporter:
    name = "json"
    filename = "report.json"

    def render(self, report: ReportInput) -> bytes:
        b = report.verdict
        doc = {
            "schema": "perfgate.report/1",
            "run_id": report.run.run_id,
            "suite": report.run.suite,
            "verdict": {"state": b.state, "headline": b.headline, "counts": b.counts},
            "comparison": report.comparison.to_json() if report.comparison else None,
            "rows": [_row(r, report) for r in report.rows],
        }
        return (json.dumps(doc, indent=1, default=str) + "\n").encode("utf-8", "backslashreplace")
