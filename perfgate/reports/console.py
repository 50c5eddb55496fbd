"""What perfgate prints: every console line goes through ``echo`` (``clean``); progress lines and a table
per workload. No torch."""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

from perfgate.model import acknowledge
from perfgate.model.comparison import Comparison, Evidence, Verdict
from perfgate.model.environment_keys import change_under_test
from perfgate.model.results import STATUS_OK, CaseResult, CaseSpec, RunResult
from perfgate.reports import allocations
from perfgate.util.formatting import failure_note, format_value
from perfgate.util.stats import JUDGED_NOTE, PROCESS_QUANTILE, format_seconds, judged_step_time

# C0 and C1 control characters but the newline (terminal escape sequences start with ESC, 0x1b, or the C1
# CSI/OSC, 0x9b/0x9d; a carriage return overwrites what a reader sees), and the Unicode controls that
# reorder what a terminal shows (bidirectional embeddings, overrides and isolates).
_CONTROL = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
# GitHub's runner reads a log line as a workflow command when, leading whitespace trimmed, it starts with
# "::" (`::error file=...::`, `::add-mask::`, `::stop-commands::`), or when it holds the legacy "##[" anywhere.
_COMMAND_START = re.compile(r"^([^\S\n]*)(?=::)", re.MULTILINE)
DATA_LINE_LABEL = "| "  # what a line that would start with "::" gets in front (indenting is not enough)


def clean(text: str) -> str:
    """``text`` safe to print to a terminal and to a GitHub Actions log: control characters dropped (a tab
    becomes a space; newlines stay, they are the structure), every line that would start with "::" labelled
    with DATA_LINE_LABEL, and the legacy "##[" broken up, so that no workload name, failure message or other
    data can move the cursor, retitle the terminal or issue a workflow command."""
    text = _CONTROL.sub(lambda m: " " if m.group() == "\t" else "", text)
    return _COMMAND_START.sub(lambda m: DATA_LINE_LABEL + m.group(1), text).replace("##[", "## [")


def echo(message: str = "", err: bool = False, nl: bool = True) -> None:
    """Print ``message`` (one or more lines) through ``clean``: the one way perfgate's commands print."""
    import click

    click.echo(clean(str(message)), err=err, nl=nl)


def _clock(seconds: float) -> str:
    m, s = divmod(int(seconds), 60)
    h, m = divmod(m, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m:02d}:{s:02d}"


def progress_line(k: int, n: int, spec: CaseSpec, elapsed: float, done: int) -> str:
    eta = "--:--" if done == 0 else _clock(elapsed / done * (n - done))
    return f"[{k}/{n} {_clock(elapsed)} ETA {eta}] {spec.key} ..."


def step_time_text(case: CaseResult, run: RunResult | None = None) -> str:
    """The case's step time and its interval as the run tables print it (``RunResult.step_time``: meant to
    hold another run's); without ``run``, the processes' interval alone."""
    st = run.step_time(case) if run is not None else case.step_time()
    if st is None:
        return "-"
    return f"{format_seconds(st.value)} {st.interval_text()}"


def outcome_text(case: CaseResult, run: RunResult | None = None) -> str:
    if case.status == STATUS_OK:
        from perfgate.judging.sequential import sampling_text

        how = sampling_text(case)
        return step_time_text(case, run) + (f"; {how}" if how else "")
    first_line = (case.message or "").strip().splitlines()
    detail = first_line[-1] if first_line else ""
    if case.failure_class:
        return f"{case.status} ({case.failure_class}): {detail}"[:160]
    return f"{case.status}: {detail}"[:160]


def outcome_detail(case: CaseResult, run: RunResult | None = None) -> str:
    """``outcome_text`` for a line whose status column says the status: a case that did not run gets its
    failure class and reason only (not `skipped  skipped: ...`)."""
    if case.status == STATUS_OK:
        return outcome_text(case, run)
    return failure_note(case.failure_class, case.message, 160)


