"""Expectations (perfgate/judging/expect.py): the rule language, every comparison, CI-aware outcomes, results.json,
the reports, and the gate's exit code through the real CLI (`perfgate compare --gate`, no workers)."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from dataclasses import replace
from pathlib import Path

import pytest
import xmlschema
from conftest import run_cli
from fixtures.synthetic import synthetic_run

from perfgate.judging import expect
from perfgate.model import config
from perfgate.model.config import ConfigError
from perfgate.model.results import RunResult, load_results
from perfgate.model.rules import ExpectError, Rule, parse_rule_text, parse_rules
from perfgate.reports.base import ReportInput
from perfgate.reports.html import HtmlExporter
from perfgate.reports.junit import JunitExporter
from perfgate.reports.markdown import MarkdownExporter
from perfgate.running import runner

ROOT = Path(__file__).resolve().parent.parent
JUNIT_SCHEMA = xmlschema.XMLSchema(Path(__file__).parent / "data" / "junit-ant.xsd")


# ---------------------------------------------------------------- parsing


def test_string_rules_parse_to_canonical_rules():
    rules = parse_rules({"operator_rollout/*/amp-fp16/cuda": [
        "speedup_vs_eager >= 1.5", "speedup_vs(compile) >= 1", "kernels_per_step<=3", "peak_cuda_bytes <= 6e9",
        "accuracy == ok", "status = 'ok'", "status != oom", "bound == \"memory-bound\"",
        {"rule": "first_call_s <= 20", "severity": "warn"},
    ]})
    assert [r.text for r in rules] == [
        "speedup_vs_eager >= 1.5", "speedup_vs(compile) >= 1", "kernels_per_step <= 3", "peak_cuda_bytes <= 6e+09",
        "accuracy == ok", "status == ok", "status != oom", "bound == memory-bound", "first_call_s <= 20"]
    assert [r.severity for r in rules] == ["fail"] * 8 + ["warn"]
    assert rules[1].toggle == "compile" and rules[3].bound == 6e9


def test_table_rules_parse_with_a_shared_severity():
    rules = parse_rules({"simulator_construction/*/compile/*": {
        "warm_setup_s": {"max": 0.05}, "speedup_vs": {"toggle": "eager", "min": 1.0, "severity": "fail"},
        "step_time_s": {"min": 0.001, "max": 0.002}, "status": "ok", "severity": "warn",
        "rules": ["graph_breaks == 0"],
    }})
    assert [(r.text, r.severity) for r in rules] == [
        ("warm_setup_s <= 0.05", "warn"), ("speedup_vs(eager) >= 1", "fail"), ("step_time_s >= 0.001", "warn"),
        ("step_time_s <= 0.002", "warn"), ("status == ok", "warn"), ("graph_breaks == 0", "warn")]


@pytest.mark.parametrize("raw, message", [
    ({"a/b/c/d": ["warp_factor >= 1"]}, "unknown metric 'warp_factor'; valid: speedup_vs_eager, speedup_vs"),
    ({"a/b/c/d": {"warp_factor": {"min": 1}}}, "unknown metric 'warp_factor'; valid:"),
    ({"a/b/c": ["status == ok"]}, "must be workload/size/toggles/device"),
    ({"a//c/d": ["status == ok"]}, "must be workload/size/toggles/device"),
    ({"a/b/c/d": ["speedup_vs_eager >= fast"]}, "needs a number, got 'fast'"),
    ({"a/b/c/d": ["speedup_vs_eager >= nan"]}, "needs a number"),
    ({"a/b/c/d": ["speedup_vs_eager"]}, "not a rule; write METRIC OP VALUE"),
    ({"a/b/c/d": ["speedup_vs_eager => 1"]}, "needs a number, got '> 1'"),
    ({"a/b/c/d": ["status >= ok"]}, "status compares with == or !=, not >="),
    ({"a/b/c/d": ["status == happy"]}, "status value 'happy' is not one of ok, skipped, failed, oom"),
    ({"a/b/c/d": ["accuracy == fine"]}, "accuracy value 'fine' is not one of ok, drift"),
    ({"a/b/c/d": ["speedup_vs >= 1"]}, "speedup_vs needs the toggle set to compare with"),
    ({"a/b/c/d": ["memory_vs_eager <= lots"]}, "memory_vs_eager needs a number, got 'lots'"),
    ({"a/b/c/d": ["memory_vs_eager <= 0"]}, "memory_vs_eager is a ratio, always above 0; give a bound above 0"),
    ({"a/b/c/d": {"memory_vs_eager": {"max": -0.5}}}, "memory_vs_eager is a ratio, always above 0"),
    ({"a/b/c/d": ["speedup_vs_eager >= 0"]}, "speedup_vs_eager is a ratio, always above 0"),
    ({"a/b/c/d": ["memory_vs_eager(compile) <= 1"]}, "only speedup_vs takes a toggle, not memory_vs_eager"),
    ({"a/b/c/d": ["kernels_per_step(compile) <= 1"]}, "only speedup_vs takes a toggle"),
    ({"a/b/c/d": {"kernels_per_step": 3}}, "give a table {min = X} / {max = X}"),
    ({"a/b/c/d": {"kernels_per_step": {"below": 3}}}, "unknown key(s) below; valid: min, max, toggle, severity"),
    ({"a/b/c/d": {"kernels_per_step": {"max": "three"}}}, "max must be a finite number"),
    ({"a/b/c/d": {"kernels_per_step": {"severity": "warn"}}}, "needs min or max"),
    ({"a/b/c/d": [{"rule": "status == ok", "severity": "panic"}]}, "severity 'panic' is not one of fail, warn"),
    ({"a/b/c/d": {"status": "ok", "severity": "loud"}}, "severity 'loud' is not one of fail, warn"),
    ({"a/b/c/d": [{"rule": "status == ok", "when": "always"}]}, "unknown key(s) when"),
    ({"a/b/c/d": [3]}, "a rule is a string like"),
    ({"a/b/c/d": 3}, "rules must be a list of strings"),
    (["status == ok"], "expectations must be a table of case pattern -> rules"),
])
def test_malformed_rules_name_the_problem_and_what_is_valid(raw, message):
    with pytest.raises(ExpectError) as exc:
        parse_rules(raw, source="pyproject.toml [tool.perfgate.expect]")
    assert message in str(exc.value)
    assert str(exc.value).startswith("pyproject.toml [tool.perfgate.expect]")
    assert "\n" not in str(exc.value)


def test_workload_rules_must_be_about_that_workload():
    (rule,) = parse_rules({"*/smoke/eager/cpu": ["status == ok"]}, workload="mine")
    assert rule.matches("mine/smoke/eager/cpu") and not rule.matches("other/smoke/eager/cpu")
    with pytest.raises(ExpectError, match="cannot match workload 'mine'"):
        parse_rules({"yours/*/*/*": ["status == ok"]}, workload="mine")


def test_patterns_match_part_by_part():
    rule = parse_rule_text("status == ok", "operator_rollout/*/amp-*/cuda")
    assert rule.matches("operator_rollout/pr/amp-fp16/cuda")
    assert not rule.matches("operator_rollout/pr/amp-fp16/cpu")
    assert not rule.matches("operator_rollout/pr/compile+amp-fp16/cuda")
    assert not rule.matches("operator_rollout_v2/pr/amp-fp16/cuda")


def test_config_validates_the_expect_table_at_load(tmp_path):
    good = tmp_path / "good.toml"
    good.write_text('[tool.perfgate]\n[tool.perfgate.expect]\n"w/*/eager/cpu" = ["status == ok"]\n'
                    '[tool.perfgate.expect."w/*/compile/*"]\nspeedup_vs = {toggle = "eager", min = 1.0}\n')
    settings = config.load(good)
    assert [r.text for r in settings.expectations] == ["status == ok", "speedup_vs(eager) >= 1"]
    bad = tmp_path / "bad.toml"
    bad.write_text('[tool.perfgate]\n[tool.perfgate.expect]\n"w/*/eager/cpu" = ["kernels >= 1"]\n')
    with pytest.raises(ConfigError, match=r"bad.toml \[tool.perfgate.expect\]: 'w/\*/eager/cpu': rule 'kernels >= 1': "
                                          r"unknown metric 'kernels'; valid: "):
        config.load(bad)


@pytest.mark.slow
@pytest.mark.parametrize("rule, message", [
    ("speedup_vs_eager", "not a rule; write METRIC OP VALUE"),
    ("memory_vs_eager <= -1", "memory_vs_eager is a ratio, always above 0"),
])
def test_cli_exits_2_on_a_malformed_rule(tmp_path, rule, message):
    (tmp_path / "pyproject.toml").write_text('[tool.perfgate]\n[tool.perfgate.expect]\n'
                                             f'"w/*/eager/cpu" = ["{rule}"]\n')
    proc = run_cli("compare", str(tmp_path), str(tmp_path), cwd=tmp_path)
    assert proc.returncode == 2
    assert message in proc.stderr and proc.stderr.count("\n") == 1


def test_a_workload_file_with_a_bad_rule_fails_to_load(tmp_path):
    from perfgate.worker.discovery import discover

    (tmp_path / "bad.py").write_text(
        "from perfgate.workload import Workload\n"
        "class Bad(Workload):\n"
        "    name = 'bad'\n    description = 'x'\n"
        "    sizes = {'smoke': {}, 'pr': {}, 'full': {}}\n"
        "    expectations = {'bad/*/eager/cpu': ['speedup_vs_eager >= 2x']}\n")
    found = discover([tmp_path])
    assert not found.workloads
    assert "workload 'bad' expectations" in found.errors[0]["error"]
    assert "needs a number, got '2x'" in found.errors[0]["error"]


def test_a_renamed_subclass_of_a_standard_workload_starts_without_its_claims(tmp_path):
    """A variant of operator_rollout under its own name loads (its parent's claims are about the parent's
    cases); one that keeps the name keeps the claims; its own claims are checked against its name."""
    from perfgate.worker.discovery import discover

    head = f"import sys\nsys.path.insert(0, {str(ROOT / 'workloads')!r})\nfrom operator_rollout import OperatorRollout\n"
    (tmp_path / "variant.py").write_text(head + "class Variant(OperatorRollout):\n    name = 'variant'\n")
    (tmp_path / "same.py").write_text(head + "class Same(OperatorRollout):\n    pass\n")
    (tmp_path / "own.py").write_text(head + "class Own(OperatorRollout):\n    name = 'own'\n"
                                     "    expectations = {'operator_rollout/*/eager/*': ['status == ok']}\n")
    found = discover([tmp_path])
    variant, _ = found.workloads["variant"]
    assert variant.describe()["expectations"] == {}
    same, _ = found.workloads["operator_rollout"]
    claims = same.describe()["expectations"]
    assert claims and all(p.startswith("operator_rollout/") for p in claims)
    assert [e["error"] for e in found.errors if "own" in e["error"]][0].endswith(
        "a workload's expectations apply to its own cases (own/SIZE/TOGGLES/DEVICE)")


# ---------------------------------------------------------------- every comparison, CI-aware


@pytest.mark.parametrize("op, bound, interval, outcome", [
    (">=", 1.5, (1.6, 1.7), "met"), (">=", 1.5, (1.5, 1.5), "met"), (">=", 1.5, (1.2, 1.4), "missed"),
    (">=", 1.5, (1.4, 1.6), "unknown"),
    (">", 1.5, (1.5, 1.5), "missed"), (">", 1.5, (1.51, 1.6), "met"), (">", 1.5, (1.5, 1.6), "unknown"),
    ("<=", 3, (2, 3), "met"), ("<=", 3, (4, 5), "missed"), ("<=", 3, (2, 4), "unknown"),
    ("<", 3, (3, 3), "missed"), ("<", 3, (1, 2.9), "met"), ("<", 3, (2, 3), "unknown"),
    ("==", 0, (0, 0), "met"), ("==", 0, (1, 1), "missed"), ("==", 0, (-1, 1), "unknown"), ("==", 0, (1, 2), "missed"),
    ("!=", 0, (0, 0), "missed"), ("!=", 0, (1, 2), "met"), ("!=", 0, (-1, 1), "unknown"),
])
def test_every_comparison_against_an_interval(op, bound, interval, outcome):
    low, high = interval
    assert expect._judge(op, float(bound), (low + high) / 2, float(low), float(high)) == outcome


@pytest.fixture(scope="module")
def run() -> RunResult:
    # compile runs 1.3x eager; amp-bf16 drifts; torchscript failed (compile-error); cuda-graphs skipped
    return synthetic_run(["rollout"], toggles=("eager", "compile", "amp-bf16", "torchscript", "cuda-graphs"))


def outcome(run: RunResult, pattern: str, text: str) -> expect.Outcome:
    (o,) = expect.evaluate(run, [parse_rule_text(text, pattern)]).outcomes
    return o


def test_speedup_rules_use_the_ratio_ci(run):
    o = outcome(run, "rollout/*/compile/cpu", "speedup_vs_eager >= 1.2")
    assert o.outcome == "met" and 1.2 < o.low < o.value < o.high
    assert outcome(run, "rollout/*/compile/cpu", "speedup_vs_eager >= 1.5").outcome == "missed"
    straddled = outcome(run, "rollout/*/compile/cpu", f"speedup_vs_eager >= {o.value:.4f}")
    assert straddled.outcome == "unknown" and "straddles" in straddled.reason
    vs = outcome(run, "rollout/*/eager/cpu", "speedup_vs(compile) <= 0.9")
    assert vs.outcome == "met" and vs.value == pytest.approx(1 / o.value, rel=1e-9)
    missing = outcome(run, "rollout/*/compile/cpu", "speedup_vs(groupnorm) >= 1")
    assert missing.outcome == "unknown" and "no groupnorm case" in missing.reason


def test_step_time_and_first_call_use_their_intervals(run):
    st = run.step_time(run.case("rollout/smoke/eager/cpu"))  # the interval the reports print
    o = outcome(run, "rollout/*/eager/cpu", f"step_time_s <= {st.ci_high * 1.01}")
    assert o.outcome == "met" and (o.low, o.high) == (st.ci_low, st.ci_high)
    assert outcome(run, "rollout/*/eager/cpu", f"step_time_s <= {st.median}").outcome == "unknown"
    first = outcome(run, "rollout/*/eager/cpu", "first_call_s <= 1")
    assert first.outcome == "met" and first.low <= first.value == first.high


def test_a_case_of_one_process_has_no_interval_to_meet_a_rule_by():
    """One process gave a rule the CI of the median of its samples pooled, as if they were independent."""
    one = synthetic_run(["rollout"], toggles=("eager", "compile"))
    one = replace(one, cases=[replace(c, processes=c.processes[:1]) for c in one.cases])
    o = outcome(one, "rollout/*/eager/cpu", "step_time_s <= 100")
    assert o.outcome == "unknown" and "1 process: no interval" in o.reason
    sp = outcome(one, "rollout/*/compile/cpu", "speedup_vs_eager >= 0.001")
    assert sp.outcome == "unknown" and "1 process: no interval" in sp.reason


def with_peaks(run: RunResult, peaks: dict[str, list[float]], metric: str = "peak_rss_bytes") -> RunResult:
    """``run`` with its cases' worker processes peaking at ``peaks[toggle]`` bytes (one per process)."""
    cases = []
    for c in run.cases:
        if c.spec.toggle_name in peaks:
            values = peaks[c.spec.toggle_name]
            c = replace(c, processes=[replace(p, **{metric: v}) for p, v in zip(c.processes, values, strict=False)]
                        [:len(values)])
        cases.append(c)
    return replace(run, cases=cases)


