"""perfgate.reports.repro and `perfgate repro CASE`: the command printed under a regression reproduces its verdict
when run for real; it is narrowed to the case, carries the run's settings, quotes every piece, and names
the base commit the comparison recorded (or a placeholder); a pattern that matches nothing is exit 2."""

from __future__ import annotations

import fnmatch
import json
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import run_cli
from fixtures.against import CASE

from perfgate.model.comparison import Comparison, Verdict
from perfgate.model.results import CaseResult, CaseSpec, RunResult
from perfgate.reports import repro


def _commands(stdout: str) -> list[str]:
    return [line for line in stdout.splitlines() if line.startswith("perfgate run ")]


def _argv(command: str) -> list[str]:
    argv = shlex.split(command)
    assert argv[0] == "perfgate"
    return [sys.executable, "-m", "perfgate", *argv[1:]]


@pytest.mark.slow
def test_the_printed_command_reproduces_a_regression_and_keeps_both_traces(against_run, tmp_path):
    """Head does 30x the work of HEAD~1 (conftest's shared run, 3 processes of 3 samples): the gate's
    regression, then `perfgate repro`'s command run as printed says regression again; its traces form leaves
    a trace for each side where it says. The commands run in a copy of the repository (they write into it)."""
    shared, run_dir, first = against_run
    assert first.returncode == 1, first.stdout + first.stderr
    base_commit = subprocess.run(["git", "rev-parse", "HEAD~1"], cwd=shared, capture_output=True, text=True,
                                 check=True).stdout.strip()
    # the console, summary.md and report.html say how to reproduce it
    assert f"reproduce {CASE}: perfgate run --against {base_commit}" in first.stdout
    assert f"perfgate run --against {base_commit}" in (run_dir / "summary.md").read_text()
    assert f"perfgate run --against {base_commit}" in (run_dir / "report.html").read_text()

    shown = run_cli("repro", CASE, "--results", str(run_dir), cwd=shared)  # prints, as in the run's repository
    assert shown.returncode == 0, shown.stdout + shown.stderr
    command, traces = _commands(shown.stdout)
    argv = shlex.split(command)
    assert argv[:4] == ["perfgate", "run", "--against", base_commit]
    for option, value in (("--suite", "smoke"), ("-w", "scaled_work"), ("--size", "smoke"), ("-t", "eager"),
                          ("--device", "cpu"), ("--processes", "3"), ("--samples", "3"), ("--threads", "1")):
        assert argv[argv.index(option) + 1] == value, command
    assert "--gate" in argv and "--out" not in argv
    assert "--config" not in argv and "--workloads-dir" not in argv  # what it reads is the folder's own

    repo = tmp_path / "repo"  # the same files and commits, where the commands may write
    shutil.copytree(shared, repo, symlinks=True)

    again = subprocess.run(_argv(command), cwd=repo, capture_output=True, text=True, timeout=300,
                           env=_env())
    assert again.returncode == 1, again.stdout + again.stderr
    assert f"{CASE} (regression step_time)" in again.stdout and "1 case(s)" in again.stdout

    kept = subprocess.run(_argv(traces), cwd=repo, capture_output=True, text=True, timeout=300, env=_env())
    assert kept.returncode == 0, kept.stdout + kept.stderr
    out = repo / shlex.split(traces)[-1]
    for side in (out, out / "base"):
        assert list((side / "tb" / "scaled_work" / "smoke" / "eager").glob("*.pt.trace.json")), side
        assert f"{side.relative_to(repo)}/tb/scaled_work/smoke/eager/" in shown.stdout


def _env() -> dict[str, str]:
    from conftest import cli_env

    return cli_env()


@pytest.mark.slow
def test_a_pattern_prints_one_command_per_case_and_nothing_matched_is_exit_2(tmp_path):
    run_dir = _write_run(tmp_path, ["w/smoke/eager/cpu", "w/smoke/compile/cpu", "v/smoke/eager/cpu"])
    many = run_cli("repro", "w/*", "--results", str(run_dir), cwd=tmp_path)
    assert many.returncode == 0, many.stderr
    assert len(_commands(many.stdout)) == 4  # the command and its traces form, per case
    assert {shlex.split(c)[shlex.split(c).index("-t") + 1] for c in _commands(many.stdout)} == {"eager", "compile"}
    only = run_cli("repro", "w/*", "--results", str(run_dir), "--profile", cwd=tmp_path)
    assert [("--out" in c) for c in _commands(only.stdout)] == [True, True]
    none = run_cli("repro", "x/*", "--results", str(run_dir), cwd=tmp_path)
    assert none.returncode == 2
    (line,) = none.stderr.strip().splitlines()
    assert "'x/*'" in line and "w/smoke/eager/cpu, w/smoke/compile/cpu, v/smoke/eager/cpu" in line


