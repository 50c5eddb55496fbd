"""`perfgate merge`: shard results join into one run with the same cases as the unsharded plan, and
shards that are not parts of one measurement are refused with one line (exit 2)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from conftest import cli_env, run_cli
from fixtures.shards import ENVIRONMENT, settings_for, suite_cases, write_shard_runs

from perfgate.gating.comparison_file import load_comparison_file
from perfgate.gating.merge import merge_runs
from perfgate.gating.merged_gate import merged_comparison
from perfgate.judging.baselines import commit_of
from perfgate.judging.compare import environment_diff
from perfgate.model.comparison import Comparison, Verdict
from perfgate.model.config import ConfigError
from perfgate.model.results import SchemaError, load_results
from perfgate.running.runner import write_results


@pytest.mark.parametrize("count", [1, 3, 8])
def test_merged_shards_hold_the_plan_in_plan_order(tmp_path, count):
    cases = suite_cases()
    paths = write_shard_runs(tmp_path, cases, count)
    run, warnings = merge_runs(paths, tmp_path / "merged")
    assert warnings == []
    assert [c.key for c in run.cases] == [c.key for c in cases]
    assert run.suite == "pr" and run.run_id == "merged"
    assert run.settings["shard"]["merged"] == list(range(1, count + 1))
    assert run.started_at == "2026-01-01T00:01:00+0000"


@pytest.mark.slow
def test_cli_merges_a_folder_of_downloaded_artifacts(tmp_path):
    cases = suite_cases(workloads=2, toggles=3)
    write_shard_runs(tmp_path, cases, 2)
    (tmp_path / "shards" / "perfgate-shard-1" / "tb").mkdir()
    (tmp_path / "shards" / "perfgate-shard-1" / "tb" / "trace.json").write_text("{}")
    out = tmp_path / "merged"
    proc = run_cli("merge", str(tmp_path / "shards"), "--out", str(out), timeout=120)
    assert proc.returncode == 0, proc.stderr
    merged = load_results(out / "results.json")
    assert sorted(c.key for c in merged.cases) == sorted(c.key for c in cases)
    assert (out / "tb" / "trace.json").is_file()  # traces travel with the merged run
    assert "6 ok" in proc.stdout


def test_a_missing_shard_is_a_warning_naming_it(tmp_path):
    paths = write_shard_runs(tmp_path, suite_cases(), 3)
    run, warnings = merge_runs([paths[0], paths[2]], tmp_path / "merged")
    assert len(warnings) == 1 and "2/3" in warnings[0]
    assert len(run.settings["shard"]["missing_cases"]) == len(suite_cases()) - len(run.cases)


def _edit(path, fn):
    data = json.loads(path.read_text())
    fn(data)
    path.write_text(json.dumps(data))


@pytest.mark.parametrize("what, edit, message", [
    ("suite", lambda d: d.update(suite="smoke"), "suite 'smoke'"),
    ("torch", lambda d: d["environment"].update(torch="2.12.0"), "environment differs"),
    ("gpu", lambda d: d["environment"].update(device_name="NVIDIA A100", machine_key="nvidia-a100"), "machine_key"),
    ("python", lambda d: d["environment"].update(python="3.11.9"), "python"),
    ("commit", lambda d: d["environment"].update(git_commit="b" * 40), "git_commit"),
    ("settings", lambda d: d["settings"].update(processes=5), "settings differ"),
    ("plan", lambda d: d["settings"]["shard"].update(count=4), "not a shard of the same plan"),
])
def test_merge_refuses_mismatched_shards(tmp_path, what, edit, message):
    paths = write_shard_runs(tmp_path, suite_cases(), 2)
    _edit(paths[1], edit)
    with pytest.raises(ConfigError, match=message):
        merge_runs(paths, tmp_path / "merged")


def test_merge_refuses_another_schema(tmp_path):
    paths = write_shard_runs(tmp_path, suite_cases(), 2)
    _edit(paths[1], lambda d: d.update(schema="perfgate.results/99"))
    with pytest.raises(ConfigError, match="perfgate.results/99"):
        merge_runs(paths, tmp_path / "merged")


def test_merge_refuses_a_case_twice(tmp_path):
    paths = write_shard_runs(tmp_path, suite_cases(), 2)

    def steal(d):
        other = json.loads(paths[0].read_text())
        d["cases"].append(other["cases"][0])
    _edit(paths[1], steal)
    with pytest.raises(ConfigError, match="is also in"):
        merge_runs(paths, tmp_path / "merged")


def test_merge_refuses_the_same_shard_twice(tmp_path):
    paths = write_shard_runs(tmp_path, suite_cases(), 2)
    copy = tmp_path / "copy" / "results.json"
    copy.parent.mkdir()
    copy.write_text(paths[0].read_text())
    with pytest.raises(ConfigError, match="already given"):
        merge_runs([paths[0], copy], tmp_path / "merged")


def test_hostnames_may_differ(tmp_path):
    paths = write_shard_runs(tmp_path, suite_cases(), 2)
    _edit(paths[1], lambda d: d["environment"].update(hostname="runner-2"))
    run, _ = merge_runs(paths, tmp_path / "merged")
    assert run.environment["hostname"] == "runner-1, runner-2"
    assert run.environment["torch"] == ENVIRONMENT["torch"]


@pytest.mark.parametrize("dirty", [[False, True], [True, False], [True, True]])
def test_a_merged_run_is_dirty_when_any_shard_was(tmp_path, dirty):
    paths = write_shard_runs(tmp_path, suite_cases(), 2)
    for path, flag in zip(paths, dirty, strict=True):
        _edit(path, lambda d, flag=flag: d["environment"].update(git_dirty=flag))
    run, _ = merge_runs(paths, tmp_path / "merged")
    assert run.environment["git_dirty"] is True
    measured_in = {c.key: flag for path, flag in zip(paths, dirty, strict=True) for c in load_results(path).cases}
    for case in run.cases:  # each case still says the tree it was measured in
        assert commit_of(run, case.key) == ("a" * 40, measured_in[case.key])


def test_a_merged_run_of_clean_shards_is_clean(tmp_path):
    paths = write_shard_runs(tmp_path, suite_cases(), 2)
    for path in paths:
        _edit(path, lambda d: d["environment"].update(git_dirty=False))
    run, _ = merge_runs(paths, tmp_path / "merged")
    assert run.environment["git_dirty"] is False
    assert all("git_dirty" not in c.metadata for c in run.cases)


def test_compared_environment_keys_that_differ_are_joined(tmp_path):
    paths = write_shard_runs(tmp_path, suite_cases(), 2)
    _edit(paths[0], lambda d: d["environment"].update(address_layout="fixed"))
    _edit(paths[1], lambda d: d["environment"].update(address_layout="random"))
    run, _ = merge_runs(paths, tmp_path / "merged")
    assert run.environment["address_layout"] == "fixed, random"


def test_variables_that_tune_the_workers_are_joined_per_variable(tmp_path):
    paths = write_shard_runs(tmp_path, suite_cases(), 2)
    _edit(paths[0], lambda d: d["environment"].update(tuning_env=["KMP_AFFINITY=compact", "TORCH_X=1"]))
    _edit(paths[1], lambda d: d["environment"].update(tuning_env=["TORCH_X=1"]))
    run, _ = merge_runs(paths, tmp_path / "merged")
    assert run.environment["tuning_env"] == ["KMP_AFFINITY=compact, none", "TORCH_X=1"]
    assert environment_diff({"tuning_env": ["TORCH_X=1"]}, run.environment) == {"$KMP_AFFINITY": [None, "compact, none"]}


@pytest.mark.parametrize("args, message", [
    (["nowhere"], "no such results file"),
    (["EMPTY"], "no results.json"),
])
@pytest.mark.slow
def test_cli_merge_bad_input_is_one_line_exit_2(tmp_path, args, message):
    (tmp_path / "EMPTY").mkdir()
    proc = run_cli("merge", *[str(tmp_path / a) for a in args], "--out", str(tmp_path / "m"), timeout=120)
    assert proc.returncode == 2
    assert message in proc.stderr and proc.stderr.strip().count("\n") == 0


@pytest.mark.slow
def test_cli_merge_mismatch_is_one_line_exit_2(tmp_path):
    paths = write_shard_runs(tmp_path, suite_cases(), 2)
    _edit(paths[1], lambda d: d["environment"].update(torch="2.12.0"))
    proc = run_cli("merge", *map(str, paths), "--out", str(tmp_path / "m"), timeout=120)
    assert proc.returncode == 2
    assert "torch '2.12.0'" in proc.stderr and proc.stderr.strip().count("\n") == 0


@pytest.mark.slow
def test_real_shards_merge_to_the_unsharded_case_set(tmp_path):
    """Two real `perfgate run --shard` runs (eager and channels-last, 1 process, 2 samples) merged."""
    args = ["-w", "operator_rollout", "-t", "eager", "-t", "channels-last", "--processes", "1", "--samples", "2"]
    for i in (1, 2):
        proc = run_cli("run", *args, "--shard", f"{i}/2", "--out", str(tmp_path / f"s{i}"))
        assert proc.returncode == 0, proc.stderr + proc.stdout
        assert f"shard {i}/2: 1 of 2 case(s)" in proc.stdout
        assert load_results(tmp_path / f"s{i}").settings["shard"]["index"] == i
    proc = run_cli("merge", str(tmp_path / "s1"), str(tmp_path / "s2"), "--out", str(tmp_path / "all"))
    assert proc.returncode == 0, proc.stderr
    merged = load_results(tmp_path / "all")
    assert [c.key for c in merged.cases] == ["operator_rollout/smoke/eager/cpu",
                                             "operator_rollout/smoke/channels-last/cpu"]
    assert all(c.status == "ok" for c in merged.cases)
    for case in merged.cases:  # each shard's traces travel into the merged folder, where the run says
        assert (tmp_path / "all" / case.profile["trace_file"]).is_file(), case.profile
    assert (tmp_path / "all" / "report.html").is_file()


def _add_base_runs(paths, commit="c" * 40):
    """What `--against REF` leaves in each shard's folder: the base ref's run in base/results.json."""
    for p in paths:
        run = load_results(p)
        run.environment["git_commit"] = commit
        run.run_id += "-base"
        write_results(run, p.parent / "base" / "results.json")


@pytest.mark.slow
def test_against_base_runs_merge_into_base_and_are_not_shards(tmp_path):
    cases = suite_cases(workloads=2, toggles=3)
    paths = write_shard_runs(tmp_path, cases, 2)
    _add_base_runs(paths)
    out = tmp_path / "merged"
    proc = run_cli("merge", str(tmp_path / "shards"), "--out", str(out), timeout=120)
    assert proc.returncode == 0, proc.stderr  # base/results.json is no third shard
    head, base = load_results(out), load_results(out / "base")
    assert [c.key for c in head.cases] == [c.key for c in base.cases] == [c.key for c in cases]
    assert base.environment["git_commit"] == "c" * 40 and head.environment["git_commit"] == "a" * 40


def test_merge_refuses_base_runs_from_only_some_shards(tmp_path):
    paths = write_shard_runs(tmp_path, suite_cases(), 2)
    _add_base_runs(paths[:1])
    with pytest.raises(ConfigError, match="only some shards have a base/ run"):
        merge_runs(paths, tmp_path / "merged")


def _write_comparison(path, kinds, source="git:abc (abc)"):
    run = load_results(path)
    verdicts = [Verdict(case_key=c.key, metric="step_time", kind=k, baseline=1.0, current=1.0, rule="test")
                for c, k in zip(run.cases, kinds, strict=False)]
    comp = Comparison(verdicts=verdicts, mode="against", baseline_source=source, warnings=["noisy runner"])
    (path.parent / "comparison.json").write_text(json.dumps(comp.to_json()))
    return verdicts


def test_shard_comparisons_join_into_one_verdict(tmp_path):
    paths = write_shard_runs(tmp_path, suite_cases(workloads=2, toggles=2), 2)
    v1 = _write_comparison(paths[0], ["unchanged", "unchanged"])
    v2 = _write_comparison(paths[1], ["regression", "win"])
    comp = merged_comparison(paths)
    assert comp.verdicts == v1 + v2
    assert comp.gate_failed and comp.mode == "against" and comp.warnings == ["noisy runner"]


def test_an_empty_shard_needs_no_comparison(tmp_path):
    paths = write_shard_runs(tmp_path, suite_cases(workloads=1, toggles=1), 2)  # shard 2 drew no case
    assert load_results(paths[1]).cases == []
    _write_comparison(paths[0], ["unchanged"])
    assert len(merged_comparison(paths).verdicts) == 1


def test_no_shard_comparisons_means_none(tmp_path):
    assert merged_comparison(write_shard_runs(tmp_path, suite_cases(), 2)) is None


@pytest.mark.parametrize("case", ["only-some", "different-base"])
def test_shard_comparisons_must_agree(tmp_path, case):
    paths = write_shard_runs(tmp_path, suite_cases(), 2)
    _write_comparison(paths[0], ["unchanged"])
    if case == "different-base":
        _write_comparison(paths[1], ["unchanged"], source="git:def (def)")
    with pytest.raises(ConfigError, match="comparison.json" if case == "only-some" else "compared against"):
        merged_comparison(paths)


def test_comparison_file_round_trips(tmp_path):
    paths = write_shard_runs(tmp_path, suite_cases(workloads=1, toggles=2), 1)
    verdicts = _write_comparison(paths[0], ["regression", "win"])
    comp = load_comparison_file(paths[0].parent)
    assert comp.verdicts == verdicts and comp.baseline_source == "git:abc (abc)"
    assert load_comparison_file(tmp_path) is None
    (tmp_path / "comparison.json").write_text("{")
    with pytest.raises(SchemaError, match="comparison is not valid JSON"):
        load_comparison_file(tmp_path)


# ---------------------------------------------------------------- merge --gate: one verdict for the merged run

def _summary_env(tmp_path):
    summary = tmp_path / "step-summary.md"
    summary.write_text("earlier step\n")
    return summary, cli_env(GITHUB_STEP_SUMMARY=str(summary))


@pytest.mark.parametrize("kinds, code", [(["unchanged", "win"], 0), (["regression", "unchanged"], 1)])
@pytest.mark.slow
def test_merge_gate_judges_the_shards_verdicts_as_one_run(tmp_path, kinds, code):
    paths = write_shard_runs(tmp_path, suite_cases(workloads=2, toggles=2), 2)
    _write_comparison(paths[0], ["unchanged", "unchanged"])
    _write_comparison(paths[1], kinds)
    summary, env = _summary_env(tmp_path)
    out = tmp_path / "merged"
    proc = run_cli("merge", str(tmp_path / "shards"), "--out", str(out), "--gate", env=env, timeout=120)
    assert proc.returncode == code, proc.stdout + proc.stderr
    comp = load_comparison_file(out)
    assert len(comp.verdicts) == 4 and comp.gate_failed == (code == 1)
    for name in ("results.json", "summary.md", "junit.xml", "report.html"):
        assert (out / name).is_file(), name
    md = (out / "summary.md").read_text()
    assert ("FAIL" in md) == (code == 1)
    text = summary.read_text()
    assert text.startswith("earlier step\n") and md.strip() in text  # appended, not replaced


@pytest.mark.slow
def test_merge_gate_without_shard_verdicts_compares_with_the_baseline(tmp_path):
    paths = write_shard_runs(tmp_path, suite_cases(workloads=2, toggles=2), 2)
    first = run_cli("merge", *map(str, paths), "--out", str(tmp_path / "m1"), timeout=120)
    assert first.returncode == 0, first.stderr
    baseline = tmp_path / "baseline.json"
    made = run_cli("baseline", "update", str(tmp_path / "m1"), "--baseline", str(baseline), timeout=120)
    assert made.returncode == 0, made.stdout + made.stderr
    summary, env = _summary_env(tmp_path)
    proc = run_cli("merge", *map(str, paths), "--out", str(tmp_path / "m2"), "--gate", "--baseline", str(baseline),
                   env=env, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    comp = load_comparison_file(tmp_path / "m2")
    assert comp.baseline_source == str(baseline) and not comp.gate_failed
    assert (tmp_path / "m2" / "summary.md").read_text().strip() in summary.read_text()


@pytest.mark.slow
def test_merge_without_gate_leaves_the_job_summary_alone(tmp_path):
    paths = write_shard_runs(tmp_path, suite_cases(workloads=1, toggles=2), 2)
    summary, env = _summary_env(tmp_path)
    proc = run_cli("merge", *map(str, paths), "--out", str(tmp_path / "m"), env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert summary.read_text() == "earlier step\n"
    assert (tmp_path / "m" / "summary.md").is_file()  # the reports are written either way


# ---------------------------------------------------------------- merge --rejudge: the merging perfgate decides

def _slow_down(path, factor):
    """Every head sample of the shard at ``path`` ``factor`` times slower than its base/ run's."""
    run = load_results(path)
    for case in run.cases:
        for proc in case.processes:
            proc.samples_ns = [int(s * factor) for s in proc.samples_ns]
    write_results(run, path)