def test_memory_vs_eager_rules_use_the_peak_ratio_and_its_interval_over_processes():
    run = with_peaks(synthetic_run(["rollout"], toggles=("eager", "compile", "channels-last", "amp-bf16")),
                     {"eager": [1e9, 1e9], "compile": [6.5e8, 6.5e8], "channels-last": [0.9e9, 1.1e9],
                      "amp-bf16": [7e8]})
    fused = outcome(run, "rollout/*/compile/cpu", "memory_vs_eager <= 0.7")  # every process peaked alike: exact
    assert fused.outcome == "met" and (fused.value, fused.low, fused.high) == (0.65, 0.65, 0.65)
    assert outcome(run, "rollout/*/compile/cpu", "memory_vs_eager <= 0.6").outcome == "missed"
    assert outcome(run, "rollout/*/compile/cpu", "memory_vs_eager < 0.65").outcome == "missed"
    spread = outcome(run, "rollout/*/channels-last/cpu", "memory_vs_eager <= 1.05")  # its processes differ
    assert spread.outcome == "unknown" and "straddles" in spread.reason and spread.low < 1 < spread.high
    assert outcome(run, "rollout/*/channels-last/cpu", "memory_vs_eager <= 100").outcome == "met"
    one = outcome(run, "rollout/*/amp-bf16/cpu", "memory_vs_eager <= 0.8")
    assert one.outcome == "unknown" and one.reason == "the peak_rss_bytes ratio's interval: 1 process: no interval"
    assert outcome(run, "rollout/*/eager/cpu", "memory_vs_eager == 1").outcome == "met"
    alone = replace(run, cases=[c for c in run.cases if c.spec.toggle_name != "eager"])
    assert "no eager case of rollout/smoke on cpu" in outcome(alone, "rollout/*/compile/cpu",
                                                              "memory_vs_eager <= 0.7").reason


