"""The Integrity page in real Chromium, served by `lastgood ui` exactly as a user starts it, on a
damaged store: the findings table shows the damaged checkpoint, its link opens the Timeline at that
checkpoint (the URL carries store, run and checkpoint), and "Full read" runs in the background with
progress and ends with the findings. Waits are for text (generous, for a busy 2-core machine), never sleeps."""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import pytest

from lastgood.ui.integrity import FINDING_ROW_HEIGHT

from tests.fixtures_browser import SECRET, DemoStore, build_demo_store, serve_store

pytestmark = pytest.mark.browser
WAIT_MS = 90_000
STEPS = 200  # 3 runs × 200 checkpoints: a full read lasts long enough to show its progress
HEADER_PX = 36  # Streamlit's table header; the findings' rows are taller (the link is the first column)
ROW_PX = FINDING_ROW_HEIGHT


@pytest.fixture(scope="module")
def damaged_store(tmp_path_factory: pytest.TempPathFactory) -> DemoStore:
    base = tmp_path_factory.mktemp("integrity-browser")
    return build_demo_store(base / "store", base / "home", steps=STEPS)  # one blob deleted


@pytest.fixture(scope="module")
def server(damaged_store: DemoStore, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    yield from serve_store(damaged_store, tmp_path_factory.mktemp("integrity-browser-log") / "ui.log", timeout=120)


def _findings_grid(page):
    """The findings table: the first table after its caption ("… finding(s) about a checkpoint"), not
    a position among the page's tables (a table still being drawn under load shifts positions)."""
    return page.locator("xpath=//*[contains(text(), 'finding(s) about a checkpoint')]"
                        "/following::*[@data-testid='stDataFrame'][1]").first


def _table_csv(page, grid) -> list[dict[str, str]]:
    """The rows the browser shows in a (canvas-drawn) table, through its own "Download as CSV"."""
    grid.hover()
    with page.expect_download(timeout=WAIT_MS) as download:
        grid.get_by_role("button", name="Download as CSV").dispatch_event("click")  # no hit test: the
        # page's progress fragment re-renders every second and may move the toolbar under the pointer
    text = Path(download.value.path()).read_text(encoding="utf-8-sig")
    return list(csv.DictReader(io.StringIO(text)))


def _click_first_link(page, grid):
    """Hover the first row's link cell until the grid shows a pointer, then click it (a new tab)."""
    box = grid.bounding_box()
    x, y = box["x"] + 30, box["y"] + HEADER_PX + ROW_PX / 2
    page.mouse.move(x - 10, y)
    page.mouse.move(x, y, steps=5)
    page.wait_for_function("""() => Array.from(document.querySelectorAll('canvas[data-testid="data-grid-canvas"]'))
                                 .some(c => c.style.cursor === 'pointer')""")
    page.mouse.click(x, y)


def test_integrity_page_findings_link_and_full_read_in_chromium(chromium_browser, server: str,
                                                                  damaged_store: DemoStore, tmp_path: Path) -> None:
    damaged = damaged_store.damaged
    context = chromium_browser.new_context(viewport={"width": 1400, "height": 1000}, accept_downloads=True)
    context.add_init_script("delete window.showSaveFilePicker;")  # "Download as CSV" becomes a download
    page = context.new_page()
    page.set_default_timeout(WAIT_MS)
    try:
        page.goto(f"{server}/integrity")
        page.get_by_role("heading", name="Findings").wait_for()
        page.get_by_text("1 of 1 finding(s)").wait_for()
        grid = _findings_grid(page)
        grid.scroll_into_view_if_needed()
        rows = _table_csv(page, grid)
        assert [(r["check"], r["run_id"], r["checkpoint_id"]) for r in rows] == [
            ("blob-missing", "run-gamma", damaged.checkpoint_id)]
        link = parse_qs(urlparse(rows[0]["open"]).query)
        assert link == {"store": [damaged_store.url], "run": ["run-gamma"], "checkpoint": [damaged.checkpoint_id]}
        assert SECRET not in page.inner_text("body")
        page.screenshot(path=str(tmp_path / "integrity.png"))

        # the finding's link (first column): a click opens the Timeline at that checkpoint in a new tab
        with context.expect_page(timeout=WAIT_MS) as opened:
            _click_first_link(page, grid)
        timeline = opened.value
        timeline.set_default_timeout(WAIT_MS)
        timeline.get_by_role("heading", name="Timeline").wait_for()
        timeline.get_by_text(f"Checkpoint {damaged.checkpoint_id}").wait_for()
        query = parse_qs(urlparse(timeline.url).query)
        assert urlparse(timeline.url).path.endswith("/timeline")
        assert query == {"store": [damaged_store.url], "run": ["run-gamma"], "checkpoint": [damaged.checkpoint_id]}
        timeline.get_by_text("does not exist").first.wait_for()  # the checkpoint's finding, on the Timeline
        timeline.close()

        # re-verify: a full read in the background, with progress, ending with the same findings
        page.get_by_role("button", name="Full read").click()
        page.get_by_test_id("stProgress").filter(has_text="data checked:").first.wait_for()
        total = len(damaged_store.saved)
        done = page.get_by_text(re.compile(r"full read done — data checked: [\d,]+ of [\d,]+ checkpoints")).first
        done.wait_for()
        assert f"data checked: {total:,} of {total:,} checkpoints" in done.inner_text(), done.inner_text()
        assert "1 error" in done.inner_text(), done.inner_text()
        page.get_by_text("1 of 1 finding(s)").wait_for()
        after = _table_csv(page, _findings_grid(page))
        assert [(r["check"], r["checkpoint_id"], r["depth"]) for r in after] == [
            ("blob-missing", damaged.checkpoint_id, "data")]
        assert SECRET not in page.inner_text("body")
        page.screenshot(path=str(tmp_path / "integrity-after-full-read.png"))
    finally:
        context.close()
