"""The orchestrator and the processes it starts share only small modules (docs/architecture.md, "The
process split"): the manager side (perfgate.running.runner and the fork server's client, perfgate.running.zygote) never
imports the worker's code, and the worker side (perfgate.worker.main and the fork server's loop,
perfgate.worker.zygote_server) never imports the manager's. Read from the source, imports inside functions
included, and followed through every perfgate module they reach."""

from __future__ import annotations

import subprocess
import sys
from functools import cache

import pytest
from conftest import REPO
from fixtures.import_graph import graph, imports_torch, reachable

MANAGER = ("perfgate.running.runner", "perfgate.running.workers", "perfgate.running.zygote")
WORKER = ("perfgate.worker.main", "perfgate.worker.zygote_server")
SHARED = ("perfgate.protocol.zygote_protocol", "perfgate.protocol.layout", "perfgate.protocol.reaper", "perfgate.protocol.lockstep")


@cache
def _graph() -> dict[str, set[str]]:
    return graph()


def _imports(module: str) -> tuple[set[str], bool]:
    """The perfgate modules ``module`` imports anywhere in its source (functions too), and whether it
    imports torch."""
    return _graph()[module], imports_torch(module)


def _reached(module: str) -> set[str]:
    """Every perfgate module that importing ``module`` can import, at once or later inside a function."""
    return reachable(_graph(), module)


def test_the_import_reader_sees_imports_inside_functions():
    """worker.py imports the profiler only inside functions; the reader must see it."""
    assert "perfgate.worker.profiling" in _imports("perfgate.worker.main")[0]
    assert _imports("perfgate.worker.zygote_server")[1]  # its `import torch` is inside _serve


@pytest.mark.parametrize("module", MANAGER)
def test_the_manager_side_imports_none_of_the_workers_code(module):
    reached = _reached(module)
    assert not reached & {"perfgate.worker.main", "perfgate.worker.zygote_server"}, sorted(reached)
    assert not [m for m in (module, *reached) if _imports(m)[1]], "imports torch"


@pytest.mark.parametrize("module", WORKER)
def test_the_worker_side_imports_none_of_the_managers_code(module):
    reached = _reached(module)
    assert not reached & set(MANAGER), sorted(reached)


@pytest.mark.parametrize("module", SHARED)
def test_what_both_sides_share_imports_neither(module):
    reached = _reached(module)
    assert not reached & {*MANAGER, *WORKER}, sorted(reached)
    assert not [m for m in (module, *reached) if _imports(m)[1]], "imports torch"


@pytest.mark.parametrize("module", MANAGER + WORKER + SHARED)
def test_no_process_module_is_on_an_import_circle(module):
    assert module not in _reached(module)


def test_importing_the_manager_side_loads_no_worker_code():
    worker_code = "('torch', 'perfgate.worker.main', 'perfgate.worker.zygote_server')"
    code = ("import sys, perfgate.running.runner, perfgate.running.zygote\n"
            f"print([m for m in {worker_code} if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120,
                         check=True)
    assert out.stdout.strip() == "[]"
