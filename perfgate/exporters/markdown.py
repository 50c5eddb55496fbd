"""summary.md: a pull-request comment or a GitHub job summary, always under GitHub's size limit.

The verdict line, a table of regressions and wins with ratios and CIs, then collapsed details for the
rest. When a suite is too large the details are cut at a row boundary with a note pointing to the HTML.
"""

from __future__ import annotations

from perfgate.exporters.base import CaseRow, ReportInput, format_ratio, format_value
from perfgate.model import Verdict

# GitHub rejects issue and pull-request comments longer than 65536 characters; keep a margin for
# whatever a workflow prepends (a header, a link).
GITHUB_COMMENT_LIMIT = 65536
SIZE_BUDGET = GITHUB_COMMENT_LIMIT - 1536


def cell(text: object) -> str:
    """Text safe inside a Markdown table cell and inert as HTML (GitHub renders inline HTML)."""
    s = "-" if text is None else str(text)
    s = s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    s = s.replace("|", "\\|").replace("\r", " ").replace("\n", " ").replace("`", "'")
    return s


def _verdict_value(v: Verdict) -> str:
    if v.ratio is not None:
        return format_ratio(v.ratio, v.ratio_low, v.ratio_high)
    if v.current is not None or v.baseline is not None:
        return f"{format_value(v.metric, v.baseline)} -> {format_value(v.metric, v.current)}"
    return "-"


def _verdict_table(items: list[tuple[CaseRow | None, Verdict]]) -> list[str]:
    lines = ["| verdict | case | metric | change (ratio [CI]) | rule |", "|---|---|---|---|---|"]
    for _, v in items:
        lines.append(f"| **{cell(v.kind)}** | `{cell(v.case_key)}` | {cell(v.metric)} | {cell(_verdict_value(v))} "
                     f"| {cell(v.rule)} |")
    return lines


def _case_line(r: CaseRow) -> str:
    return (f"| `{cell(r.key)}` | {cell(r.case.status)} | {cell(r.step_time_text)} | {cell(r.speedup_text)} "
            f"| {cell(r.change_text)} | {cell(r.recommendation.action)} | {cell(r.status_text if r.case.status != 'ok' else '')} |")


CASE_HEADER = ["| case | status | step time | speedup vs eager | vs baseline | recommendation | note |",
               "|---|---|---|---|---|---|---|"]


class MarkdownExporter:
    name = "md"
    filename = "summary.md"

    def __init__(self, size_budget: int = SIZE_BUDGET) -> None:
        self.size_budget = size_budget

    def render(self, report: ReportInput) -> bytes:
        b = report.verdict
        icon = {"pass": "✅", "fail": "❌"}.get(b.state, "ℹ️")
        head = [f"## perfgate: {icon} {cell(b.headline)}", ""]
        run = report.run
        head.append(f"Run `{cell(run.run_id)}`, suite `{cell(run.suite)}`"
                    + (f", baseline `{cell(report.comparison.baseline_source)}`" if report.comparison else "")
                    + f". Full report: `{report.html_filename}` in the run's artifacts.")
        head.append("")
        if report.comparison:
            for w in report.comparison.warnings:
                head.append(f"> ⚠️ {cell(w)}")
            if report.comparison.warnings:
                head.append("")
            gated = [(None, v) for v in report.comparison.verdicts if v.fails_gate]
            wins = [(None, v) for v in report.comparison.verdicts if v.kind in ("win", "fixed")]
            if gated:
                head += ["### Regressions", "", *_verdict_table(gated), ""]
            if wins:
                head += ["### Wins", "", *_verdict_table(wins), ""]
            if not gated and not wins:
                head += ["No regressions and no wins against the baseline.", ""]
        text = "\n".join(head) + "\n"
        tail = "\n</details>\n"
        cut_note = (f"\n\n*… {{n}} more case(s) not shown to stay under GitHub's comment size limit; "
                    f"see `{report.html_filename}` in the run's artifacts.*\n")
        if len(text) > self.size_budget:
            # even the verdict tables are too long: keep the start, cut at a line, point to the HTML
            cut = text[: self.size_budget - 400].rsplit("\n", 1)[0]
            return (cut + "\n\n*… truncated to stay under GitHub's comment size limit; "
                    f"see `{report.html_filename}` in the run's artifacts.*\n").encode("utf-8")
        body = [f"<details><summary>All {len(report.rows)} case(s)</summary>", "", *CASE_HEADER]
        size = len(text) + sum(len(s) + 1 for s in body) + len(tail)
        shown = 0
        for r in report.rows:
            line = _case_line(r)
            if size + len(line) + 1 + len(cut_note) + 16 > self.size_budget:
                break
            body.append(line)
            size += len(line) + 1
            shown += 1
        out = text + "\n".join(body)
        if shown < len(report.rows):
            out += cut_note.format(n=len(report.rows) - shown)
        return (out + tail).encode("utf-8")
