"""Memory as a claim and why memory grew, end to end through the real CLI: `memory_vs_eager` expectations on a
run whose variant allocates a large extra buffer (met, missed: `--gate` exits 1), and `run --against HEAD~1`
on a head that allocates 32 MiB more in a named function every step: the report names that function, its
op and the size (tests/test_allocations.py has the parts). On CUDA too where there is a device."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import torch
from conftest import run_cli

pytestmark = pytest.mark.slow

WORKLOAD = '''"""memory_growth: a small matmul whose step allocates a temporary buffer in grow_buffer (memory tests)."""

import torch

from perfgate.workload import Built, Tolerance, Workload

EXTRA_MIB = {extra}  # what the head commit changes: grow_buffer allocates this many MiB more every step
FAT_MIB = 96  # the "fat" variant's extra


def grow_buffer(state, mib):
    return torch.zeros((1 + mib) * (1 << 20) // 4, device=state.device)


class MemoryGrowth(Workload):
    name = "memory_growth"
    description = "a small matmul; grow_buffer allocates a temporary every step (memory tests)"
    variants = {{"fat": "grow_buffer allocates 96 MiB more every step"}}
    sizes = {{"smoke": {{"n": 32, "steps": 1}}, "pr": {{"n": 32, "steps": 1}}, "full": {{"n": 32, "steps": 1}}}}
    tolerance = Tolerance(rel_l2=1e-3)
    channels_last_applies = False

    def build(self, params, device, dtype, variants):
        g = torch.Generator(device="cpu").manual_seed(0)
        w = torch.randn(params["n"], params["n"], generator=g) / params["n"] ** 0.5
        x = torch.randn(params["n"], params["n"], generator=g)
        mib = EXTRA_MIB + (FAT_MIB if "fat" in variants else 0)
        return Built(model=w.to(device=device, dtype=dtype), state=x.to(device=device, dtype=dtype),
                     extra={{"mib": mib}})

    def step(self, model, state, built, params):
        buf = grow_buffer(state, built.extra["mib"])
        return torch.tanh(state @ model) + 0.0 * buf[0]
'''

PYPROJECT = '''[tool.perfgate]
workloads_dirs = ["workloads"]
processes = 2

[tool.perfgate.timing]
samples = 3
min_time_s = 0.05

[tool.perfgate.suites.smoke]
workloads = ["memory_growth"]
toggles = ["eager", "fat"]
device = "{device}"

[tool.perfgate.gate]
threshold = 0.5
max_host_load = 0
remeasure = false
max_case_s = 5  # adaptive sampling's budget per case: these claims are far from their bounds

[tool.perfgate.expect]
"memory_growth/*/fat/*" = ["memory_vs_eager >= 1.1", "memory_vs_eager <= 0.7"]
"memory_growth/*/eager/*" = ["memory_vs_eager == 1"]
'''

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(),
                                                                  reason="needs a CUDA device"))]


def git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=cwd, check=True,
                   capture_output=True, timeout=60)


def repo_of(tmp_path: Path, device: str) -> Path:
    """A git repository: the base commit's grow_buffer allocates 1 MiB a step, the head's 33 MiB."""
    repo = tmp_path / "repo"
    (repo / "workloads").mkdir(parents=True)
    (repo / "pyproject.toml").write_text(PYPROJECT.format(device=device))
    (repo / "workloads" / "memory_growth.py").write_text(WORKLOAD.format(extra=0))
    git(repo, "init", "-q")
    git(repo, "add", ".")
    git(repo, "commit", "-qm", "base")
    (repo / "workloads" / "memory_growth.py").write_text(WORKLOAD.format(extra=32))
    git(repo, "commit", "-qam", "head: grow_buffer allocates 32 MiB more")
    return repo


@pytest.mark.parametrize("device", DEVICES)
def test_memory_vs_eager_claims_are_met_and_missed_as_the_peaks_say(tmp_path, device):
    repo = repo_of(tmp_path, device)
    out = tmp_path / "run"
    proc = run_cli("run", "--suite", "smoke", "--gate", "--out", str(out), cwd=repo)
    assert proc.returncode == 1, proc.stdout + proc.stderr  # a fail rule missed, and no baseline to compare
    data = json.loads((out / "results.json").read_text())
    texts = [r["text"] for r in data["expectations"]["rules"]]
    outcomes = {(o["case_key"].split("/")[2], texts[o["rule"]]): o for o in data["expectations"]["outcomes"]}
    fat_more = outcomes[("fat", "memory_vs_eager >= 1.1")]
    assert fat_more["outcome"] == "met", fat_more
    assert 1.1 < fat_more["low"] <= fat_more["value"] <= fat_more["high"]
    assert outcomes[("fat", "memory_vs_eager <= 0.7")]["outcome"] == "missed"
    assert outcomes[("eager", "memory_vs_eager == 1")]["outcome"] == "met"
    fat = next(c for c in data["cases"] if c["spec"]["toggles"] == ["fat"])
    metric = "peak_cuda_allocated_bytes" if device == "cuda" else "peak_rss_bytes"
    assert all(p[metric] > 96 * 2**20 for p in fat["processes"])  # every process recorded its peak
    derived = fat["derived"]["memory_vs_eager"]
    assert derived["metric"] == metric and derived["value"] == fat_more["value"]
    assert "memory_vs_eager <= 0.7" in proc.stdout + proc.stderr
    html = (out / "report.html").read_text()
    assert f"{fat_more['value']:.3f}x [{fat_more['low']:.3f}, {fat_more['high']:.3f}]" in html


@pytest.mark.parametrize("device", DEVICES)
def test_a_memory_regression_names_the_function_that_allocates_the_difference(tmp_path, device):
    repo = repo_of(tmp_path, device)
    out = tmp_path / "run"
    proc = run_cli("run", "--suite", "smoke", "-t", "eager", "--against", "HEAD~1", "--gate", "--processes", "1",
                   "--out", str(out), cwd=repo)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    # on CPU the function's first line and the op; on CUDA the allocator's stack gives the allocating line
    where = "grow_buffer (memory_growth.py:12)" if device == "cuda" else "grow_buffer (memory_growth.py:11) via aten::zeros"
    site = f"{where} +32 MiB/step (1 MiB -> 33 MiB)"
    key = f"memory_growth/smoke/eager/{device}"
    assert f"memory of {key} grew at: {site}" in proc.stdout, proc.stdout
    assert f"- Memory of `{key}` grew at: `{site}" in (out / "summary.md").read_text()
    html = (out / "report.html").read_text()
    assert "Where memory grew" in html and where.split(" via ")[0] in html
    if device == "cuda":
        assert "memory_viz" in html and "memory_snapshot.pickle" in html
        head = json.loads((out / "results.json").read_text())["cases"][0]["profile"]
        assert (out / head["memory_snapshot"]).is_file()
