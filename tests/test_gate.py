"""The gate end to end, through the real CLI: run, baseline update, a slower rerun fails with exit 1 naming
the case, an unchanged rerun passes; compare; --against a git ref; calibrate --write.

The slowdown comes from tests/workloads/scaled_work.py, whose work per step PERFGATE_TEST_WORK_SCALE
multiplies without changing the case. The machine is shared, so the tests use a 50% threshold and a 30x
slowdown (a loaded 2-core machine spreads worker processes by 2x): the assertion is about the gate's plumbing and exit codes, not its resolution
(benchmarks/gate_accuracy.py measures that).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from conftest import TEST_WORKLOADS, cli_env, run_cli
from fixtures.against import CASE, NEW_CASE, PYPROJECT
from fixtures.against import against_repo as _against_repo
from fixtures.against import git as _git

# slow: measures real runs through the CLI (the fast loop, pytest -m "not slow", leaves them to CI)
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    """A project with one tiny case, run once and made the baseline."""
    root = tmp_path_factory.mktemp("gate")
    (root / "pyproject.toml").write_text(PYPROJECT.format(workloads=TEST_WORKLOADS))
    first = run_cli("run", cwd=root)
    assert first.returncode == 0, first.stdout + first.stderr
    update = run_cli("baseline", "update", cwd=root)
    assert update.returncode == 0, update.stdout + update.stderr
    assert "new baseline with 1 case(s)" in update.stdout
    (baseline,) = (root / "baselines").glob("*/smoke.json")
    return root, baseline


@pytest.mark.timing
def test_baseline_show_prints_the_case(project):
    root, baseline = project
    proc = run_cli("baseline", "show", cwd=root)
    assert proc.returncode == 0, proc.stderr
    assert CASE in proc.stdout and "torch" in proc.stdout
    data = json.loads(baseline.read_text())
    assert data["schema"] == "perfgate.baseline/2"
    (case,) = data["results"]["cases"]
    # raw samples per process kept: every process the run measured (3 at the first look, more where the
    # run looked again before it settled), each with its samples
    assert len(case["processes"]) == case["metadata"]["sampling"]["processes"] >= 3
    assert all(p["samples_ns"] for p in case["processes"])


@pytest.mark.timing
def test_a_slower_rerun_fails_the_gate_naming_the_case(project):
    root, _ = project
    proc = run_cli("run", "--gate", "--out", str(root / "slow"), cwd=root,
                   env=cli_env(PERFGATE_TEST_WORK_SCALE="30"))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "REGRESSIONS (" in proc.stdout and f"{CASE} (regression step_time)" in proc.stdout
    assert f"re-measuring {CASE}" in proc.stdout and "confirmed by a re-measure" in proc.stdout
    assert "GATE FAILED" in proc.stdout
    comparison = json.loads((root / "slow" / "comparison.json").read_text())
    (v,) = [v for v in comparison["verdicts"] if v["metric"] == "step_time"]
    assert v["kind"] == "regression" and v["ratio_low"] > 1.0 and v["threshold"] == 0.5
    assert "step_time" in (root / "slow" / "summary.md").read_text()  # the reports carry the verdicts
    # the re-measure, in the run's own folder, leaves the run's trace where results.json names it (its profile
    # pass once replaced it, and `perfgate trace` and report.html named a missing file)
    (case,) = json.loads((root / "slow" / "results.json").read_text())["cases"]
    assert (root / "slow" / case["profile"]["trace_file"]).is_file()

    # the same verdict from the stored files, and the same exit code
    again = run_cli("compare", str(root / "slow"), str(next((root / "baselines").glob("*/smoke.json"))), "--gate",
                    cwd=root)
    assert again.returncode == 1, again.stdout + again.stderr
    assert CASE in again.stdout


@pytest.mark.timing
def test_an_unchanged_rerun_passes(project):
    root, _ = project
    proc = run_cli("run", "--gate", "--out", str(root / "same"), cwd=root)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Gate passed" in proc.stdout


@pytest.mark.timing
def test_compare_with_a_corrupt_baseline_is_one_line_exit_2(project, tmp_path):
    root, _ = project
    bad = tmp_path / "smoke.json"
    bad.write_text('{"schema": "perfgate.baseline/2", "results": ')
    first_run = root / "reports" / (root / "reports" / "LATEST").read_text().strip()
    proc = run_cli("compare", str(first_run), str(bad), cwd=root)
    assert proc.returncode == 2
    assert str(bad) in proc.stderr and "not valid JSON" in proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


@pytest.mark.timing
def test_calibrate_writes_noise_figures_the_gate_uses(project, monkeypatch):
    """--write stores the case's noise floor and the upper bound of its run-to-run term (its A/A rounds here
    synthetic: 10 real rounds take minutes), and the real `perfgate compare` judges with both."""
    import random

    from test_calibrate import rounds

    from perfgate.commands import calibrate
    from perfgate.judging.gate_settings import GateSettings
    from perfgate.model import config
    from perfgate.model.results import CaseResult, CaseSpec

    root, baseline = project
    few = run_cli("calibrate", "--rounds", "2", "--processes", "1", "--write", "--no-ceilings", cwd=root)
    assert few.returncode == 2 and "calibrate --write needs --rounds 8 or more (got 2)" in few.stderr
    assert len(few.stderr.strip().splitlines()) == 1
    spec = CaseSpec.from_json(json.loads(baseline.read_text())["results"]["cases"][0]["spec"])
    done = [CaseResult(spec, "ok", r.processes) for r in rounds(random.Random(5), 10, 40, 0.03)]
    noise = calibrate.analyse(CASE, done, GateSettings(bootstrap_resamples=500), 0.05, 2)  # 2 a side: a 10% floor
    monkeypatch.setattr(calibrate, "measure_noise", lambda *a, **k: {CASE: noise})
    monkeypatch.chdir(root)
    calibrate.calibrate(config.load(cwd=root), calibrate.CalibrateOptions(write=True, ceilings=False))
    cal = json.loads(baseline.read_text())["calibration"][CASE]
    # the noise figure only (no threshold frozen from today's configuration), the run-to-run term's bound
    assert "threshold" not in cal and cal["noise_floor"] > 0.05 and cal["rounds"] == 10
    assert cal["run_spread"]["dof"] == 9 and cal["run_to_run"] >= cal["run_to_run_estimate"]
    first_run = root / "reports" / (root / "reports" / "LATEST").read_text().strip()
    cmp = run_cli("compare", str(first_run), str(baseline), cwd=root)
    assert cmp.returncode == 0, cmp.stdout + cmp.stderr
    data = json.loads((first_run / "comparison.json").read_text())
    (v,) = [v for v in data["verdicts"] if v["metric"] == "step_time"]
    # the project's configured 50% is wider than the floor: it stands (a threshold frozen at calibration
    # time, 5% then, once narrowed it)
    assert v["threshold"] == 0.5 and "global threshold" in v["rule"] and "noise floor" not in v["rule"]
    # the upper bound of the run-to-run spread between its rounds is what the unpaired comparison carried
    assert f"run-to-run {cal['run_to_run'] * 100:g}% (measured by calibrate on " in v["rule"]


def test_against_a_git_ref_runs_both_and_gates(against_run):
    """Head makes the work 30x and adds a workload the base ref lacks (conftest's shared run, read only)."""
    # no re-measure here (see the test below and test_compare): half the worker processes
    repo, run_dir, proc = against_run
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert CASE in proc.stdout and "git:HEAD~1" in proc.stdout
    data = json.loads((run_dir / "comparison.json").read_text())
    kinds = {(v["case_key"], v["metric"]): v["kind"] for v in data["verdicts"]}
    assert kinds[(CASE, "step_time")] == "regression"
    assert kinds[(NEW_CASE, "status")] == "new"
    assert data["mode"] == "against"
    base = json.loads((run_dir / "base" / "results.json").read_text())
    assert [c["key"] for c in base["cases"]] == [CASE]
    # a finished --against run says so: results.json of both sides and the report's header
    head = json.loads((run_dir / "results.json").read_text())
    assert head["finished_at"] and base["finished_at"]
    assert "still running" not in (run_dir / "report.html").read_text()
    worktrees = subprocess.run(["git", "worktree", "list"], cwd=repo, capture_output=True, text=True).stdout
    assert len(worktrees.strip().splitlines()) == 1  # the temporary worktree is gone


def test_against_an_unknown_ref_is_a_usage_error(tmp_path):
    repo = tmp_path / "r"
    repo.mkdir()
    (repo / "pyproject.toml").write_text(PYPROJECT.format(workloads=TEST_WORKLOADS))
    _git(repo, "init", "-q")
    proc = run_cli("run", "--against", "no-such-ref", cwd=repo)
    assert proc.returncode == 2 and "no-such-ref" in proc.stderr, proc.stdout + proc.stderr


@pytest.mark.timing
def test_against_keeps_both_sides_of_a_remeasure_and_merge_rejudge_agrees(tmp_path):
    """A confirmed regression leaves both sides' re-measure behind (base/results-remeasure.json too), so
    `perfgate merge --rejudge` (the base commit's perfgate, in CI) reaches the verdict again from the raw
    samples alone, ignoring the run's own comparison.json."""
    repo = _against_repo(tmp_path, remeasure=True)
    run_dir = tmp_path / "ab"
    proc = run_cli("run", "--against", "HEAD~1", "--gate", "-w", "scaled_work", "--out", str(run_dir), cwd=repo)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "re-measuring" in proc.stdout
    layouts = {}
    for side in (run_dir, run_dir / "base"):
        again = json.loads((side / "results-remeasure.json").read_text())
        assert [c["key"] for c in again["cases"]] == [CASE]
        first = json.loads((side / "results.json").read_text())
        (case,) = [c for c in first["cases"] if c["key"] == CASE]
        drawn = [(p["layout"]["heap_offset"], p["layout"]["mmap_pages"]) for p in case["processes"]]
        redrawn = [(p["layout"]["heap_offset"], p["layout"]["mmap_pages"]) for p in again["cases"][0]["processes"]]
        # the re-measure samples layouts of its own: its process 0 is not the first measurement's again
        assert not set(drawn) & set(redrawn), (drawn, redrawn)
        layouts[side] = redrawn
    assert layouts[run_dir] == layouts[run_dir / "base"]  # the two sides of each pair still share theirs
    # the shard's own verdicts say nothing failed; --rejudge does not read them
    (run_dir / "comparison.json").write_text(json.dumps({**json.loads((run_dir / "comparison.json").read_text()),
                                                         "verdicts": []}))
    merged = run_cli("merge", str(run_dir), "--out", str(tmp_path / "merged"), "--gate", "--rejudge", cwd=repo)
    assert merged.returncode == 1, merged.stdout + merged.stderr
    data = json.loads((tmp_path / "merged" / "comparison.json").read_text())
    (v,) = [v for v in data["verdicts"] if v["metric"] == "step_time"]
    assert v["kind"] == "regression" and "confirmed by a re-measure" in v["rule"]


def _stored_repo(tmp_path: Path) -> tuple[Path, str]:
    """A git repository whose baseline is recorded from its first commit (clean), and a second commit
    that makes the work 30x; returns the repository and the first commit."""
    repo = tmp_path / "repo"
    (repo / "workloads").mkdir(parents=True)
    (repo / "pyproject.toml").write_text(PYPROJECT.format(workloads="workloads"))
    source = (TEST_WORKLOADS / "scaled_work.py").read_text()
    (repo / "workloads" / "scaled_work.py").write_text(source)
    (repo / ".gitignore").write_text("reports/\nbaselines/\nruns/\n")
    _git(repo, "init", "-q")
    _git(repo, "add", ".")
    _git(repo, "commit", "-qm", "base")
    first = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True).stdout.strip()
    for cmd in (("run", "--out", str(repo / "runs" / "base")), ("baseline", "update", str(repo / "runs" / "base"))):
        proc = run_cli(*cmd, cwd=repo)
        assert proc.returncode == 0, proc.stdout + proc.stderr
    (repo / "workloads" / "scaled_work.py").write_text(source.replace('"PERFGATE_TEST_WORK_SCALE", "1.0"',
                                                                      '"PERFGATE_TEST_WORK_SCALE", "30.0"'))
    _git(repo, "commit", "-qam", "head: 30x the work")
    return repo, first


