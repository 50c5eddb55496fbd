"""report.html opened in a real headless Chromium: no console errors, no network, every section there,
markup from workloads and errors shown as text; screenshots land in test-output/html-report/."""

from __future__ import annotations

import re
import shutil
from dataclasses import replace
from pathlib import Path

import pytest
from fixtures.synthetic import roofline_run, scenario, synthetic_comparison, synthetic_run

from perfgate.reports.base import ReportInput
from perfgate.reports.html import HtmlExporter

REPO = Path(__file__).resolve().parent.parent
SHOTS = REPO / "test-output" / "html-report"
LAUNCH_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                "--disable-background-networking", "--disable-component-update", "--disable-sync"]
EVIL = '<script>window.__pwned=1</script><img src="https://example.invalid/x.png" onerror="window.__pwned=2">'


def chromium_path() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    return None


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    """A persistent Chromium context with a fresh profile; skips only where no browser is installed."""
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright not installed (pip install '.[dev]')")
    exe = chromium_path()
    if exe is None:
        pytest.skip("no Chromium on this machine: apt-get install -y chromium (.ci/run does)")
    with sync_api.sync_playwright() as p:
        context = p.chromium.launch_persistent_context(
            str(tmp_path_factory.mktemp("chromium-profile")), executable_path=exe, headless=True,
            args=LAUNCH_FLAGS, viewport={"width": 1280, "height": 900},
        )
        yield context
        context.close()


class Page:
    """A loaded report with everything the browser said and asked for while loading it."""

    def __init__(self, context, path: Path, viewport: dict[str, int] | None = None) -> None:
        self.page = context.new_page()
        if viewport:
            self.page.set_viewport_size(viewport)
        self.console: list[str] = []
        self.requests: list[str] = []
        self.page.on("console", lambda m: self.console.append(f"{m.type}: {m.text}") if m.type in (
            "error", "warning") else None)
        self.page.on("pageerror", lambda e: self.console.append(f"pageerror: {e}"))
        self.page.on("request", lambda r: self.requests.append(r.url))
        self.url = path.resolve().as_uri()
        self.page.goto(self.url, wait_until="load")
        self.page.wait_for_timeout(200)  # late requests (images, fonts) would show up here

    def external_requests(self) -> list[str]:
        return [u for u in self.requests if u != self.url]


def write_report(tmp_path: Path, report: ReportInput, name: str = "report.html") -> Path:
    path = tmp_path / name
    path.write_bytes(HtmlExporter().render(report))
    return path


@pytest.mark.slow
def test_report_in_a_real_browser(browser, tmp_path):
    run, comp = scenario(["operator_rollout", "field_superposition", "message_passing"])
    report = ReportInput(run, comp, run_dir=Path("reports") / run.run_id)
    path = write_report(tmp_path, report)
    SHOTS.mkdir(parents=True, exist_ok=True)

    laptop = Page(browser, path)
    assert laptop.console == []
    assert laptop.external_requests() == []
    banner = laptop.page.inner_text("#verdict")
    assert banner.startswith("FAIL: 2 regression(s), 1 newly failing, 1 win(s), ")
    sections = laptop.page.eval_on_selector_all("section.workload", "els => els.map(e => e.dataset.workload)")
    assert sections == ["operator_rollout", "field_superposition", "message_passing"]
    assert laptop.page.locator("section.workload table.matrix").count() == 3
    assert laptop.page.locator("section.workload table.payoff").count() == 3
    assert laptop.page.locator("section.workload svg").count() == 3  # one speedup chart each
    assert laptop.page.locator("#regressions svg").count() == 1  # the samples of the one time regression
    assert "aten::extra_0" in laptop.page.inner_text("#regressions")
    traces = laptop.page.text_content("section.workload details.traces")
    assert "perfgate tensorboard reports/20261122-040000-smoke" in traces
    assert "tb/operator_rollout/compile/trace.pt.trace.json" in traces
    assert laptop.page.eval_on_selector_all("script", "els => els.length") == 0
    laptop.page.screenshot(path=str(SHOTS / "laptop.png"), full_page=True)

    phone = Page(browser, path, viewport={"width": 390, "height": 844})
    assert phone.console == [] and phone.external_requests() == []
    # wide tables scroll inside their own box; the page itself never scrolls sideways
    assert phone.page.evaluate("document.documentElement.scrollWidth <= window.innerWidth + 1")
    phone.page.screenshot(path=str(SHOTS / "phone.png"), full_page=False)

    folded = "document.querySelector('details.traces table').checkVisibility()"
    assert laptop.page.evaluate(folded) is False  # folded on screen
    laptop.page.emulate_media(media="print")
    assert laptop.page.evaluate(folded) is True  # unfolded on paper
    laptop.page.screenshot(path=str(SHOTS / "print.png"), full_page=False)
    laptop.page.pdf(path=str(SHOTS / "report.pdf"))
    assert (SHOTS / "report.pdf").stat().st_size > 1000


