"""benchmarks/layout_wall.py's summary of gated runs' wall times (no torch, no workers)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from conftest import REPO

sys.path.insert(0, str(REPO / "benchmarks"))
import layout_wall as lw  # noqa: E402


def _r(rnd: int, name: str, wall: float, remeasure: bool = False) -> dict:
    return {"round": rnd, "name": name, "wall_s": wall, "remeasure": remeasure, "processes": 16,
            "s_per_process": wall / 16, "groups": 3 if name == "groups3" else 1, "load": 1.0}


def test_each_configuration_against_none_in_its_own_round_and_a_remeasure_left_out():
    rows = [_r(0, "drawn", 26.0), _r(0, "none", 25.0), _r(0, "groups3", 30.0),
            _r(1, "none", 20.0), _r(1, "groups3", 24.0), _r(1, "drawn", 20.0),
            _r(2, "groups3", 28.0), _r(2, "drawn", 40.0, remeasure=True), _r(2, "none", 21.0)]
    drawn, none, groups = lw.summarize(rows)
    # drawn: rounds 0 and 1 only (round 2 re-measured), 1.04x and 1.00x of none there
    assert drawn.startswith("drawn    2 runs: wall 23.0 s") and "1.020x (1.000-1.040)" in drawn
    assert none.startswith("none     3 runs: wall 21.0 s") and "against none" not in none
    # groups3 / none: 1.2, 1.2, 1.333
    assert groups.startswith("groups3  3 runs: wall 28.0 s") and "1.200x (1.200-1.333)" in groups


def test_a_round_whose_none_run_remeasured_gives_no_ratio():
    rows = [_r(0, "drawn", 26.0), _r(0, "none", 50.0, remeasure=True)]
    (drawn,) = lw.summarize(rows)
    assert "against none" not in drawn


def test_row_reads_processes_groups_and_the_remeasure_from_the_run_folder(tmp_path: Path):
    case = {"duration_s": 24.0, "processes": [{"layout_groups": None}] * 15 + [{"layout_groups": [11, 11, 11]}]}
    (tmp_path / "results.json").write_text(json.dumps({"cases": [case]}))
    r = lw.row("drawn", 2, 25.5, tmp_path)
    assert (r["processes"], r["s_per_process"], r["groups"], r["remeasure"]) == (16, 1.5, 1, False)
    (tmp_path / "results-remeasure.json").write_text("{}")
    assert lw.row("drawn", 2, 25.5, tmp_path)["remeasure"] is True