@pytest.mark.timing
def test_a_stored_regression_is_settled_in_lockstep_against_the_baselines_commit(tmp_path):
    """The baseline was recorded from a clean commit this repository has: the stored comparison screens
    (one look), and its `regression` is settled by lockstep pairs against that commit, not re-measured;
    both sides' pairs are kept, and the temporary worktree is gone."""
    repo, first = _stored_repo(tmp_path)
    run_dir = repo / "runs" / "head"
    proc = run_cli("run", "--gate", "--out", str(run_dir), cwd=repo)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert f"settled in lockstep against the baseline's commit {first[:12]}" in proc.stdout
    assert f"settling {CASE} in lockstep" in proc.stdout and "re-measuring" not in proc.stdout
    head = json.loads((run_dir / "results.json").read_text())["cases"][0]
    assert head["metadata"]["sampling"]["processes"] == 3  # the screen: one look
    data = json.loads((run_dir / "comparison.json").read_text())
    (v,) = [v for v in data["verdicts"] if v["metric"] == "step_time"]
    assert v["kind"] == "regression" and v["ratio_low"] > 1.0
    assert "paired base/head processes" in v["rule"] and "the stored comparison: regression at" in v["rule"]
    for side, commit in ((run_dir / "lockstep", None), (run_dir / "lockstep" / "base", first)):
        kept = json.loads((side / "results.json").read_text())
        assert [c["key"] for c in kept["cases"]] == [CASE]
        assert commit is None or kept["environment"]["git_commit"] == commit
    worktrees = subprocess.run(["git", "worktree", "list"], cwd=repo, capture_output=True, text=True).stdout
    assert len(worktrees.strip().splitlines()) == 1

    # the same code as the baseline's: never a regression or a win, from the screen where its stored interval
    # (which carries the 2% run-to-run term) lies inside the margin, else from lockstep pairs; the gate passes
    _git(repo, "checkout", "-q", first)
    same = run_cli("run", "--gate", "--out", str(repo / "runs" / "same"), cwd=repo)
    assert same.returncode == 0, same.stdout + same.stderr
    data = json.loads((repo / "runs" / "same" / "comparison.json").read_text())
    (v,) = [v for v in data["verdicts"] if v["metric"] == "step_time"]
    assert v["kind"] in ("unchanged", "inconclusive"), v
    assert ("settling" in same.stdout) == (repo / "runs" / "same" / "lockstep").exists()

    # settle_in_lockstep = false: the stored comparison alone, and its regression re-measured
    _git(repo, "checkout", "-q", "-")
    with (repo / "pyproject.toml").open("a") as f:
        f.write("settle_in_lockstep = false\n")
    off = run_cli("run", "--gate", "--out", str(repo / "runs" / "off"), cwd=repo)
    assert off.returncode == 1, off.stdout + off.stderr
    assert "judged against the stored baseline alone (settle_in_lockstep = false)" in off.stdout
    data = json.loads((repo / "runs" / "off" / "comparison.json").read_text())
    (v,) = [v for v in data["verdicts"] if v["metric"] == "step_time"]
    assert "re-measuring" in off.stdout and "settling" not in off.stdout, (v, off.stdout)


