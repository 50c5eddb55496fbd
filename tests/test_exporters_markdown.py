"""summary.md: golden output, escaping, and GitHub's comment size limit whatever the suite size."""

from __future__ import annotations

from fixtures.golden import assert_golden, fixed_run
from fixtures.synthetic import synthetic_run

from perfgate.exporters.base import ReportInput
from perfgate.exporters.markdown import GITHUB_COMMENT_LIMIT, MarkdownExporter
from perfgate.model import Comparison, Verdict


def render(run, comp=None) -> str:
    return MarkdownExporter().render(ReportInput(run, comp)).decode("utf-8")


def test_golden_summary_with_a_comparison():
    run, comp = fixed_run()
    text = render(run, comp)
    assert text.startswith("## perfgate: ❌ FAIL: 2 regression(s), 1 newly failing, 1 win(s), 1 inconclusive")
    assert "<details><summary>All 12 case(s)</summary>" in text
    assert_golden("summary.md", text)


def test_golden_summary_without_a_baseline():
    run, _ = fixed_run()
    text = render(run)
    assert "NO BASELINE" in text and "### Regressions" not in text
    assert_golden("summary-no-baseline.md", text)


def test_markup_and_pipes_in_names_cannot_break_the_table():
    run = synthetic_run(["evil|<script>alert(1)</script>"], toggles=("eager", "torchscript"))
    text = render(run)
    assert "<script>" not in text
    assert "evil\\|&lt;script&gt;alert(1)&lt;/script&gt;" in text
    for line in text.splitlines():
        if line.startswith("| `evil"):
            assert line.count(" | ") == 6, line  # seven cells, no pipe leaked from the name


def test_a_huge_suite_stays_under_the_comment_limit_with_a_pointer_to_the_html():
    workloads = [f"workload_{i:04d}_with_a_rather_long_descriptive_name" for i in range(300)]
    cur = synthetic_run(workloads, seed=2)
    few = render(cur)  # no comparison: the details table is what gets cut
    assert len(few) < GITHUB_COMMENT_LIMIT
    assert "more row(s) not shown to stay under GitHub's comment size limit; see `report.html`" in few
    assert few.rstrip().endswith("</details>")
    # thousands of regressions: the regression table itself is cut, the verdict line stays
    many = [Verdict(c.key, f"metric_{i}", "regression", ratio=1.5, ratio_low=1.4, ratio_high=1.6,
                    rule="deterministic: exact") for c in cur.cases for i in range(3)]
    text = render(cur, Comparison(verdicts=many, baseline_source="baselines/x.json"))
    assert len(text) < GITHUB_COMMENT_LIMIT
    assert text.startswith("## perfgate: ❌ FAIL: 5400 regression(s)")
    assert "### Regressions" in text and "### Wins" not in text
    assert "not shown to stay under GitHub's comment size limit" in text
