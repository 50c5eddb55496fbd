"""`run --changed-since REF`: which workloads a change touches, and the safe default (perfgate.running.changes).

The selection is pure (fast tests); what git says changed is read from real repositories made here. The
run end to end, with real workers, is the one slow test at the bottom.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
from conftest import run_cli

from perfgate.judging.compare import compare_runs
from perfgate.judging.expect import evaluate
from perfgate.model.results import CaseResult, CaseSpec, ProcessSamples, RunResult
from perfgate.model.rules import parse_rules
from perfgate.running.changes import Change, Owner, changes_since, select, selection_for_run, split_cases
from perfgate.util.paths import bad_project_glob, matches_project_glob

OWNERS = {
    "a": Owner("workloads/a.py", ("src/sim/**",)),
    "b": Owner("workloads/b.py"),
    "c": Owner("workloads/both.py", ("kernels/*.cu",)),
    "d": Owner("workloads/both.py"),
}


def chosen(*changes: Change, owners=OWNERS) -> tuple[list[str] | None, str]:
    s = select(list(changes), owners, "main")
    return (None if s.workloads is None else sorted(s.workloads)), "; ".join(s.reasons)


# ---------------------------------------------------------------- the selection, pure

def test_a_workloads_own_file_selects_it_alone():
    assert chosen(Change("M", "workloads/b.py")) == (["b"], "b: workloads/b.py")


def test_a_file_a_workload_declares_it_depends_on_selects_it():
    assert chosen(Change("M", "src/sim/deep/step.py"))[0] == ["a"]
    assert chosen(Change("A", "kernels/conv.cu"), Change("M", "workloads/b.py"))[0] == ["b", "c"]


def test_a_file_defining_two_workloads_selects_both():
    assert chosen(Change("M", "workloads/both.py"))[0] == ["c", "d"]


@pytest.mark.parametrize("change, words", [
    (Change("M", "src/common.py"), "shared file(s) changed, owned by no workload: src/common.py"),
    (Change("M", "pyproject.toml"), "pyproject.toml changed (perfgate's configuration or a dependency file)"),
    (Change("M", "requirements-dev.txt"), "requirements-dev.txt changed"),
    (Change("M", "sub/uv.lock"), "sub/uv.lock changed"),
    (Change("R", "workloads/b2.py", "workloads/b.py"), "workloads/b.py renamed to workloads/b2.py"),
    (Change("C", "workloads/e.py", "workloads/b.py"), "workloads/b.py copied to workloads/e.py"),
    (Change("D", "workloads/b.py"), "workload file workloads/b.py deleted"),
    (Change("M", "lib/x.py", outside=True), "lib/x.py (outside the project)"),
    (Change("A", "workloads/_helpers.py"), "owned by no workload: workloads/_helpers.py"),
    (Change("A", "workloads/b.py"), "new workload file workloads/b.py"),
    (Change("?", "workloads/b.py"), "workloads/b.py changed in a way perfgate does not know ('?')"),
])
def test_when_in_doubt_everything_runs_and_says_why(change, words):
    workloads, reasons = chosen(Change("M", "workloads/a.py"), change)
    assert workloads is None
    assert words in reasons


def test_no_change_at_all_runs_everything():
    assert chosen() == (None, "no file changed since main: nothing to choose by")


def test_a_dependency_file_runs_everything_even_where_a_pattern_claims_it():
    owners = {**OWNERS, "greedy": Owner("workloads/greedy.py", ("**",))}
    assert chosen(Change("M", "setup.cfg"), owners=owners)[0] is None
    assert chosen(Change("M", "docs/x.md"), owners=owners)[0] == ["greedy"]


def test_the_patterns_of_an_edited_workload_file_claim_nothing():
    """The pattern may be what the change wrote: a file only it claims counts as shared."""
    workloads, reasons = chosen(Change("M", "workloads/a.py"), Change("M", "src/sim/step.py"))
    assert workloads is None and "src/sim/step.py" in reasons
    assert chosen(Change("M", "src/sim/step.py"))[0] == ["a"]


def test_many_shared_files_are_named_up_to_five_and_all_recorded():
    changes = [Change("M", f"src/f{i}.py") for i in range(8)]
    s = select(changes, OWNERS, "main")
    assert "src/f4.py and 3 more" in s.reasons[0]
    assert s.to_json()["changed_count"] == 8 and len(s.to_json()["changed"]) == 8


def test_split_cases_skips_the_unselected_with_the_words_the_reports_use():
    s = select([Change("M", "workloads/b.py")], OWNERS, "origin/main")
    cases = [CaseSpec("a", "pr", ("eager",), "cpu"), CaseSpec("b", "pr", ("eager",), "cpu")]
    run, skipped = split_cases(cases, s)
    assert [c.workload for c in run] == ["b"]
    assert [c.key for c in skipped] == ["a/pr/eager/cpu"]
    assert skipped[0].skipped_as_unchanged
    assert skipped[0].message.startswith("skipped: unchanged by this pull request")
    assert "origin/main" in skipped[0].message


# ---------------------------------------------------------------- globs of depends_on

@pytest.mark.parametrize("pattern, path, expected", [
    ("src/sim/**", "src/sim/a.py", True),
    ("src/sim/**", "src/sim/x/y/a.py", True),
    ("src/sim/**", "src/simx/a.py", False),
    ("src/sim/", "src/sim/x/a.py", True),
    ("src/*.py", "src/a.py", True),
    ("src/*.py", "src/x/a.py", False),
    ("**/*.cu", "a/b/c.cu", True),
    ("**/*.cu", "c.cu", True),
    ("data/?.bin", "data/a.bin", True),
    ("data/?.bin", "data/ab.bin", False),
    ("a+b/[x].py", "a+b/[x].py", True),
])
def test_project_globs(pattern, path, expected):
    assert bad_project_glob(pattern) is None
    assert matches_project_glob(pattern, path) is expected


@pytest.mark.parametrize("pattern", ["/etc/passwd", "../x/**", "src/../../x", "a//b", "./src", "C:/x", "a\\b",
                                     "", "x" * 201, 3, "a\nb"])
def test_patterns_that_leave_the_project_are_refused(pattern):
    assert bad_project_glob(pattern, "depends_on pattern") is not None


# ---------------------------------------------------------------- what git says changed

def git(repo: Path, *args: str) -> str:
    out = subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=repo, capture_output=True,
                         text=True, check=True, timeout=60)
    return out.stdout.strip()


def write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)


def project(repo: Path) -> Path:
    """main: pyproject.toml, workloads a and b (a depends on src/sim/), src/sim/step.py, src/common.py; then a
    branch `pr` checked out."""
    write(repo, {"pyproject.toml": "[tool.perfgate]\n", "workloads/a.py": "A = 1\n", "workloads/b.py": "B = 1\n",
                 "src/sim/step.py": "S = 1\n", "src/common.py": "C = 1\n"})
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "main")
    git(repo, "checkout", "-qb", "pr")
    return repo


def catalog(repo: Path) -> dict[str, dict]:
    return {"a": {"file": str(repo / "workloads/a.py"), "depends_on": ["src/sim/**"]},
            "b": {"file": str(repo / "workloads/b.py"), "depends_on": []}}


def selected(repo: Path, since: str = "main", **kw) -> tuple[list[str] | None, str]:
    s = selection_for_run(repo, repo / "pyproject.toml", catalog(repo), since, **kw)
    return (None if s.workloads is None else sorted(s.workloads)), "; ".join(s.reasons)


def test_a_commit_touching_one_workloads_dependency_selects_it(tmp_path):
    repo = project(tmp_path)
    (repo / "src/sim/step.py").write_text("S = 2\n")
    git(repo, "commit", "-qam", "sim")
    assert selected(repo) == (["a"], "a: src/sim/step.py")
    found = changes_since(repo, "main")
    assert not isinstance(found, str) and found[1] == git(repo, "rev-parse", "main")


def test_the_diff_is_against_the_merge_base_not_the_tip_of_ref(tmp_path):
    """main moves on after the branch: its own changes are not this pull request's."""
    repo = project(tmp_path)
    (repo / "workloads/b.py").write_text("B = 2\n")
    git(repo, "commit", "-qam", "b")
    git(repo, "checkout", "-q", "main")
    (repo / "src/common.py").write_text("C = 2\n")
    git(repo, "commit", "-qam", "main moves on")
    git(repo, "checkout", "-q", "pr")
    assert selected(repo) == (["b"], "b: workloads/b.py")