@pytest.mark.slow
def test_markup_in_workload_names_and_errors_renders_as_text_and_runs_nothing(browser, tmp_path):
    variant = "v<script>window.__pwned=3</script>"  # a workload variant is a toggle name a user writes
    run = synthetic_run([f"evil{EVIL}"], toggles=("eager", "compile", "torchscript", variant))
    run.cases[2].message = f"RuntimeError: {EVIL}"
    run.environment["hostname"] = EVIL
    path = write_report(tmp_path, ReportInput(run, None, run_dir=tmp_path))
    html = path.read_text()
    assert "<script>window.__pwned" not in html and "&lt;script&gt;window.__pwned=1&lt;/script&gt;" in html

    page = Page(browser, path)
    assert page.page.evaluate("typeof window.__pwned") == "undefined"
    assert page.page.eval_on_selector_all("script", "els => els.length") == 0
    assert page.page.eval_on_selector_all("img", "els => els.length") == 0
    assert page.external_requests() == []
    assert page.console == []
    text = page.page.inner_text("body")
    assert f"evil{EVIL}" in text  # shown as the literal text it is
    assert f"RuntimeError: {EVIL}" in text
    svg_text = page.page.eval_on_selector_all("svg text", "els => els.map(e => e.textContent).join('|')")
    assert variant in svg_text.split("|")  # SVG text escaped too: shown, not run
    assert "<script>" not in page.page.inner_html("svg")
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.page.screenshot(path=str(SHOTS / "escaping.png"), full_page=False)


@pytest.mark.slow
def test_roofline_chart_bound_classes_and_expectations_in_a_real_browser(browser, tmp_path):
    report = ReportInput(roofline_run(), None, run_dir=tmp_path)
    path = write_report(tmp_path, report)
    page = Page(browser, path)
    assert page.console == [] and page.external_requests() == []
    assert page.page.inner_text("#verdict").startswith("FAIL: 1 expectation(s) missed")
    expectations = page.page.inner_text("#expectations")
    assert "speedup_vs_eager >= 2" in expectations and "1 expectation met" in expectations
    assert "bound == memory-bound" not in expectations  # met: folded under its count
    page.page.click("#expectations details.met summary")
    assert "bound == memory-bound" in page.page.inner_text("#expectations")
    svg = page.page.locator("svg.roofline")
    assert svg.count() == 1
    # eager, compile, amp-bf16 placed; channels-last has no FLOPs to place it by, and says so
    labels = page.page.eval_on_selector_all("svg.roofline circle", "els => els.map(e => e.nextSibling.textContent)")
    assert labels == ["eager", "compile", "amp-bf16"]
    assert page.page.locator("svg.roofline polyline").count() == 2  # float32 and bfloat16 measured roofs
    note = page.page.inner_text("section.workload")
    assert "Not placed: channels-last (memory-bound; no FLOPs counted" in note
    payoff = page.page.inner_text("table.payoff")
    assert "memory-bound" in payoff and "overhead-bound" in payoff and "headroom" in payoff
    assert "Bound: eager is memory-bound" in note
    # inside the plot: every point between the axes
    box = page.page.evaluate("""() => { const s = document.querySelector('svg.roofline');
        return [...s.querySelectorAll('circle')].map(c => [+c.getAttribute('cx'), +c.getAttribute('cy')]); }""")
    assert all(84 <= x <= 490 and 12 <= y <= 260 for x, y in box), box
    SHOTS.mkdir(parents=True, exist_ok=True)
    svg.screenshot(path=str(SHOTS / "roofline.png"))