def test_memory_vs_eager_compares_cuda_allocated_on_a_gpu_and_results_json_carries_it(tmp_path):
    run = synthetic_run(["rollout"], toggles=("eager", "compile"), device="cuda")
    run = with_peaks(with_peaks(run, {"eager": [3e8, 3e8], "compile": [1e8, 1e8]}),  # the process RSS: not this
                     {"eager": [2e9, 2e9], "compile": [1.3e9, 1.3e9]}, "peak_cuda_allocated_bytes")
    assert outcome(run, "rollout/*/compile/cuda", "memory_vs_eager <= 0.7").value == 0.65
    runner.write_results(run, tmp_path / "results.json")
    derived = json.loads((tmp_path / "results.json").read_text())["cases"][1]["derived"]["memory_vs_eager"]
    assert derived["metric"] == "peak_cuda_allocated_bytes" and (derived["value"], derived["low"]) == (0.65, 0.65)
    back = load_results(tmp_path / "results.json")
    assert [p.peak_cuda_allocated_bytes for p in back.cases[1].processes] == [1.3e9, 1.3e9]


def test_a_run_without_peaks_per_process_compares_the_profile_pass_peaks_with_no_interval(run):
    """Results written before processes recorded their peaks: the one peak of the profile pass (process 0)."""
    o = outcome(run, "rollout/*/amp-bf16/cpu", "memory_vs_eager <= 2")
    assert o.outcome == "unknown" and "no interval" in o.reason
    assert run.memory_vs_eager(run.case("rollout/smoke/amp-bf16/cpu"))[1].value == pytest.approx(1.2)


