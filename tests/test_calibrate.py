"""Calibration arithmetic on synthetic A/A rounds: no workers."""

from __future__ import annotations

import math
import random

import pytest

from perfgate.commands.calibrate import analyse, processes_needed, report_lines, smallest_detectable
from perfgate.judging.gate_settings import GateSettings
from perfgate.model.results import CaseResult, CaseSpec, ProcessSamples
from perfgate.util.validation import SchemaError


def rounds(rnd: random.Random, n_rounds: int, processes: int, between: float) -> list[CaseResult]:
    spec = CaseSpec("w", "smoke", ("eager",), "cpu")
    out = []
    for _ in range(n_rounds):
        procs = []
        for i in range(processes):
            level = 1e-3 * (1 + rnd.gauss(0, between))
            procs.append(ProcessSamples([int(level * 1e9 * (1 + abs(rnd.gauss(0, 0.01)))) for _ in range(8)],
                                        process_index=i))
        out.append(CaseResult(spec, "ok", procs))
    return out


def test_smallest_detectable_change_shrinks_with_processes():
    assert smallest_detectable(0.02, 8, 0.95) < smallest_detectable(0.02, 2, 0.95)
    assert 0.05 < smallest_detectable(0.02, 2, 0.95) < 0.07  # 2.8 * 0.02 * 1 -> about 5.8%
    assert processes_needed(0.02, 0.05, 0.95) == 3
    assert processes_needed(0.0, 0.05, 0.95) == 2


def test_the_run_to_run_spread_sets_a_floor_no_process_count_removes():
    # the gate's 1% run-to-run spread alone: (1.96 + 0.84) * log(1.01) -> about 2.8%, however many processes
    assert 0.027 < smallest_detectable(0.0, 1000, 0.95, 0.01) < 0.029
    assert smallest_detectable(0.02, 2, 0.95, 0.01) > smallest_detectable(0.02, 2, 0.95)
    assert processes_needed(0.02, 0.05, 0.95, 0.01) == 4  # one more than without it
    assert processes_needed(0.02, 0.02, 0.95, 0.01) is None  # a 2% threshold is out of reach
    noise = analyse("k", rounds(random.Random(1), 3, 4, 0.01), GateSettings(bootstrap_resamples=500), 0.02, 4)
    assert noise.too_noisy and noise.needed_processes is None
    assert "no number of processes is enough" in "\n".join(report_lines(noise))


def test_a_quiet_runner_keeps_the_threshold_and_a_noisy_one_says_so():
    rnd = random.Random(0)
    gate = GateSettings(bootstrap_resamples=500)
    quiet = analyse("k", rounds(rnd, 10, 4, 0.003), gate, 0.05, 4)  # --write's 10 rounds
    assert not quiet.too_noisy and quiet.noise_floor() <= 0.05
    assert len(quiet.aa_verdicts) == 9 and "regression" not in quiet.aa_verdicts
    # how far the rounds moved apart, beside the run-to-run term the gate assumes
    assert len(quiet.aa_ratios) == 9 and quiet.to_json()["aa_ratios"] == [round(r, 5) for r in quiet.aa_ratios]
    rms = math.expm1(math.sqrt(sum(math.log(r) ** 2 for r in quiet.aa_ratios) / 9))
    assert quiet.round_to_round == pytest.approx(rms) and 0 < rms < 0.02
    line = [x for x in report_lines(quiet) if "A/A ratios between rounds" in x][0]
    assert f"{quiet.aa_ratios[0]:.3f}x, {quiet.aa_ratios[1]:.3f}x" in line and f"(RMS {rms * 100:.1f}%" in line
    assert "upper bound from 10 rounds): the bound is what the figures here assume" in line
    # the figures assume the measured term's upper bound (at least the paired 0.5%), never its point estimate
    assert 0.005 - 1e-9 <= quiet.run_to_run_estimate <= quiet.run_to_run == quiet.run_to_run_upper
    # three rounds show too little to call the same runner quiet: their bound is wide
    assert analyse("k", rounds(random.Random(0), 3, 4, 0.003), gate, 0.05, 4).run_to_run > quiet.run_to_run
    noisy = analyse("k", rounds(rnd, 10, 40, 0.03), gate, 0.05, 2)  # 3% between processes, 2 a side
    assert noisy.too_noisy and noisy.noise_floor() > 0.05
    text = "\n".join(report_lines(noisy))
    assert "TOO NOISY" in text and f"max_processes to {noisy.needed_processes}" in text
    # what this runner needs for the threshold, in processes and seconds at this case's pace
    assert f"needs about {noisy.needed_processes} processes a side" in text
    assert noisy.needed_seconds == noisy.needed_processes * noisy.seconds_per_process
    stored = noisy.to_json()
    # the noise figure only: the threshold is the configuration's when the gate judges (GateSettings.threshold_for)
    assert stored["noise_floor"] == noisy.noise_floor() and stored["rounds"] == 10
    assert "threshold" not in stored and "configured_threshold" not in stored
    assert stored["needed_processes"] == noisy.needed_processes


