"""Change points and creep on synthetic series with known steps, in noise like this machine's; every series
seeded."""

from __future__ import annotations

import dataclasses
import warnings

import numpy as np
import pytest

from perfgate.history.detect import DetectSettings, analyse, change_point_indices, qhat, render
from perfgate.history.reading import Point
from perfgate.model.results import DERIVED_METRICS, METRICS


def points(values) -> list[Point]:  # noqa: ANN001
    return [Point(f"run-{i}", f"{i:040x}", "main", f"2026-01-01T00:{i:02d}", "m", float(v), None, None, None)
            for i, v in enumerate(values)]


def noisy(n: int, cv: float, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).normal(1.0, cv, n)


def test_qhat_splits_two_levels_where_they_meet() -> None:
    y = np.array([1.0] * 20 + [2.0] * 30)
    assert qhat(y, 5)[0] == 20


@pytest.mark.parametrize("step,cv", [(0.05, 0.03), (0.10, 0.03), (0.20, 0.03), (0.02, 0.005)])
def test_a_known_step_is_found_where_it_is_with_its_size(step: float, cv: float) -> None:
    found = 0
    for seed in range(20):
        x = noisy(100, cv, seed)
        at = 30 + seed * 2
        x[at:] *= 1 + step
        a = analyse("case", "step_time", points(x))
        near = [c for c in a.change_points if abs(c.index - at) <= 5]
        if near:
            found += 1
            c = near[0]
            assert c.kind == "regression"
            assert c.before_commit == f"{c.index - 1:040x}" and c.after_commit == f"{c.index:040x}"
            assert c.ci_low < c.change < c.ci_high
            assert abs(c.change - step) < 4 * cv / np.sqrt(10) + 0.01
    assert found >= 19


def test_wins_are_wins_and_throughput_is_read_the_right_way_up() -> None:
    x = noisy(80, 0.02, 1)
    x[40:] *= 0.9
    assert [c.kind for c in analyse("c", "step_time", points(x)).change_points] == ["win"]
    assert [c.kind for c in analyse("c", "throughput_steps_per_s", points(x)).change_points] == ["regression"]


@pytest.mark.parametrize("metric", sorted({*METRICS, *DERIVED_METRICS}))
def test_every_metric_is_read_the_way_up_the_model_says(metric: str) -> None:
    """A 10% rise in each metric's series: a regression unless the metric's table entry says more is better."""
    x = noisy(80, 0.02, 1)
    x[40:] *= 1.1
    higher_is_better = {**METRICS, **DERIVED_METRICS}[metric].higher_is_better
    expected = "win" if higher_is_better else "regression"
    assert [c.kind for c in analyse("c", metric, points(x)).change_points] == [expected]


def test_more_cache_hits_and_more_bytes_per_second_are_wins() -> None:
    x = noisy(80, 0.02, 1)
    x[40:] *= 1.1
    for metric in ("construction_cache_hits", "achieved_bytes_per_s", "throughput_steps_per_s"):
        assert [c.kind for c in analyse("c", metric, points(x)).change_points] == ["win"], metric


def test_less_traffic_for_the_same_flops_is_a_win_in_bytes_and_in_arithmetic_intensity() -> None:
    """One change (amp halving the bytes a step moves, FLOPs the same) moves bytes_per_step down and
    arithmetic_intensity (FLOPs / bytes) up. Before 2026-12-01 the table read arithmetic_intensity as worse when
    higher, so history detect called the same change a win in one series and a regression in the other;
    more FLOPs per byte is the better side of the roofline (docs/roofline.md)."""
    bytes_per_step = noisy(80, 0.02, 1) * 1e6
    bytes_per_step[40:] *= 0.5
    intensity = 2e6 / bytes_per_step
    assert [c.kind for c in analyse("c", "bytes_per_step", points(bytes_per_step)).change_points] == ["win"]
    assert [c.kind for c in analyse("c", "arithmetic_intensity", points(intensity)).change_points] == ["win"]


