"""perfgate: profiling and regression gating for PyTorch workloads.

Importing the package imports no torch: the CLI, data model, comparison and reports run without it.
Workload authors import ``perfgate.workload`` (Workload, Built, Tolerance).

For notebooks (docs/notebook.md), runs and history as pandas DataFrames: ``perfgate.load(run)``,
``perfgate.load_samples(run)``, ``perfgate.load_verdicts(run)``, ``perfgate.load_history(url)``. They live in
``perfgate.commands.notebook``, imported on first use, so ``import perfgate`` imports neither pandas nor torch.
"""

from __future__ import annotations

from typing import Any

from perfgate.util.version import __version__

_NOTEBOOK = ("load", "load_samples", "load_verdicts", "load_history")
__all__ = ["__version__", *_NOTEBOOK]  # noqa: PLE0604 (ruff cannot see that _NOTEBOOK holds strings)


def __getattr__(name: str) -> Any:
    if name in _NOTEBOOK:
        from perfgate.commands import notebook

        return getattr(notebook, name)
    raise AttributeError(f"module 'perfgate' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_NOTEBOOK])
