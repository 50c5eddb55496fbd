"""How verdicts and cases read in every format: each verdict kind's severity, tone and word
(VERDICT_DISPLAY), the HTML id of a case or workload, and the short texts the rows print (a step-time
change, a tolerance, an error's last line). No torch here."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Any

from perfgate.model.comparison import Verdict
from perfgate.util.formatting import format_ratio

# How serious a verdict kind is for the row's marker: the worst verdict of a case decides its colour.
VERDICT_SEVERITY = {
    "newly-failing": 0, "regression": 1, "acknowledged": 2, "inconclusive": 3, "missing": 4, "win": 5, "fixed": 6,
    "new": 7, "unchanged": 8, "skipped": 9,
}

# How a verdict kind shows in the reports: the tone of its colour (bad, good, warn, info, neutral) and the word
# printed with it, so no colour is ever the only signal. The case statuses are here too: they stand in for
# a verdict where nothing was compared. A new verdict kind is one line; a kind missing from the table
# still shows, as its own name in neutral grey.
VERDICT_DISPLAY: dict[str, tuple[str, str]] = {
    "newly-failing": ("bad", "newly-failing"),
    "regression": ("bad", "regression"),
    "acknowledged": ("info", "acknowledged"),
    "inconclusive": ("warn", "inconclusive"),
    "missing": ("warn", "missing"),
    "win": ("good", "win"),
    "fixed": ("good", "fixed"),
    "new": ("neutral", "new"),
    "unchanged": ("neutral", "unchanged"),
    "skipped": ("warn", "skipped"),
    "failed": ("bad", "failed"),
    "ok": ("neutral", "ok"),
}


@dataclass(frozen=True)
class VerdictLook:
    """A verdict kind (or case status) as shown: ``tone`` names the colour class, ``word`` the text."""

    kind: str
    tone: str
    word: str


def verdict_display(kind: str) -> VerdictLook:
    """The tone and word of a verdict kind or case status (VERDICT_DISPLAY; neutral and its own name if new)."""
    tone, word = VERDICT_DISPLAY.get(kind, ("neutral", kind))
    return VerdictLook(kind, tone, word)


def element_id(prefix: str, text: str) -> str:
    """An HTML id for ``text`` (a case key, a workload from a results file: untrusted) that is valid and
    safe anywhere, in a URL fragment or a CSS selector: ASCII letters, digits and '-' only, a readable
    slug of the text then 8 hex digits of its SHA-1, so that 'a.b' and 'a-b' still get different ids."""
    slug = re.sub(r"[^A-Za-z0-9]+", "-", text).strip("-")[:48].strip("-")
    digest = hashlib.sha1(text.encode("utf-8", "surrogatepass")).hexdigest()[:8]
    return f"{prefix}-{slug}-{digest}" if slug else f"{prefix}-{digest}"


# ---------------------------------------------------------------- formatting shared by every format
# format_bytes, format_count, format_rate, format_ratio, format_value: perfgate.util.formatting (history's
# pages print with them too).


def format_verdict_change(v: Verdict | None) -> str:
    """'1.120x [1.050, 1.200] regression' for the step-time verdict of a case."""
    if v is None:
        return "-"
    return f"{format_ratio(v.ratio, v.ratio_low, v.ratio_high)} {v.kind}".strip() if v.ratio else v.kind


def tolerance_text(tolerance: Any) -> str:
    """A workload's tolerance as a reader writes it: ``rel_l2 <= 0.05``, ``rel_l2 <= 0.05, max_abs <= 0.1``;
    a bare number is a relative L2 bound; "" when there is none."""
    if isinstance(tolerance, (int, float)) and not isinstance(tolerance, bool):
        return f"rel_l2 <= {tolerance:g}"
    if not isinstance(tolerance, dict):
        return ""
    return ", ".join(f"{key} <= {value:g}" for key, value in tolerance.items()
                     if isinstance(value, (int, float)) and not isinstance(value, bool))


def first_line(text: str | None, limit: int = 200) -> str:
    """The last non-empty line of an error message (where Python puts the exception), shortened."""
    lines = [ln.strip() for ln in (text or "").strip().splitlines() if ln.strip()]
    line = lines[-1] if lines else ""
    return line if len(line) <= limit else line[: limit - 3] + "..."