def _with_processes(path, n):
    """Every case of the shard at ``path`` (and of its base/ run) with ``n`` processes: the first one's
    samples, as many times as the judge's design asks for."""
    for f in (path, path.parent / "base" / "results.json"):
        run = load_results(f)
        for case in run.cases:
            case.processes = [replace(case.processes[0], process_index=i) for i in range(n)]
        write_results(run, f)


def _against_shards(tmp_path, factor, processes=3):
    paths = write_shard_runs(tmp_path, suite_cases(workloads=2, toggles=2), 2)
    _add_base_runs(paths)
    for p in paths:
        _with_processes(p, processes)
        _slow_down(p, factor)
        run = load_results(p)
        run.settings["against"] = "origin/main"
        write_results(run, p)
        _write_comparison(p, ["unchanged"] * len(run.cases))  # what a lenient gate in the PR would write
    return paths


@pytest.mark.slow
def test_rejudge_ignores_the_shards_own_verdicts(tmp_path):
    """A pull request that loosened the gate wrote 'unchanged' for a 3x slowdown: without --rejudge the
    merge trusts that; with it, the merging perfgate's rules see the regression in the raw samples."""
    paths = _against_shards(tmp_path, 3.0)
    trusted = run_cli("merge", *map(str, paths), "--out", str(tmp_path / "trusted"), "--gate", timeout=120)
    assert trusted.returncode == 0, trusted.stdout + trusted.stderr
    proc = run_cli("merge", *map(str, paths), "--out", str(tmp_path / "m"), "--gate", "--rejudge", timeout=120)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    comp = load_comparison_file(tmp_path / "m")
    regressions = {v.case_key for v in comp.verdicts if v.metric == "step_time" and v.kind == "regression"}
    assert regressions == {c.key for c in load_results(tmp_path / "m").cases}
    assert comp.mode == "against" and "judged again by this perfgate" in comp.baseline_source
    assert "origin/main" in comp.baseline_source


