"""The overview table's cells: workloads x toggles, each case's verdict (or, with nothing compared, its
status) and one number with its interval; ``base.build_overview`` lays a ReportInput's rows out in it.
No torch here."""

from __future__ import annotations

from dataclasses import dataclass, field

from perfgate.model.results import STATUS_OK
from perfgate.reports.display import VERDICT_SEVERITY, VerdictLook, verdict_display
from perfgate.reports.rows import CaseRow
from perfgate.util.formatting import format_ratio


@dataclass
class OverviewCell:
    """One case in the overview: the verdict (or, with nothing compared, the status) and one number."""

    look: VerdictLook
    value: str  # "1.12x": the step time against the baseline's, or the speedup against eager; "-" for none
    interval: str  # "[1.05, 1.20]": the value's 95% CI; "" for none
    note: str  # the metric that decided the verdict where it is not the step time; "" otherwise
    href: str  # where the case's numbers are: its row in the toggle matrix, or the missing cases' list
    title: str  # the whole story in one tooltip


@dataclass
class OverviewRow:
    workload: str
    size: str
    device: str
    href: str  # the workload's section ("" where no case of it ran)
    cells: dict[str, OverviewCell] = field(default_factory=dict)


@dataclass
class Overview:
    """Workloads x toggles, every case of the run (and every baseline case missing from it) in one table."""

    compared: bool
    toggles: list[str]
    rows: list[OverviewRow]


def _ratio_parts(value: float | None, low: float | None, high: float | None) -> tuple[str, str]:
    if value is None:
        return "-", ""
    interval = f"[{low:.2f}, {high:.2f}]" if low is not None and high is not None else ""
    return f"{value:.2f}x", interval


def overview_cell(row: CaseRow, compared: bool) -> OverviewCell:
    """A case's overview cell. Compared: its worst verdict (regression before win...) and the step time
    this run / the baseline's with CI. Not compared: its status and its speedup against eager with CI."""
    c, href = row.case, f"#{row.anchor}"
    facts = [c.key]
    worst = row.worst_verdict if compared else None
    note = ""
    if worst is not None:
        look = verdict_display(worst.kind)
        step = row.step_verdict
        value, interval = _ratio_parts(step.ratio, step.ratio_low, step.ratio_high) if step else ("-", "")
        if worst.metric not in ("step_time", "status"):
            note = worst.metric
        judged = ", ".join(f"{v.metric} {v.kind}" for v in sorted(row.verdicts, key=lambda v: (
            VERDICT_SEVERITY.get(v.kind, 99), v.metric)))
        facts.append(f"{look.word} ({judged})")
        if step is not None:
            facts.append(f"step time vs baseline {format_ratio(step.ratio, step.ratio_low, step.ratio_high)}")
        facts.append(f"speedup vs eager {row.speedup_text}")
    else:
        look = verdict_display(c.status)
        if row.spec.toggles == ("eager",) and row.speedup is not None:
            value, interval = "1x", "reference"
        else:
            sp = row.speedup
            value, interval = _ratio_parts(sp.value, sp.low, sp.high) if sp else ("-", "")
        facts.append(f"speedup vs eager {row.speedup_text}")
    if value == "-" and c.status != STATUS_OK and look.word != c.status:
        value = c.status
    if c.status != STATUS_OK:
        facts.append(row.status_text)
    return OverviewCell(look, value, interval, note, href, "; ".join(facts))