def test_metrics_aliases_status_and_accuracy(run):
    assert outcome(run, "rollout/*/eager/cpu", "aten_ops_per_step == 42").outcome == "met"
    assert outcome(run, "rollout/*/eager/cpu", "aten_ops_per_step <= 41").outcome == "missed"
    assert outcome(run, "rollout/*/compile/cpu", "graph_breaks == 0").outcome == "missed"
    unmeasured = outcome(run, "rollout/*/eager/cpu", "warm_setup_s <= 0.05")
    assert unmeasured.outcome == "unknown" and "setup_per_construction_s was not measured" in unmeasured.reason
    assert outcome(run, "rollout/*/amp-bf16/cpu", "accuracy == ok").outcome == "missed"
    assert outcome(run, "rollout/*/eager/cpu", "accuracy == ok").outcome == "met"
    assert outcome(run, "rollout/*/torchscript/cpu", "status == ok").outcome == "missed"
    assert outcome(run, "rollout/*/torchscript/cpu", "status == compile-error").outcome == "met"
    assert outcome(run, "rollout/*/torchscript/cpu", "status != oom").outcome == "met"
    assert outcome(run, "rollout/*/cuda-graphs/cpu", "status == skipped").outcome == "met"


def test_a_case_that_did_not_run_is_unknown_for_numbers(run):
    o = outcome(run, "rollout/*/torchscript/cpu", "speedup_vs_eager >= 1")
    assert o.outcome == "unknown" and "did not run (failed, compile-error)" in o.reason
    assert outcome(run, "rollout/*/torchscript/cpu", "accuracy == ok").outcome == "unknown"


