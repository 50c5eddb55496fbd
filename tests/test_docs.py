"""The documentation's examples run: the workload in docs/workloads.md, copied as a user would."""

from __future__ import annotations

import json
import re

import pytest
from conftest import REPO, run_cli

# slow: runs the documented commands (the fast loop, pytest -m "not slow", leaves them to CI)
pytestmark = pytest.mark.slow


def doc_example(path, marker):
    """The first ```python block after ``marker`` in ``path``."""
    text = (REPO / path).read_text()
    after = text[text.index(marker):]
    return re.search(r"```python\n(.*?)```", after, re.S).group(1)


def test_the_workload_example_runs_with_workloads_dir(tmp_path):
    workloads = tmp_path / "workloads"
    workloads.mkdir()
    (workloads / "heat_diffusion.py").write_text(doc_example("docs/workloads.md", "tests/test_docs.py runs"))
    out = tmp_path / "run"
    proc = run_cli("run", "--workloads-dir", str(workloads), "-w", "heat_diffusion", "-t", "eager",
                   "-t", "implicit-pad", "--processes", "1", "--samples", "3", "--out", str(out), cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    cases = {c["key"]: c for c in json.loads((out / "results.json").read_text())["cases"]}
    assert set(cases) == {"heat_diffusion/smoke/eager/cpu", "heat_diffusion/smoke/implicit-pad/cpu"}
    for case in cases.values():
        assert case["status"] == "ok", case["message"]
        assert case["processes"][0]["steps_per_unit"] == 5
