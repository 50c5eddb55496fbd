"""perfgate/running/github.py: summary.md goes into $GITHUB_STEP_SUMMARY, appended, and only under Actions."""

from perfgate.running.github import append_step_summary, publish_summary, step_summary_path


def test_outside_actions_nothing_is_written(tmp_path):
    assert step_summary_path({}) is None
    assert append_step_summary("# hi", {}) is None
    assert append_step_summary("# hi", {"GITHUB_STEP_SUMMARY": "  "}) is None


def test_summary_is_appended_not_replaced(tmp_path):
    target = tmp_path / "step.md"
    target.write_text("earlier\n")
    env = {"GITHUB_STEP_SUMMARY": str(target)}
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "summary.md").write_text("## perfgate: PASS")
    assert publish_summary(tmp_path / "run", env) == target
    assert append_step_summary("more", env) == target
    assert target.read_text() == "earlier\n## perfgate: PASS\nmore\n"


def test_a_run_without_summary_publishes_nothing(tmp_path):
    target = tmp_path / "step.md"
    assert publish_summary(tmp_path, {"GITHUB_STEP_SUMMARY": str(target)}) is None
    assert not target.exists()
