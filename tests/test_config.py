"""perfgate.model.config: the nearest [tool.perfgate] upward, --config, defaults, one-line validation errors."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from perfgate.model.config import DEFAULT_SUITES, ConfigError, Settings, TimingSettings, find_pyproject, load

GOOD = """
[project]
name = "user-repo"

[tool.perfgate]
workloads_dirs = ["bench/workloads", "more"]
baselines_dir = "perf/baselines"
reports_dir = "out"
threads = 2
processes = 3
timeout_s = 90
seed = 7
max_memory_mb = 4096
compile_cache = ".cache/compile"
default_suite = "quick"

[tool.perfgate.timing]
samples = 5
min_sample_s = 0.01

[tool.perfgate.suites.quick]
description = "one toggle"
workloads = ["rollout*"]
sizes = ["smoke"]
toggles = ["eager", "compile+amp-bf16"]
device = "cpu"
"""


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))
    return path


def test_nearest_pyproject_upward_skips_files_without_the_table(tmp_path):
    repo = write(tmp_path / "repo" / "pyproject.toml", GOOD)
    write(tmp_path / "repo" / "sub" / "pyproject.toml", "[project]\nname = 'inner'\n")  # no [tool.perfgate]
    cwd = tmp_path / "repo" / "sub" / "deeper"
    cwd.mkdir(parents=True)
    assert find_pyproject(cwd) == repo
    s = load(cwd=cwd)
    assert s.source == repo and s.root == repo.parent


def test_every_key_is_read_and_paths_are_relative_to_the_file(tmp_path):
    repo = write(tmp_path / "pyproject.toml", GOOD)
    s = load(cwd=tmp_path)
    root = repo.parent
    assert s.workloads_dirs == (root / "bench/workloads", root / "more")
    assert s.baselines_dir == root / "perf/baselines" and s.reports_dir == root / "out"
    assert (s.threads, s.processes, s.timeout_s, s.seed, s.max_memory_mb) == (2, 3, 90.0, 7, 4096)
    assert s.default_suite == "quick"
    assert s.timing == TimingSettings(samples=5, min_sample_s=0.01)
    q = s.suite("quick")
    assert (q.workloads, q.sizes, q.toggles, q.device) == (("rollout*",), ("smoke",), ("eager", "compile+amp-bf16"), "cpu")
    assert s.to_json()["max_memory_mb"] == 4096
    assert s.compile_cache == root / ".cache/compile"


def test_config_override_wins_over_the_nearest_file(tmp_path):
    write(tmp_path / "pyproject.toml", GOOD)
    other = write(tmp_path / "elsewhere" / "ci.toml", "[tool.perfgate]\nthreads = 4\n")
    s = load(config=other, cwd=tmp_path)
    assert s.source == other.resolve() and s.threads == 4
    assert s.workloads_dirs == (other.parent.resolve() / "workloads",)


def test_defaults_without_any_config(tmp_path):
    s = load(cwd=tmp_path)
    assert s.source is None
    assert s.workloads_dirs == (tmp_path.resolve() / "workloads",)
    assert (s.threads, s.processes, s.timeout_s, s.max_memory_mb) == (1, 2, 600.0, None)
    assert s.suites == DEFAULT_SUITES and s.default_suite == "smoke"


def test_minimal_table_gets_the_defaults(tmp_path):
    write(tmp_path / "pyproject.toml", "[tool.perfgate]\n")
    s = load(cwd=tmp_path)
    assert s.suites == DEFAULT_SUITES and s.threads == 1 and s.timing == TimingSettings()


def test_with_overrides_ignores_none(tmp_path):
    s = load(cwd=tmp_path)
    t = s.with_overrides(threads=3, processes=None)
    assert isinstance(t, Settings) and t.threads == 3 and t.processes == s.processes


def test_unknown_suite_lists_valid_ones(tmp_path):
    write(tmp_path / "pyproject.toml", GOOD)
    with pytest.raises(ConfigError, match="unknown suite 'nope'; valid suites: quick"):
        load(cwd=tmp_path).suite("nope")


BAD = [
    ("threads = 'two'", "threads must be an integer >= 1, got 'two'"),
    ("threads = 0", "threads must be an integer >= 1, got 0"),
    ("processes = -1", "processes must be an integer >= 1"),
    ("processes = true", "processes must be an integer >= 1, got True"),
    ("timeout_s = 0", "timeout_s must be a finite number > 0"),
    # a boolean is not a number (true was a 1-second timeout)
    ("timeout_s = true", "timeout_s must be a finite number > 0, got True"),
    ("timing = {min_time_s = false}", "timing.min_time_s must be a finite number > 0, got False"),
    ("seed = true", "seed must be an integer, got True"),
    ("max_memory_mb = 0", "max_memory_mb must be an integer >= 1"),
    ("seed = 1.5", "seed must be an integer, got 1.5"),
    ("compile_cache = 1", "compile_cache must be a string, got 1"),
    ("workloads_dirs = [1]", "workloads_dirs[0] must be a string, got 1"),
    ("reports_dir = 3", "reports_dir must be a string"),
    ("threadz = 1", "unknown key(s) threadz in [tool.perfgate]; valid:"),
    ("default_suite = 'nightly'", "default_suite 'nightly' is not a suite; valid: full, pr, smoke"),
    # a list here was a TypeError deep in load, exit 3
    ("default_suite = ['smoke']", "default_suite must be a string, got ['smoke']"),
    ("timing = {samplez = 3}", "unknown key(s) samplez in [tool.perfgate.timing]; valid: samples"),
    ("timing = {samples = 0}", "timing.samples must be an integer >= 1, got 0"),
    ("timing = 3", "timing must be a table, got 3"),
    ("gate = 'strict'", "gate must be a table"),
    ("suites.x = {device = 'tpu'}", "suites.x.device must be one of auto, cpu, cuda, got 'tpu'"),
    ("suites.x = {toggle = ['eager']}", "unknown key(s) toggle in [tool.perfgate.suites.x]; valid: workloads, sizes, toggles"),
    ("suites.x = {toggles = 'eager', sizes = [1]}", "suites.x.sizes[0] must be a string, got 1"),
    ("suites.x = 3", "suites.x must be a table, got 3"),
    ("worker_env = ['A=B']", "worker_env[0] must be a variable name (letters, digits, _) or a prefix ending in *"),
]


@pytest.mark.parametrize("line,expected", BAD, ids=[b[0] for b in BAD])
def test_every_validation_error_is_one_clear_line(tmp_path, line, expected):
    path = write(tmp_path / "pyproject.toml", f"[tool.perfgate]\n{line}\n")
    if "default_suite" in line:
        path.write_text(path.read_text() + textwrap.dedent("""
            [tool.perfgate.suites.smoke]
            [tool.perfgate.suites.pr]
            [tool.perfgate.suites.full]
        """))
    with pytest.raises(ConfigError) as exc:
        load(cwd=tmp_path)
    message = str(exc.value)
    assert expected in message
    assert "\n" not in message
    assert str(path) in message  # names the file


def test_bad_toml_and_missing_config_file(tmp_path):
    path = write(tmp_path / "pyproject.toml", "[tool.perfgate\nthreads = 1\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load(config=path)
    with pytest.raises(ConfigError, match="does not exist"):
        load(config=tmp_path / "missing.toml")
    other = write(tmp_path / "plain.toml", "[project]\nname = 'x'\n")
    with pytest.raises(ConfigError, match=r"has no \[tool.perfgate\] table"):
        load(config=other)
    (tmp_path / "binary.toml").write_bytes(b"[tool.perfgate]\nthreads = \xff\xfe\n")
    with pytest.raises(ConfigError, match=r"binary.toml: not UTF-8 text \(byte 26\)"):
        load(config=tmp_path / "binary.toml")


def test_a_toml_file_over_the_size_cap_is_refused_without_reading_it_all(tmp_path, monkeypatch):
    """pyproject.toml and --config files were read whatever their size; they share the cap of every other file
    perfgate reads (PERFGATE_MAX_FILE_MB, 64 MiB by default)."""
    from perfgate.model import config

    monkeypatch.setenv("PERFGATE_MAX_FILE_MB", "1")
    big = tmp_path / "big.toml"
    big.write_text("[tool.perfgate]\nthreads = 1\n" + "# padding\n" * 110_000)  # just over 1 MiB
    read = []
    real = config.tomllib.loads
    monkeypatch.setattr(config.tomllib, "loads", lambda text: read.append(len(text)) or real(text))
    for call in (lambda: load(config=big), lambda: config.read_toml(big)):
        with pytest.raises(ConfigError) as exc:
            call()
        message = str(exc.value)
        assert message.startswith(f"{big}: larger than 1 MiB") and "PERFGATE_MAX_FILE_MB" in message
        assert "\n" not in message
    assert read == []  # never parsed
    (tmp_path / "pyproject.toml").write_bytes(big.read_bytes())
    with pytest.raises(ConfigError, match="larger than 1 MiB"):
        find_pyproject(tmp_path)
    monkeypatch.setenv("PERFGATE_MAX_FILE_MB", "2")
    assert load(config=big).threads == 1


@pytest.mark.slow
def test_a_too_large_pyproject_is_one_line_exit_2(tmp_path):
    from conftest import cli_env, run_cli

    (tmp_path / "pyproject.toml").write_text("[tool.perfgate]\n" + "# padding\n" * 110_000)
    proc = run_cli("list", cwd=tmp_path, env=cli_env(PERFGATE_MAX_FILE_MB="1"))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "pyproject.toml: larger than 1 MiB" in proc.stderr and proc.stderr.strip().count("\n") == 0


def test_worker_env_names_are_read_and_checked(tmp_path):
    from perfgate.model.config import load

    (tmp_path / "pyproject.toml").write_text('[tool.perfgate]\nworker_env = ["MY_KNOB", "SIM_*"]\n')
    assert load(cwd=tmp_path).worker_env == ("MY_KNOB", "SIM_*")
    (tmp_path / "pyproject.toml").write_text('[tool.perfgate]\nworker_env = "SIM_*"\n')
    assert load(cwd=tmp_path).worker_env == ("SIM_*",)


def test_a_nearest_pyproject_with_a_toml_error_is_an_error_naming_file_and_line(tmp_path):
    # the broken file used to be stepped over, and the parent's threads = 4 applied
    write(tmp_path / "pyproject.toml", "[tool.perfgate]\nthreads = 4\n")
    broken = write(tmp_path / "sub" / "pyproject.toml", "[project]\nname = 'x'\n\n[tool.perfgate\nthreads = 1\n")
    with pytest.raises(ConfigError) as exc:
        load(cwd=tmp_path / "sub")
    message = str(exc.value)
    assert message.startswith(f"{broken}: not valid TOML") and "line 4" in message and "\n" not in message
    with pytest.raises(ConfigError, match="not valid TOML"):
        find_pyproject(tmp_path / "sub")


@pytest.mark.parametrize("text, needle", [
    ("[tool.perfgate]\nthreads = = 1\n", "line 2"),  # item 5: was stepped over for the parent's table
    ("[tool.perfgate]\ndefault_suite = ['smoke']\n", "default_suite must be a string"),  # item 6: was exit 3
], ids=["toml-syntax", "default-suite-list"])
@pytest.mark.slow
def test_a_broken_nearest_pyproject_exits_2_with_one_line(tmp_path, text, needle):
    from conftest import run_cli

    write(tmp_path / "pyproject.toml", "[tool.perfgate]\nthreads = 4\n")
    broken = write(tmp_path / "sub" / "pyproject.toml", text)
    proc = run_cli("list", cwd=tmp_path / "sub")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and str(broken) in lines[0] and needle in lines[0], proc.stderr


def test_every_setting_has_its_key_in_the_declared_table():
    """A field added to TimingSettings or Suite without its key in the table would be an 'unknown key'."""
    import dataclasses

    from perfgate.model.config import Suite, SuiteTable, TimingTable

    assert set(TimingTable.model_fields) == {f.name for f in dataclasses.fields(TimingSettings)}
    assert set(SuiteTable.model_fields) == {f.name for f in dataclasses.fields(Suite)} - {"name"}
