"""comparison.json read back: the verdicts a run's gate (or `perfgate compare`) wrote beside it, checked
field by field as any untrusted file (SchemaError naming the file and the field).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from perfgate.model.comparison import Acknowledgement, Comparison, Verdict
from perfgate.util.validation import Fields, read_json_file

COMPARISON_FILE = "comparison.json"


def comparison_from_json(data: Any, source: str) -> Comparison:
    """A Comparison read back from a comparison.json; SchemaError naming ``source`` and the field if malformed."""
    f = Fields(data, source, "")
    verdicts = f.get("verdicts", f.array, required=True)
    def pair(value: Any, where: str) -> list[Any]:
        """[baseline, this run]: report.html's environment table shows both (a shorter list crashed it)."""
        if not isinstance(value, list) or len(value) != 2:
            f.fail(where, "a [baseline, this run] pair", value)
        return value

    env_diff = f.get("environment_diff", f.values(pair), {})
    return Comparison(
        verdicts=[Verdict.from_json(v, source, f"verdicts[{i}]") for i, v in enumerate(verdicts)],
        mode=f.get("mode", f.one_of(("baseline", "against")), "baseline"),
        baseline_source=f.get("baseline_source", f.string),
        environment_diff=dict(env_diff),
        warnings=list(f.get("warnings", f.each(f.string), [])),
        acknowledgements=[Acknowledgement.from_json(a, source, f"acknowledgements[{i}]")
                          for i, a in enumerate(f.get("acknowledgements", f.array, []))],
        acknowledged_on=f.get("acknowledged_on", f.string),
    )


def read_comparison(path: Path) -> Comparison:
    """The Comparison in the comparison.json at ``path``; SchemaError (exit 2) naming it when unreadable."""
    return comparison_from_json(read_json_file(path, "comparison"), str(path))


def load_comparison_file(run_dir: str | Path) -> Comparison | None:
    """The comparison.json of a run folder, or None when the run was not compared."""
    f = Path(run_dir) / COMPARISON_FILE
    if not f.is_file():
        return None
    return read_comparison(f)