@pytest.mark.timing
def test_a_screen_lockstep_could_not_settle_is_measured_with_the_full_sampler(tmp_path, monkeypatch):
    """Settling in lockstep screens each case with one look; when the baseline commit's checkout then fails
    (here: the project is in no git repository), the screen's `inconclusive` stood and the gate passed on
    three processes. The case is measured again with the stored comparison's own sampler (its looks and
    budget), and that measurement's verdict decides. The workers are stand-ins: the sampling design is
    what is checked."""
    import math
    import random

    from perfgate.gating import gate
    from perfgate.judging import sequential
    from perfgate.judging.baselines import Baseline
    from perfgate.judging.compare import compare_runs
    from perfgate.judging.gate_settings import gate_settings
    from perfgate.model import config, rule_text
    from perfgate.model.comparison import Verdict
    from perfgate.model.results import CaseResult, CaseSpec, ProcessSamples, RunResult
    from perfgate.running import runner

    (tmp_path / "pyproject.toml").write_text(
        '[tool.perfgate]\nprocesses = 3\n[tool.perfgate.gate]\nthreshold = 0.05\nremeasure = false\n')
    settings = config.load(cwd=tmp_path)
    rnd = random.Random(3)
    spec = CaseSpec("scaled_work", "smoke", ("eager",), "cpu")

    def measured(level_ms: float, processes: int, spread: float) -> CaseResult:
        procs = [ProcessSamples(samples_ns=[int(level_ms * 1e6 * math.exp(rnd.gauss(0, spread)) * (1 + 1e-3 * k))
                                            for k in range(5)], process_index=i) for i in range(processes)]
        return CaseResult(spec=spec, status="ok", processes=procs)

    env = {"torch": "2.13.0", "python": "3.11"}
    base = Baseline(RunResult(run_id="b", suite="smoke", environment=env, cases=[measured(1.0, 3, 0.002)]),
                    machine_key="m", suite="smoke")
    head = RunResult(run_id="h", suite="smoke", environment=env, cases=[measured(1.07, 3, 0.06)])
    gs = gate_settings(settings)
    screened = compare_runs(head, base.run, gs, look_confidence=sequential.look_confidence(gs, 3, screen=True))
    assert [v.kind for v in screened.verdicts if v.metric == "step_time"] == ["inconclusive"]
    samplers = []

    def run_case(spec, workload_file, settings, run_dir, env_extra=None, configure=None, sampler=None):
        samplers.append(sampler)
        return measured(1.3, 8, 0.002)

    monkeypatch.setattr(runner, "run_case", run_case)
    said = []
    code = gate.gate_run(head, tmp_path / "run", settings, (tmp_path / "smoke.json", base), strict_env=False,
                         gate=True, cases=[spec], workload_files={"scaled_work": "w.py"}, echo=said.append,
                         lockstep=gate.Lockstep("0" * 40, {}))
    text = "\n".join(said)
    assert "could not settle in lockstep" in text and "with the stored comparison's full sampler" in text, text
    (sampler,) = samplers
    assert not sampler.budget.screen and sampler.budget.max_processes > sampler.first
    assert code == 1, text
    comparison = json.loads((tmp_path / "run" / "comparison.json").read_text())
    (v,) = [v for v in comparison["verdicts"] if v["metric"] == "step_time"]
    assert v["kind"] == "regression" and "the screen: inconclusive" in v["rule"], v
    read = Verdict.from_json(v)  # what settled it is a fact, and the rule is said from the facts
    assert read.facts.settled_by == "full-sampler" and rule_text.time_rule(read) == v["rule"]
    (case,) = json.loads((tmp_path / "run" / "results.json").read_text())["cases"]
    assert len(case["processes"]) == 8