def _case(key: str, sampling: dict | None = None) -> CaseResult:
    workload, size, toggles, device = key.split("/")
    return CaseResult(spec=CaseSpec(workload=workload, size=size, toggles=tuple(toggles.split("+")), device=device),
                      status="ok", metadata={"sampling": sampling} if sampling else {})


def _run(keys: list[str], settings: dict | None = None, sampling: dict | None = None) -> RunResult:
    recorded = {"processes": 2, "threads": 1, "timeout_s": 600.0, "timing": {"samples": 10}, **(settings or {})}
    return RunResult(run_id="r", suite="smoke", environment={}, settings=recorded,
                     cases=[_case(k, sampling) for k in keys])


def _write_run(tmp_path: Path, keys: list[str]) -> Path:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "results.json").write_text(json.dumps(_run(keys).to_json()))
    return run_dir


def test_every_piece_from_the_files_is_shell_quoted():
    workload = "we'ird; rm -rf ~ $(x)*"
    run = _run([f"{workload}/smoke/amp-bf16/cpu"], settings={"config": None})
    r = repro.repro_for(run.cases[0], run, repro.Base("main; echo hi", "test"))
    for command in (r.command, r.traces):
        argv = shlex.split(command)  # the shell reads back exactly the pieces: nothing runs, nothing expands
        assert argv[argv.index("--against") + 1] == "main; echo hi"
        pattern = argv[argv.index("-w") + 1]
        # -w takes a glob: the workload's glob characters are escaped, so it matches that workload only
        assert fnmatch.fnmatchcase(workload, pattern) and not fnmatch.fnmatchcase("we'ird; rm -rf ~ $(x)y", pattern)
    out = shlex.split(r.traces)[-1]
    assert out.startswith(repro.REPRO_OUT + "/") and out.count("/") == repro.REPRO_OUT.count("/") + 1


def test_the_base_is_the_recorded_commit_else_the_ref_else_a_placeholder(tmp_path):
    commit = "a" * 40
    run = _run(["w/smoke/eager/cpu"], settings={"against": "HEAD~1"})
    base_run = RunResult(run_id="b", suite="smoke", environment={"git_commit": commit, "git_dirty": False})
    against = Comparison(verdicts=[], mode="against", baseline_source="git:HEAD~1", baseline=base_run)
    assert repro.base_of(run, against).ref == commit
    read_back = Comparison(verdicts=[], mode="against", baseline_source="git:HEAD~1")
    assert repro.base_of(run, read_back, tmp_path).ref == "HEAD~1"  # no base/results.json: the ref as given
    stored = Comparison(verdicts=[], mode="baseline", baseline_source=str(tmp_path / "none.json"))
    base = repro.base_of(_run(["w/smoke/eager/cpu"]), stored, tmp_path)
    assert base.ref == repro.PLACEHOLDER and not base.known


def test_an_unprintable_against_ref_from_the_file_is_not_printed(tmp_path):
    """settings.against comes from an untrusted results.json: a newline in it ended the `# base:` comment
    line, and what followed stood on a line of its own, run when the printed block is pasted."""
    for ref in ("a\nrm -rf ~ #", "x\rtouch y", "--output=z"):
        run = _run(["w/smoke/eager/cpu"], settings={"against": ref})
        base = repro.base_of(run, Comparison(verdicts=[], mode="against", baseline_source="git:x"), tmp_path)
        assert base.ref == repro.PLACEHOLDER, ref
        lines = "\n".join(repro.repro_for(run.cases[0], run, base).lines("s")).split("\n")
        assert all(line.startswith(("# ", "perfgate run ")) for line in lines), lines


def test_a_run_under_another_layout_policy_is_reproduced_under_it():
    """A run measured with PERFGATE_LAYOUT=fixed (or random) recorded it in environment.layout_policy, but the
    printed command ran under the default policy, drawn: other layouts than the gate's run measured. The same
    for PERFGATE_MALLOC=system (environment.malloc)."""
    run = _run(["w/smoke/eager/cpu"])
    for policy, prefix in (("fixed", "PERFGATE_LAYOUT=fixed perfgate run "), ("random", "PERFGATE_LAYOUT=random perfgate run "),
                           ("drawn", "perfgate run "), ("$(x)", "perfgate run "), (None, "perfgate run ")):
        run = RunResult(run_id="r", suite="smoke", environment={"layout_policy": policy}, settings=run.settings,
                        cases=run.cases)
        r = repro.repro_for(run.cases[0], run, repro.Base("main", "test"))
        assert r.command.startswith(prefix) and r.traces.startswith(prefix), (policy, r.command)
    # the C allocator's policy likewise (docs/gate.md): a reproduction must allocate as the run did
    for env, prefix in (({"malloc": "system"}, "PERFGATE_MALLOC=system perfgate run "),
                        ({"malloc": "steady"}, "perfgate run "), ({"malloc": "x;y"}, "perfgate run "),
                        ({"layout_policy": "fixed", "malloc": "system"},
                         "PERFGATE_LAYOUT=fixed PERFGATE_MALLOC=system perfgate run ")):
        run = RunResult(run_id="r", suite="smoke", environment=env, settings=run.settings, cases=run.cases)
        assert repro.repro_for(run.cases[0], run, repro.Base("main", "test")).command.startswith(prefix), env


