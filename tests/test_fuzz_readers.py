"""Fuzz every reader of untrusted files with a seeded corpus of mutations (docs/security.md, "Untrusted files").

Each valid document (results.json, a baseline, comparison.json, ceilings.json, a probe answer, shard
costs) is mutated one field at a time: deleted, or replaced by a value of another type, a lone surrogate,
a huge or negative number, deep nesting. A reader must either accept the mutation, and then everything
downstream (comparison, every exporter, expectations, console tables, history records, merge checks)
must cope with it, or refuse it with SchemaError/ConfigError (exit 2). Any other exception would be a
traceback or exit 3 in the CLI: a failure here, listed with the mutation that caused it.
"""

from __future__ import annotations

import copy
import json
import math
import random
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from fixtures.synthetic import roofline_run, synthetic_comparison, synthetic_run

from perfgate.gating.comparison_file import read_comparison
from perfgate.gating.merge import check_compatible
from perfgate.history.ingest import record_from_run
from perfgate.judging import baselines, expect, roofline
from perfgate.judging.compare import compare_runs
from perfgate.judging.gate_settings import parse_gate
from perfgate.model.config import ConfigError
from perfgate.model.results import RunResult, load_results
from perfgate.reports import console, registry
from perfgate.reports.base import ReportInput
from perfgate.running.plan import Catalog, load_costs, parse_probe_answer
from perfgate.util.validation import SchemaError

REFUSALS = (SchemaError, ConfigError)
NASTY: list[Any] = [None, "a", "", -1, 0, 1e308, 2**70, [], {}, True, "\ud800", ["a"], {"a": "b"}, math.nan]
GATE = parse_gate({"bootstrap_resamples": 100})