@pytest.mark.timing
def test_a_case_kept_by_baseline_update_case_is_settled_against_its_own_commit(tmp_path):
    """Commit Y makes two cases 30x slower; `baseline update --case` accepts one of them. The other's stored
    numbers still come from commit X, so its regression is settled in lockstep against X, never against Y
    (where its slowdown is already in and would pass as `unchanged`); `baseline show` and `perfgate repro`
    name X for it."""
    repo = tmp_path / "repo"
    (repo / "workloads").mkdir(parents=True)
    (repo / "pyproject.toml").write_text(PYPROJECT.format(workloads="workloads").replace(
        'workloads = ["scaled_work"]', 'workloads = ["*"]') + "remeasure = false\n")
    source = (TEST_WORKLOADS / "scaled_work.py").read_text()
    other = source.replace('name = "scaled_work"', 'name = "other_work"').replace("class ScaledWork", "class OtherWork")
    (repo / ".gitignore").write_text("reports/\nruns/\n")
    slow = ('"PERFGATE_TEST_WORK_SCALE", "1.0"', '"PERFGATE_TEST_WORK_SCALE", "30.0"')
    commits = []
    for k, (a, b) in enumerate(((source, other), (source.replace(*slow), other.replace(*slow)))):
        (repo / "workloads" / "scaled_work.py").write_text(a)
        (repo / "workloads" / "other_work.py").write_text(b)
        if k == 0:
            _git(repo, "init", "-q")
        _git(repo, "add", "-A")
        _git(repo, "commit", "-qm", f"commit {k}")
        commits.append(subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True,
                                      text=True).stdout.strip())
        if k == 0:
            for cmd in (("run", "--out", "runs/x"), ("baseline", "update", "runs/x")):
                proc = run_cli(*cmd, cwd=repo)
                assert proc.returncode == 0, proc.stdout + proc.stderr
            _git(repo, "add", "-A")
            _git(repo, "commit", "-qm", "baseline at x")
    x, y = commits
    other_case = "other_work/smoke/eager/cpu"
    for cmd in (("run", "--out", "runs/y"), ("baseline", "update", "runs/y", "--case", CASE)):
        proc = run_cli(*cmd, cwd=repo)
        assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "1 case(s) kept from another commit than runs/y's keep theirs" in proc.stdout, proc.stdout
    _git(repo, "commit", "-qam", "accept scaled_work's slowdown only")
    (stored,) = (repo / "baselines").glob("*/smoke.json")
    data = json.loads(stored.read_text())
    assert data["environment"]["git_commit"] == y
    meta = {c["key"]: c["metadata"] for c in data["results"]["cases"]}
    assert (meta[other_case]["git_commit"], meta[other_case]["git_dirty"]) == (x, False)
    assert "git_commit" not in meta[CASE]
    shown = run_cli("baseline", "show", cwd=repo)
    assert f"measured at git {x[:12]}" in shown.stdout, shown.stdout + shown.stderr

    run_dir = repo / "runs" / "gate"
    proc = run_cli("run", "--gate", "--out", str(run_dir), cwd=repo)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert f"the commits the baseline's cases were measured at: {y[:12]} (1 case), {x[:12]} (1 case)" in proc.stdout
    assert f"settling {other_case} in lockstep against the baseline's commit {x[:12]}" in proc.stdout
    kinds = {v["case_key"]: v["kind"] for v in json.loads((run_dir / "comparison.json").read_text())["verdicts"]
             if v["metric"] == "step_time"}
    assert kinds == {CASE: "unchanged", other_case: "regression"}, kinds
    base = json.loads((run_dir / "lockstep" / "base" / "results.json").read_text())
    # the other case ran at x; CASE, when its stored comparison on a loaded machine needed settling too
    # (its processes slowed: 1.66x once), against its own commit y, never x
    # (a case measured at the base run's own commit names none of its own: baselines.with_commit)
    at = {c["key"]: c["metadata"].get("git_commit") or base["environment"]["git_commit"] for c in base["cases"]}
    assert at[other_case] == x and at.get(CASE, y) == y, at
    repro = run_cli("repro", other_case, "--results", str(run_dir), cwd=repo)
    assert f"perfgate run --against {x}" in repro.stdout, repro.stdout + repro.stderr


