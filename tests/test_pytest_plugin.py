"""The pytest plugin (perfgate/worker/pytest_plugin.py): a user's test file run by a real pytest in a subprocess,
through the ``pytest11`` entry point an installed perfgate registers. Compiles use backend="eager"."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

USER_TESTS = textwrap.dedent('''
    import torch


    class Whole(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(8, 8)

        def forward(self, x):
            return torch.relu(self.lin(x))


    class Broken(Whole):
        def forward(self, x):
            y = self.lin(x)
            if y.sum().item() > 1e9:  # the break
                y = y * 2
            return torch.relu(y)


    def test_whole_model_has_no_break(perfgate_counts):
        counts = perfgate_counts(Whole(), torch.randn(4, 8), backend="eager")
        counts.assert_no_graph_breaks()
        counts.assert_max_recompiles(0)
        assert counts.unique_graphs == 1
        assert counts.kernels_per_step is None and counts.syncs_per_step is None  # CPU


    def test_broken_model(perfgate_counts):
        perfgate_counts(Broken(), torch.randn(4, 8), backend="eager").assert_no_graph_breaks()


    def log_and_add(x):
        print("adding one")  # a break before any graph
        return x + 1


    def test_function_that_prints(perfgate_counts):
        perfgate_counts(log_and_add, torch.randn(3), backend="eager").assert_no_graph_breaks()


    def test_new_shape_recompiles(perfgate_counts):
        counts = perfgate_counts(Whole(), torch.randn(4, 8), backend="eager", also=[(torch.randn(6, 8),)])
        counts.assert_max_recompiles(0)


    def test_matmul_counts(perfgate_counts):
        counts = perfgate_counts(torch.matmul, torch.randn(16, 32), torch.randn(32, 8))
        assert counts.flops_per_step == 2 * 16 * 32 * 8
        assert counts.ops_per_step["aten::mm"] == 1.0
        assert counts.aten_ops_per_step >= 2  # matmul dispatches to mm
        assert counts.peak_memory_bytes >= 16 * 8 * 4  # the output, float32
        assert counts.graph_breaks == 0 and counts.unique_graphs == 0  # not compiled


    def test_the_same_case_again_is_not_measured_again(perfgate_counts, perfgate_counts_cache):
        counts = perfgate_counts(Whole(), torch.randn(4, 8), backend="eager")
        assert counts.cached
        assert counts.unique_graphs == 1
''')


def run_pytest(folder: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    """A user's `python -m pytest` on ``folder``, with none of this repository's configuration."""
    env = dict(os.environ)
    env.pop("PYTEST_ADDOPTS", None)
    env.pop("PYTEST_XDIST_WORKER", None)
    return subprocess.run([sys.executable, "-m", "pytest", "-v", "-p", "no:cacheprovider", *args],
                          cwd=folder, capture_output=True, text=True, timeout=timeout, env=env)


@pytest.fixture(scope="module")
def user_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess, Path]:
    folder = tmp_path_factory.mktemp("user")
    (folder / "test_user_model.py").write_text(USER_TESTS)
    return run_pytest(folder, "test_user_model.py"), folder


def _outcome(proc: subprocess.CompletedProcess, test: str) -> str:
    for line in proc.stdout.splitlines():
        if line.startswith(f"test_user_model.py::{test} "):
            return line.split()[1]
    raise AssertionError(f"{test} not in the output:\n{proc.stdout[-3000:]}\n{proc.stderr[-2000:]}")


@pytest.mark.slow
def test_a_model_without_a_break_passes_and_known_counts_hold(user_run):
    proc, _ = user_run
    assert _outcome(proc, "test_whole_model_has_no_break") == "PASSED", proc.stdout[-3000:]
    assert _outcome(proc, "test_matmul_counts") == "PASSED", proc.stdout[-3000:]


@pytest.mark.slow
def test_a_graph_break_fails_naming_dynamos_reason_and_the_source_line(user_run):
    proc, folder = user_run
    assert _outcome(proc, "test_broken_model") == "FAILED"
    out = proc.stdout
    assert "Broken: 1 graph break(s), at most 0 allowed" in out
    assert "Tensor.item()" in out  # dynamo's reason
    assert f"{folder / 'test_user_model.py'}:17 in forward" in out  # where the break is
    assert "if y.sum().item() > 1e9:  # the break" in out  # its source line
    assert "DEBUG    torch.__trace" not in out  # dynamo's structured trace kept out of the captured log


@pytest.mark.slow
def test_a_break_before_any_graph_is_named_too(user_run):
    proc, folder = user_run
    assert _outcome(proc, "test_function_that_prints") == "FAILED"
    assert "log_and_add: 1 graph break(s), at most 0 allowed" in proc.stdout
    assert "Failed to trace builtin operator" in proc.stdout
    assert f"{folder / 'test_user_model.py'}:35 in log_and_add" in proc.stdout
    assert 'print("adding one")  # a break before any graph' in proc.stdout


@pytest.mark.slow
def test_a_recompile_fails_naming_the_guard_that_failed(user_run):
    proc, _ = user_run
    assert _outcome(proc, "test_new_shape_recompiles") == "FAILED"
    assert "Whole: 1 recompile(s), at most 0 allowed" in proc.stdout
    assert "size mismatch at index 0. expected 4, actual 6" in proc.stdout


@pytest.mark.slow
def test_the_same_case_asked_twice_is_measured_once_per_session(user_run):
    proc, _ = user_run
    assert _outcome(proc, "test_the_same_case_again_is_not_measured_again") == "PASSED", proc.stdout[-3000:]


def test_the_plugin_is_registered_and_imports_no_torch_unless_used(tmp_path):
    (tmp_path / "test_plain.py").write_text(textwrap.dedent('''
        import sys


        def test_plain(request):
            assert request.config.pluginmanager.hasplugin("perfgate")
            assert "torch" not in sys.modules
    '''))
    proc = run_pytest(tmp_path, "test_plain.py")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]


XDIST_TESTS = USER_TESTS.split("def test_")[0] + textwrap.dedent('''
    import pytest


    @pytest.mark.parametrize("n", range(4))
    def test_in_a_worker(perfgate_counts, n):
        first = perfgate_counts(Whole(), torch.randn(4, 8), backend="eager")
        again = perfgate_counts(Whole(), torch.randn(4, 8), backend="eager")
        assert again.cached and again.unique_graphs == first.unique_graphs == 1
        first.assert_no_graph_breaks()
''')


@pytest.mark.slow
def test_each_xdist_worker_measures_with_its_own_cache(tmp_path):
    pytest.importorskip("xdist")
    (tmp_path / "test_user_model.py").write_text(XDIST_TESTS)
    proc = run_pytest(tmp_path, "-n", "2", "test_user_model.py")
    assert "4 passed" in proc.stdout, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "[gw0]" in proc.stdout and "[gw1]" in proc.stdout  # both workers measured


def test_the_fixture_in_perfgates_own_tests(perfgate_counts):
    """perfgate's own suite loads the plugin too: the FLOPs of a known matmul, counted in this process."""
    import torch

    counts = perfgate_counts(torch.matmul, torch.ones(4, 5), torch.ones(5, 3))
    assert counts.flops_per_step == 2 * 4 * 5 * 3
    assert counts.errors == []


