"""The CLI end to end: the real `python -m perfgate` in a subprocess, tiny workloads, few samples."""

from __future__ import annotations

import json

import click
import pytest
from conftest import REPO, TEST_WORKLOADS, run_cli

# slow: runs the CLI (perfgate run and friends) in subprocesses (the fast loop, pytest -m "not slow", leaves them to CI)
pytestmark = pytest.mark.slow

TINY_RUN = ("--workloads-dir", str(TEST_WORKLOADS), "--samples", "3")


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    """One real run shared by the tests below: the rollout and a test workload, a variant, 2 processes."""
    out = tmp_path_factory.mktemp("run") / "r"
    proc = run_cli("run", *TINY_RUN, "-w", "tiny", "-w", "operator_rollout", "-t", "eager", "-t", "doubled",
                   "-t", "cuda-graphs", "--out", str(out))
    return proc, out


def test_run_writes_results_with_schema_environment_and_raw_samples(tiny_run):
    proc, out = tiny_run
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = json.loads((out / "results.json").read_text())
    assert data["schema"] == "perfgate.results/2"
    assert data["run_id"] == "r" and data["finished_at"]
    env = data["environment"]
    for key in ("torch", "python", "cuda_available", "torch_cuda", "cudnn", "device_name", "compute_capability",
                "cpu_model", "threads", "git_commit", "git_dirty"):
        assert key in env, key
    assert env["threads"] == 1
    assert data["settings"]["processes"] == 2
    cases = {c["key"]: c for c in data["cases"]}
    assert list(cases) == [
        "tiny/smoke/eager/cpu", "tiny/smoke/doubled/cpu", "tiny/smoke/cuda-graphs/cpu",
        "operator_rollout/smoke/eager/cpu", "operator_rollout/smoke/cuda-graphs/cpu",
    ]
    rollout = cases["operator_rollout/smoke/eager/cpu"]
    assert rollout["status"] == "ok"
    assert rollout["spec"]["params"]["T"] == 4 and rollout["spec"]["dtype"] == "float32"
    # adaptive sampling: 2 processes at the first look, more until the step time is settled or the budget
    # is spent; the case says how many and why it stopped
    n = len(rollout["processes"])
    assert n >= 2 and [p["process_index"] for p in rollout["processes"]] == list(range(n))
    sampling = rollout["metadata"]["sampling"]
    assert sampling["processes"] == n and sampling["rule"] == "precision"
    assert sampling["stopped"].startswith(("settled: step time within", "budget:"))
    assert sampling["looks"][0]["processes"] == 2 and sampling["looks"][-1]["processes"] == n
    assert f"{n} processes (" in proc.stdout
    assert env["address_layout"] in ("fixed", "random")
    for p in rollout["processes"]:
        # --samples is the floor; sampling goes on for timing.min_time_s
        assert len(p["samples_ns"]) >= 3 and all(s > 0 for s in p["samples_ns"])
        assert p["steps_per_unit"] == 4 and p["loops"] >= 1 and p["first_call_s"] > 0
        assert p["timer"] == "perf_counter_ns"
    st = rollout["derived"]["step_time_s"]
    assert st["n"] == sum(len(p["samples_ns"]) for p in rollout["processes"]) and st["n_processes"] == n and st["ci_low"] <= st["estimate"] <= st["ci_high"]
    assert cases["tiny/smoke/doubled/cpu"]["status"] == "ok"
    skipped = cases["tiny/smoke/cuda-graphs/cpu"]
    assert skipped["status"] == "skipped" and "needs a CUDA device" in skipped["message"]


def test_run_shows_progress_and_a_table_per_workload(tiny_run):
    proc, out = tiny_run
    assert "[1/5 " in proc.stdout and "ETA" in proc.stdout and "[5/5 " in proc.stdout
    assert "tiny/smoke/eager/cpu ..." in proc.stdout
    assert "operator_rollout [smoke, cpu]" in proc.stdout and "tiny [smoke, cpu]" in proc.stdout
    assert "speedup vs eager" in proc.stdout
    assert "1.00x" in proc.stdout  # eager against itself
    assert "3 ok, 2 skipped" in proc.stdout and str(out / "results.json") in proc.stdout


def test_a_selection_without_suite_is_named_as_one_not_as_the_default_suite(tiny_run):
    proc, out = tiny_run
    label = ("a selection (workloads tiny, operator_rollout; toggles eager, doubled, cuda-graphs) "
             "with defaults from suite 'smoke'")
    assert f"perfgate: 5 case(s) of {label} on cpu" in proc.stdout
    assert "case(s) of suite" not in proc.stdout
    html = (out / "report.html").read_text()
    assert label.replace("'", "&#39;") in html and "suite <b>smoke" not in html
    assert ("Run `r`, a selection `workloads tiny, operator_rollout; toggles eager, doubled, cuda-graphs` with "
            "defaults from suite `smoke`") in (out / "summary.md").read_text()


