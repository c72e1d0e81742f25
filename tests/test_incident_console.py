"""The dashboard as an incident console, in real Chromium against `lastgood ui` started as a user
starts it: from the Overview to a damaged checkpoint in at most two clicks (sample_data/agents, the
damage listed in sample_data/manifest.json), and a link copied from every page reopening the same
view in a new browser context (nothing shared: no cookies, no session). Waits are for text or a
settled page, generous for a busy 2-core machine."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest

from tests.fixtures_browser import ROOT, DemoStore, free_port, stop_group, wait_for_health

pytestmark = pytest.mark.browser
WAIT_MS = 90_000
VIEWPORT = {"width": 1440, "height": 900}
REDRAW_S = 20.0
MANIFEST = json.loads((ROOT / "sample_data" / "manifest.json").read_text())


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> tuple[DemoStore, Path]:
    """Copies of the native sample store (its damage in the manifest) and the LangGraph sample
    (subgraphs, a fork), served together; the first is the one `lastgood ui` opens on."""
    base = tmp_path_factory.mktemp("incident")
    shutil.copytree(ROOT / "sample_data" / "agents", base / "agents")
    shutil.copy(ROOT / "sample_data" / "langgraph.sqlite", base / "langgraph.sqlite")
    return DemoStore(base / "agents", base / "home"), base / "langgraph.sqlite"


@pytest.fixture(scope="module")
def server(stores: tuple[DemoStore, Path], tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """`lastgood ui NATIVE LANGGRAPH --port N`, exactly as typed (the native store opens first)."""
    native, langgraph = stores
    port, log = free_port(), tmp_path_factory.mktemp("incident-log") / "ui.log"
    env = dict(os.environ, LASTGOOD_HOME=str(native.home), PYTHONUNBUFFERED="1")
    for name in ("LASTGOOD_ALLOW_WRITE", "LASTGOOD_STORES"):
        env.pop(name, None)
    command = [str(Path(sys.executable).with_name("lastgood")), "ui", native.url, str(langgraph), "--port", str(port)]
    with log.open("wb") as out:
        proc = subprocess.Popen(command, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for_health(url, proc, timeout=180)
        yield url
    except (RuntimeError, TimeoutError) as exc:
        pytest.fail(f"{exc}\n--- lastgood ui log ---\n{log.read_text(errors='replace')[-4000:]}")
    finally:
        stop_group(proc)


def new_page(browser: Any) -> Any:
    """A page in a new, empty browser context."""
    page = browser.new_context(viewport=VIEWPORT).new_page()
    page.set_default_timeout(WAIT_MS)
    return page


def settled(page: Any, quiet: float = 1.5) -> None:
    """Wait until the app's script is not running and the page did not change for ``quiet`` seconds."""
    deadline, last, since = time.monotonic() + WAIT_MS / 1000, None, time.monotonic()
    while time.monotonic() < deadline:
        running = page.get_by_test_id("stApp").get_attribute("data-test-script-state") != "notRunning"
        now = view(page)
        if running or now != last:
            last, since = now, time.monotonic()
        elif time.monotonic() - since >= quiet:
            return
        time.sleep(0.25)
    raise TimeoutError("the page never settled")


def view(page: Any) -> dict[str, Any]:
    """What a page shows as selected: its title and headings, every picker's and filter's value,
    the pressed buttons of segmented controls, the metrics, the tab shown of each group of tabs."""
    return page.evaluate("""() => {
        const text = sel => [...document.querySelectorAll(sel)].map(e => e.innerText.trim());
        return {
          headings: text('[data-testid="stMain"] h1, [data-testid="stMain"] h2, [data-testid="stMain"] h3'),
          pickers: text('[data-testid="stSelectbox"], [data-testid="stMultiSelect"], [data-testid="stTextInput"] input')
                     .concat([...document.querySelectorAll('[data-testid="stTextInput"] input, [data-testid="stDateInput"] input')]
                     .map(e => e.value)),
          pressed: [...document.querySelectorAll('[data-testid="stButtonGroup"] button[aria-checked="true"], '
                     + '[data-testid="stButtonGroup"] button[kind*="Active"]')].map(e => e.innerText.trim()),
          metrics: text('[data-testid="stMetricValue"]'),
          tabs: text('[data-testid="stMain"] [data-testid="stTab"][aria-selected="true"]'),
          alerts: text('[data-testid="stMain"] [data-testid="stAlertContainer"]'),
        };
    }""")


def reopened(browser: Any, url: str, expected: dict[str, Any]) -> dict[str, Any]:
    """The view a copied link shows in a new browser context, once settled; on a busy machine a part
    drawn late (the sidebar's controls come after the page) gets REDRAW_S more to match ``expected``."""
    page = new_page(browser)
    try:
        page.goto(url)
        page.get_by_role("heading").first.wait_for()
        settled(page)
        deadline = time.monotonic() + REDRAW_S
        while view(page) != expected and time.monotonic() < deadline:
            time.sleep(0.5)
        return view(page)
    finally:
        page.context.close()