def test_rules_matching_no_case_are_listed_apart(run):
    ev = expect.evaluate(run, parse_rules({"rollout/*/*/cuda": ["speedup_vs_eager >= 2"],
                                           "rollout/*/*/cpu": ["status == ok"]}))
    assert [r.text for r in ev.unmatched] == ["speedup_vs_eager >= 2"]
    assert len(ev.outcomes) == 5 and ev.counts() == {"met": 3, "missed": 2, "unknown": 0}
    assert ev.gate_failed


def test_warn_rules_never_fail_the_gate(run):
    ev = expect.evaluate(run, parse_rules({"rollout/*/*/cpu": [{"rule": "status == ok", "severity": "warn"}]}))
    assert ev.counts()["missed"] == 2 and not ev.gate_failed and len(ev.warnings) == 2


# ---------------------------------------------------------------- results.json


RULES = {"rollout/*/compile/cpu": ["speedup_vs_eager >= 1.2", "speedup_vs_eager >= 1.5"],
         "rollout/*/amp-bf16/cpu": [{"rule": "accuracy == ok", "severity": "warn"}],
         "rollout/*/*/cuda": ["status == ok"]}


def with_rules(run: RunResult, rules: dict) -> RunResult:
    return replace(run, expectations=[r.to_json() for r in parse_rules(rules)])


