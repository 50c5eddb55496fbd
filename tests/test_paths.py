"""Names from files and workloads cannot move a baseline or a trace folder out of its root."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from conftest import run_cli
from fixtures.synthetic import synthetic_run

from perfgate.judging.baselines import baseline_path
from perfgate.model.results import CaseResult, CaseSpec, SchemaError
from perfgate.reports.tensorboard import case_dir
from perfgate.util.paths import component, contained
from perfgate.worker.profiling import trace_dir_for


def _files(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()}


@pytest.mark.parametrize("name", ["../x", "/etc/passwd", "..", ".", "", "a/b", "x/../../escape", "a\\..\\b",
                                  "\x00", "é", "~root", "-" * 500])
def test_a_component_is_one_safe_name(name):
    c = component(name)
    assert "/" not in c and "\\" not in c and not c.startswith(".") and c and len(c) <= 100
    assert c.isascii() and c.isprintable()


def test_plain_names_are_unchanged_and_changed_ones_stay_distinct():
    for name in ("smoke", "operator_rollout", "compile+amp-bf16", "cpu-intel-r-xeon-r-2t", "nvidia-h100-80gb-hbm3"):
        assert component(name) == name
    assert component("a/b") != component("a_b")


def test_a_symlinked_folder_under_the_root_is_refused(tmp_path):
    root, outside = tmp_path / "baselines", tmp_path / "elsewhere"
    root.mkdir()
    outside.mkdir()
    (root / "machine").symlink_to(outside)
    with pytest.raises(SchemaError, match="outside"):
        contained(root, "machine", "smoke.json")
    with pytest.raises(SchemaError, match="outside"):
        baseline_path(root, "machine", "smoke")
    assert baseline_path(root, "m", "smoke") == root / "m" / "smoke.json"


def test_trace_folders_stay_in_tb(tmp_path):
    spec = CaseSpec(workload="x/../../escape", size="../s", toggles=("/abs",), device="cpu")
    tb = tmp_path / "run" / "tb"
    d = case_dir(tb, CaseResult(spec=spec, status="ok"))
    assert tb.resolve() in d.resolve().parents and len(d.relative_to(tb).parts) == 3
    # the worker's profiler writes (and cleans old traces out of) the same folder
    assert trace_dir_for(tmp_path / "run", spec) == d


@pytest.mark.slow
def test_baseline_update_keeps_a_hostile_machine_key_and_suite_inside_baselines(tmp_path):
    project = tmp_path / "project"
    project.mkdir()
    (project / "pyproject.toml").write_text('[tool.perfgate]\nbaselines_dir = "baselines"\nreports_dir = "reports"\n')
    run = synthetic_run(["operator_rollout"], toggles=("eager",))
    for i, (key, suite) in enumerate([("../../escape", "smoke"), (str(tmp_path / "abs"), "../../../suite"),
                                      ("m", "/tmp/x")]):
        run.environment["machine_key"], run.suite = key, suite
        results = project / f"r{i}" / "results.json"
        results.parent.mkdir()
        results.write_text(json.dumps(run.to_json()))
        before = _files(tmp_path)
        proc = run_cli("baseline", "update", str(results), cwd=project)
        assert proc.returncode == 0, proc.stderr
        new = _files(tmp_path) - before
        assert len(new) == 1 and new.pop().startswith("project/baselines/"), new
    assert not (tmp_path / "escape").exists() and not (tmp_path / "abs").exists()
    assert os.path.exists(project / "baselines")


EVIL_WORKLOAD = '''
import torch
from perfgate.workload import Built, Tolerance, Workload


class Evil(Workload):
    name = "x/../../escape"
    description = "a workload whose name climbs out of tb/"
    sizes = {"smoke": {"n": 8}, "pr": {"n": 8}, "full": {"n": 8}}
    tolerance = Tolerance(rel_l2=1e-6)
    channels_last_applies = False

    def build(self, params, device, dtype, variants):
        return Built(model=None, state=torch.zeros(params["n"], device=device, dtype=dtype))

    def step(self, model, state, built, params):
        return state + 1.0
'''


@pytest.mark.slow
def test_a_workload_named_to_climb_out_of_tb_profiles_is_refused_before_anything_is_written(tmp_path):
    """A workload named ``x/../../escape``: its case folders under tb/ were contained by ``component`` (the
    unit tests above); since 2026-11-27 a name with '/' is refused when the file loads (a case key's parts
    are separated by '/'), one line naming the file, exit 2, before any case runs or any file is written."""
    (tmp_path / "wl").mkdir()
    (tmp_path / "wl" / "evil.py").write_text(EVIL_WORKLOAD)
    run = tmp_path / "run"
    proc = run_cli("run", "--workloads-dir", str(tmp_path / "wl"), "-w", "x*", "-t", "eager", "--processes", "1",
                   "--samples", "2", "--out", str(run), cwd=tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "evil.py" in proc.stderr and "x/../../escape" in proc.stderr and proc.stderr.strip().count("\n") == 0
    assert not (tmp_path / "escape").exists() and not (run / "results.json").exists()
