"""perfgate.commands.sizes: `perfgate calibrate --sizes`, does a suite's size keep full's regime, and which
size does. The ladder, the search and the pyproject record on their own (fast); then the real command on two
tiny workloads written here, whose classes come from real profiles in real workers (slow)."""

from __future__ import annotations

import json

import pytest
import torch
from conftest import run_cli

from perfgate.commands.sizes import (
    STATUS_OK,
    Measurement,
    full_cut,
    grown_parameters,
    ladder,
    record_text,
    smallest_keeping,
)
from perfgate.model import config
from perfgate.model.config import ConfigError, Suite
from perfgate.running.plan import Catalog, plan_cases

ROLLOUT = {"pr": {"T": 50, "grid": 128, "batch": 2, "channels": 64, "stochastic": True, "policy": "convex"},
           "full": {"T": 500, "grid": 128, "batch": 2, "channels": 64, "stochastic": True, "policy": "convex"}}


def test_length_parameters_are_cut_and_never_grown():
    """The rollout's pr and full differ only in T, which repeats a step: nothing to grow, and full is
    measured at pr's T (a tenth of its cost)."""
    assert grown_parameters(ROLLOUT["pr"], ROLLOUT["full"], ["T"]) == []
    assert full_cut(ROLLOUT["full"], ROLLOUT["pr"], ["T"]) == ROLLOUT["pr"]
    pr, full = {"grid": 256, "sources": 4, "steps": 4, "oversample": 2}, {"grid": 1024, "sources": 4, "steps": 8,
                                                                          "oversample": 2}
    assert grown_parameters(pr, full, ["steps"]) == ["grid"]
    assert grown_parameters(pr, full, []) == ["grid", "steps"]  # undeclared, steps would be grown


def test_the_shipped_workloads_declare_their_length_parameters_and_grow_their_shape_ones():
    from conftest import REPO

    from perfgate.worker.discovery import discover

    found = discover([REPO / "workloads"]).workloads
    grown = {}
    for name, (cls, _) in found.items():
        info = cls.describe()
        lengths = info["length_parameters"]
        assert all(p in info["sizes"]["pr"] for p in lengths), name
        grown[name] = grown_parameters(info["sizes"]["pr"], info["sizes"]["full"], lengths)
    assert grown == {"condensate": ["grid"], "detector_sim": ["grid"], "message_passing": ["replicas"],
                     "operator_rollout": [], "operator_training": [], "simulator_construction": ["grid"],
                     "wave_field": ["points", "sources"]}


def test_the_ladder_grows_shape_parameters_together_in_values_both_sizes_divide_into():
    rungs = ladder({"grid": 256, "points": 2048, "steps": 4}, {"grid": 1024, "points": 8192, "steps": 4},
                   ["grid", "points"])
    assert rungs[-1] == {"grid": 1024, "points": 8192, "steps": 4}
    assert all(r["grid"] % 256 == 0 and r["points"] % 2048 == 0 and r["steps"] == 4 for r in rungs)
    assert [r["grid"] for r in rungs] == sorted({r["grid"] for r in rungs})  # growing, no repeats
    assert {"grid": 512, "points": 4096, "steps": 4} in rungs
    assert [r["n"] for r in ladder({"n": 8}, {"n": 256}, ["n"])] == [16, 32, 48, 72, 104, 168, 256]


def _classes_from(threshold: int, tried: list[int]):
    """A measure whose class is compute-bound from n = threshold on (a real workload's profile decides it in
    the slow test below; here the search's logic alone)."""

    def measure(params):
        tried.append(params["n"])
        bound = "compute-bound" if params["n"] >= threshold else "overhead-bound"
        return Measurement(params=params, status=STATUS_OK, bound=bound)

    return measure


@pytest.mark.parametrize("threshold", [9, 40, 72, 100, 200, 256])
def test_the_search_finds_the_smallest_rung_that_keeps_the_class_in_a_few_measurements(threshold):
    rungs = ladder({"n": 8}, {"n": 256}, ["n"])
    tried: list[int] = []
    index, done, note = smallest_keeping(rungs, "compute-bound", _classes_from(threshold, tried))
    assert rungs[index]["n"] == min(r["n"] for r in rungs if r["n"] >= threshold)
    assert len(tried) <= 3 and note == "" and len(done) == len(tried)