def test_sample_strips_mark_the_step_time_the_gate_compares(tmp_path):
    """Each process's bar sits at the quantile the gate judged it by (10th percentile by default, or what
    the run recorded as [tool.perfgate.gate] process_quantile), not at a statistic the gate never used."""
    from perfgate.reports.html import distribution_chart
    from perfgate.util.stats import quantile

    run, comp = scenario(["operator_rollout"])
    report = ReportInput(run, comp)
    (row,) = [r for r in report.rows if r.is_time_regression]
    chart = distribution_chart(row, report.process_quantile)
    strips = [p.step_times_s for p in row.baseline_case.processes] + [p.step_times_s for p in row.case.processes]
    assert report.process_quantile == 0.1 and len(chart.strips) == len(strips)
    for strip, xs in zip(chart.strips, strips, strict=True):
        low = quantile(sorted(xs), 0.1)
        assert strip["mark_text"].startswith("10th percentile ")
        # on the chart's scale (linear; the dots are rounded to 0.1 px), where the 10th percentile lies
        lo_i, hi_i = xs.index(min(xs)), xs.index(max(xs))
        px_per_s = (strip["dots"][hi_i] - strip["dots"][lo_i]) / (max(xs) - min(xs))
        assert strip["mark"] == pytest.approx(strip["dots"][lo_i] + px_per_s * (low - min(xs)), abs=0.3)
        assert strip["mark"] < distribution_chart(row, 0.5).strips[chart.strips.index(strip)]["mark"]
    html = HtmlExporter().render(report).decode()
    assert "bar = the process's 10th percentile, the step time the gate compares" in html
    assert "<title>10th percentile " in html and "<title>median " not in html

    run.settings = {**(run.settings or {}), "gate": {"process_quantile": 0.5}}
    html = HtmlExporter().render(ReportInput(run, comp)).decode()
    assert "bar = the process's median" in html and "<title>median " in html
    for nonsense in ("0.1", True, 0.9, -1, float("nan")):  # a results.json is untrusted: the default
        run.settings = {"gate": {"process_quantile": nonsense, "threshold": nonsense}}
        assert ReportInput(run, comp).process_quantile == 0.1
        assert ReportInput(run).threshold == (0.9 if nonsense == 0.9 else 0.05)  # 90% is a threshold
    run.settings = {"gate": [1, 2]}  # not a table at all: the defaults, and the page renders
    assert ReportInput(run).threshold == 0.05 and ReportInput(run).process_quantile == 0.1
    assert b"10th percentile" in HtmlExporter().render(ReportInput(run, comp))


def test_each_process_shows_its_gpu_clocks_and_a_throttled_one_is_marked():
    """Where the processes recorded their GPU's SM clock (NVML, perfgate.worker.gpu_clocks), the toggle matrix shows
    the range and how many throttled, and each process's sample strip says its clocks; a throttled process
    is labelled so. What NVML said (an error text) is untrusted and shown as text."""
    from perfgate.reports.html import distribution_chart

    run, comp = scenario(["operator_rollout"])
    report = ReportInput(run, comp)
    (row,) = [r for r in report.rows if r.is_time_regression]
    assert row.gpu_clocks_text == ""  # CPU processes: nothing said
    procs = row.case.processes
    for p in procs:
        p.gpu_clocks = {"sm_clock_mhz_before": 1980, "sm_clock_mhz_after": 1980, "max_sm_clock_mhz": 1980,
                        "throttle_reasons_before": [], "throttle_reasons_after": ["gpu_idle"]}
    procs[0].gpu_clocks.update(sm_clock_mhz_after=1410, throttle_reasons_after=["hw_thermal_slowdown"])
    row.baseline_case.processes[0].gpu_clocks = {"error": "NVML did not initialise " + EVIL}
    report = ReportInput(run, comp)
    (row,) = [r for r in report.rows if r.is_time_regression]
    assert row.gpu_clocks_text == (f"SM clock 1410-1980 MHz (max 1980); 1 of {len(procs)} process(es) throttled "
                                   "(hw_thermal_slowdown)")
    strips = distribution_chart(row).strips
    current = [s for s in strips if s["css"] == "current"]
    assert current[0]["label"] == f"current process {procs[0].process_index} (throttled)"
    assert current[0]["mark_text"].endswith("; SM 1980 -> 1410 MHz (max 1980), throttled: hw_thermal_slowdown")
    assert current[1]["label"] == f"current process {procs[1].process_index}"
    assert current[1]["mark_text"].endswith("; SM 1980 -> 1980 MHz (max 1980)")
    assert "; no GPU clocks: NVML did not initialise <script>" in strips[0]["mark_text"]
    html = HtmlExporter().render(report).decode()
    assert f"1 of {len(procs)} process(es) throttled (hw_thermal_slowdown)</span>" in html
    assert "(throttled)</text>" in html
    assert EVIL not in html and "&lt;script&gt;window.__pwned=1" in html