def test_rounds_that_moved_as_a_whole_show_in_the_round_to_round_figure():
    """Every process of a round slowed by 5% (a whole run moving, which no process count inside one run
    sees): the A/A ratios say so, where the between-process spread does not."""
    gate = GateSettings(bootstrap_resamples=500)
    steady = rounds(random.Random(3), 3, 6, 0.003)
    moved = rounds(random.Random(3), 3, 6, 0.003)
    moved[1] = CaseResult(moved[1].spec, "ok", [ProcessSamples([round(ns * 1.05) for ns in p.samples_ns],
                                                               process_index=p.process_index)
                                                for p in moved[1].processes])
    calm, drift = analyse("k", steady, gate, 0.05, 6), analyse("k", moved, gate, 0.05, 6)
    assert calm.round_to_round < 0.01 < 0.04 < drift.round_to_round < 0.06
    assert drift.aa_ratios[0] == pytest.approx(1.05, abs=0.01) and drift.aa_ratios[1] == pytest.approx(1 / 1.05, abs=0.01)
    assert abs(drift.between_sd - calm.between_sd) < 0.02  # the spread inside rounds barely changes
    # what --write stores for the gate's unpaired comparisons of this case (GateSettings.run_to_run_term)
    # its upper bound, with the point estimate and the per-run spread beside it
    assert drift.to_json()["run_to_run"] == pytest.approx(drift.run_to_run_upper, abs=1e-5)
    assert drift.to_json()["run_spread"]["dof"] == 2
    # the rounds' own sampling taken out: less than the RMS, most of it the rounds' move
    assert 0.6 * drift.round_to_round < drift.run_to_run_estimate <= drift.round_to_round < drift.run_to_run_upper


def test_each_round_draws_its_own_layouts_in_a_folder_of_another_length(tmp_path, monkeypatch):
    """A/A rounds are meant to see what separates two runs: a round that shared the last one's layouts and
    folder name would hide exactly the moves an unpaired comparison meets (docs/gate.md)."""
    from perfgate.commands.calibrate import run_rounds
    from perfgate.protocol import layout

    seen = []
    monkeypatch.delenv(layout.LAYOUT_SEED_ENV, raising=False)
    run_rounds(4, tmp_path, lambda folder: seen.append((folder, layout.run_seed())) or rounds(random.Random(1), 1, 2, 0.0)[0])
    folders, seeds = [f for f, _ in seen], [s for _, s in seen]
    assert len({len(f.name) for f in folders}) == 4 and all(f.parent == tmp_path for f in folders)
    assert len(set(seeds)) == 4
    monkeypatch.setenv(layout.LAYOUT_SEED_ENV, "100")  # a fixed seed: reproducible, still one per round
    seen.clear()
    run_rounds(3, tmp_path, lambda folder: seen.append((folder, layout.run_seed())) or rounds(random.Random(1), 1, 2, 0.0)[0])
    assert [s for _, s in seen] == [100, 101, 102]


