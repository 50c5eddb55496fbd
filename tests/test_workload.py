"""perfgate.workload and perfgate.worker.discovery: discovery like tests, import errors naming the file, API validation."""

from __future__ import annotations

import textwrap

import pytest
from conftest import REPO, TEST_WORKLOADS

from perfgate.worker.discovery import discover, find, load_file, workload_files
from perfgate.workload import Built, Tolerance, Workload, WorkloadError

HEADER = "from perfgate.workload import Built, Workload\nSIZES = {'smoke': {}, 'pr': {}, 'full': {}}\n"


def write(path, body):
    path.write_text(HEADER + textwrap.dedent(body))
    return path


def test_discovers_the_shipped_and_test_workloads():
    found = discover([REPO / "workloads", TEST_WORKLOADS])
    assert found.errors == []
    assert "operator_rollout" in found.workloads
    assert {"tiny", "fault_raise", "fault_hang", "fault_abort", "fault_oom"} <= set(found.workloads)
    cls, path = found.workloads["tiny"]
    assert path == TEST_WORKLOADS / "faults.py" and issubclass(cls, Workload)


def test_files_are_found_like_tests(tmp_path):
    write(tmp_path / "a.py", "class A(Workload):\n    name = 'a'\n    description = 'a'\n    sizes = SIZES\n")
    write(tmp_path / "_helper.py", "")  # private module: not a workload file
    (tmp_path / "notes.txt").write_text("not python")
    assert workload_files([tmp_path]) == [tmp_path / "a.py"]
    assert workload_files([tmp_path / "a.py"]) == [tmp_path / "a.py"]  # a single file works too
    assert list(discover([tmp_path]).workloads) == ["a"]


def test_import_error_names_the_file_and_its_error(tmp_path):
    bad = tmp_path / "broken.py"
    bad.write_text("import numpy_that_does_not_exist\n")
    write(tmp_path / "good.py", "class G(Workload):\n    name = 'g'\n    description = 'g'\n    sizes = SIZES\n")
    found = discover([tmp_path])
    assert list(found.workloads) == ["g"]  # the good file still loads
    (err,) = found.errors
    assert err["file"] == str(bad)
    assert err["error"].startswith(f"{bad}: failed to import: ModuleNotFoundError")
    assert "numpy_that_does_not_exist" in err["error"] and "\n" not in err["error"]


def test_syntax_error_names_the_file(tmp_path):
    (tmp_path / "typo.py").write_text("def broken(:\n")
    (err,) = discover([tmp_path]).errors
    assert "typo.py: failed to import: SyntaxError" in err["error"]


def test_missing_sizes_are_rejected(tmp_path):
    write(tmp_path / "w.py", """
        class W(Workload):
            name = "w"
            description = "only smoke"
            sizes = {"smoke": {}}
        """)
    (err,) = discover([tmp_path]).errors
    assert "workload 'w' lacks sizes pr, full (needs smoke, pr, full)" in err["error"]


def test_missing_description_is_rejected(tmp_path):
    write(tmp_path / "w.py", "class W(Workload):\n    name = 'w'\n    sizes = SIZES\n")
    assert "workload 'w' has no description" in discover([tmp_path]).errors[0]["error"]


def test_duplicate_names_across_files(tmp_path):
    body = "class W(Workload):\n    name = 'same'\n    description = 'd'\n    sizes = SIZES\n"
    first = write(tmp_path / "a.py", body)
    second = write(tmp_path / "b.py", body)
    found = discover([tmp_path])
    assert found.workloads["same"][1] == first
    (err,) = found.errors
    assert err["error"] == f"{second}: workload 'same' already defined in {first}"


def test_find_reports_unknown_names_with_the_errors(tmp_path):
    (tmp_path / "broken.py").write_text("raise RuntimeError('nope')\n")
    with pytest.raises(WorkloadError, match=r"unknown workload 'x' \(.*broken.py: failed to import: RuntimeError: nope\)"):
        find([tmp_path], "x")


def test_imported_base_classes_are_not_rediscovered(tmp_path):
    # a file importing another workload class must not define it twice
    write(tmp_path / "sub.py", f"""
        import sys
        sys.path.insert(0, {str(TEST_WORKLOADS)!r})
        from faults import Tiny

        class Bigger(Tiny):
            name = "bigger"
            description = "Tiny with more steps"
        """)
    assert [c.name for c in load_file(tmp_path / "sub.py")] == ["bigger"]


def test_defaults_of_the_api():
    class W(Workload):
        name = "w"

        def step(self, model, state, built, params):
            return state + 1

    w = W()
    assert w.steps_per_unit({"steps": 3}) == 3 and w.steps_per_unit({}) == 1
    assert w.run_unit(None, Built(model=None, state=0), {"steps": 3}) == 3
    assert w.output((5, 6)) == 5 and w.output(7) == 7
    d = W.describe()
    assert d["tolerance"] == Tolerance().to_json() and d["needs_grad"] is False and d["channels_last_applies"]
    assert d["length_parameters"] == ["steps"]  # what `perfgate calibrate --sizes` cuts rather than grows
    with pytest.raises(NotImplementedError):
        Workload().build({}, "cpu", None, frozenset())