# ---------------------------------------------------------------- the overview, widths, roofline labels

# Every table's own width, and the box that scrolls it, against what it is given; `visible` skips the
# folded ones (a closed <details> lays nothing out).
TABLE_WIDTHS = """() => [...document.querySelectorAll('table')].filter(t => t.checkVisibility()).map(t => {
    const box = t.closest('.scroll') || t.parentElement;
    return {cls: t.className, section: (t.closest('section') || {}).id || '', table: [t.scrollWidth, t.clientWidth],
            box: [box.scrollWidth, box.clientWidth], right: t.getBoundingClientRect().right}; })"""

OVERVIEW_CELLS = """() => [...document.querySelectorAll('#overview table.overview tbody tr')].map(tr =>
    [...tr.querySelectorAll('td')].map(td => {
        const a = td.querySelector('a'), tag = td.querySelector('.tag');
        const target = a ? document.getElementById(a.getAttribute('href').slice(1)) : null;
        return {word: tag ? tag.textContent : '', cls: td.className, text: td.innerText,
                href: a ? a.getAttribute('href') : null, target: target ? target.tagName : null,
                targetToggle: target && target.querySelector('td.toggle') ? target.querySelector('td.toggle').textContent : null};
    }))"""


@pytest.mark.slow
def test_overview_fits_one_screen_and_no_table_scrolls_sideways(browser, tmp_path):
    """The full pr suite (6 workloads with long names x 10 toggles, compared with a baseline) at 1300 x 900:
    the overview matrix sits on the first screen, each cell a verdict word and a ratio with its CI linking to
    the case's row; no table is wider than its place; at phone width only tables scroll, never the page."""
    from fixtures.synthetic import LONG_WORKLOADS, PR_TOGGLES, pr_scenario

    from perfgate.reports.display import VERDICT_DISPLAY

    run, comp = pr_scenario()
    report = ReportInput(run, comp, run_dir=Path("reports") / run.run_id)
    path = write_report(tmp_path, report)
    SHOTS.mkdir(parents=True, exist_ok=True)

    laptop = Page(browser, path, viewport={"width": 1300, "height": 900})
    page = laptop.page
    assert laptop.console == [] and laptop.external_requests() == []
    assert page.evaluate("document.documentElement.scrollWidth <= document.documentElement.clientWidth")
    widths = page.evaluate(TABLE_WIDTHS)
    assert {w["cls"] for w in widths} >= {"overview", "matrix", "payoff"}
    for w in widths:
        assert w["table"][0] <= w["table"][1] and w["box"][0] <= w["box"][1] and w["right"] <= 1300, w

    # the overview: first after the verdict, workloads x toggles, inside the first screen
    assert page.eval_on_selector_all("main > section", "els => els.map(e => e.id)")[0] == "overview"
    headers = page.eval_on_selector_all("#overview thead th", "els => els.map(e => e.getAttribute('title'))")
    assert headers[1:] == list(PR_TOGGLES)
    rows = page.eval_on_selector_all("#overview tbody th", "els => els.map(e => e.textContent)")
    assert [r.split(" [")[0] for r in rows] == LONG_WORKLOADS
    box = page.evaluate("(() => { const r = document.querySelector('#overview table').getBoundingClientRect();"
                        " return [r.top, r.bottom, r.height]; })()")
    assert box[2] <= 900 and box[1] <= 900, box  # the whole matrix on the first screen, no scrolling
    cells = page.evaluate(OVERVIEW_CELLS)
    assert [len(r) for r in cells] == [10] * 6
    words = {word for _, word in VERDICT_DISPLAY.values()}
    by_key = {r.key: r for r in report.rows}
    for workload, line in zip(LONG_WORKLOADS, cells, strict=True):
        for toggle, cell in zip(PR_TOGGLES, line, strict=True):
            row = by_key[f"{workload}/smoke/{toggle}/cuda"]
            assert cell["word"] in words and cell["word"] in cell["text"], cell
            assert cell["target"] == "TR" and cell["targetToggle"] == toggle, cell  # the case's own row
            assert cell["href"] == f"#{row.anchor}"
            worst = row.worst_verdict
            assert cell["word"] == VERDICT_DISPLAY[worst.kind][1] and f"tone-{VERDICT_DISPLAY[worst.kind][0]}" in cell["cls"]
            step = row.step_verdict
            if step is not None and step.ratio is not None:  # the ratio with its CI, as the gate judged it
                assert f"{step.ratio:.2f}x\n[{step.ratio_low:.2f}, {step.ratio_high:.2f}]" in cell["text"], cell
    flagged = {(w, t): c["word"] for w, line in zip(LONG_WORKLOADS, cells, strict=True)
               for t, c in zip(PR_TOGGLES, line, strict=True) if c["word"] not in ("unchanged", "skipped")}
    assert flagged[(LONG_WORKLOADS[0], "channels-last")] == "regression"
    assert flagged[(LONG_WORKLOADS[5], "compile")] == "newly-failing"
    assert flagged[(LONG_WORKLOADS[1], "compile-max-autotune")] == "win"
    page.screenshot(path=str(SHOTS / "overview-1300.png"), full_page=False)

    phone = Page(browser, path, viewport={"width": 390, "height": 844})
    assert phone.page.evaluate("document.documentElement.scrollWidth <= document.documentElement.clientWidth")
    for w in phone.page.evaluate(TABLE_WIDTHS):
        assert w["right"] <= 390 or w["box"][1] <= 390 - 16, w  # wider tables scroll inside their own box
    phone.page.screenshot(path=str(SHOTS / "overview-390.png"), full_page=False)


