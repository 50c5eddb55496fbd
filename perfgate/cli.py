"""The command line: parse, call, print, exit code. No torch here.

Exit codes: 0 ok | 1 the gate failed | 2 usage or configuration error | 3 infrastructure failure.
"""

from __future__ import annotations

import functools
import math
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from perfgate.model import config as config_mod
from perfgate.model.config import ConfigError
from perfgate.model.results import SchemaError
from perfgate.reports.console import echo
from perfgate.util.storage import UnwritableError

EXIT_OK, EXIT_GATE, EXIT_USAGE, EXIT_INFRA = 0, 1, 2, 3
EXIT_INTERRUPTED = 130  # the shell's code for a command ended by Ctrl-C


def fail(message: str, code: int = EXIT_USAGE) -> None:
    echo(f"perfgate: error: {message}", err=True)
    sys.exit(code)


def handle_errors(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Known errors become one line and a documented exit code, never a traceback."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        from perfgate.running.workers import InfrastructureError

        try:
            return fn(*args, **kwargs)
        except (ConfigError, SchemaError) as exc:
            fail(str(exc), EXIT_USAGE)
        except InfrastructureError as exc:
            fail(str(exc), EXIT_INFRA)
        except UnwritableError as exc:  # a read-only or full disk, a parent that is a file: unwritable output
            fail(str(exc), EXIT_USAGE)
        except KeyboardInterrupt:  # Ctrl-C, or SIGTERM where a command turns it into one (run --against)
            fail("interrupted; its worker processes were ended and any temporary worktrees removed", EXIT_INTERRUPTED)
        except (click.exceptions.ClickException, click.exceptions.Exit, click.exceptions.Abort):
            raise
        except Exception as exc:  # noqa: BLE001 - the last line of defence: one line and exit 3, no traceback
            if os.environ.get("PERFGATE_DEBUG"):
                raise
            fail(unexpected_error_line(exc), EXIT_INFRA)

    return wrapper


def unexpected_error_line(exc: BaseException) -> str:
    """One line for an exception no check foresaw (exit 3): what it was, and where to look."""
    text = " ".join(str(exc).split())[:300]
    return (f"unexpected {type(exc).__name__}: {text or '(no message)'}; this is a perfgate bug or an input it "
            "failed to check; PERFGATE_DEBUG=1 shows the traceback")


def load_settings(config: str | None) -> config_mod.Settings:
    from perfgate.running import inherit

    settings = config_mod.load(config)
    inherit.set_config_env_names(settings.worker_env)  # what workers get beyond the allow-list
    return settings


class FiniteFloat(click.FloatRange):
    """click.FloatRange that also refuses nan and inf: ``nan < 1`` is false, so FloatRange(min=1) let
    `--timeout nan` and `--max-case-s nan` through (every later comparison false: no timeout, no budget)."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number ({self._describe_range()})", param, ctx)
        return number


_NO_ARGS_IS_HELP = getattr(click.exceptions, "NoArgsIsHelpError", ())  # click >= 8.2


class OneLineErrors(click.Group):
    """The top-level group: a usage error (an unknown option, a bad value, a missing argument) is one line
    `perfgate: error: ...` and exit 2, like every other error, not click's usage block."""

    def main(self, *args: Any, standalone_mode: bool = True, **kwargs: Any) -> Any:
        if not standalone_mode:
            return super().main(*args, standalone_mode=False, **kwargs)  # type: ignore[call-overload]  # click's overloads cannot match *args
        try:
            return super().main(*args, standalone_mode=False, **kwargs)  # type: ignore[call-overload]  # as above
        except _NO_ARGS_IS_HELP as exc:  # a bare `perfgate` or `perfgate baseline`: the help, as click shows it
            exc.show()
            sys.exit(exc.exit_code)
        except click.UsageError as exc:
            where = f" (`{exc.ctx.command_path} --help` says what is valid)" if exc.ctx is not None else ""
            fail(" ".join(exc.format_message().split()).rstrip(".") + where, exc.exit_code)
        except click.ClickException as exc:
            fail(" ".join(exc.format_message().split()), exc.exit_code)
        except click.exceptions.Abort:
            fail("aborted", EXIT_INTERRUPTED)


@click.group(cls=OneLineErrors, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="perfgate")
def main() -> None:
    """perfgate: run standard PyTorch workloads under each optimization toggle, measure them honestly,
    gate regressions against baselines."""
    from perfgate.protocol.reaper import keep_environment_private

    keep_environment_private()  # workloads run as this user: they must not read this process's environment


config_option = click.option("--config", "config", type=click.Path(dir_okay=False), default=None,
                             help="pyproject.toml to read [tool.perfgate] from (default: nearest upward).")


@main.command("list")
@config_option
@click.option("--workloads-dir", "workloads_dirs", multiple=True, type=click.Path(file_okay=False),
              help="Also look for workloads here.")
@handle_errors
def list_cmd(config: str | None, workloads_dirs: tuple[str, ...]) -> None:
    """Workloads with their sizes, toggles with their requirements, and suites."""
    from perfgate.commands import listing

    listing.list_catalog(load_settings(config), workloads_dirs)


@main.command("run")
@config_option
@click.option("--suite", "-s", default=None, help="Suite from [tool.perfgate.suites] (default: default_suite).")
@click.option("-w", "--workload", "workloads", multiple=True, help="Only these workloads (glob patterns allowed).")
@click.option("-t", "--toggles", "toggles", multiple=True, help="Toggle sets, e.g. -t eager -t compile+amp-bf16.")
@click.option("--size", default=None, help="Size for every workload (smoke, pr, full, ...).")
@click.option("--device", type=click.Choice(config_mod.DEVICES), default=None, help="Device (default: the suite's).")
@click.option("--out", "out", type=click.Path(file_okay=False), default=None,
              help="Run folder (default: <reports_dir>/<run-id>).")
@click.option("--processes", type=click.IntRange(min=1), default=None,
              help="Exactly this many worker processes per case (turns adaptive sampling off).")
@click.option("--max-processes", type=click.IntRange(min=1), default=None,
              help="Adaptive sampling: at most this many worker processes per case and side (default 16).")
@click.option("--max-case-s", "max_case_s", type=FiniteFloat(min=1), default=None,
              help="Adaptive sampling: about this many seconds of measuring per case at most (default 60).")
@click.option("--threads", type=click.IntRange(min=1), default=None, help="CPU threads per worker (default 1).")
@click.option("--timeout", "timeout_s", type=FiniteFloat(min=1), default=None, help="Seconds per worker process.")
@click.option("--samples", type=click.IntRange(min=1), default=None, help="Timed samples per process.")
@click.option("--max-memory-mb", "max_memory_mb", type=click.IntRange(min=1), default=None,
              help="Address-space limit per worker (MB); an allocation past it fails the case as oom.")
@click.option("--device-memory-gb", "device_memory_gb", type=FiniteFloat(min=0.001), default=None,
              help="Cap each CUDA worker's device memory at this many GiB (a smaller card on a bigger one): "
                   "a case that would not fit fails as oom. CUDA only.")
@click.option("--workloads-dir", "workloads_dirs", multiple=True, type=click.Path(file_okay=False),
              help="Also discover workloads in this folder, for this run.")
@click.option("--compile-cache", "compile_cache", type=click.Path(file_okay=False), default=None,
              help="Keep compiler caches in this folder between runs (default: every case compiles cold).")
@click.option("--shard", "shard", default=None, metavar="I/N",
              help="Run only part I of N of the cases (numbered from 1), balanced by expected cost; "
                   "`perfgate merge` joins the parts.")
@click.option("--shard-costs", "shard_costs", type=click.Path(), default=None,
              help="results.json or baseline file whose case durations balance the shards "
                   "(default: baselines/<machine>/<suite>.json when present, else an estimate).")
@click.option("--gate", is_flag=True, help="Compare with the baseline (or --against REF); exit 1 on a regression.")
@click.option("--baseline", "baseline_file", type=click.Path(dir_okay=False), default=None,
              help="Baseline file (default: <baselines_dir>/<machine-key>/<suite>.json). Not with --against "
                   "(refused): that compares with REF measured in this job.")
@click.option("--against", "against_ref", default=None, metavar="REF",
              help="Run REF (a git ref, in a temporary worktree) and this tree interleaved; compare directly.")
@click.option("--base-python", "base_python", default=None, metavar="PATH",
              help="Run the base side under this Python (another virtual environment: a torch, CUDA or "
                   "dependency upgrade): alone, this tree under it; with --against REF, REF's code under it. "
                   "Both sides sample in lockstep; the comparison names the environments' difference.")
@click.option("--base-env", "base_env", multiple=True, metavar="NAME=VALUE",
              help="Set this variable for the base side's workers only (repeatable): a knob measured as the "
                   "change, alone or with --base-python / --against.")
@click.option("--strict-env", is_flag=True,
              help="Refuse a baseline measured with another torch/CUDA/driver/Python. Not with --against "
                   "(refused): both sides run in this job's environment.")
@click.option("--history", "history", is_flag=True,
              help="Add this run to the history store ([tool.perfgate] history, $PERFGATE_HISTORY_URL).")
@click.option("--baseline-precision", "baseline_precision", is_flag=True,
              help="Measure each case to a baseline's precision (half a plain run's CI, from "
                   "unpaired_min_processes processes): a run to become a baseline. Not with --gate or --against.")
@click.option("--changed-since", "changed_since", default=None, metavar="REF",
              help="Run only the cases of the workloads whose files (or depends_on files) changed since the "
                   "merge base with REF; everything when perfgate's configuration, a dependency file or a shared "
                   "file changed, or git cannot tell. The rest are skipped as unchanged.")
@click.option("--all", "run_all", is_flag=True,
              help="With --changed-since: run every case whatever changed (a CI label's override).")
@handle_errors
def run_cmd(config: str | None, **options: Any) -> None:
    """Run a suite (or a selection) and write results.json with a table of step times per toggle."""
    from perfgate.commands import session

    chosen = session.RunOptions(**options)  # a bad --shard, or an option --against refuses, fails first
    sys.exit(session.run(load_settings(config), chosen))


# ---------------------------------------------------------------- compare, baseline, calibrate: the gate

@main.command("compare")
@config_option
@click.argument("current", type=click.Path(exists=True))
@click.argument("baseline", type=click.Path())
@click.option("--gate", is_flag=True, help="Exit 1 when a regression or a newly failing case is found.")
@click.option("--strict-env", is_flag=True, help="Refuse a baseline measured with another torch/CUDA/driver/Python.")
@handle_errors
def compare_cmd(config: str | None, current: str, baseline: str, gate: bool, strict_env: bool) -> None:
    """Compare CURRENT (a run folder or results.json) with BASELINE (a baseline file or another run)."""
    from perfgate.gating import gate as gate_mod

    settings = load_settings(config)
    sys.exit(gate_mod.compare_files(current, baseline, settings, strict_env=strict_env, gate=gate, echo=echo))


@main.group("baseline")
def baseline_group() -> None:
    """Stored baselines: baselines/<machine-key>/<suite>.json, committed and reviewed like code."""


@baseline_group.command("update")
@config_option
@click.argument("results", nargs=-1, type=click.Path())
@click.option("--allow-failed", is_flag=True, help="Accept a results file with failed cases.")
@click.option("--baseline", "baseline_file", type=click.Path(dir_okay=False), default=None,
              help="Write here instead of <baselines_dir>/<machine-key>/<suite>.json.")
@click.option("--case", "cases", multiple=True, metavar="PATTERN",
              help="Replace only these cases (a key workload/size/toggles/device or a glob; repeatable) in the "
                   "stored baseline; every other case stays.")
@handle_errors
def baseline_update_cmd(config: str | None, results: tuple[str, ...], allow_failed: bool, baseline_file: str | None,
                        cases: tuple[str, ...]) -> None:
    """Make RESULTS (default: the latest run) the baseline of its suite on its machine (with --case: only
    those cases of it). Several RESULTS, runs of one clean commit on this machine, are pooled: each case's
    processes together, and the spread between the runs measured for the gate's unpaired comparisons."""
    from perfgate.commands import baseline

    baseline.update(load_settings(config), results, allow_failed, baseline_file, cases)


@baseline_group.command("show")
@config_option
@click.argument("path", required=False, type=click.Path())
@handle_errors
def baseline_show_cmd(config: str | None, path: str | None) -> None:
    """Print a baseline (default: every baseline under baselines_dir)."""
    from perfgate.commands import baseline

    baseline.show(load_settings(config), path)


@main.command("repro")
@config_option
@click.argument("case")
@click.option("--results", "results", type=click.Path(exists=True), default=None,
              help="A run folder or its results.json (default: the latest run).")
@click.option("--profile", "traces_only", is_flag=True,
              help="Only the form that keeps both sides' traces (one lockstep pair, into a known folder).")
@handle_errors
def repro_cmd(config: str | None, case: str, results: str | None, traces_only: bool) -> None:
    """The command that measures CASE alone, base and head in lockstep with the settings its run used
    (`perfgate run --against BASE ...`), and a form that keeps both traces. CASE: a key as perfgate prints
    it (workload/size/toggles/device) or a glob of keys; one command per case it matches."""
    from perfgate.gating.comparison_file import load_comparison_file
    from perfgate.reports import repro
    from perfgate.running import run_folders

    if results is None:
        latest = run_folders.latest_run_dir(load_settings(config).reports_dir)
        if latest is None:
            raise ConfigError("no run found in the reports folder; give --results RUN_DIR or run `perfgate run` first")
        results = str(latest)
    run, run_dir = repro.load_run(results)
    for line in repro.command_lines(case, run, load_comparison_file(run_dir), run_dir, traces_only=traces_only):
        echo(line)


@main.command("calibrate")
@config_option
@click.option("--suite", "-s", default=None, help="Suite (default: default_suite).")
@click.option("-w", "--workload", "workloads", multiple=True, help="Only these workloads.")
@click.option("-t", "--toggles", "toggles", multiple=True, help="Only these toggle sets.")
@click.option("--rounds", type=click.IntRange(min=2), default=None,
              help="A/A runs per case (default 3; 10 with --write, which needs 8 or more).")
@click.option("--processes", type=click.IntRange(min=1), default=None,
              help="Exactly this many worker processes per round (default: adaptive, as `perfgate run`).")
@click.option("--samples", type=click.IntRange(min=1), default=None, help="Timed samples per process.")
@click.option("--write", is_flag=True,
              help="Store each case's noise floor and run-to-run term (its upper bound) in the baseline.")
@click.option("--baseline", "baseline_file", type=click.Path(dir_okay=False), default=None,
              help="Baseline to write to (default: <baselines_dir>/<machine-key>/<suite>.json).")
@click.option("--ceilings/--no-ceilings", default=True, show_default=True,
              help="Also measure peak FLOP/s and memory bandwidth (the roofline); --write stores them.")
@click.option("--ceilings-only", is_flag=True, help="Measure only the ceilings (seconds), no A/A rounds.")
@click.option("--sizes", is_flag=True,
              help="Instead: check that the suite's size (default suite pr) has full's bound class on this device, "
                   "and find the size that keeps it; --write records it in the suite's table of pyproject.toml.")
@click.option("--budget-s", type=FiniteFloat(min=1), default=None,
              help="With --sizes: seconds the whole check may take (default 300).")
@click.option("--out", type=click.Path(dir_okay=False), default=None,
              help="With --sizes: the JSON file of the check (default <reports_dir>/size-check-<cpu|cuda>.json).")
@handle_errors
def calibrate_cmd(config: str | None, sizes: bool, budget_s: float | None, out: str | None, **options: Any) -> None:
    """Repeated A/A runs of each case: noise within and between processes, smallest detectable change.
    With --sizes: whether the suite's size keeps full's regime here, and a size that does."""
    if sizes:
        from perfgate.commands import sizes as sizes_mod

        chosen = sizes_mod.options_from_calibrate(options, budget_s, out)
        sizes_mod.check_sizes(load_settings(config), chosen)
        return
    if budget_s is not None or out is not None:
        raise ConfigError(f"{'--budget-s' if budget_s is not None else '--out'} belongs to calibrate --sizes")
    from perfgate.commands import calibrate

    calibrate.calibrate(load_settings(config), calibrate.CalibrateOptions(**options))


# ---------------------------------------------------------------- perfgate merge

@main.command("merge")
@config_option
@click.argument("results", nargs=-1, required=True, type=click.Path())
@click.option("--out", "out", type=click.Path(file_okay=False), required=True,
              help="Folder for the merged run (results.json, reports; traces copied from the shards).")
@click.option("--gate", is_flag=True, help="Judge the merged run as one; exit 1 on a regression or newly failing case.")
@click.option("--baseline", "baseline_file", type=click.Path(dir_okay=False), default=None,
              help="Compare with this baseline file (default: the shards' own --against verdicts, else "
                   "<baselines_dir>/<machine-key>/<suite>.json).")
@click.option("--strict-env", is_flag=True, help="Refuse a baseline measured with another torch/CUDA/driver/Python.")
@click.option("--rejudge", is_flag=True,
              help="Judge the shards' raw --against samples by this perfgate's rules instead of reading the "
                   "shards' own verdicts (CI: the base commit's perfgate judges the pull request).")
@click.option("--expect-suite", "expect_suite", default=None, metavar="SUITE",
              help="With --rejudge: plan SUITE from this perfgate's configuration and workloads; a case of it "
                   "that no shard measured fails the gate.")
@click.option("--changed-since", "changed_since", default=None, metavar="REF",
              help="With --rejudge: a case a shard skipped as unchanged passes only when this perfgate's own "
                   "selection since REF (its workloads, git) skips it too; without it no such skip is taken.")
@click.option("--head", "head", default=None, metavar="COMMIT",
              help="With --changed-since: the pull request's commit (default: this checkout's working tree).")
@click.option("--changes", "changes_file", type=click.Path(dir_okay=False), default=None, metavar="FILE",
              help="With --changed-since: the pull request's files as GitHub lists them (a JSON list of objects "
                   "with status, filename, previous_filename), instead of asking git.")
@click.option("--all", "run_all", is_flag=True, help="With --changed-since: this judge's selection is every case.")
@handle_errors
def merge_cmd(config: str | None, results: tuple[str, ...], out: str, gate: bool, baseline_file: str | None,
              strict_env: bool, rejudge: bool, expect_suite: str | None, changed_since: str | None,
              head: str | None, changes_file: str | None, run_all: bool) -> None:
    """Join shard results (files, run folders, or a folder of downloaded run folders) into one run.

    Refuses shards of different suites, environments, settings or schema versions, and a case twice.
    With --gate (or --baseline) the merged run is judged as one: the shards' own verdicts from
    `run --against` when they have them, else a comparison with the stored baseline. With --rejudge the
    shards' verdicts are not read: this perfgate judges their raw --against samples again, and with
    --changed-since takes a shard's skip of an unchanged case only where its own selection skips it too.
    Under --gate, summary.md is appended to $GITHUB_STEP_SUMMARY when set."""
    from perfgate.gating import merge, merged_gate

    merged_gate.check_rejudge_options(rejudge, baseline_file, expect_suite, changed_since)
    selection = merged_gate.JudgeSelection(changed_since, head, changes_file, run_all)
    run = merge.merge_into(results, Path(out))
    settings = load_settings(config) if (gate or baseline_file or rejudge) else None
    sys.exit(merged_gate.judge_merged(run, results, Path(out), settings, gate=gate, baseline_file=baseline_file,
                                      strict_env=strict_env, rejudge=rejudge, expect_suite=expect_suite,
                                      selection=selection))


# ---------------------------------------------------------------- perfgate report

@main.command("report")
@config_option
@click.argument("results", type=click.Path(exists=True))
@click.option("--baseline", default=None, type=click.Path(exists=True, dir_okay=False),
              help="Compare against this stored baseline file (default: the verdicts in the run's comparison.json, if any).")
@click.option("--against-results", "against_results", default=None, type=click.Path(exists=True),
              help="Compare against another run's results.json (or its folder).")
@click.option("--out", "out", default=None, type=click.Path(file_okay=False),
              help="Folder for the reports (default: next to RESULTS).")
@click.option("--format", "formats", default="html,md,junit", show_default=True,
              help="Comma-separated: html, md, junit, csv, json.")
@handle_errors
def report_cmd(config: str | None, results: str, baseline: str | None, against_results: str | None,
               out: str | None, formats: str) -> None:
    """Write report.html, summary.md, junit.xml (and csv/json) for a results.json, optionally compared."""
    from perfgate.commands import report

    report.write_reports(results, baseline, against_results, out, formats, lambda: load_settings(config))


# ---------------------------------------------------------------- perfgate tensorboard

@main.command("tensorboard")
@config_option
@click.argument("run_dir", required=False, type=click.Path(file_okay=False))
@click.option("--port", type=click.IntRange(min=0, max=65535), default=6006, help="Port (0: a free one).")
@click.option("--host", default="127.0.0.1", help="Interface to listen on.")
@handle_errors
def tensorboard_cmd(config: str | None, run_dir: str | None, port: int, host: str) -> None:
    """Start TensorBoard on a run's traces and scalars (default: the latest run); Ctrl-C stops it."""
    from perfgate.commands import tbserver
    from perfgate.running import run_folders

    if run_dir is None:
        latest = run_folders.latest_run_dir(load_settings(config).reports_dir)
        if latest is None:
            raise ConfigError("no run found in the reports folder; give RUN_DIR or run `perfgate run` first")
        run_path = latest
    else:
        run_path = Path(run_dir)
    tbserver.serve(run_path, host, port)


# ---------------------------------------------------------------- perfgate trace

@main.command("trace")
@config_option
@click.argument("case")
@click.option("--results", "results", default=None, type=click.Path(), metavar="RUN_DIR",
              help="The run folder (or its results.json); default: the latest run.")
@handle_errors
def trace_cmd(config: str | None, case: str, results: str | None) -> None:
    """Print CASE's profiler trace files (base and head where the run was compared) and how to open them
    in Perfetto. CASE is a case key or a glob over them (`tight_conv/*/eager/cpu`)."""
    from perfgate.gating import comparison_file
    from perfgate.reports import traces
    from perfgate.running import run_folders

    if results is None:
        run_dir = run_folders.latest_run_dir(load_settings(config).reports_dir)
        if run_dir is None:
            raise ConfigError("no run found in the reports folder; give --results RUN_DIR or run `perfgate run` first")
    else:
        run_dir = Path(results) if not Path(results).is_file() else Path(results).parent
    echo(traces.trace_text(run_dir, case, comparison_file.load_comparison_file(run_dir)))


# ---------------------------------------------------------------- perfgate history, bisect

history_url_option = click.option("--history-url", "history_url", default=None, metavar="URL",
                                  help="Store URL (default: $PERFGATE_HISTORY_URL, [tool.perfgate] history, "
                                       "sqlite:///.perfgate/history.db).")
metric_option = click.option("--metric", default="step_time", show_default=True,
                             help="Metric: step_time, throughput_steps_per_s, first_call_s, or a profile metric.")


@main.group("history")
def history_group() -> None:
    """Every run kept in a database: series per case, change points, trend report (docs/history.md)."""


@history_group.command("add")
@config_option
@history_url_option
@click.argument("runs", nargs=-1, required=True)
@click.option("--commit", default=None, help="The run's commit (default: results.json's, else git HEAD).")
@click.option("--branch", default=None, help="The run's branch (default: results.json's, else git's).")
@handle_errors
def history_add_cmd(config: str | None, history_url: str | None, runs: tuple[str, ...], commit: str | None,
                    branch: str | None) -> None:
    """Add RUNS (run folders, results.json files, or folders of run folders) to the history; a run
    already there is left as it is."""
    from perfgate.history import commands

    for line in commands.add(load_settings(config), list(runs), history_url, commit, branch):
        echo(line)


series_options = [
    click.option("-w", "--workload", "patterns", multiple=True,
                 help="Only cases whose workload or key matches (glob; repeatable)."),
    metric_option,
    click.option("--since", default=None, help="Only runs started at or after this date (YYYY-MM-DD...)."),
    click.option("--last", type=click.IntRange(min=1), default=None, help="Only each case's last N runs on each machine."),
    click.option("--branch", default=None, help="Only runs of this branch."),
    click.option("--machine", "machine_key", default=None, help="Only runs on this machine key."),
]


def _series_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    for opt in reversed(series_options):
        fn = opt(fn)
    return fn


@history_group.command("show")
@config_option
@history_url_option
@_series_options
@click.option("--format", "fmt", type=click.Choice(["table", "csv", "json"]), default="table", show_default=True)
@handle_errors
def history_show_cmd(config: str | None, history_url: str | None, patterns: tuple[str, ...], metric: str,
                     since: str | None, last: int | None, branch: str | None, machine_key: str | None,
                     fmt: str) -> None:
    """Each case's series of METRIC: commit, date, value, CI (table), or csv/json for notebooks."""
    from perfgate.history import commands

    echo(commands.show(load_settings(config), history_url, patterns, metric, since, last, branch,
                             machine_key, fmt), nl=False)


@history_group.command("detect")
@config_option
@history_url_option
@_series_options
@click.option("--all-metrics", is_flag=True, help="Every metric in the store, not only --metric.")
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
@click.option("--fail-on-regression", is_flag=True, help="Exit 1 when a regression (step or creep) is found.")
@handle_errors
def history_detect_cmd(config: str | None, history_url: str | None, patterns: tuple[str, ...], metric: str,
                       since: str | None, last: int | None, branch: str | None, machine_key: str | None,
                       all_metrics: bool, fmt: str, fail_on_regression: bool) -> None:
    """Change points (steps) and creep in each case's series, with commit range, size and CI."""
    from perfgate.history import commands

    text, regressions = commands.detect(load_settings(config), history_url, patterns, metric, since, last, branch,
                                        machine_key, all_metrics, fmt)
    echo(text, nl=False)
    if fail_on_regression and regressions:
        sys.exit(EXIT_GATE)


@history_group.command("report")
@config_option
@history_url_option
@_series_options
@click.option("--all-metrics", is_flag=True, help="A chart per metric in the store, not only --metric.")
@click.option("--out", "out", type=click.Path(dir_okay=False), default="history.html", show_default=True,
              help="The HTML file to write.")
@handle_errors
def history_report_cmd(config: str | None, history_url: str | None, patterns: tuple[str, ...], metric: str,
                       since: str | None, last: int | None, branch: str | None, machine_key: str | None,
                       all_metrics: bool, out: str) -> None:
    """history.html: an SVG trend chart per case and metric, change points marked."""
    from perfgate.history import commands

    path = commands.report(load_settings(config), history_url, patterns, metric, since, last, branch, machine_key,
                           all_metrics, Path(out))
    echo(f"wrote {path}")


@main.command("bisect")
@config_option
@click.argument("good")
@click.argument("bad")
@click.option("-w", "--workload", "case", required=True,
              help="The case: a workload name (its smoke size, eager, cpu) or a key workload/size/toggles/device.")
@click.option("--metric", default="step_time", show_default=True, help="Only step_time is bisected.")
@click.option("--processes", type=click.IntRange(min=1), default=None, help="Worker process pairs per measurement.")
@click.option("--samples", type=click.IntRange(min=1), default=None, help="Timed samples per process.")
@click.option("--threshold", type=FiniteFloat(min=0.001), default=None,
              help="Relative change that counts as the step (default: half of GOOD..BAD's measured change).")
@handle_errors
def bisect_cmd(config: str | None, good: str, bad: str, case: str, metric: str, processes: int | None,
               samples: int | None, threshold: float | None) -> None:
    """Find the first commit between GOOD and BAD where CASE's step time changed, measuring commits
    pairwise in lockstep in temporary worktrees (your checkout and branches are never touched)."""
    from perfgate.history import commands

    sys.exit(commands.bisect(load_settings(config), good, bad, case, metric, processes, samples, threshold,
                             echo))


@main.command("init")
@click.option("--gpu-runner", "gpu_runner", default=None, metavar="LABEL",
              help="Label of your self-hosted GPU runner: adds a gpu suite and measures baselines there.")
@click.option("--suite-only", is_flag=True, help="Write [tool.perfgate] and workloads/ only, no workflows.")
@click.option("--force", is_flag=True, help="Replace an existing [tool.perfgate] table and files init wrote before.")
@click.option("--action", "action", default=None, metavar="OWNER/REPO@SHA",
              help="The perfgate action the workflows call, pinned by commit (default: this release's).")
@handle_errors
def init_cmd(gpu_runner: str | None, suite_only: bool, force: bool, action: str | None) -> None:
    """Set perfgate up in this git repository: [tool.perfgate] in pyproject.toml, an example workload,
    and the pull-request and baselines workflows. Running it again changes nothing."""
    from perfgate.commands import init

    init.initialize(gpu_runner, suite_only, force, action)


@main.command("doctor")
@config_option
@handle_errors
def doctor_cmd(config: str | None) -> None:
    """What this machine can run (torch, CUDA, compiler, threads, clock pinning, TensorBoard, a browser),
    how the gate will judge each stored baseline, and what to fix, one line each. Exit 3 when perfgate cannot measure here."""
    from perfgate.commands import doctor

    sys.exit(EXIT_INFRA if doctor.report(load_settings(config)) else EXIT_OK)


if __name__ == "__main__":
    main()