def _paths(doc: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    yield prefix
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield from _paths(v, (*prefix, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc[:3]):  # the first items stand for the rest
            yield from _paths(v, (*prefix, i))


def _set(doc: Any, path: tuple[Any, ...], value: Any, delete: bool = False) -> Any:
    out = copy.deepcopy(doc)
    parent = out
    for p in path[:-1]:
        parent = parent[p]
    if delete:
        del parent[path[-1]]
    else:
        parent[path[-1]] = value
    return out


def mutations(doc: Any, seed: int, limit: int) -> list[tuple[str, str]]:
    """(description, JSON text) of up to ``limit`` single-field mutations of ``doc``, seeded, plus
    whole-file damage (truncation, binary bytes, deep nesting)."""
    rng = random.Random(seed)
    out: list[tuple[str, str]] = []
    for path in list(_paths(doc))[1:]:
        out.append((f"delete {path}", json.dumps(_set(doc, path, None, delete=True))))
        for value in NASTY:
            out.append((f"{path} = {value!r}", json.dumps(_set(doc, path, value))))
    rng.shuffle(out)
    out = out[:limit]
    text = json.dumps(doc)
    out += [("truncated", text[: len(text) // 2]), ("empty", ""), ("a list", "[1, 2]"),
            ("deep nesting", "[" * 100_000 + "]" * 100_000), ("200-deep object", '{"a":' * 200 + "1" + "}" * 200),
            ("NaN document", "NaN")]
    return out


def fuzz(tmp_path: Path, name: str, doc: Any, reader: Callable[[Path], Any], seed: int, limit: int,
         raw: list[tuple[str, bytes]] = ()) -> None:
    """Feed every mutation of ``doc`` to ``reader`` (which also exercises what comes after reading)."""
    failures = []
    cases = [(d, t.encode("utf-8", "surrogatepass")) for d, t in mutations(doc, seed, limit)] + list(raw)
    cases.append(("binary bytes", b"\xff\xfe\x00garbage\x80" * 10))
    for i, (desc, data) in enumerate(cases):
        f = tmp_path / f"{i}" / name
        f.parent.mkdir(parents=True)
        f.write_bytes(data)
        try:
            reader(f)
        except REFUSALS:
            pass
        except Exception as exc:  # noqa: BLE001 - what this test looks for
            failures.append(f"{desc}: {type(exc).__name__}: {exc}"[:300])
    assert not failures, f"{len(failures)} of {len(cases)} mutations crashed a reader:\n" + "\n".join(failures[:15])


@pytest.fixture(scope="module")
def runs() -> tuple[RunResult, RunResult]:
    base = roofline_run()
    cur = synthetic_run(["operator_rollout"], toggles=("eager", "compile", "cuda-graphs"), seed=3,
                        fail={"operator_rollout/smoke/compile/cpu"})
    cur.expectations, cur.ceilings = base.expectations, base.ceilings
    cur.settings["shard"] = {"index": 1, "count": 2, "cases_total": 3, "cost_source": "estimate",
                             "plan": [c.key for c in cur.cases]}
    return base, cur


def _downstream(run: RunResult, other: RunResult, tmp: Path) -> None:
    """Everything a read run goes through: comparison both ways, every exporter, expectations, history."""
    compare_runs(other, run, GATE)  # the mutated run as the baseline
    comparison = compare_runs(run, other, GATE)
    for exporter in registry().values():
        exporter.render(ReportInput(run, comparison))
    console.run_tables(run)
    expect.console_text(expect.evaluate(run))
    record_from_run(run, str(tmp), tmp)
    check_compatible([(tmp, other, "s"), (tmp / "x", run, "s")])


@pytest.mark.slow
def test_results_reader_and_everything_after_it(tmp_path, runs):
    base, cur = runs

    def read(f: Path) -> None:
        _downstream(load_results(f), base, f.parent)

    fuzz(tmp_path, "results.json", cur.to_json(), read, seed=1, limit=700)


@pytest.mark.slow
def test_baseline_reader(tmp_path, runs):
    base, cur = runs
    stored = baselines.from_run(base, source="x")
    stored.calibration = {c.key: {"threshold": 0.07, "within_process_cv": 0.01, "processes": 3,
                                  "aa_verdicts": ["unchanged"]} for c in base.cases[:2]}

    def read(f: Path) -> None:
        b = baselines.load_baseline(f)
        baselines.describe(b)
        baselines.changes(b, stored)
        baselines.changes(stored, b)
        comparison = compare_runs(cur, b.run, GATE, calibration=b.calibration)
        registry()["md"].render(ReportInput(cur, comparison))

    fuzz(tmp_path, "smoke.json", json.loads(stored.dumps()), read, seed=2, limit=500)


@pytest.mark.slow
def test_comparison_reader(tmp_path, runs):
    base, cur = runs
    comparison = synthetic_comparison(cur, base)
    comparison.warnings = ["torch differs"]
    comparison.environment_diff = {"torch": ["2.12.0", "2.13.0"], "$TORCHINDUCTOR_MAX_AUTOTUNE": [None, "1"]}

    def read(f: Path) -> None:
        comp = read_comparison(f)
        for exporter in registry().values():
            exporter.render(ReportInput(cur, comp))
        comp.to_json()

    fuzz(tmp_path, "comparison.json", comparison.to_json(), read, seed=3, limit=500)


def test_ceilings_reader(tmp_path):
    doc = {"schema": roofline.CEILINGS_SCHEMA, "cpu": {"flops": {"float32": 1e11}, "bandwidth": {"copy": 1e10}}}

    def read(f: Path) -> None:
        target = f.parent / "m" / roofline.CEILINGS_FILE
        target.parent.mkdir(exist_ok=True)
        f.replace(target)
        ceilings = roofline.ceilings_for_run(f.parent, {"machine_key": "m"})
        roofline.roof_for(ceilings, "cpu")

    fuzz(tmp_path, "ceilings.json", doc, read, seed=4, limit=200)


@pytest.mark.slow
def test_probe_answer_and_shard_costs_readers(tmp_path, runs):
    _, cur = runs
    probe = {"environment": {"torch": "2.13.0"}, "toggles": [{"name": "eager", "requires": []}],
             "workloads": {"rollout": {"description": "d", "sizes": {"smoke": {"T": 4}}, "variants": {}}},
             "workload_errors": [{"file": "w.py", "error": "boom"}]}

    def read_probe(f: Path) -> None:
        catalog = Catalog.from_probe(parse_probe_answer(f.read_bytes().decode("utf-8", "replace"), "the probe"))
        for name, info in catalog.workloads.items():
            list(info.get("sizes", {}).items())
            name.upper()
        [t["name"] for t in catalog.toggles]

    fuzz(tmp_path / "probe", "probe.txt", probe, read_probe, seed=5, limit=200)
    costs_doc = cur.to_json()
    for case in costs_doc["cases"]:
        del case["key"]  # so that the key comes from the spec, which is read too
    fuzz(tmp_path / "costs", "results.json", costs_doc, load_costs, seed=6, limit=300)


HUGE_NUMBERS = [("a 4,301-digit integer", "9" * 4301), ("10^400", "1" + "0" * 400), ("-10^400", "-1" + "0" * 400),
                ("1e400", "1e400")]


def _numeric_paths(doc: Any) -> list[tuple[Any, ...]]:
    return [p for p in list(_paths(doc))[1:] if isinstance(_get(doc, p), (int, float)) and not isinstance(_get(doc, p), bool)]


def _get(doc: Any, path: tuple[Any, ...]) -> Any:
    for p in path:
        doc = doc[p]
    return doc


def test_numbers_no_float_can_hold_are_refused_with_one_line(tmp_path, runs):
    """A results file may spell a number past what Python converts (more than 4,300 digits: ValueError) or
    what a float holds (10^400: OverflowError on the first float()). Each, in every numeric field, is refused
    with SchemaError where the JSON is read, or goes through everything after reading."""
    base, cur = runs
    doc = cur.to_json()
    marker = 123456789.25
    raw = []
    for path in _numeric_paths(doc):
        text = json.dumps(_set(doc, path, marker))
        assert text.count(repr(marker)) == 1
        raw.extend((f"{path} = {name}", text.replace(repr(marker), spelled).encode()) for name, spelled in HUGE_NUMBERS)

    def read(f: Path) -> None:
        _downstream(load_results(f), base, f.parent)

    fuzz(tmp_path, "results.json", {}, read, seed=7, limit=0, raw=raw)


@pytest.mark.parametrize("spelled", ["9" * 4301, "1" + "0" * 400, "1e400"])
@pytest.mark.slow
def test_the_cli_refuses_a_huge_number_in_a_results_file_with_exit_2(tmp_path, runs, spelled):
    from conftest import run_cli

    _, cur = runs
    text = json.dumps(cur.to_json()).replace('"samples_ns": [', f'"samples_ns": [{spelled}, ', 1)
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "results.json").write_text(text)
    proc = run_cli("report", str(tmp_path / "run"), timeout=120)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "number too large" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