@pytest.mark.slow
def test_acknowledgements_repro_commands_and_trace_notes_fit_at_1300_and_on_a_phone(browser, tmp_path):
    """The pr suite's report with what a reviewer reads under its regressions: an acknowledged regression
    (its overview cell says so), an expired acknowledgement and one that matched nothing, each regression's
    repro command and trace notes (this synthetic run keeps no traces). Nothing makes the page scroll
    sideways, at 1300 px or at phone width, and no table outgrows its place at 1300 px."""
    import datetime as dt

    from fixtures.synthetic import LONG_WORKLOADS, PR_TOGGLES, pr_scenario

    from perfgate.model import acknowledge

    run, comp = pr_scenario()
    entries = (
        acknowledge.Entry("acknowledge[0]", f"{LONG_WORKLOADS[2]}/*/tf32/*", "step_time",
                          "tf32 trades speed on this card for accuracy the rollout needs: " + "a" * 120,
                          expires=dt.date(2027, 1, 31), bound=acknowledge.parse_bound("ratio <= 2.0")),
        acknowledge.Entry("acknowledge[1]", f"{LONG_WORKLOADS[0]}/*/channels-last/*", "step_time", "known, fixed later",
                          expires=dt.date(2026, 11, 1)),
        acknowledge.Entry("acknowledge[2]", "no_such_workload/*/*/*", "*", "matches nothing",
                          expires=dt.date(2027, 1, 1)),
    )
    comp = acknowledge.apply(comp, entries, dt.date(2026, 11, 26))
    assert [a.state for a in comp.acknowledgements] == ["in-force", "expired", "unmatched"]
    report = ReportInput(run, comp, run_dir=Path("reports") / run.run_id)
    path = write_report(tmp_path, report)
    html = path.read_text()
    assert "Acknowledged regressions" in html and "acknowledge[1]" in html and "acknowledge[2]" in html
    assert len(report.repros) == len(report.trace_pairs) == html.count('class="repro"') >= 4  # one per regression

    laptop = Page(browser, path, viewport={"width": 1300, "height": 900})
    page = laptop.page
    assert laptop.console == [] and laptop.external_requests() == []
    assert page.evaluate("document.documentElement.scrollWidth <= document.documentElement.clientWidth")
    for w in page.evaluate(TABLE_WIDTHS):
        assert w["table"][0] <= w["table"][1] and w["box"][0] <= w["box"][1] and w["right"] <= 1300, w
    cells = page.evaluate(OVERVIEW_CELLS)
    tf32 = cells[2][list(PR_TOGGLES).index("tf32")]
    assert tf32["word"] == "acknowledged" and "tone-info" in tf32["cls"], tf32
    assert cells[0][list(PR_TOGGLES).index("channels-last")]["word"] == "regression"  # its entry expired

    phone = Page(browser, path, viewport={"width": 390, "height": 844})
    assert phone.page.evaluate("document.documentElement.scrollWidth <= document.documentElement.clientWidth")
    for w in phone.page.evaluate(TABLE_WIDTHS):
        assert w["right"] <= 390 or w["box"][1] <= 390 - 16, w


