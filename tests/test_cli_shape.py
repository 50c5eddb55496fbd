"""The command line stays thin: every command parses, calls the module that owns the work, prints, and
returns an exit code (docs/architecture.md). The orchestration it calls (perfgate.commands.session for `run`,
perfgate.commands.calibrate, perfgate.gating.merge, perfgate.gating.gate) imports no torch."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import click
import pytest
from conftest import REPO

from perfgate import cli
from perfgate.model.config import ConfigError

MAX_COMMAND_LINES = 40


def command_functions(source: str) -> dict[str, int]:
    """Each click command (or group) callback in ``source``, by name, with its length in lines: from its
    ``def`` to its last line (signature, docstring and body; decorators not counted)."""
    found = {}
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.FunctionDef):
            continue
        for deco in node.decorator_list:
            call = deco.func if isinstance(deco, ast.Call) else deco
            if isinstance(call, ast.Attribute) and call.attr in ("command", "group"):
                found[node.name] = node.end_lineno - node.lineno + 1
    return found


def test_no_command_function_is_longer_than_40_lines():
    lengths = command_functions((REPO / "perfgate" / "cli.py").read_text(encoding="utf-8"))
    too_long = {name: n for name, n in lengths.items() if n > MAX_COMMAND_LINES}
    assert not too_long, f"command functions over {MAX_COMMAND_LINES} lines (move the work out of cli.py): {too_long}"


def test_the_length_check_sees_every_command_click_registers():
    """A command the ast walk missed would escape the length check."""

    def callbacks(group: click.Group) -> set[str]:
        names = set()
        for command in group.commands.values():
            fn = command.callback
            names.add(getattr(fn, "__wrapped__", fn).__name__)
            if isinstance(command, click.Group):
                names |= callbacks(command)
        return names

    found = command_functions((REPO / "perfgate" / "cli.py").read_text(encoding="utf-8"))
    assert callbacks(cli.main) <= set(found)
    assert {"run_cmd", "calibrate_cmd", "merge_cmd", "history_show_cmd"} <= set(found)


def test_the_length_check_catches_a_long_command():
    body = "\n".join(f"    x{i} = {i}" for i in range(45))
    source = f"@main.command('long')\n@handle_errors\ndef long_cmd() -> None:\n{body}\n\n\ndef helper():\n{body}\n"
    assert command_functions(source) == {"long_cmd": 46}


def test_the_orchestration_modules_import_no_torch():
    code = ("import sys, perfgate.cli, perfgate.commands.session, perfgate.commands.calibrate, perfgate.gating.merge, "
            "perfgate.gating.merged_gate, perfgate.gating.gate, perfgate.running.against; print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True,
                         timeout=120)
    assert out.stdout.strip() == "False"


@pytest.mark.parametrize("option", [{"baseline_file": "b.json"}, {"strict_env": True}])
def test_run_options_refuse_a_stored_baselines_option_with_against(option):
    from perfgate.commands.session import RunOptions

    name = "--baseline" if "baseline_file" in option else "--strict-env"
    with pytest.raises(ConfigError, match=f"^{name} does not apply with --against main"):
        RunOptions(against_ref="main", **option)
    assert RunOptions(**option).stored_gate == ("baseline_file" in option)


@pytest.mark.parametrize("ref", ["", "  ", "-x", "--output=/tmp/y"])
def test_run_options_refuse_an_against_ref_that_is_no_ref(ref):
    """`--against "$BASE_REF"` with the variable unset ran as a plain run (gated on the stored baseline)."""
    from perfgate.commands.session import RunOptions

    with pytest.raises(ConfigError, match=r"^--against .*: not a git ref; give a branch, tag or commit"):
        RunOptions(against_ref=ref, gate=True)
    assert RunOptions(against_ref="origin/main").against_ref == "origin/main"


def test_run_options_refuse_a_bad_shard_before_anything_else():
    from perfgate.commands.session import RunOptions

    with pytest.raises(ConfigError, match=r"--shard '2of4' is not I/N"):
        RunOptions(shard="2of4", against_ref="main", baseline_file="b.json")
    assert RunOptions(shard="2/4").shard_part().text == "2/4"


def test_run_options_name_a_selection_that_is_not_the_suite():
    from perfgate.commands.session import RunOptions

    assert RunOptions().selection() is None
    assert RunOptions(suite="smoke", workloads=("tiny",)).selection() is None
    assert RunOptions(workloads=("a", "b*"), size="pr", toggles=("eager",)).selection() == \
        "workloads a, b*; size pr; toggles eager"


def test_a_run_that_fails_before_its_first_case_leaves_no_folder_it_created(tmp_path):
    from perfgate.commands.session import removed_on_error

    made, kept = tmp_path / "made", tmp_path / "kept"
    for folder, created in ((made, [made]), (kept, [])):
        folder.mkdir()
        with pytest.raises(ConfigError), removed_on_error(folder, created):
            raise ConfigError("no cases")
    assert not made.exists() and kept.is_dir()
    with removed_on_error(made, [made]):
        Path(made).mkdir()
    assert made.is_dir()
    # parents it made go too, unless something else landed there meanwhile
    deep = tmp_path / "a" / "b" / "run"
    deep.mkdir(parents=True)
    (tmp_path / "a" / "other").mkdir()
    with pytest.raises(ConfigError), removed_on_error(deep, [deep, deep.parent, deep.parent.parent]):
        raise ConfigError("no cases")
    assert not deep.parent.exists() and (tmp_path / "a" / "other").is_dir()


def test_a_run_narrowed_within_a_suite_records_its_filters():
    """`run --suite S -w W` is not a selection (its suite is S) but holds only part of S's cases: it records
    `settings.filters`, so `baseline update` does not make it the whole baseline (perfgate.judging.baselines)."""
    from perfgate.commands.session import RunOptions

    assert RunOptions(suite="smoke").filters() is None and RunOptions(suite="smoke").selection() is None
    narrowed = RunOptions(suite="smoke", workloads=("rollout",), toggles=("eager", "compile"), device="cpu")
    assert narrowed.selection() is None
    assert narrowed.filters() == "workloads rollout; toggles eager, compile; device cpu"