def test_uncommitted_and_untracked_files_count(tmp_path):
    repo = project(tmp_path)
    (repo / "workloads/b.py").write_text("B = 3\n")
    (repo / "workloads/__pycache__").mkdir()  # importing the workloads writes it: no change of the source
    (repo / "workloads/__pycache__/a.cpython-312.pyc").write_bytes(b"")
    assert selected(repo)[0] == ["b"]
    (repo / "src/new_helper.py").write_text("")
    assert selected(repo) == (None, "shared file(s) changed, owned by no workload: src/new_helper.py")


def test_a_given_head_commit_is_compared_not_the_working_tree(tmp_path):
    """What `merge --head` reads: the pull request's commit, from a checkout of the base."""
    repo = project(tmp_path)
    (repo / "workloads/a.py").write_text("A = 2\n")
    git(repo, "commit", "-qam", "a")
    head = git(repo, "rev-parse", "HEAD")
    git(repo, "checkout", "-q", "main")
    (repo / "src/common.py").write_text("dirty\n")  # the working tree's state is not the pull request's
    assert selected(repo, head=head) == (["a"], "a: workloads/a.py")


def test_a_rename_runs_everything(tmp_path):
    repo = project(tmp_path)
    git(repo, "mv", "workloads/b.py", "workloads/b2.py")
    git(repo, "commit", "-qm", "rename")
    assert selected(repo) == (None, "workloads/b.py renamed to workloads/b2.py")


