"""perfgate.reports.console: what perfgate prints cannot steer a terminal or a GitHub Actions log, whatever the
data (workload names, failure messages) holds."""

from __future__ import annotations

import re

import pytest
from conftest import run_cli
from fixtures.shards import write_shard_runs

from perfgate.model.results import STATUS_FAILED, CaseSpec, load_results
from perfgate.reports.console import DATA_LINE_LABEL, clean
from perfgate.running.runner import write_results

HOSTILE_NAME = "::error file=perfgate/judging/compare.py,line=1::the gate is broken, merge anyway"
HOSTILE_MESSAGE = ("\x1b]0;owned terminal\x07boom \x1b[2J\x9b31m\r::add-mask::x\n"
                   "  ::warning title=pwned::indented\n##[error]legacy command\n\u202eevil")


def _is_workflow_command(line: str) -> bool:
    """Would GitHub's runner read this log line as a command? (ActionCommand.TryParseV2 trims leading
    whitespace and wants "::"; the legacy TryParse finds "##[" anywhere.)"""
    return line.lstrip().startswith("::") or "##[" in line


def _has_control(text: str) -> bool:
    return bool(re.search("[\x00-\x09\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]", text))


@pytest.mark.parametrize("text", [HOSTILE_NAME, HOSTILE_MESSAGE, f"table\n{HOSTILE_NAME} [pr, cuda]\n  ok",
                                  "\t::error::tabbed", "\r::error::after a carriage return"])
def test_clean_leaves_no_command_and_no_control(text):
    out = clean(text)
    assert not _has_control(out)
    assert not any(_is_workflow_command(line) for line in out.splitlines())
    assert out.count("\n") == text.count("\n")  # the lines stay the lines


def test_clean_leaves_ordinary_text_alone():
    text = "perfgate: 3 case(s)\n  rollout [smoke, cpu]\ntoggle  status\n::  not at the start ::"
    assert clean(text) == text.replace("\n::", "\n" + DATA_LINE_LABEL + "::")