def test_results_json_carries_rules_and_outcomes_and_reads_back(run, tmp_path):
    path = tmp_path / "results.json"
    runner.write_results(with_rules(run, RULES), path)
    data = json.loads(path.read_text())
    assert data["schema"] == "perfgate.results/2"
    exp = data["expectations"]
    assert [r["text"] for r in exp["rules"]] == ["speedup_vs_eager >= 1.2", "speedup_vs_eager >= 1.5",
                                                 "accuracy == ok", "status == ok"]
    assert [(o["rule"], o["outcome"]) for o in exp["outcomes"]] == [(0, "met"), (1, "missed"), (2, "missed")]
    assert exp["unmatched"] == [3] and exp["gate_failed"] is True
    back = load_results(path)
    assert [Rule.from_json(r).text for r in back.expectations] == [r["text"] for r in exp["rules"]]
    assert expect.evaluate(back).to_json() == exp


def test_the_writers_judge_the_cases_they_write_not_those_a_file_held(run, tmp_path):
    """The outcomes a results.json or a baseline carries are those of the cases written with them: a run
    read back with its stored outcomes, then given fewer cases (the gate's head file, a merge), is judged
    again when written; the data model alone only carries them."""
    from perfgate.judging import baselines

    runner.write_results(with_rules(run, RULES), tmp_path / "results.json")
    back = load_results(tmp_path)
    assert back.expectation_outcomes["gate_failed"] is True  # read back as written
    fewer = replace(back, cases=[c for c in back.cases if c.spec.toggle_name != "compile"])
    assert fewer.to_json()["expectations"]["gate_failed"] is True  # carried as it was, not judged
    runner.write_results(fewer, tmp_path / "fewer.json")
    exp = json.loads((tmp_path / "fewer.json").read_text())["expectations"]
    assert exp == expect.evaluate(fewer).to_json() and exp["gate_failed"] is False
    assert [exp["rules"][i]["text"] for i in exp["unmatched"]] == [
        "speedup_vs_eager >= 1.2", "speedup_vs_eager >= 1.5", "status == ok"]
    baselines.write_baseline(baselines.from_run(fewer), tmp_path / "m" / "smoke.json")
    stored = json.loads((tmp_path / "m" / "smoke.json").read_text())["results"]["expectations"]
    assert stored == exp


