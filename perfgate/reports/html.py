"""report.html: one self-contained page a reviewer reads in a minute, on a laptop, a phone or paper.

Geometry for the inline SVG charts is computed here; jinja2 (autoescape on) renders every string,
SVG text included, so a workload name or an error message containing markup shows as text.
No scripts, no external fonts, no network: a Content-Security-Policy forbids all of it.
"""

from __future__ import annotations

import math
import re
import shlex
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import jinja2
from markupsafe import Markup, escape

from perfgate.judging import roofline
from perfgate.model.acknowledge import match_text
from perfgate.reports import allocations, traces
from perfgate.reports.base import ReportInput
from perfgate.reports.conditions import measured_under
from perfgate.reports.cost import read_cost
from perfgate.reports.display import verdict_display
from perfgate.reports.rows import CaseRow, Group, process_clocks_text
from perfgate.reports.scope import change_selection
from perfgate.util.formatting import (
    format_bytes,
    format_count,
    format_environment,
    format_rate,
    format_ratio,
    format_value,
    trend_anchor,
)
from perfgate.util.stats import JUDGED_NOTE, PROCESS_QUANTILE, format_seconds, quantile_name
from perfgate.util.stats import quantile as stats_quantile

CHART_WIDTH = 640
LABEL_WIDTH = 170
ROW_HEIGHT = 22


@dataclass
class Bar:
    label: str
    y: float
    x0: float
    x: float
    lo: float
    hi: float
    text: str
    css: str


@dataclass
class Chart:
    """An inline SVG chart's geometry: bars or dot strips, axis ticks and the reference line."""

    width: int
    height: int
    bars: list[Bar] = field(default_factory=list)
    strips: list[dict[str, Any]] = field(default_factory=list)
    ticks: list[tuple[float, str]] = field(default_factory=list)
    ref_x: float | None = None
    ref_label: str = ""


def _scale(lo: float, hi: float, x0: float, x1: float):  # noqa: ANN202 - a small closure
    span = (hi - lo) or 1.0
    return lambda v: x0 + (v - lo) / span * (x1 - x0)


def speedup_chart(group: Group) -> Chart | None:
    """Speedup against eager per toggle, with the ratio's CI as an error bar and a line at 1x."""
    rows = [r for r in group.rows if r.speedup is not None]
    if not rows:
        return None
    top = max(max(r.speedup.value if r.speedup.high is None else r.speedup.high for r in rows), 1.0) * 1.08  # type: ignore[union-attr]  # rows: those with a speedup
    left, right = LABEL_WIDTH, CHART_WIDTH - 70
    sx = _scale(0.0, top, left, right)
    chart = Chart(CHART_WIDTH, 24 + ROW_HEIGHT * len(rows) + 22)
    for i, r in enumerate(rows):
        sp = r.speedup
        # a side of one process gives no interval: no error bar, and no colour that claims a side of 1x
        low, high = (sp.value, sp.value) if sp.low is None or sp.high is None else (sp.low, sp.high)  # type: ignore[union-attr]  # as above
        css = "flat" if sp.low is None or sp.high is None else ("win" if low > 1 else ("loss" if high < 1 else "flat"))  # type: ignore[union-attr]  # as above
        chart.bars.append(Bar(r.spec.toggle_name, 12 + i * ROW_HEIGHT, left, sx(sp.value), sx(low),  # type: ignore[union-attr]  # as above
                              sx(high), f"{sp.value:.2f}x", css))  # type: ignore[union-attr]  # as above
    chart.ref_x, chart.ref_label = sx(1.0), "1x = eager"
    step = 0.5 if top <= 4 else (1.0 if top <= 10 else round(top / 8))
    t = 0.0
    while t <= top:
        chart.ticks.append((sx(t), f"{t:g}x"))
        t += step
    return chart


