"""perfgate.model.results: JSON round trip, schema errors, statistics derived from the raw samples. No torch."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest
from conftest import REPO

from perfgate.model.results import CaseResult, CaseSpec, ProcessSamples, RunResult, SchemaError, load_results
from perfgate.model.results_file import SCHEMA


def spec(toggles=("eager",), workload="rollout"):
    return CaseSpec(workload=workload, size="smoke", toggles=toggles, device="cpu",
                    params=(("T", 4), ("grid", 24)))


def ok_case(toggles=("eager",), samples_ns=(4000, 4200, 4400), loops=2, steps=2):
    procs = [ProcessSamples(samples_ns=list(samples_ns), loops=loops, steps_per_unit=steps, first_call_s=0.5,
                            warmup_units=3, process_index=i) for i in range(2)]
    return CaseResult(spec=spec(toggles), status="ok", processes=procs, metrics={"graph_breaks": 0.0},
                      accuracy={"rel_l2": 0.0, "verdict": "ok"}, duration_s=1.5, metadata={"threads": 1})


def run():
    failed = CaseResult(spec=spec(("compile",)), status="failed", failure_class="timeout", message="killed")
    skipped = CaseResult(spec=spec(("cuda-graphs",)), status="skipped", message="needs CUDA")
    return RunResult(run_id="r1", suite="smoke", environment={"torch": "2.13.0", "threads": 1},
                     cases=[ok_case(), failed, skipped], started_at="2026-01-01T00:00:00", settings={"processes": 2})


def test_case_spec_key_and_json_round_trip():
    s = spec(("compile", "amp-bf16"))
    assert s.key == "rollout/smoke/compile+amp-bf16/cpu"
    assert s.to_json()["params"] == {"T": 4, "grid": 24}
    back = CaseSpec.from_json(json.loads(json.dumps(s.to_json())))
    assert back == s and hash(back) == hash(s)


def test_results_file_round_trip(tmp_path):
    r = run()
    path = tmp_path / "results.json"
    path.write_text(r.dumps())
    back = load_results(tmp_path)  # a run folder works as well as the file
    assert back.to_json() == r.to_json()
    assert back.schema == SCHEMA
    assert back.case("rollout/smoke/eager/cpu").processes[1].process_index == 1
    assert back.counts() == {"ok": 1, "skipped": 1, "failed": 1}


def test_derived_step_time_is_per_step_from_every_process():
    case = ok_case(samples_ns=(4000, 4200, 4400), loops=2, steps=2)
    # one sample = loops x steps = 4 steps -> 1000, 1050, 1100 ns per step, twice
    assert case.step_samples_s == pytest.approx([1e-6, 1.05e-6, 1.1e-6] * 2)
    st = case.step_time()
    assert st.n == 6 and st.n_processes == 2
    assert st.median == pytest.approx(1.05e-6)
    derived = case.to_json()["derived"]
    assert derived["step_time_s"]["median"] == pytest.approx(1.05e-6)
    # the case's step time: the geometric mean of each process's 10th percentile (1.01 us in both)
    assert st.value == pytest.approx(1.01e-6) and derived["step_time_s"]["estimate"] == pytest.approx(1.01e-6)
    assert derived["throughput_steps_per_s"] == pytest.approx(1 / 1.01e-6)
    assert derived["first_call_s"] == 0.5


def test_a_runs_step_time_carries_its_recorded_run_to_run_term_and_says_what_it_means():
    """results.json's derived step time is the interval the reports print: from the processes, plus the
    run-to-run term the run recorded for the case's device (the defaults where it recorded none); it says
    so in ``ci_means``. The derived block is never read back, so a file reads the same as before."""
    from dataclasses import replace

    r = run()
    case = r.case("rollout/smoke/eager/cpu")
    assert r.run_to_run(case) == 0.08
    assert replace(r, settings={"gate": {"run_to_run": 0.07}}).run_to_run(case) == 0.07
    gpu = replace(case, spec=replace(case.spec, device="cuda"))
    assert r.run_to_run(gpu) == 0.03
    assert replace(r, settings={"gate": {"run_to_run_cuda": "x"}}).run_to_run(gpu) == 0.03  # untrusted: default
    st = r.step_time(case)
    assert st.run_to_run == 0.08 and st.process_half_width < st.ci_half_width_rel
    derived = json.loads(r.dumps())["cases"][0]["derived"]["step_time_s"]
    assert (derived["ci_low"], derived["ci_high"]) == (pytest.approx(st.ci_low), pytest.approx(st.ci_high))
    assert "another run" in derived["ci_means"]
    one = replace(r, cases=[replace(case, processes=case.processes[:1])])
    assert json.loads(one.dumps())["cases"][0]["derived"]["step_time_s"]["ci_low"] is None


def test_failed_case_has_no_step_time():
    failed = run().cases[1]
    assert failed.step_time() is None and failed.to_json()["derived"] == {}


def test_speedup_against_eager_in_the_same_run():
    r = RunResult(run_id="r", suite=None, environment={},
                  cases=[ok_case(samples_ns=(4000,) * 3), ok_case(("compile",), samples_ns=(2000,) * 3)])
    sp = r.speedup(r.case("rollout/smoke/compile/cpu"))
    assert sp.value == pytest.approx(2.0)
    assert r.speedup(r.case("rollout/smoke/eager/cpu")).value == pytest.approx(1.0)


def test_with_case_replaces_the_same_key():
    r = run().with_case(ok_case(("compile",)))
    assert len(r.cases) == 3
    assert r.case("rollout/smoke/compile/cpu").status == "ok"


def test_unknown_schema_is_an_error_naming_it(tmp_path):
    data = run().to_json()
    data["schema"] = "perfgate.results/99"
    (tmp_path / "results.json").write_text(json.dumps(data))
    with pytest.raises(SchemaError, match="unknown schema 'perfgate.results/99'.*perfgate.results/1"):
        load_results(tmp_path / "results.json")


def test_corrupt_file_is_an_error_naming_the_file(tmp_path):
    path = tmp_path / "results.json"
    path.write_text('{"schema": "perfgate.results/1", "run_id": ')
    with pytest.raises(SchemaError) as exc:
        load_results(path)
    assert str(path) in str(exc.value) and "not valid JSON" in str(exc.value)
    assert "\n" not in str(exc.value)


def test_missing_file_and_non_object(tmp_path):
    with pytest.raises(SchemaError, match="cannot read"):
        load_results(tmp_path / "nope.json")
    (tmp_path / "list.json").write_text("[]")
    with pytest.raises(SchemaError, match="expected a JSON object"):
        load_results(tmp_path / "list.json")


def test_malformed_entries(tmp_path):
    data = run().to_json()
    data["cases"][0]["status"] = "great"
    (tmp_path / "a.json").write_text(json.dumps(data))
    with pytest.raises(SchemaError, match=r"cases\[0\]\.status must be one of ok, skipped, failed, got 'great'"):
        load_results(tmp_path / "a.json")
    data = run().to_json()
    del data["cases"][0]["spec"]
    (tmp_path / "b.json").write_text(json.dumps(data))
    with pytest.raises(SchemaError, match=r"cases\[0\]\.spec is missing"):
        load_results(tmp_path / "b.json")


@pytest.mark.parametrize("field, value, said", [
    ("graph_break_reasons", 5, "graph_break_reasons must be an array, got 5"),
    ("trace_file", 5, "trace_file must be a string, got 5"),
    ("trace_dir", ["tb"], "trace_dir must be a string, got ['tb']"),
    ("top_ops", 5, "top_ops must be an array, got 5"),
    ("top_ops", [{"name": "aten::add", "count_per_step": "x"}], "top_ops[0].count_per_step must be a number"),
    ("errors", "flops: x", "errors must be an array, got 'flops: x'"),
])
def test_a_profile_field_the_reports_read_is_checked_at_load(tmp_path, field, value, said):
    """A case's profile was free-form: a number where report.html joins the graph-break reasons, a list where it
    builds a trace path, crashed every report of the run (exit 3, "a perfgate bug") instead of exit 2."""
    data = run().to_json()
    data["cases"][0]["profile"] = {"window": {"steps": 3}, field: value}
    (tmp_path / "a.json").write_text(json.dumps(data))
    with pytest.raises(SchemaError, match=re.escape(f"a.json: cases[0].profile.{said}")):
        load_results(tmp_path / "a.json")


def test_a_profile_round_trips_with_the_keys_no_reader_checks(tmp_path):
    case = ok_case()
    case.profile = {"top_ops": [{"name": "aten::add", "kind": "op", "count_per_step": 2, "self_time_us_per_step": 1.5,
                                 "extra": 1}], "graph_break_reasons": ["x"], "trace_dir": "tb/a", "trace_file": None,
                    "errors": ["flops: failed"], "window": {"steps": 3}, "compile": {"recompile_reasons": []}}
    r = run()
    r.cases[0] = case
    (tmp_path / "r.json").write_text(r.dumps())
    assert load_results(tmp_path / "r.json").cases[0].profile == case.profile


@pytest.mark.slow
def test_the_data_model_imports_no_torch():
    code = ("import sys, perfgate.model.results, perfgate.util.stats, perfgate.model.config, perfgate.running.plan, perfgate.running.runner, perfgate.cli; "
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


@pytest.mark.parametrize("document, dataclass", [("results.ProcessDocument", "results.ProcessSamples"),
                                                  ("comparison.VerdictDocument", "comparison.Verdict")])
def test_a_declared_document_and_its_dataclass_agree_on_fields_and_defaults(document, dataclass):
    """The readers build the dataclass from every field of its document: the two must not drift apart."""
    import dataclasses
    import importlib

    def named(name):
        module, attribute = name.split(".")
        return getattr(importlib.import_module(f"perfgate.model.{module}"), attribute)

    doc, cls = named(document), named(dataclass)
    fields = {f.name: f.default for f in dataclasses.fields(cls)}
    assert set(doc.model_fields) == set(fields)
    for name, info in doc.model_fields.items():
        if not info.is_required():
            assert info.default == fields[name], name


def _names(model) -> set[str]:
    return {info.alias or name for name, info in model.model_fields.items()}


def test_each_records_file_form_holds_the_fields_its_dataclass_does():
    """A record is declared once, as its dataclass: its document is generated from it, and what it writes is
    what the document reads. A field added to the dataclass alone, or to a writer alone, fails here; so does
    one the file holds in another shape than the dataclass says (another key, inside another field, not at
    all) unless the dataclass says so."""
    import dataclasses

    from perfgate.judging.baselines import Baseline, BaselineDocument
    from perfgate.model import comparison, results

    ack = comparison.Acknowledgement(entry="acknowledge[0]", case="w/*", metric="step_time", reason="known",
                                     state="in-force", matches=(comparison.AckMatch("w/s/eager/cpu", "step_time",
                                                                                    "acknowledged", 1.1),))
    case, r = ok_case(), run()
    compared = comparison.Comparison(verdicts=[], acknowledgements=[ack])
    # (record, its document, what its writer writes, the file's keys for readers only or named otherwise,
    # the record's fields the file holds under another key, inside another field or not at all)
    generated = [(results.CaseSpec, results.SpecDocument, case.spec.to_json(), set(), set()),
                 (results.ProcessSamples, results.ProcessDocument, case.processes[0].to_json(), set(), set()),
                 (results.CaseResult, results.CaseDocument, case.to_json(), {"key", "derived"}, set()),
                 (comparison.AckMatch, comparison.AckMatchDocument, dataclasses.asdict(ack.matches[0]), set(), set()),
                 (comparison.Acknowledgement, comparison.AcknowledgementDocument, ack.to_json(), set(), set()),
                 # the outcomes are written inside "expectations"; "schema" names the file's version
                 (RunResult, results.ResultsDocument, r.to_json(), set(), {"expectation_outcomes"}),
                 # the run is the file's "results", with a copy of its environment; where it was read from is not
                 (Baseline, BaselineDocument, Baseline(r, "m", "smoke").to_json(), {"schema", "results", "environment"},
                  {"run", "path", "file_schema"}),
                 # the run compared with is not in the file; whether the gate failed is, for its readers
                 (comparison.Comparison, comparison.ComparisonDocument, compared.to_json(), {"gate_failed"},
                  {"baseline"})]
    for record, document, written, for_readers, elsewhere in generated:
        fields = {f.name for f in dataclasses.fields(record)}
        assert elsewhere <= fields, record
        assert _names(document) == (fields - elsewhere) | for_readers == set(written), record


def test_a_record_reads_back_from_its_generated_document_as_it_was_written(tmp_path):
    """Every record of a results.json and of a comparison's acknowledgements, written and read back: equal,
    with the shapes the file does not hold (a spec's sorted params, toggles as a tuple) restored."""
    from perfgate.model.comparison import AckMatch, Acknowledgement

    case = ok_case(("compile", "amp-bf16"))
    case.processes[0].gpu_clocks = {"sm_clock_mhz_before": 1980.0, "throttle_reasons_after": [], "vendor": "x"}
    case.profile = {"trace_dir": "tb/x", "window": {"steps": 3}}
    back = CaseResult.from_json(json.loads(json.dumps(case.to_json())))
    assert back == case and back.spec.toggles == ("compile", "amp-bf16") and hash(back.spec) == hash(case.spec)
    assert back.spec.params == (("T", 4), ("grid", 24)) and back.processes[0].gpu_clocks["vendor"] == "x"
    ack = Acknowledgement(entry="acknowledge[1]", case="w/*", metric="step_time", reason="known", state="expired",
                          expires="2026-01-01", matches=(AckMatch("w/s/eager/cpu", "step_time", "expired", 1.3),))
    again = Acknowledgement.from_json(json.loads(json.dumps(ack.to_json())))
    assert again == ack and isinstance(again.matches, tuple) and isinstance(again.matches[0], AckMatch)


@pytest.mark.parametrize("where, value, said", [
    ("spec.toggles", ["eager", ""], "cases[0].spec.toggles[1] must be a non-empty printable string"),
    ("spec.params", [["T", 4]], "cases[0].spec.params must be an object, got"),
    ("status", "fine", "cases[0].status must be one of ok, skipped, failed, got 'fine'"),
    ("processes.1.loops", 0, "cases[0].processes[1].loops must be an integer >= 1, got 0"),
    ("processes.0.gpu_clocks", [], "cases[0].processes[0].gpu_clocks must be an object, got []"),
    ("duration_s", -1, "cases[0].duration_s must be a finite number >= 0, got -1"),
])
def test_a_bad_field_of_a_generated_document_is_one_line_naming_it(tmp_path, where, value, said):
    data = run().to_json()
    target = data["cases"][0]
    *path, last = where.split(".")
    for part in path:
        target = target[int(part)] if part.isdigit() else target[part]
    target[last] = value
    (tmp_path / "r.json").write_text(json.dumps(data))
    with pytest.raises(SchemaError, match=re.escape(f"r.json: {said}")):
        load_results(tmp_path / "r.json")


@pytest.mark.slow
def test_a_runs_bookkeeping_imports_no_torch(tmp_path):
    """After the workers: comparing with a baseline, every report, and the TensorBoard scalars, all in the
    orchestrating process, as `perfgate run` does them; none of it may import torch (docs/architecture.md)."""
    reports = REPO / "tests" / "data" / "reports"
    code = f"""
import shutil, sys
from pathlib import Path
from perfgate import cli
from perfgate.commands import session
from perfgate.model.results import load_results
run_dir = Path({str(tmp_path)!r})
shutil.copyfile({str(reports / "current.json")!r}, run_dir / "results.json")
for args in (["compare", str(run_dir), {str(reports / "baseline.json")!r}], ["report", str(run_dir)]):
    try:
        cli.main(args, standalone_mode=False)
    except SystemExit:
        pass
session.write_tensorboard_scalars(load_results(run_dir / "results.json"), run_dir)
print(any((run_dir / "tb").rglob("events.out.tfevents.*")), "torch" in sys.modules)
"""
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                         env={**os.environ, "PYTHONPATH": str(REPO)})
    assert out.returncode == 0, out.stderr
    assert out.stdout.split()[-2:] == ["True", "False"], out.stdout + out.stderr
    assert (tmp_path / "report.html").is_file() and (tmp_path / "comparison.json").is_file()