def test_the_processes_a_threshold_needs_are_never_fewer_than_the_gate_settles_from():
    """A quiet case: the noise alone needs 2 processes a side, but an unpaired gate settles from
    `unpaired_min_processes` (8); calibrate once advised 2, and its own A/A verdicts at 2 were inconclusive."""
    gate = GateSettings(bootstrap_resamples=500)
    quiet = analyse("k", rounds(random.Random(0), 3, 2, 0.002), gate, 0.05, 2)
    assert quiet.needed_processes == gate.unpaired_min_processes == 8
    assert "needs about 8 processes a side" in "\n".join(report_lines(quiet))


@pytest.mark.slow
def test_calibrate_write_keeps_a_baseline_update_made_while_it_measured(tmp_path, monkeypatch):
    """`calibrate --write` measures for minutes, then stores its thresholds in the baseline. It read the
    baseline before measuring and wrote that copy back: a `baseline update` made meanwhile was reverted."""
    from perfgate.commands import calibrate
    from perfgate.judging import baselines

    settings, path = _project(tmp_path, monkeypatch)

    def a_baseline_update_lands_meanwhile(*args, **kwargs):
        other = baselines.load_baseline(path)
        other.calibration["scaled_work/smoke/eager/cpu"] = {"threshold": 0.5}
        baselines.write_baseline(other, path)
        return {}

    monkeypatch.setattr(calibrate, "measure_noise", a_baseline_update_lands_meanwhile)
    calibrate.calibrate(settings, calibrate.CalibrateOptions(workloads=("tiny",), toggles=("eager",),
                                                             write=True, baseline_file=str(path), ceilings=False))
    stored = baselines.load_baseline(path)
    assert stored.calibration["scaled_work/smoke/eager/cpu"] == {"threshold": 0.5}
    assert stored.calibration["scaled_work/smoke/compile/cpu"] == {"threshold": 0.08}


def _project(tmp_path, monkeypatch, machine: str = "test-cpu-1t"):
    """A project with the two-case baseline of machine ``machine`` (the fixture's), this machine taken to
    be ``test-cpu-1t``: settings, the baseline's path."""
    from conftest import TEST_WORKLOADS
    from test_baselines import _two_case_baseline

    from perfgate.commands import calibrate
    from perfgate.judging import baselines
    from perfgate.model import config

    path, _ = _two_case_baseline(tmp_path)
    if machine != "test-cpu-1t":
        b = baselines.load_baseline(path)
        b.machine_key = machine
        baselines.write_baseline(b, path)
    (tmp_path / "pyproject.toml").write_text(f'[tool.perfgate]\nworkloads_dirs = ["{TEST_WORKLOADS}"]\n')
    monkeypatch.setattr(calibrate.environment, "machine_key", lambda env, device: "test-cpu-1t")
    return config.load(cwd=tmp_path), path


def _moved_rounds(factor: float) -> list[CaseResult]:
    """Three A/A rounds of the baseline's eager case, the second slower by ``factor`` as a whole."""
    done = rounds(random.Random(3), 3, 6, 0.003)
    spec = CaseSpec("scaled_work", "smoke", ("eager",), "cpu")
    done = [CaseResult(spec, "ok", r.processes) for r in done]
    done[1] = CaseResult(spec, "ok", [ProcessSamples([round(ns * factor) for ns in p.samples_ns],
                                                     process_index=p.process_index) for p in done[1].processes])
    return done


