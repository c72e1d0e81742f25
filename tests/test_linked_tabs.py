"""Every tab is part of the page's link (issue #32), under AppTest on the demo store: a link's
``tab=…`` opens the checkpoint view, Recovery and Storage on that tab; a click on a tab (the value the
browser sends for the tabs, so their callback runs as in Chromium) writes it into the URL; the tab
outlives its label's count; the first tab and unknown names stay out of the URL; every tab's body is
still drawn; and a click's rerun that brings an older address never puts the previous view back.
The Chromium side (click, copy the URL, reopen in a new browser context): tests/test_incident_console.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from streamlit.testing.v1 import AppTest

from lastgood.ui import tabs, timeline
from tests.fixtures_browser import DemoStore, build_demo_store, page_env

ROOT = Path(__file__).resolve().parents[1]
ENTRY = str(ROOT / "app" / "streamlit_app.py")
PAGES = {"timeline": "../pages/timeline.py", "recovery": "../pages/recovery.py", "storage": "../pages/storage.py"}
TIMEOUT = 60


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> DemoStore:
    base = tmp_path_factory.mktemp("linked-tabs")
    return build_demo_store(base / "store", base / "home")


@pytest.fixture()
def app_env(demo: DemoStore, monkeypatch: pytest.MonkeyPatch) -> DemoStore:
    page_env(monkeypatch, demo.home, demo.url)
    return demo


def open_page(page: str, **params: Any) -> AppTest:
    """``page`` opened by its link (as a browser opening the URL)."""
    at = AppTest.from_file(ENTRY, default_timeout=TIMEOUT)
    at.run()
    for name, value in params.items():
        at.query_params[name] = value
    at.switch_page(PAGES[page]).run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def tab_container(at: AppTest) -> Any:
    (container,) = at.get("tab_container")  # one group of tabs per page
    return container


def labels(at: AppTest) -> list[str]:
    return [tab.label for tab in tab_container(at).children.values()]


def shown(at: AppTest) -> str:
    """The label of the tab the browser is told to show."""
    return labels(at)[tab_container(at).proto.tab_container.default_tab_index]


def label(at: AppTest, prefix: str) -> str:
    return next(name for name in labels(at) if name.startswith(prefix))


def click_tab(at: AppTest, prefix: str) -> AppTest:
    """A click on a tab: Chromium sends the tabs' new value (the label) with the other widgets' values,
    which runs their on_change callback. AppTest 1.67 has no tab widget to click: its own ``_tree`` and
    ``_run`` (what ``at.run()`` calls) send that widget state; a change of AppTest fails here loudly."""
    states = at._tree.get_widget_states()
    clicked = states.widgets.add()
    clicked.id, clicked.string_value = tab_container(at).proto.tab_container.id, label(at, prefix)
    at._run(states)
    assert not at.exception, [e.value for e in at.exception]
    return at


def url(at: AppTest) -> dict[str, Any]:
    return {name: at.query_params[name] for name in at.query_params}


def test_a_links_tab_opens_the_checkpoint_view_on_it_and_a_click_writes_the_tab(app_env: DemoStore) -> None:
    damaged = app_env.damaged
    at = open_page("timeline", store=app_env.url, run="run-gamma", checkpoint=damaged.checkpoint_id, tab="findings")
    assert shown(at) == "Findings (1)" and at.session_state[tabs.widget_key(tabs.CHECKPOINT)] == "Findings (1)"
    assert url(at)["tab"] == "findings" and url(at)["checkpoint"] == damaged.checkpoint_id
    findings = next(d.value for d in at.dataframe if {"severity", "check", "message"} <= set(d.value.columns))
    assert "blob-missing" in set(findings["check"])  # the tab's body
    assert any("The state cannot be shown" in w.value for w in at.warning)  # the hidden State tab's body too

    click_tab(at, "Metadata")
    assert shown(at) == "Metadata" and url(at)["tab"] == "metadata"
    click_tab(at, "State")  # the first tab: left out of the URL
    assert shown(at) == "State" and "tab" not in url(at) and url(at)["checkpoint"] == damaged.checkpoint_id


def test_the_tab_outlives_its_labels_count_and_a_bad_name_opens_the_first(app_env: DemoStore) -> None:
    quiet, loud = app_env.of_run("run-beta")[2], app_env.of_run("run-beta")[3]  # no event / an error event
    at = open_page("timeline", store=app_env.url, run="run-beta", checkpoint=quiet.checkpoint_id)
    assert shown(at) == "State" and "tab" not in url(at)
    click_tab(at, "Events")
    assert shown(at) == "Events (0)" and url(at)["tab"] == "events"
    at.selectbox(key=timeline.CHECKPOINT).select(loud.checkpoint_id).run()  # another count: still its Events
    assert shown(at) == "Events (1)" and url(at)["tab"] == "events" and url(at)["checkpoint"] == loud.checkpoint_id
    events = next(d.value for d in at.dataframe if {"kind", "message"} <= set(d.value.columns))
    assert list(events["kind"]) == ["error"]

    for bad in ("nope", "tensors"):  # unknown, and a training checkpoint's tab
        at = open_page("timeline", store=app_env.url, run="run-beta", checkpoint=loud.checkpoint_id, tab=bad)
        assert shown(at) == "State" and "tab" not in url(at), bad


def test_a_clicks_rerun_bringing_an_older_address_keeps_the_view(app_env: DemoStore) -> None:
    """Under load the browser may send a click before it applied the URL of the previous one: that
    older address is no link (it would select the previous checkpoint again)."""
    first, second = app_env.of_run("run-alpha")[1], app_env.of_run("run-alpha")[4]
    at = open_page("timeline", store=app_env.url, run="run-alpha", checkpoint=first.checkpoint_id)
    older = url(at)
    at.selectbox(key=timeline.CHECKPOINT).select(second.checkpoint_id).run()
    assert url(at)["checkpoint"] == second.checkpoint_id
    at.query_params.clear()
    at.query_params.update(older)  # the address the browser still showed
    click_tab(at, "Findings")
    assert at.selectbox(key=timeline.CHECKPOINT).value == second.checkpoint_id
    assert shown(at) == "Findings (0)"
    assert url(at)["checkpoint"] == second.checkpoint_id and url(at)["tab"] == "findings"


def test_a_timeline_control_changed_on_an_older_address_keeps_the_view(app_env: DemoStore) -> None:
    """The same for the Timeline's own controls (the Axis here): a change sent before the browser
    applied the previous selection's URL neither drops nor replaces the selected checkpoint."""
    first, second = app_env.of_run("run-alpha")[1], app_env.of_run("run-alpha")[4]
    at = open_page("timeline", store=app_env.url, run="run-alpha", checkpoint=first.checkpoint_id)
    older = url(at)
    at.selectbox(key=timeline.CHECKPOINT).select(second.checkpoint_id).run()
    at.query_params.clear()
    at.query_params.update(older)  # the address the browser still showed
    at.button_group(key=timeline.AXIS).set_value("step").run()
    assert not at.exception, [e.value for e in at.exception]
    assert at.selectbox(key=timeline.CHECKPOINT).value == second.checkpoint_id
    assert url(at)["checkpoint"] == second.checkpoint_id and url(at)["axis"] == "step"


def test_recovery_and_storage_tabs_are_in_their_links(app_env: DemoStore) -> None:
    at = open_page("recovery", store=app_env.url, tab="journal")
    assert labels(at) == ["Action", "Journal"] and shown(at) == "Journal" and url(at)["tab"] == "journal"
    click_tab(at, "Action")
    assert shown(at) == "Action" and "tab" not in url(at) and url(at)["store"] == app_env.url

    at = open_page("storage", store=app_env.url, tab="by-run")
    assert shown(at) == "By run" and url(at) == {"store": app_env.url, "tab": "by-run"}
    click_tab(at, "Largest")
    assert shown(at) == "Largest checkpoints" and url(at)["tab"] == "largest"
    runs = next(d.value for d in at.dataframe if "namespaces" in d.value.columns)  # another tab's body
    assert sorted(runs["run_id"]) == ["run-alpha", "run-beta", "run-gamma"]
