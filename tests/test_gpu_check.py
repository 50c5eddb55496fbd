"""benchmarks/gpu_check.py: its refusal without CUDA, its bounded steps and the summary rows it reads from
a run folder (here the first GPU run's results, 2026-11-26 on an H200). Its GPU path runs only on a GPU."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time

import pytest
from conftest import REPO

sys.path.insert(0, str(REPO / "benchmarks"))
import gpu_check  # noqa: E402

H200_ROLLOUT = REPO / "tests" / "data" / "gpu" / "h200-rollout-pr-results.json"


@pytest.mark.slow
def test_without_cuda_it_exits_3_with_one_line_and_writes_nothing(tmp_path):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("CUDA is available here: the check would run")
    out = tmp_path / "check"
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "gpu_check.py"), "--out", str(out)],
                          capture_output=True, text=True, timeout=120,
                          env=_with_repo_on_path())
    assert proc.returncode == 3
    assert proc.stdout == ""
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("gpu_check: no CUDA device here (torch ") and "is_available() is False" in line
    assert not out.exists()


@pytest.mark.slow
def test_a_step_past_its_timeout_is_stopped_with_its_whole_process_group(tmp_path):
    pid_file = tmp_path / "child.pid"
    script = ("import subprocess, sys, time; "
              "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
              f"open({str(pid_file)!r}, 'w').write(str(child.pid)); time.sleep(60)")
    step = gpu_check.bounded([sys.executable, "-c", script], tmp_path, 3, tmp_path / "step.log")
    assert step["timed_out"] is True and step["rc"] != 0 and step["log"] == "step.log"
    child = int(pid_file.read_text())
    for _ in range(50):  # the orphaned grandchild is reaped by init shortly after its signal
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    else:
        pytest.fail(f"the step's grandchild {child} outlived the step's timeout")
    assert gpu_check.bounded([sys.executable, "-c", "pass"], tmp_path, 30, tmp_path / "ok.log")["timed_out"] is False


def test_the_summary_rows_of_the_first_gpu_run(tmp_path):
    shutil.copyfile(H200_ROLLOUT, tmp_path / "results.json")
    rows = {r["case"].split("/")[2]: r for r in gpu_check.case_rows(tmp_path)}
    assert list(rows) == ["eager", "amp-fp16", "amp-bf16", "cudnn-benchmark", "tf32", "channels-last", "cuda-graphs"]
    eager, fp16, graphs = rows["eager"], rows["amp-fp16"], rows["cuda-graphs"]
    assert eager["status"] == "ok" and eager["processes"] == 5 and eager["bound"] == "overhead-bound"
    assert eager["sampling_stopped"].startswith("settled")
    assert 5.8e-4 < eager["step_time_s"]["median"] < 6.1e-4
    assert fp16["processes"] == 16 and fp16["sampling_stopped"].startswith("budget: 16 processes")
    assert fp16["speedup_vs_eager"]["value"] == pytest.approx(0.662, abs=1e-3)
    assert fp16["drift"]["verdict"] == "drift" and fp16["drift"]["rel_l2"] == pytest.approx(0.835, abs=1e-3)
    assert graphs["status"] == "failed" and graphs["failure_class"] == "error"
    assert graphs["message"] == "RuntimeError: Attempt to increase offset for a CUDA generator not in capture mode."
    assert gpu_check.case_rows(tmp_path / "missing") == []


def test_the_summary_rows_of_the_second_gpu_run_cuda_graphs_and_compile_on_the_rollout(tmp_path):
    """The same rollout after the generator registration and the float64 drift reference landed (2026-11-26,
    the H200 again): cuda-graphs runs, draws eager's numbers and pays on the overhead-bound step; the
    compiled rollout's end differs only by the dynamics' amplification; every process's NVML readings name
    the device by its PCI bus id."""
    shutil.copyfile(REPO / "tests" / "data" / "gpu" / "h200-rollout-graphs-compile-pr-results.json",
                    tmp_path / "results.json")
    rows = {r["case"].split("/")[2]: r for r in gpu_check.case_rows(tmp_path)}
    assert list(rows) == ["eager", "cuda-graphs", "compile-reduce-overhead"]
    graphs, compiled = rows["cuda-graphs"], rows["compile-reduce-overhead"]
    assert graphs["status"] == "ok" and graphs["drift"]["verdict"] == "ok" and graphs["drift"]["rel_l2"] == 0.0
    assert graphs["speedup_vs_eager"]["value"] == pytest.approx(1.29, abs=0.01)
    # two processes a case: the interval over processes (Welch t, 1 dof a side) with the GPU's 3% run-to-run
    # term is wide, but it still says cuda-graphs pays
    assert 1.0 < graphs["speedup_vs_eager"]["low"] < 1.3 < graphs["speedup_vs_eager"]["high"]
    assert compiled["status"] == "ok" and compiled["drift"]["verdict"] == "ok" and compiled["drift"]["amplified"]
    assert compiled["wall_s"] == pytest.approx(23.8, abs=0.1)
    from perfgate.model.results import load_results

    clocks = [p.gpu_clocks for c in load_results(tmp_path / "results.json").cases for p in c.processes]
    assert len(clocks) == 6 and all(g["nvml_device"].startswith("pci ") and g["error"] is None for g in clocks)


def _with_repo_on_path() -> dict[str, str]:
    """This environment with the checkout first on PYTHONPATH, the caller's entries kept after it (where a
    machine's image keeps perfgate's dependencies, as on a lent GPU machine)."""
    kept = os.environ.get("PYTHONPATH", "")
    return {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), kept) if p)}

@pytest.mark.slow
def test_the_spread_benchmark_runs_its_variants_in_turns_on_cpu(tmp_path):
    """benchmarks/gpu_spread.py on CPU (it checks itself there): one process per variant, the second pinned to
    one CPU, and a summary per variant."""
    out = tmp_path / "spread.json"
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "gpu_spread.py"), "--device", "cpu",
                           "--workload", "operator_rollout", "--size", "smoke", "--processes", "1", "--seconds",
                           "0.2", "--out", str(out)], capture_output=True, text=True, timeout=300,
                          env=_with_repo_on_path())
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = json.loads(out.read_text())
    assert [r["variant"] for r in data["processes"]] == ["free", "pinned"]
    free, pinned = data["processes"]
    assert len(pinned["cpus"]) == 1 and (len(free["cpus"]) > 1 or os.cpu_count() == 1)
    assert set(data["summary"]) == {"free", "pinned"} and all(s["median_s"] > 0 for s in data["summary"].values())


@pytest.mark.slow
def test_the_rehearsal_runs_the_workloads_step_on_cpu_and_reads_its_summary_back(tmp_path):
    """``--rehearse``: the check's own commands, run on the CPU at smoke size, so a lent GPU's minutes are not
    spent finding a broken flag. The CUDA-only toggles come back skipped with their reason, the compiled one
    is left out (listed in not_run) and nothing is unreached."""
    out = tmp_path / "check"
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "gpu_check.py"), "--rehearse", "--out", str(out),
                           "--steps", "workloads", "--workloads", "operator_rollout"],
                          capture_output=True, text=True, timeout=300, env=_with_repo_on_path())
    assert proc.returncode == 0, proc.stdout + proc.stderr
    summary = json.loads((out / "gpu-check.json").read_text())
    assert summary["environment"]["device"] == "cpu (rehearsal)"
    rows = {r["case"]: r for r in summary["cases"]}
    assert rows["operator_rollout/smoke/eager/cpu"]["status"] == "ok"
    assert rows["operator_rollout/smoke/eager/cpu"]["step_time_s"]["median"] > 0
    graphs = rows["operator_rollout/smoke/cuda-graphs/cpu"]
    assert graphs["status"] == "skipped" and "cuda" in (graphs["message"] or "").lower()
    assert summary["not_run"] == ["operator_rollout/smoke/compile-reduce-overhead/cpu"]
    assert summary["not_reached"] == [] and summary["steps"]["operator_rollout"]["timed_out"] is False
    assert "operator_rollout/smoke/eager/cpu" in proc.stdout
