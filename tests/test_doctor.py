"""`perfgate doctor` (perfgate/commands/doctor.py): the real command on this machine, a machine where torch is broken,
and each check against a made-up machine (sysfs tree, PATH)."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import cli_env, run_cli

from perfgate.commands import doctor

CHECKS = {"python", "torch", "cuda", "toggles", "compiler", "threads", "clock", "tensorboard", "browser", "git"}


@pytest.mark.slow
def test_doctor_prints_one_line_per_check_and_exits_0_here():
    proc = run_cli("doctor")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert {line.split()[1] for line in lines} >= CHECKS
    for line in lines:
        status = line.split()[0]
        assert status in ("ok", "warn"), line
        assert ("; fix: " in line) == (status == "warn"), line  # every warning says what to do


@pytest.mark.slow
def test_doctor_without_a_working_torch_fails_with_exit_3(tmp_path):
    (tmp_path / "torch.py").write_text("raise ImportError('this torch is broken')\n")
    env = cli_env()
    env["PYTHONPATH"] = f"{tmp_path}:{env['PYTHONPATH']}"
    proc = run_cli("doctor", env=env)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    (torch_line,) = [line for line in proc.stdout.splitlines() if line.split()[1] == "torch"]
    assert torch_line.startswith("fail") and "fix: pip install torch" in torch_line
    assert "git" in proc.stdout  # the other checks still ran


def _sysfs(root: Path, governors: list[str], no_turbo: str | None = None) -> Path:
    for i, g in enumerate(governors):
        d = root / f"cpu{i}" / "cpufreq"
        d.mkdir(parents=True)
        (d / "scaling_governor").write_text(g + "\n")
    if no_turbo is not None:
        (root / "intel_pstate").mkdir(parents=True)
        (root / "intel_pstate" / "no_turbo").write_text(no_turbo + "\n")
    return root


def no_tools(name: str) -> None:
    return None


def test_clock_pinned_and_turbo_off_is_ok(tmp_path):
    found = doctor.check_clock(_sysfs(tmp_path, ["performance"] * 4, no_turbo="1"), which=no_tools)
    assert [(f.status, f.check) for f in found] == [("ok", "clock"), ("ok", "turbo")]
    assert "performance on 4" in found[0].found


def test_clock_powersave_and_turbo_on_say_what_to_run(tmp_path):
    found = doctor.check_clock(_sysfs(tmp_path, ["powersave", "performance"], no_turbo="0"), which=no_tools)
    assert [(f.status, f.check) for f in found] == [("warn", "clock"), ("warn", "turbo")]
    assert "powersave on 1" in found[0].found and "cpupower frequency-set -g performance" in found[0].fix
    assert "no_turbo" in found[1].fix


def test_clock_not_exposed_points_to_against(tmp_path):
    (finding,) = doctor.check_clock(tmp_path, which=no_tools)
    assert finding.status == "warn" and "--against" in finding.fix


def test_no_compiler_and_no_browser_are_warnings_with_fixes(tmp_path, monkeypatch):
    monkeypatch.delenv("CXX", raising=False)
    monkeypatch.delenv("PLAYWRIGHT_BROWSERS_PATH", raising=False)
    compiler = doctor.check_compiler(cuda=False, which=no_tools)
    assert compiler.status == "warn" and "g++" in compiler.fix
    browser = doctor.check_browser(which=no_tools, home=tmp_path)
    assert browser.status == "warn" and "playwright install chromium" in browser.fix
    (tmp_path / ".cache" / "ms-playwright" / "chromium-1187").mkdir(parents=True)
    assert doctor.check_browser(which=no_tools, home=tmp_path).status == "ok"


def test_threads_beyond_half_the_cores_warn():
    assert doctor.check_threads(8, 1).status == "ok"
    finding = doctor.check_threads(2, 2)
    assert finding.status == "warn" and "threads = 1" in finding.fix


def test_the_allocator_line_says_what_workers_will_run_with(monkeypatch):
    """docs/gate.md, "The performance modes were the C allocator's": steady is ok; PERFGATE_MALLOC=system and
    a C library without glibc's parameters are warnings that say what follows."""
    from perfgate.protocol import layout

    monkeypatch.setenv(layout.MALLOC_ENV, "system")
    finding = doctor.check_allocator()
    assert finding.status == "warn" and "PERFGATE_MALLOC=system" in finding.found and "unset" in finding.fix
    monkeypatch.delenv(layout.MALLOC_ENV)
    assert doctor.check_allocator().status == ("ok" if layout._glibc() is not None else "warn")
    assert doctor.check_allocator("unavailable").status == "warn"
    assert "steady" in doctor.check_allocator("steady").line()


def test_cpu_torch_next_to_an_nvidia_driver_is_named(monkeypatch):
    monkeypatch.setattr("perfgate.running.environment.nvidia_driver", lambda: "550.54")
    probe = {"environment": {"torch": "2.13.0+cpu", "torch_cuda": None, "cuda_available": False}, "toggles": []}
    cuda = [f for f in doctor.check_torch(probe, None) if f.check == "cuda"][0]
    assert cuda.status == "warn" and "CPU build of torch" in cuda.found and "CUDA build" in cuda.fix


