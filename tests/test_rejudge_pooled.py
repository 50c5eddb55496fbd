"""benchmarks/rejudge_pooled.py --levels: the spread of the kept runs of unchanged code (no torch, no workers)."""

from __future__ import annotations

import math
import statistics
import sys
from pathlib import Path

from conftest import REPO
from fixtures.synthetic import synthetic_run

sys.path.insert(0, str(REPO / "benchmarks"))
import rejudge_mechanisms as rm  # noqa: E402
import rejudge_pooled as rp  # noqa: E402


def _kept(root: Path, name: str, factor: float, seed: int) -> None:
    run = rm.scaled(synthetic_run(["rollout"], toggles=("eager",), seed=seed), factor)
    (root / "rollout" / name).mkdir(parents=True)
    (root / "rollout" / name / "results.json").write_text(run.dumps())


def test_levels_read_the_base_and_unchanged_runs_only(tmp_path: Path) -> None:
    factors = {"t00-base": 1.0, "t00-base-1": 1.04, "t01-base": 0.97, "t00-0.00-nnn": 1.02}
    for i, (name, factor) in enumerate(factors.items()):
        _kept(tmp_path, name, factor, seed=i)
    _kept(tmp_path, "t00-0.10-nn", 3.0, seed=9)  # a changed head: never a repeat of unchanged code
    (row,) = rp.unchanged_levels(tmp_path)
    assert row["family"] == "rollout" and row["case"] == "rollout/smoke/eager/cpu" and row["runs"] == 4
    # the sd of the four runs' levels, each a scaled copy of its own synthetic run (sorted by folder name)
    levels = [math.log(ms / 1e3) for ms in row["levels_ms"]]
    assert math.isclose(row["sd"], statistics.stdev(levels), rel_tol=1e-3)
    spread = statistics.stdev(math.log(f) for f in (factors["t00-0.00-nnn"], factors["t00-base"],
                                                     factors["t00-base-1"], factors["t01-base"]))
    assert abs(row["sd"] - spread) < 0.02  # the factors' spread, give or take the runs' own noise (3x: 0.5)
    assert 0 < row["sampling_sd"] < 0.03  # two processes of +/-1% offsets
    assert math.isclose(row["run_effect"] ** 2, row["sd"] ** 2 - row["sampling_sd"] ** 2, rel_tol=1e-9)


def test_levels_leave_out_a_case_of_one_run(tmp_path: Path) -> None:
    _kept(tmp_path, "t00-base", 1.0, seed=0)
    assert rp.unchanged_levels(tmp_path) == []
