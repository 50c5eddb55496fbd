"""What a worker process starts with: the interpreter a side's workers run under (Interpreter), the part of
perfgate's environment they inherit (an allow-list, the names a project's ``worker_env`` adds, credentials
withheld), threads pinned; and which inherited variables tune what they measure (recorded in results.json).
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from perfgate.protocol import layout


def package_parent() -> str:
    return str(Path(__file__).resolve().parents[2])  # perfgate/running/inherit.py: the folder holding perfgate


# What a worker inherits from perfgate's environment: nothing else (tokens, cloud keys and the history
# store's URL stay with the orchestrator; docs/configuration.md "Worker environment"). A workload config adds
# names with ``worker_env = ["NAME", "PREFIX_*"]`` in [tool.perfgate].
WORKER_ENV_NAMES = frozenset({
    "PATH", "HOME", "USER", "LOGNAME", "SHELL", "TERM", "LANG", "LANGUAGE", "TZ", "TMPDIR", "TEMP", "TMP",
    "PYTHONPATH", "PYTHONHASHSEED", "PYTHONNOUSERSITE", "PYTHONDONTWRITEBYTECODE", "PYTHONWARNINGS",
    "PYTHONMALLOC", "PYTHONFAULTHANDLER", "VIRTUAL_ENV", "LD_LIBRARY_PATH", "LD_PRELOAD", "CC", "CXX",
    "GLIBC_TUNABLES",
    "XDG_CACHE_HOME", "NUMEXPR_MAX_THREADS",
    # GitHub's runner ends, after a job, every process whose environment carries its tracking id: kept, so a
    # process a workload leaves running is ended there too, whatever perfgate itself missed
    "RUNNER_TRACKING_ID",
})
WORKER_ENV_PREFIXES = (
    "LC_", "OMP_", "MKL_", "KMP_", "GOMP_", "OPENBLAS_", "NUMEXPR_", "TORCH_", "TORCHINDUCTOR_", "TORCHDYNAMO_",
    "PYTORCH_", "TRITON_", "CUDA_", "CUBLAS_", "CUBLASLT_", "CUDNN_", "NVIDIA_", "HIP_", "ROCR_", "ROCM_",
    "PERFGATE_", "MALLOC_",  # glibc's malloc knobs (MALLOC_ARENA_MAX, MALLOC_MMAP_THRESHOLD_...), jemalloc's MALLOC_CONF
)
WORKER_ENV_WITHHELD = frozenset({"PERFGATE_HISTORY_URL"})  # in perfgate's own namespace, but a credential
_config_env_names: tuple[str, ...] = ()


def set_config_env_names(names: Sequence[str]) -> None:
    """The names (``NAME`` or ``PREFIX*``) the workload config adds to what workers inherit."""
    global _config_env_names
    _config_env_names = tuple(names)


def passed_to_workers(name: str, extra_names: Sequence[str] | None = None) -> bool:
    """True when the variable ``name`` goes to workers: on the allow-list or named by the config, and never
    when it is withheld (``WORKER_ENV_WITHHELD``: a credential), whatever the config names."""
    if name in WORKER_ENV_WITHHELD:
        return False
    for pattern in _config_env_names if extra_names is None else extra_names:
        if name == pattern or (pattern.endswith("*") and name.startswith(pattern[:-1])):
            return True
    return name in WORKER_ENV_NAMES or name.startswith(WORKER_ENV_PREFIXES)


# Of what workers inherit, the variables that tune how they run (threads, allocators, compilers, math and
# kernel libraries): recorded in results.json (environment.tuning_env) so that a baseline and a run that
# differ in one say so (perfgate.model.environment_keys.environment_diff). Left out: where things are kept (a cache or log folder,
# a path: perfgate sets some per case), which devices a job sees (a shard's GPU), the thread counts perfgate
# pins itself, and the variables a project's `worker_env` names (its own; they may hold credentials).
TUNING_PREFIXES = ("OMP_", "MKL_", "KMP_", "GOMP_", "OPENBLAS_", "NUMEXPR_", "TORCH_", "TORCHINDUCTOR_",
                   "TORCHDYNAMO_", "PYTORCH_", "TRITON_", "CUDA_", "CUBLAS_", "CUBLASLT_", "CUDNN_", "MALLOC_")
TUNING_NAMES = frozenset({"LD_PRELOAD", "PYTHONMALLOC", "GLIBC_TUNABLES"})
_NOT_TUNING = re.compile(r".*(_DIR|_HOME|_PATH|_ROOT|_FILE|_CACHE|_LOGS?|_VISIBLE_DEVICES)$|(OMP|MKL|OPENBLAS|NUMEXPR)_NUM_THREADS$")
TUNING_VALUE_CHARS = 200


def tuning_environment(environ: dict[str, str] | None = None) -> dict[str, str]:
    """The variables of ``environ`` (this process's) that tune what workers measure, name to value, sorted."""
    environ = dict(os.environ) if environ is None else environ
    return {k: v[:TUNING_VALUE_CHARS] for k, v in sorted(environ.items())
            if (k in TUNING_NAMES or k.startswith(TUNING_PREFIXES)) and not _NOT_TUNING.fullmatch(k)
            and k not in WORKER_ENV_WITHHELD}


@dataclass(frozen=True)
class Interpreter:
    """The Python a side's workers run under and the variables set for every one of them, its fork server
    included (a variable read when torch is imported must be there when the fork server imports it):
    ``run --base-python PATH --base-env NAME=VALUE``. The default: this interpreter, nothing added."""

    python: str = ""  # "" : sys.executable
    env: tuple[tuple[str, str], ...] = ()

    @property
    def executable(self) -> str:
        return self.python or sys.executable

    def key(self) -> tuple[str, tuple[tuple[str, str], ...]]:
        return self.executable, self.env


THIS_INTERPRETER = Interpreter()


def worker_env(threads: int, extra: dict[str, str] | None = None) -> dict[str, str]:
    """The worker's environment: the allow-listed part of this one (``passed_to_workers``), threads pinned
    for every math library, perfgate importable."""
    env = {k: v for k, v in os.environ.items() if passed_to_workers(k)}
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "NUMEXPR_NUM_THREADS"):
        env[var] = str(threads)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_parent(), env.get("PYTHONPATH", "")) if p)
    env["PYTHONUNBUFFERED"] = "1"
    if layout.fixed_layout_wanted():
        env.setdefault("PYTHONHASHSEED", "0")  # with ASLR off, the rest of the layout: the same in every worker
    env.update(extra or {})
    return env
