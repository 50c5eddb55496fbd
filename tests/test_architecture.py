"""The layers as a checked contract: `lint-imports` keeps the import-linter contracts in pyproject.toml
(`[tool.importlinter]`: the layers, no torch in the orchestrator, the manager/worker split, history and the
exporters apart, no circles), and docs/architecture.md's layer table is the one those contracts generate."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib
from conftest import REPO, cli_env
from fixtures import architecture_table


def _lint_imports(root: Path) -> subprocess.CompletedProcess:
    exe = Path(sys.executable).with_name("lint-imports")
    if not exe.exists():
        found = shutil.which("lint-imports")
        if found is None:
            pytest.fail("lint-imports is not installed: pip install -e '.[dev]' (import-linter)")
        exe = Path(found)
    env = cli_env(PYTHONPATH=str(root))
    return subprocess.run([str(exe), "--no-cache"], cwd=root, env=env, capture_output=True, text=True, timeout=300)


def test_lint_imports_keeps_every_contract():
    proc = _lint_imports(REPO)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    contracts = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    assert proc.stdout.count(" KEPT") == len(contracts) >= 9, proc.stdout


def test_the_contracts_catch_an_import_up_a_layer_torch_and_a_module_in_no_layer(tmp_path):
    """The same contracts on a copy of the package that breaks them: the data model importing torch and the
    comparison (inside a function: it counts), and a new module no layer names."""
    shutil.copytree(REPO / "perfgate", tmp_path / "perfgate", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    with (tmp_path / "perfgate" / "model" / "results.py").open("a") as fh:
        fh.write("\n\ndef _later():\n    import torch\n    from perfgate.judging import compare\n    return torch, compare\n")
    (tmp_path / "perfgate" / "newcomer.py").write_text('"""A module nobody placed."""\n')
    proc = _lint_imports(tmp_path)
    assert proc.returncode == 1, proc.stdout
    broken = {line.rsplit(" ", 1)[0] for line in proc.stdout.splitlines() if line.endswith(" BROKEN")}
    assert "the orchestrator imports no torch: only the worker's side does" in broken
    assert "no import circle among perfgate's modules" in broken
    assert any(line.startswith("perfgate's layers") for line in broken)
    assert "perfgate.newcomer" in proc.stdout  # exhaustive: every module in a layer


def test_the_layer_table_in_the_docs_is_generated_from_the_contracts():
    assert architecture_table.main(["--check"]) == 0, "python tests/fixtures/architecture_table.py --write"
    shown = {row[1] for row in architecture_table.rows(architecture_table.contracts())}
    files = {p for p in (REPO / "perfgate").rglob("*.py") if "templates" not in p.parts}
    files.discard(REPO / "perfgate" / "__init__.py")  # the package itself: its version and the notebook names
    placed = {architecture_table._file(m) for m in shown}
    unplaced = [p for p in files if not any(p == f or (f.name == "__init__.py" and f.parent in p.parents and
                                                       f.parent.name == "migrations") for f in placed)]
    assert not unplaced, unplaced  # every file of the package has its row (the migrations' files: one)


def test_every_module_is_on_one_side_of_the_torch_line():
    """A module is either torch-free (the no-torch contract) or the worker's (the worker-split contract): a
    new module cannot land on neither side and so be checked by neither."""
    found = architecture_table.contracts()
    free, worker = set(found["no-torch"]["source_modules"]), set(found["worker-split"]["source_modules"])
    assert not free & worker
    modules = {m for _, m, _ in architecture_table.rows(found)}
    top = {m for m in modules if m.count(".") == 1}
    assert top == free | worker, (top - free - worker, (free | worker) - top)


def test_a_stale_layer_table_is_refused(tmp_path, monkeypatch):
    doc = architecture_table.DOC.read_text()
    stale = tmp_path / "architecture.md"
    stale.write_text(doc.replace("| 2 | `cli.py` |", "| 3 | `cli.py` |"))
    monkeypatch.setattr(architecture_table, "DOC", stale)
    monkeypatch.setattr(architecture_table, "REPO", REPO)
    assert architecture_table.main(["--check"]) == 1
    assert architecture_table.main(["--write"]) == 0 and stale.read_text() == doc


def test_the_version_is_pyprojects():
    from perfgate.util import version

    assert version.__version__ == tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    code = "import perfgate, sys; print(perfgate.__version__, 'torch' in sys.modules, 'pandas' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=cli_env(), capture_output=True,
                         text=True, timeout=120, check=True).stdout.split()
    assert out == [version.__version__, "False", "False"]