def test_a_run_without_rules_is_written_with_no_outcomes(run, tmp_path):
    runner.write_results(run, tmp_path / "results.json")
    exp = json.loads((tmp_path / "results.json").read_text())["expectations"]
    assert exp == {"rules": [], "outcomes": [], "unmatched": []}
    assert expect.judge(run).expectation_outcomes == {}


def test_a_version_1_results_file_reads_with_no_rules(tmp_path):
    data = json.loads(synthetic_run(["w"]).dumps())
    data["schema"] = "perfgate.results/1"
    del data["expectations"], data["ceilings"]
    (tmp_path / "results.json").write_text(json.dumps(data))
    run = load_results(tmp_path)
    assert run.expectations == [] and run.ceilings == {} and run.schema == "perfgate.results/2"


def test_a_tampered_rule_in_results_is_a_schema_error(run, tmp_path):
    from perfgate.model.results import SchemaError

    data = json.loads(with_rules(run, RULES).dumps())
    data["expectations"]["rules"][0]["metric"] = "__import__('os')"
    (tmp_path / "results.json").write_text(json.dumps(data))
    with pytest.raises(SchemaError, match="malformed results.*unknown metric"):
        load_results(tmp_path)
    data["expectations"]["rules"][0].update(metric="status", pattern=["a", "b"])
    (tmp_path / "results.json").write_text(json.dumps(data))
    with pytest.raises(SchemaError, match="malformed results.*pattern must be a string"):
        load_results(tmp_path)


# ---------------------------------------------------------------- reports


def test_markdown_junit_and_html_show_the_expectations(run):
    report = ReportInput(with_rules(run, RULES))
    md = MarkdownExporter().render(report).decode()
    assert "FAIL: 1 expectation(s) missed" in md
    assert "### Expectations: 1 met, 2 missed, 0 unknown" in md
    assert "| **missed** | `rollout/smoke/compile/cpu` | `speedup_vs_eager >= 1.5` |" in md
    assert "| **missed (warn)** | `rollout/smoke/amp-bf16/cpu` | `accuracy == ok` |" in md

    xml = JunitExporter().render(report).decode()
    JUNIT_SCHEMA.validate(xml)
    suite = next(s for s in ET.fromstring(xml) if s.get("name") == "perfgate expectations")
    assert (suite.get("tests"), suite.get("failures"), suite.get("skipped")) == ("3", "1", "0")
    failed = suite.findall("testcase[failure]")
    assert [tc.get("name") for tc in failed] == ["rollout/smoke/compile/cpu speedup_vs_eager >= 1.5"]
    assert "WARNING missed: accuracy == ok" in suite.find("system-out").text

    html = HtmlExporter().render(report).decode()
    assert '<section id="expectations">' in html and "1 rule(s) matched no case of this run" in html
    assert "speedup_vs_eager &gt;= 1.5" in html and 'class="tag missed-warn"' in html