def open_list(page: Any, picker: Any) -> None:
    """Open a select box's list: scrolled into view first (Playwright's own scroll-then-click can land
    while Streamlit lays the page out again, and the list stays shut: then once more)."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    picker.scroll_into_view_if_needed()
    for _ in range(3):
        picker.click()
        try:
            page.get_by_role("listbox").first.wait_for(timeout=5_000)
            return
        except PlaywrightTimeout:
            continue
    raise AssertionError("the list never opened")


# ---- (1) from the Overview to the damaged checkpoint -------------------------------------------------


def test_from_the_overview_to_a_damaged_checkpoint_in_two_clicks(chromium_browser, server: str) -> None:
    damaged = {d["checkpoint_id"] for d in MANIFEST["damaged"] if d["run_id"] == "research-005"}
    assert len(damaged) == 2  # its two newest: its last good is not its head
    page = new_page(chromium_browser)
    clicks = 0
    try:
        page.goto(server)
        action = page.get_by_test_id("stHorizontalBlock").filter(has_text="in run research-005").last
        action.get_by_role("button", name="Inspect run").click()
        clicks += 1
        page.get_by_role("heading", name="Timeline").wait_for()
        heading = page.get_by_role("heading", name="Checkpoint ")
        heading.wait_for()
        shown = heading.inner_text().removeprefix("Checkpoint ").strip()
        assert shown in damaged and clicks <= 2
        page.get_by_text("catalog says").first.wait_for()  # why: its status reason, on the same screen
        assert parse_qs(urlparse(page.url).query)["checkpoint"] == [shown]  # the view is a link already
        page.get_by_role("button", name="Previous problem").click()  # the other damaged one, selected
        page.get_by_role("heading", name=f"Checkpoint {(damaged - {shown}).pop()}").wait_for()
    finally:
        page.context.close()


# ---- (3) every view is a link ----------------------------------------------------------------------------


def test_a_link_copied_from_every_page_reopens_the_same_view(chromium_browser, server: str,
                                                              stores: tuple[DemoStore, Path]) -> None:
    _, langgraph = stores
    page = new_page(chromium_browser)
    try:
        # Overview, on the dashboard's second store (not the one it opens on)
        page.goto(server)
        page.get_by_test_id("stMetricValue").first.wait_for()
        sidebar = page.get_by_test_id("stSidebar")
        open_list(page, sidebar.get_by_test_id("stSelectbox").filter(has_text="Store"))
        page.get_by_role("option", name="langgraph.sqlite").first.click()
        page.get_by_text("354").first.wait_for()  # its checkpoints
        settled(page)
        assert parse_qs(urlparse(page.url).query)["store"] == [str(langgraph)]
        expected = view(page)
        assert reopened(chromium_browser, page.url, expected) == expected

        # Timeline: a run found by search, a checkpoint of it selected, the step axis, a tab of its view
        page.get_by_test_id("stSidebarNav").get_by_role("link", name="Timeline").click()
        page.get_by_role("heading", name="Timeline").wait_for()
        page.get_by_placeholder("run id, checkpoint id or prefix").fill("source=fork")
        page.keyboard.press("Enter")
        page.get_by_role("button", name="metadata match").first.click()
        page.get_by_role("heading", name="Checkpoint ").wait_for()
        page.wait_for_url(re.compile(r"[?&]checkpoint="))  # the selection is in the link: its run is over
        settled(page)  # as an operator reads what opened before the next click
        page.get_by_role("radiogroup", name="Axis").get_by_role("radio", name="step").click()
        page.wait_for_url(re.compile(r"[?&]axis=step(&|$)"))
        settled(page)
        writes = page.get_by_role("tab", name=re.compile(r"^Pending writes \(\d+\)$"))
        assert writes.count() == 1, f"no Pending writes tab at {page.url}: {view(page)}"
        writes.click()
        page.wait_for_url(re.compile(r"[?&]tab=writes(&|$)"))
        settled(page)
        query = parse_qs(urlparse(page.url).query)
        assert query["run"] == ["research-fork-001"] and query["axis"] == ["step"] and query["checkpoint"]
        assert query["tab"] == ["writes"]
        timeline = view(page)
        assert any(h.startswith("Checkpoint ") for h in timeline["headings"])
        assert [t.split(" (")[0] for t in timeline["tabs"]] == ["Pending writes"]  # reopened: the same tab shown
        assert reopened(chromium_browser, page.url, timeline) == timeline

        # Diff: the selected checkpoint against its parent
        page.get_by_role("link", name="Compare with parent").click()
        page.get_by_role("heading", name="Diff").wait_for()
        settled(page)
        assert {"a", "b"} <= set(parse_qs(urlparse(page.url).query))
        expected = view(page)
        assert reopened(chromium_browser, page.url, expected) == expected

        # Recovery: a rollback planned from the Timeline's checkpoint (a dry-run preview)
        page.go_back()
        page.get_by_role("heading", name="Checkpoint ").wait_for()
        page.get_by_role("link", name="Rollback to here").click()
        page.get_by_role("heading", name="Recovery").wait_for()
        settled(page)
        assert parse_qs(urlparse(page.url).query)["action"] == ["rollback"]
        expected = view(page)
        assert reopened(chromium_browser, page.url, expected) == expected
    finally:
        page.context.close()


def test_a_filtered_integrity_link_reopens_the_same_findings(chromium_browser, server: str) -> None:
    page = new_page(chromium_browser)
    try:
        page.goto(server)  # the native store, with its errors
        page.get_by_test_id("stMetricValue").first.wait_for()
        page.get_by_test_id("stSidebarNav").get_by_role("link", name="Integrity").click()
        page.get_by_role("heading", name="Findings").wait_for()
        settled(page)
        open_list(page, page.get_by_test_id("stMultiSelect").filter(has_text="Severity"))
        page.get_by_role("option", name="error").first.click()
        page.keyboard.press("Escape")
        settled(page)
        assert "error" in parse_qs(urlparse(page.url).query).get("severity", []), page.url
        expected = view(page)
        assert "error" in " ".join(expected["pickers"])
        assert reopened(chromium_browser, page.url, expected) == expected
    finally:
        page.context.close()
