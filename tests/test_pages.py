"""One Streamlit AppTest per page against a real native store, plus the layering rules.

The demo store (tests/fixtures_browser.py) has 3 runs of 2 agents, chat
messages, a secret in ``tools.api_key`` and in an error event, and one
checkpoint whose blob was deleted before a full re-index.
"""

from __future__ import annotations

import ast
import json
import re
import shutil
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from lastgood import ui
from lastgood.ui import sidebar as ui_sidebar
from lastgood.ui import timeline
from lastgood.config import load_settings
from lastgood.stores import index_store, normalize_url, open_catalog
from lastgood.readers.native.writer import NativeWriter
from tests.fixtures_browser import SECRET, DemoStore, build_demo_store, page_env

ROOT = Path(__file__).resolve().parents[1]
ENTRY = str(ROOT / "app" / "streamlit_app.py")
TIMELINE = "../pages/timeline.py"
FORBIDDEN_IN_PAGES = {"duckdb", "fsspec", "sqlite3", "psycopg", "pyarrow"}
TIMEOUT = 30
SQL = re.compile(r"\b(SELECT|INSERT|UPDATE|DELETE|CREATE)\b[^\n]*\b(FROM|INTO|SET|TABLE)\b")


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> DemoStore:
    base = tmp_path_factory.mktemp("pages")
    return build_demo_store(base / "store", base / "home")


@pytest.fixture()
def app_env(demo: DemoStore, monkeypatch: pytest.MonkeyPatch) -> DemoStore:
    page_env(monkeypatch, demo.home, demo.url)
    return demo


def run_app(page: str | None = None) -> AppTest:
    at = AppTest.from_file(ENTRY, default_timeout=TIMEOUT).run()
    if page:
        at.switch_page(page).run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def rendered_text(at: AppTest) -> str:
    """Everything the app sent to the browser: every element's and block's proto, tables as CSV."""
    parts: list[str] = []

    def walk(node: object) -> None:
        proto = getattr(node, "proto", None)
        if proto is not None:
            parts.append(str(proto))
        if type(node).__name__ == "Dataframe":
            parts.append(node.value.to_csv())  # type: ignore[attr-defined]
        elif type(node).__name__ == "Json":
            parts.append(node.proto.body)  # type: ignore[attr-defined]
        for child in getattr(node, "children", {}).values():
            walk(child)

    walk(at._tree)
    return "\n".join(parts)


def table_with(at: AppTest, *columns: str):
    """The first rendered table that has all ``columns``."""
    for frame in at.dataframe:
        if set(columns) <= set(frame.value.columns):
            return frame.value
    raise AssertionError(f"no table with columns {columns}")


def pick_checkpoint(at: AppTest, run_id: str, checkpoint_id: str) -> AppTest:
    at.selectbox(key="tl_run").select(run_id).run()
    at.selectbox(key="tl_ckpt").select(checkpoint_id).run()
    assert not at.exception, [e.value for e in at.exception]
    return at


# ---- Overview -------------------------------------------------------------------------


def test_overview_shows_the_store(app_env: DemoStore) -> None:
    at = run_app()
    assert not at.dataframe  # a session's first visit: the tables follow the first screen
    assert any("Loading the failures, agents and runs tables" in c.value for c in at.caption)
    at.run()  # the whole-page run the browser asks for once it drew the first screen
    assert not at.exception, [e.value for e in at.exception]
    assert not any("Loading the failures" in c.value for c in at.caption)
    metrics = {m.label: m.value for m in at.metric}
    assert metrics == {"Checkpoints": "18", "Runs": "3", "Agents": "2", "Storage": app_env.human_size,
                       "Corrupt": "1", "Incomplete": "0"}
    runs = table_with(at, "run_id", "head", "last_step")
    assert list(runs["run_id"]) == ["run-gamma", "run-beta", "run-alpha"]  # most recent first
    assert list(runs["corrupt"]) == [1, 0, 0]
    actions = " ".join(m.value for m in at.markdown)
    assert "1 corrupt checkpoint in run `run-gamma`" in actions
    assert "1 recent error event(s); latest in run `run-beta`" in actions and r"\[redacted\]" in actions
    failures = table_with(at, "what", "detail")
    assert app_env.damaged.checkpoint_id in set(failures["checkpoint_id"])
    assert at.sidebar.selectbox(key="lastgood_store").value == app_env.url
    assert "read-only" in rendered_text(at)
    assert SECRET not in rendered_text(at)