def test_noise_alone_gives_almost_no_change_points() -> None:
    false = sum(len(change_point_indices(noisy(100, 0.03, 100 + s))) for s in range(50))
    assert false <= 2


def test_three_small_steps_are_flagged_and_the_whole_trend_is_a_creep_when_one_step_does_not_explain_it() -> None:
    """Three +2% steps in 3% noise: no single one stands out. Each series is flagged as a regression (a
    step or a creep); where the steps found fit worse than a straight line, the whole range is a creep
    of about +6-10%. (One found step that fits better than the line is taken as the explanation: the
    price of not calling every clean step a creep too; docs/history.md has the rates.)"""
    creeps = 0
    for seed in range(10):
        x = noisy(100, 0.03, 200 + seed)
        for at in (25, 50, 75):
            x[at:] *= 1.02
        a = analyse("case", "step_time", points(x))
        assert a.regressions >= 1
        creep = [c for c in a.creeps if c.kind == "regression"]
        creeps += bool(creep)
        for c in creep:
            assert 0.03 < c.change < 0.12 and c.ci_low < c.change < c.ci_high
    assert creeps >= 4


def test_a_steady_creep_cut_into_steps_is_still_a_creep() -> None:
    """+6% over 100 runs in 1% noise: found as two or three steps of 1.5-3%, which a line describes
    better (fewer parameters for the same fit), so the whole range is a creep too."""
    for seed in range(10):
        x = noisy(100, 0.01, 600 + seed) * (1 + 0.06 * np.arange(100) / 99)
        a = analyse("case", "step_time", points(x))
        whole = [c for c in a.creeps if (c.start, c.end, c.kind) == (0, 99, "regression")]
        assert len(whole) == 1 and 0.045 < whole[0].change < 0.075


def test_a_clean_single_step_is_not_also_a_creep() -> None:
    """The Theil-Sen line through one step rises by about 1.5x the step, and Mann-Kendall finds that
    trend significant; the step explains it, so it is not reported again as a creep (the rule before
    reported 10 creeps in these 40 series; the information criterion still lets about 3% of clean +5%
    steps through, docs/history.md)."""
    creeps, found = 0, 0
    for seed in range(40):
        x = noisy(100, 0.03, 400 + seed)
        at = 20 + (seed * 3) % 61
        x[at:] *= 1.05 if seed % 2 else 1.10
        a = analyse("case", "step_time", points(x))
        creeps += len(a.creeps)
        found += any(abs(c.index - at) <= 5 for c in a.change_points)
    assert found >= 38
    assert creeps <= 2


def test_a_transient_is_found_at_both_edges() -> None:
    """+10% for 10 runs, then back, in 3% noise: neither edge stands on its own (each side of it mixes
    both levels), so a lone edge looks for its other one."""
    both = 0
    for seed in range(20):
        x = noisy(100, 0.03, 300 + seed)
        at = 25 + 2 * seed
        x[at:at + 10] *= 1.10
        a = analyse("case", "step_time", points(x))
        edges = [(c.index, c.kind) for c in a.change_points]
        if len(edges) == 2 and abs(edges[0][0] - at) <= 2 and abs(edges[1][0] - (at + 10)) <= 2:
            both += 1
            assert [k for _, k in edges] == ["regression", "win"]
    assert both >= 16  # the rule before found both edges in 9 of these 20
    quiet = [1.0] * 30 + [1.1] * 10 + [1.0] * 30
    assert change_point_indices(quiet) == [30, 40]


def test_significance_per_test_is_the_old_max_pvalue() -> None:
    with pytest.warns(DeprecationWarning, match="significance_per_test"):
        old = DetectSettings(max_pvalue=1e-3)
    assert old.significance_per_test == 1e-3 and old == DetectSettings(significance_per_test=1e-3)
    with pytest.warns(DeprecationWarning, match="not a false-alarm rate"):
        assert DetectSettings(significance_per_test=0.02).max_pvalue == 0.02
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert DetectSettings().significance_per_test == 1e-4
        assert dataclasses.replace(old, window=20).significance_per_test == 1e-3
    with pytest.raises(TypeError, match="not both"), pytest.warns(DeprecationWarning):
        DetectSettings(significance_per_test=1e-3, max_pvalue=1e-2)