@pytest.mark.slow
def test_merge_prints_a_hostile_workload_name_and_message_as_data(tmp_path):
    """A shard whose case is named like a workflow command and fails with terminal escapes: nothing
    `perfgate merge` prints is a workflow command or carries a control character, and the name still shows."""
    spec = CaseSpec(HOSTILE_NAME, "pr", ("eager",), "cuda", (("T", 20),))
    paths = write_shard_runs(tmp_path, [spec], 1)
    run = load_results(paths[0])
    run.cases[0].status, run.cases[0].failure_class = STATUS_FAILED, "crash"
    run.cases[0].message, run.cases[0].processes = HOSTILE_MESSAGE, []
    write_results(run, paths[0])
    proc = run_cli("merge", str(paths[0]), "--out", str(tmp_path / "m"), timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    printed = proc.stdout + proc.stderr
    assert "the gate is broken, merge anyway" in printed and "evil" in printed
    assert not _has_control(printed), ascii(printed)
    commands = [line for line in printed.splitlines() if _is_workflow_command(line)]
    assert not commands, commands


def test_a_line_after_an_empty_line_is_labelled_itself():
    assert clean("a\n\n::error::x") == f"a\n\n{DATA_LINE_LABEL}::error::x"
    assert clean("\u00a0::error::x") == f"{DATA_LINE_LABEL}\u00a0::error::x"  # .NET's TrimStart trims it too


def test_the_cli_prints_only_through_console_echo():
    """Every print path of the orchestrator goes through console.echo (so through clean). The worker side
    (worker, runner and workers, zygote, lockstep, the ceilings probe) speaks JSON to the orchestrator, not to a person."""
    from pathlib import Path

    import perfgate

    worker_side = {"worker.py", "runner.py", "workers.py", "zygote.py", "lockstep.py", "ceilings.py", "console.py"}
    offenders = []
    for path in Path(perfgate.__file__).parent.rglob("*.py"):
        if path.name in worker_side or path.parent.name == "worker":  # the worker package: perfgate/worker/
            continue
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if re.search(r"\bclick\.(echo|secho)\(|(?<![\w.])print\(|sys\.(stdout|stderr)\.write\(", line):
                offenders.append(f"{path.name}:{n}: {line.strip()}")
    assert not offenders, offenders


@pytest.mark.parametrize("metric, value, shown", [
    ("flops_per_step", 33554432.0, "33554432"),
    ("aten_ops_per_step", 44.0, "44"),
    ("cpu_bytes_allocated_per_step", 3 * 2**20, "3 MiB"),
    ("peak_rss_bytes", 187 * 2**20, "187 MiB"),
    ("step_time", 377e-6, "377 us"),
])
def test_a_verdicts_values_print_alike_in_the_console_and_the_reports(metric, value, shown):
    """The console's verdict table, summary.md, junit.xml and report.html show one value one way
    (once the console printed flops 3.35544e+07 where the report said 33554432, and the reports a
    per-step allocation in raw bytes where the console said MiB)."""
    from perfgate.reports.console import verdict_value
    from perfgate.util.formatting import format_value

    assert verdict_value(metric, value) == format_value(metric, value) == shown


@pytest.mark.parametrize("status, failure_class, message, shown", [
    ("skipped", None, "cuda-graphs: needs a CUDA device (this case runs on cpu)",
     "      skipped  cuda-graphs: needs a CUDA device (this case runs on cpu)  (0.3 s)"),
    ("failed", "timeout", "Traceback ...\nworker exceeded 600 s",
     "      failed   [timeout] worker exceeded 600 s  (0.3 s)"),
])
def test_a_case_outcome_line_says_its_status_once(status, failure_class, message, shown, capsys):
    """The progress line of a skipped case read `skipped  skipped: cuda-graphs: ...` (and a failed one
    `failed   failed (timeout): ...`): the status column, then the status again."""
    from perfgate.commands.session import progress
    from perfgate.model.results import CaseResult

    case = CaseResult(spec=CaseSpec("w", "smoke", ("cuda-graphs",), "cpu"), status=status, duration_s=0.3,
                      message=message, failure_class=failure_class)
    progress("done", 1, 1, case.spec, case, 1.0)
    assert capsys.readouterr().out == shown + "\n"


JUDGED = "the median over worker processes of each process's 10th percentile step time"


def test_the_verdict_tables_say_which_step_time_statistic_they_show():
    """The verdict table printed `current 469 us` (what the gate judges: each process's 10th percentile, their
    median) beside a run table whose step time is the median of all samples, 477 us, without saying so. The
    console, summary.md and report.html name the statistic, from the run's recorded process_quantile."""
    from html import unescape

    from fixtures.synthetic import scenario

    from perfgate.reports.base import ReportInput
    from perfgate.reports.console import comparison_text
    from perfgate.reports.html import HtmlExporter
    from perfgate.reports.markdown import MarkdownExporter

    run, comp = scenario(["operator_rollout"])
    assert any(v.metric == "step_time" and v.kind == "regression" for v in comp.verdicts)
    text = comparison_text(comp, run=run)
    lines = text.splitlines()
    at = next(i for i, line in enumerate(lines) if JUDGED in line)
    assert "step_time baseline and current are" in lines[at] and "geometric mean of the same per-process figures" in lines[at]
    assert lines[at - 1].startswith("regression ") and "step_time" in lines[at - 1]  # right under the table
    assert text.count(JUDGED) == 1  # once, not under every table
    summary = MarkdownExporter().render(ReportInput(run, comp)).decode()
    assert JUDGED in summary and "geometric mean of the same per-process figures" in summary
    html = unescape(HtmlExporter().render(ReportInput(run, comp)).decode())
    section = html[html.index('<section id="regressions">'):]
    assert JUDGED in section[:section.index("</section>")]
    run.settings = {**(run.settings or {}), "gate": {"process_quantile": 0.5}}
    assert "each process's median step time" in comparison_text(comp, run=run)
    assert "each process's median step time" in MarkdownExporter().render(ReportInput(run, comp)).decode()
    assert JUDGED in comparison_text(comp)  # no run: the default


def test_the_settle_line_and_the_run_table_give_one_number_per_case(capsys):
    """A case's settle line said `within +/-1.7%` while its table row said `+/- 0.1%` (every sample pooled).
    Both come from stats.process_half_width now: the line gives the processes' part it settles on and the
    interval for another run, which is the table's."""
    import re

    from fixtures.synthetic import synthetic_run

    from perfgate.commands.session import progress
    from perfgate.judging.sequential import PrecisionRule
    from perfgate.reports.console import run_tables

    run = synthetic_run(["rollout"], toggles=("eager", "compile"))
    case = run.case("rollout/smoke/compile/cpu")
    why = PrecisionRule(0.5, run.process_quantile, run.confidence, run.run_to_run(case)).decide(case, None, 0.95).why
    st = run.step_time(case)
    printed = f"{st.ci_half_width_rel * 100:.1f}%"
    assert re.search(rf"; \+/-{re.escape(printed)} for another run \(\+2% run-to-run\)$", why), why
    compile_row = next(line for line in run_tables(run).splitlines() if line.startswith("compile"))
    assert f"+/- {printed}" in compile_row
    progress("done", 1, 1, case.spec, case, 1.0, run=run)
    assert f"+/- {printed}" in capsys.readouterr().out


def test_a_case_of_one_process_prints_no_interval():
    from dataclasses import replace

    from fixtures.synthetic import synthetic_run

    from perfgate.reports.console import run_tables

    run = synthetic_run(["rollout"], toggles=("eager", "compile"))
    run = replace(run, cases=[replace(c, processes=c.processes[:1]) for c in run.cases])
    table = run_tables(run)
    compile_row = next(line for line in table.splitlines() if line.startswith("compile"))
    assert compile_row.count("(1 process: no interval)") == 2, table  # its step time and its speedup
    assert "+/-" not in table.split("\n", 3)[-1]
