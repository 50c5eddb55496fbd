"""The baseline store: schema versions, upgrade of old files, one-line errors naming the file."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import pytest

from perfgate.judging import baselines
from perfgate.model.config import ConfigError
from perfgate.model.results import CaseResult, CaseSpec, ProcessSamples, RunResult, SchemaError

FIXTURES = Path(__file__).parent / "fixtures"


def test_version_1_is_upgraded_on_read():
    b = baselines.load_baseline(FIXTURES / "baseline-v1.json")
    assert b.machine_key == "test-cpu-1t" and b.suite == "smoke"
    assert b.calibration == {}
    assert b.updated_at == "2026-11-01T12:02:00+0000"
    (case,) = b.run.cases
    assert case.key == "scaled_work/smoke/eager/cpu" and len(case.processes) == 2
    assert b.to_json()["schema"] == baselines.SCHEMA


def test_round_trip_keeps_raw_samples_and_calibration(tmp_path):
    b = baselines.load_baseline(FIXTURES / "baseline-v1.json")
    b.calibration["scaled_work/smoke/eager/cpu"] = {"threshold": 0.08}
    path = baselines.write_baseline(b, tmp_path / "m" / "smoke.json")
    again = baselines.load_baseline(path)
    assert again.calibration == {"scaled_work/smoke/eager/cpu": {"threshold": 0.08}}
    assert again.run.cases[0].processes[1].samples_ns == [1020000, 1000000, 1005000]
    assert again.environment["torch"] == "2.13.0"
    assert any("scaled_work" in line for line in baselines.describe(again))


@pytest.mark.parametrize("text, message", [
    ("{not json", "baseline is not valid JSON"),
    ('{"schema": "perfgate.baseline/99", "results": {}}', "unknown baseline schema 'perfgate.baseline/99'"),
    ('{"schema": "perfgate.results/2", "cases": []}', r"a run's results \(perfgate.results/2\), not a baseline; "
                                                      r"`perfgate baseline update .*` makes a baseline of it"),
    ('["a list"]', "not a perfgate baseline"),
    ('{"schema": "perfgate.baseline/2", "results": {"schema": "perfgate.results/1", "run_id": "r", "cases": []}}',
     "baseline holds no cases"),
])
def test_bad_baselines_get_one_line_naming_the_file(tmp_path, text, message):
    path = tmp_path / "smoke.json"
    path.write_text(text)
    with pytest.raises(SchemaError, match=message) as err:
        baselines.load_baseline(path)
    assert str(path) in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize("value", [-0.01, 0.7, "2%", True])
def test_a_calibrated_run_to_run_outside_its_range_is_refused(tmp_path, value):
    """The gate widens every unpaired step-time CI by the stored run-to-run spread: a baseline file (read as
    untrusted) cannot set it to nonsense."""
    b = baselines.load_baseline(FIXTURES / "baseline-v1.json")
    b.calibration["scaled_work/smoke/eager/cpu"] = {"threshold": 0.08, "run_to_run": value}
    path = tmp_path / "smoke.json"
    path.write_text(json.dumps(b.to_json()))
    with pytest.raises(SchemaError, match="calibration.scaled_work/smoke/eager/cpu.run_to_run") as err:
        baselines.load_baseline(path)
    assert "\n" not in str(err.value)


def test_missing_file_says_how_to_make_one(tmp_path):
    with pytest.raises(SchemaError, match="perfgate baseline update"):
        baselines.load_baseline(tmp_path / "nope.json")


def test_a_baseline_lacking_the_runs_cases_is_refused():
    b = baselines.load_baseline(FIXTURES / "baseline-v1.json")
    spec = CaseSpec("other", "smoke", ("eager",), "cpu")
    run = RunResult("r", "smoke", {}, [CaseResult(spec, "ok", [ProcessSamples([1])])])
    with pytest.raises(SchemaError, match="lacks this run's cases"):
        baselines.check_covers(b, run)


def test_update_refuses_failures_and_reports_changes():
    old = baselines.load_baseline(FIXTURES / "baseline-v1.json")
    data = json.loads((FIXTURES / "baseline-v1.json").read_text())["run"]
    data["cases"][0]["processes"][0]["samples_ns"] = [2000000, 2000000, 2000000]
    data["cases"][0]["processes"][1]["samples_ns"] = [2000000, 2000000, 2000000]
    failed = dict(data["cases"][0], spec={**data["cases"][0]["spec"], "toggles": ["compile"]}, status="failed")
    data["cases"].append(failed)
    run = RunResult.from_json(data)
    with pytest.raises(SchemaError, match="1 failed case"):
        baselines.refuse_failed(run, "results.json")
    new = baselines.from_run(run, old)
    lines = "\n".join(baselines.changes(old, new))
    # the change is the case's step time (geometric mean of its processes' step times), old to new
    before, after = old.run.cases[0].step_time().value, 2e-3
    assert "scaled_work/smoke/eager/cpu: step time" in lines and f"(+{(after / before - 1) * 100:.1f}%)" in lines
    assert "scaled_work/smoke/compile/cpu: added (failed)" in lines


def _two_case_baseline(tmp_path: Path) -> tuple[Path, dict]:
    """A stored baseline of two cases (eager, compile) with a calibration, and the results document it holds."""
    data = json.loads((FIXTURES / "baseline-v1.json").read_text())["run"]
    data["environment"].update(git_commit="a" * 40, git_dirty=False)
    data["cases"].append(dict(data["cases"][0], spec={**data["cases"][0]["spec"], "toggles": ["compile"]}))
    b = baselines.from_run(RunResult.from_json(data), None, source="first-run")
    b.calibration["scaled_work/smoke/compile/cpu"] = {"threshold": 0.08}
    path = baselines.write_baseline(b, tmp_path / "baselines" / "test-cpu-1t" / "smoke.json")
    return path, data


def _faster(data: dict, commit: str = "b" * 40) -> dict:
    """The same run measured again at ``commit``: every sample half as long, a third case, a failed one."""
    new = json.loads(json.dumps(data))
    new["environment"]["git_commit"] = commit
    for case in new["cases"]:
        for p in case["processes"]:
            p["samples_ns"] = [s // 2 for s in p["samples_ns"]]
    new["cases"].append(dict(new["cases"][0], spec={**new["cases"][0]["spec"], "toggles": ["amp-bf16"]},
                             status="failed"))
    return new


def test_update_with_case_replaces_only_those_cases(tmp_path):
    path, data = _two_case_baseline(tmp_path)
    old = baselines.load_baseline(path)
    run = RunResult.from_json(_faster(data))
    new = baselines.updated(run, old, "run2", ["*/compile/*"])  # the failed amp-bf16 case is not asked for
    keys = [c.key for c in new.run.cases]
    assert keys == ["scaled_work/smoke/eager/cpu", "scaled_work/smoke/compile/cpu"]
    eager, compiled = new.run.cases
    assert eager.processes[0].samples_ns == old.run.cases[0].processes[0].samples_ns  # kept as it was
    assert compiled.processes[0].samples_ns == run.cases[1].processes[0].samples_ns  # the run's
    assert new.calibration == old.calibration and new.environment["git_commit"] == "b" * 40
    lines = baselines.changes(old, new, only=["scaled_work/smoke/compile/cpu"])
    assert len(lines) == 1 and "compile/cpu: step time" in lines[0] and "(-50." in lines[0]

    with pytest.raises(ConfigError, match=r"--case 'nope/\*' matches no case of run2; valid: scaled_work/smoke/eager"):
        baselines.updated(run, old, "run2", ["nope/*"])
    with pytest.raises(SchemaError, match="1 failed case"):
        baselines.updated(run, old, "run2", ["*/amp-bf16/*"])
    with pytest.raises(ConfigError, match="there is none yet"):
        baselines.updated(run, None, "run2", ["*/compile/*"])
    other = _faster(data)
    other["environment"]["torch"] = "9.9.9"
    with pytest.raises(ConfigError, match="another environment .*torch 2.13.0 vs 9.9.9"):
        baselines.updated(RunResult.from_json(other), old, "run2", ["*/compile/*"])


@pytest.mark.parametrize("old, new, named", [
    ({}, {"malloc": "steady"}, "malloc system vs steady"),  # a baseline from before malloc was recorded
    ({"malloc": "steady"}, {"malloc": "system"}, "malloc steady vs system"),
    ({"address_layout": "random"}, {"address_layout": "fixed"}, "address_layout random vs fixed"),
    ({}, {"address_layout": "fixed"}, "address_layout none vs fixed"),  # recorded on one side only
    ({"tuning_env": ["OMP_SCHEDULE=static"]}, {"tuning_env": []}, "$OMP_SCHEDULE static vs none"),
    ({}, {"tuning_env": ["LD_PRELOAD=libjemalloc.so"]}, "tuning_env none vs 1 variable(s)"),
])
def test_a_case_update_from_another_allocator_policy_or_layout_is_refused(tmp_path, old, new, named):
    """`--case` keeps the baseline's environment for every case: cases measured under another C allocator
    policy, address layout or tuning variables would sit under an environment that is not theirs, so it is
    refused with what differs, as the gate names it; the whole update (no --case) takes the run's."""
    path, data = _two_case_baseline(tmp_path)
    data["environment"].update(old)
    stored = baselines.from_run(RunResult.from_json(data), None, source="first-run")
    run_data = _faster(data)
    for key in old:
        del run_data["environment"][key]
    run_data["environment"].update(new)
    run = RunResult.from_json(run_data)
    with pytest.raises(ConfigError, match=r"another environment \(.*" + re.escape(named) + r".*update the whole "
                                          r"baseline \(no --case\)") as err:
        baselines.updated(run, stored, "run2", ["*/compile/*"])
    assert "\n" not in str(err.value)
    whole = baselines.updated(replace(run, cases=run.cases[:2]), stored, "run2")
    assert {k: whole.environment.get(k) for k in new} == new
    same = _faster(data)
    assert baselines.updated(RunResult.from_json(same), stored, "run2", ["*/compile/*"]).environment["git_commit"] == "b" * 40