def test_no_rules_no_section(run):
    report = ReportInput(run)
    assert "Expectations" not in MarkdownExporter().render(report).decode()
    assert 'id="expectations"' not in HtmlExporter().render(report).decode()
    assert "perfgate expectations" not in JunitExporter().render(report).decode()


# ---------------------------------------------------------------- the gate's exit code


@pytest.mark.parametrize("rules, code", [
    (RULES, 1),  # a missed fail rule
    ({"rollout/*/compile/cpu": [{"rule": "speedup_vs_eager >= 1.5", "severity": "warn"}]}, 0),
    ({"rollout/*/compile/cpu": ["speedup_vs_eager >= 1.2"]}, 0),
    ({}, 0),
])
@pytest.mark.slow
def test_compare_gate_exit_code_follows_the_fail_rules(run, tmp_path, rules, code):
    cur, base = tmp_path / "cur", tmp_path / "base"
    cur.mkdir(), base.mkdir()
    (cur / "results.json").write_text(with_rules(run, rules).dumps())
    (base / "results.json").write_text(run.dumps())
    proc = run_cli("compare", str(cur), str(base), "--gate", cwd=tmp_path)
    assert proc.returncode == code, proc.stdout + proc.stderr
    if code:
        assert "expectation missed: rollout/smoke/compile/cpu: speedup_vs_eager >= 1.5" in proc.stdout
    assert run_cli("compare", str(cur), str(base), cwd=tmp_path).returncode == 0  # without --gate: reported only


def test_the_console_banner_agrees_with_the_exit_code_when_only_an_expectation_fails(run):
    """A gate with no regression but a missed fail expectation exits 1. Before 2026-11-26 its console ended
    "Gate passed: no regression and no newly failing case." and only then listed the missed expectation:
    a log that read as a pass for a gate that failed. Now the banner says GATE FAILED and names it."""
    from perfgate.gating import gate
    from perfgate.judging.compare import compare_runs
    from perfgate.judging.gate_settings import GateSettings

    cur = with_rules(run, {"rollout/*/compile/cpu": ["speedup_vs_eager >= 1.5"]})
    comparison = compare_runs(cur, run, GateSettings(bootstrap_resamples=200))
    assert not comparison.gate_failed
    lines: list[str] = []
    assert gate.conclude(comparison, True, lines.append, cur) == gate.EXIT_GATE
    text = "\n".join(lines)
    assert "Gate passed" not in text
    assert "GATE FAILED" in text and "expectation missed: rollout/smoke/compile/cpu: speedup_vs_eager >= 1.5" in text
    assert text.index("expectation missed") < text.index("GATE FAILED")
    lines.clear()
    ok = with_rules(run, {"rollout/*/compile/cpu": ["speedup_vs_eager >= 1.2"]})
    assert gate.conclude(compare_runs(ok, run, GateSettings(bootstrap_resamples=200)), True, lines.append, ok) == 0
    assert "Gate passed" in "\n".join(lines)


def test_a_failure_without_a_class_is_an_error_as_shown():
    """A failed case whose result names no failure class shows as 'failed (error)'; `status == error` was
    missed on it (and `status != error` met), contradicting the value shown."""
    from perfgate.model.results import CaseResult, CaseSpec

    case = CaseResult(CaseSpec("w", "smoke", ("eager",), "cpu"), "failed", failure_class=None, message="boom")
    run = RunResult(run_id="r", suite="s", environment={}, cases=[case], started_at=None, finished_at=None,
                    settings={})
    eq = expect.evaluate_case(parse_rule_text("status == error", "w/*/*/*"), case, run)
    ne = expect.evaluate_case(parse_rule_text("status != error", "w/*/*/*"), case, run)
    assert (eq.outcome, eq.value, ne.outcome) == ("met", "failed (error)", "missed")
