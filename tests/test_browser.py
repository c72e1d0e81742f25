"""Real Chromium through Playwright against `streamlit run app/streamlit_app.py`.

Screenshots go to the test's tmp dir, or to $LASTGOOD_SCREENSHOTS when set. (The
ones in docs/ were taken the same way against sample_data/agents.)
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.fixtures_browser import SECRET, DemoStore

pytestmark = pytest.mark.browser
VIEWPORT = {"width": 1400, "height": 900}
WAIT_MS = 20_000


@pytest.fixture()
def shots(tmp_path: Path) -> Path:
    target = Path(os.environ.get("LASTGOOD_SCREENSHOTS") or tmp_path)
    target.mkdir(parents=True, exist_ok=True)
    return target


@pytest.fixture()
def page(chromium_browser, streamlit_server: str):
    context = chromium_browser.new_context(viewport=VIEWPORT)
    tab = context.new_page()
    tab.set_default_timeout(WAIT_MS)
    yield tab
    context.close()


def metric_values(page) -> dict[str, str]:
    labels = page.get_by_test_id("stMetricLabel").all_inner_texts()
    values = page.get_by_test_id("stMetricValue").all_inner_texts()
    return {label.strip(): value.strip() for label, value in zip(labels, values)}


def test_overview_then_timeline_in_chromium(page, streamlit_server: str, browser_store: DemoStore,
                                            shots: Path) -> None:
    chunks: list[str] = []
    page.on("request", lambda request: chunks.append(request.url))
    page.goto(streamlit_server)
    page.get_by_test_id("stMetricValue").first.wait_for()
    bars = page.locator('[data-testid="stMarkdownContainer"] svg.lastgood-chart rect.mark')  # drawn on the page
    bars.first.wait_for()
    assert bars.count() == 2  # ok and corrupt
    assert all(box["height"] > 0 for box in (bars.nth(i).bounding_box() for i in range(2)))
    areas = page.locator('[data-testid="stMarkdownContainer"] svg.lastgood-chart polygon.mark')
    assert areas.count() == 2  # one stacked area per agent
    assert not any("VegaLite" in url or "PlotlyChart" in url for url in chunks)  # no chart library
    metrics = metric_values(page)
    assert metrics["Checkpoints"] == str(len(browser_store.saved))
    assert metrics["Corrupt"] == "1" and metrics["Storage"] == browser_store.human_size
    page.get_by_text("Runs (3), most recent first").wait_for()  # the tables follow the first screen
    page.get_by_test_id("stDataFrame").nth(2).wait_for()  # failures, agents, runs
    assert page.get_by_text("Loading the failures").count() == 0
    body = page.inner_text("body")
    assert "run-gamma" in body and SECRET not in body
    page.screenshot(path=str(shots / "screenshot-overview.png"))

    page.get_by_role("link", name="Timeline").click()
    page.get_by_role("heading", name="Timeline").wait_for()
    page.locator(".js-plotly-plot").first.wait_for()
    chosen = browser_store.of_run("run-gamma")[3]
    picker = page.get_by_test_id("stSelectbox").filter(has_text="Checkpoint")
    picker.click()
    page.get_by_role("option", name=f"step {chosen.step} ").first.click()
    page.get_by_text(f"Checkpoint {chosen.checkpoint_id}").wait_for()
    page.get_by_text("Conversation").wait_for()
    page.get_by_text("run-gamma: please do task 3").first.wait_for()  # drawn, not read half-way
    body = page.inner_text("body")
    assert "run-gamma: please do task 3" in body and SECRET not in body
    page.screenshot(path=str(shots / "screenshot-timeline.png"))

    # a click on a chart point selects it too: click the damaged one (the "corrupt ✕" trace's X)
    damaged = browser_store.damaged
    index = page.evaluate("""() => document.querySelector('.js-plotly-plot').data
                                     .findIndex(trace => trace.name === 'corrupt ✕')""")
    assert index >= 0
    point = page.locator(".js-plotly-plot .scatterlayer .trace").nth(index).locator("path.point").first
    box = point.bounding_box()  # plotly's drag layer sits above the points: click where it is
    page.mouse.click(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    page.get_by_text(f"Checkpoint {damaged.checkpoint_id}").wait_for()
    page.get_by_text("The state cannot be shown").wait_for()