@pytest.mark.parametrize("value", ["a string", None, 3.0, (), ("x",)])
def test_a_step_output_that_is_not_tensors_is_refused_naming_the_workload(value):
    from perfgate.workload import WorkloadError, check_step_output

    with pytest.raises(WorkloadError, match=f"workload 'w': step returned {type(value).__name__} "):
        check_step_output("w", value)


def test_tensors_and_tuples_of_tensors_are_step_outputs():
    import torch

    from perfgate.workload import check_step_output

    check_step_output("w", torch.zeros(2))
    check_step_output("w", (torch.zeros(2), [torch.ones(1)]))


FROM_CALLABLE = '''
import torch
from torch import nn

from perfgate.workload import Workload


def rms_norm_step(x, weight):
    """RMS-normalize a batch of rows: an existing function, gated as it is."""
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * weight


def make_inputs(params, device):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(params["rows"], params["width"], generator=g)
    return x.to(device), torch.ones(params["width"], device=device)


SIZES = {"smoke": {"rows": 32, "width": 64}, "pr": {"rows": 4096, "width": 1024}, "full": {"rows": 65536, "width": 4096}}
rms_norm = Workload.from_callable(rms_norm_step, make_inputs, sizes=SIZES)
mlp = Workload.from_callable(nn.Sequential(nn.Linear(64, 64), nn.GELU()), lambda p, d: torch.ones(p["rows"], 64, device=d),
                             name="existing_mlp", description="an existing module", sizes={**SIZES, "smoke": {"rows": 8, "steps": 3}})
'''


def test_from_callable_makes_discoverable_workloads(tmp_path):
    (tmp_path / "mine.py").write_text(FROM_CALLABLE)
    found = discover([tmp_path])
    assert found.errors == []
    assert set(found.workloads) == {"rms_norm_step", "existing_mlp"}
    cls = found.workloads["rms_norm_step"][0]
    assert cls.description == "RMS-normalize a batch of rows: an existing function, gated as it is."
    assert cls.sizes["smoke"] == {"rows": 32, "width": 64} and not cls.channels_last_applies


def test_from_callable_unit_calls_the_function_on_its_inputs(tmp_path):
    torch = pytest.importorskip("torch")
    (tmp_path / "mine.py").write_text(FROM_CALLABLE)
    found = discover([tmp_path])
    wl = found.workloads["existing_mlp"][0]()
    params = wl.sizes["smoke"]
    built = wl.build(params, torch.device("cpu"), torch.float32, frozenset())
    assert isinstance(built.model, torch.nn.Module) and built.state[0].shape == (8, 64)
    out = wl.run_unit(built.model, built, params)
    assert wl.steps_per_unit(params) == 3
    assert torch.equal(wl.output(out), built.model(built.state[0]))
    rms = found.workloads["rms_norm_step"][0]()
    built = rms.build(rms.sizes["smoke"], torch.device("cpu"), torch.float32, frozenset())
    x, w = built.state
    assert torch.allclose(rms.output(rms.run_unit(built.model, built, rms.sizes["smoke"])),
                          x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w)


def test_from_callable_rejects_what_is_not_callable():
    with pytest.raises(TypeError, match="must be callable"):
        Workload.from_callable(3, lambda p, d: None, sizes={})


@pytest.mark.slow
def test_from_callable_workload_runs_under_perfgate_run(tmp_path, cli):
    import json

    (tmp_path / "wl").mkdir()
    (tmp_path / "wl" / "mine.py").write_text(FROM_CALLABLE)
    out = tmp_path / "out"
    proc = cli("run", "--workloads-dir", str(tmp_path / "wl"), "-w", "rms_norm_step", "-w", "existing_mlp",
               "-t", "eager", "-t", "inference-mode", "--processes", "1", "--samples", "3", "--out", str(out))
    assert proc.returncode == 0, proc.stderr + proc.stdout
    cases = json.loads((out / "results.json").read_text())["cases"]
    assert sorted((c["key"], c["status"]) for c in cases) == [
        ("existing_mlp/smoke/eager/cpu", "ok"), ("existing_mlp/smoke/inference-mode/cpu", "ok"),
        ("rms_norm_step/smoke/eager/cpu", "ok"), ("rms_norm_step/smoke/inference-mode/cpu", "ok")]


def test_a_name_used_twice_in_one_file_is_an_error_not_a_silent_replacement(tmp_path):
    # a subclass that forgot its own name used to replace its parent's workload, unseen
    write(tmp_path / "w.py", """
        class Base(Workload):
            name = "w"
            description = "the base"
            sizes = SIZES

        class Variant(Base):
            description = "forgot its name"
        """)
    found = discover([tmp_path, tmp_path])  # a folder named twice (config and --workloads-dir) is no duplicate
    assert found.workloads["w"][0].description == "the base"
    (err,) = found.errors
    assert err["error"] == (f"{tmp_path / 'w.py'}: workload 'w' already defined in this file by Base "
                            "(Variant needs a name of its own)")
    assert [c.description for c in load_file(tmp_path / "w.py")][0] == "the base"


