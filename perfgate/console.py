"""What `perfgate run` prints: progress lines and a table per workload. No torch."""

from __future__ import annotations

from collections import defaultdict

from perfgate.model import STATUS_OK, CaseResult, CaseSpec, RunResult
from perfgate.stats import format_seconds


def _clock(seconds: float) -> str:
    m, s = divmod(int(seconds), 60)
    h, m = divmod(m, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m:02d}:{s:02d}"


def progress_line(k: int, n: int, spec: CaseSpec, elapsed: float, done: int) -> str:
    eta = "--:--" if done == 0 else _clock(elapsed / done * (n - done))
    return f"[{k}/{n} {_clock(elapsed)} ETA {eta}] {spec.key} ..."


def step_time_text(case: CaseResult) -> str:
    st = case.step_time()
    if st is None:
        return "-"
    return f"{format_seconds(st.median)} +/- {st.ci_half_width_rel * 100:.1f}%"


def outcome_text(case: CaseResult) -> str:
    if case.status == STATUS_OK:
        return step_time_text(case)
    first_line = (case.message or "").strip().splitlines()
    detail = first_line[-1] if first_line else ""
    if case.failure_class:
        return f"{case.status} ({case.failure_class}): {detail}"[:160]
    return f"{case.status}: {detail}"[:160]


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
            reason = ""
            if c.status != STATUS_OK:
                lines = (c.message or "").strip().splitlines()
                reason = (f"[{c.failure_class}] " if c.failure_class else "") + (lines[-1] if lines else "")
            rows.append([
                c.spec.toggle_name,
                c.status,
                step_time_text(c),
                sp.format() if sp else "-",
                reason[:100],
            ])
        out.append(f"\n{workload} [{size}, {device}]\n"
                   + _table(rows, ["toggle", "status", "step time (median +/- 95% CI)", "speedup vs eager", "note"]))
    return "\n".join(out)
