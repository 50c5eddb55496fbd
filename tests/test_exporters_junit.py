"""junit.xml: golden output and validity against the Ant JUnit schema CI systems read."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import xmlschema
from fixtures.golden import assert_golden, fixed_run
from fixtures.synthetic import synthetic_comparison, synthetic_run

from perfgate.reports.base import ReportInput
from perfgate.reports.junit import JunitExporter

SCHEMA = xmlschema.XMLSchema(Path(__file__).parent / "data" / "junit-ant.xsd")


def render(run, comp=None) -> str:
    return JunitExporter().render(ReportInput(run, comp)).decode("utf-8")


def test_golden_junit_with_a_comparison_validates():
    run, comp = fixed_run()
    text = render(run, comp)
    SCHEMA.validate(text)
    assert_golden("junit.xml", text)
    root = ET.fromstring(text)
    failures = root.findall(".//testcase[failure]")
    assert {(tc.get("name"), tc.find("failure").get("type")) for tc in failures} == {
        ("channels-last step_time", "regression"),
        ("channels-last aten_ops_per_step", "regression"),
        ("compile", "newly-failing"),
    }
    msg = root.find(".//testcase[@name='channels-last step_time']/failure").get("message")
    assert "1.416x [1.365, 1.432]" in msg and "2.49 ms -> current 3.53 ms" in msg
    assert sum(int(s.get("failures")) for s in root.iter("testsuite")) == 3


def test_golden_junit_without_a_baseline_validates():
    run, _ = fixed_run()
    text = render(run)
    SCHEMA.validate(text)
    assert_golden("junit-no-baseline.xml", text)
    root = ET.fromstring(text)
    assert len(root.findall(".//testcase")) == len(run.cases)  # one per case, nothing was gated
    assert len(root.findall(".//testcase/skipped")) == 2
    # the element says skipped; its message says why, without "skipped" again
    assert {e.get("message") for e in root.findall(".//testcase/skipped")} == {
        "unsupported: cuda-graphs needs CUDA; this machine has none"}
    assert {e.get("type") for e in root.findall(".//testcase/error")} == {"compile-error"}


def test_control_characters_and_markup_in_messages_stay_valid_xml():
    run = synthetic_run(["w<&>\"'"], toggles=("eager", "torchscript"))
    failed = run.cases[1]
    failed.message = "bad \x00\x1b[31m byte <tag> & more"
    text = render(run)
    SCHEMA.validate(text)
    assert ET.fromstring(text).find(".//error").text.startswith("bad \ufffd\ufffd[31m byte <tag> & more")


def test_the_schema_rejects_what_ci_would_reject():
    run, comp = fixed_run()
    root = ET.fromstring(render(run, comp))
    root.find(".//failure").attrib.pop("type")  # a failure without a type
    with pytest.raises(xmlschema.XMLSchemaValidationError):
        SCHEMA.validate(ET.tostring(root, encoding="unicode"))


def test_cases_missing_from_this_run_show_as_skipped():
    run, _ = fixed_run()
    baseline = synthetic_run(["operator_rollout", "field_superposition", "gone"], seed=1)
    text = render(run, synthetic_comparison(run, baseline))
    SCHEMA.validate(text)
    suite = ET.fromstring(text).find("testsuite[@name='perfgate cases missing from this run']")
    assert suite.get("tests") == suite.get("skipped") == "6"
    assert suite.find("testcase").get("name") == "gone/smoke/eager/cpu status"


def test_a_case_gone_from_a_run_of_the_whole_suite_is_a_junit_failure():
    """A baseline case a run of the whole suite lacks fails the gate (`newly-failing`, compare.compare_runs);
    junit.xml listed every case missing from the run as skipped, so CI showed no failing test for it."""
    from dataclasses import replace

    run, _ = fixed_run()
    baseline = synthetic_run(["operator_rollout", "field_superposition", "gone"], seed=1)
    comp = synthetic_comparison(run, baseline)
    comp = replace(comp, verdicts=[replace(v, kind="newly-failing") if v.case_key == "gone/smoke/eager/cpu" else v
                                   for v in comp.verdicts])
    text = render(run, comp)
    SCHEMA.validate(text)
    suite = ET.fromstring(text).find("testsuite[@name='perfgate cases missing from this run']")
    assert (suite.get("tests"), suite.get("failures"), suite.get("skipped")) == ("6", "1", "5")
    assert suite.find("testcase[@name='gone/smoke/eager/cpu status']/failure").get("type") == "newly-failing"


def test_a_failed_case_says_why_it_is_not_gated():
    """A case failing now that the baseline lacks (``new``) was a skipped test "still failing as in the baseline"."""
    from dataclasses import replace

    from perfgate.judging.compare import compare_runs

    run = synthetic_run(["w"], toggles=("eager", "compile", "torchscript"))  # torchscript fails (synthetic)
    baseline = synthetic_run(["w"], toggles=("eager", "compile", "torchscript"), seed=1)
    for base, said in ((baseline, "still failing as in the baseline (compile-error): RuntimeError: "),
                       (replace(baseline, cases=baseline.cases[:2]), "failing; not in the baseline, so not gated "
                                                                     "(compile-error): RuntimeError: ")):
        text = render(run, compare_runs(run, base))
        SCHEMA.validate(text)
        skipped = ET.fromstring(text).find(".//testcase[@name='torchscript']/skipped")
        assert skipped.get("message").startswith(said)


def _runner_lines(text: str) -> list[str]:
    """Every line of ``text`` as GitHub's runner reads a log line (split at CR or LF, leading space trimmed)."""
    return [line.lstrip() for line in text.replace("\r\n", "\n").replace("\r", "\n").split("\n")]


def test_shard_text_issues_no_workflow_command_and_names_hold_no_markup():
    """junit.xml carries text from the shards (workload and toggle names, failure messages) that
    mikepenz/action-junit-report re-emits as log lines, annotations and the HTML of a job summary: no
    line of a message or name starts with "::" or holds "##[", and a testcase or testsuite name holds no
    markup, link or mention."""
    hostile = "w<img src=x>@team[x](https://e.invalid)www.e.invalid"
    run = synthetic_run([hostile], toggles=("eager", "torchscript"))
    failed = run.cases[1]
    failed.failure_class = "::error file=a.py::forged"
    failed.message = "boom\n  ::add-mask::secret\r::set-output name=upload::yes\nprogress ##[error]legacy"
    text = render(run)
    SCHEMA.validate(text)
    root = ET.fromstring(text)
    carried = [value for el in root.iter() for value in (el.text or "", *el.attrib.values())]
    for value in carried:
        lines = _runner_lines(value)
        assert not [line for line in lines if line.startswith("::") or "##[" in line], value
    error = root.find(".//error")
    assert "|   ::add-mask::secret" in error.text and "## [error]legacy" in error.text
    names = [el.get("name") for el in root.iter() if el.tag in ("testcase", "testsuite")]
    assert names and all(not re.search(r"<[A-Za-z/!?]|\]\(|[@:`|&\"']|www\.", n) for n in names), names
    assert "perfgate w_img src=x>_team[x]_https_//e.invalid)www_e.invalid [smoke, cpu]" in names


def test_plain_names_are_unchanged():
    from perfgate.reports.junit import safe_name

    for plain in ("amp-bf16+compile step_time", "w/pr/eager/cuda speedup_vs(eager) >= 1.5 (warn)",
                  "rollout/smoke/compile/cpu kernels_per_step <= 12", "accuracy != ok"):
        assert safe_name(plain) == plain
