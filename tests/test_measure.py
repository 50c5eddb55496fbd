"""perfgate.worker.measure driven by a scripted timer and clock: exact warm-up, loop count and samples."""

from __future__ import annotations

import gc
import itertools
import weakref

import pytest

from perfgate.worker.measure import PerfCounterTimer, measure, timer_for


class ScriptedTimer:
    """Returns scripted nanoseconds per unit (times ``loops``); records the calls and the GC state."""

    name = "scripted"

    def __init__(self, per_unit_ns):
        self.per_unit_ns = iter(per_unit_ns)
        self.calls = []  # (loops, gc enabled?)

    def time_ns(self, fn, loops):
        for _ in range(loops):
            fn()
        self.calls.append((loops, gc.isenabled()))
        return next(self.per_unit_ns) * loops


def clock_from(values, then=None):
    """A clock reading ``values`` in turn, then ``then`` forever (or advancing by 1 s if None)."""
    if then is None:
        last = values[-1]
        return itertools.chain(values, (last + i for i in itertools.count(1))).__next__
    return iter(list(values) + [then] * 10_000).__next__


def test_first_call_warmup_loops_and_samples_exactly():
    calls = []
    # warm-up: 3 units far apart, then 3 agreeing within 5% -> stable after 6 units at a median of 1 ms
    warmup = [3_000_000, 2_000_000, 1_500_000, 1_000_000, 1_020_000, 990_000]
    samples = [1_000_000, 1_100_000, 900_000]
    timer = ScriptedTimer(warmup + samples)
    clock = clock_from([100.0, 102.5], then=103.0)
    m = measure(lambda: calls.append(1), timer, samples=3, min_sample_s=0.004, clock=clock)
    assert m.first_call_s == 2.5
    assert m.warmup_units == 6 and m.stable
    assert m.warmup_ns == warmup
    # ceil(4 ms / median(1.0, 1.02, 0.99 ms)) = 4 units per sample
    assert m.loops == 4
    assert m.samples_ns == [4_000_000, 4_400_000, 3_600_000]
    assert m.timer == "scripted"
    # the unit ran once for the first call, once per warm-up unit, loops times per sample
    assert len(calls) == 1 + 6 + 3 * 4


def test_gc_is_off_during_samples_only_and_restored():
    timer = ScriptedTimer([10_000] * 3 + [10_000] * 5)
    assert gc.isenabled()
    measure(lambda: None, timer, samples=5, min_sample_s=0.0001, clock=clock_from([0.0], then=0.0))
    assert [enabled for _, enabled in timer.calls] == [True] * 3 + [False] * 5
    assert gc.isenabled()


def test_warmup_gives_up_at_max_warmup_when_never_stable():
    noisy = [1_000_000, 2_000_000] * 5
    timer = ScriptedTimer(noisy + [1_000_000] * 3)
    m = measure(lambda: None, timer, samples=3, max_warmup=10, min_sample_s=0.001,
                clock=clock_from([0.0], then=0.0))
    assert m.warmup_units == 10 and not m.stable
    assert m.loops == 1  # median of the last three (2, 1, 2 ms) exceeds the 1 ms minimum
    assert m.samples_ns == [1_000_000] * 3


def test_time_budget_stops_sampling_after_three_samples():
    timer = ScriptedTimer([1_000_000] * 3 + [1_000_000] * 20)
    # each clock read advances a second; the budget is 5 s
    m = measure(lambda: None, timer, samples=20, min_sample_s=0.001, max_time_s=5.0, clock=clock_from([0.0]))
    assert m.stable and m.warmup_units == 3
    assert 3 <= len(m.samples_ns) < 20


def test_sync_runs_after_the_first_call():
    order = []
    measure(lambda: order.append("unit"), ScriptedTimer([1_000_000] * 6), samples=3, min_sample_s=0.001,
            sync=lambda: order.append("sync"), clock=clock_from([0.0], then=0.0))
    assert order[:2] == ["unit", "sync"]


def test_perf_counter_timer_on_cpu():
    t = timer_for("cpu")
    assert isinstance(t, PerfCounterTimer) and t.name == "perf_counter_ns"
    n = []
    assert t.time_ns(lambda: n.append(1), 5) > 0 and len(n) == 5


