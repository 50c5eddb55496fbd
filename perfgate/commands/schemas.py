"""The JSON Schemas of the files perfgate writes and reads, generated from their declared models. No torch.

results.json (perfgate.model.results.ResultsDocument), a stored baseline (perfgate.judging.baselines.BaselineDocument),
comparison.json (perfgate.model.comparison.ComparisonDocument) and a machine's ceilings.json
(perfgate.judging.roofline.CeilingsDocument) are declared once, as the pydantic models their
readers validate against (the first three generated from the records they hold: validation.document);
these schemas are what those models say, for other tools and for readers of the files. They are published in docs/schemas/: ``python -m perfgate.commands.schemas`` rewrites them there,
``python -m perfgate.commands.schemas --check`` exits 1 when they are stale (tests/test_schemas.py runs it).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from perfgate.judging.baselines import BaselineDocument
from perfgate.judging.roofline import CeilingsDocument
from perfgate.model.comparison import ComparisonDocument
from perfgate.model.results import ResultsDocument
from perfgate.reports import console
from perfgate.util.storage import atomic_write_text

# file name under docs/schemas/ -> the model its schema is generated from
SCHEMAS: dict[str, type[BaseModel]] = {
    "results.schema.json": ResultsDocument,
    "baseline.schema.json": BaselineDocument,
    "comparison.schema.json": ComparisonDocument,
    "ceilings.schema.json": CeilingsDocument,
}
PUBLISHED = Path("docs") / "schemas"  # relative to the repository root


def json_schema(model: type[BaseModel]) -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of the documents ``model`` reads."""
    return {"$schema": "https://json-schema.org/draft/2020-12/schema",
            **model.model_json_schema(by_alias=True, mode="validation")}


def rendered() -> dict[str, str]:
    """Each published file's name and the text it should hold."""
    return {name: json.dumps(json_schema(model), indent=2, sort_keys=True) + "\n" for name, model in SCHEMAS.items()}


def stale(folder: Path) -> list[str]:
    """The files under ``folder`` that are missing or differ from what the models generate."""
    out = []
    for name, text in rendered().items():
        path = folder / name
        if not path.is_file() or path.read_text(encoding="utf-8") != text:
            out.append(name)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m perfgate.commands.schemas", description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=PUBLISHED, help="folder to write (default: docs/schemas)")
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 naming stale files")
    args = parser.parse_args(argv)
    if args.check:
        behind = stale(args.out)
        for name in behind:
            console.echo(f"{args.out / name} is stale; regenerate with `python -m perfgate.commands.schemas`", err=True)
        return 1 if behind else 0
    args.out.mkdir(parents=True, exist_ok=True)
    for name, text in rendered().items():
        atomic_write_text(args.out / name, text)
        console.echo(str(args.out / name))
    return 0


if __name__ == "__main__":
    sys.exit(main())
