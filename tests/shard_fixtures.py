"""Synthetic runs for the shard and merge tests: real data-model objects, no torch, no workers."""

from __future__ import annotations

from pathlib import Path

from perfgate.config import Settings
from perfgate.model import STATUS_OK, CaseResult, CaseSpec, ProcessSamples, RunResult
from perfgate.plan import parse_shard
from perfgate.runner import write_results

TOGGLES = ["eager", "compile", "compile-max-autotune", "amp-bf16", "channels-last", "cuda-graphs", "tf32"]
WORKLOADS = ["operator_rollout", "wave_field", "condensate", "message_passing", "detector_image"]

ENVIRONMENT = {
    "machine_key": "nvidia-h100", "machine": "x86_64", "device_name": "NVIDIA H100", "compute_capability": "9.0",
    "nvidia_driver": "550.54", "torch": "2.13.0", "torch_cuda": "12.8", "cudnn": 91000, "python": "3.12.3",
    "python_implementation": "CPython", "perfgate": "0.1.0", "git_commit": "a" * 40, "hostname": "runner-1",
}
SETTINGS = {"threads": 1, "processes": 2, "seed": 0, "timing": {"samples": 3}, "timeout_s": 600.0}


def suite_cases(workloads: int = 5, toggles: int = 7) -> list[CaseSpec]:
    return [CaseSpec(w, "pr", (t,), "cuda", (("T", 20),)) for w in WORKLOADS[:workloads] for t in TOGGLES[:toggles]]


def case_result(spec: CaseSpec, duration_s: float = 1.0) -> CaseResult:
    return CaseResult(spec=spec, status=STATUS_OK, duration_s=duration_s,
                      processes=[ProcessSamples(samples_ns=[1_000_000, 1_100_000, 1_050_000], process_index=i)
                                 for i in range(2)])


def settings_for(tmp: Path) -> Settings:
    return Settings(root=tmp, source=None, workloads_dirs=(tmp / "workloads",), baselines_dir=tmp / "baselines",
                    reports_dir=tmp / "reports")


def write_shard_runs(tmp: Path, cases: list[CaseSpec], count: int, suite: str = "pr",
                     environment: dict | None = None) -> list[Path]:
    """One results.json per shard, as `perfgate run --shard i/count` on each runner would leave them."""
    from perfgate.merge import select_shard

    paths = []
    for i in range(1, count + 1):
        chosen, record = select_shard(cases, parse_shard(f"{i}/{count}"), None, settings_for(tmp), suite,
                                      "nvidia-h100")
        run = RunResult(run_id=f"shard-{i}", suite=suite, environment=dict(environment or ENVIRONMENT),
                        cases=[case_result(c) for c in chosen], started_at=f"2026-01-01T00:0{i}:00+0000",
                        finished_at=f"2026-01-01T00:1{i}:00+0000", settings={**SETTINGS, "shard": record})
        path = tmp / "shards" / f"perfgate-shard-{i}" / "results.json"
        write_results(run, path)
        paths.append(path)
    return paths