@pytest.mark.slow
def test_rejudge_passes_an_unchanged_run(tmp_path):
    paths = _against_shards(tmp_path, 1.0)
    proc = run_cli("merge", *map(str, paths), "--out", str(tmp_path / "m"), "--gate", "--rejudge", timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert not load_comparison_file(tmp_path / "m").gate_failed


def test_rejudge_names_the_environment_difference_of_shards_run_with_base_python(tmp_path):
    """`run --base-python` shards merged with --rejudge: the comparison names what differs between the two
    sides' environments (the change under test), as each shard's own run did; plain --against shards none."""
    from perfgate.gating.merged_gate import judge_against
    from perfgate.model.environment_keys import change_under_test

    paths = _against_shards(tmp_path, 1.0)
    run, _ = merge_runs(paths, tmp_path / "plain")
    assert judge_against(tmp_path / "plain", run, settings_for(tmp_path)).environment_diff == {}
    for p in paths:
        head = load_results(p)
        head.settings["base_python"] = "/venvs/old/bin/python"
        head.environment["packages"] = ["numpy==2.1.0", "torch==2.13.0"]
        write_results(head, p)
        base = load_results(p.parent / "base" / "results.json")
        base.environment["packages"] = ["numpy==1.26.4", "torch==2.13.0"]
        write_results(base, p.parent / "base" / "results.json")
    run, _ = merge_runs(paths, tmp_path / "m")
    comparison = judge_against(tmp_path / "m", run, settings_for(tmp_path))
    assert comparison.environment_diff == {"package numpy": ["1.26.4", "2.1.0"]}
    assert change_under_test(comparison.mode, comparison.environment_diff) == \
        "the environment: package numpy 1.26.4 -> 2.1.0"


def test_rejudge_confirms_a_regression_only_with_both_sides_re_measured(tmp_path):
    from perfgate.gating.merged_gate import judge_against
    from perfgate.judging.gate_settings import GateSettings

    paths = _against_shards(tmp_path, 3.0)
    out = tmp_path / "m"
    run, _ = merge_runs(paths, out)
    # by default (remeasure = "stored") a paired run is judged once: a recorded re-measure changes nothing
    assert not GateSettings().remeasures("against")
    write_results(load_results(out / "base" / "results.json"), out / "results-remeasure.json")
    write_results(load_results(out / "base" / "results.json"), out / "base" / "results-remeasure.json")
    assert judge_against(out, run, settings_for(tmp_path)).gate_failed
    (out / "results-remeasure.json").unlink()
    (out / "base" / "results-remeasure.json").unlink()
    settings = replace(settings_for(tmp_path), extra={"gate": {"remeasure": True}})
    # no recorded re-measure: the first measurement's regression stands
    assert judge_against(out, run, settings).gate_failed
    # a re-measure of both sides that no longer regresses clears it
    head_again = load_results(out / "base" / "results.json")
    write_results(head_again, out / "results-remeasure.json")
    write_results(load_results(out / "base" / "results.json"), out / "base" / "results-remeasure.json")
    comp = judge_against(out, run, settings)
    assert not comp.gate_failed
    assert all("the re-measure did not" in v.rule for v in comp.verdicts if v.metric == "step_time")
    # the head's re-measure alone (no base side recorded) confirms nothing: the regression stands
    (out / "base" / "results-remeasure.json").unlink()
    assert judge_against(out, run, settings).gate_failed


@pytest.mark.slow
def test_rejudge_takes_its_floor_from_the_judges_own_sampling_design(tmp_path):
    """The head's pyproject chose `processes = 1` and `adaptive = false`: one process a side judges a 3.18x
    slowdown `inconclusive`, and the base's judge passed it (exit 0). A side with fewer processes than the
    judge's design is not enough evidence: the gate fails, naming the case."""
    paths = _against_shards(tmp_path, 3.18, processes=1)
    proc = run_cli("merge", *map(str, paths), "--out", str(tmp_path / "m"), "--gate", "--rejudge", timeout=120)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    comp = load_comparison_file(tmp_path / "m")
    keys = {c.key for c in load_results(tmp_path / "m").cases}
    assert {v.kind for v in comp.verdicts if v.metric == "step_time"} == {"inconclusive"}
    floor = {v.case_key: v for v in comp.verdicts if v.metric == "status"}
    assert set(floor) == keys and {v.kind for v in floor.values()} == {"newly-failing"}
    assert all(v.rule == "not enough evidence for this judge: measured with 1 process a side, fewer than the 3 "
                         "of this judge's design" for v in floor.values()), floor
    assert f"{min(keys)} (newly-failing status)" in proc.stdout


def test_rejudge_fails_a_case_stopped_inconclusive_where_the_judge_would_look_again(tmp_path):
    """Three processes a side (the judge's first look) that leave the step time `inconclusive`, and no
    record that the time budget ended them: the judge's schedule would look again at 5, so the shards
    stopped short of its design."""
    import random

    from perfgate.gating.merged_gate import judge_against

    rnd = random.Random(5)
    paths = write_shard_runs(tmp_path, suite_cases(workloads=1, toggles=1), 1)
    _add_base_runs(paths)
    run, base = load_results(paths[0]), load_results(paths[0].parent / "base" / "results.json")
    base.cases[0].processes = _paired_processes(rnd, 1.0, n=3, spread=0.05)
    run.cases[0].processes = _paired_processes(rnd, 1.06, n=3, spread=0.05)
    write_results(run, paths[0])
    write_results(base, paths[0].parent / "base" / "results.json")
    out = tmp_path / "m"
    merged, _ = merge_runs(paths, out)
    write_results(merged, out / "results.json")
    comp = judge_against(out, merged, settings_for(tmp_path))
    assert [v.kind for v in comp.verdicts if v.metric == "step_time"] == ["inconclusive"]
    (v,) = [v for v in comp.verdicts if v.metric == "status"]
    assert v.kind == "newly-failing" and comp.gate_failed
    assert "stopped inconclusive at 3 processes a side, where this judge's design looks again at 5" in v.rule
    # the same case recorded as ended by the time budget (another look would pass max_case_s) stops there
    run.cases[0].metadata["sampling"] = {"looks": [{"processes": 3, "seconds": 1000.0}]}
    write_results(run, paths[0])
    merged, _ = merge_runs(paths, tmp_path / "m2")
    write_results(merged, tmp_path / "m2" / "results.json")
    assert not judge_against(tmp_path / "m2", merged, settings_for(tmp_path)).gate_failed


@pytest.mark.slow
def test_merge_expect_suite_fails_a_case_no_shard_measured(tmp_path):
    """The judge plans the suite from its own configuration and workloads (a worker probe of them): a case
    the pull request dropped from its suite, so that no shard measured it, fails the gate by name."""
    from conftest import TEST_WORKLOADS

    from perfgate.model.results import CaseSpec

    (tmp_path / "pyproject.toml").write_text(
        f'[tool.perfgate]\nworkloads_dirs = ["{TEST_WORKLOADS}"]\n'
        '[tool.perfgate.suites.pr]\nworkloads = ["scaled_work"]\nsizes = ["pr"]\ntoggles = ["eager", "tf32"]\n'
        'device = "cuda"\n')
    paths = write_shard_runs(tmp_path, [CaseSpec("scaled_work", "pr", ("eager",), "cuda")], 1)
    _add_base_runs(paths)
    _with_processes(paths[0], 3)
    proc = run_cli("merge", *map(str, paths), "--out", str(tmp_path / "m"), "--gate", "--rejudge",
                   "--expect-suite", "pr", cwd=tmp_path, timeout=300)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    failing = [v for v in load_comparison_file(tmp_path / "m").verdicts if v.kind == "newly-failing"]
    assert len(failing) == 1, failing
    (v,) = failing
    assert v.case_key == "scaled_work/pr/tf32/cuda" and "measured by no shard" in v.rule, v
    assert "scaled_work/pr/tf32/cuda (newly-failing status)" in proc.stdout
    alone = run_cli("merge", *map(str, paths), "--out", str(tmp_path / "m2"), "--expect-suite", "pr", cwd=tmp_path)
    assert alone.returncode == 2 and "add --rejudge" in alone.stderr, alone.stderr


@pytest.mark.slow
def test_rejudge_needs_the_shards_base_runs(tmp_path):
    paths = write_shard_runs(tmp_path, suite_cases(workloads=1, toggles=2), 2)
    _write_comparison(paths[0], ["unchanged", "unchanged"])
    proc = run_cli("merge", *map(str, paths), "--out", str(tmp_path / "m"), "--gate", "--rejudge", timeout=120)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "--rejudge needs each shard's base/ run" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    both = run_cli("merge", *map(str, paths), "--out", str(tmp_path / "m2"), "--rejudge", "--baseline", "x.json",
                   timeout=120)
    assert both.returncode == 2 and not (tmp_path / "m2").exists()


# ---------------------------------------------------------------- shard folders are untrusted: no symbolic links

@pytest.mark.parametrize("link", ["file", "parent", "folder"])
def test_merge_refuses_a_symbolic_link_in_a_shard_folder(tmp_path, link):
    paths = write_shard_runs(tmp_path, suite_cases(workloads=1, toggles=2), 2)
    shard = paths[0].parent
    secret = tmp_path / "secret.txt"
    secret.write_text("token")
    (shard / "tb").mkdir(exist_ok=True)
    entry = shard / "tb" / "trace.pt.trace.json"
    {"file": lambda: entry.symlink_to(secret), "parent": lambda: entry.symlink_to(tmp_path),
     "folder": lambda: (shard / "tb" / "more").symlink_to(tmp_path, target_is_directory=True)}[link]()
    out = tmp_path / "merged"
    with pytest.raises(ConfigError, match="is a symbolic link"):
        merge_runs([tmp_path / "shards"], out)
    with pytest.raises(ConfigError, match="is a symbolic link"):
        merge_runs([str(p) for p in paths], out)  # results.json files named one by one: same check
    assert not out.exists() or not any(out.rglob("*"))


@pytest.mark.slow
def test_merge_refuses_a_shard_folder_that_is_a_link(tmp_path, cli):
    paths = write_shard_runs(tmp_path, suite_cases(workloads=1, toggles=2), 1)
    (tmp_path / "link").symlink_to(paths[0].parent, target_is_directory=True)
    proc = cli("merge", str(tmp_path / "link"), "--out", str(tmp_path / "m"))
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "it is a symbolic link" in proc.stderr


def _paired_processes(rnd, scale, n=8, spread=0.01):
    """``n`` worker processes of about ``scale`` ms a step, each off by a ``spread`` of its own."""
    import math

    from perfgate.model.results import ProcessSamples

    out = []
    for i in range(n):
        f = math.exp(rnd.gauss(0, spread))
        out.append(ProcessSamples(samples_ns=[int(1e6 * scale * f * math.exp(rnd.gauss(0, 0.002))) for _ in range(5)],
                                  process_index=i))
    return out


def _honest_level(case):
    from perfgate.judging.gate_settings import GateSettings
    from perfgate.judging.sequential import look_confidence

    return look_confidence(GateSettings(), 2)(case)


def _sequential_against_shards(tmp_path, confidence=None):
    """Shards of `run --against` whose cases are 7% slower in 8 lockstep pairs of processes, each with the
    sampling record an honest sampler writes (looks at 3, 5 and 8 pairs); ``confidence``: the level the
    record states instead of the true one (what the pull request's shard can write)."""
    import random

    rnd = random.Random(0)
    paths = write_shard_runs(tmp_path, suite_cases(workloads=1, toggles=2), 2)
    _add_base_runs(paths)
    for p in paths:
        run, base = load_results(p), load_results(p.parent / "base" / "results.json")
        for head_case, base_case in zip(run.cases, base.cases, strict=True):
            base_case.processes = _paired_processes(rnd, 1.0)
            head_case.processes = _paired_processes(rnd, 1.07)
            looks = [{"processes": n, "seconds": float(n), "confidence": 0.98, "result": "inconclusive"} for n in (3, 5)]
            looks.append({"processes": 8, "seconds": 8.0, "confidence": 0.98, "result": "regression"})
            head_case.metadata["sampling"] = {
                "rule": "comparison", "processes": 8, "seconds": 8.0, "stopped": "settled: regression", "looks": looks,
                "confidence": confidence or _honest_level(head_case)}
        run.settings["against"] = "origin/main"
        write_results(run, p)
        write_results(base, p.parent / "base" / "results.json")
        _write_comparison(p, ["unchanged"] * len(run.cases))
    return paths


@pytest.mark.slow
def test_rejudge_takes_no_confidence_level_from_the_shards(tmp_path):
    """The shard's sampling record states the confidence its last look was judged at. A pull request's shard
    that writes 0.99999999 there would widen every interval until a 7% regression is inconclusive (exit 0);
    the merging perfgate recomputes each look's level from its own settings, so the verdict is the same."""
    from perfgate.judging.compare import case_time_change, judge_time
    from perfgate.judging.gate_settings import GateSettings

    verdicts = {}
    for name, confidence in (("honest", None), ("tampered", 0.99999999)):
        paths = _sequential_against_shards(tmp_path / name, confidence)
        out = tmp_path / name / "m"
        proc = run_cli("merge", *map(str, paths), "--out", str(out), "--gate", "--rejudge", timeout=120)
        assert proc.returncode == 1, (name, proc.stdout + proc.stderr)
        verdicts[name] = [(v.case_key, v.kind, v.ratio_low, v.ratio_high) for v in load_comparison_file(out).verdicts
                          if v.metric == "step_time"]
        assert {kind for _, kind, _, _ in verdicts[name]} == {"regression"}
    assert verdicts["tampered"] == verdicts["honest"]
    # the tampered level would have decided it: judged at 0.99999999, the same data is inconclusive
    run = load_results(tmp_path / "tampered" / "m" / "results.json")
    base = load_results(tmp_path / "tampered" / "m" / "base" / "results.json")
    change = case_time_change(base.cases[0], run.case(base.cases[0].key), GateSettings(), paired=True,
                              confidence=0.99999999)
    assert judge_time(change, 0.05, "global threshold")[0] == "inconclusive"


@pytest.mark.slow
def test_a_merged_run_merges_again_as_the_shards_it_holds(tmp_path):
    """`perfgate merge M --out N` of a run merge wrote (or `merge shards --out shards`, run twice) was exit 3,
    'unexpected KeyError: index': a merged run's shard record lists its shards under "merged"."""
    cases = suite_cases(workloads=2, toggles=3)
    paths = write_shard_runs(tmp_path, cases, 3)
    first = run_cli("merge", str(paths[0].parent), str(paths[1].parent), "--out", str(tmp_path / "m"), timeout=120)
    assert first.returncode == 0, first.stderr
    again = run_cli("merge", str(tmp_path / "m"), "--out", str(tmp_path / "n"), timeout=120)
    assert again.returncode == 0, again.stderr
    assert "shard(s) 3/3 not given" in again.stderr
    run = load_results(tmp_path / "n" / "results.json")
    assert run.settings["shard"]["merged"] == [1, 2]
    whole, warnings = merge_runs([tmp_path / "m" / "results.json", paths[2]], tmp_path / "whole")
    assert warnings == [] and [c.key for c in whole.cases] == [c.key for c in cases]
    assert whole.settings["shard"]["merged"] == [1, 2, 3]
    with pytest.raises(ConfigError, match="shard 2/3 was already given"):
        merge_runs([tmp_path / "m" / "results.json", paths[1]], tmp_path / "twice")


@pytest.mark.parametrize("where", ["inside", "same"])
@pytest.mark.slow
def test_merge_refuses_an_out_folder_inside_a_shard_folder(tmp_path, where):
    """`--out` inside a shard folder copied that shard into itself (an empty sub/sub appeared); `--out` equal to
    a shard folder replaced that shard's results.json. Both are refused, one line, exit 2, nothing written."""
    paths = write_shard_runs(tmp_path, suite_cases(workloads=2, toggles=2), 2)
    shard = paths[0].parent
    before = {p: p.read_bytes() for p in shard.rglob("*") if p.is_file()}
    out = shard / "sub" if where == "inside" else shard
    proc = run_cli("merge", str(shard), str(paths[1].parent), "--out", str(out), timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert "--out" in proc.stderr and str(shard) in proc.stderr and proc.stderr.strip().count("\n") == 0
    assert {p: p.read_bytes() for p in shard.rglob("*") if p.is_file()} == before
    assert not (shard / "sub").exists()
    with pytest.raises(ConfigError, match="inside the shard folder"):
        merge_runs([paths[0], paths[1]], shard / "x" / "y")


def test_merge_may_write_next_to_or_above_its_shards(tmp_path):
    """A folder beside the shards, or the folder of downloaded shards itself, stays a valid --out."""
    paths = write_shard_runs(tmp_path, suite_cases(workloads=2, toggles=2), 2)
    run, _ = merge_runs(paths, tmp_path / "shards")
    assert len(run.cases) == 4
    run, _ = merge_runs(paths, tmp_path / "shards" / "merged")
    assert len(run.cases) == 4