def test_a_case_kept_from_another_commit_names_its_own(tmp_path):
    """`--case` at commit b keeps the eager case measured at a: it names a in its metadata (written and
    read back), the replaced case names none; a later `--case` at a takes the mark off again, and a case
    that already had its own commit keeps it through a third update."""
    path, data = _two_case_baseline(tmp_path)
    eager, compiled = "scaled_work/smoke/eager/cpu", "scaled_work/smoke/compile/cpu"
    at_b = baselines.updated(RunResult.from_json(_faster(data, "b" * 40)), baselines.load_baseline(path), "run2",
                             [compiled])
    baselines.write_baseline(at_b, path)
    read = baselines.load_baseline(path)
    assert baselines.commit_of(read.run, eager) == ("a" * 40, False)
    assert baselines.commit_of(read.run, compiled) == ("b" * 40, False)
    assert "git_commit" not in read.run.case(compiled).metadata
    assert any(eager in line and f"measured at git {'a' * 12}" in line for line in baselines.describe(read))
    at_c = baselines.updated(RunResult.from_json(_faster(data, "c" * 40)), read, "run3", [compiled])
    assert baselines.commit_of(at_c.run, eager) == ("a" * 40, False)  # still where its numbers come from
    assert baselines.commit_of(at_c.run, compiled) == ("c" * 40, False)
    back = baselines.updated(RunResult.from_json(_faster(data, "a" * 40)), at_c, "run4", [compiled])
    assert back.environment["git_commit"] == "a" * 40
    assert all("git_commit" not in c.metadata for c in back.run.cases)  # one commit again: no marks