def test_overview_action_opens_the_run_in_timeline(app_env: DemoStore) -> None:
    at = run_app()
    at.button(key="action-0").click().run()
    assert not at.exception
    assert at.selectbox(key="tl_run").value == "run-gamma"
    assert at.title[0].value == "Timeline"


# ---- Timeline -------------------------------------------------------------------------


def test_timeline_selection_shows_checkpoint_and_redacted_state(app_env: DemoStore) -> None:
    at = run_app(TIMELINE)
    chosen = app_env.of_run("run-alpha")[3]
    pick_checkpoint(at, "run-alpha", chosen.checkpoint_id)
    text = rendered_text(at)
    assert any(chosen.checkpoint_id in s.value for s in at.subheader)
    assert "`run-alpha`" in text and "step** &nbsp; `3`" in text
    chats = [m for m in at.chat_message]
    assert len(chats) == 8 and chats[0].name == "user"
    assert chats[0].markdown[0].value == "run-alpha: please do task 0"
    assert '"api_key": "[redacted]"' in text and '"enabled"' in text
    assert SECRET not in text


def test_timeline_damaged_checkpoint_shows_reason_and_metadata(app_env: DemoStore) -> None:
    at = run_app(TIMELINE)
    damaged = app_env.damaged
    pick_checkpoint(at, "run-gamma", damaged.checkpoint_id)
    errors = " ".join(e.value for e in at.error)
    assert "corrupt" in errors and "does not exist" in errors
    assert any("The state cannot be shown" in w.value for w in at.warning)
    text = rendered_text(at)
    assert damaged.checkpoint_id in text and "step** &nbsp; `5`" in text
    assert "blob-missing" in text  # the findings tab
    assert SECRET not in text


def test_timeline_agent_scope_and_prefix_lookup(app_env: DemoStore) -> None:
    at = run_app(TIMELINE)
    at.selectbox(key="tl_agent").select("planner").run()
    assert at.selectbox(key="tl_run").value == "All runs"
    assert len(at.selectbox(key="tl_ckpt").options) == 12  # both planner runs
    target = app_env.of_run("run-beta")[3]
    at.text_input(key="tl_ref").input(target.checkpoint_id[:30]).run()
    assert not at.exception
    assert any(target.checkpoint_id in s.value for s in at.subheader)
    events = table_with(at, "kind", "message")
    assert list(events["kind"]) == ["error"] and "[redacted]" in events["message"][0]
    assert SECRET not in rendered_text(at)


def test_timeline_aggregates_many_points(app_env: DemoStore, monkeypatch: pytest.MonkeyPatch) -> None:
    from lastgood.ui import lanes

    monkeypatch.setattr(lanes, "MAX_POINTS", 10)  # the demo store has 18 checkpoints
    at = run_app(TIMELINE)
    assert at.selectbox(key="tl_run").value == "All runs"
    assert any("18 checkpoint(s)" in i.value and "bucketed" in i.value for i in at.info)
    chart = json.loads(at.get("plotly_chart")[0].proto.spec)
    hovers = [h for trace in chart["data"] for h in trace.get("hovertext", [])]
    assert any("(aggregated)" in h for h in hovers)
    options = at.selectbox(key="tl_ckpt").options  # damaged checkpoints and heads stay individual points
    assert len(options) == 3 and sum("corrupt" in o for o in options) == 1
    at.selectbox(key="tl_ckpt").select(app_env.damaged.checkpoint_id).run()
    assert any(app_env.damaged.checkpoint_id in s.value for s in at.subheader)


# ---- the store picker -----------------------------------------------------------------