def test_a_deleted_workload_file_runs_everything(tmp_path):
    repo = project(tmp_path)
    git(repo, "rm", "-q", "workloads/b.py")
    git(repo, "commit", "-qm", "gone")
    assert selected(repo) == (None, "workload file workloads/b.py deleted")


def test_the_configuration_runs_everything(tmp_path):
    repo = project(tmp_path)
    (repo / "pyproject.toml").write_text("[tool.perfgate]\nthreads = 1\n")
    git(repo, "commit", "-qam", "config")
    assert selected(repo)[0] is None


def test_all_runs_everything_whatever_changed(tmp_path):
    repo = project(tmp_path)
    (repo / "workloads/b.py").write_text("B = 3\n")
    assert selected(repo, run_all=True) == (None, "--all: every case runs, whatever changed")


@pytest.mark.parametrize("ref, words", [
    ("no-such-branch", "'no-such-branch' is no commit git knows here"),
    ("--output=/tmp/x", "'--output=/tmp/x' is not a git ref"),
])
def test_an_unknown_ref_runs_everything_and_says_why(tmp_path, ref, words):
    repo = project(tmp_path)
    workloads, reasons = selected(repo, ref)
    assert workloads is None
    assert reasons.startswith(f"cannot tell what changed since {ref}: {words}")


def test_no_git_repository_runs_everything(tmp_path):
    (tmp_path / "workloads").mkdir()
    workloads, reasons = selected(tmp_path)
    assert workloads is None and "is not in a git repository" in reasons


def test_a_project_in_a_subfolder_reads_paths_from_its_root(tmp_path):
    top, repo = tmp_path, tmp_path / "proj"
    write(top, {"other/x.py": "", "proj/pyproject.toml": "[tool.perfgate]\n", "proj/workloads/a.py": "",
                "proj/workloads/b.py": "", "proj/src/sim/step.py": ""})
    git(top, "init", "-q", "-b", "main")
    git(top, "add", "-A")
    git(top, "commit", "-qm", "top")
    git(top, "checkout", "-qb", "pr")
    (repo / "workloads/b.py").write_text("B = 9\n")
    git(top, "commit", "-qam", "b")
    assert selected(repo) == (["b"], "b: workloads/b.py")
    (top / "other" / "x.py").write_text("1\n")
    git(top, "commit", "-qam", "outside")
    assert selected(repo) == (None, "shared file(s) changed, owned by no workload: other/x.py (outside the project)")