def test_overview_without_a_comparison_shows_status_and_speedup():
    """No baseline: each cell says the case's status and its speedup against eager with the CI."""
    from perfgate.reports.base import build_overview

    run = synthetic_run(["operator_rollout"], fail={"operator_rollout/smoke/compile/cpu"})
    report = ReportInput(run)
    ov = build_overview(report)
    assert not ov.compared and ov.toggles == ["eager", "compile", "amp-bf16", "channels-last", "torchscript",
                                              "cuda-graphs"]
    (line,) = ov.rows
    cells = line.cells
    assert (cells["eager"].look.word, cells["eager"].value, cells["eager"].interval) == ("ok", "1x", "reference")
    sp = next(r.speedup for r in report.rows if r.spec.toggle_name == "channels-last")
    assert (cells["channels-last"].look.word, cells["channels-last"].value,
            cells["channels-last"].interval) == ("ok", f"{sp.value:.2f}x", f"[{sp.low:.2f}, {sp.high:.2f}]")
    assert (cells["compile"].look.word, cells["compile"].look.tone, cells["compile"].value) == ("failed", "bad", "-")
    assert "dynamic control flow" in cells["compile"].title
    assert (cells["cuda-graphs"].look.word, cells["cuda-graphs"].look.tone) == ("skipped", "warn")
    html = HtmlExporter().render(report).decode()
    assert "Each cell: the case's status and its speedup against eager" in html


def test_a_baseline_case_missing_from_the_run_shows_in_the_overview():
    run, comp = scenario(["operator_rollout"])
    run.cases = [c for c in run.cases if c.spec.toggle_name != "amp-bf16"]
    comp = synthetic_comparison(run, comp.baseline)
    cell = ReportInput(run, comp).overview.rows[0].cells["amp-bf16"]
    assert (cell.look.word, cell.href) == ("missing", "#missing")
    assert 'id="missing"' in HtmlExporter().render(ReportInput(run, comp)).decode()


def test_verdict_tone_and_word_come_from_one_mapping(monkeypatch):
    """Every verdict kind and case status has a tone and a word; a new kind is one entry in VERDICT_DISPLAY,
    and without one it still shows, as its own name in neutral grey."""
    from perfgate.model import comparison
    from perfgate.model.comparison import VERDICT_KINDS
    from perfgate.model.results import STATUSES
    from perfgate.reports import display

    assert set(VERDICT_KINDS) | set(STATUSES) <= set(display.VERDICT_DISPLAY)
    assert {tone for tone, _ in display.VERDICT_DISPLAY.values()} <= {"bad", "good", "warn", "info", "neutral"}
    assert display.verdict_display("acknowledged") == display.VerdictLook("acknowledged", "info", "acknowledged")
    assert display.verdict_display("brand-new").tone == "neutral" and display.verdict_display("brand-new").word == "brand-new"

    run, comp = scenario(["operator_rollout"])
    key = "operator_rollout/smoke/compile/cpu"
    comp.verdicts = [replace(v, kind="waived") if v.case_key == key else v for v in comp.verdicts]
    monkeypatch.setattr(comparison, "VERDICT_KINDS", (*VERDICT_KINDS, "waived"))  # the model's side of a new kind
    monkeypatch.setitem(display.VERDICT_DISPLAY, "waived", ("good", "waived"))
    html = HtmlExporter().render(ReportInput(run, comp)).decode()
    cell = html[html.index('<td class="cell', html.index('id="overview"')):]
    cells = [c for c in cell.split("</td>") if "waived" in c]
    assert cells and 'class="cell tone-good"' in cells[0] and 'tone-good">waived</span>' in cells[0]
    assert '<span class="tag waived tone-good">waived</span>' in html[html.index('class="matrix"'):]


