"""benchmarks/run_drift.py's statistics, on runs whose drift is known."""

import math
import subprocess
import sys

import pytest
from conftest import REPO

sys.path.insert(0, str(REPO / "benchmarks"))
import run_drift  # noqa: E402


def _rows(machine: list[float], own: list[float]) -> list[dict[str, list[float]]]:
    """Runs in which both cases move with ``machine`` and the rollout also by ``own``; process 0 slow."""
    return [{"gate_knob": [2.5e-3 * m * o * f for f in (1.08, 1.0, 1.0)], "ref_knob": [1e-3 * m] * 3}
            for m, o in zip(machine, own, strict=True)]


def test_a_reference_that_moves_with_the_machine_takes_the_machine_out():
    summary = run_drift.summarize(_rows([1.0, 1.03, 0.98, 1.05, 1.01], [1.0] * 5))
    assert summary["correlation"] == pytest.approx(1.0) and summary["slope"] == pytest.approx(1.0)
    assert summary["pair_sd_raw"] > 0.02 and summary["pair_sd_normalized"] == pytest.approx(0.0, abs=1e-12)
    assert summary["pairs_beyond_3pct_raw"] > 0 and summary["pairs_beyond_3pct_normalized"] == 0
    assert summary["index_offsets_rollout"][0] == pytest.approx(0.08, abs=1e-9)


def test_a_reference_that_moves_alone_only_adds_its_noise():
    rows = _rows([1.0, 1.02, 0.99, 1.01], [1.0, 1 / 1.02, 1 / 0.99, 1 / 1.01])  # the rollout stays put
    summary = run_drift.summarize(rows)
    assert summary["pair_sd_raw"] == pytest.approx(0.0, abs=1e-12)
    assert summary["pair_sd_normalized"] > 0.01 and summary["sd_matmul"] > 0.01
    assert math.isnan(summary["correlation"])  # the rollout did not move: no correlation, and no crash


def test_bad_arguments_get_one_line_and_exit_2():
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "run_drift.py"), "--runs", "1"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "--runs must be at least 3" in proc.stderr
