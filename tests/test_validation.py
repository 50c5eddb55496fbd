"""Untrusted files: malformed input is one line and exit 2 through the real CLI, never a
traceback or exit 1; what no check foresaw is one line and exit 3."""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
from pathlib import Path
from typing import Annotated

import pytest
from click.testing import CliRunner
from conftest import cli_env, run_cli
from fixtures.synthetic import synthetic_comparison, synthetic_run

from perfgate import cli
from perfgate.judging import baselines
from perfgate.model.config import ConfigError
from perfgate.reports import registry
from perfgate.reports.base import ReportInput
from perfgate.running.plan import parse_probe_answer
from perfgate.util.validation import (
    NOT_STORED,
    VERSION,
    Count,
    Name,
    NonNegative,
    SchemaError,
    Stored,
    Text,
    check,
    depth,
    document,
    from_document,
    parse_json,
    read_json_file,
)

DATA = Path(__file__).parent / "data" / "reports"


def _run_doc() -> dict:
    return synthetic_run(["operator_rollout"], toggles=("eager", "compile")).to_json()


def _write(path: Path, doc: dict | str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(doc, bytes):
        path.write_bytes(doc)
    else:
        path.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return path


def _assert_exit_2(proc, *needles: str) -> None:
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("perfgate: error: "), proc.stderr
    for n in needles:
        assert n in lines[0], lines[0]


def _mutated(change) -> dict:  # noqa: ANN001
    doc = _run_doc()
    change(doc)
    return doc


# Each entry: a damaged results.json as found by the fault-injection run, and what the one line must name.
RESULTS_CASES = {
    "binary bytes": (b"\x89PNG\r\n\x1a\n\xff\xfe" * 20, "not UTF-8"),
    "100k-deep nesting": ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
    "params: []": (lambda d: d["cases"][0]["spec"].update(params=[]), "cases[0].spec.params must be an object"),
    "samples_ns: ['a']": (lambda d: d["cases"][0]["processes"][0].update(samples_ns=["a"]),
                          "cases[0].processes[0].samples_ns[0] must be a finite number"),
    "loops: 0": (lambda d: d["cases"][0]["processes"][0].update(loops=0),
                 "cases[0].processes[0].loops must be an integer >= 1"),
    "non-numeric metric": (lambda d: d["cases"][0]["metrics"].update(aten_ops_per_step="many"),
                           "cases[0].metrics.aten_ops_per_step must be a number"),
    "schema as a list": (lambda d: d.update(schema=["perfgate.results/2"]), "unknown schema"),
}


@pytest.mark.parametrize("name", list(RESULTS_CASES))
@pytest.mark.slow
def test_a_damaged_results_file_is_exit_2_and_one_line(tmp_path, name):
    damage, needle = RESULTS_CASES[name]
    doc = damage if isinstance(damage, (str, bytes)) else _mutated(damage)
    results = _write(tmp_path / "run" / "results.json", doc)
    _assert_exit_2(run_cli("report", str(results), "--format", "md,html"), str(results), needle)
    baseline = _write(tmp_path / "base.json", _run_doc())
    _assert_exit_2(run_cli("compare", str(results), str(baseline)), needle)  # never exit 1, "regression"


@pytest.mark.parametrize("shard, needle", [
    ("x", "settings.shard must be an object"),
    ({"index": 1, "count": 10**12, "plan": []}, "settings.shard.count must be an integer from 1 to 10000"),
    ({"index": 3, "count": 2}, "settings.shard.index must be an integer from 1 to count (2)"),
])
@pytest.mark.slow
def test_a_malformed_shard_record_is_exit_2_at_merge(tmp_path, shard, needle):
    a = _write(tmp_path / "a" / "results.json", _mutated(lambda d: d["settings"].update(shard=shard)))
    proc = run_cli("merge", str(a.parent), "--out", str(tmp_path / "m"), timeout=60)
    _assert_exit_2(proc, needle)


@pytest.mark.slow
def test_a_bogus_verdict_in_a_shards_comparison_is_exit_2(tmp_path):
    run = synthetic_run(["operator_rollout"], toggles=("eager", "compile"))
    shard = tmp_path / "s1"
    _write(shard / "results.json", run.to_json())
    comp = synthetic_comparison(run, run).to_json()
    comp["verdicts"][0]["kind"] = "bogus"
    _write(shard / "comparison.json", comp)
    proc = run_cli("merge", str(shard), "--out", str(tmp_path / "m"), "--gate")
    _assert_exit_2(proc, "verdicts[0].kind must be one of regression")


@pytest.mark.slow
def test_calibration_entries_of_the_wrong_type_are_exit_2(tmp_path):
    run = synthetic_run(["operator_rollout"], toggles=("eager", "compile"))
    stored = json.loads(baselines.from_run(run).dumps())
    stored["calibration"] = {run.cases[0].key: "tight"}
    path = _write(tmp_path / "smoke.json", stored)
    results = _write(tmp_path / "run" / "results.json", run.to_json())
    _assert_exit_2(run_cli("compare", str(results), str(path), "--gate"), "calibration.", "must be an object")
    stored["calibration"] = {run.cases[0].key: {"threshold": "5%"}}
    _write(path, stored)
    _assert_exit_2(run_cli("baseline", "show", str(path)), ".threshold must be a finite number")


@pytest.mark.slow
def test_a_lone_surrogate_in_a_message_still_gives_every_report(tmp_path):
    doc = _run_doc()
    doc["cases"][1].update(status="failed", failure_class="error", processes=[], message="PLACEHOLDER")
    text = json.dumps(doc).replace("PLACEHOLDER", "bad \\ud800 byte")  # JSON may spell a lone surrogate
    results = _write(tmp_path / "run" / "results.json", text)
    proc = run_cli("report", str(results), "--format", "html,md,junit,csv,json")
    assert proc.returncode == 0, proc.stderr
    assert "bad \ufffd byte" in (results.parent / "report.csv").read_text(encoding="utf-8")
    run = synthetic_run(["operator_rollout"], toggles=("eager", "compile"), fail={"operator_rollout/smoke/compile/cpu"})
    run.cases[1].message = "a worker said \udc80"  # straight from a worker, not through a file
    for exporter in registry().values():
        exporter.render(ReportInput(run, None)).decode("utf-8")


@pytest.mark.slow
def test_a_file_over_the_size_cap_is_refused_without_reading_it_all(tmp_path):
    results = _write(tmp_path / "run" / "results.json", _run_doc())
    with open(results, "a") as fh:
        fh.write(" " * (2 * 1024 * 1024))
    proc = run_cli("report", str(results), env=cli_env(PERFGATE_MAX_FILE_MB="1"))
    _assert_exit_2(proc, "larger than 1 MiB", "PERFGATE_MAX_FILE_MB")


def test_reader_primitives(tmp_path):
    assert depth([[{"a": [1]}]]) == 4 and depth(3) == 0
    with pytest.raises(SchemaError, match="nested more than 64 deep"):
        parse_json("[" * 70 + "]" * 70, "f", "results")
    assert parse_json('{"k\\udc80": "\\ud83d\\ude00 \\ud800"}', "f", "x") == {"k\ufffd": "\U0001f600 \ufffd"}
    with pytest.raises(SchemaError, match=r"cannot read results \(no such file\); run it first"):
        read_json_file(tmp_path / "nope.json", "results", "run it first")


@dataclasses.dataclass(frozen=True)
class _Part:
    """A part."""

    name: Name
    count: Count = 1


@dataclasses.dataclass
class _Whole:
    """A whole, with its parts."""

    label: Name
    parts: Annotated[tuple[_Part, ...], Stored(list[_PartDocument], default=[], read=tuple)] = ()
    weight: NonNegative | None = None


_PartDocument = document(_Part, "_PartDocument")
_WholeDocument = document(_Whole, "_WholeDocument", note=(Text | None, None))


def test_a_records_document_is_generated_from_its_dataclass_and_read_back_into_it():
    """validation.document: one field per dataclass field with its value type, or the type and default its
    Stored says, plus the fields written for readers; from_document reads nested records back and converts."""
    assert list(_WholeDocument.model_fields) == ["label", "parts", "weight", "note"]
    assert _WholeDocument.model_fields["parts"].default == [] and _WholeDocument.__doc__ == _Whole.__doc__
    data = {"label": "w", "parts": [{"name": "a"}, {"name": "b", "count": 3}], "note": "for readers"}
    whole = from_document(_Whole, check(_WholeDocument, data, "f.json"))
    assert whole == _Whole("w", (_Part("a"), _Part("b", 3)))
    with pytest.raises(SchemaError, match=re.escape("f.json: parts[1].count must be an integer >= 1, got 0")):
        check(_WholeDocument, {**data, "parts": [{"name": "a"}, {"name": "b", "count": 0}]}, "f.json")
    with pytest.raises(SchemaError, match=re.escape("f.json: weight must be a finite number >= 0, got True")):
        check(_WholeDocument, {**data, "weight": True}, "f.json")


def _tags(held: dict) -> list[str]:
    return list(held["tags"])


def _tag_count(held: dict) -> int:
    return held["count"]


@dataclasses.dataclass
class _Shelf:
    """A shelf, as a file holds it in another shape."""

    parts: Annotated[list[_Part], Stored(list[_PartDocument], key="items")]  # the file's "items"
    tags: Annotated[list[str], Stored(dict[str, list[Name] | Count], default=..., key="held", read=_tags)]
    tag_count: Annotated[int, Stored(key="held", read=_tag_count)] = 0  # inside the file's "held" too
    where: Annotated[str | None, NOT_STORED] = None  # where it was read from: not in the file
    schema: Annotated[str, Stored(key=VERSION)] = "shelf/1"


_ShelfDocument = document(_Shelf, "_ShelfDocument", version="shelf/1", doc="shelf.json: a shelf.")


def test_a_records_document_says_where_the_file_holds_each_field():
    """Stored's key: the file's key for a field; a field without a kind is read from another field's value
    (two of the record's from one of the file's), or (NOT_STORED) not held; ``version`` declares the file's
    "schema" first, required and of that version only."""
    assert list(_ShelfDocument.model_fields) == [VERSION, "items", "held"]
    assert _ShelfDocument.model_json_schema(by_alias=True)["required"] == ["schema", "items", "held"]
    assert _ShelfDocument.__doc__ == "shelf.json: a shelf."
    data = {"schema": "shelf/1", "items": [{"name": "a"}], "held": {"tags": ["x", "y"], "count": 2}}
    shelf = from_document(_Shelf, check(_ShelfDocument, data, "s.json"))
    assert shelf == _Shelf([_Part("a")], ["x", "y"], 2) and shelf.where is None and shelf.schema == "shelf/1"
    with pytest.raises(SchemaError, match=re.escape("s.json: items[0].count must be an integer >= 1, got 0")):
        check(_ShelfDocument, {**data, "items": [{"name": "a", "count": 0}]}, "s.json")
    with pytest.raises(SchemaError, match=re.escape("s.json: held is missing")):
        check(_ShelfDocument, {"schema": "shelf/1", "items": []}, "s.json")
    with pytest.raises(SchemaError, match=re.escape("s.json: schema must be one of shelf/1, got 'shelf/2'")):
        check(_ShelfDocument, {**data, "schema": "shelf/2"}, "s.json")


@pytest.mark.parametrize("answer, needle", [
    ("", "answered nothing"),
    ("Traceback (most recent call last):\n  boom", "not valid JSON"),
    ('{"workloads": {"w": {"sizes": []}}}', "workloads.w.sizes must be an object"),
    ('{"toggles": [{"requires": []}]}', "toggles[0].name is missing"),
])
def test_a_bad_probe_answer_from_the_base_ref_is_a_config_error(answer, needle):
    with pytest.raises(ConfigError, match=needle.replace("[", r"\[")):
        parse_probe_answer(answer, "the worker probe of main")


def test_an_unexpected_exception_is_one_line_and_exit_3(tmp_path, monkeypatch):
    results = _write(tmp_path / "run" / "results.json", _run_doc())

    def broken(*_a, **_k):
        raise KeyError("surprise\nsecond line")

    monkeypatch.setattr("perfgate.reports.write_all", broken)
    out = CliRunner().invoke(cli.main, ["report", str(results)])
    assert out.exit_code == 3
    lines = out.output.strip().splitlines()
    assert lines == ["perfgate: error: unexpected KeyError: 'surprise\\nsecond line'; this is a perfgate bug or "
                     "an input it failed to check; PERFGATE_DEBUG=1 shows the traceback"]


@pytest.mark.slow
def test_the_real_fixtures_still_read(tmp_path):
    shutil.copy(DATA / "current.json", tmp_path / "results.json")
    proc = run_cli("report", str(tmp_path), "--against-results", str(DATA / "baseline.json"), "--format", "md")
    assert proc.returncode == 0, proc.stderr


@pytest.mark.slow
def test_history_add_refuses_a_damaged_run_with_one_line(tmp_path):
    results = _write(tmp_path / "run" / "results.json", _mutated(
        lambda d: d["cases"][0]["processes"][0].update(loops=0)))
    proc = run_cli("history", "add", str(results.parent), "--history-url", f"sqlite:///{tmp_path / 'h.db'}",
                   "--commit", "abc", "--branch", "main", cwd=tmp_path)
    _assert_exit_2(proc, "cases[0].processes[0].loops must be an integer >= 1")


def test_a_key_twice_in_one_object_is_refused_where_json_is_read():
    """json.loads kept the last of two equal keys; a reviewer reading a baseline in a pull request sees the
    first. A second "samples_ns" or "suite" further down was what perfgate judged, unseen."""
    assert parse_json('{"a": {"b": 1, "c": 2}, "d": [{"b": 1}, {"b": 2}]}', "f", "results")["d"][1] == {"b": 2}
    with pytest.raises(SchemaError, match=r"^f: results holds the key 'b' twice in one object"):
        parse_json('{"a": {"b": 1, "c": 2, "b": 3}}', "f", "results")
    with pytest.raises(SchemaError, match="holds the key 'x' twice"):  # with the huge-number check on too
        parse_json('{"n": 1e300, "x": 1, "x": 2}', "f", "results")


def test_a_baseline_with_a_duplicated_field_is_exit_2_and_one_line(tmp_path):
    stored = baselines.from_run(synthetic_run(["operator_rollout"], toggles=("eager",)), source="x")
    text = stored.dumps()
    doctored = text.replace('"samples_ns": [', '"samples_ns": [1, 1, 1], "samples_ns": [', 1)
    assert doctored != text
    (tmp_path / "b.json").write_text(doctored)
    result = CliRunner().invoke(cli.main, ["baseline", "show", str(tmp_path / "b.json")])
    assert result.exit_code == 2, result.output
    assert "holds the key 'samples_ns' twice in one object" in result.output
    assert len(result.output.strip().splitlines()) == 1