def distribution_chart(row: CaseRow, quantile: float = PROCESS_QUANTILE) -> Chart | None:
    """Every step-time sample of every worker process, baseline processes above the current ones; each
    process's bar at its ``quantile``, the step time the gate compares for it."""
    strips = []
    if row.baseline_case is not None:
        for p in row.baseline_case.processes:
            strips.append(("baseline", p))
    for p in row.case.processes:
        strips.append(("current", p))
    drawn = [(which, p.process_index, p.step_times_s, process_clocks_text(p)) for which, p in strips if p.samples_ns]
    if not drawn:
        return None
    values = [v for s in drawn for v in s[2]]
    lo, hi = min(values), max(values)
    pad = (hi - lo) * 0.05 or hi * 0.05 or 1e-9
    lo, hi = lo - pad, hi + pad
    left, right = LABEL_WIDTH, CHART_WIDTH - 40  # room for the last tick's label
    sx = _scale(lo, hi, left, right)
    chart = Chart(CHART_WIDTH, 16 + ROW_HEIGHT * len(drawn) + 22)
    for i, (which, idx, xs, clocks) in enumerate(drawn):
        judged = stats_quantile(sorted(xs), quantile)
        chart.strips.append({
            "label": f"{which} process {idx}" + (" (throttled)" if "throttled:" in clocks else ""),
            "y": 14 + i * ROW_HEIGHT, "css": which, "dots": [round(sx(v), 1) for v in xs], "mark": sx(judged),
            "mark_text": f"{quantile_name(quantile)} {format_seconds(judged)}" + (f"; {clocks}" if clocks else ""),
        })
    for k in range(5):
        v = lo + (hi - lo) * k / 4
        chart.ticks.append((sx(v), format_seconds(v)))
    return chart


@dataclass
class RooflineChart:
    """A log-log roofline: achieved FLOP/s against arithmetic intensity, one point per toggle, the
    ceilings as lines (measured solid, spec sheet dashed). ``missing`` instead says, in one line, why
    there is no chart to draw (no ceilings, or no point to place)."""

    width: int
    height: int
    left: float
    right: float
    top: float
    bottom: float
    points: list[dict[str, Any]] = field(default_factory=list)
    lines: list[dict[str, Any]] = field(default_factory=list)
    xticks: list[tuple[float, str]] = field(default_factory=list)
    yticks: list[tuple[float, str]] = field(default_factory=list)
    unplaced: list[str] = field(default_factory=list)
    numbered: list[tuple[str, str]] = field(default_factory=list)  # (number on the chart, toggle) where a name did not fit
    missing: str = ""
    needs_ceilings: bool = False  # missing because the run has no ceilings for the device


# The command that measures a machine's ceilings (docs/roofline.md): the line a run without them shows.
CEILINGS_COMMAND = "perfgate calibrate --ceilings-only --write"

# Text geometry of the charts' 11 px labels, for placing them apart before any browser sees them: widths
# per character a little above DejaVu Sans's (the widest common sans-serif; Chromium measured 3.1 px for
# 'i', 7.0 for digits and most lower case, 8.7 for the widest capitals, 10.7 for 'm'), so boxes placed
# apart here stay apart in any font; a line is 13 px high, 10.5 of it above the baseline.
_NARROW = set("ijlrtfI.,:;'|!()[]{}-/ ")
_WIDE = set("mwMW%+@")
LABEL_ASCENT, LABEL_HEIGHT = 10.5, 14.0


def text_width(text: str) -> float:
    """A generous estimate of ``text``'s width in px at the charts' 11 px sans-serif."""
    width = 0.0
    for ch in text:
        if ch in _NARROW:
            width += 4.6
        elif ch in _WIDE:
            width += 11.0
        elif ch.isascii():
            width += 8.9 if ch.isupper() else 7.2
        else:
            width += 11.0  # CJK and other wide scripts
    return width + 1.0


Box = tuple[float, float, float, float]  # x0, y0, x1, y1


def _overlaps(a: Box, b: Box, gap: float = 1.0) -> bool:
    return a[0] < b[2] + gap and b[0] < a[2] + gap and a[1] < b[3] + gap and b[1] < a[3] + gap


def _inside(box: Box, area: Box) -> bool:
    return area[0] <= box[0] and box[2] <= area[2] and area[1] <= box[1] and box[3] <= area[3]


def _nearest_on_box(x: float, y: float, box: Box) -> tuple[float, float]:
    return min(max(x, box[0]), box[2]), min(max(y, box[1]), box[3])


