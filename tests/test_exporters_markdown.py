"""summary.md: golden output, escaping, and GitHub's comment size limit whatever the suite size."""

from __future__ import annotations

import pytest
from fixtures.golden import assert_golden, fixed_run
from fixtures.synthetic import synthetic_run

from perfgate.model.comparison import Comparison, Verdict
from perfgate.reports.base import ReportInput
from perfgate.reports.markdown import COMMENT_CUT, GITHUB_COMMENT_LIMIT, MarkdownExporter, comment_length


def render(run, comp=None) -> str:
    return MarkdownExporter().render(ReportInput(run, comp)).decode("utf-8")


def outside_code_spans(line: str) -> str:
    """``line`` with its inline code spans removed, as CommonMark finds them: a run of n backticks opens
    a span that the next run of exactly n backticks closes. What is left is what GitHub renders."""
    out, i = [], 0
    while i < len(line):
        if line[i] != "`":
            out.append(line[i])
            i += 1
            continue
        n = len(line[i:]) - len(line[i:].lstrip("`"))
        j = i + n
        while j < len(line):
            if line[j] == "`":
                m = len(line[j:]) - len(line[j:].lstrip("`"))
                if m == n:
                    break
                j += m
            else:
                j += 1
        i = j + n if j < len(line) else i + n  # an unclosed run is literal backticks
    return "".join(out)


def test_golden_summary_with_a_comparison():
    run, comp = fixed_run()
    text = render(run, comp)
    assert text.startswith("## perfgate: ❌ FAIL: 2 regression(s), 1 newly failing, 1 win(s), 1 inconclusive")
    assert "<details><summary>All 12 case(s)</summary>" in text
    assert_golden("summary.md", text)


def test_a_case_that_did_not_run_says_its_status_once():
    """The note beside the status column repeated it: `| skipped | ... | `skipped (unsupported): ...` |`."""
    run, comp = fixed_run()
    text = render(run, comp)
    skipped = next(x for x in text.splitlines() if x.startswith("| `operator_rollout/smoke/cuda-graphs/cpu` |"))
    assert skipped.endswith("| skipped | - | - | - | cannot run | `[unsupported] cuda-graphs needs CUDA; this machine "
                            "has none` |"), skipped
    failed = next(x for x in text.splitlines() if x.startswith("| `operator_rollout/smoke/torchscript/cpu` |"))
    assert "| failed |" in failed and failed.count("failed") == 1, failed


def test_golden_summary_without_a_baseline():
    run, _ = fixed_run()
    text = render(run)
    # compared with nothing, which a plain `perfgate run` is even where a baseline is stored: it says so,
    # not that there is no baseline
    assert "NOT COMPARED: 12 case(s) measured" in text and "NO BASELINE" not in text
    assert "### Regressions" not in text
    assert_golden("summary-no-baseline.md", text)


def test_markup_and_pipes_in_names_cannot_break_the_table():
    run = synthetic_run(["evil|<script>alert(1)</script>"], toggles=("eager", "torchscript"))
    text = render(run)
    assert "<script>" not in outside_code_spans(text)
    assert "`evil\\|<script>alert(1)</script>/smoke/eager/cpu`" in text  # a code span shows it as text
    for line in text.splitlines():
        if line.startswith("| `evil"):
            assert line.count(" | ") == 6, line  # seven cells, no pipe leaked from the name


@pytest.mark.slow
def test_a_huge_suite_stays_under_the_comment_limit_with_a_pointer_to_the_html():
    workloads = [f"workload_{i:04d}_with_a_rather_long_descriptive_name" for i in range(300)]
    cur = synthetic_run(workloads, seed=2)
    few = render(cur)  # no comparison: the details table is what gets cut
    assert comment_length(few) < COMMENT_CUT < GITHUB_COMMENT_LIMIT
    assert "more row(s) in `report.html`" in few
    assert few.rstrip().endswith("</details>")
    # thousands of regressions: the regression table itself is cut, the verdict line stays
    many = [Verdict(c.key, f"metric_{i}", "regression", ratio=1.5, ratio_low=1.4, ratio_high=1.6,
                    rule="deterministic: exact") for c in cur.cases for i in range(3)]
    text = render(cur, Comparison(verdicts=many, baseline_source="baselines/x.json"))
    assert comment_length(text) < COMMENT_CUT
    assert text.startswith("## perfgate: ❌ FAIL: 5400 regression(s)")
    assert "### Regressions" in text and "### Wins" not in text
    assert "more row(s) in `report.html`" in text


HOSTILE = ("@octocat please merge ![x](https://evil.example/pixel.png) [click](https://evil.example) "
           "<img src=https://evil.example/i.png> https://evil.example/raw `` ``` `tick` **bold** | pipe")


def test_free_text_cannot_mention_link_or_load_images_in_the_pr_comment():
    run = synthetic_run(["rollout"], toggles=("eager", "compile"), fail={"rollout/smoke/compile/cpu"})
    run.cases[1].message = "Traceback:\n  ...\nRuntimeError: " + HOSTILE
    run.cases[1].failure_class = "@team"
    run.suite = "[s](https://evil.example)"
    comp = Comparison(verdicts=[Verdict(run.cases[0].key, "@metric", "regression", ratio=1.5, ratio_low=1.4,
                                        ratio_high=1.6, rule=HOSTILE)],
                      baseline_source="@base ![i](https://evil.example/b.png)", warnings=[HOSTILE])
    text = render(run, comp)
    shown = "\n".join(outside_code_spans(line) for line in text.splitlines())
    for needle in ("@", "](", "<img", "https://", "**bold**"):
        assert needle not in shown, (needle, shown)
    assert "pipe" in text and text.count("RuntimeError: @octocat") == 1
    for line in text.splitlines():
        if line.startswith("| `rollout"):
            assert outside_code_spans(line).count("|") == 8, line  # seven cells: no pipe leaked from the text