def test_element_ids_are_safe_and_tell_apart_names_that_slug_alike():
    from perfgate.reports.display import element_id

    ids = {element_id("case", k) for k in ("a.b/s/eager/cpu", "a-b/s/eager/cpu", "a b/s/eager/cpu", EVIL, "", "é")}
    assert len(ids) == 6
    assert all(re.fullmatch(r"case-[A-Za-z0-9-]+", i) and "--" not in i for i in ids), ids
    assert element_id("case", "w/smoke/compile/cpu").startswith("case-w-smoke-compile-cpu-")


LABEL_BOXES = """() => [...document.querySelectorAll('svg.roofline text.label')].map(t => {
    const r = t.getBoundingClientRect(); return [t.textContent, r.left, r.top, r.right, r.bottom]; })"""


@pytest.mark.slow
def test_roofline_labels_of_piled_up_points_do_not_overlap(browser, tmp_path):
    """Ten toggles whose points pile up (a GPU run's): every point gets its name (or a number listed under
    the chart), and no two labels, the roofs' names included, overlap as the browser lays them out."""
    from fixtures.synthetic import PR_TOGGLES, crowded_roofline_run

    path = write_report(tmp_path, ReportInput(crowded_roofline_run(), None, run_dir=tmp_path))
    page = Page(browser, path, viewport={"width": 1300, "height": 900})
    assert page.console == []
    boxes = page.page.evaluate(LABEL_BOXES)
    svg = page.page.evaluate("(() => { const r = document.querySelector('svg.roofline').getBoundingClientRect();"
                             " return [r.left, r.top, r.right, r.bottom]; })()")
    overlapping = [(a[0], b[0]) for i, a in enumerate(boxes) for b in boxes[i + 1:]
                   if a[1] < b[3] and b[1] < a[3] and a[2] < b[4] and b[2] < a[4]]
    assert overlapping == []
    assert all(svg[0] <= b[1] and b[3] <= svg[2] and svg[1] <= b[2] and b[4] <= svg[3] for b in boxes), boxes
    point_labels = page.page.eval_on_selector_all("svg.roofline text.point-label", "els => els.map(e => e.textContent)")
    legend = page.page.inner_text("section.workload")
    for i, toggle in enumerate(PR_TOGGLES):  # named on the chart, or numbered and named under it
        assert toggle in point_labels or (str(i + 1) in point_labels and toggle in legend)
    assert len(point_labels) == len(PR_TOGGLES)
    assert page.page.locator("svg.roofline text.roof-label").count() == 8  # 4 dtypes x measured, spec sheet
    page.page.locator("svg.roofline").screenshot(path=str(SHOTS / "roofline-crowded.png"))


def test_roofline_labels_stay_apart_when_names_cannot_fit():
    """Where no spot is free for a name the point is numbered and listed under the chart: the placement never
    gives two labels intersecting boxes."""
    from perfgate.reports.html import place_point_labels, text_width

    points = [(100.0 + (i % 3), 100.0 + (i % 2)) for i in range(30)]
    texts = [f"amp-fp16+channels-last-{i}" for i in range(30)]
    spots = place_point_labels(points, texts, (60.0, 40.0, 300.0, 160.0), [])
    boxes = [s[2] for s in spots if s]
    assert any(s is None for s in spots) and len(boxes) >= 3
    assert all(not (a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3])
               for i, a in enumerate(boxes) for b in boxes[i + 1:])
    assert text_width("m" * 10) > text_width("i" * 10) and text_width("compile") >= 7 * 6.5


