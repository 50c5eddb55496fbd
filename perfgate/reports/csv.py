"""report.csv: one row per case with the numbers behind every table, through pandas."""

from __future__ import annotations

import pandas as pd

from perfgate.reports.base import ReportInput
from perfgate.util.formatting import inert


class CsvExporter:
    name = "csv"
    filename = "report.csv"

    def render(self, report: ReportInput) -> bytes:
        records = []
        for r in report.rows:
            st, sp, v = r.step_time, r.speedup, r.step_verdict
            records.append({
                "key": r.key,
                "workload": r.spec.workload,
                "size": r.spec.size,
                "toggles": r.spec.toggle_name,
                "device": r.spec.device,
                "status": r.case.status,
                "failure_class": r.case.failure_class,
                "step_time_s": st.value if st else None,
                "step_time_median_s": st.median if st else None,
                "step_time_ci_low_s": st.ci_low if st else None,
                "step_time_ci_high_s": st.ci_high if st else None,
                "speedup_vs_eager": sp.value if sp else None,
                "speedup_low": sp.low if sp else None,
                "speedup_high": sp.high if sp else None,
                "baseline_ratio": v.ratio if v else None,
                "baseline_ratio_low": v.ratio_low if v else None,
                "baseline_ratio_high": v.ratio_high if v else None,
                "verdict": r.marker,
                "peak_memory_bytes": r.memory_bytes,
                "memory_vs_eager": r.memory_change,
                "memory_vs_eager_low": r.memory_ratio.low if r.memory_ratio else None,
                "memory_vs_eager_high": r.memory_ratio.high if r.memory_ratio else None,
                "memory_vs_eager_metric": r.memory_metric or None,
                **{f"metric.{k}": val for k, val in sorted(r.case.metrics.items())},
                "accuracy_verdict": r.case.accuracy.get("verdict"),
                "accuracy_rel_l2": r.case.accuracy.get("rel_l2"),
                "recommendation": r.recommendation.action,
                "recommendation_reason": r.recommendation.reason,
                "message": r.case.message,
            })
        frame = pd.DataFrame.from_records([{k: inert(v) for k, v in rec.items()} for rec in records])
        return frame.to_csv(index=False).encode("utf-8", "backslashreplace")