def test_three_steps_in_quiet_noise_are_three_steps() -> None:
    x = noisy(90, 0.004, 7)
    for at in (30, 50, 70):
        x[at:] *= 1.02
    a = analyse("case", "step_time", points(x))
    assert [c.index for c in a.change_points] == [30, 50, 70]
    assert all(abs(c.change - 0.02) < 0.005 for c in a.change_points)
    assert "3 change point(s)" in render([a])


def test_short_and_flat_series() -> None:
    assert analyse("c", "step_time", points([1.0, 1.0, 1.0])).change_points == []
    assert analyse("c", "step_time", points([1.0] * 30)).change_points == []
    x = [1.0] * 20 + [1.5] * 20  # no noise at all: still one step, p 0
    a = analyse("c", "kernels_per_step", points(x), DetectSettings())
    assert [c.index for c in a.change_points] == [20] and a.change_points[0].change == pytest.approx(0.5)


def test_a_step_from_zero_is_read_the_right_way_up() -> None:
    """graph_breaks 0 -> 1 is a regression (it was a +0.0% 'win': the relative change from 0 was taken as 0),
    cache hits 0 -> 3 a win; a step from 0 has no relative size (None, JSON null) and is shown as its levels."""
    import json

    a = analyse("c", "graph_breaks", points([0.0] * 20 + [1.0] * 20))
    [c] = a.change_points
    assert c.kind == "regression" and a.regressions == 1
    assert c.change is None and c.ci_low is None and c.ci_high is None
    assert "0 -> 1" in render([a]) and "+0.0%" not in render([a])
    assert json.loads(json.dumps(a.to_json()))["change_points"][0]["change"] is None
    hits = analyse("c", "construction_cache_hits", points([0.0] * 20 + [3.0] * 20))
    assert [c.kind for c in hits.change_points] == ["win"]
    # min_magnitude does not drop a step from 0 as "too small"
    assert change_point_indices([0.0] * 20 + [1.0] * 20, DetectSettings(min_magnitude=0.05)) == [20]


def test_runs_from_two_machines_are_two_series_not_a_step_where_the_runner_changed(tmp_path) -> None:  # noqa: ANN001
    """The first 30 runs on a fast runner, the next 30 on one 30% slower, the code unchanged: one mixed series
    read a +30% regression 'between' the commits where the runner pool changed; per machine, nothing moved.
    A real +10% step on both runners (interleaved) is found on each."""
    import dataclasses as dc
    from pathlib import Path

    from fixtures.history import make_run

    from perfgate.history import commands, detect, ingest
    from perfgate.history.store import open_store
    from perfgate.history.writing import add_run

    rng = np.random.default_rng(3)
    url = f"sqlite:///{tmp_path / 'h.db'}"
    with open_store(url, create=True) as store:
        for i in range(60):
            machine = "fast-runner" if i < 30 else "slow-runner"
            run = make_run(i, [0.010 * (1.3 if machine == "slow-runner" else 1.0) * rng.normal(1, 0.01)])
            run = dc.replace(run, environment={**run.environment, "machine_key": machine})
            add_run(store, ingest.record_from_run(run, "x", Path(tmp_path)))
        [a, b] = commands._analyses(store, ["step_time"], [], None, None, None, None)
    assert (a.machine_key, b.machine_key) == ("fast-runner", "slow-runner") and (a.points, b.points) == (30, 30)
    assert a.change_points == b.change_points == [] and a.regressions == b.regressions == 0

    url2 = f"sqlite:///{tmp_path / 'h2.db'}"
    with open_store(url2, create=True) as store:
        for i in range(80):
            machine = ("fast-runner", "slow-runner")[int(rng.integers(2))]
            t = 0.010 * (1.3 if machine == "slow-runner" else 1.0) * (1.1 if i >= 40 else 1.0) * rng.normal(1, 0.01)
            run = make_run(i, [t])
            run = dc.replace(run, environment={**run.environment, "machine_key": machine})
            add_run(store, ingest.record_from_run(run, "x", Path(tmp_path)))
        found = commands._analyses(store, ["step_time"], [], None, None, None, None)
    assert [[c.kind for c in f.change_points] for f in found] == [["regression"], ["regression"]]
    assert all(abs(f.change_points[0].change - 0.1) < 0.03 for f in found)
    assert "step_time  on fast-runner  (" in detect.render(found)