def test_the_baselines_commit_is_untrusted_input(tmp_path):
    """lockstep_commits reads the commits from the baseline file, its environment's and any a case names in
    its metadata: anything but a full hash of a clean commit this repository has is refused (never handed
    to git as an option or a ref), with the reason said."""
    from perfgate.gating import gate
    from perfgate.judging.baselines import Baseline
    from perfgate.model import config
    from perfgate.model.results import CaseResult, CaseSpec, RunResult

    repo = tmp_path / "r"
    repo.mkdir()
    (repo / "pyproject.toml").write_text(PYPROJECT.format(workloads=TEST_WORKLOADS))
    _git(repo, "init", "-q")
    _git(repo, "add", ".")
    _git(repo, "commit", "-qm", "one")
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True).stdout.strip()
    settings = config.load(cwd=repo)

    def verdict(settings=settings, cases=(), **env):
        lockstep, why = gate.lockstep_commits(settings, Baseline(RunResult(run_id="b", suite="smoke", environment=env,
                                                                           cases=list(cases)), "m", "smoke"))
        return (lockstep.commit if lockstep else None), why

    assert verdict(git_commit=head, git_dirty=False) == (head, "")
    for bad in ("--output=/tmp/x", "HEAD", head[:12], head.upper(), head + "\n", "../" + head[:37], 42, None,
                ["x"]):
        assert verdict(git_commit=bad, git_dirty=False) == (None, "the baseline records no git commit"), bad
    assert verdict(git_commit=head, git_dirty=True)[1].startswith("the baseline was recorded with uncommitted")
    assert verdict(git_commit=head)[1].startswith("the baseline was recorded with uncommitted")  # unknown: refused
    assert "is not in this repository" in verdict(git_commit="0" * 40, git_dirty=False)[1]
    (tmp_path / "elsewhere").mkdir()  # a project outside any git repository
    elsewhere = config.load(cwd=tmp_path / "elsewhere")
    assert "is not in this repository" in verdict(elsewhere, git_commit=head, git_dirty=False)[1]
    (repo / "pyproject.toml").write_text(PYPROJECT.format(workloads=TEST_WORKLOADS) + "settle_in_lockstep = false\n")
    off = config.load(cwd=repo)
    assert verdict(off, git_commit=head, git_dirty=False) == (None, "settle_in_lockstep = false")

    # a case's own commit (kept by `baseline update --case`) is read the same way
    def case(**own):
        return CaseResult(spec=CaseSpec("w", "smoke", ("eager",), "cpu"), status="ok", metadata=own)

    mine = case(git_commit=head, git_dirty=False)
    lockstep, why = gate.lockstep_commits(settings, Baseline(RunResult(
        run_id="b", suite="smoke", environment={"git_commit": head, "git_dirty": False}, cases=[mine]), "m", "smoke"))
    assert why == "" and lockstep.commit_for(mine.key) == head and lockstep.commits == [head]
    for bad in ("--output=/tmp/x", "HEAD~1", head[:12], None, 7):
        got = verdict(cases=[case(git_commit=bad, git_dirty=False)], git_commit=head, git_dirty=False)
        assert got == (None, f"the baseline's case {mine.key} records no git commit"), bad
    got = verdict(cases=[case(git_commit=head, git_dirty=True)], git_commit=head, git_dirty=False)
    assert got[1].startswith(f"the baseline's case {mine.key} was recorded with uncommitted changes")
    got = verdict(cases=[case(git_commit="1" * 40, git_dirty=False)], git_commit=head, git_dirty=False)
    assert "is not in this repository" in got[1] and mine.key in got[1]