def place_point_labels(points: list[tuple[float, float]], texts: list[str], area: Box, taken: list[Box],
                       radius: float = 5.0) -> list[tuple[float, float, Box] | None]:
    """Where each point's label goes so that no two labels, and no label and another point, overlap: for each
    point in turn, the first free spot of a ring of candidates (upper right first, then right, left, above,
    below...) at growing distance; ``None`` where no spot inside ``area`` is free. Returns the text's start
    x, its baseline y and its box; ``taken`` (boxes already on the chart) grows with every label placed."""
    dots = [(x - radius - 1, y - radius - 1, x + radius + 1, y + radius + 1) for x, y in points]
    out: list[tuple[float, float, Box] | None] = []
    for i, ((x, y), text) in enumerate(zip(points, texts, strict=True)):
        w, h = text_width(text), LABEL_HEIGHT
        others = [d for j, d in enumerate(dots) if j != i]
        spot = None
        for d in (2.0, 6.0, 12.0, 20.0, 30.0, 42.0, 56.0, 72.0, 90.0, 110.0):
            r = radius + d
            for bx, by in ((x + r * 0.7, y - r * 0.7 - h), (x + r, y - h / 2), (x - r - w, y - h / 2),
                           (x - r * 0.7 - w, y - r * 0.7 - h), (x + r * 0.7, y + r * 0.7),
                           (x - r * 0.7 - w, y + r * 0.7), (x - w / 2, y - r - h), (x - w / 2, y + r)):
                box = (bx, by, bx + w, by + h)
                if _inside(box, area) and not any(_overlaps(box, t) for t in taken + others):
                    spot = (round(bx, 1), round(by + LABEL_ASCENT, 1), box)
                    break
            if spot:
                break
        if spot:
            taken.append(spot[2])
        out.append(spot)
    return out


def _rate_tick(x: float) -> str:
    """A FLOP/s axis tick short enough for the chart's left margin, up to exa ('10 PFLOP/s', not '1e+04 TFLOP/s')."""
    for prefix, size in (("E", 1e18), ("P", 1e15)):
        if x >= size:
            return f"{x / size:.3g} {prefix}FLOP/s"
    return format_rate(x)


def _decades(lo: float, hi: float) -> tuple[int, int]:
    return math.floor(math.log10(lo)), math.ceil(math.log10(hi))


# the highest arithmetic intensity a chart places (a 100k x 100k matmul in float16 is ~3e4 FLOP/B)
MAX_INTENSITY = 1e9


