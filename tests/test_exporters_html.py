"""report.html opened in a real headless Chromium: no console errors, no network, every section there,
markup from workloads and errors shown as text; screenshots land in test-output/html-report/."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from fixtures.synthetic import roofline_run, scenario, synthetic_run

from perfgate.exporters.base import ReportInput
from perfgate.exporters.html import HtmlExporter

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
    from perfgate.exporters.html import distribution_chart
    from perfgate.stats import quantile

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
    """Where the processes recorded their GPU's SM clock (NVML, perfgate.gpu_clocks), the toggle matrix shows
    the range and how many throttled, and each process's sample strip says its clocks; a throttled process
    is labelled so. What NVML said (an error text) is untrusted and shown as text."""
    from perfgate.exporters.html import distribution_chart

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