@pytest.mark.parametrize("body,needle", [
    ("sys.exit(2)\n", "failed to import: SystemExit: 2"),  # a script's argparse at import
    ("raise KeyboardInterrupt\n", "failed to import: KeyboardInterrupt"),
    ("class W(Workload):\n    name = 'a/b'\n    description = 'd'\n    sizes = SIZES\n",
     "workload name 'a/b' has '/'"),
    ("class W(Workload):\n    name = 'w' * 10000\n    description = 'd'\n    sizes = SIZES\n",
     "is not a printable string of 1 to 100 characters"),
    ("class W(Workload):\n    name = 'w'\n    description = 'd'\n    sizes = {**SIZES, 'sm/oke': {}}\n",
     "workload 'w': size name 'sm/oke' has '/'"),
    ("class W(Workload):\n    name = 'w'\n    description = 'd'\n    sizes = SIZES\n    variants = {'a+b': 'x'}\n",
     "workload 'w': variant name 'a+b' has"),
    ("class W(Workload):\n    name = 'w'\n    description = 'd'\n    sizes = ['smoke', 'pr', 'full']\n",
     "sizes must be a dict of size names to dicts of parameters"),
    ("class W(Workload):\n    name = 'w'\n    description = 'd'\n    sizes = {**SIZES, 'smoke': {'x': float('nan')}}\n",
     "workload 'w': ValueError"),
    ("class W(Workload):\n    name = 'w'\n    description = 'd'\n    sizes = SIZES\n    length_parameters = 'T'\n",
     "workload 'w': length_parameters must be a tuple of parameter names, e.g. (\"T\",)"),
], ids=["sys-exit", "keyboard-interrupt", "slash-name", "long-name", "slash-size", "plus-variant",
        "sizes-list", "nan-param", "length-parameters-string"])
def test_a_broken_workload_file_is_one_error_naming_it_never_a_failed_probe(tmp_path, body, needle):
    """Each used to stop the worker probe (`perfgate run` / `list` exit 3) or to make case keys
    (workload/size/toggle+toggle/device) that expectations and acknowledgements cannot match."""
    bad = write(tmp_path / "bad.py", "import sys\n" + body)
    write(tmp_path / "good.py", "class G(Workload):\n    name = 'g'\n    description = 'g'\n    sizes = SIZES\n")
    found = discover([tmp_path])
    assert list(found.workloads) == ["g"]
    (err,) = found.errors
    assert err["file"] == str(bad) and needle in err["error"] and "\n" not in err["error"]
    assert len(err["error"]) < 600


def test_a_variant_named_like_a_toggle_is_an_error_of_the_probe(tmp_path):
    """A case's toggles hold registry toggles and variants alike: a variant 'compile' was run as the toggle."""
    from perfgate.worker.main import probe

    write(tmp_path / "w.py", "class W(Workload):\n    name = 'w'\n    description = 'd'\n    sizes = SIZES\n"
                             "    variants = {'compile': 'x'}\n")
    catalog = probe([str(tmp_path)])
    assert "w" not in catalog["workloads"]
    (err,) = catalog["workload_errors"]
    assert err["error"] == f"{tmp_path / 'w.py'}: workload 'w': variant 'compile' has the name of a perfgate toggle"


@pytest.mark.parametrize("depends_on, needle", [
    ("'src/**'", "depends_on must be a tuple of glob patterns relative to the project's root"),
    ("('../outside/**',)", "depends_on pattern '../outside/**' leaves the project"),
    ("('/etc/passwd',)", "depends_on pattern '/etc/passwd' leaves the project"),
    ("('src/*.py', 3)", "depends_on pattern 3 is not a printable string"),
    ("tuple(f'f{i}' for i in range(101))", "101 patterns is more than 100"),
])
def test_a_depends_on_outside_the_project_or_of_the_wrong_shape_is_an_error_naming_the_file(tmp_path, depends_on,
                                                                                             needle):
    bad = write(tmp_path / "bad.py", f"class W(Workload):\n    name = 'w'\n    description = 'd'\n    sizes = SIZES\n"
                                     f"    depends_on = {depends_on}\n")
    (err,) = discover([tmp_path]).errors
    assert err["file"] == str(bad) and needle in err["error"] and "workload 'w'" in err["error"]


def test_depends_on_is_in_the_description_the_probe_reports(tmp_path):
    write(tmp_path / "w.py", "class W(Workload):\n    name = 'w'\n    description = 'd'\n    sizes = SIZES\n"
                             "    depends_on = ('src/sim/**', 'kernels/*.cu')\n")
    cls, _ = discover([tmp_path]).workloads["w"]
    assert cls.describe()["depends_on"] == ["src/sim/**", "kernels/*.cu"]
    assert Workload.depends_on == ()
