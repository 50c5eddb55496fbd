"""history.html: one self-contained page (no scripts, no network, like report.html) with an SVG trend
chart per case and metric, change points and creep marked, and a hover title on every point naming its
commit, run and value. Geometry is computed here; jinja2 (autoescape on) renders every string. No torch.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import jinja2

from perfgate.history.detect import SeriesAnalysis, step_range, step_text
from perfgate.history.reading import Point
from perfgate.util.formatting import format_value, trend_anchor

WIDTH, HEIGHT = 760, 240
LEFT, RIGHT, TOP, BOTTOM = 78, 16, 14, 34
MAX_POINTS = 1000  # a chart shows at most this many of the latest points (the page stays light)


@dataclass
class TrendChart:
    case_key: str
    metric: str
    anchor: str
    machine: str = ""  # "on MACHINE" when the case's runs came from several machines (one chart each)
    width: int = WIDTH
    height: int = HEIGHT
    dots: list[dict[str, Any]] = field(default_factory=list)
    line: str = ""
    levels: list[dict[str, Any]] = field(default_factory=list)  # segment means between change points
    steps: list[dict[str, Any]] = field(default_factory=list)  # change points: x, css, title, label
    creeps: list[dict[str, Any]] = field(default_factory=list)  # shaded ranges
    yticks: list[tuple[float, str]] = field(default_factory=list)
    xticks: list[tuple[float, str]] = field(default_factory=list)
    shown: int = 0
    total: int = 0
    findings: list[str] = field(default_factory=list)


def _title(p: Point, metric: str) -> str:
    ci = (f" [{format_value(metric, p.ci_low)} .. {format_value(metric, p.ci_high)}]"
          if p.ci_low is not None and p.ci_high is not None else "")
    return (f"commit {(p.commit or 'none')[:12]} · run {p.run_id} · {p.started_at} · "
            f"{format_value(metric, p.value)}{ci}")


def trend_chart(points: Sequence[Point], analysis: SeriesAnalysis, split: bool = False) -> TrendChart:
    """One series' chart; ``split``: one of a case's series per machine (detect.by_machine), its anchor and
    heading naming the machine."""
    metric = analysis.metric
    anchor = trend_anchor(analysis.case_key, metric)
    machine = ""
    if split:
        machine = analysis.machine_key or "no machine key"
        anchor = trend_anchor(f"{analysis.case_key}-{metric}-on", machine)
    chart = TrendChart(analysis.case_key, metric, anchor, machine=machine, total=len(points))
    offset = max(0, len(points) - MAX_POINTS)
    pts = list(points[offset:])
    chart.shown = len(pts)
    if not pts:
        return chart
    lows = [p.ci_low if p.ci_low is not None else p.value for p in pts]
    highs = [p.ci_high if p.ci_high is not None else p.value for p in pts]
    lo, hi = min(lows), max(highs)
    # at least +/-2% of the value: a flat series (one run, or runs a few ns apart) otherwise gets five y ticks
    # that all print as the same 3-digit value
    pad = max((hi - lo) * 0.06, abs(hi) * 0.02) or 1.0
    lo, hi = lo - pad, hi + pad
    x0, x1, y0, y1 = LEFT, WIDTH - RIGHT, HEIGHT - BOTTOM, TOP
    n = len(pts)

    def sx(i: float) -> float:
        return round(x0 + (i + 0.5) / n * (x1 - x0), 1)

    def sy(v: float) -> float:
        return round(y0 + (v - lo) / (hi - lo) * (y1 - y0), 1)

    for i, p in enumerate(pts):
        chart.dots.append({"x": sx(i), "y": sy(p.value), "ylo": sy(lows[i]), "yhi": sy(highs[i]),
                           "title": _title(p, metric)})
    chart.line = " ".join(f"{d['x']},{d['y']}" for d in chart.dots)
    cps = [c.index - offset for c in analysis.change_points]
    bounds = [0, *[c for c in cps if 0 < c < n], n]
    for a, b in zip(bounds, bounds[1:], strict=False):
        mean = sum(p.value for p in pts[a:b]) / (b - a)
        chart.levels.append({"x1": sx(a - 0.5), "x2": sx(b - 0.5), "y": sy(mean), "title": f"mean {format_value(metric, mean)}"})
    for c in analysis.change_points:
        i = c.index - offset
        if not 0 < i < n:
            continue
        text = f"{c.kind}: {step_text(c, metric)} {step_range(c)}"
        label = f"{c.change * 100:+.1f}%" if c.change is not None else f"from {format_value(metric, c.mean_before)}"
        chart.steps.append({"x": sx(i - 0.5), "css": c.kind, "title": text, "label": label})
        chart.findings.append("step " + text)
    for cr in analysis.creeps:
        a, b = max(cr.start - offset, 0), cr.end - offset
        if b < 0:
            continue
        text = (f"creep {cr.kind}: {cr.change * 100:+.1f}% [{cr.ci_low * 100:+.1f}%, {cr.ci_high * 100:+.1f}%] from "
                f"{(cr.first_commit or cr.first_run)[:12]} to {(cr.last_commit or cr.last_run)[:12]}")
        chart.creeps.append({"x": sx(a - 0.5), "w": round(sx(b + 0.5) - sx(a - 0.5), 1), "css": cr.kind, "title": text})
        chart.findings.append(text)
    for k in range(5):
        v = lo + (hi - lo) * k / 4
        label = format_value(metric, v)
        if not chart.yticks or chart.yticks[-1][1] != label:  # never the same label twice
            chart.yticks.append((sy(v), label))
    for i in sorted({0, n // 2, n - 1}):
        chart.xticks.append((sx(i), (pts[i].commit or pts[i].run_id)[:8]))
    return chart


@lru_cache(maxsize=1)
def _template() -> jinja2.Template:
    env = jinja2.Environment(loader=jinja2.PackageLoader("perfgate", "templates"), autoescape=True,
                             trim_blocks=True, lstrip_blocks=True, undefined=jinja2.StrictUndefined)
    return env.get_template("history.html.j2")


def render(charts: Sequence[TrendChart], store_name: str, filters: str) -> bytes:
    """The page: one section per case, its metrics' charts, the findings listed under each chart."""
    by_case: dict[str, list[TrendChart]] = {}
    for c in charts:
        by_case.setdefault(c.case_key, []).append(c)
    findings = sum(len(c.findings) for c in charts)
    regressions = sum(1 for c in charts for f in c.findings if " regression" in f[:20] or f.startswith("step regression"))
    html = _template().render(by_case=by_case, store=store_name, filters=filters, findings=findings,
                              regressions=regressions, generated=time.strftime("%Y-%m-%d %H:%M:%S %Z"),
                              width=WIDTH, height=HEIGHT, left=LEFT, bottom=HEIGHT - BOTTOM, top=TOP,
                              right=WIDTH - RIGHT)
    return html.encode("utf-8", "backslashreplace")