def test_a_spent_budget_stops_the_search_with_a_size_that_still_keeps_the_regime():
    rungs = ladder({"n": 8}, {"n": 256}, ["n"])
    tried: list[int] = []
    measure = _classes_from(40, tried)
    index, done, note = smallest_keeping(rungs, "compute-bound", lambda p: measure(p) if not tried else None)
    assert tried == [48] and rungs[index]["n"] == 48  # one measurement fitted: the answer is coarser, not wrong
    assert note == "the budget was spent before n=16 to n=32 was tried" and len(done) == 1
    failed = smallest_keeping(rungs, "compute-bound", lambda p: Measurement(p, "failed", reason="oom: 9 GB"))
    assert rungs[failed[0]]["n"] == 256 and failed[2] == "n=48 did not run (oom: 9 GB): searched no further"
    wave = ladder({"points": 512, "sources": 10, "vortices": 3, "steps": 8},
                  {"points": 8192, "sources": 50, "vortices": 3, "steps": 8}, ["points", "sources"])
    assert smallest_keeping(wave, "memory-bound", lambda p: None)[2] == \
        "the budget was spent before points=1024, sources=10 to points=5632, sources=40 was tried"


PYPROJECT = """\
# the project's own comment, kept
[tool.perfgate]
workloads_dirs = ["wl"]

[tool.perfgate.suites.gate]
workloads = ["*"]
sizes = ["pr"]  # one size
device = "cpu"

[tool.other]
keep = 1
"""


def test_the_record_goes_into_the_suites_table_and_replaces_itself_keeping_every_other_line(tmp_path):
    once = record_text(PYPROJECT, "pyproject.toml", "gate", "cuda", {"wave": {"points": 4096, "sources": 30}})
    assert once.startswith(PYPROJECT)
    assert once.endswith("[tool.perfgate.suites.gate.size_params.cuda]\n# sizes that keep full's regime on this kind "
                         "of device (`perfgate calibrate --sizes --write`)\nwave = { points = 4096, sources = 30 }\n")
    twice = record_text(once + "\n[tool.after]\nx = 2\n", "pyproject.toml", "gate", "cuda",
                        {"rollout": {"grid": 256}, "wave": {"points": 8192}})
    assert twice.count("[tool.perfgate.suites.gate.size_params.cuda]") == 1
    assert "wave = { points = 8192 }\nrollout = { grid = 256 }\n\n[tool.after]\nx = 2\n" in twice
    path = tmp_path / "pyproject.toml"
    path.write_text(twice)
    suite = config.load(path).suite("gate")
    assert suite.size_params == {"cuda": {"wave": {"points": 8192}, "rollout": {"grid": 256}}}


def test_a_record_the_edit_cannot_place_is_refused_naming_what_to_write():
    with pytest.raises(ConfigError, match="suite 'nightly' is not declared there"):
        record_text(PYPROJECT, "pyproject.toml", "nightly", "cpu", {"wave": {"points": 4096}})
    inline = PYPROJECT.replace('device = "cpu"', 'device = "cpu"\nsize_params = { cpu = { wave = { points = 1 } } }')
    with pytest.raises(ConfigError, match=r"cannot be written without changing other keys .* wave = \{ points = 4096"):
        record_text(inline, "pyproject.toml", "gate", "cpu", {"wave": {"points": 4096}})