@pytest.mark.slow
def test_sampling_goes_on_until_min_time_has_passed():
    timer = ScriptedTimer([1_000_000] * 3 + [1_000_000] * 50)
    # every clock read advances a second: after the first sample 1 s has passed, after the k-th k seconds
    m = measure(lambda: None, timer, samples=3, min_sample_s=0.001, min_time_s=7.5, clock=clock_from([0.0]))
    assert len(m.samples_ns) == 8
    m = measure(lambda: None, ScriptedTimer([1_000_000] * 13), samples=10, min_sample_s=0.001, min_time_s=0.5,
                clock=clock_from([0.0]))
    assert len(m.samples_ns) == 10  # the count is the floor when it takes longer than min_time_s


def test_every_calls_return_is_checked_not_only_the_first():
    """A unit that returns its output on the first call and None afterwards fails, in warm-up or sampling."""
    returns = iter([1.0] + [None] * 100)
    checked = []

    def check(value):
        checked.append(value)
        if value is None:
            raise ValueError("step returned None")

    try:
        measure(lambda: next(returns), ScriptedTimer([1_000_000] * 50), samples=3, check=check,
                clock=clock_from([0.0]))
    except ValueError as exc:
        assert "returned None" in str(exc)
    else:
        raise AssertionError("a unit that returned None after its first call was measured")
    assert checked == [1.0, None]


@pytest.mark.slow
def test_the_earlier_layouts_build_is_dropped_before_the_next_is_made():
    """``layouts = 3``: the unit of one group (its model, in a real worker) is no longer referenced when the
    next group's build is made, so a process never holds two builds at once (its peak memory would count
    one model per layout)."""
    class Build:  # stands for a build: its unit holds the model
        def __call__(self):
            return 1.0

    builds = [Build()]
    alive = [weakref.ref(builds[0])]
    dropped = []

    def relayout(group):
        if group == 0:  # the first build: measure() asks for it (a unit passed in, the caller's call holds)
            return builds.pop()
        gc.collect()
        dropped.append(alive[-1]() is None)
        builds.append(Build())
        alive.append(weakref.ref(builds[-1]))
        return builds.pop()

    timing = {"samples": 9, "layouts": 3}  # passed as the worker passes its settings: with **
    measure(None, ScriptedTimer([1_000_000] * 1000), clock=clock_from([0.0], then=0.0), relayout=relayout,
            check=lambda out: None, **timing)
    assert dropped == [True, True]


def test_samples_come_in_groups_each_on_a_layout_of_its_own():
    """``layouts = 3``: a third of the samples, then the workload built anew on another layout (relayout),
    one untimed unit, the next third, and so on; the groups are recorded, and the new units are timed."""
    units = {0: [], 1: [], 2: []}
    relayouts = []

    def relayout(group):
        relayouts.append(group)
        return lambda: units[group].append(1)

    timer = ScriptedTimer([1_000_000] * 1000)
    m = measure(lambda: units[0].append(1), timer, samples=9, min_sample_s=0.0005, clock=clock_from([0.0], then=0.0),
                layouts=3, relayout=relayout)
    assert relayouts == [1, 2]
    assert m.layout_groups == [3, 3, 3] and len(m.samples_ns) == 9
    # each later layout: one untimed unit (its first, with its allocations), then its 3 samples of 1 unit
    assert len(units[1]) == len(units[2]) == 1 + 3
    # no relayout given (a compiled case), or one layout: one group, nothing recorded
    plain = measure(lambda: None, ScriptedTimer([1_000_000] * 100), samples=9, clock=clock_from([0.0], then=0.0),
                    layouts=3)
    assert plain.layout_groups is None and len(plain.samples_ns) == 9
    # at least 2 samples a layout, however few are asked for
    few = measure(lambda: None, ScriptedTimer([1_000_000] * 100), samples=4, clock=clock_from([0.0], then=0.0),
                  layouts=3, relayout=lambda g: (lambda: None))
    assert few.layout_groups == [2, 2, 2]
