"""perfgate.commands.schemas: the JSON Schemas in docs/schemas/ are the ones the declared models generate, and what
perfgate writes passes them."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from conftest import REPO
from fixtures.synthetic import synthetic_comparison, synthetic_run

from perfgate.commands import schemas
from perfgate.judging import baselines, roofline

PUBLISHED = REPO / "docs" / "schemas"


@pytest.mark.parametrize("name", list(schemas.SCHEMAS))
def test_the_published_schema_is_the_generated_one(name):
    assert (PUBLISHED / name).read_text(encoding="utf-8") == schemas.rendered()[name], (
        f"docs/schemas/{name} is stale: run `python -m perfgate.commands.schemas`")


@pytest.mark.slow
def test_the_check_command_names_a_stale_file_and_regenerates_it(tmp_path):
    run = [sys.executable, "-m", "perfgate.commands.schemas"]
    assert subprocess.run([*run, "--check"], cwd=REPO, capture_output=True, timeout=120).returncode == 0
    (tmp_path / "results.schema.json").write_text("{}\n")
    proc = subprocess.run([*run, "--check", "--out", str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1 and "results.schema.json is stale" in proc.stderr
    assert subprocess.run([*run, "--out", str(tmp_path)], capture_output=True, timeout=120).returncode == 0
    assert schemas.stale(tmp_path) == []


def _nan_free(doc):
    """JSON Schema has no NaN: what the validator sees of a document perfgate wrote with NaN in it."""
    return json.loads(json.dumps(doc), parse_constant=lambda _c: None)


@pytest.mark.slow
def test_what_perfgate_writes_passes_the_published_schemas():
    jsonschema = pytest.importorskip("jsonschema")
    run = synthetic_run(["operator_rollout"], toggles=("eager", "compile"), fail={"operator_rollout/smoke/compile/cpu"})
    documents = {
        "results.schema.json": run.to_json(),
        "baseline.schema.json": json.loads(baselines.from_run(synthetic_run(["operator_rollout"])).dumps()),
        "comparison.schema.json": synthetic_comparison(run, run).to_json(),
        # as perfgate.worker.ceilings.measure returns it and write_ceilings stores it
        "ceilings.schema.json": {"schema": roofline.CEILINGS_SCHEMA, "cpu": {
            "flops": {"float32": 1.2e11, "bfloat16": 3e10}, "bandwidth": {"copy": 1e10, "triad": 1.1e10},
            "threads": 1, "matmul_n": 512, "stream_bytes": 1 << 26, "device_name": None, "torch": "2.13.0+cpu",
            "seconds": 2.5, "measured_at": "2026-11-26T06:00:00+0000", "errors": ["float16 matmul: RuntimeError"]}},
    }
    for name, doc in documents.items():
        schema = json.loads((PUBLISHED / name).read_text())
        jsonschema.Draft202012Validator.check_schema(schema)
        jsonschema.validate(_nan_free(doc), schema, cls=jsonschema.Draft202012Validator)
    damaged = documents["results.schema.json"]
    damaged["cases"][0]["processes"][0]["loops"] = 0
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(damaged, json.loads((PUBLISHED / "results.schema.json").read_text()))