@pytest.mark.slow
def test_write_never_stores_a_figure_no_baseline_can_hold(tmp_path, monkeypatch, capsys):
    """One round 2x slower than the others (a noisy neighbour): the measured run-to-run term is about 100%
    and the threshold 595%. Stored, the baseline was refused by every later gate, compare and baseline
    update (run_to_run must be in [0, 0.5]: exit 2), and the file had to be mended by hand."""
    from perfgate.commands import calibrate
    from perfgate.judging import baselines

    settings, path = _project(tmp_path, monkeypatch)
    gate = GateSettings(bootstrap_resamples=500)
    wild = analyse("scaled_work/smoke/eager/cpu", _moved_rounds(2.0), gate, 0.05, 6)
    calm = analyse("scaled_work/smoke/compile/cpu", _moved_rounds(1.0), gate, 0.05, 6)
    assert wild.run_to_run_estimate > 0.5
    assert "(too wide for a baseline: --write leaves this case out)" in "\n".join(report_lines(wild))
    assert "(--write stores this noise floor)" in "\n".join(report_lines(analyse("k", rounds(random.Random(0), 3, 8, 0.08), gate, 0.05, 2)))
    monkeypatch.setattr(calibrate, "measure_noise", lambda *a, **k: {wild.key: wild, calm.key: calm})
    calibrate.calibrate(settings, calibrate.CalibrateOptions(workloads=("tiny",), toggles=("eager",), rounds=8,
                                                             write=True, baseline_file=str(path), ceilings=False))
    stored = baselines.load_baseline(path)  # still a baseline every gate reads
    assert wild.key not in stored.calibration
    assert stored.calibration[calm.key]["run_to_run"] == calm.to_json()["run_to_run"]
    out = capsys.readouterr().out
    assert f"{wild.key}: not stored: noise_floor must be a finite number in (0, 10]" in out
    assert "the gate keeps the configured run-to-run term and threshold for it" in out
    assert "stored the noise figures of 1 case in" in out


@pytest.mark.slow
def test_write_refuses_another_machines_or_suites_baseline_before_measuring(tmp_path, monkeypatch):
    """`--baseline FILE` of another machine: its gate would judge that machine's cases with this one's noise
    (run-to-run term and threshold). Refused, exit 2, before the rounds and the ceilings."""
    from perfgate.commands import calibrate
    from perfgate.judging import baselines
    from perfgate.model.config import ConfigError

    settings, path = _project(tmp_path, monkeypatch, machine="nvidia-h100")
    before = path.read_bytes()

    def never(*args, **kwargs):
        raise AssertionError("measured before refusing")

    monkeypatch.setattr(calibrate, "measure_noise", never)
    monkeypatch.setattr(calibrate, "calibrate_ceilings", never)
    options = calibrate.CalibrateOptions(workloads=("tiny",), toggles=("eager",), write=True, baseline_file=str(path))
    with pytest.raises(ConfigError, match="baseline of machine 'nvidia-h100', and this machine is 'test-cpu-1t'"):
        calibrate.calibrate(settings, options)
    assert path.read_bytes() == before
    b = baselines.load_baseline(path)
    b.machine_key, b.suite = "test-cpu-1t", "nightly"
    baselines.write_baseline(b, path)
    with pytest.raises(ConfigError, match="baseline of suite 'nightly', and calibrate measured suite 'smoke'"):
        calibrate.calibrate(settings, options)
    # the ceilings alone need no baseline
    ceilings = []
    monkeypatch.setattr(calibrate, "calibrate_ceilings", lambda *a: ceilings.append(a[-1]))
    calibrate.calibrate(settings, calibrate.CalibrateOptions(write=True, ceilings_only=True,
                                                             baseline_file=str(tmp_path / "none.json")))
    assert ceilings == [True]


@pytest.mark.slow
def test_write_without_a_baseline_stores_no_ceilings_before_refusing(tmp_path, monkeypatch):
    """The missing baseline is found before anything is written: the ceilings were stored, then exit 2."""
    from perfgate.commands import calibrate

    settings, _ = _project(tmp_path, monkeypatch)
    monkeypatch.setattr(calibrate, "calibrate_ceilings", lambda *a: pytest.fail("ceilings measured and stored"))
    with pytest.raises(SchemaError, match="none.json"):
        calibrate.calibrate(settings, calibrate.CalibrateOptions(workloads=("tiny",), write=True,
                                                                 baseline_file=str(tmp_path / "none.json")))


