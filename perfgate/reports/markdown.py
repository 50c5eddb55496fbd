"""summary.md: a pull-request comment or a GitHub job summary, always under GitHub's size limit.

The verdict line, a table of regressions and wins with ratios and CIs, then collapsed details for the
rest. When a suite is too large the details are cut at a row boundary with a note pointing to the HTML.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from perfgate.model.acknowledge import match_text
from perfgate.model.comparison import Acknowledgement, Comparison, Verdict
from perfgate.reports import allocations, traces
from perfgate.reports.base import ReportInput
from perfgate.reports.conditions import measured_under
from perfgate.reports.cost import read_cost
from perfgate.reports.rows import CaseRow
from perfgate.reports.scope import change_selection, environment_change
from perfgate.util.formatting import format_ratio, format_value
from perfgate.util.stats import JUDGED_RATIO_NOTE

# GitHub rejects issue and pull-request comments longer than 65536 characters, and the comment step of
# the GPU workflow (.github/workflows/perfgate-gpu.yml and perfgate init's template) cuts summary.md at
# COMMENT_CUT JavaScript characters (UTF-16 code units: an emoji counts two) wherever that falls. The
# summary stays under the cut by construction, with a margin, so that cut never lands inside a code span.
GITHUB_COMMENT_LIMIT = 65536
COMMENT_CUT = 60_000
SIZE_BUDGET = COMMENT_CUT - 1_000
# a forced line (the title, the run line) quotes data: each quoted value is cut to this many characters
FORCED_VALUE_CHARS = 300


def comment_length(text: str) -> int:
    """``text``'s length as GitHub's JavaScript counts it: UTF-16 code units."""
    return len(text.encode("utf-16-le", "surrogatepass")) // 2  # a lone surrogate (from a worker) is one unit


# Text in a cell that GitHub renders as exactly these characters: letters, digits, spaces and the
# punctuation of perfgate's own numbers and words ("1.050x [1.02, 1.08]", "12.3 MiB -> 13.0 MiB").
# Anything else (an @-mention, an image, a link, a URL, HTML, emphasis, an issue reference) is not plain.
_PLAIN = re.compile(r"[\w .,;:%+=/()\[\]<>'~±…-]*")
_LIVE = re.compile(r"\]\(|://|www\.|\.\w+/|:\w+:")  # a link, a URL, an autolinked domain path, an emoji code


def cell(text: object) -> str:
    """A Markdown table cell that shows ``text`` as the characters it is, whatever it holds: plain text
    (perfgate's numbers and words) as it is, with HTML's and tables' special characters escaped; anything
    else as one code span (``code``), where GitHub renders no mention, link, image or HTML."""
    s = " ".join(("-" if text is None else str(text)).split()) or "-"
    if not _PLAIN.fullmatch(s) or _LIVE.search(s):
        return code(s)
    return s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace("|", "\\|")


def _forced(text: object) -> str:
    """A value quoted on a line that is always written: one code span, its text cut to FORCED_VALUE_CHARS."""
    s = "-" if text is None else str(text)
    return code(s if len(s) <= FORCED_VALUE_CHARS else s[:FORCED_VALUE_CHARS - 1] + "…", False)


def code(text: object, in_table: bool = True) -> str:
    """``text`` as one inline code span: inside it GitHub renders no links, images, @-mentions, emphasis
    or HTML, so a failure message or a name from a results file shows as the characters it is. The fence
    is longer than any run of backticks in the text; line breaks become spaces."""
    s = " ".join(("-" if text is None else str(text)).split()) or "-"
    if in_table:  # GitHub's tables split cells on | even inside code spans, unless escaped
        s = s.replace("|", "\\|")
    longest = max((len(run) for run in re.findall("`+", s)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if s.startswith("`") or s.endswith("`") else ""
    return f"{fence}{pad}{s}{pad}{fence}"


def _verdict_value(v: Verdict) -> str:
    if v.ratio is not None:
        return format_ratio(v.ratio, v.ratio_low, v.ratio_high)
    if v.current is not None or v.baseline is not None:
        return f"{format_value(v.metric, v.baseline)} -> {format_value(v.metric, v.current)}"
    return "-"


def _verdict_table(items: Sequence[tuple[CaseRow | None, Verdict]]) -> list[str]:
    lines = ["| verdict | case | metric | change (ratio [CI]) | rule |", "|---|---|---|---|---|"]
    for _, v in items:
        lines.append(f"| **{cell(v.kind)}** | {code(v.case_key)} | {code(v.metric)} | {cell(_verdict_value(v))} "
                     f"| {code(v.rule)} |")
    return lines


def _case_line(r: CaseRow) -> str:
    note = code(r.failure_note) if r.case.status != "ok" else ""
    return (f"| {code(r.key)} | {cell(r.case.status)} | {cell(r.step_time_text)} | {cell(r.speedup_text)} "
            f"| {cell(r.change_text)} | {cell(r.recommendation.action)} | {note} |")


def _outcome_label(o: object) -> str:
    """'missed' (fails the gate), 'missed (warn)', 'unknown'."""
    outcome, severity = o.outcome, o.rule.severity  # type: ignore[attr-defined]
    return f"{outcome} (warn)" if outcome == "missed" and severity == "warn" else outcome


ACK_HEADER = ["| state | entry | case pattern | metric | terms | reason | matched now |", "|---|---|---|---|---|---|---|"]
_MATCH_WORDS = {"acknowledged": "acknowledged", "past-bound": "past its bound: a regression",
                "expired": "a regression again"}


def _ack_row(a: Acknowledgement) -> str:
    matched = "; ".join(f"{match_text(m)} ({_MATCH_WORDS[m.outcome]})" for m in a.matches) or "-"
    state = {"in-force": "in force", "expired": f"expired {a.expires}"}.get(a.state, a.state)
    return (f"| **{cell(state)}** | {code(a.entry)} | {code(a.case)} | {code(a.metric)} | {cell(a.terms)} "
            f"| {code(a.reason)} | {code(matched)} |")


def _acknowledgements(out: _Budget, comp: Comparison) -> None:
    """The acknowledged verdicts, every acknowledgement in force or expired, and a note of those that
    matched no regression."""
    acks = comp.acknowledgements
    if not acks:
        return
    shown = [a for a in acks if a.state != "unmatched"]
    acked = [(None, v) for v in comp.verdicts if v.kind == "acknowledged"]
    out.table(["### Acknowledged regressions", "",
               f"Regressions that `[[tool.perfgate.acknowledge]]` entries in force cover do not fail the gate; "
               f"expiry judged on {comp.acknowledged_on or '-'}.", ""],
              _verdict_table([]), _verdict_table(acked)[2:] + [""] if acked else [])
    if not acked:
        out.add("### Acknowledgements")
        out.add("")
    out.table([], ACK_HEADER, [_ack_row(a) for a in shown] + ([""] if shown else []))
    unmatched = [a for a in acks if a.state == "unmatched"]
    if unmatched:
        out.add(f"Note: {len(unmatched)} acknowledgement(s) matched no regression (fixed, or a pattern that names "
                f"no case): " + ", ".join(f"{code(a.entry, False)} {code(a.case, False)}" for a in unmatched))
        out.add("")


def _side_text(report: ReportInput, side: traces.TraceSide) -> str:
    _, text = report.trace_link(side)
    return f"{side.label} {code(text, False)}" if text else f"{side.label}: none ({code(side.note, False)})"


def _trace_lines(out: _Budget, report: ReportInput) -> None:
    """One line per regressed case: its base and head traces (paths relative to the report's folder) and
    the kernel (op) that moved most between them; report.html has the whole difference."""
    pairs = report.trace_pairs
    if not pairs:
        return
    for key, pair in pairs.items():
        mover = f"; top mover: {code(pair.top_mover_text, False)}" if pair.top_mover_text else ""
        unread = f"; {code(pair.notes[0], False)}" if pair.notes else ""
        out.add(f"- Traces of {code(key, False)}: {_side_text(report, pair.base)}, {_side_text(report, pair.head)}"
                f"{mover}{unread}")
    out.add("")
    out.add(f"Open a trace in Perfetto ({traces.PERFETTO_URL}, \"Open trace file\"; read in the browser, "
            f"not uploaded); `perfgate trace CASE` prints both paths. The kernel-by-kernel difference is in `{report.html_filename}`.")
    out.add("")


def _memory_lines(out: _Budget, report: ReportInput) -> None:
    """One line per memory regression: the allocation sites that grew most between base and head
    (perfgate.reports.allocations); report.html has every site, and links the CUDA snapshots."""
    growth = report.memory_growth
    if not growth:
        return
    for key, g in growth.items():
        out.add(f"- Memory of {code(key, False)} grew at: {code(g.headline, False)}")
    if any(g.base_snapshot or g.head_snapshot for g in growth.values()):
        out.add(f"- CUDA allocator snapshots beside the traces (`memory_snapshot.pickle`) open in "
                f"{allocations.MEMORY_VIZ_URL}.")
    out.add("")


def _repros(out: _Budget, report: ReportInput) -> None:
    """Under the regressions: per case, the command that measures it again, base and head in lockstep."""
    repros = report.repros
    if not repros:
        return
    out.table(["Reproduce each one alone, base and head in lockstep (`perfgate repro CASE --results RUN_DIR` "
               "adds a form that keeps both sides' traces):", ""], [],
              [f"- {code(key, False)}: {code(r.command, False)}" for key, r in repros.items()] + [""])


CASE_HEADER = ["| case | status | step time | speedup vs eager | vs baseline | recommendation | note |",
               "|---|---|---|---|---|---|---|"]


class _Budget:
    """Whole lines added while they fit under the size budget (counted as ``comment_length``); counts the
    rows that had to be left out."""

    def __init__(self, limit: int) -> None:
        self.limit, self.used, self.left_out = limit, 0, 0
        self.lines: list[str] = []

    def add(self, line: str, force: bool = False) -> bool:
        size = comment_length(line) + 1
        if not force and self.used + size > self.limit:
            return False
        self.lines.append(line)
        self.used += size
        return True

    def table(self, title: list[str], header: list[str], rows: list[str]) -> None:
        if not rows:
            return
        if not all(self.add(x) for x in [*title, *header]):
            self.left_out += len(rows)
            return
        for i, row in enumerate(rows):
            if not self.add(row):
                self.left_out += len(rows) - i
                return


class MarkdownExporter:
    name = "md"
    filename = "summary.md"

    def __init__(self, size_budget: int = SIZE_BUDGET) -> None:
        self.size_budget = size_budget

    def render(self, report: ReportInput) -> bytes:
        html = report.html_filename
        note = f"*… {{n}} more row(s) in `{html}` (in the run's artifacts), left out to fit GitHub's comment size.*"
        # room for the closing tag and the truncation note, whatever is cut
        out = _Budget(self.size_budget - comment_length(note) - 64)
        b = report.verdict
        icon = {"pass": "✅", "fail": "❌", "no-evidence": "⚠️"}.get(b.state, "ℹ️")
        run = report.run
        out.add(f"## perfgate: {icon} {cell(b.headline)}", force=True)
        out.add("", force=True)
        selection = run.settings.get("selection")  # RunResult.what_ran, with code spans
        what_ran = (f"a selection {_forced(selection)} with defaults from suite {_forced(run.suite)}"
                    if selection else f"suite {_forced(run.suite)}")
        out.add(f"Run {_forced(run.run_id)}, {what_ran}"
                + (f", baseline {_forced(report.comparison.baseline_source)}" if report.comparison else "")
                + f". Full report: `{html}` in the run's artifacts.", force=True)
        change = environment_change(report.comparison, 40)
        if change:  # `run --base-python`: what differs between the two sides is what is measured
            out.add(f"**Change under test** (base side -> this run): {cell(change)}.", force=True)
        conditions = measured_under(run)
        if conditions:
            out.add(cell(conditions), force=True)
        out.add(cell(read_cost(run, report.run_dir).text()), force=True)
        chosen = change_selection(run)
        if chosen:
            out.add("", force=True)
            out.add(cell(chosen), force=True)
        out.add("", force=True)
        comp = report.comparison
        found = report.evidence
        if found is not None:
            out.add(f"{found.text[0].upper()}{found.text[1:]}.", force=True)
            out.add("", force=True)
        if comp:
            for w in comp.warnings:
                out.add(f"> ⚠️ {code(w, False)}")
            if comp.warnings:
                out.add("")
            gated = [(None, v) for v in comp.verdicts if v.fails_gate]
            wins = [(None, v) for v in comp.verdicts if v.kind in ("win", "fixed")]
            header = _verdict_table([])
            out.table(["### Regressions", ""], header, _verdict_table(gated)[2:] + [""] if gated else [])
            _repros(out, report)
            _memory_lines(out, report)
            _trace_lines(out, report)
            out.table(["### Wins", ""], header, _verdict_table(wins)[2:] + [""] if wins else [])
            if wins and report.refresh_command:
                out.add(f"Wins: refresh the baseline for these cases with: {code(report.refresh_command, False)}")
                out.add("")
            if not gated and not wins:
                out.add("No regressions and no wins against the baseline.")
                out.add("")
            if any(v.metric == "step_time" and v.ratio is not None for _, v in gated + wins):
                out.add(f"*{JUDGED_RATIO_NOTE.format(judged=report.judged_step_time)}.*")
                out.add("")
            _acknowledgements(out, comp)
        ev = report.expectations
        if ev.rules:
            out.add(f"### Expectations: {ev.counts()['met']} met, {ev.counts()['missed']} missed, "
                    f"{ev.counts()['unknown']} unknown")
            out.add("")
            shown = sorted((o for o in ev.outcomes if o.outcome != "met"),
                           key=lambda o: (not o.fails_gate, o.outcome != "missed", o.case_key))
            out.table([], ["| outcome | case | rule | value [interval] | why |", "|---|---|---|---|---|"],
                      [f"| **{cell(_outcome_label(o))}** | {code(o.case_key)} | {code(o.rule.text)} "
                       f"| {cell(o.value_text)} | {code(o.reason)} |" for o in shown] + ([""] if shown else []))
            if not shown:
                out.add("Every expectation that matched a case was met.")
                out.add("")
        details_open = out.add(f"<details><summary>All {len(report.rows)} case(s)</summary>")
        if details_open:
            out.add("")
            out.table([], CASE_HEADER, [_case_line(r) for r in report.rows])
        else:
            out.left_out += len(report.rows)
        if out.left_out:
            out.add("", force=True)
            out.add(note.format(n=out.left_out), force=True)
        if details_open:
            out.add("</details>", force=True)
        return ("\n".join(out.lines) + "\n").encode("utf-8", "backslashreplace")