def test_list_shows_workloads_sizes_toggles_and_suites():
    proc = run_cli("list", "--workloads-dir", str(TEST_WORKLOADS))
    assert proc.returncode == 0, proc.stderr
    assert "operator_rollout:" in proc.stdout and "tiny:" in proc.stdout
    assert "smoke: T=4" in proc.stdout and "variant doubled" in proc.stdout
    line = next(x for x in proc.stdout.splitlines() if x.strip().startswith("cuda-graphs "))
    assert line.endswith("no: needs a CUDA device (this machine has none torch can use)"), line
    assert "this case" not in proc.stdout and line.count("cuda-graphs") == 1
    assert "Suites:" in proc.stdout and "smoke:" in proc.stdout


def assert_one_line_usage_error(proc, *needles):
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("perfgate: error: ")
    assert "Traceback" not in proc.stderr + proc.stdout
    for needle in needles:
        assert needle in lines[0]


@pytest.mark.parametrize("args,needles", [
    (("-w", "no_such_workload"), ("unknown workload 'no_such_workload'", "operator_rollout", "tiny")),
    (("-w", "tiny", "-t", "compiel"), ("unknown toggle 'compiel'", "compile", "eager", "doubled")),
    (("-w", "tiny", "--size", "huge"), ("unknown size 'huge'", "smoke, pr, full")),
    (("--suite", "nightly"), ("unknown suite 'nightly'", "full, pr, smoke")),
], ids=["workload", "toggle", "size", "suite"])
def test_unknown_names_exit_2_listing_valid_ones(tmp_path, args, needles):
    proc = run_cli("run", *TINY_RUN, *args, "--out", str(tmp_path / "r"))
    assert_one_line_usage_error(proc, *needles)
    assert not (tmp_path / "r").exists()  # no empty run folder left behind


def test_a_folder_without_workloads_says_where_it_looked_and_leaves_no_reports_folder(tmp_path):
    """`perfgate run` outside a project (or in one whose workloads folder is empty): one line naming the
    folders searched and what to do, exit 2, and no reports/ (or --out parents) left behind."""
    outside = tmp_path / "outside"
    outside.mkdir()
    proc = run_cli("run", cwd=outside)
    assert_one_line_usage_error(proc, f"no workloads found in {outside / 'workloads'}", "no pyproject.toml",
                                "perfgate init")
    assert list(outside.iterdir()) == []
    project = tmp_path / "project"
    (project / "wl").mkdir(parents=True)
    (project / "pyproject.toml").write_text('[tool.perfgate]\nworkloads_dirs = ["wl"]\n')
    proc = run_cli("run", "--out", str(project / "a" / "b"), cwd=project)
    assert_one_line_usage_error(proc, f"no workloads found in {project / 'wl'}", str(project / "pyproject.toml"))
    assert sorted(p.name for p in project.iterdir()) == ["pyproject.toml", "wl"]
    listed = run_cli("list", cwd=project)  # `list` says the same where its Workloads: section is empty
    assert listed.returncode == 0 and f"(no workloads found in {project / 'wl'} ([tool.perfgate]" in listed.stdout


def test_a_workload_file_that_fails_to_import_names_the_file(tmp_path):
    bad = tmp_path / "broken_workload.py"
    bad.write_text("import torch\nraise RuntimeError('this workload is broken')\n")
    proc = run_cli("run", "--workloads-dir", str(tmp_path), "-t", "eager", "--out", str(tmp_path / "r"))
    assert_one_line_usage_error(proc, str(bad), "RuntimeError: this workload is broken")
    # `list` still lists what did load, shows the error, and exits 2 naming the file
    listed = run_cli("list", "--workloads-dir", str(tmp_path))
    assert listed.returncode == 2, listed.stdout + listed.stderr
    assert "operator_rollout:" in listed.stdout and "RuntimeError: this workload is broken" in listed.stdout
    assert listed.stderr.strip() == f"perfgate: error: 1 workload file(s) failed to load: {bad}"