def _table(rows: list[list[str]], header: list[str]) -> str:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)).rstrip()]
    lines.append("  ".join("-" * w for w in widths))
    for r in rows:
        lines.append("  ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())
    return "\n".join(lines)


def run_tables(run: RunResult) -> str:
    """One table per workload, size and device: toggle, status, step time +/- CI, speedup vs eager."""
    groups: dict[tuple[str, str, str], list[CaseResult]] = defaultdict(list)
    for c in run.cases:
        groups[(c.spec.workload, c.spec.size, c.spec.device)].append(c)
    out = []
    for (workload, size, device), cases in groups.items():
        rows = []
        for c in cases:
            sp = run.speedup(c) if c.status == STATUS_OK else None
            reason = failure_note(c.failure_class, c.message, 100) if c.status != STATUS_OK else ""
            rows.append([
                c.spec.toggle_name,
                c.status,
                step_time_text(c, run),
                sp.format() if sp else "-",
                reason,
            ])
        out.append(f"\n{workload} [{size}, {device}]\n"
                   + _table(rows, ["toggle", "status", "step time (median +/- 95% CI)", "speedup vs eager", "note"]))
    return "\n".join(out)


# ---------------------------------------------------------------- comparisons (the gate's verdicts)

def verdict_value(metric: str, value: float | None) -> str:
    """A verdict's baseline or current value in the unit a person reads."""
    if value is not None and metric == "accuracy":
        return f"{value:.2e}"
    return format_value(metric, value)  # as summary.md, junit.xml and report.html print it


def verdict_change(v: Verdict) -> str:
    if v.ratio is None:
        return "-"
    text = f"{v.ratio:.3f}x"
    if v.ratio_low is not None and v.ratio_high is not None:
        text += f" [{v.ratio_low:.3f}, {v.ratio_high:.3f}]"
    return text


def verdict_evidence(v: Verdict) -> str:
    parts = []
    if v.p_value is not None:
        parts.append(f"p={v.p_value:.3g}")
    if v.threshold is not None:
        parts.append(f"thr {v.threshold * 100:.3g}%" if v.metric != "accuracy" else f"tol {v.threshold:g}")
    return " ".join(parts) or "-"


def _verdict_rows(verdicts: list[Verdict]) -> list[list[str]]:
    return [[v.kind, v.case_key, v.metric, verdict_value(v.metric, v.baseline), verdict_value(v.metric, v.current),
             verdict_change(v), verdict_evidence(v)] for v in verdicts]


VERDICT_HEADER = ["verdict", "case", "metric", "baseline", "current", "ratio [95% CI]", "evidence"]


def comparison_text(comparison: Comparison, gate: bool = True, evidence: Evidence | None = None,
                    run: RunResult | None = None, run_dir: Path | None = None,
                    expectations_missed: Sequence[str] = ()) -> str:
    """Regressions (and newly failing cases) first with the rule that made them and, with ``run``, the
    command that reproduces each case; then wins (with the command that refreshes the baseline for them),
    then a count of the rest, the advice for inconclusive verdicts, and how many cases carried ``evidence``."""
    from perfgate.judging.compare import sort_key
    from perfgate.reports import repro

    verdicts = sorted(comparison.verdicts, key=sort_key)
    failing = [v for v in verdicts if v.fails_gate]
    wins = [v for v in verdicts if v.kind in ("win", "fixed")]
    rest = [v for v in verdicts if v not in failing and v not in wins]
    source = comparison.baseline_source or "baseline"
    out = [f"\nComparison against {source} ({comparison.mode} mode): {len(verdicts)} verdict(s)"]
    change = change_under_test(comparison.mode, comparison.environment_diff, 40)
    if change:
        out.append(f"The change under test (base side -> this run) is {change}")
    out.extend(comparison.warnings)
    noted = False

    def verdict_table(rows: list[Verdict]) -> None:
        """The table, and under the first one with a step_time value the statistic those values are."""
        nonlocal noted
        out.append(_table(_verdict_rows(rows), VERDICT_HEADER))
        if not noted and any(v.metric == "step_time" and v.current is not None for v in rows):
            judged = judged_step_time(run.process_quantile if run is not None else PROCESS_QUANTILE)
            out.append(f"  {JUDGED_NOTE.format(judged=judged)}")
            noted = True

    if failing:
        out.append(f"\nREGRESSIONS ({len(failing)}):")
        verdict_table(failing)
        for v in failing:
            out.append(f"  {v.case_key} {v.metric}: {v.rule}")
        out.extend(allocations.console_lines(comparison, run, run_dir))
        try:
            repros = repro.regression_repros(run, comparison, run_dir) if run is not None else {}
        except Exception:  # noqa: BLE001 - a command that cannot be made must not cost the verdicts their printing
            repros = {}
        for key, r in repros.items():
            out.append(f"  reproduce {key}: {r.command}")
        if repros and run_dir is not None:
            out.append(f"  (`perfgate repro CASE --results {repro.shell([repro.shown_path(run_dir)])}` prints these "
                       "again, with a form that keeps both sides' traces)")
    if wins:
        out.append(f"\nWins ({len(wins)}):")
        verdict_table(wins)
        refresh = repro.refresh_command(comparison, run_dir)
        if refresh:
            out.append(f"Wins: refresh the baseline for these cases with: {refresh}")
    counts: dict[str, int] = {}
    for v in rest:
        counts[v.kind] = counts.get(v.kind, 0) + 1
    if counts:
        out.append("\nThe rest: " + ", ".join(f"{n} {k}" for k, n in sorted(counts.items(), key=lambda kv: -kv[1])))
    inconclusive = [v for v in rest if v.kind == "inconclusive"]
    for v in inconclusive[:10]:
        out.append(f"  inconclusive {v.case_key} {v.metric}: {verdict_change(v)}; {v.advice or v.rule}")
    acknowledged = [v for v in rest if v.kind == "acknowledged"]
    if acknowledged:
        out.append(f"\nAcknowledged regressions ({len(acknowledged)}), not failing the gate:")
        verdict_table(acknowledged)
    lines = acknowledge.summary_lines(comparison)
    if lines:
        out.append("")
        out.extend(lines)
    if evidence is not None:
        out.append("\n" + evidence.text[0].upper() + evidence.text[1:])
    if expectations_missed:  # said before the banner, which counts them (gate.conclude's exit code does)
        out.append("")
        out.extend(expectations_missed)
    if gate and (comparison.gate_failed or expectations_missed):
        out.append("\nGATE FAILED: " + ", ".join([f"{v.case_key} ({v.kind} {v.metric})" for v in failing]
                                                  + ([f"{len(expectations_missed)} fail expectation(s) missed"]
                                                     if expectations_missed else [])))
    elif gate and evidence is not None and evidence.none_compared:
        out.append(f"\nNO EVIDENCE: {evidence.none_compared}; the gate cannot pass.")
    elif gate:
        out.append("\nGate passed: no regression and no newly failing case"
                   + (f" ({len(acknowledged)} acknowledged regression(s) in force)." if acknowledged else "."))
    return "\n".join(out)
