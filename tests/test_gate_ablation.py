"""benchmarks/gate_ablation.py's scoring of real trials: the spread of the estimates per configuration (no
torch, no workers)."""

from __future__ import annotations

import math
import statistics
import sys

from conftest import REPO

sys.path.insert(0, str(REPO / "benchmarks"))
import gate_ablation as ga  # noqa: E402


def _row(family: str, config: str, extra: float, ratio: float) -> dict:
    return {"family": family, "config": config, "mode": "stored", "extra": extra, "ratio": ratio,
            "kind": "inconclusive", "wall_s": 30.0}


def test_ratio_spread_is_around_each_conditions_own_mean():
    # +10% measured as 1.08 and 1.12, A/A as 0.99 and 1.01: the knob's real size drops out
    rows = [_row("a", "defaults", 0.0, 0.99), _row("a", "defaults", 0.0, 1.01),
            _row("a", "defaults", 0.10, 1.08), _row("a", "defaults", 0.10, 1.12)]
    sd, dof = ga.ratio_spread(rows)
    assert dof == 2
    devs = [math.log(0.99 / 1.01) / 2, math.log(1.08 / 1.12) / 2]
    assert math.isclose(sd, math.sqrt(2 * sum(d * d for d in devs) / 2), rel_tol=1e-12)
    assert math.isnan(ga.ratio_spread(rows[:1])[0])


def test_the_all_row_pools_families_each_around_its_own_means():
    rows = [_row(f, c, 0.0, r) for f, shift in (("a", 1.0), ("b", 1.3)) for c in ("defaults", "no drawn layouts")
            for r in (0.98 * shift, 1.02 * shift)]
    sd, dof = ga.across_families([r for r in rows if r["config"] == "defaults"])
    # family b's 1.3x level is not spread: pooled, both families scatter +/-2% around their own means
    assert dof == 2 and math.isclose(sd, statistics.stdev([math.log(0.98), math.log(1.02)]), rel_tol=1e-9)


def test_spread_against_defaults_tests_the_variances():
    same = [_row("a", c, 0.0, r) for c in ("defaults", "no drawn layouts") for r in (0.98, 1.02, 0.99, 1.01, 1.0)]
    (line,) = ga.spread_against_defaults(same, "stored")
    assert "no drawn layouts ratio sd" in line and "variance ratio 1.00" in line and "p = 1" in line
    wide = [_row("a", "defaults", 0.0, r) for r in (0.99, 1.01, 0.995, 1.005, 1.0, 0.998, 1.002, 1.0)]
    wide += [_row("a", "no drawn layouts", 0.0, r) for r in (0.80, 1.25, 0.85, 1.2, 0.9, 1.1, 0.95, 1.05)]
    (line,) = ga.spread_against_defaults(wide, "stored")
    p = float(line.rsplit("p = ", 1)[1])
    assert p < 0.001
    assert ga.spread_against_defaults(wide, "against") == []