def roofline_chart(group: Group, ceilings: dict[str, Any]) -> RooflineChart | None:
    """The roofline of one workload's toggles; None when no case has a bound class at all, a chart with only
    ``missing`` set where there are no ceilings to draw or no point to place."""
    rows = [r for r in group.rows if r.bound is not None]
    if not rows:
        return None
    placed, unplaced = [], []
    for r in rows:
        ai, fl = r.bound.evidence.get("arithmetic_intensity"), r.bound.evidence.get("achieved_flops_per_s")  # type: ignore[union-attr]  # rows: those with a bound
        if ai and fl and 0 < ai <= MAX_INTENSITY and 0 < fl <= roofline.PLAUSIBLE["flops"][1]:
            placed.append((r, ai, fl))
        elif ai and fl:  # a results.json no device could have written: off any chart (and its axis infinite)
            unplaced.append(f"{r.spec.toggle_name} ({r.bound.bound}; {ai:.3g} FLOP/B at {format_rate(fl)}: "  # type: ignore[union-attr]  # as above
                            "past any device)")
        else:
            why = (f"FLOPs not counted: {r.bound.flops_note}" if r.bound.flops_note  # type: ignore[union-attr]  # as above
                   else "no FLOPs counted: elementwise work only")
            unplaced.append(f"{r.spec.toggle_name} ({r.bound.bound}; {why})")  # type: ignore[union-attr]  # as above
    roofs = []
    for dtype in sorted({roofline.compute_dtype(r.spec.toggles) for r, _, _ in placed} or {"float32"}):
        roof = roofline.roof_for(ceilings, group.device, dtype)
        if roof.peak_flops and roof.peak_bandwidth and roof.source.startswith("measured"):
            roofs.append((f"measured {dtype}", roof.peak_flops, roof.peak_bandwidth, "roof measured"))
        if roof.spec_flops and roof.spec_bandwidth:
            roofs.append((f"spec sheet {dtype}", roof.spec_flops, roof.spec_bandwidth, "roof spec"))
    chart = RooflineChart(CHART_WIDTH, 300, 84.0, CHART_WIDTH - 150.0, 12.0, 260.0, unplaced=unplaced)
    if not roofs:
        kind = roofline.device_kind(group.device)
        not_used = [n for n in ceilings.get("not_used", []) if isinstance(n, str) and n.startswith(f"{kind}:")] \
            if isinstance(ceilings.get("not_used"), list) else []
        chart.missing = f"this run carries no ceilings for {group.device}" + (
            f" (the stored ones were not used: {'; '.join(n[len(kind) + 2:] for n in not_used)})" if not_used else "")
        chart.needs_ceilings = True
        return chart
    if not placed:
        chart.missing = "no case of this workload counted FLOPs to place it by"
        return chart
    xs = [ai for _, ai, _ in placed] + [f / b for _, f, b, _ in roofs]
    ys = [fl for _, _, fl in placed] + [f for _, f, _, _ in roofs]
    x0, x1 = _decades(min(xs) / 3, max(xs) * 3)
    y0, y1 = _decades(min(ys) / 3, max(ys) * 2)
    sx = _scale(x0, x1, chart.left, chart.right)
    sy = _scale(y0, y1, chart.bottom, chart.top)

    def px(ai: float) -> float:
        return round(sx(math.log10(ai)), 1)

    def py(fl: float) -> float:
        return round(sy(math.log10(fl)), 1)

    for e in range(x0, x1 + 1):
        chart.xticks.append((px(10.0 ** e), f"{10.0 ** e:g}"))
    for e in range(y0, y1 + 1):
        chart.yticks.append((py(10.0 ** e), _rate_tick(10.0 ** e)))
    lo_x, hi_x = 10.0 ** x0, 10.0 ** x1
    taken: list[Box] = []
    for label, flops, bandwidth, css in roofs:
        ridge = flops / bandwidth
        pts = [(lo_x, lo_x * bandwidth)]
        if lo_x < ridge < hi_x:
            pts.append((ridge, flops))
        pts.append((hi_x, min(flops, hi_x * bandwidth)))
        pts = [(x, max(y, 10.0 ** y0)) for x, y in pts]
        # each roof's name in the right margin at its flat part's height, moved down or up to a free line
        x, w = chart.right + 4, text_width(label)
        base = py(flops) - 4
        for k in range(40):
            y = base + LABEL_HEIGHT * ((k + 1) // 2) * (1 if k % 2 else -1)
            box = (x, y - LABEL_ASCENT, x + w, y - LABEL_ASCENT + LABEL_HEIGHT)
            if box[1] >= 0 and box[3] <= chart.bottom and not any(_overlaps(box, t) for t in taken):
                break
        taken.append(box)
        moved = abs(y - base) > 1  # another roof's name had its place: a thin line back to its own roof
        chart.lines.append({"css": css, "label": f"{label}: {format_rate(flops)}, {format_rate(bandwidth, 'B/s')}",
                            "short": label, "points": " ".join(f"{px(x)},{py(y)}" for x, y in pts),
                            "label_x": x, "label_y": round(y, 1),
                            "leader": (chart.right, py(flops), x - 1, round(y - 4, 1)) if moved else None})
    xy = [(px(ai), py(fl)) for _, ai, fl in placed]
    area: Box = (chart.left + 2, 0.0, float(chart.width - 2), chart.bottom - 1)
    spots = place_point_labels(xy, [r.spec.toggle_name for r, _, _ in placed], area, taken)
    numbers = [str(i + 1) if s is None else "" for i, s in enumerate(spots)]
    missed = [i for i, s in enumerate(spots) if s is None]
    for i, spot in zip(missed, place_point_labels([xy[i] for i in missed], [numbers[i] for i in missed], area,
                                                  taken), strict=True):
        spots[i] = spot
    for i, ((r, ai, fl), (x, y), spot) in enumerate(zip(placed, xy, spots, strict=True)):
        point = {"x": x, "y": y, "label": r.spec.toggle_name, "css": r.bound.bound, "tag": "", "leader": None,  # type: ignore[union-attr]  # as above
                 "title": f"{r.spec.toggle_name}: {ai:.3g} FLOP/B, {format_rate(fl)}, {r.bound.bound}"}  # type: ignore[union-attr]  # as above
        if numbers[i]:
            chart.numbered.append((numbers[i], r.spec.toggle_name))
        if spot is not None:
            tx, ty, box = spot
            point.update(tag=numbers[i] or r.spec.toggle_name, tx=tx, ty=ty)
            ex, ey = _nearest_on_box(x, y, box)
            if math.hypot(ex - x, ey - y) > 12:  # far from its point: a thin line says whose label it is
                point["leader"] = (x, y, round(ex, 1), round(ey, 1))
        chart.points.append(point)
    return chart


def _environment_rows(env: dict[str, Any]) -> list[tuple[str, str]]:
    """The environment as rows; the installed packages as their count (results.json lists them)."""
    return [(str(k), f"{len(v)} distributions (listed in results.json)" if k == "packages" and isinstance(v, list)
             else format_environment(v)) for k, v in env.items()]


def _trend_anchor(case_key: str) -> str:
    """The id of a case's step-time chart in history.html (perfgate.util.formatting.trend_anchor)."""
    return trend_anchor(case_key, "step_time")


def _breakable(text: str) -> Markup:
    """``text`` escaped, with a line-break opportunity after each '_', '/', '+' and '.': a long workload or
    toggle name wraps at its word boundaries in a narrow column instead of scrolling it sideways."""
    parts, start = [], 0
    for i, ch in enumerate(text):
        if ch in "_/+.":
            parts.append(text[start:i + 1])
            start = i + 1
    parts.append(text[start:])
    return Markup("<wbr>").join(escape(p) for p in parts)


def _keep_units(text: str) -> str:
    """``text`` with a no-break space between a number and its unit ('1.53 ms', '286 MiB'), so a narrow
    column wraps between quantities, never inside one."""
    return re.sub(r"(\d) (?=[A-Za-z%\u00b5])", "\\1\u00a0", text).replace("\u00b1 ", "\u00b1\u00a0")


def _outcomes_not_met(outcomes: list[Any]) -> list[Any]:
    """The rules a reviewer must read, in that order: missed ``fail`` rules (they fail the gate), missed
    ``warn`` rules, then the unknown ones; the met ones are folded away under their count."""
    order = {("missed", True): 0, ("missed", False): 1, ("unknown", False): 2, ("unknown", True): 2}
    left = [o for o in outcomes if o.outcome != "met"]
    return sorted(left, key=lambda o: order.get((o.outcome, o.fails_gate), 3))


@lru_cache(maxsize=1)
def _template() -> jinja2.Template:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("perfgate", "templates"),
        autoescape=True,  # every string from workloads, errors and environments is escaped, SVG text too
        trim_blocks=True,
        lstrip_blocks=True,
        undefined=jinja2.StrictUndefined,
    )
    env.filters["bytes"] = format_bytes
    env.filters["seconds"] = format_seconds
    env.filters["breakable"] = _breakable
    env.filters["keep_units"] = _keep_units
    env.globals["format_value"] = format_value
    env.filters["environment"] = format_environment
    env.globals["count"] = format_count
    env.globals["verdict_display"] = verdict_display
    env.globals["ratio_text"] = format_ratio
    env.globals["match_text"] = match_text
    env.globals["format_us"] = traces.format_us
    env.globals["format_delta_us"] = traces.format_delta_us
    return env.get_template("report.html.j2")