@pytest.mark.slow
def test_baseline_update_case_through_the_cli_writes_atomically(tmp_path):
    from conftest import run_cli

    path, data = _two_case_baseline(tmp_path)
    (tmp_path / "pyproject.toml").write_text("[tool.perfgate]\nbaselines_dir = \"baselines\"\n")
    run_dir = tmp_path / "reports" / "run2"
    run_dir.mkdir(parents=True)
    (run_dir / "results.json").write_text(json.dumps(_faster(data)))
    proc = run_cli("baseline", "update", str(run_dir), "--case", "scaled_work/smoke/compile/cpu", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    *changed, kept = proc.stdout.strip().splitlines()
    assert "compile/cpu: step time" in proc.stdout and not any("eager/cpu" in line for line in changed)
    assert kept.startswith("1 case(s) kept from another commit") and "scaled_work/smoke/eager/cpu" in kept  # a's
    stored = baselines.load_baseline(path)
    assert [c.key for c in stored.run.cases] == ["scaled_work/smoke/eager/cpu", "scaled_work/smoke/compile/cpu"]
    assert stored.run.cases[1].processes[0].samples_ns == [s // 2 for s in data["cases"][1]["processes"][0]["samples_ns"]]
    assert not [p for p in path.parent.iterdir() if p.name != "smoke.json"]  # no temporary file left behind
    written = path.read_text()
    bad = run_cli("baseline", "update", str(run_dir), "--case", "x/*", cwd=tmp_path)
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1 and "'x/*'" in bad.stderr
    assert path.read_text() == written  # a refused update leaves the baseline as it was


@pytest.mark.parametrize("cases", [["*/compile/*"], []])
def test_update_refuses_a_baseline_of_another_suite(tmp_path, cases):
    """`baseline update --baseline FILE [--case K]`: before 2026-12 a FILE of another suite took the run's
    cases (or became the run) silently; its path names the suite only when perfgate chose it."""
    path, data = _two_case_baseline(tmp_path)
    other = _faster(data)
    other["suite"] = "pr"
    with pytest.raises(ConfigError, match=r"baseline of suite 'smoke', and run2 a run of suite 'pr'; name a "
                                          r"baseline of suite 'pr', or leave out --baseline"):
        baselines.updated(RunResult.from_json(other), baselines.load_baseline(path), "run2", cases)


@pytest.mark.slow
def test_baseline_update_into_another_suites_file_is_one_line_exit_2(tmp_path):
    from conftest import run_cli

    path, data = _two_case_baseline(tmp_path)
    other = _faster(data)
    other["suite"] = "pr"
    run_dir = tmp_path / "reports" / "run2"
    run_dir.mkdir(parents=True)
    (run_dir / "results.json").write_text(json.dumps(other))
    written = path.read_text()
    proc = run_cli("baseline", "update", str(run_dir), "--baseline", str(path), "--case", "*/compile/*", cwd=tmp_path)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "suite 'smoke'" in proc.stderr and "suite 'pr'" in proc.stderr
    assert path.read_text() == written


@pytest.mark.parametrize("settings, words", [
    ({"shard": {"index": 1, "count": 2, "plan": []}}, "shard 1/2"),
    ({"shard": {"merged": [1], "count": 2, "plan": [], "missing_cases": ["scaled_work/smoke/compile/cpu"]}},
     "a merge missing 1 planned case"),
    ({"selection": "workloads scaled_work"}, "a selection (workloads scaled_work)"),
    ({"filters": "toggles eager"}, "a selection (toggles eager)"),
])
def test_a_whole_update_from_part_of_the_suite_is_refused_where_it_would_drop_cases(tmp_path, settings, words):
    """`baseline update RUN` (no --case) makes RUN the whole baseline. Before 2026-11-26 a RUN that was one
    shard, a merge with shards missing, or a -w/-t/--size selection replaced the suite's baseline with its
    few cases: every other case was dropped (one `- removed` line each) and from then on was `new` to
    every gate, never judged again. Now that is refused (exit 2) naming what would be dropped; --case
    replaces only the run's cases, and a full run may still drop cases that are gone."""
    path, data = _two_case_baseline(tmp_path)
    old = baselines.load_baseline(path)
    part = json.loads(json.dumps(data))
    part["cases"] = part["cases"][:1]  # eager only
    part["settings"] = {**part.get("settings", {}), **settings}
    run = RunResult.from_json(part)
    with pytest.raises(ConfigError, match=rf"{re.escape(words)}.*would drop 1 case.*scaled_work/smoke/compile/cpu.*--case"):
        baselines.updated(run, old, "run2")
    assert [c.key for c in baselines.updated(run, old, "run2", ["*/eager/*"]).run.cases] == [
        "scaled_work/smoke/eager/cpu", "scaled_work/smoke/compile/cpu"]
    assert len(baselines.updated(run, None, "run2").run.cases) == 1  # no baseline yet: nothing to drop
    whole = json.loads(json.dumps(data))
    whole["cases"] = whole["cases"][:1]  # a full run of a suite that no longer has the compile case
    assert len(baselines.updated(RunResult.from_json(whole), old, "run2").run.cases) == 1


@pytest.mark.slow
def test_baseline_update_warns_about_cases_of_one_process(tmp_path):
    """compare.judge_time: a one-process baseline case never settles a step-time change; `baseline update`
    says so when it stores one (the update itself goes ahead)."""
    from conftest import run_cli

    data = json.loads((FIXTURES / "baseline-v1.json").read_text())["run"]
    data["cases"][0]["processes"] = data["cases"][0]["processes"][:1]
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "results.json").write_text(RunResult.from_json(data).dumps())
    (tmp_path / "pyproject.toml").write_text('[tool.perfgate]\nbaselines_dir = "baselines"\n')
    proc = run_cli("baseline", "update", str(run_dir), cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "1 case(s) of the baseline hold one worker process (scaled_work/smoke/eager/cpu)" in proc.stdout


def test_baseline_show_says_none_for_what_a_cpu_machine_and_a_fresh_repository_lack():
    """`perfgate baseline show` on a baseline from a CPU machine in a repository without a commit yet."""
    b = baselines.load_baseline(FIXTURES / "baseline-v1.json")
    b.run.environment.update(torch_cuda=None, nvidia_driver=None, git_commit=None)
    header = baselines.describe(b)[2]
    assert "None" not in header
    assert "cuda none" in header and "driver none" in header and "git none" in header


def test_update_lists_the_changed_counts_in_their_units_and_not_the_noisy_figures():
    """`baseline update` names the deterministic counts that changed (ops, FLOPs...) as the reports print
    them, not `3.35544e+07`, and not the figures every run moves a little (idle share, bytes allocated)."""
    old = baselines.load_baseline(FIXTURES / "baseline-v1.json")
    data = json.loads((FIXTURES / "baseline-v1.json").read_text())["run"]
    metrics = {"flops_per_step": 33554432.0, "aten_ops_per_step": 44.0, "device_idle_fraction": 0.118435,
               "cpu_bytes_allocated_per_step": 524288.0}
    old.run.cases[0].metrics.update(metrics)
    data["cases"][0]["metrics"] = {**metrics, "flops_per_step": 25165824.0, "aten_ops_per_step": 33.0,
                                   "device_idle_fraction": 0.132234, "cpu_bytes_allocated_per_step": 393216.0}
    lines = "\n".join(baselines.changes(old, baselines.from_run(RunResult.from_json(data), old)))
    assert "flops_per_step 33554432 -> 25165824; aten_ops_per_step 44 -> 33" in lines
    assert "e+0" not in lines and "device_idle_fraction" not in lines and "cpu_bytes_allocated" not in lines


def test_a_selection_run_does_not_silently_drop_the_rest_of_the_suites_baseline():
    """`perfgate run -w one` then `perfgate baseline update`: the whole-baseline update would remove every
    case the selection did not measure (it once did, printing only `- CASE: removed`); it is refused with
    the --case command that refreshes the selection's cases. A selection that measured them all updates."""
    previous = baselines.load_baseline(FIXTURES / "baseline-v1.json")
    data = json.loads((FIXTURES / "baseline-v1.json").read_text())["run"]
    data["settings"]["selection"] = "workloads other_work"
    data["cases"][0]["spec"]["workload"] = "other_work"
    with pytest.raises(ConfigError, match=r"selection \(workloads other_work\).*drop 1 case\(s\).*"
                                          r"scaled_work/smoke/eager/cpu.*--case 'other_work/\*'"):
        baselines.updated(RunResult.from_json(data), previous, "reports/r")
    assert baselines.updated(RunResult.from_json(data), None, "reports/r").run.cases  # no baseline yet: made
    both = json.loads(json.dumps(data))
    both["cases"].append(json.loads((FIXTURES / "baseline-v1.json").read_text())["run"]["cases"][0])
    new = baselines.updated(RunResult.from_json(both), previous, "reports/r")
    assert {c.key for c in new.run.cases} == {"other_work/smoke/eager/cpu", "scaled_work/smoke/eager/cpu"}


def test_baseline_updates_of_one_folder_take_turns(tmp_path):
    """`baseline update` and `calibrate --write` read, change and write back a baseline: one holding the
    folder's lock makes another wait, so neither writes back a baseline read before the other's write."""
    import threading

    path = tmp_path / "baselines" / "m" / "smoke.json"
    entered: list[str] = []

    def second():
        with baselines.updating(path):
            entered.append("second")

    with baselines.updating(path):
        t = threading.Thread(target=second)
        t.start()
        t.join(0.5)
        assert t.is_alive() and not entered  # waits while the first holds it
    t.join(30)
    assert entered == ["second"]
    assert sorted(p.name for p in path.parent.iterdir()) == []  # no lock file among the committed baselines


def _run_of(level: float, commit: str = "c" * 40, processes: int = 8, spread: float = 0.01, seed: int = 0,
            **environment) -> RunResult:
    """One run of the fixture's case at ``level`` (relative), ``processes`` worker processes ``spread`` apart."""
    import random

    rnd = random.Random(seed)
    data = json.loads((FIXTURES / "baseline-v1.json").read_text())["run"]
    data["environment"].update({"git_commit": commit, "git_dirty": False, **environment})
    template = data["cases"][0]["processes"][0]
    data["cases"][0]["processes"] = [
        {**template, "process_index": i,
         "samples_ns": [round(1e6 * (1 + level) * (1 + rnd.gauss(0, spread))) for _ in range(3)]}
        for i in range(processes)]
    return RunResult.from_json(data)


def test_runs_of_one_commit_pool_into_one_baseline_that_knows_their_spread():
    """A plain run's few processes made a thin baseline; several runs of one commit pooled hold all their
    processes and, from the runs' levels, the spread between whole runs with its upper bound, which the gate's
    unpaired comparison uses (and scales to a head run against k pooled runs)."""
    from perfgate.judging import runspread
    from perfgate.judging.gate_settings import GateSettings

    runs = [_run_of(level, seed=i) for i, level in enumerate((0.0, 0.004, -0.003))]
    pooled = baselines.pooled(runs, ["r1", "r2", "r3"])
    (case,) = pooled.cases
    assert len(case.processes) == 24 and [p.process_index for p in case.processes] == list(range(24))
    info = case.metadata[runspread.BASELINE_RUNS]
    assert info["runs"] == 3 and info["processes"] == [8, 8, 8]
    assert info["run_spread"]["dof"] == 2 and info["run_spread"]["upper"] >= info["run_spread"]["estimate"]
    gate = GateSettings()
    term, source = gate.run_to_run_term(case, case.key, base=case)
    spread = info["run_spread"]
    if spread["upper"] < runspread.per_run(gate.run_to_run) or spread["estimate"] > runspread.per_run(gate.run_to_run):
        assert "measured by the baseline's 3 pooled runs" in source
    else:  # the runs cannot show the default too wide: it stands, for a head run against 3 pooled runs
        assert term == pytest.approx(runspread.ratio_term(runspread.per_run(gate.run_to_run), 3), abs=1e-5) \
            and term < gate.run_to_run
    assert "against 3 pooled runs" in source
    # a pooled case whose runs agree closely: their own bound, below the default's
    tight = baselines.pooled([_run_of(0.0, seed=i, processes=16, spread=0.001) for i in range(8)], list("abcdefgh"))
    term, source = gate.run_to_run_term(tight.cases[0], tight.cases[0].key, base=tight.cases[0])
    assert term < gate.run_to_run and source.startswith("measured by the baseline's 8 pooled runs (95% upper bound)")
    # one run: the configured default, as before
    assert gate.run_to_run_term(runs[0].cases[0], case.key, base=runs[0].cases[0]) == (
        gate.run_to_run, "run_to_run default, not calibrated")


def test_a_few_pooled_runs_far_apart_widen_the_term_by_their_spread_not_by_its_upper_bound():
    """Three runs of a transformer block pooled into one baseline landed 1.098, 1.234 and 1.225 ms apart (5.9%
    a run, 2 dof); their 95% upper bound (33% a run) made a 39% term and every stored comparison
    0.44x-2.1x, `inconclusive` at +10% after 16 processes. The runs' spread combined with the default's is the
    term: wider than the default, narrower than the runs' own estimate, far from that bound."""
    from perfgate.judging import runspread
    from perfgate.judging.gate_settings import GateSettings
    from perfgate.util.stats import RUN_TO_RUN_MAX

    pooled = baselines.pooled([_run_of(level, seed=i, processes=16, spread=0.002)
                               for i, level in enumerate((0.0, 0.124, 0.116))], ["r1", "r2", "r3"])
    (case,) = pooled.cases
    spread = runspread.pooled_spread(case, RUN_TO_RUN_MAX)[1]
    assert spread is not None and spread.upper > 4 * spread.estimate > 0.2
    gate = GateSettings(run_to_run=0.06)  # the default when these runs were seen: below their spread
    term, source = gate.run_to_run_term(case, case.key, base=case)
    own = runspread.ratio_term(spread.estimate, 3)
    default = gate.run_to_run
    assert default < term < own and term < runspread.ratio_term(spread.upper, 3) / 4
    assert term == pytest.approx(runspread.ratio_term(runspread.moderated(runspread.per_run(default), spread), 3),
                                 abs=1e-5)
    assert source.startswith("measured by the baseline's 3 pooled runs (") and "combined with the run_to_run " \
        "default counted as 2 runs' worth; against 3 pooled runs" in source


@pytest.mark.parametrize("other, message", [
    ({"commit": "d" * 40}, "cannot pool r2 with r1: they differ (git_commit"),
    ({"malloc": "steady"}, "cannot pool r2 with r1: they differ (malloc"),  # no malloc recorded: system
    ({"git_dirty": True}, "cannot pool r2: it was measured with uncommitted changes"),
])
def test_runs_of_other_commits_or_environments_are_not_pooled(other, message):
    second = _run_of(0.0, **other)
    with pytest.raises(ConfigError, match=re.escape(message)):
        baselines.pooled([_run_of(0.0), second], ["r1", "r2"])


def test_baseline_update_says_what_a_gate_without_the_commit_can_settle():
    """Each case's unpaired term alone spans +/- 1.96 * term at 95%: a case whose span is inside its threshold
    can reach `unchanged` without lockstep, one whose span is not cannot; the line says how many, and points
    to lockstep and calibrate only where some cannot."""
    from perfgate.util.stats import two_sided

    run = _run_of(0.0)
    two = replace(run, cases=[run.cases[0], replace(run.cases[0], spec=replace(run.cases[0].spec, size="pr"))])
    keys = [c.key for c in two.cases]
    terms = {keys[0]: (0.01, "measured by calibrate"), keys[1]: (0.08, "run_to_run default, not calibrated")}
    lines = baselines.commit_less_reach(two, lambda c: terms[c.key], lambda c: 0.05, 0.95)
    span = (1.08 ** two_sided(0.95) - 1 + 1.01 ** two_sided(0.95) - 1) / 2  # the median of the two cases' spans
    assert "median 4.5%: " in lines[0] and "1 other source(s)" in lines[0]
    assert f"alone +/-{span * 100:.0f}% at 95%" in lines[0] and "`unchanged` is within reach for 1 of 2 cases" in lines[0]
    assert "settles the rest in lockstep" in lines[1] and "calibrate --write" in lines[1]
    quiet = baselines.commit_less_reach(two, lambda c: (0.01, "measured by calibrate"), lambda c: 0.05, 0.95, only=keys[:1])
    assert len(quiet) == 1 and "within reach for 1 of 1 case" in quiet[0] and "other source" not in quiet[0]
    assert baselines.commit_less_reach(two, lambda c: (0.01, "x"), lambda c: 0.05, 0.95, only=[]) == []


@pytest.mark.slow
def test_pooling_through_the_cli_says_what_the_baseline_cost_and_whether_it_is_precise(tmp_path):
    """`perfgate baseline update RUN1 RUN2 RUN3`: one baseline of the three; the cost of recording it and its
    precision said; a mix of commits is one line, exit 2, and nothing written. One thin run: a warning that says
    what to do."""
    from conftest import run_cli

    (tmp_path / "pyproject.toml").write_text('[tool.perfgate]\nbaselines_dir = "baselines"\n')
    dirs = []
    for i, level in enumerate((0.0, 0.003, -0.002, 0.0)):
        d = tmp_path / f"run{i}"
        d.mkdir()
        run = _run_of(level, seed=i, commit="c" * 40 if i < 3 else "d" * 40)
        (d / "results.json").write_text(run.dumps())
        dirs.append(str(d))
    mixed = run_cli("baseline", "update", *dirs, cwd=tmp_path)
    assert mixed.returncode == 2 and "cannot pool" in mixed.stderr and len(mixed.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "baselines").exists()
    proc = run_cli("baseline", "update", *dirs[:3], cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "recorded from 3 runs: 24 processes per case (median)" in proc.stdout and "of measuring" in proc.stdout
    assert "spread between the runs (per run)" in proc.stdout
    assert "every case's step time within +/-1.25% (a baseline's precision)" in proc.stdout
    assert "a stored gate that cannot reach this commit (no lockstep) carries each case's run-to-run term" in proc.stdout
    (path,) = (tmp_path / "baselines").glob("*/smoke.json")
    stored = baselines.load_baseline(path)
    assert len(stored.run.cases[0].processes) == 24 and " + " in stored.source
    thin = tmp_path / "thin"
    thin.mkdir()
    (thin / "results.json").write_text(_run_of(0.0, processes=3, spread=0.05).dumps())
    proc = run_cli("baseline", "update", str(thin), cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "1 case(s) short of a baseline's precision (step time within +/-1.25%, half a plain run's)" in proc.stdout
    assert "perfgate run --baseline-precision" in proc.stdout and "perfgate baseline update RUN1 RUN2" in proc.stdout