@pytest.mark.parametrize("record,needle", [
    ("[tool.perfgate.suites.gate.size_params.cpu]\nwave = { points = 0 }",
     "suites.gate.size_params.cpu.wave.points must be an integer >= 1, got 0"),
    ("[tool.perfgate.suites.gate.size_params.cpu]\nwave = { points = 2.5 }", "must be an integer >= 1, got 2.5"),
    ("[tool.perfgate.suites.gate.size_params.cpu]\nwave = { points = true }", "must be an integer >= 1, got True"),
    ("[tool.perfgate.suites.gate.size_params.cpu]\nwave = 4096", "size_params.cpu.wave must be a table"),
    ("[tool.perfgate.suites.gate.size_params.gpu]\nwave = { points = 4096 }", "one of cpu, cuda"),
    ("[tool.perfgate.suites.two]\nsizes = [\"pr\", \"full\"]\n[tool.perfgate.suites.two.size_params.cpu]\n"
     "wave = { points = 4096 }", "size_params needs a suite of one size"),
], ids=["zero", "float", "bool", "not-a-table", "device-kind", "two-sizes"])
def test_a_bad_record_is_one_line_naming_the_key(tmp_path, record, needle):
    path = tmp_path / "pyproject.toml"
    path.write_text(PYPROJECT + "\n" + record + "\n")
    with pytest.raises(ConfigError) as err:
        config.load(path)
    assert needle in str(err.value) and "\n" not in str(err.value)


CATALOG = Catalog(workloads={"wave": {"sizes": {"pr": {"points": 2048, "steps": 20, "kind": "a"},
                                                "full": {"points": 8192, "steps": 20, "kind": "a"}}, "variants": {}},
                             "other": {"sizes": {"pr": {"n": 8}, "full": {"n": 64}}, "variants": {}}},
                  toggles=[{"name": "eager"}])


def test_a_run_of_the_suite_on_that_kind_of_device_uses_the_record_and_no_other_run_does():
    suite = Suite("gate", sizes=("pr",), device="cpu", size_params={"cuda": {"wave": {"points": 4096}},
                                                                    "cpu": {"other": {"n": 16}}})
    on_cpu = {c.workload: c.param_dict for c in plan_cases(suite, CATALOG)}
    assert on_cpu == {"other": {"n": 16}, "wave": {"points": 2048, "steps": 20, "kind": "a"}}
    on_cuda = {c.workload: c.param_dict for c in plan_cases(suite, CATALOG, device="cuda")}
    assert on_cuda == {"other": {"n": 8}, "wave": {"points": 4096, "steps": 20, "kind": "a"}}
    other_size = plan_cases(suite, CATALOG, size="full", device="cuda")  # --size full: the declared one
    assert {c.workload: c.param_dict["points" if c.workload == "wave" else "n"] for c in other_size} == \
        {"wave": 8192, "other": 64}


@pytest.mark.parametrize("record,needle", [
    ({"gone": {"n": 16}}, "[tool.perfgate.suites.gate.size_params.cpu] names workload 'gone', which is not found; "
                          "valid: other, wave"),
    ({"wave": {"grid": 16}}, "wave: 'grid' is not an integer parameter of size 'pr'; valid: points, steps"),
    ({"wave": {"kind": 16}}, "'kind' is not an integer parameter"),
])
def test_a_record_naming_what_the_workloads_lack_stops_the_plan(record, needle):
    suite = Suite("gate", sizes=("pr",), device="cpu", size_params={"cpu": record})
    with pytest.raises(ConfigError) as err:
        plan_cases(suite, CATALOG)
    assert needle in str(err.value)


# ---------------------------------------------------------------- the real command, real workers

WORKLOADS = '''\
"""Two steps of one n x n matmul: tiny n is all dispatch (overhead-bound), large n all math (compute-bound)."""

import torch

from perfgate.workload import Built, Tolerance, Workload


class Matmul(Workload):
    name = "regime_step"
    description = "one n x n matmul per step: overhead-bound at n=8, compute-bound at n=256"
    sizes = {"smoke": {"n": 8, "steps": 2}, "pr": {"n": 8, "steps": 2}, "full": {"n": 256, "steps": 40}}
    tolerance = Tolerance(rel_l2=1e-3)
    channels_last_applies = False

    def build(self, params, device, dtype, variants):
        g = torch.Generator().manual_seed(0)
        n = params["n"]
        w = torch.randn(n, n, generator=g) / n ** 0.5
        x = torch.randn(n, n, generator=g)
        return Built(model=w.to(device=device, dtype=dtype), state=x.to(device=device, dtype=dtype))

    def step(self, model, state, built, params):
        return state @ model


class Steady(Matmul):
    name = "steady_step"
    description = "the same matmul at two sizes that are both compute-bound"
    sizes = {"smoke": {"n": 8, "steps": 2}, "pr": {"n": 192, "steps": 2}, "full": {"n": 256, "steps": 40}}
'''