@pytest.mark.parametrize("url, expected", [
    ("/definitely/not/a/store", "store not found"),
    ("foo://bucket/x", "cannot open foo://bucket/x: ValueError: Protocol not known: foo"),
    ("postgresql://ops:hunter2-pw@127.0.0.1:9/db", "postgresql://127.0.0.1:9/db"),
])
def test_bad_store_url_shows_an_error(app_env: DemoStore, url: str, expected: str) -> None:
    at = run_app()
    at.sidebar.text_input(key="lastgood_new_url").input(url).run()
    assert not at.exception
    errors = " ".join(e.value for e in at.sidebar.error)
    assert expected in errors
    assert at.sidebar.text_input(key="lastgood_new_url").value == ""
    assert {m.label: m.value for m in at.metric}["Checkpoints"] == "18"  # still on the old store
    assert "hunter2" not in rendered_text(at)


def test_picking_a_new_store_indexes_it(app_env: DemoStore, tmp_path: Path) -> None:
    writer = NativeWriter(str(tmp_path / "other"))
    writer.save("solo", {"x": 1}, agent="solo-agent", step=0)
    writer.save("solo", {"x": 2}, agent="solo-agent", step=1)
    at = run_app()
    at.sidebar.text_input(key="lastgood_new_url").input(str(tmp_path / "other")).run()
    assert not at.exception and not at.sidebar.error
    assert at.sidebar.selectbox(key="lastgood_store").value == str(tmp_path / "other")
    assert {m.label: m.value for m in at.metric}["Checkpoints"] == "2"
    assert any("never verified with --read-data" in m.value for m in at.markdown)


