"""junit.xml: cases and gated metrics as tests, in the Ant JUnit format CI systems read.

One testcase per case (its status) and one per gated metric verdict of a comparison. Regressions and
newly failing toggles are failures carrying their numbers; skipped cases are skipped; a case that failed
with no baseline to say whether that is new is an error. The layout follows the Ant JUnit schema
(testsuites > testsuite with package/id, properties, testcases, system-out, system-err) that Jenkins,
GitLab and GitHub test reporters accept; tests/test_exporters_junit.py validates it.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

from perfgate.model.comparison import Verdict
from perfgate.model.results import STATUS_FAILED, STATUS_SKIPPED
from perfgate.reports import console
from perfgate.reports.base import ReportInput
from perfgate.reports.display import first_line
from perfgate.reports.rows import CaseRow, Group
from perfgate.util.formatting import format_ratio, format_value

# XML 1.0 forbids most control characters; an error message carrying one would make the file unreadable.
_XML_ILLEGAL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")
_TIMESTAMP = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}")
# What a test or suite name may hold: CI reporters (mikepenz/action-junit-report) put names unescaped into
# the HTML of a job summary and into log lines. Letters, digits, spaces and the punctuation of perfgate's
# own keys, toggles, titles and rules ("w/pr/amp-bf16+compile/cuda", "w [smoke, cpu]", "speedup_vs(eager)
# >= 1.5"); no colon, so no "::" or URL; "<" only where it cannot open a tag; no "](" (a link), no
# autolinked "www.".
_NAME_UNSAFE = re.compile(r"[^\w .,%+=/()\[\]~!<>-]|<(?=[A-Za-z/!?])|(?<=\])\(|(?<=www)\.", re.IGNORECASE)


def clean(text: object) -> str:
    """``text`` as junit.xml may carry it: characters XML 1.0 forbids replaced by U+FFFD, then through
    ``console.clean``, since CI reporters re-emit these messages as log lines and annotations (no line
    starting with "::", no "##[", no terminal control)."""
    return console.clean(_XML_ILLEGAL.sub("\ufffd", "" if text is None else str(text)))


def safe_name(text: object) -> str:
    """A testcase or testsuite name: ``clean``'s text on one line, anything outside a plain set of
    characters replaced by "_"."""
    return _NAME_UNSAFE.sub("_", " ".join(clean(text).split()))


def verdict_message(v: Verdict) -> str:
    """'step_time regression: 1.200x [1.150, 1.260] (threshold 5%; rule...)': the numbers in one line."""
    parts = [f"{v.metric} {v.kind}"]
    if v.ratio is not None:
        parts.append(format_ratio(v.ratio, v.ratio_low, v.ratio_high))
    if v.baseline is not None or v.current is not None:
        parts.append(f"baseline {format_value(v.metric, v.baseline)} -> current {format_value(v.metric, v.current)}")
    if v.p_value is not None:
        parts.append(f"p={v.p_value:.3g}")
    if v.threshold is not None:
        parts.append(f"threshold {v.threshold:g}")
    text = ": ".join(parts[:2]) + ("; " + "; ".join(parts[2:]) if len(parts) > 2 else "")
    if v.rule:
        text += f" ({v.rule})"
    return text


def _classname(g: Group) -> str:
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", f"{g.workload}.{g.size}.{g.device}")
    return f"perfgate.{safe}"


def _case_testcase(suite: ET.Element, g: Group, r: CaseRow, compared: bool) -> str | None:
    tc = ET.SubElement(suite, "testcase", name=safe_name(r.spec.toggle_name), classname=_classname(g),
                       time=f"{r.case.duration_s:.3f}")
    status_v = next((v for v in r.verdicts if v.metric == "status"), None)
    detail = clean(r.case.message or "")
    if status_v is not None and status_v.fails_gate:
        el = ET.SubElement(tc, "failure", type=status_v.kind,
                           message=clean(f"newly failing: {r.status_text}"))
        el.text = clean(verdict_message(status_v) + ("\n" + detail if detail else ""))
        return "failure"
    # the element says skipped or failed: its message says why, not the status again ("skipped (unsupported): ...")
    cls, why = r.case.failure_class, first_line(r.case.message)
    if r.case.status == STATUS_SKIPPED:
        ET.SubElement(tc, "skipped", message=clean(": ".join(p for p in (cls, why) if p) or "skipped"))
        return "skipped"
    if r.case.status == STATUS_FAILED:
        if compared:
            # not gated (failing in the baseline too, or a case the baseline lacks): shown as what it is
            known = status_v is not None and status_v.kind == "unchanged"
            said = "still failing as in the baseline" if known else (
                "failing; not in the baseline, so not gated" if status_v is not None and status_v.kind == "new"
                else "failing; not gated")
            ET.SubElement(tc, "skipped", message=clean(said + (f" ({cls})" if cls else "") + (f": {why}" if why else "")))
            return "skipped"
        el = ET.SubElement(tc, "error", type=clean(r.case.failure_class or "error"),
                           message=clean(first_line(r.case.message) or "failed"))
        el.text = detail
        return "error"
    return None


def _metric_testcase(suite: ET.Element, g: Group, r: CaseRow, v: Verdict) -> str | None:
    tc = ET.SubElement(suite, "testcase", name=safe_name(f"{r.spec.toggle_name} {v.metric}"),
                       classname=_classname(g), time="0")
    if v.fails_gate:
        el = ET.SubElement(tc, "failure", type=v.kind, message=clean(verdict_message(v)))
        el.text = clean(verdict_message(v) + (f"\nadvice: {v.advice}" if v.advice else ""))
        return "failure"
    if v.kind in ("skipped", "missing"):
        ET.SubElement(tc, "skipped", message=clean(verdict_message(v)))
        return "skipped"
    return None


class JunitExporter:
    name = "junit"
    filename = "junit.xml"

    def render(self, report: ReportInput) -> bytes:
        run = report.run
        compared = report.comparison is not None
        m = _TIMESTAMP.match(run.started_at or "")
        timestamp = m.group(0) if m else "1970-01-01T00:00:00"
        hostname = clean(run.environment.get("hostname") or "localhost") or "localhost"
        root = ET.Element("testsuites")
        for i, g in enumerate(report.groups):
            suite = ET.Element("testsuite", name=safe_name(f"perfgate {g.title}"), package="perfgate", id=str(i),
                               timestamp=timestamp, hostname=hostname)
            props = ET.SubElement(suite, "properties")
            for key in ("run_id", "suite"):
                ET.SubElement(props, "property", name=key, value=clean(getattr(run, key)))
            if report.comparison:
                ET.SubElement(props, "property", name="baseline", value=clean(report.comparison.baseline_source))
            tally = {"failure": 0, "error": 0, "skipped": 0}
            tests = 0
            total_time = 0.0
            for r in g.rows:
                outcome = _case_testcase(suite, g, r, compared)
                tests += 1
                total_time += r.case.duration_s
                if outcome:
                    tally[outcome] += 1
                for v in r.verdicts:
                    if v.metric == "status":
                        continue
                    outcome = _metric_testcase(suite, g, r, v)
                    tests += 1
                    if outcome:
                        tally[outcome] += 1
            ET.SubElement(suite, "system-out").text = clean(report.verdict.headline)
            ET.SubElement(suite, "system-err").text = ""
            suite.set("tests", str(tests))
            suite.set("failures", str(tally["failure"]))
            suite.set("errors", str(tally["error"]))
            suite.set("skipped", str(tally["skipped"]))
            suite.set("time", f"{total_time:.3f}")
            root.append(suite)
        ev = report.expectations
        if ev.outcomes:
            # one test per rule and case it matched: a missed fail rule is a failure, unknown is skipped
            suite = ET.SubElement(root, "testsuite", name="perfgate expectations", package="perfgate",
                                  id=str(len(root)), timestamp=timestamp, hostname=hostname)
            ET.SubElement(suite, "properties")
            tally = {"failure": 0, "skipped": 0}
            warned = []
            for o in ev.outcomes:
                label = f"{o.case_key} {o.rule.text}" + (" (warn)" if o.rule.severity == "warn" else "")
                tc = ET.SubElement(suite, "testcase", name=safe_name(label), classname="perfgate.expectations", time="0")
                text = clean(f"{o.outcome}: {o.rule.text} on {o.case_key}: value {o.value_text} ({o.reason}); "
                             f"rule from {o.rule.source}")
                if o.fails_gate:
                    ET.SubElement(tc, "failure", type="expectation-missed", message=text).text = text
                    tally["failure"] += 1
                elif o.outcome == "unknown":
                    ET.SubElement(tc, "skipped", message=text)
                    tally["skipped"] += 1
                elif o.outcome == "missed":
                    warned.append(f"WARNING {text}")
            ET.SubElement(suite, "system-out").text = clean("\n".join([ev.headline, *warned]))
            ET.SubElement(suite, "system-err").text = ""
            for attr, value in (("tests", len(ev.outcomes)), ("failures", tally["failure"]), ("errors", 0),
                                ("skipped", tally["skipped"])):
                suite.set(attr, str(value))
            suite.set("time", "0")
        missing = report.missing_verdicts
        if missing:
            # cases the baseline has and this run lacks: shown as skipped, so a shrinking suite is visible; a
            # failure where the verdict fails the gate (a run of the whole suite that lost the case)
            suite = ET.SubElement(root, "testsuite", name="perfgate cases missing from this run", package="perfgate",
                                  id=str(len(root)), timestamp=timestamp, hostname=hostname)
            ET.SubElement(suite, "properties")
            failed = 0
            for v in missing:
                tc = ET.SubElement(suite, "testcase", name=safe_name(f"{v.case_key} {v.metric}"),
                                   classname="perfgate.missing", time="0")
                if v.fails_gate:
                    failed += 1
                    el = ET.SubElement(tc, "failure", type=v.kind, message=clean(verdict_message(v)))
                    el.text = clean(verdict_message(v) + (f"\nadvice: {v.advice}" if v.advice else ""))
                else:
                    ET.SubElement(tc, "skipped", message=clean(verdict_message(v)))
            ET.SubElement(suite, "system-out").text = ""
            ET.SubElement(suite, "system-err").text = ""
            for attr, value in (("tests", len(missing)), ("failures", failed), ("errors", 0),
                                ("skipped", len(missing) - failed)):
                suite.set(attr, str(value))
            suite.set("time", "0")
        ET.indent(root)
        return b'<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode").encode("utf-8", "backslashreplace") + b"\n"
