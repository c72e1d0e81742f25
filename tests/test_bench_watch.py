"""The ui benchmark's clock (benchmarks/bench_ui_open.py): the moment the page itself drew the
Overview's numbers and figures, read in real Chromium — not when a poller noticed them later."""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import bench_ui_open as bench  # noqa: E402

URL = "http://bench.test/"
DELAY_MS = 400
PAGE = """<!doctype html><html><body><div id="app"></div><script>
setTimeout(() => {
  document.getElementById("app").innerHTML =
    '<div data-testid="stMetricValue">100,800</div>' +
    '<div data-testid="stMarkdownContainer"><svg class="lastgood-chart" width="200" height="100">' +
    '<rect class="mark" x="0" y="0" width="50" height="60"></rect></svg></div>';
  window.__inserted = Date.now();
}, %d);
</script></body></html>""" % DELAY_MS


def _open(chromium_browser, html: str):
    context = chromium_browser.new_context()
    context.add_init_script(bench.WATCH)
    page = context.new_page()
    page.route(URL, lambda route: route.fulfill(body=html, content_type="text/html"))
    return context, page


def test_the_watch_records_the_frame_that_drew_the_metric_and_the_figure(chromium_browser) -> None:
    context, page = _open(chromium_browser, PAGE)
    try:
        started = time.time()
        page.goto(URL)
        page.wait_for_function("() => window.__lastgoodDrawn && window.__lastgoodDrawn.figure", polling=50)
        inserted = page.evaluate("window.__inserted") / 1000
        for name in ("metric", "figure"):
            drawn = bench.drawn_at(page, name, started, fallback=-1.0)
            # drawn in the frame after the insertion (a frame is ~17 ms; slack for a busy machine)
            assert 0 <= drawn - (inserted - started) < 0.25, (name, drawn, inserted - started)
            assert drawn >= DELAY_MS / 1000
        assert bench.drawn_at(page, "tables", started, fallback=-1.0) == -1.0  # never drawn: the fallback
    finally:
        context.close()


def test_marks_without_a_size_on_the_screen_are_not_a_drawn_figure(chromium_browser) -> None:
    hidden = PAGE.replace('<svg class="lastgood-chart"', '<svg class="lastgood-chart" style="display:none"')
    context, page = _open(chromium_browser, hidden)
    try:
        page.goto(URL)
        page.wait_for_function("() => window.__lastgoodDrawn && window.__lastgoodDrawn.metric", polling=50)
        page.wait_for_timeout(200)
        assert page.evaluate("'figure' in window.__lastgoodDrawn") is False
    finally:
        context.close()