# ---------------------------------------------------------------- the gate reads the skip as a skip

def ok_case(key_workload: str) -> CaseResult:
    return CaseResult(spec=CaseSpec(key_workload, "pr", ("eager",), "cpu"), status="ok",
                      processes=[ProcessSamples(samples_ns=[1_000_000 + 1_000 * i + 37 * j for j in range(5)],
                                                process_index=i) for i in range(3)])


def test_a_case_skipped_as_unchanged_is_skipped_in_the_verdicts_not_missing_removed_or_failing():
    s = select([Change("M", "workloads/b.py")], OWNERS, "main")
    _, skipped = split_cases([CaseSpec("a", "pr", ("eager",), "cpu")], s)
    baseline = RunResult("base", "pr", {}, cases=[ok_case("a"), ok_case("b")])
    current = RunResult("head", "pr", {}, cases=[*skipped, ok_case("b")],
                        settings={"changed_since": s.to_json()})
    for mode in ("baseline", "against"):
        verdicts = {v.case_key: v for v in compare_runs(current, baseline, mode=mode).verdicts
                    if v.metric == "status"}
        v = verdicts["a/pr/eager/cpu"]
        assert v.kind == "skipped", mode
        assert v.rule.startswith("skipped: unchanged by this pull request")
    assert current.part_of_suite == "the cases a change since main touches"


def test_an_expectation_on_a_skipped_case_is_unknown_not_missed():
    s = select([Change("M", "workloads/b.py")], OWNERS, "main")
    _, skipped = split_cases([CaseSpec("a", "pr", ("eager",), "cpu")], s)
    run = RunResult("head", "pr", {}, cases=skipped)
    rules = parse_rules({"a/*/*/*": ["status == ok"]}, source="test")
    ev = evaluate(run, rules)
    assert [o.outcome for o in ev.outcomes] == ["unknown"]
    assert not ev.gate_failed


# ---------------------------------------------------------------- end to end

WORKLOAD = '''
import torch
from perfgate.workload import Built, Workload


class W(Workload):
    name = "{name}"
    description = "a tiny add (test only)"
    sizes = {{"smoke": {{"n": 8}}, "pr": {{"n": 8}}, "full": {{"n": 8}}}}
    channels_last_applies = False
    depends_on = {depends_on!r}

    def build(self, params, device, dtype, variants):
        return Built(model=torch.nn.Identity(), state=torch.ones(params["n"], device=device, dtype=dtype))

    def step(self, model, state, built, params):
        return model(state) * 0.5 + 1.0
'''


def _two_workload_repo(repo: Path) -> Path:
    """main: workloads one (depends on src/sim/) and two; branch pr: src/sim/kernel.py changed."""
    (repo / "workloads").mkdir()
    (repo / "src" / "sim").mkdir(parents=True)
    (repo / "pyproject.toml").write_text(
        '[tool.perfgate]\nworkloads_dirs = ["workloads"]\nprocesses = 1\n'
        '[tool.perfgate.timing]\nsamples = 2\nmin_time_s = 0.01\nmax_warmup = 3\n'
        '[tool.perfgate.suites.smoke]\nworkloads = ["*"]\ntoggles = ["eager"]\ndevice = "cpu"\n')
    (repo / ".gitignore").write_text("runs/\n")
    (repo / "workloads" / "one.py").write_text(WORKLOAD.format(name="one", depends_on=("src/sim/**",)))
    (repo / "workloads" / "two.py").write_text(WORKLOAD.format(name="two", depends_on=()))
    (repo / "src" / "sim" / "kernel.py").write_text("K = 1\n")
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "main")
    git(repo, "checkout", "-qb", "pr")
    (repo / "src" / "sim" / "kernel.py").write_text("K = 2\n")
    git(repo, "commit", "-qam", "sim")
    return repo