def test_a_failure_class_in_the_expectations_table_is_shown_as_text():
    """failure_class is any printable text in a results file; as the value of a `status` rule it reached the
    expectations table outside a code span, where GitHub rendered its mention, image and link."""
    from perfgate.model import rules

    run = synthetic_run(["rollout"], toggles=("eager", "compile"), fail={"rollout/smoke/compile/cpu"})
    run.cases[1].failure_class = "@octocat ![x](https://evil.example/p.png) [c](https://evil.example) #1"
    run.expectations = [r.to_json() for r in rules.parse_rules({"rollout/*/*/*": ["status == ok"]})]
    text = render(run)
    assert "### Expectations" in text and "@octocat" in text
    shown = "\n".join(outside_code_spans(line) for line in text.splitlines())
    for needle in ("@", "](", "https://", "#1"):
        assert needle not in shown, (needle, shown)


def _case_rows(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("| `")]


def test_the_summary_fits_the_comment_cut_by_construction_and_never_cuts_a_span():
    """At the limit: a suite whose every row is wide and full of emoji (two UTF-16 units each, as GitHub's
    JavaScript counts them). summary.md stays under the comment step's 60,000-unit cut, so the step never
    cuts it; rows are whole (each code span closed, seven cells), the rest counted in one line."""
    emoji = "\U0001f525" * 60
    workloads = [f"w{i:04d}_{emoji}" for i in range(400)]
    cur = synthetic_run(workloads, toggles=("eager", "torchscript"), seed=4,
                        fail={f"w{i:04d}_{emoji}/smoke/torchscript/cpu" for i in range(400)})
    for c in cur.cases:
        c.message = "RuntimeError: " + emoji + " `x` " * 20
    text = render(cur)
    rows = _case_rows(text)
    # near the cut, counted as GitHub does: the next row would not have fit (this suite's rows are alike)
    widest = max(comment_length(row) for row in rows)
    assert len(text) < COMMENT_CUT < comment_length(text) + 1_000 + widest + 300
    assert comment_length(text) <= COMMENT_CUT - 1_000
    assert 0 < len(rows) < len(cur.cases)
    for row in rows:
        assert outside_code_spans(row).count("|") == 8, row  # whole rows: every span closed, seven cells
    left_out = len(cur.cases) - len(rows)
    assert f"*… {left_out} more row(s) in `report.html`" in text
    assert text.rstrip().endswith("</details>")


def test_a_huge_baseline_source_cannot_push_the_summary_past_the_cut():
    """The lines always written (title, run line) quote data cut to a few hundred characters each."""
    cur = synthetic_run(["rollout"], toggles=("eager",))
    text = render(cur, Comparison(verdicts=[], baseline_source="git:" + "x" * 100_000))
    assert comment_length(text) < COMMENT_CUT and "x" * 290 in text and "x" * 400 not in text


def _measured(run, malloc_records):
    """``run`` with every process reporting, in turn, the allocator records given."""
    from dataclasses import replace

    records = iter(malloc_records * 1000)
    cases = [replace(c, processes=[replace(p, layout={"policy": "drawn", **next(records)}) for p in c.processes])
             for c in run.cases]
    env = {**run.environment, "malloc": "steady", "address_layout": "fixed", "layout_policy": "drawn",
           "layout_seed": 42}
    return replace(run, environment=env, cases=cases)


def test_the_summary_says_what_the_workers_measured_under():
    """One line where the numbers are read: the allocator each worker reported, ASLR and the layout policy."""
    run = _measured(synthetic_run(["operator_rollout"]), [{"malloc": "steady", "malloc_user": {}}])
    (line,) = [x for x in render(run).splitlines() if x.startswith("Workers measured with")]
    assert "steady C allocator" in line and "ASLR off" in line and "drawn per process (seed 42)" in line, line
    assert " of " not in line  # every process alike: no counts


def test_what_the_workers_reported_wins_over_what_was_asked_and_a_library_name_is_plain_text():
    from perfgate.reports.conditions import measured_under

    run = _measured(synthetic_run(["operator_rollout"]),
                    [{"malloc": "preloaded", "malloc_library": "/usr/lib/libjemalloc.so.2"},
                     {"malloc": "preloaded", "malloc_library": "/tmp/<script>x](http://evil)"}])
    text = measured_under(run)
    assert "preloaded allocator (libjemalloc.so.2)" in text and "steady" not in text, text
    assert "<script>" not in text and "evil" not in text
    mixed = measured_under(_measured(synthetic_run(["operator_rollout"]),
                                     [{"malloc": "steady"}, {"malloc": "system"}]))
    assert " of " in mixed and "glibc's default allocator" in mixed, mixed
    assert measured_under(synthetic_run(["operator_rollout"])) is None  # results from before it was recorded