TEST_WORKLOADS = Path(__file__).resolve().parent / "workloads"


@pytest.mark.slow
def test_a_workload_case_counts_as_perfgate_run_counts_it(perfgate_counts, profiled_run):
    """The fixture's case path and `perfgate run`'s profile pass read one case alike."""
    _, data = profiled_run
    for toggles in ("eager", "amp-bf16"):
        (run_case,) = [c for c in data["cases"] if c["key"] == f"tight_conv/smoke/{toggles}/cpu"]
        counts = perfgate_counts.case("tight_conv", "smoke", toggles=toggles, workloads_dir=TEST_WORKLOADS)
        assert counts.name == f"tight_conv/smoke/{toggles}/cpu"
        assert counts.aten_ops_per_step == run_case["metrics"]["aten_ops_per_step"], toggles
        assert counts.flops_per_step == run_case["metrics"]["flops_per_step"] == 2 * (2 * 2 * 4 * 9 * 12 * 12)
        assert counts.errors == []


@pytest.mark.slow
def test_a_workload_cases_graph_break_names_the_line_in_the_workloads_model(perfgate_counts):
    counts = perfgate_counts.case("graph_break", "smoke", backend="eager", workloads_dir=TEST_WORKLOADS)
    assert counts.graph_breaks >= 1 and counts.unique_graphs >= 2
    with pytest.raises(AssertionError) as failed:
        counts.assert_no_graph_breaks()
    message = str(failed.value)
    assert "Tensor.item()" in message
    assert f"{TEST_WORKLOADS / 'profiled.py'}:" in message and "in forward" in message
    assert "if h.sum().item() > 0:" in message
    again = perfgate_counts.case("graph_break", "smoke", toggles="eager", backend="eager",
                                 workloads_dir=TEST_WORKLOADS)
    assert again.cached and again.graph_breaks == counts.graph_breaks