def test_one_machine_is_one_series_as_before() -> None:
    pts = points([1.0] * 10)
    assert detect_by_machine(pts) == [(None, pts)]


def detect_by_machine(pts):  # noqa: ANN001, ANN201
    from perfgate.history.detect import by_machine

    return by_machine(pts)


def test_a_step_between_two_runs_of_one_commit_is_not_blamed_on_a_code_change() -> None:
    """Runs 20 and 21 measured the same commit (a re-run) and the step lies between them: it was printed as
    'between C and C', read as that commit's doing; it is now said to come from outside the code."""
    pts = points([1.0] * 20 + [1.2] * 20)
    pts[20] = dataclasses.replace(pts[20], commit=pts[19].commit)
    a = analyse("c", "step_time", pts)
    [c] = a.change_points
    assert c.before_commit == c.after_commit
    line = render([a]).splitlines()[1]
    assert "between two runs of " + pts[19].commit[:12] in line and "not a code change" in line
    from perfgate.history.report import trend_chart

    assert "not a code change" in trend_chart(pts, a).findings[0]


def test_last_n_is_each_machines_last_n_runs(tmp_path) -> None:  # noqa: ANN001
    """Runs from two machines interleaved: `--last 20` kept the last 20 runs of the case and then split them
    per machine, so each machine's series had about 10 points (too few to find a step) while the filter read
    '20'. Now each machine's series has its last 20 runs, in show, detect and report alike."""
    import dataclasses as dc
    from pathlib import Path

    from fixtures.history import make_run

    from perfgate.history import commands, ingest
    from perfgate.history import show as show_mod
    from perfgate.history.store import open_store
    from perfgate.history.writing import add_run

    rng = np.random.default_rng(5)
    url = f"sqlite:///{tmp_path / 'h.db'}"
    with open_store(url, create=True) as store:
        for i in range(80):
            machine = ("fast-runner", "slow-runner")[i % 2]
            t = 0.010 * (1.3 if machine == "slow-runner" else 1.0) * (1.2 if i >= 60 else 1.0) * rng.normal(1, 0.01)
            run = dc.replace(make_run(i, [t]), environment={**make_run(i, [t]).environment, "machine_key": machine})
            add_run(store, ingest.record_from_run(run, "x", Path(tmp_path)))
        found = commands._analyses(store, ["step_time"], [], None, 20, None, None)
        shown = show_mod.read(store, "step_time", [], None, 20)["workload_0/smoke/eager/cpu"]
        one = show_mod.read(store, "step_time", [], None, 20, machine_key="slow-runner")["workload_0/smoke/eager/cpu"]
    assert [(a.machine_key, a.points) for a in found] == [("fast-runner", 20), ("slow-runner", 20)]
    # the step 10 runs before each machine's end is found on each (in 10 points a side, not 5)
    assert [[(c.index, c.kind) for c in a.change_points] for a in found] == [[(10, "regression")]] * 2
    assert len(shown) == 40 and [p.run_id for p in shown] == [f"run-{i:06d}" for i in range(40, 80)]
    assert [p.run_id for p in one] == [f"run-{i:06d}" for i in range(41, 80, 2)]
