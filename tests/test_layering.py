"""The layers at the ground of perfgate, checked from its imports (tests/fixtures/import_graph.py reads them
from the source, imports inside functions included; docs/architecture.md has the table).

The data model describes what was measured (perfgate.model.results, results.json's declared shape in
perfgate.model.results_file, a comparison of runs in perfgate.model.comparison): it imports only the modules
below it, which import no other part of perfgate. Judging (perfgate.judging.expect, perfgate.judging.roofline) and storing (perfgate.judging.baselines) build on it,
and no import circle runs through any of them.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
from conftest import REPO, cli_env
from fixtures.import_graph import cycles, graph, reachable

# The data model's modules, and what they may import besides each other, directly or through another: its
# vocabulary, the rule language of the expectations it stores, statistics and the reading of untrusted files.
MODEL = ("perfgate.model.results", "perfgate.model.results_file", "perfgate.model.comparison")
BELOW_MODEL = {"perfgate.util.vocabulary", "perfgate.model.rules", "perfgate.util.stats", "perfgate.util.validation"}
JUDGING_AND_STORE = (*MODEL, "perfgate.judging.expect", "perfgate.judging.roofline", "perfgate.judging.baselines")


@pytest.mark.slow
def test_the_model_imports_nothing_above_it():
    g = graph()
    for module in MODEL:
        assert reachable(g, module) <= BELOW_MODEL | set(MODEL), (module, reachable(g, module) - BELOW_MODEL)
    for module in BELOW_MODEL:  # and those import nothing of perfgate but each other
        assert reachable(g, module) <= BELOW_MODEL - {module}, module


def test_importing_the_model_loads_only_the_modules_below_it():
    code = f"import sys, {', '.join(MODEL)}; print(' '.join(sorted(m for m in sys.modules if m.startswith('perfgate'))))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=cli_env(), cwd=REPO,
                         timeout=120, check=True).stdout.split()
    packages = {"perfgate", "perfgate.util", "perfgate.model"}  # the package (its version) and the two holding these
    assert set(out) == {*packages, "perfgate.util.version", *MODEL, *BELOW_MODEL}


@pytest.mark.slow
def test_no_import_circle_runs_through_the_model_the_judges_or_the_baseline_store():
    g = graph()
    for circle in cycles(g):
        assert not set(circle) & set(JUDGING_AND_STORE), circle
    assert "perfgate.judging.baselines" not in reachable(g, "perfgate.judging.roofline")  # the ceilings path is perfgate.util.paths'
    for module in ("perfgate.judging.expect", "perfgate.judging.roofline"):
        assert "perfgate.model.results" in g[module]
        assert not any(module in reachable(g, model) for model in MODEL), module


def test_the_graph_counts_imports_inside_functions_and_finds_circles(tmp_path):
    pkg = tmp_path / "perfgate"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from perfgate.b import thing\n")
    (pkg / "b.py").write_text(textwrap.dedent("""
        def later():
            from perfgate import c
            return c
        thing = 1
    """))
    (pkg / "c.py").write_text("import perfgate.sub.d\n")
    (pkg / "sub" / "d.py").write_text("def f():\n    from .. import a\n    return a\n")
    (pkg / "e.py").write_text("import json\nfrom perfgate import b\n")
    g = graph(pkg)
    assert g["perfgate.b"] == {"perfgate.c"} and g["perfgate.sub.d"] == {"perfgate.a"}
    assert g["perfgate.c"] == {"perfgate.sub.d"} and g["perfgate.e"] == {"perfgate.b"}
    assert cycles(g) == [["perfgate.a", "perfgate.b", "perfgate.c", "perfgate.sub.d"]]
    assert reachable(g, "perfgate.e") == {"perfgate.a", "perfgate.b", "perfgate.c", "perfgate.sub.d"}