def test_a_workload_case_that_cannot_run_here_is_skipped_and_a_bad_name_is_one_line(perfgate_counts):
    with pytest.raises(ValueError, match="no size 'huge'"):
        perfgate_counts.case("tight_conv", "huge", workloads_dir=TEST_WORKLOADS)
    with pytest.raises(ValueError, match="neither a perfgate toggle nor a variant"):
        perfgate_counts.case("tight_conv", toggles="turbo", workloads_dir=TEST_WORKLOADS)
    with pytest.raises(pytest.skip.Exception, match="needs a CUDA device"):
        perfgate_counts.case("tight_conv", toggles="cudnn-benchmark", workloads_dir=TEST_WORKLOADS)


def test_a_graph_break_record_of_an_unknown_form_falls_back_to_dynamos_explain(perfgate_counts, monkeypatch):
    """Where dynamo's graph-break log says nothing perfgate can read, torch._dynamo.explain names the line."""
    import torch

    from perfgate.worker import pytest_plugin

    assert pytest_plugin._breaks_from_log(["Graph break somewhere, in a form not known"]) is None
    monkeypatch.setattr(pytest_plugin, "GRAPH_BREAK_LOGGER", "perfgate.test.nothing_logs_here")

    def branchy(x):
        if x.sum().item() > 0:  # the break explain finds
            return x * 2
        return x

    counts = perfgate_counts(branchy, torch.ones(3), backend="eager", cache=False)
    assert counts.graph_breaks == 1 and counts.errors == []
    (only,) = counts.breaks
    assert only.function == "branchy" and only.source.strip().endswith("# the break explain finds")


def test_a_case_is_the_callables_structure_and_the_inputs_shapes_not_their_values():
    import torch

    from perfgate.worker.pytest_plugin import _callable_key, _shape_key

    def model() -> torch.nn.Module:  # other random weights each time
        return torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Dropout(0.1))

    assert _callable_key(model()) == _callable_key(model())  # a fresh instance is the same case
    assert _callable_key(model().eval()) != _callable_key(model())  # dropout runs in train mode only
    assert _callable_key(model().half()) != _callable_key(model())
    assert _callable_key(torch.nn.Sequential(torch.nn.Linear(4, 5))) != _callable_key(model())
    same = model()
    assert _callable_key(torch.compile(same, backend="eager")) != _callable_key(same)
    assert _shape_key((torch.zeros(2, 3),)) == _shape_key((torch.ones(2, 3),)) != _shape_key((torch.ones(3, 2),))
    assert _shape_key((torch.zeros(2),)) != _shape_key((torch.zeros(2, dtype=torch.float64),))
    with pytest.raises(ValueError, match="steps must be a positive whole number, not 0"):
        from perfgate.worker.pytest_plugin import CountsCache, CountsFixture

        CountsFixture(CountsCache(), Path.cwd())(torch.relu, torch.ones(2), steps=0)