def test_an_unwritable_out_is_reported_before_any_case_runs(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    proc = run_cli("run", *TINY_RUN, "-w", "tiny", "-t", "eager", "--out", str(blocker / "run"))
    assert_one_line_usage_error(proc, "output directory", "not writable")
    assert "[1/" not in proc.stdout
    proc = run_cli("run", *TINY_RUN, "-w", "tiny", "-t", "eager", "--out", str(tmp_path / "run"),
                   "--compile-cache", str(blocker / "cache"))
    assert_one_line_usage_error(proc, "compile cache", "not writable")
    assert "[1/" not in proc.stdout


@pytest.mark.parametrize("option", [("--baseline", "baselines/x.json"), ("--strict-env",)], ids=["baseline", "strict-env"])
def test_options_against_ignores_are_refused_before_anything_runs(tmp_path, option):
    """--baseline and --strict-env concern a stored baseline, which --against does not read: refused, and
    --help says so."""
    proc = run_cli("run", *TINY_RUN, "-w", "tiny", "-t", "eager", "--against", "HEAD", "--gate", *option,
                   "--out", str(tmp_path / "r"))
    assert_one_line_usage_error(proc, option[0], "--against")
    assert not (tmp_path / "r").exists() and "[1/" not in proc.stdout
    helped = run_cli("run", "--help")
    assert helped.returncode == 0
    text = " ".join(helped.stdout.split())
    assert f"{option[0]}" in text and "Not with --against (refused)" in text


def test_bad_config_is_one_line(tmp_path):
    cfg = tmp_path / "pyproject.toml"
    cfg.write_text("[tool.perfgate]\nthreads = 0\n")
    proc = run_cli("run", "--config", str(cfg))
    assert_one_line_usage_error(proc, str(cfg), "threads must be an integer >= 1")


def test_config_is_found_upward_from_the_current_directory(tmp_path):
    (tmp_path / "pyproject.toml").write_text(
        f'[tool.perfgate]\nworkloads_dirs = ["{TEST_WORKLOADS}"]\nreports_dir = "out"\n'
        '[tool.perfgate.suites.mine]\nworkloads = ["tiny"]\ntoggles = ["eager"]\ndevice = "cpu"\n'
    )
    sub = tmp_path / "src" / "pkg"
    sub.mkdir(parents=True)
    proc = run_cli("run", "--processes", "1", "--samples", "3", cwd=sub)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # reports land next to the pyproject.toml, and LATEST names the run
    latest = (tmp_path / "out" / "LATEST").read_text().strip()
    data = json.loads((tmp_path / "out" / latest / "results.json").read_text())
    assert data["suite"] == "mine" and [c["key"] for c in data["cases"]] == ["tiny/smoke/eager/cpu"]
    assert data["settings"]["config"] == str(tmp_path / "pyproject.toml")


def test_exit_3_when_no_case_could_run(tmp_path):
    proc = run_cli("run", *TINY_RUN, "-w", "fault_raise", "-t", "eager", "--processes", "1",
                   "--out", str(tmp_path / "r"))
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "no case could run" in proc.stderr and "Traceback" not in proc.stderr
    data = json.loads((tmp_path / "r" / "results.json").read_text())
    assert data["cases"][0]["failure_class"] == "error"


def test_readme_documents_the_exit_codes():
    readme = (REPO / "README.md").read_text()
    for line in ("| 0 | ok |", "| 2 | usage or configuration error", "| 3 | infrastructure failure"):
        assert line in readme


@pytest.mark.parametrize("args,needles", [
    # FloatRange(min=1) let nan through (nan < 1 is false): a worker timeout or case budget that never ends
    (("run", "--timeout", "nan"), ("'--timeout'", "'nan' is not a finite number (x>=1)")),
    (("run", "--max-case-s", "inf"), ("'--max-case-s'", "'inf' is not a finite number (x>=1)")),
    (("bisect", "a", "b", "-w", "x", "--threshold", "nan"), ("'--threshold'", "not a finite number")),
    # click's usage errors were a four-line usage block; now one line like every other error
    (("run", "--timeout", "0"), ("'--timeout'", "0.0 is not in the range x>=1", "run --help")),
    (("run", "--no-such-option"), ("No such option '--no-such-option'",)),
    (("report",), ("Missing argument 'RESULTS'", "report --help")),
    (("no-such-command",), ("No such command 'no-such-command'",)),
], ids=["timeout-nan", "max-case-s-inf", "bisect-threshold-nan", "timeout-0", "unknown-option", "missing-argument",
        "unknown-command"])
def test_bad_command_line_values_are_exit_2_and_one_line(tmp_path, args, needles):
    assert_one_line_usage_error(run_cli(*args, cwd=tmp_path, timeout=120), *needles)


def test_a_bare_group_still_shows_its_help():
    proc = run_cli("baseline", timeout=120)
    assert proc.returncode == (2 if hasattr(click.exceptions, "NoArgsIsHelpError") else 0)
    assert "Usage:" in proc.stdout + proc.stderr and "update" in proc.stdout + proc.stderr
