"""comparison.json read back: the verdicts a run's gate (or `perfgate compare`) wrote beside it, checked
field by field against the file as perfgate.model.comparison declares it (ComparisonDocument), as any
untrusted file (SchemaError naming the file and the field).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from perfgate.model.comparison import Comparison
from perfgate.util.validation import read_json_file

COMPARISON_FILE = "comparison.json"


def comparison_from_json(data: Any, source: str) -> Comparison:
    """A Comparison read back from a comparison.json; SchemaError naming ``source`` and the field if malformed
    (validated against ComparisonDocument, the file as Comparison declares it)."""
    return Comparison.from_json(data, source)


def read_comparison(path: Path) -> Comparison:
    """The Comparison in the comparison.json at ``path``; SchemaError (exit 2) naming it when unreadable."""
    return comparison_from_json(read_json_file(path, "comparison"), str(path))


def load_comparison_file(run_dir: str | Path) -> Comparison | None:
    """The comparison.json of a run folder, or None when the run was not compared."""
    f = Path(run_dir) / COMPARISON_FILE
    if not f.is_file():
        return None
    return read_comparison(f)
