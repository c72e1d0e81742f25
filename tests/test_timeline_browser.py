"""The Timeline's link in real Chromium against `lastgood ui` on a copy of the LangGraph sample
(subgraph namespaces): a checkpoint of a subgraph picked by the operator puts run, checkpoint and
namespace into the address bar, and that URL opened in a new browser context (no cookies, no
session) shows the same view — the same run, the same checkpoint of the same namespace selected."""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest

from lastgood.config import load_settings
from lastgood.stores import index_store, open_catalog
from tests.fixtures_browser import ROOT, DemoStore, serve_store

pytestmark = pytest.mark.browser
WAIT_MS = 60_000
VIEWPORT = {"width": 1440, "height": 900}
RUN = "research-subgraph-001"


@pytest.fixture(scope="module")
def langgraph_store(tmp_path_factory: pytest.TempPathFactory) -> DemoStore:
    """A copy of the LangGraph sample, indexed beforehand (the server starts on an index)."""
    base = tmp_path_factory.mktemp("tl-browser")
    shutil.copy(ROOT / "sample_data" / "langgraph.sqlite", base / "langgraph.sqlite")
    store = DemoStore(base / "langgraph.sqlite", base / "home")
    index_store(open_catalog(load_settings(store.home)), store.url)
    return store


@pytest.fixture(scope="module")
def server(langgraph_store: DemoStore, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    yield from serve_store(langgraph_store, tmp_path_factory.mktemp("tl-browser-log") / "ui.log", timeout=120)


def new_page(browser: Any) -> Any:
    page = browser.new_context(viewport=VIEWPORT).new_page()
    page.set_default_timeout(WAIT_MS)
    return page


def settled(page: Any, quiet: float = 1.0) -> None:
    """Until the app's script is not running and the view did not change for ``quiet`` seconds."""
    deadline, last, since = time.monotonic() + WAIT_MS / 1000, None, time.monotonic()
    while time.monotonic() < deadline:
        running = page.get_by_test_id("stApp").get_attribute("data-test-script-state") != "notRunning"
        now = (view(page), page.url)
        if running or now != last:
            last, since = now, time.monotonic()
        elif time.monotonic() - since >= quiet:
            return
        time.sleep(0.2)
    raise TimeoutError("the page never settled")


def view(page: Any) -> dict[str, Any]:
    """What the Timeline shows as selected: headings, every picker's value, the pressed axis."""
    return page.evaluate("""() => {
        const main = document.querySelector('[data-testid="stMain"]');
        return {
          headings: [...main.querySelectorAll('h1, h2, h3')].map(e => e.innerText.trim()),
          pickers: Object.fromEntries([...main.querySelectorAll('input[aria-label]')]
                     .map(e => [e.getAttribute('aria-label'), e.value])),
          pressed: [...main.querySelectorAll('[role="radiogroup"] [aria-checked="true"]')].map(e => e.innerText.trim()),
        };
    }""")


def query(page: Any) -> dict[str, list[str]]:
    return parse_qs(urlparse(page.url).query)


def test_a_link_copied_from_the_timeline_reopens_run_checkpoint_and_namespace(chromium_browser, server: str) -> None:
    page = new_page(chromium_browser)
    try:
        page.goto(f"{server}/timeline?run={RUN}")
        page.get_by_role("heading", name="Timeline").wait_for()
        settled(page)
        page.get_by_role("radiogroup", name="Axis").get_by_role("radio", name="step").click()  # the step axis
        settled(page)
        page.get_by_test_id("stSelectbox").filter(has_text="Checkpoint").first.click()
        page.keyboard.type("tools:b0e49577")  # the picker's own filter: a subgraph's checkpoints
        page.get_by_role("option").filter(has_text="step 1 ").first.click()
        page.get_by_role("heading", name="Checkpoint ").wait_for()
        settled(page)
        link = query(page)
        assert link["run"] == [RUN] and link["axis"] == ["step"]
        assert link["ns"] == ["tools:b0e49577-39e4-ac18-9923-a00e30ca9488"] and len(link["checkpoint"]) == 1
        shown = view(page)
        chosen = next(h for h in shown["headings"] if h.startswith("Checkpoint "))
        assert link["checkpoint"][0] in chosen
        assert shown["pickers"]["Run"].startswith(f"{RUN} ·") and shown["pressed"] == ["step"]
        assert "tools:b0e49577" in shown["pickers"]["Checkpoint"], shown  # the picker names the namespace

        copied = page.url
        other = new_page(chromium_browser)  # nothing shared: a new browser context
        try:
            other.goto(copied)
            other.get_by_role("heading", name="Checkpoint ").wait_for()
            other.wait_for_function("""() => document.querySelector(
                '[data-testid="stMain"] input[aria-label="Run"]') !== null""")  # the filters drawn too
            settled(other, quiet=2.0)
            assert view(other) == shown
            assert query(other) == link  # and the address bar still holds the same view
        finally:
            other.context.close()
    finally:
        page.context.close()