@pytest.mark.slow
def test_run_changed_since_measures_the_touched_workload_and_reports_the_others_skipped(tmp_path):
    repo = _two_workload_repo(tmp_path)
    proc = run_cli("run", "--changed-since", "main", "--processes", "1", "--out", str(repo / "runs" / "a"), cwd=repo)
    assert proc.returncode == 0, proc.stderr + proc.stdout
    assert ("perfgate: --changed-since main: 1 of 2 case(s) skipped: unchanged by this pull request since main; "
            "runs workload(s) one: one: src/sim/kernel.py") in proc.stdout
    results = json.loads((repo / "runs" / "a" / "results.json").read_text())
    by_key = {c["key"]: c for c in results["cases"]}
    assert by_key["one/smoke/eager/cpu"]["status"] == "ok"
    assert by_key["two/smoke/eager/cpu"]["status"] == "skipped"
    assert by_key["two/smoke/eager/cpu"]["metadata"]["skipped_as"] == "unchanged"
    assert results["settings"]["changed_since"]["workloads"] == ["one"]
    summary = (repo / "runs" / "a" / "summary.md").read_text()
    assert "1 skipped (1 unchanged by this pull request)" in summary
    assert "Changed since main: 1 case skipped: unchanged by this pull request" in summary

    # --all: every case, and the reason said
    proc = run_cli("run", "--changed-since", "main", "--all", "--processes", "1", "--out", str(repo / "runs" / "b"),
                   cwd=repo)
    assert proc.returncode == 0, proc.stderr + proc.stdout
    assert "every case runs: --all" in proc.stdout
    results = json.loads((repo / "runs" / "b" / "results.json").read_text())
    assert {c["status"] for c in results["cases"]} == {"ok"}


def test_summary_md_says_which_cases_were_skipped_and_why_and_the_banner_counts_them():
    from perfgate.reports.base import ReportInput
    from perfgate.reports.markdown import MarkdownExporter

    s = select([Change("M", "workloads/b.py")], OWNERS, "origin/main")
    _, skipped = split_cases([CaseSpec("a", "pr", ("eager",), "cpu")], s)
    baseline = RunResult("base", "pr", {}, cases=[ok_case("a"), ok_case("b")])
    current = RunResult("head", "pr", {}, cases=[*skipped, ok_case("b")], settings={"changed_since": s.to_json()})
    text = MarkdownExporter().render(ReportInput(current, compare_runs(current, baseline, mode="against"))).decode()
    assert "1 ok, 1 skipped (1 unchanged by this pull request), 0 failed" in text
    assert ("Changed since origin/main: 1 case skipped: unchanged by this pull request; runs the cases of "
            "workload(s) b (b: workloads/b.py)") in text
    assert "### Regressions" not in text and "newly" not in text.replace("0 newly failing", "")


def test_merge_takes_a_shards_skip_only_where_the_judges_own_selection_skips_it_too():
    """The shards ran the pull request's perfgate: its claim that a case is unchanged is the judge's to make."""
    from perfgate.gating.merged_gate import checked_skips
    from perfgate.running.changes import everything

    head_selection = select([Change("M", "workloads/b.py")], OWNERS, "main")
    _, skipped = split_cases([CaseSpec("a", "pr", ("eager",), "cpu")], head_selection)
    run = RunResult("merged", "pr", {}, cases=[*skipped, ok_case("b")])
    comparison = compare_runs(run, RunResult("base", "pr", {}, cases=[ok_case("b")]), mode="against")

    def kind(selection) -> str:
        (v,) = [v for v in checked_skips(comparison, run, selection).verdicts if v.case_key == "a/pr/eager/cpu"]
        return f"{v.kind}: {v.rule}"

    assert kind(head_selection).startswith("skipped: skipped: unchanged by this pull request")
    assert kind(None) == ("newly-failing: skipped by its shard as unchanged by this pull request, but this judge was "
                          "given no --changed-since, so it runs every case")
    assert kind(everything("main", "pyproject.toml changed")) == (
        "newly-failing: skipped by its shard as unchanged by this pull request, but this judge's selection since "
        "main runs it (every case runs: pyproject.toml changed)")