def tiny_project(workload: str = "tiny", toggle: str = "eager", workloads: str | Path = TEST_WORKLOADS) -> str:
    """PYPROJECT with one case of a tests/workloads workload instead of scaled_work."""
    return PYPROJECT.format(workloads=workloads).replace('["scaled_work"]', f'["{workload}"]').replace(
        '["eager"]', f'["{toggle}"]')


@pytest.mark.parametrize("rule, code", [("status == ok", 0), ("step_time_s <= 1e-12", 1)], ids=["met", "missed"])
def test_expectations_gate_a_run_without_a_baseline(tmp_path, rule, code):
    """No baseline stored yet: `run --gate` measures, judges the expectations, says there was no baseline,
    and exits 1 only on a missed fail rule."""
    (tmp_path / "pyproject.toml").write_text(tiny_project() + f'\n[tool.perfgate.expect]\n"tiny/*/eager/cpu" = ["{rule}"]\n')
    proc = run_cli("run", "--gate", "--out", str(tmp_path / "r"), cwd=tmp_path)
    assert proc.returncode == code, proc.stdout + proc.stderr
    assert "no baseline to compare with" in proc.stdout and "Traceback" not in proc.stderr
    assert ("expectation missed: tiny/smoke/eager/cpu" in proc.stdout) == (code == 1)
    summary = (tmp_path / "r" / "summary.md").read_text()
    assert "no baseline compared" in summary if code == 1 else "NOT COMPARED" in summary