def test_a_round_with_step_times_of_0_is_left_out_not_a_crash():
    """Samples of 0 ns (a broken timer, a unit of work too small to time): log(0) was a ValueError, and
    `perfgate calibrate` exit 3 'unexpected'; the round gives no ratio and the others are judged."""
    gate = GateSettings(bootstrap_resamples=500)
    done = rounds(random.Random(3), 3, 6, 0.003)
    zero = CaseResult(done[1].spec, "ok", [ProcessSamples([0] * 8, process_index=p.process_index)
                                           for p in done[1].processes])
    noise = analyse("k", [done[0], zero, done[2]], gate, 0.05, 6)
    assert len(noise.rounds) == 2 and len(noise.aa_ratios) == 1
    assert analyse("k", [zero, zero], gate, 0.05, 6) is None


def test_write_needs_enough_rounds_for_its_run_to_run_term(tmp_path, monkeypatch):
    """`calibrate --write` stored a run-to-run term estimated from 2 ratios (3 rounds): refused below 8 rounds,
    one line, before measuring; without --rounds it takes 10."""
    from perfgate.commands import calibrate
    from perfgate.model.config import ConfigError

    assert calibrate.rounds_of(calibrate.CalibrateOptions(write=True)) == calibrate.WRITE_ROUNDS == 10
    assert calibrate.rounds_of(calibrate.CalibrateOptions()) == 3
    assert calibrate.rounds_of(calibrate.CalibrateOptions(write=True, ceilings_only=True, rounds=2)) == 2
    settings, _ = _project(tmp_path, monkeypatch)
    monkeypatch.setattr(calibrate.workers, "run_probe", lambda *a, **k: pytest.fail("measured before refusing"))
    with pytest.raises(ConfigError, match=r"^calibrate --write needs --rounds 8 or more \(got 3\)"):
        calibrate.calibrate(settings, calibrate.CalibrateOptions(rounds=3, write=True))


def _simulated_upper_bounds(true_term: float, n_rounds: int, calibrations: int, seed: int) -> list[float]:
    """What `--write` stores for a case whose whole runs move with a ratio term ``true_term`` (a per-run
    spread of true_term / sqrt 2), over many calibrations of ``n_rounds`` rounds of 8 processes (4% apart,
    4 samples each): the code's own estimator on each calibration's rounds (run_to_run_bound)."""
    from perfgate.commands.calibrate import run_to_run_bound
    from perfgate.judging.runspread import per_run, ratio_term

    rnd = random.Random(seed)
    tau = math.log1p(per_run(true_term))
    spec = CaseSpec("w", "smoke", ("eager",), "cpu")
    stored = []
    for _ in range(calibrations):
        done = []
        for _ in range(n_rounds):
            run = rnd.gauss(0, tau)
            procs = [ProcessSamples([round(1e6 * math.exp(run + level + rnd.gauss(0, 0.002))) for _ in range(4)],
                                    process_index=i)
                     for i, level in enumerate(rnd.gauss(0, 0.04) for _ in range(8))]
            done.append(CaseResult(spec, "ok", procs))
        spread = run_to_run_bound(done, GateSettings().process_quantile)
        stored.append(max(ratio_term(spread.upper), GateSettings.run_to_run_paired))
    return stored


def test_the_stored_run_to_run_term_falls_below_the_truth_rarely():
    """At a true 1.41%, the point estimate from 2 ratios landed at the 0.5% floor in one calibration in five;
    what --write stores (the upper bound from its default 10 rounds) is below the truth in at most 10% of
    simulated calibrations (about 5% by construction), and at the floor almost never."""
    from perfgate.commands.calibrate import WRITE_ROUNDS

    truth = 0.0141
    stored = _simulated_upper_bounds(truth, WRITE_ROUNDS, 400, seed=41)
    below = sum(s < truth for s in stored) / len(stored)
    assert below <= 0.10
    assert sum(s <= GateSettings.run_to_run_paired for s in stored) / len(stored) <= 0.02  # at the floor: rare