# ---------------------------------------------------------------- the files GitHub lists (merge --changes)

def test_the_files_github_lists_for_a_pull_request_select_as_git_would(tmp_path):
    from perfgate.running.changes import read_pull_request_files

    repo = project(tmp_path)
    listed = tmp_path / "changes.json"
    listed.write_text(json.dumps([{"status": "modified", "filename": "workloads/b.py", "previous_filename": None},
                                  {"status": "added", "filename": "src/sim/new.py"}]))
    assert read_pull_request_files(listed, repo) == [Change("M", "workloads/b.py"), Change("A", "src/sim/new.py")]
    s = selection_for_run(repo, repo / "pyproject.toml", catalog(repo), "main", listed=listed)
    assert sorted(s.workloads) == ["a", "b"]
    listed.write_text(json.dumps([{"status": "renamed", "filename": "x.py", "previous_filename": "y.py"}]))
    assert selection_for_run(repo, None, catalog(repo), "main", listed=listed).reasons == ("y.py renamed to x.py",)


@pytest.mark.parametrize("text, words", [
    ("{}", "not a list of at most 10000 files"),
    ('[{"status": "added"}]', "entry 0 is not an object with a status and a filename"),
    ('[{"status": 1, "filename": "a"}]', "entry 0 is not an object"),
    ("[", "not valid JSON"),
])
def test_a_bad_list_of_files_is_one_line_for_merge_and_everything_for_a_run(tmp_path, text, words):
    from perfgate.gating.merged_gate import JudgeSelection
    from perfgate.model.config import ConfigError

    repo = project(tmp_path)
    listed = tmp_path / "changes.json"
    listed.write_text(text)
    s = selection_for_run(repo, None, catalog(repo), "main", listed=listed)
    assert s.everything and words in s.reasons[0]
    with pytest.raises(ConfigError, match="perfgate merge --changes: .*" + re.escape(words)):
        JudgeSelection("main", changes_file=str(listed))


def test_the_judges_selection_options_need_changed_since_and_one_source():
    from perfgate.gating.merged_gate import JudgeSelection
    from perfgate.model.config import ConfigError

    with pytest.raises(ConfigError, match="add --changed-since REF"):
        JudgeSelection(None, head="abc")
    with pytest.raises(ConfigError, match="give one"):
        JudgeSelection("main", head="abc", changes_file="x.json")


# ---------------------------------------------------------------- shards of a selection, merged and judged

def _selection_shards(tmp: Path, touched: set[str], count: int) -> tuple[list[Path], object]:
    """What `run --shard i/count --against REF --changed-since REF` leaves: the touched workloads' cases split
    over the shards (each with its base/ run where it measured something), the others skipped in shard 1."""
    from fixtures.shards import ENVIRONMENT, SETTINGS, settings_for, suite_cases

    from perfgate.gating.merge import select_shard
    from perfgate.running.plan import parse_shard
    from perfgate.running.runner import write_results

    owners = {w: Owner(f"workloads/{w}.py") for w in ("operator_rollout", "wave_field", "other")}
    selection = select([Change("M", f"workloads/{w}.py") for w in sorted(touched)], owners, "main")
    chosen, skipped = split_cases(suite_cases(workloads=2, toggles=2), selection)
    def case_result(spec: CaseSpec) -> CaseResult:  # three processes a side: the judge's first look
        return CaseResult(spec=spec, status="ok", duration_s=1.0, processes=[
            ProcessSamples(samples_ns=[1_000_000 + 1_000 * i + 37 * j for j in range(5)], process_index=i)
            for i in range(3)])

    paths = []
    for i in range(1, count + 1):
        mine, record = select_shard(chosen, parse_shard(f"{i}/{count}"), None, settings_for(tmp), "pr", "nvidia-h100")
        settings = {**SETTINGS, "shard": record, "changed_since": selection.to_json(), "against": "main"}
        cases = [*(skipped if i == 1 else []), *(case_result(c) for c in mine)]
        run = RunResult(f"shard-{i}", "pr", dict(ENVIRONMENT), cases=cases, settings=settings)
        path = tmp / "shards" / f"perfgate-shard-{i}" / "results.json"
        write_results(run, path)
        if mine:
            write_results(RunResult(f"shard-{i}-base", "pr", dict(ENVIRONMENT), cases=[case_result(c) for c in mine],
                                    settings=settings), path.parent / "base" / "results.json")
        paths.append(path)
    return paths, selection


