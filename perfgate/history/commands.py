"""What each ``perfgate history`` command and ``perfgate bisect`` does, for cli.py to call: open the
store, call the analysis, return the text to print. No torch here."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path

from perfgate.history import ingest
from perfgate.history import show as show_mod
from perfgate.history.store import HistoryError, open_store, resolve_url
from perfgate.model.config import Settings


def _url(settings: Settings, override: str | None) -> str:
    return resolve_url(settings.extra, settings.root, override)


def add(settings: Settings, runs: Sequence[str], url: str | None, commit: str | None,
        branch: str | None) -> list[str]:
    """Add runs; the lines to print. Every input is read before the store is opened."""
    records = ingest.load_records(runs, settings.root, commit, branch)
    with open_store(_url(settings, url), create=True) as store:
        lines = list(store.notes)
        for record, added in ingest.add_records(store, records):
            what = "added" if added else "already in history"
            lines.append(f"{what}: {record.run_id} ({len(record.cases)} case(s), commit "
                         f"{(record.commit or 'none')[:12]}, branch {record.branch or 'none'}) -> {store.describe()}")
    return lines


def show(settings: Settings, url: str | None, patterns: Sequence[str], metric: str, since: str | None,
         last: int | None, branch: str | None, machine_key: str | None, fmt: str) -> str:
    with open_store(_url(settings, url), create=False) as store:
        data = show_mod.read(store, metric, patterns, since, last, branch, machine_key)
        if not data and fmt == "table":
            return f"no {metric} series in {store.describe()}" + (f" matching {', '.join(patterns)}" if patterns else "") + "\n"
        return show_mod.render(data, metric, fmt)


def _analyses(store, metrics: Sequence[str], patterns: Sequence[str], since: str | None, last: int | None,  # noqa: ANN001
              branch: str | None, machine_key: str | None) -> list:
    from perfgate.history import detect as detect_mod

    out = []
    for metric in metrics:
        for key, pts in show_mod.read(store, metric, patterns, since, last, branch, machine_key).items():
            for machine, series in detect_mod.by_machine(pts):
                out.append(detect_mod.analyse(key, metric, series, machine_key=machine))
    return out


def detect(settings: Settings, url: str | None, patterns: Sequence[str], metric: str, since: str | None,
           last: int | None, branch: str | None, machine_key: str | None, all_metrics: bool,
           fmt: str) -> tuple[str, int]:
    """(text to print, number of regressions found)."""
    from perfgate.history import detect as detect_mod
    from perfgate.history.reading import metrics as store_metrics

    with open_store(_url(settings, url), create=False) as store:
        chosen = store_metrics(store) if all_metrics else [metric]
        analyses = _analyses(store, chosen, patterns, since, last, branch, machine_key)
    regressions = sum(a.regressions for a in analyses)
    if fmt == "json":
        return json.dumps([a.to_json() for a in analyses], indent=1) + "\n", regressions
    return detect_mod.render(analyses), regressions


def report(settings: Settings, url: str | None, patterns: Sequence[str], metric: str, since: str | None,
           last: int | None, branch: str | None, machine_key: str | None, all_metrics: bool, out: Path) -> Path:
    """Write history.html to ``out``; its path."""
    from perfgate.history import detect as detect_mod
    from perfgate.history import report as report_mod
    from perfgate.history.reading import metrics as store_metrics
    from perfgate.util.storage import atomic_write_text

    with open_store(_url(settings, url), create=False) as store:
        chosen = store_metrics(store) if all_metrics else [metric]
        charts = []
        for m in chosen:
            for key, pts in show_mod.read(store, m, patterns, since, last, branch, machine_key).items():
                for machine, series in detect_mod.by_machine(pts):
                    charts.append(report_mod.trend_chart(series, detect_mod.analyse(key, m, series, machine_key=machine),
                                                         split=machine is not None or len(pts) != len(series)))
        name = store.describe()
    charts.sort(key=lambda c: (c.case_key, c.metric != "step_time", c.metric))  # stable: machines stay in order
    filters = ", ".join(f for f in (f"metric {metric}" if not all_metrics else "every metric",
                                    f"since {since}" if since else "", f"last {last}" if last else "",
                                    f"branch {branch}" if branch else "", f"machine {machine_key}" if machine_key else "",
                                    f"cases {' '.join(patterns)}" if patterns else "") if f)
    try:
        atomic_write_text(out, report_mod.render(charts, name, filters).decode("utf-8"))
    except OSError as exc:
        raise HistoryError(f"cannot write {out}: {exc.strerror or exc}") from exc
    return out


def bisect(settings: Settings, good: str, bad: str, case: str, metric: str, processes: int | None,
           samples: int | None, threshold: float | None, echo: Callable[[str], None]) -> int:
    """Run the bisection, print its finding; the exit code (130 when interrupted, worktrees removed)."""
    from perfgate.history import bisect as bisect_mod

    if metric != "step_time":
        raise HistoryError(f"bisect --metric {metric!r}: only step_time is bisected (it is the metric measured "
                           f"in lockstep); `perfgate history detect --metric {metric}` finds its change points")
    spec = bisect_mod.resolve_case(case)
    settings = bisect_mod.with_sampling(settings, processes, samples)
    try:
        result = bisect_mod.bisect(settings, good, bad, spec, echo, threshold)
    except KeyboardInterrupt:
        echo("perfgate bisect: interrupted; the temporary worktrees were removed")
        return 130
    for line in bisect_mod.report_lines(result, settings.root):
        echo(line)
    return 0


def add_from_run(settings: Settings, run_dir: Path) -> list[str]:
    """`perfgate run --history`: add the run, write history.html beside it (the trends of its cases on
    its machine), and render its reports again so that each case links to its trend."""
    from perfgate.gating.comparison_file import load_comparison_file
    from perfgate.model.results import load_results
    from perfgate.reports import write_run_reports

    lines = add(settings, [str(run_dir)], None, None, None)
    run = load_results(run_dir)
    keys = [glob_escape(c.key) for c in run.cases]
    path = report(settings, None, keys, "step_time", None, None, None, run.environment.get("machine_key"), True,
                  run_dir / "history.html")
    write_run_reports(run, run_dir, load_comparison_file(run_dir))
    lines.append(f"history: the trends of this run's cases in {path} (linked from report.html)")
    return lines


def glob_escape(text: str) -> str:
    """``text`` as a glob pattern matching only itself."""
    return "".join(f"[{ch}]" if ch in "*?[" else ch for ch in text)