def test_store_gone_still_shows_what_the_index_has(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    saved = NativeWriter(str(tmp_path / "gone")).save("r1", {"x": 1}, agent="a", step=0)
    index_store(open_catalog(load_settings(tmp_path / "home")), str(tmp_path / "gone"))
    shutil.move(tmp_path / "gone", tmp_path / "moved")
    monkeypatch.setenv("LASTGOOD_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("LASTGOOD_STORES", str(tmp_path / "gone"))
    at = run_app(TIMELINE)
    assert any("store not found" in e.value and "showing the index as it was" in e.value
               for e in at.sidebar.error)
    at.selectbox(key="tl_ckpt").select(saved.checkpoint_id).run()
    assert not at.exception
    assert any(saved.checkpoint_id in s.value for s in at.subheader)
    assert any("The state cannot be shown" in w.value and "store not found" in w.value for w in at.warning)


def test_empty_index_and_empty_store_are_explained(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LASTGOOD_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("LASTGOOD_STORES", raising=False)
    at = run_app()
    assert any("No store selected" in i.value for i in at.info)
    assert at.sidebar.text_input(key=ui_sidebar.NEW_URL_KEY)  # the picker is drawn though the page stopped
    NativeWriter(str(tmp_path / "empty"))
    monkeypatch.setenv("LASTGOOD_STORES", str(tmp_path / "empty"))
    at = run_app()
    assert any("No checkpoints in this store yet" in i.value for i in at.info)
    assert at.sidebar.selectbox(key=ui.STORE_KEY).value == normalize_url(str(tmp_path / "empty"))
    at = run_app(TIMELINE)
    assert any("No checkpoints in this store yet" in i.value for i in at.info)
    assert at.sidebar.selectbox(key=ui.STORE_KEY) and at.sidebar.button[0].label == "Re-index"
    assert not at.get("plotly_chart")  # the frame drawn while the page read the store is gone


def test_timeline_draws_a_frame_before_reading_then_its_figure(app_env: DemoStore,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """A session's first Timeline draws an empty frame before it reads the checkpoints (the browser
    loads Plotly's script meanwhile); the figure replaces it, and later reruns draw no frame."""
    calls: list[str] = []
    for name, label in (("timeline_placeholder", "frame"), ("lanes_data", "read")):
        original = getattr(timeline, name)
        monkeypatch.setattr(timeline, name, lambda *a, _f=original, _l=label: calls.append(_l) or _f(*a))
    at = run_app(TIMELINE)
    assert calls == ["frame", "read"]
    charts = at.get("plotly_chart")
    assert len(charts) == 1
    figure = json.loads(charts[0].proto.spec)
    assert figure["data"] and "Reading the checkpoints" not in charts[0].proto.spec
    at.segmented_control(key="tl_axis").set_value("step").run()
    assert calls == ["frame", "read", "read"] and len(at.get("plotly_chart")) == 1


# ---- layering -------------------------------------------------------------------------


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def test_pages_import_no_storage_or_database_modules() -> None:
    pages = sorted((ROOT / "pages").glob("*.py"))
    assert pages
    for page in pages:
        assert not imported_modules(page) & FORBIDDEN_IN_PAGES, page.name
        assert not SQL.search(page.read_text()), f"{page.name} holds SQL"


def test_pages_stop_through_ui_stop() -> None:
    # st.stop() would leave out what the page run draws at its end (the store picker's widgets)
    callers = [str(p.relative_to(ROOT)) for p in [*(ROOT / "pages").glob("*.py"), *(ROOT / "app" / "ui").glob("*.py")]
               if "st.stop()" in p.read_text().replace('``st.stop()``', "")]
    assert callers == ["app/ui/pagerun.py"]  # ui.stop itself


def test_the_sidebar_widgets_follow_the_pages_first_screen(app_env: DemoStore,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    # sent after the numbers and figures (the browser loads their code last), drawn in their place
    import streamlit as st
    from streamlit.delta_generator import DeltaGenerator

    from lastgood.ui import overview

    sent: list[str] = []
    for name in ("metric", "text_input", "selectbox", "button"):  # cells' metrics; st.* widgets
        owner = DeltaGenerator if name == "metric" else st
        original = getattr(owner, name)
        record = (lambda self, *a, _f=original, _n=name, **k: sent.append(_n) or _f(self, *a, **k)) \
            if owner is DeltaGenerator else (lambda *a, _f=original, _n=name, **k: sent.append(_n) or _f(*a, **k))
        monkeypatch.setattr(owner, name, record)
    figure = overview.figure
    monkeypatch.setattr(overview, "figure", lambda svg: sent.append("figure") or figure(svg))
    at = run_app()
    assert sent.count("metric") == 6 and sent.count("figure") == 2
    last_figure = len(sent) - 1 - sent[::-1].index("figure")
    assert last_figure < sent.index("text_input") < sent.index("selectbox") < sent.index("button")
    sidebar = at.sidebar
    assert [w.label for w in sidebar.text_input] == ["Open a store"]
    assert sidebar.selectbox(key=ui.STORE_KEY).value == app_env.url
    assert sidebar.button[0].label == "Re-index"


def test_only_ui_and_entry_import_streamlit() -> None:
    # the UI layer is the package app/ui/ (one module per page beside its shared helpers) and the entry
    offenders = [str(p.relative_to(ROOT)) for p in (ROOT / "app").rglob("*.py")
                 if p.parent != ROOT / "app" / "ui" and p.name != "streamlit_app.py"
                 and "streamlit" in imported_modules(p)]
    assert offenders == []
    assert not (ROOT / "app" / "pages").exists()  # would switch Streamlit to legacy multipage mode


def four_checkpoint_store(store: Path, home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A native store of 4 checkpoints, the dashboard's only one; the index decodes no blob
    (LASTGOOD_AUTO_DATA_BYTES=0)."""
    writer = NativeWriter(str(store))
    for step in range(4):
        writer.save("run-a", {"x": step}, agent="a", step=step)
    monkeypatch.setenv("LASTGOOD_HOME", str(home))
    monkeypatch.setenv("LASTGOOD_STORES", str(store))
    monkeypatch.setenv("LASTGOOD_AUTO_DATA_BYTES", "0")


def test_overview_says_when_blob_files_were_not_checked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A store beyond LASTGOOD_AUTO_WALK_ENTRIES is indexed from its catalog only: the Overview says
    its blob check is pending (with the command that runs it) until `lastgood verify` walked it."""
    four_checkpoint_store(tmp_path / "big", tmp_path / "home", monkeypatch)
    monkeypatch.setenv("LASTGOOD_AUTO_WALK_ENTRIES", "2")
    at = run_app()
    pending = [m.value for m in at.markdown if "Blob check pending for 4 checkpoint(s)" in m.value]
    assert pending and "lastgood verify" in pending[0]
    from tests.helpers import lastgood_cli

    done = lastgood_cli("verify", str(tmp_path / "big"), home=tmp_path / "home")
    assert done.returncode == 0, done.stderr
    ui.clear_query_caches()
    at = run_app()
    assert not any("Blob check pending" in m.value for m in at.markdown)


def test_overview_says_when_data_checks_are_pending(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Blobs not decoded yet (the index's data check skipped by its byte budget): the numbers say
    Corrupt is what the structure check found so far, until a data check read them."""
    four_checkpoint_store(tmp_path / "store", tmp_path / "home", monkeypatch)
    monkeypatch.delenv("LASTGOOD_BACKGROUND_CHECK", raising=False)
    at = run_app()
    assert any("Data check pending for 4 of 4 checkpoint(s)" in c.value for c in at.caption)
    assert any("never verified with --read-data" in m.value for m in at.markdown)
    from lastgood.integrity import background

    job = background.start(str(load_settings().index_path), str(tmp_path / "store"), "data",
                           only_unverified=True, delay=60)  # held before its work: running, nothing read
    try:
        at = run_app()
        actions = " ".join(m.value for m in at.markdown)
        assert "A data check is reading the 4 checkpoint(s) not decoded yet" in actions
        assert "never verified" not in actions
    finally:
        job.cancel()
        background.wait(job.index_path, job.url)
    assert job.state == "cancelled"
    from tests.helpers import lastgood_cli

    store, home = str(tmp_path / "store"), tmp_path / "home"
    newest = json.loads(lastgood_cli("ls", store, "--format", "json", home=home).stdout)[-1]["checkpoint_id"]
    at = pick_checkpoint(run_app(TIMELINE), "run-a", newest)  # one checkpoint says it too, as `show` does
    assert any("Data check pending" in c.value for c in at.caption)
    shown = lastgood_cli("show", store, newest, "--format", "json", home=home)
    assert json.loads(shown.stdout)["checkpoint"]["data_checked"] is False
    assert "data check pending" in lastgood_cli("show", store, newest, home=home).stdout

    done = lastgood_cli("verify", "--read-data", store, home=home)
    assert done.returncode == 0, done.stderr
    ui.clear_query_caches()
    at = run_app()
    assert {m.label: m.value for m in at.metric}["Checkpoints"] == "4"
    assert not any("Data check pending" in c.value for c in at.caption)
    at = pick_checkpoint(run_app(TIMELINE), "run-a", newest)
    assert not any("Data check pending" in c.value for c in at.caption)
    shown = lastgood_cli("show", store, newest, "--format", "json", home=home)
    assert json.loads(shown.stdout)["checkpoint"]["data_checked"] is True


def test_re_index_reads_what_changed_in_the_shown_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.helpers import agent_state

    store = str(tmp_path / "store")
    writer = NativeWriter(store)
    for step in range(3):
        writer.save("run-a", agent_state(step), agent="agent-a")
    monkeypatch.setenv("LASTGOOD_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("LASTGOOD_STORES", store)
    monkeypatch.delenv("LASTGOOD_ALLOW_WRITE", raising=False)
    at = run_app()
    assert {m.label: m.value for m in at.metric}["Checkpoints"] == "3"
    writer.save("run-a", agent_state(3), agent="agent-a")
    at.run()  # a rerun alone shows the index as it was read this session
    assert {m.label: m.value for m in at.metric}["Checkpoints"] == "3"
    at.sidebar.button[0].click().run()
    assert not at.exception, [e.value for e in at.exception]
    assert {m.label: m.value for m in at.metric}["Checkpoints"] == "4"