def test_gate_without_a_baseline_or_expectations_is_a_usage_error_before_measuring(tmp_path):
    """Nothing to judge the run by: one line saying how to make a baseline, exit 2, no case run."""
    (tmp_path / "pyproject.toml").write_text(tiny_project())
    proc = run_cli("run", "--gate", "--out", str(tmp_path / "r"), cwd=tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "perfgate baseline update" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert "[1/" not in proc.stdout and not (tmp_path / "r").exists()


@pytest.mark.parametrize("workload, toggle, why", [("fault_raise", "eager", "0 skipped, 1 failed"),
                                                   ("tiny", "cuda-graphs", "1 skipped, 0 failed")],
                         ids=["failed-on-both-sides", "skipped-on-both-sides"])
def test_a_gate_with_no_evidence_exits_3_in_both_modes(tmp_path, workload, toggle, why):
    """The only gated case fails (or is skipped) on both sides: `run --against REF --gate` and
    `compare --gate` exit 3 with one line, never a pass, and the summary says no case carried evidence."""
    repo = tmp_path / "repo"
    (repo / "workloads").mkdir(parents=True)
    (repo / "workloads" / "faults.py").write_text((TEST_WORKLOADS / "faults.py").read_text())
    (repo / "pyproject.toml").write_text(tiny_project(workload, toggle, "workloads"))
    (repo / ".gitignore").write_text("runs/\nreports/\n")
    _git(repo, "init", "-q")
    _git(repo, "add", ".")
    _git(repo, "commit", "-qm", "base")
    run_dir = repo / "runs" / "ab"
    proc = run_cli("run", "--against", "HEAD", "--gate", "--out", str(run_dir), cwd=repo)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("perfgate: error: the gate has no evidence: none of the 1 case(s) ran") and why in line
    assert "Evidence: 0 of 1 case(s)" in proc.stdout and "Gate passed" not in proc.stdout
    summary = (run_dir / "summary.md").read_text()
    assert "NO EVIDENCE" in summary and "Evidence: 0 of 1 case(s) ran and were judged" in summary
    # the same verdicts from the stored files (the base run as the baseline): exit 3 as well
    again = run_cli("compare", str(run_dir), str(run_dir / "base"), "--gate", cwd=repo)
    assert again.returncode == 3, again.stdout + again.stderr
    assert again.stderr.strip().startswith("perfgate: error: the gate has no evidence")
    assert run_cli("compare", str(run_dir), str(run_dir / "base"), cwd=repo).returncode == 0  # not gated: a report
    # not gated, `run --against` that could run no case is an infrastructure failure, as a plain run's (it exited 0)
    ungated = run_cli("run", "--against", "HEAD", "--out", str(repo / "runs" / "ungated"), cwd=repo)
    assert ungated.returncode == 3, ungated.stdout + ungated.stderr
    assert ungated.stderr.strip().splitlines() == ["perfgate: error: no case could run (see the failures and skip "
                                                   "reasons above)"]


CONV_ROLLOUT = """
import torch
from torch import nn
from perfgate.workload import Built, Tolerance, Workload


class UserConv(Workload):
    name = "user_conv"
    description = "a user's conv rollout: Conv2d-InstanceNorm-GELU blocks (layout-sensitive on CPU)"
    sizes = {s: {"T": 6, "grid": 32, "channels": 16} for s in ("smoke", "pr", "full")}
    tolerance = Tolerance(rel_l2=1e-3)

    def build(self, params, device, dtype, variants):
        torch.manual_seed(0)
        c = params["channels"]
        layers = [nn.Conv2d(2, c, 1)]
        for _ in range(2):
            layers += [nn.Conv2d(c, c, 3, padding=1), nn.InstanceNorm2d(c, affine=True), nn.GELU()]
        model = nn.Sequential(*layers, nn.Conv2d(c, 2, 1)).eval()
        return Built(model=model, state=torch.randn(2, 2, params["grid"], params["grid"]))

    def steps_per_unit(self, params):
        return params["T"]

    def step(self, model, state, built, params):
        return 0.5 * model(state) + 0.5 * state
"""


@pytest.mark.timing
def test_an_a_a_pair_in_folders_of_other_lengths_is_neither_a_regression_nor_a_win(tmp_path):
    """The layout issue's failure: the same code run into a short and a long output folder (a user's
    --out), compared unpaired, was called a 25% win. Every worker now draws its own layout, and a side
    whose processes fall into modes is kept whole, so neither run can sit on one layout family. The
    threshold is 15% (the failures were 8-26%): two runs of this rollout on this 2-core machine differ as
    wholes by up to about 10%, and a shared CI machine once moved one run by more than 15% (an A/A
    `regression` with the 6% run-to-run default, 2026-11-29). A folder length's effect is systematic and a
    busy neighbour's is not, so an alarm is measured once more with the runs in the other order (fresh
    folders of the same two lengths): a layout bias alarms again, a noisy minute does not."""
    (tmp_path / "workloads").mkdir()
    (tmp_path / "workloads" / "user_conv.py").write_text(CONV_ROLLOUT)
    (tmp_path / "pyproject.toml").write_text(
        '[tool.perfgate]\nworkloads_dirs = ["workloads"]\n[tool.perfgate.gate]\nthreshold = 0.15\n'
        "max_processes = 8\nmax_case_s = 25\n")

    def trial(n: int, order: tuple[int, int]) -> dict:
        runs = [tmp_path / f"r{n}", tmp_path / (f"run-folder-of-another-length-{n}-" + "x" * 120)]
        for i in order:
            proc = run_cli("run", "-w", "user_conv", "-t", "eager", "--out", str(runs[i]), cwd=tmp_path)
            assert proc.returncode == 0, proc.stdout + proc.stderr
        envs = [json.loads((out / "results.json").read_text())["environment"] for out in runs]
        assert envs[0]["layout_policy"] == "drawn" and envs[0]["layout_seed"] != envs[1]["layout_seed"]
        cmp = run_cli("compare", str(runs[1]), str(runs[0]), "--gate", cwd=tmp_path)
        data = json.loads((runs[1] / "comparison.json").read_text())
        (v,) = [v for v in data["verdicts"] if v["metric"] == "step_time"]
        assert cmp.returncode == (1 if v["kind"] == "regression" else 0), cmp.stdout + cmp.stderr
        return v

    first = trial(0, (0, 1))
    if first["kind"] not in ("unchanged", "inconclusive"):
        again = trial(1, (1, 0))
        assert again["kind"] in ("unchanged", "inconclusive"), (first, again)


def test_compare_with_another_runs_results_that_share_no_case_is_refused(tmp_path):
    """`perfgate compare CURRENT BASELINE --gate` refuses a baseline file holding none of CURRENT's cases
    (exit 2), but before 2026-11-26 another run's results.json as BASELINE was not checked: every case came
    out `new` (which carries evidence) and the gate passed, exit 0, having compared nothing. Now both
    refuse it the same way; a results.json sharing a case is compared as before."""
    from perfgate.gating import gate
    from perfgate.model import config
    from perfgate.model.results import CaseResult, CaseSpec, ProcessSamples, RunResult, SchemaError

    def results(path: Path, workload: str) -> str:
        spec = CaseSpec(workload, "smoke", ("eager",), "cpu")
        procs = [ProcessSamples([1_000_000 + i for i in range(5)], process_index=p) for p in range(4)]
        run = RunResult("r", "smoke", {}, [CaseResult(spec, "ok", procs)])
        path.mkdir()
        (path / "results.json").write_text(run.dumps())
        return str(path)

    settings = config.load(cwd=tmp_path)
    cur, other, same = results(tmp_path / "cur", "a"), results(tmp_path / "other", "b"), results(tmp_path / "same", "a")
    with pytest.raises(SchemaError, match="lacks this run's cases"):
        gate.compare_files(cur, other, settings, strict_env=False, gate=True, echo=lambda _: None)
    assert gate.compare_files(cur, same, settings, strict_env=False, gate=True, echo=lambda _: None) == 0


def test_baseline_update_from_a_workload_filtered_run_is_refused_end_to_end(tmp_path):
    """`run --suite smoke -w tiny` within a suite of two workloads records settings.filters, and `baseline
    update` of that run is refused (exit 2) rather than dropping scaled_work's case from the baseline;
    `--case` replaces tiny's case only (perfgate.judging.baselines.refuse_dropping)."""
    (tmp_path / "pyproject.toml").write_text(
        PYPROJECT.format(workloads=TEST_WORKLOADS).replace('["scaled_work"]', '["scaled_work", "tiny"]'))
    for cmd in (("run", "--out", "runs/all"), ("baseline", "update", "runs/all"),
                ("run", "--suite", "smoke", "-w", "tiny", "--out", "runs/part")):
        proc = run_cli(*cmd, cwd=tmp_path)
        assert proc.returncode == 0, proc.stdout + proc.stderr
    assert json.loads((tmp_path / "runs/part/results.json").read_text())["settings"]["filters"] == "workloads tiny"
    refused = run_cli("baseline", "update", "runs/part", cwd=tmp_path)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert "would drop 1 case(s)" in refused.stderr and CASE in refused.stderr and "Traceback" not in refused.stderr
    kept = run_cli("baseline", "update", "runs/part", "--case", "tiny/*", cwd=tmp_path)
    assert kept.returncode == 0, kept.stdout + kept.stderr
    (baseline,) = (tmp_path / "baselines").glob("*/smoke.json")
    keys = [c["spec"]["workload"] for c in json.loads(baseline.read_text())["results"]["cases"]]
    assert sorted(keys) == ["scaled_work", "tiny"]
