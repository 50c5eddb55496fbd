"""report.html: one self-contained page a reviewer reads in a minute, on a laptop, a phone or paper.

Geometry for the inline SVG charts is computed here; jinja2 (autoescape on) renders every string,
SVG text included, so a workload name or an error message containing markup shows as text.
No scripts, no external fonts, no network: a Content-Security-Policy forbids all of it.
"""

from __future__ import annotations

import json
import math
import shlex
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import jinja2

from perfgate import roofline
from perfgate.acknowledge import match_text
from perfgate.exporters.base import (
    CaseRow,
    Group,
    ReportInput,
    format_bytes,
    format_count,
    format_rate,
    format_ratio,
    format_value,
    process_clocks_text,
)
from perfgate.stats import PROCESS_QUANTILE, format_seconds, quantile_name
from perfgate.stats import quantile as stats_quantile

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
    top = max(max(r.speedup.high for r in rows), 1.0) * 1.08
    left, right = LABEL_WIDTH, CHART_WIDTH - 70
    sx = _scale(0.0, top, left, right)
    chart = Chart(CHART_WIDTH, 24 + ROW_HEIGHT * len(rows) + 22)
    for i, r in enumerate(rows):
        sp = r.speedup
        css = "win" if sp.low > 1 else ("loss" if sp.high < 1 else "flat")
        chart.bars.append(Bar(r.spec.toggle_name, 12 + i * ROW_HEIGHT, left, sx(sp.value), sx(sp.low),
                              sx(sp.high), f"{sp.value:.2f}x", css))
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
    strips = [(which, p.process_index, p.step_times_s, process_clocks_text(p)) for which, p in strips if p.samples_ns]
    if not strips:
        return None
    values = [v for s in strips for v in s[2]]
    lo, hi = min(values), max(values)
    pad = (hi - lo) * 0.05 or hi * 0.05 or 1e-9
    lo, hi = lo - pad, hi + pad
    left, right = LABEL_WIDTH, CHART_WIDTH - 40  # room for the last tick's label
    sx = _scale(lo, hi, left, right)
    chart = Chart(CHART_WIDTH, 16 + ROW_HEIGHT * len(strips) + 22)
    for i, (which, idx, xs, clocks) in enumerate(strips):
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
    ceilings as lines (measured solid, spec sheet dashed)."""

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
    note: str = ""


def _decades(lo: float, hi: float) -> tuple[int, int]:
    return math.floor(math.log10(lo)), math.ceil(math.log10(hi))


def roofline_chart(group: Group, ceilings: dict[str, Any]) -> RooflineChart | None:
    """The roofline of one workload's toggles; None when no case has a byte count to place it by."""
    rows = [r for r in group.rows if r.bound is not None]
    if not rows:
        return None
    placed, unplaced = [], []
    for r in rows:
        ai, fl = r.bound.evidence.get("arithmetic_intensity"), r.bound.evidence.get("achieved_flops_per_s")
        if ai and fl and ai > 0 and fl > 0:
            placed.append((r, ai, fl))
        else:
            unplaced.append(f"{r.spec.toggle_name} ({r.bound.bound}; no FLOPs counted: elementwise work only)")
    roofs = []
    for dtype in sorted({roofline.compute_dtype(r.spec.toggles) for r, _, _ in placed} or {"float32"}):
        roof = roofline.roof_for(ceilings, group.device, dtype)
        if roof.peak_flops and roof.peak_bandwidth and roof.source.startswith("measured"):
            roofs.append((f"measured {dtype}", roof.peak_flops, roof.peak_bandwidth, "roof measured"))
        if roof.spec_flops and roof.spec_bandwidth:
            roofs.append((f"spec sheet {dtype}", roof.spec_flops, roof.spec_bandwidth, "roof spec"))
    xs = [ai for _, ai, _ in placed] + [f / b for _, f, b, _ in roofs]
    ys = [fl for _, _, fl in placed] + [f for _, f, _, _ in roofs]
    if not xs:
        xs, ys = [0.1, 10.0], [1e9, 1e10]
    x0, x1 = _decades(min(xs) / 3, max(xs) * 3)
    y0, y1 = _decades(min(ys) / 3, max(ys) * 2)
    chart = RooflineChart(CHART_WIDTH, 300, 84.0, CHART_WIDTH - 150.0, 12.0, 260.0, unplaced=unplaced)
    sx = _scale(x0, x1, chart.left, chart.right)
    sy = _scale(y0, y1, chart.bottom, chart.top)

    def px(ai: float) -> float:
        return round(sx(math.log10(ai)), 1)

    def py(fl: float) -> float:
        return round(sy(math.log10(fl)), 1)

    for e in range(x0, x1 + 1):
        chart.xticks.append((px(10.0 ** e), f"{10.0 ** e:g}"))
    for e in range(y0, y1 + 1):
        chart.yticks.append((py(10.0 ** e), format_rate(10.0 ** e)))
    lo_x, hi_x = 10.0 ** x0, 10.0 ** x1
    for label, flops, bandwidth, css in roofs:
        ridge = flops / bandwidth
        pts = [(lo_x, lo_x * bandwidth)]
        if lo_x < ridge < hi_x:
            pts.append((ridge, flops))
        pts.append((hi_x, min(flops, hi_x * bandwidth)))
        pts = [(x, max(y, 10.0 ** y0)) for x, y in pts]
        chart.lines.append({"css": css, "label": f"{label}: {format_rate(flops)}, {format_rate(bandwidth, 'B/s')}",
                            "points": " ".join(f"{px(x)},{py(y)}" for x, y in pts),
                            "label_y": py(flops) - 4})
    for r, ai, fl in placed:
        chart.points.append({"x": px(ai), "y": py(fl), "label": r.spec.toggle_name, "css": r.bound.bound,
                             "title": f"{r.spec.toggle_name}: {ai:.3g} FLOP/B, {format_rate(fl)}, {r.bound.bound}"})
    if not roofs:
        chart.note = "no ceilings for this device: `perfgate calibrate --write` measures them"
    return chart


