"""Why memory grew: a step's allocation sites (perfgate/worker/allocations.py, through the real torch.profiler)
and a memory regression's site diff in the reports (perfgate/reports/allocations.py: console, summary.md,
report.html, report.json). The end-to-end run is in tests/test_memory_claims.py."""

from __future__ import annotations

import json
import pickle
from dataclasses import replace

import pytest
import torch
from fixtures.synthetic import synthetic_run

from perfgate.model.comparison import Comparison, Verdict
from perfgate.model.results import RunResult
from perfgate.reports import allocations
from perfgate.reports.base import ReportInput
from perfgate.reports.console import comparison_text
from perfgate.reports.html import HtmlExporter
from perfgate.reports.json import JsonExporter
from perfgate.reports.markdown import MarkdownExporter
from perfgate.worker import allocations as worker_allocations

MIB = 1 << 20


def grow_buffer(x: torch.Tensor, mib: int) -> torch.Tensor:
    """The named function a head grows: a temporary of ``mib`` MiB every step."""
    return torch.zeros(mib * MIB // 4, device=x.device)


def a_step(x: torch.Tensor, mib: int) -> torch.Tensor:
    buf = grow_buffer(x, mib)
    return torch.tanh(x @ x) + 0.0 * buf[0]


# ---------------------------------------------------------------- the worker's side: real profiler events


def test_a_cpu_step_names_the_function_and_op_that_allocated_and_the_bytes():
    x = torch.randn(16, 16)
    detail = worker_allocations.cpu_sites(lambda: a_step(x, 8))
    top = detail["sites"][0]
    assert top["site"] == "grow_buffer (test_allocations.py)" and top["op"] == "aten::zeros"
    assert top["bytes_per_step"] == 8 * MIB and top["allocations_per_step"] >= 1
    assert top["file"] == __file__ and top["line"] == grow_buffer.__code__.co_firstlineno  # the function's line
    assert detail["steps"] == 1 and detail["total_bytes_per_step"] >= 8 * MIB
    assert sum(s["bytes_per_step"] for s in detail["sites"] if s["site"].startswith("grow_buffer")) == 8 * MIB


def test_frames_inside_torch_perfgate_and_the_standard_library_are_no_site():
    roots = worker_allocations._internal_roots()
    torch_frame = (torch.__file__, 1, "zeros")
    mine = (__file__, 30, "grow_buffer")
    assert worker_allocations.user_frame([torch_frame, mine], roots) == mine
    # the profiler's tracer names files relative to the sys.path entry that holds them
    shortened = ("torch/nn/modules/module.py", 1775, "_call_impl")
    assert worker_allocations.user_frame([shortened, ("contextlib.py", 1, "inner"), mine], roots) == mine
    assert worker_allocations.user_frame([torch_frame, (json.__file__, 3, "dumps")], roots) is None


def test_an_allocator_snapshot_gives_each_allocation_to_its_first_frame_outside_torch():
    """The CUDA path's reading of a snapshot (torch.cuda.memory._snapshot's shape), without a GPU."""
    frames = [{"filename": torch.__file__, "line": 5, "name": "zeros"},
              {"filename": "/repo/workloads/w.py", "line": 21, "name": "grow_buffer"}]
    snapshot = {"segments": [], "device_traces": [[
        {"action": "alloc", "size": 32 * MIB, "frames": frames},
        {"action": "free_requested", "size": 32 * MIB, "frames": frames},
        {"action": "alloc", "size": 512, "frames": [{"filename": "/repo/workloads/w.py", "line": 9, "name": "step"}]},
        {"action": "alloc", "size": 256, "frames": []},
    ]]}
    detail = worker_allocations.snapshot_sites(snapshot, 0, worker_allocations._internal_roots())
    assert [(s["site"], s["line"], s["bytes_per_step"]) for s in detail["sites"]] == [
        ("grow_buffer (w.py)", 21, 32 * MIB), ("step (w.py)", 9, 512), (worker_allocations.NO_FRAME, None, 256)]
    assert worker_allocations.snapshot_sites(snapshot, 1, ())["sites"] == []  # another device's history


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.xfail(strict=True, reason="on the H200 (2026-11-28, lab record) the 8 MiB allocation was given to "
                   "a_step, grow_buffer's caller, while the end-to-end CUDA test named grow_buffer: unexplained")
def test_a_cuda_step_writes_a_snapshot_for_memory_viz_and_names_its_sites(tmp_path):
    x = torch.randn(16, 16, device="cuda")
    detail, path = worker_allocations.cuda_sites(lambda: a_step(x, 8), "cuda", tmp_path)
    top = detail["sites"][0]
    assert top["site"] == "grow_buffer (test_allocations.py)" and top["bytes_per_step"] >= 8 * MIB
    with path.open("rb") as f:
        snapshot = pickle.load(f)
    assert path.name == "memory_snapshot.pickle" and "segments" in snapshot and "device_traces" in snapshot


# ---------------------------------------------------------------- the reports' side: base against head

KEY = "mem/smoke/eager/cpu"


def sites(*rows: tuple[str, str | None, float, int]) -> dict:
    return {"source": "torch.profiler memory events over one step", "steps": 1,
            "total_bytes_per_step": float(sum(r[2] for r in rows)),
            "sites": [{"site": s, "op": op, "file": f"/x/{s.split('(')[1][:-1]}", "line": line,
                       "bytes_per_step": b, "allocations_per_step": 1.0} for s, op, b, line in
                      [(r[0], r[1], r[2], r[3]) for r in rows]]}


def memory_regression(base_sites: dict | None, head_sites: dict | None,
                      metric: str = "cpu_bytes_allocated_per_step") -> tuple[RunResult, Comparison]:
    base = synthetic_run(["mem"], toggles=("eager",), seed=1)
    head = synthetic_run(["mem"], toggles=("eager",), seed=2)
    for run, recorded in ((base, base_sites), (head, head_sites)):
        if recorded is not None:
            run.cases[0].profile["memory_sites"] = recorded
    verdict = Verdict(KEY, metric, "regression", baseline=1.5e6, current=35e6, ratio=35e6 / 1.5e6, threshold=0.1,
                      rule="memory, relative tolerance 10% with a floor of 1 MiB")
    return head, Comparison([verdict], mode="against", baseline_source="git:HEAD~1", baseline=base)


GROWN = (sites(("grow_buffer (w.py)", "aten::zeros", 1 * MIB, 20), ("step (w.py)", "aten::mm", 4096, 30)),
         sites(("grow_buffer (w.py)", "aten::zeros", 33 * MIB, 21), ("step (w.py)", "aten::mm", 4096, 31),
               ("new_helper (w.py)", "aten::empty", 2 * MIB, 40)))


def test_the_sites_that_grew_come_first_with_their_sizes():
    run, comp = memory_regression(*GROWN)
    g = ReportInput(run, comp).memory_growth[KEY]
    assert g.metrics == ["cpu_bytes_allocated_per_step"] and not g.note
    assert [(c.where, c.delta_bytes) for c in g.changes] == [
        ("grow_buffer (w.py:21) via aten::zeros", 32 * MIB), ("new_helper (w.py:40) via aten::empty", 2 * MIB)]
    assert g.changes[0].text == "grow_buffer (w.py:21) via aten::zeros +32 MiB/step (1 MiB -> 33 MiB)"
    assert g.delta_total == 34 * MIB
    assert g.headline.startswith("grow_buffer (w.py:21) via aten::zeros +32 MiB/step")


def test_a_site_that_shrank_is_listed_after_those_that_grew():
    run, comp = memory_regression(sites(("old (w.py)", None, 8 * MIB, 1)), sites(("new (w.py)", None, 16 * MIB, 2)))
    g = ReportInput(run, comp).memory_growth[KEY]
    assert [(c.site, c.delta_bytes) for c in g.changes] == [("new (w.py)", 16 * MIB), ("old (w.py)", -8 * MIB)]
    assert [c.site for c in g.grown] == ["new (w.py)"]


def test_no_growth_without_a_memory_regression_and_a_note_without_sites():
    run, comp = memory_regression(*GROWN, metric="aten_ops_per_step")
    assert ReportInput(run, comp).memory_growth == {}
    assert ReportInput(run).memory_growth == {}  # nothing compared
    run, comp = memory_regression(None, GROWN[1])
    assert "the baseline recorded no allocation sites" in ReportInput(run, comp).memory_growth[KEY].headline
    run, comp = memory_regression(GROWN[0], None)
    assert "this run recorded no allocation sites" in ReportInput(run, comp).memory_growth[KEY].headline


def test_malformed_sites_in_an_untrusted_file_read_as_what_they_can():
    bad = {"sites": [{"site": 3}, "x", {"site": "ok (w.py)", "op": 5, "line": "9", "bytes_per_step": "lots"},
                     {"site": "ok (w.py)", "bytes_per_step": 7.0}]}
    run, comp = memory_regression({"sites": "none"}, bad)
    assert "no allocation sites" in ReportInput(run, comp).memory_growth[KEY].headline
    run, comp = memory_regression(sites(("ok (w.py)", None, 1.0, 1)), bad)
    (change,) = ReportInput(run, comp).memory_growth[KEY].changes
    assert (change.site, change.op, change.line, change.head_bytes) == ("ok (w.py)", None, 1, 7.0)


def test_every_format_names_the_site_that_grew(tmp_path):
    run, comp = memory_regression(*GROWN)
    report = ReportInput(run, comp, run_dir=tmp_path)
    md = MarkdownExporter().render(report).decode()
    assert "- Memory of `mem/smoke/eager/cpu` grew at: `grow_buffer (w.py:21) via aten::zeros +32 MiB/step" in md
    html = HtmlExporter().render(report).decode()
    assert "Where memory grew" in html and 'class="memory-sites"' in html
    assert "grow_buffer (w.py:21)</td><td class=\"mono\">aten::zeros" in html
    rows = json.loads(JsonExporter().render(report))["rows"]
    sites_json = rows[0]["memory_growth"]["sites"]
    assert sites_json[0]["site"] == "grow_buffer (w.py)" and sites_json[0]["delta_bytes"] == 32 * MIB
    text = comparison_text(comp, run=run, run_dir=tmp_path)
    assert "  memory of mem/smoke/eager/cpu grew at: grow_buffer (w.py:21) via aten::zeros +32 MiB/step" in text


def test_snapshot_files_inside_the_run_folders_are_linked_for_memory_viz(tmp_path):
    run, comp = memory_regression(*GROWN, metric="peak_cuda_allocated_bytes")
    rel = "tb/mem/smoke/eager/memory_snapshot.pickle"
    for folder, r in ((tmp_path, run), (tmp_path / "base", comp.baseline)):
        (folder / rel).parent.mkdir(parents=True)
        (folder / rel).write_bytes(b"snapshot")
        r.cases[0].profile["memory_snapshot"] = rel
    (tmp_path / "base" / "results.json").write_text(comp.baseline.dumps())
    report = ReportInput(run, comp, run_dir=tmp_path)
    g = report.memory_growth[KEY]
    assert (g.head_snapshot, g.base_snapshot) == ((tmp_path / rel).resolve(), (tmp_path / "base" / rel).resolve())
    html = HtmlExporter().render(report).decode()
    assert allocations.MEMORY_VIZ_URL in html and f'href="{rel}"' in html and f'href="base/{rel}"' in html
    escaped = replace(run.cases[0], profile={**run.cases[0].profile, "memory_snapshot": "../../etc/passwd"})
    assert allocations.memory_growth(escaped, None, comp.verdicts, tmp_path).head_snapshot is None


def test_results_json_reads_back_the_sites_a_worker_records(tmp_path):
    run, _ = memory_regression(*GROWN)
    (tmp_path / "results.json").write_text(run.dumps())
    from perfgate.model.results import load_results

    back = load_results(tmp_path / "results.json")
    assert back.cases[0].profile["memory_sites"]["sites"][0]["site"] == "grow_buffer (w.py)"
    bad = json.loads(run.dumps())
    bad["cases"][0]["profile"]["memory_sites"]["sites"][0]["bytes_per_step"] = -1
    (tmp_path / "bad.json").write_text(json.dumps(bad))
    from perfgate.util.validation import SchemaError

    with pytest.raises(SchemaError, match="bytes_per_step"):
        load_results(tmp_path / "bad.json")