@pytest.mark.slow
def test_a_run_without_ceilings_says_how_to_measure_them_instead_of_an_empty_chart(browser, tmp_path):
    from click.testing import CliRunner
    from fixtures.synthetic import crowded_roofline_run

    from perfgate.cli import main
    from perfgate.reports.html import CEILINGS_COMMAND

    path = write_report(tmp_path, ReportInput(crowded_roofline_run(ceilings=False), None, run_dir=tmp_path))
    page = Page(browser, path)
    assert page.page.locator("svg.roofline").count() == 0
    (line,) = page.page.eval_on_selector_all(".roofline-missing", "els => els.map(e => e.innerText)")
    assert line == (f"No roofline chart: this run carries no ceilings for cuda. {CEILINGS_COMMAND} on this machine "
                    "measures them and stores them beside its baselines; the runs after it draw the chart.")
    # the command the line names exists, with those options
    help_text = CliRunner().invoke(main, ["calibrate", "--help"]).output
    assert CEILINGS_COMMAND.startswith("perfgate calibrate ") and "--ceilings-only" in help_text
    assert "--write" in help_text and "ceilings.json" in (REPO / "docs" / "roofline.md").read_text()


@pytest.mark.slow
def test_expectations_missed_and_unknown_first_met_folded_under_their_count(browser, tmp_path):
    from perfgate.judging.expect import parse_rules

    run = synthetic_run(["operator_rollout"], toggles=("eager", "compile", "amp-bf16", "channels-last"))
    run.expectations = [r.to_json() for r in parse_rules({
        "operator_rollout/*/*/cpu": ["status == ok", "kernel_concentration_80 <= 3"],
        "operator_rollout/*/compile/cpu": ["speedup_vs_eager >= 2",
                                           {"rule": "speedup_vs_eager >= 3", "severity": "warn"}],
    })]
    path = write_report(tmp_path, ReportInput(run, None, run_dir=tmp_path))
    page = Page(browser, path).page
    visible = page.eval_on_selector_all("#expectations table.expectations tr",
                                        "els => els.filter(e => e.checkVisibility()).map(e => e.innerText.split('\\t'))")
    outcomes = [(r[0], r[1], r[2], r[3]) for r in visible[1:]]
    assert outcomes[:2] == [("missed", "operator_rollout/smoke/compile/cpu", "speedup_vs_eager >= 2", "fail"),
                            ("missed", "operator_rollout/smoke/compile/cpu", "speedup_vs_eager >= 3", "warn")]
    assert [o[0] for o in outcomes[2:]] == ["unknown"] * 4  # no kernel concentration measured
    assert page.inner_text("#expectations details.met summary") == "4 expectations met"
    assert page.evaluate("document.querySelector('#expectations details.met').open") is False
    met = page.eval_on_selector_all("#expectations details.met tr", "els => els.map(e => e.textContent)")
    assert len(met) == 5 and all("status == ok" in m for m in met[1:])


def test_an_overview_cell_names_the_metric_that_decided_when_not_the_step_time():
    run, comp = scenario(["operator_rollout"])
    key = "operator_rollout/smoke/channels-last/cpu"  # slower and more ops: both regress
    comp.verdicts = [replace(v, kind="unchanged") if v.case_key == key and v.metric == "step_time" else v
                     for v in comp.verdicts]
    report = ReportInput(run, comp)
    cell = report.overview.rows[0].cells["channels-last"]
    step = next(r.step_verdict for r in report.rows if r.key == key)
    assert (cell.look.word, cell.note, cell.value) == ("regression", "aten_ops_per_step", f"{step.ratio:.2f}x")
    assert "aten_ops_per_step regression, step_time unchanged" in cell.title
    assert '<span class="note">by aten_ops_per_step</span>' in HtmlExporter().render(report).decode()


def test_the_report_says_what_the_workers_measured_under():
    """The allocator, ASLR and layout policy, in one line beside the run's environment (escaped: a library
    name comes from results.json)."""
    env = {"malloc": "steady", "address_layout": "fixed", "layout_policy": "drawn", "layout_seed": 7}
    run = synthetic_run(["operator_rollout"])
    run = replace(run, environment={**run.environment, **env})
    html = HtmlExporter().render(ReportInput(run)).decode()
    assert re.search(r'<p class="measured-under">Workers measured with steady C allocator .*ASLR off, a memory '
                     r"layout drawn per process \(seed 7\)\.</p>", html), html[-3000:]