def _environment_rows(env: dict[str, Any]) -> list[tuple[str, str]]:
    out = []
    for k, v in env.items():
        out.append((str(k), v if isinstance(v, str) else json.dumps(v, default=str)))
    return out


def _trend_anchor(case_key: str) -> str:
    """The id of a case's step-time chart in history.html (perfgate.history.report.anchor)."""
    from perfgate.history.report import anchor

    return anchor(case_key, "step_time")


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
    env.globals["format_value"] = format_value
    env.globals["count"] = format_count
    env.globals["ratio_text"] = format_ratio
    env.globals["match_text"] = match_text
    return env.get_template("report.html.j2")


class HtmlExporter:
    name = "html"
    filename = "report.html"

    def render(self, report: ReportInput) -> bytes:
        groups = report.groups
        regressions = [r for r in report.rows if r.has_regression or r.marker == "regression"]
        run_dir = str(report.run_dir) if report.run_dir else "<run dir>"
        html = _template().render(
            report=report,
            run=report.run,
            comparison=report.comparison,
            banner=report.verdict,
            groups=groups,
            charts={g.anchor: speedup_chart(g) for g in groups},
            rooflines={g.anchor: roofline_chart(g, report.run.ceilings) for g in groups},
            expectations=report.expectations,
            regressions=regressions,
            distributions={r.key: distribution_chart(r, report.process_quantile) for r in regressions
                           if r.is_time_regression},
            process_quantile_label=quantile_name(report.process_quantile),
            environment=_environment_rows(report.run.environment),
            threshold=report.threshold,
            tensorboard_command=f"perfgate tensorboard {shlex.quote(run_dir)}",
            in_run_dir=lambda rel: str(report.run_dir / rel) if rel and report.run_dir else rel,
            label_width=LABEL_WIDTH,
            history_href=report.history_href,
            trend_anchor=_trend_anchor,
        )
        return html.encode("utf-8", "backslashreplace")