def test_merge_judges_the_shards_of_a_selection_and_a_shard_that_measured_nothing_needs_no_base(tmp_path):
    from fixtures.shards import settings_for

    from perfgate.gating.merge import merge_runs
    from perfgate.gating.merged_gate import checked_skips, judge_against

    paths, selection = _selection_shards(tmp_path, {"wave_field"}, 3)  # 2 cases measured: one shard is empty
    run, _ = merge_runs(paths, tmp_path / "m")
    comparison = checked_skips(judge_against(tmp_path / "m", run, settings_for(tmp_path)), run, selection)
    kinds = {v.case_key: v.kind for v in comparison.verdicts if v.metric == "status"}
    assert kinds == {"operator_rollout/pr/eager/cuda": "skipped", "operator_rollout/pr/compile/cuda": "skipped"}
    assert not comparison.gate_failed


def test_a_merge_of_nothing_but_unchanged_cases_passes_saying_so(tmp_path):
    """The pull request touched a workload the suite does not run: no shard measured anything, none has a
    base/ run, and the judge, agreeing, passes with a banner that says nothing was measured."""
    from fixtures.shards import settings_for

    from perfgate.gating.merge import merge_runs
    from perfgate.gating.merged_gate import checked_skips, judge_against
    from perfgate.model.comparison import evidence
    from perfgate.reports.base import ReportInput, banner

    paths, selection = _selection_shards(tmp_path, {"other"}, 2)
    assert selection.workloads == frozenset({"other"})
    assert not any((p.parent / "base").exists() for p in paths)
    run, _ = merge_runs(paths, tmp_path / "m")
    comparison = checked_skips(judge_against(tmp_path / "m", run, settings_for(tmp_path)), run, selection)
    assert {v.kind for v in comparison.verdicts} == {"skipped"} and len(run.cases) == 4
    assert evidence(run, comparison).none_compared == ""
    assert banner(ReportInput(run, comparison)).headline == (
        "PASS: nothing to measure: every one of the 4 cases is skipped: unchanged by this pull request")
    # the same shards before a judge given no selection: every skip is newly failing, and the gate fails
    doubted = checked_skips(judge_against(tmp_path / "m", run, settings_for(tmp_path)), run, None)
    assert {v.kind for v in doubted.verdicts} == {"newly-failing"} and doubted.gate_failed


@pytest.mark.slow
def test_against_with_changed_since_judges_the_skipped_case_skipped_not_dropped_from_the_suite(tmp_path):
    """REF's own plan has both cases; the head skipped one as unchanged: not `newly-failing` (gone), not missing."""
    repo = _two_workload_repo(tmp_path)
    proc = run_cli("run", "--against", "main", "--changed-since", "main", "--gate", "--processes", "1",
                   "--out", str(repo / "runs" / "ab"), cwd=repo)
    assert proc.returncode == 0, proc.stderr + proc.stdout
    comparison = json.loads((repo / "runs" / "ab" / "comparison.json").read_text())
    status = {v["case_key"]: v for v in comparison["verdicts"] if v["metric"] == "status"}
    assert status["two/smoke/eager/cpu"]["kind"] == "skipped"
    assert status["two/smoke/eager/cpu"]["rule"].startswith("skipped: unchanged by this pull request")
    assert not any(v["kind"] == "newly-failing" for v in comparison["verdicts"])
    base = json.loads((repo / "runs" / "ab" / "base" / "results.json").read_text())
    assert [c["key"] for c in base["cases"]] == ["one/smoke/eager/cpu"]  # REF measured only what the head did