def _project(tmp_path, extra: str = "") -> None:
    (tmp_path / "wl").mkdir()
    (tmp_path / "wl" / "matmuls.py").write_text(WORKLOADS)
    (tmp_path / "pyproject.toml").write_text(PYPROJECT.replace('device = "cpu"', 'device = "cpu"\ntoggles = ["eager"]')
                                             + extra)


@pytest.mark.timing
@pytest.mark.slow
def test_a_size_in_another_regime_is_named_and_the_size_that_keeps_it_recorded_and_run(tmp_path):
    _project(tmp_path)
    before = (tmp_path / "pyproject.toml").read_text()
    proc = run_cli("calibrate", "--sizes", "--suite", "gate", "--budget-s", "240", "--write", "--out", "check.json",
                   cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    check = json.loads((tmp_path / "check.json").read_text())
    assert check["complete"] and check["device"] == "cpu" and check["size"] == "pr"
    rows = {r["workload"]: r for r in check["workloads"]}
    flagged, steady = rows["regime_step"], rows["steady_step"]
    assert flagged["current"]["bound"] == "overhead-bound", flagged
    assert flagged["full"]["bound"] == "compute-bound" and flagged["full"]["params"] == {"n": 256, "steps": 2}
    assert flagged["same_regime"] is False
    n = flagged["suggested"]["n"]
    assert 8 < n <= 256 and flagged["suggested"] == {"n": n}
    kept = [m for m in flagged["tried"] if m["params"]["n"] == n]  # measured, unless only full's shape keeps it
    assert all(m["bound"] == "compute-bound" for m in kept) and (kept or n == 256)
    assert all(m["bound"] != "compute-bound" for m in flagged["tried"] if m["params"]["n"] < n)
    assert steady["same_regime"] is True and steady["suggested"] is None and steady["tried"] == []
    table = proc.stdout[proc.stdout.index("workload "):]
    assert "pr class (idle)" in table and "full class (idle)" in table and "same regime?" in table
    assert any(line.startswith("regime_step ") and " NO " in line and line.endswith(f"n={n}")
               for line in table.splitlines())
    assert any(line.startswith("steady_step ") and " yes " in line for line in table.splitlines())
    # --write: the record in the suite's table, every other line as it was; the suite's run uses it
    after = (tmp_path / "pyproject.toml").read_text()
    assert after.startswith(before) and f"regime_step = {{ n = {n} }}" in after and "steady_step" not in after
    listed = run_cli("list", cwd=tmp_path)
    assert f"      pr on cpu: regime_step n={n}\n" in listed.stdout, listed.stdout
    run = run_cli("run", "--suite", "gate", "-w", "regime_step", "--processes", "1", "--samples", "3",
                  "--out", "r", cwd=tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    case = json.loads((tmp_path / "r" / "results.json").read_text())["cases"][0]
    assert case["spec"]["params"] == {"n": n, "steps": 2} and case["spec"]["size"] == "pr"


SLEEPER = '''\
import time

from perfgate.workload import Built, Workload


class Sleeper(Workload):
    name = "sleeper"
    description = "a build that takes two minutes: longer than the check's budget"
    sizes = {"smoke": {"n": 1}, "pr": {"n": 1}, "full": {"n": 2}}
    channels_last_applies = False

    def build(self, params, device, dtype, variants):
        time.sleep(120)
        return Built(model=None, state=None)

    def step(self, model, state, built, params):
        return state
'''


@pytest.mark.slow
def test_a_worker_is_stopped_at_the_budget_and_what_did_not_fit_is_said(tmp_path):
    _project(tmp_path)
    (tmp_path / "wl" / "sleeper.py").write_text(SLEEPER)
    proc = run_cli("calibrate", "--sizes", "--suite", "gate", "-w", "sleeper", "-w", "regime_step", "--budget-s", "30",
                   "--out", "check.json", cwd=tmp_path, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    check = json.loads((tmp_path / "check.json").read_text())
    assert check["complete"] and check["spent_s"] < 45  # the budget, and the moments it takes to stop a worker
    sleeper, other = check["workloads"]
    assert sleeper["current"]["status"] == "failed" and sleeper["current"]["reason"].startswith(
        "timeout: not done in the ") and sleeper["current"]["reason"].endswith(" s left of the budget")
    assert sleeper["full"] is None and sleeper["note"].startswith("the size did not run: timeout")
    assert other["current"] is None and other["note"] == "the size not measured: the budget was spent"
    table = proc.stdout[proc.stdout.index("workload "):]
    assert "sleeper " in table and "timeout" in table and "regime_step  not measured" in table


TWO_SIZES = '\n[tool.perfgate.suites.smoke]\nsizes = ["smoke", "pr"]\ndevice = "cpu"\n'
ON_CUDA = '\n[tool.perfgate.suites.gpu]\nsizes = ["pr"]\ndevice = "cuda"\n'
NO_CUDA = pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA: the check would run there")


@pytest.mark.slow
@pytest.mark.parametrize("args,extra,needle", [
    (("calibrate", "--sizes", "--rounds", "3"), "", "--rounds cannot apply to it"),
    (("calibrate", "--budget-s", "60"), "", "--budget-s belongs to calibrate --sizes"),
    (("calibrate", "--sizes", "--suite", "smoke"), TWO_SIZES, "suite 'smoke' runs sizes smoke, pr"),
    (("calibrate", "--sizes", "--suite", "gate", "--budget-s", "0"), "", "--budget-s"),
    (("run", "--suite", "gate"), "\n[tool.perfgate.suites.gate.size_params.cpu]\nregime_step = { n = -8 }\n",
     "size_params.cpu.regime_step.n must be an integer >= 1, got -8"),
    (("run", "--suite", "gate"), "\n[tool.perfgate.suites.gate.size_params.cpu]\nregime_step = { m = 64 }\n",
     "regime_step: 'm' is not an integer parameter of size 'pr'; valid: n, steps"),
    (("calibrate", "--sizes", "--suite", "gate"), "\n[tool.perfgate.suites.gate.size_params.cpu]\ngone = { n = 64 }\n",
     "names workload 'gone', which is not found"),
    pytest.param(("calibrate", "--sizes", "--suite", "gpu"), ON_CUDA,
                 "suite 'gpu' measures on cuda and this machine has no CUDA device torch can use", marks=NO_CUDA),
], ids=["rounds", "budget-alone", "two-sizes", "budget-0", "negative", "unknown-parameter", "unknown-workload",
        "no-cuda"])
def test_bad_input_is_one_line_and_exit_2_before_measuring(tmp_path, args, extra, needle):
    _project(tmp_path, extra)
    before = (tmp_path / "pyproject.toml").read_text()
    proc = run_cli(*args, cwd=tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("perfgate: error: ") and needle in lines[0], proc.stderr
    assert (tmp_path / "pyproject.toml").read_text() == before
    assert not (tmp_path / "reports" / "size-check-cpu.json").exists()


@pytest.mark.slow
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_on_cuda_the_check_classifies_from_the_kernels_and_records_per_device_kind(tmp_path):
    """On a GPU the idle fraction is the kernels' share of the step's wall time; a record --write makes lands
    in the suite's cuda table, which a CPU run of the suite leaves alone."""
    _project(tmp_path, ON_CUDA)
    proc = run_cli("calibrate", "--sizes", "--suite", "gpu", "--budget-s", "60", "--write", "--out", "check.json",
                   cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    check = json.loads((tmp_path / "check.json").read_text())
    assert check["complete"] and check["device"].startswith("cuda")
    for row in check["workloads"]:
        for m in (row["current"], row["full"]):
            assert m["status"] == "ok" and m["bound"] and 0 <= m["device_idle_fraction"] <= 1, row
    recorded = config.load(tmp_path / "pyproject.toml").suite("gpu").size_params or {}
    assert set(recorded) <= {"cuda"}
    assert recorded.get("cuda", {}) == {r["workload"]: r["suggested"] for r in check["workloads"] if r["suggested"]}
