"""What a run covers, one line each for the banner and the headers: the planned cases a merge of shards
lacks, what `run --changed-since` chose, the environment change under test. No torch here."""

from __future__ import annotations

from perfgate.model.comparison import Comparison
from perfgate.model.environment_keys import change_under_test
from perfgate.model.results import RunResult
from perfgate.util.formatting import plural


def planned_gap(run: RunResult) -> str:
    """'no result for 4 planned cases (shard(s) 3/3 not merged)': what a merge of shards lacks of its plan
    (``settings.shard.missing_cases``, perfgate.gating.merge); '' for any other run. The gate judges only the cases
    that came, so every banner says which did not."""
    shard = run.settings.get("shard") if isinstance(run.settings, dict) else None
    if not isinstance(shard, dict) or shard.get("index") is not None:
        return ""
    missing, merged, count = shard.get("missing_cases"), shard.get("merged"), shard.get("count")
    if not isinstance(missing, list) or not missing:
        return ""
    absent = [i for i in range(1, count + 1) if i not in merged] \
        if isinstance(count, int) and isinstance(merged, list) else []
    which = (f"shard(s) {', '.join(f'{i}/{count}' for i in absent[:10])}{' ...' if len(absent) > 10 else ''} "
             "not merged" if absent else "their shard did not finish them")
    return f"no result for {plural(len(missing), 'planned case')} ({which})"


def change_selection(run: RunResult) -> str:
    """What `run --changed-since REF` chose, in one line ('every case runs: pyproject.toml changed ...', or
    '12 case(s) skipped: unchanged by this pull request since origin/main; runs workload(s) a: ...'), from
    ``settings.changed_since`` (results.json is untrusted: anything else of that shape is left out); '' when
    the run chose by no change."""
    chosen = run.settings.get("changed_since") if isinstance(run.settings, dict) else None
    if not isinstance(chosen, dict) or not isinstance(chosen.get("since"), str):
        return ""
    reasons = [str(r) for r in chosen.get("reasons") or [] if isinstance(r, str)] \
        if isinstance(chosen.get("reasons"), list) else []
    since = chosen["since"][:100]
    workloads = chosen.get("workloads")
    if not isinstance(workloads, list):
        return f"Changed since {since}: every case runs ({'; '.join(reasons)[:600]})"
    unchanged = sum(1 for c in run.cases if c.skipped_as_unchanged)
    names = ", ".join(str(w) for w in workloads[:20]) or "none"
    return (f"Changed since {since}: {plural(unchanged, 'case')} skipped: unchanged by this pull request; "
            f"runs the cases of workload(s) {names} ({'; '.join(reasons)[:600] or 'no workload file changed'})")


def environment_change(comparison: Comparison | None, limit: int = 8) -> str:
    """The change under test where the two sides ran in different environments (environment_keys.change_under_test)."""
    return change_under_test(comparison.mode, comparison.environment_diff, limit) if comparison is not None else ""
