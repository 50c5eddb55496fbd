"""perfgate.schemas: the JSON Schemas in docs/schemas/ are the ones the declared models generate, and what
perfgate writes passes them (issue 28 item 6)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from conftest import REPO
from fixtures.synthetic import synthetic_comparison, synthetic_run

from perfgate import baselines, schemas

PUBLISHED = REPO / "docs" / "schemas"


@pytest.mark.parametrize("name", list(schemas.SCHEMAS))
def test_the_published_schema_is_the_generated_one(name):
    assert (PUBLISHED / name).read_text(encoding="utf-8") == schemas.rendered()[name], (
        f"docs/schemas/{name} is stale: run `python -m perfgate.schemas`")


def test_the_check_command_names_a_stale_file_and_regenerates_it(tmp_path):
    run = [sys.executable, "-m", "perfgate.schemas"]
    assert subprocess.run([*run, "--check"], cwd=REPO, capture_output=True, timeout=120).returncode == 0
    (tmp_path / "results.schema.json").write_text("{}\n")
    proc = subprocess.run([*run, "--check", "--out", str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1 and "results.schema.json is stale" in proc.stderr
    assert subprocess.run([*run, "--out", str(tmp_path)], capture_output=True, timeout=120).returncode == 0
    assert schemas.stale(tmp_path) == []


def _nan_free(doc):
    """JSON Schema has no NaN: what the validator sees of a document perfgate wrote with NaN in it."""
    return json.loads(json.dumps(doc), parse_constant=lambda _c: None)


def test_what_perfgate_writes_passes_the_published_schemas():
    jsonschema = pytest.importorskip("jsonschema")
    run = synthetic_run(["operator_rollout"], toggles=("eager", "compile"), fail={"operator_rollout/smoke/compile/cpu"})
    documents = {
        "results.schema.json": run.to_json(),
        "baseline.schema.json": json.loads(baselines.from_run(synthetic_run(["operator_rollout"])).dumps()),
        "comparison.schema.json": synthetic_comparison(run, run).to_json(),
    }
    for name, doc in documents.items():
        schema = json.loads((PUBLISHED / name).read_text())
        jsonschema.Draft202012Validator.check_schema(schema)
        jsonschema.validate(_nan_free(doc), schema, cls=jsonschema.Draft202012Validator)
    damaged = documents["results.schema.json"]
    damaged["cases"][0]["processes"][0]["loops"] = 0
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(damaged, json.loads((PUBLISHED / "results.schema.json").read_text()))