def test_sampling_options_follow_how_the_case_was_measured():
    fixed = _run(["w/smoke/eager/cpu"], sampling={"rule": "fixed", "processes": 2})
    assert repro.sampling_options(fixed.cases[0], fixed.settings) == ["--processes", "2"]
    adaptive = _run(["w/smoke/eager/cpu"], sampling={"rule": "comparison", "processes": 5,
                                                     "budget": {"first": 3, "max_processes": 12, "max_seconds": 45.0}})
    assert repro.sampling_options(adaptive.cases[0], adaptive.settings) == ["--max-processes", "12", "--max-case-s", "45"]
    screened = _run(["w/smoke/eager/cpu"], sampling={"rule": "comparison", "processes": 3,
                                                     "budget": {"first": 3, "max_processes": 3, "max_seconds": 60}})
    assert repro.sampling_options(screened.cases[0], screened.settings) == ["--max-case-s", "60"]


def test_confirmed_wins_against_a_stored_baseline_print_the_refresh_command(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    verdicts = [Verdict("a/smoke/eager/cpu", "step_time", "win"), Verdict("b/smoke/eager/cpu", "step_time", "unchanged"),
                Verdict("c/smoke/eager/cpu", "peak_rss_bytes", "win")]
    stored = Comparison(verdicts=verdicts, mode="baseline", baseline_source=str(tmp_path / "baselines/m/smoke.json"))
    command = repro.refresh_command(stored, tmp_path / "reports" / "r1")
    assert shlex.split(command) == ["perfgate", "baseline", "update", "reports/r1", "--baseline",
                                    "baselines/m/smoke.json", "--case", "a/smoke/eager/cpu"]
    against = Comparison(verdicts=verdicts, mode="against", baseline_source="git:main")
    assert repro.refresh_command(against, tmp_path) is None  # no stored baseline to refresh
    other_run = Comparison(verdicts=verdicts, mode="baseline", baseline_source=str(tmp_path / "old" / "results.json"))
    assert repro.refresh_command(other_run, tmp_path) is None


def test_the_console_prints_a_repro_under_each_regression_and_the_refresh_under_wins(tmp_path, monkeypatch):
    from perfgate.reports import console

    monkeypatch.chdir(tmp_path)
    keys = ["a/smoke/eager/cpu", "b/smoke/eager/cpu", "c/smoke/eager/cpu"]
    run = _run(keys)
    base = RunResult(run_id="b", suite="smoke", environment={"git_commit": "c" * 40, "git_dirty": False})
    comparison = Comparison(verdicts=[Verdict(keys[0], "step_time", "regression", ratio=1.5),
                                      Verdict(keys[0], "peak_rss_bytes", "regression", ratio=1.3),
                                      Verdict(keys[1], "step_time", "win", ratio=0.5),
                                      Verdict(keys[2], "step_time", "unchanged", ratio=1.0)],
                            mode="baseline", baseline_source=str(tmp_path / "baselines" / "m" / "smoke.json"),
                            baseline=base)
    text = console.comparison_text(comparison, run=run, run_dir=tmp_path / "reports" / "r")
    repro_lines = [line for line in text.splitlines() if line.startswith("  reproduce ")]
    assert repro_lines == [f"  reproduce {keys[0]}: perfgate run --against {'c' * 40} --suite smoke -w a --size smoke "
                           "-t eager --device cpu --processes 2 --samples 10 --threads 1 --timeout 600 --gate"]
    assert ("Wins: refresh the baseline for these cases with: perfgate baseline update reports/r --baseline "
            f"baselines/m/smoke.json --case {keys[1]}") in text
    # without the run (a caller that has none) the verdicts print as before, with no command
    assert "reproduce" not in console.comparison_text(comparison)


def test_workloads_folders_and_a_compile_cache_given_on_the_command_line_are_repeated(tmp_path, monkeypatch):
    """A run given `--workloads-dir` or `--compile-cache` beyond its configuration: the command repeats them,
    where the folder exists inside the working folder. The configured folder, a folder elsewhere (a path
    from an untrusted file could point the command at any Python files) and one that is not here are left out."""
    project = tmp_path / "project"
    for d in ("workloads", "extra", "cache"):
        (project / d).mkdir(parents=True)
    (project / "pyproject.toml").write_text('[tool.perfgate]\nworkloads_dirs = ["workloads"]\n')
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    monkeypatch.chdir(project)
    recorded = {"config": str(project / "pyproject.toml"), "compile_cache": str(project / "cache"),
                "workloads_dirs": [str(project / "workloads"), str(project / "extra"), str(outside),
                                   str(project / "gone"), "../project/extra", 7]}
    run = _run(["w/smoke/eager/cpu"], settings=recorded)
    argv = repro.run_command(run.cases[0], run, repro.Base("main", "test"))
    assert [argv[i + 1] for i, a in enumerate(argv) if a == "--workloads-dir"] == ["extra"]
    assert argv[argv.index("--compile-cache") + 1] == "cache"
    # the configuration names the same cache: nothing to repeat
    (project / "pyproject.toml").write_text('[tool.perfgate]\nworkloads_dirs = ["workloads", "extra"]\n'
                                             'compile_cache = "cache"\n')
    argv = repro.run_command(run.cases[0], run, repro.Base("main", "test"))
    assert "--workloads-dir" not in argv and "--compile-cache" not in argv


@pytest.mark.slow
def test_recorded_paths_outside_the_checkout_or_in_a_run_folder_are_left_out_and_said_so(tmp_path):
    """results.json is untrusted: a `--config`, `--workloads-dir` or `--compile-cache` it names is printed only
    where it lies in this checkout (the project root) and outside every run folder (the reports folder, any
    folder holding a results.json: an unpacked artifact's Python would run). Each left out gets a comment
    line saying why, its text escaped: a newline in a recorded path cannot start a line of its own."""
    project = tmp_path / "project"
    for d in ("workloads", "extra", "cache", "reports/old/wl", "artifact/run/wl", "artifact/run/cache"):
        (project / d).mkdir(parents=True)
    (project / "pyproject.toml").write_text('[tool.perfgate]\nworkloads_dirs = ["workloads"]\n')
    (project / "other.toml").write_text('[tool.perfgate]\nworkloads_dirs = ["workloads"]\n')
    (project / "reports" / "old" / "results.json").write_text("{}")
    (project / "artifact" / "run" / "evil.toml").write_text('[tool.perfgate]\nworkloads_dirs = ["wl"]\n')
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "cfg.toml").write_text("[tool.perfgate]\n")
    run_dir = project / "artifact" / "run"

    def printed(settings: dict) -> list[str]:
        run = _run(["w/smoke/eager/cpu"], settings=settings)
        (run_dir / "results.json").write_text(json.dumps(run.to_json()))
        out = run_cli("repro", "w/*", "--results", str(run_dir), cwd=project)
        assert out.returncode == 0, out.stdout + out.stderr
        lines = out.stdout.splitlines()
        assert all(line.startswith(("# ", "perfgate run ")) for line in lines), lines  # nothing else runs
        return lines

    hostile = {"config": str(run_dir / "evil.toml"), "compile_cache": str(run_dir / "cache"),
               "workloads_dirs": [str(run_dir / "wl"), str(project / "reports" / "old" / "wl"), str(outside),
                                  "../elsewhere", "gone\nrm -rf ~"]}
    lines = printed(hostile)
    commands, notes = _commands("\n".join(lines)), [line for line in lines if "left out" in line]
    assert commands and not any(o in c for c in commands for o in ("--config", "--workloads-dir", "--compile-cache"))
    assert any("--config" in n and "evil.toml" in n and "a run folder (artifact/run)" in n for n in notes), notes
    assert sum("--workloads-dir" in n for n in notes) == 5 and any("reports folder" in n for n in notes), notes
    assert any("outside this checkout" in n for n in notes) and any("gone\\x0arm -rf ~" in n for n in notes), notes
    assert any("--compile-cache" in n and "a run folder" in n for n in notes), notes
    for config in (str(outside / "cfg.toml"), "/nowhere/ci.toml"):
        why = "outside this checkout" if config.endswith("cfg.toml") else "not a file here"
        lines = printed({"config": config})
        assert not any("--config" in c for c in _commands("\n".join(lines)))
        assert any(line.startswith("# --config") and why in line for line in lines), lines
    # the same kinds of path inside the checkout, outside every run folder: repeated, with no note
    lines = printed({"config": str(project / "other.toml"), "compile_cache": str(project / "cache"),
                     "workloads_dirs": [str(project / "extra")]})
    (command, _) = _commands("\n".join(lines))
    argv = shlex.split(command)
    assert argv[argv.index("--config") + 1] == "other.toml" and argv[argv.index("--workloads-dir") + 1] == "extra"
    assert argv[argv.index("--compile-cache") + 1] == "cache" and not any("left out" in line for line in lines)
