"""A smaller card on a bigger one: `--device-memory-gb N` / `device_memory_gb` caps each CUDA worker's
caching allocator, so a case that would not fit the team's card fails `oom` on the CI GPU, said as over
the cap; on CPU the cap is refused before any case runs, in one line."""

from __future__ import annotations

import json

import pytest
import torch
from conftest import TEST_WORKLOADS, run_cli

from perfgate.worker.main import cap_device_memory, capped_oom_message, memory_fraction

GIB = 2**30


def test_the_fraction_is_the_cap_over_the_device_and_never_more_than_all_of_it():
    assert memory_fraction(8, 80 * GIB) == pytest.approx(0.1)
    assert memory_fraction(0.5, 16 * GIB) == pytest.approx(1 / 32)
    assert memory_fraction(200, 80 * GIB) == 1.0


def test_an_oom_under_a_cap_says_it_is_over_the_cap():
    assert capped_oom_message(8, "oom", "CUDA out of memory. Tried to allocate 2.00 GiB") == (
        "over the 8 GB device memory cap (--device-memory-gb): CUDA out of memory. Tried to allocate 2.00 GiB")
    assert capped_oom_message(8, "error", "boom") == "boom"  # only an oom is the cap's
    assert capped_oom_message(None, "oom", "out of memory") == "out of memory"


def test_no_cap_is_set_on_cpu():
    assert cap_device_memory(8, "cpu") is None
    assert cap_device_memory(None, "cuda") is None


def _project(tmp_path, table: str = "", suite: str = ""):
    (tmp_path / "pyproject.toml").write_text(
        f'[tool.perfgate]\nworkloads_dirs = ["{TEST_WORKLOADS}"]\n{table}\n'
        f'[tool.perfgate.suites.smoke]\nworkloads = ["tiny"]\ntoggles = ["eager"]\ndevice = "cpu"\n{suite}\n')
    return tmp_path


@pytest.mark.slow  # the real CLI: a probe worker
def test_a_cap_on_a_cpu_run_is_refused_in_one_line_before_any_case(tmp_path):
    root = _project(tmp_path)
    proc = run_cli("run", "--device-memory-gb", "8", "--out", str(root / "run"), cwd=root)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert "cap of 8 GB" in proc.stderr and "CUDA workers only" in proc.stderr and "on cpu" in proc.stderr
    assert not (root / "run" / "results.json").exists()  # nothing measured, no half-written run


@pytest.mark.slow  # the real CLI: a probe worker
def test_a_suites_cap_is_refused_on_cpu_the_same_way(tmp_path):
    root = _project(tmp_path, suite="device_memory_gb = 6")
    proc = run_cli("run", "--out", str(root / "run"), cwd=root)
    assert proc.returncode == 2 and "cap of 6 GB" in proc.stderr, proc.stdout + proc.stderr


@pytest.mark.slow  # the real CLI: a probe worker
@pytest.mark.parametrize(("value", "said"), [("0", "device_memory_gb"), ('"8"', "device_memory_gb"),
                                              ("-1", "device_memory_gb")])
def test_a_bad_cap_in_the_configuration_is_one_line_exit_2(tmp_path, value, said):
    root = _project(tmp_path, table=f"device_memory_gb = {value}")
    proc = run_cli("list", cwd=root)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert said in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


@pytest.mark.slow  # the real CLI: a probe worker
@pytest.mark.parametrize("value", ["0", "nan", "-3", "lots"])
def test_a_bad_cap_on_the_command_line_is_exit_2(tmp_path, value):
    proc = run_cli("run", "--device-memory-gb", value, cwd=_project(tmp_path))
    assert proc.returncode == 2 and "--device-memory-gb" in proc.stderr, proc.stdout + proc.stderr


BIG = '''
import torch
from perfgate.workload import Built, Tolerance, Workload


class Big(Workload):
    name = "big"
    description = "64 MiB of state: past a 1 MiB cap (test only)"
    sizes = {"smoke": {"n": 16 * 2**20}, "pr": {"n": 16 * 2**20}, "full": {"n": 16 * 2**20}}
    tolerance = Tolerance(rel_l2=1e-6)
    channels_last_applies = False

    def build(self, params, device, dtype, variants):
        return Built(model=None, state=torch.zeros(params["n"], device=device, dtype=torch.float32))

    def step(self, model, state, built, params):
        return state + 1.0
'''


@pytest.mark.slow  # the real CLI: a probe worker
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (docs/gpu.md lists it for a GPU session)")
def test_on_a_gpu_a_case_past_the_cap_fails_oom_over_the_cap(tmp_path):
    (tmp_path / "workloads").mkdir()
    (tmp_path / "workloads" / "big.py").write_text(BIG)
    (tmp_path / "pyproject.toml").write_text('[tool.perfgate]\nworkloads_dirs = ["workloads"]\n')
    proc = run_cli("run", "-w", "big", "-t", "eager", "--device", "cuda", "--processes", "1",
                   "--device-memory-gb", "0.001", "--out", str(tmp_path / "run"), cwd=tmp_path)
    (case,) = json.loads((tmp_path / "run" / "results.json").read_text())["cases"]
    assert case["status"] == "failed" and case["failure_class"] == "oom", proc.stdout + proc.stderr
    assert case["message"].startswith("over the 0.001 GB device memory cap")