class HtmlExporter:
    name = "html"
    filename = "report.html"

    def render(self, report: ReportInput) -> bytes:
        groups = report.groups
        regressions = report.regression_rows
        run_dir = str(report.run_dir) if report.run_dir else "<run dir>"
        html = _template().render(
            report=report,
            run=report.run,
            comparison=report.comparison,
            banner=report.verdict,
            groups=groups,
            charts={g.anchor: speedup_chart(g) for g in groups},
            rooflines={g.anchor: roofline_chart(g, report.run.ceilings) for g in groups},
            ceilings_command=CEILINGS_COMMAND,
            expectations=report.expectations,
            outcomes_not_met=_outcomes_not_met(report.expectations.outcomes),
            outcomes_met=[o for o in report.expectations.outcomes if o.outcome == "met"],
            overview=report.overview,
            regressions=regressions,
            distributions={r.key: distribution_chart(r, report.process_quantile) for r in regressions
                           if r.is_time_regression},
            process_quantile_label=quantile_name(report.process_quantile),
            judged_note=JUDGED_NOTE.format(judged=report.judged_step_time),
            environment=_environment_rows(report.run.environment),
            measured_under=measured_under(report.run),
            change_selection=change_selection(report.run),
            cost_line=read_cost(report.run, report.run_dir).text(),
            threshold=report.threshold,
            tensorboard_command=f"perfgate tensorboard {shlex.quote(run_dir)}",
            in_run_dir=lambda rel: str(report.run_dir / rel) if rel and report.run_dir else rel,
            label_width=LABEL_WIDTH,
            history_href=report.history_href,
            trend_anchor=_trend_anchor,
            trace_pairs=report.trace_pairs,
            trace_link=report.trace_link,
            case_trace_link=lambda row: report.trace_link(traces.trace_of(row.case, report.run_dir, "head", "this run"))
            if report.run_dir else (None, ""),
            perfetto_url=traces.PERFETTO_URL,
            memory_growth=report.memory_growth,
            file_link=report.file_link,
            memory_viz_url=allocations.MEMORY_VIZ_URL,
        )
        return html.encode("utf-8", "backslashreplace")