def test_doctor_says_how_each_stored_baseline_will_be_judged(tmp_path):
    """check_baselines: a baseline with a clean commit this repository has settles in lockstep (ok); one
    without a commit, with a dirty tree or a commit not fetched warns with the fix; a broken file is named
    and the rest still checked."""
    import subprocess

    from perfgate.model import config

    def git(*args):
        subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=tmp_path, check=True,
                       capture_output=True)

    (tmp_path / "pyproject.toml").write_text("[tool.perfgate]\n")
    git("init", "-q")
    git("add", ".")
    git("commit", "-qm", "one")
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=tmp_path, capture_output=True, text=True).stdout.strip()
    settings = config.load(cwd=tmp_path)
    assert [f.status for f in doctor.check_baselines(settings)] == ["ok"]  # none yet
    from perfgate.judging.baselines import from_run, write_baseline
    from perfgate.model.results import CaseResult, CaseSpec, ProcessSamples, RunResult

    case = CaseResult(spec=CaseSpec(workload="w", size="smoke", toggles=("eager",), device="cpu"), status="ok",
                      processes=[ProcessSamples(samples_ns=[1000, 1000], process_index=0)])
    envs = {"a-clean": {"git_commit": head, "git_dirty": False}, "b-dirty": {"git_commit": head, "git_dirty": True},
            "c-none": {}, "d-unfetched": {"git_commit": "1" * 40, "git_dirty": False}}
    for name, env in envs.items():
        run = RunResult(run_id="r", suite="smoke", environment={**env, "machine_key": name}, cases=[case])
        write_baseline(from_run(run), tmp_path / "baselines" / name / "smoke.json")
    (tmp_path / "baselines" / "a-clean" / "ceilings.json").write_text("{}")  # the roofline's file, not a baseline
    (tmp_path / "baselines" / "e-broken").mkdir()
    (tmp_path / "baselines" / "e-broken" / "smoke.json").write_text("{")
    found = {f.found.split(":")[0]: f for f in doctor.check_baselines(settings)}
    assert len(found) == 5 and all(f.check == "baselines" for f in found.values())
    assert found["a-clean/smoke.json"].status == "ok" and head[:12] in found["a-clean/smoke.json"].found
    assert "uncommitted changes" in found["b-dirty/smoke.json"].found and "clean checkout" in found["b-dirty/smoke.json"].fix
    assert "records no git commit" in found["c-none/smoke.json"].found
    assert found["d-unfetched/smoke.json"].status == "warn" and "fetch-depth: 0" in found["d-unfetched/smoke.json"].fix
    assert found["e-broken/smoke.json"].status == "warn" and "baseline update" in found["e-broken/smoke.json"].fix


def test_doctor_says_what_a_baselines_calibration_does_to_the_gate(tmp_path):
    """A stored calibration widens the gate per case (threshold, run-to-run term). A file whose figures let a
    2x slowdown pass (a hand-edited run_to_run of 0.5, the most a baseline may hold: every stored comparison
    of the case inconclusive, nothing ever fails) was silent in doctor; now it is a warning naming the case."""
    from perfgate.judging.baselines import from_run, write_baseline
    from perfgate.model import config
    from perfgate.model.results import CaseResult, CaseSpec, ProcessSamples, RunResult

    (tmp_path / "pyproject.toml").write_text("[tool.perfgate]\n")
    settings = config.load(cwd=tmp_path)
    cases = [CaseResult(spec=CaseSpec(workload="w", size="smoke", toggles=(t,), device="cpu"), status="ok",
                        processes=[ProcessSamples(samples_ns=[1000, 1000], process_index=0)]) for t in ("eager", "compile")]
    run = RunResult(run_id="r", suite="smoke", environment={"machine_key": "m"}, cases=cases)
    path = tmp_path / "baselines" / "m" / "smoke.json"
    baseline = from_run(run)
    write_baseline(baseline, path)
    assert [f.check for f in doctor.check_baselines(settings)] == ["baselines"]  # no calibration: no line
    baseline.calibration["w/smoke/eager/cpu"] = {"noise_floor": 0.06, "run_to_run": 0.012, "run_spread": {"dof": 9}}
    write_baseline(baseline, path)
    (line,) = [f for f in doctor.check_baselines(settings) if f.check == "calibration"]
    assert line.status == "ok" and "1 of 2 case(s) calibrated (thresholds up to 6%, run-to-run terms up to 1.2%)" in line.found
    for tampered in ({"run_to_run": 0.5, "run_spread": {"dof": 9}}, {"noise_floor": 1.5}):
        baseline.calibration["w/smoke/compile/cpu"] = tampered
        write_baseline(baseline, path)
        (line,) = [f for f in doctor.check_baselines(settings) if f.check == "calibration"]
        assert line.status == "warn", line
        assert "2 of 2 case(s) calibrated; 1 judged so wide that a 2x slowdown can pass" in line.found
        assert "w/smoke/compile/cpu" in line.found and "git log -p" in line.fix


def test_the_tensorboard_line_says_whether_the_profiler_tab_is_there():
    import importlib.util

    finding = doctor.check_tensorboard()
    if importlib.util.find_spec("torch_tb_profiler") is not None:
        assert "PyTorch Profiler plugin" in finding.found and "every case's trace" in finding.found
    else:
        assert "pip install 'perfgate[tensorboard]'" in finding.found and "Perfetto" in finding.found
