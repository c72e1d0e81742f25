"""Streamlit glue: the UI layer, the one package that imports both streamlit and the core.

This module holds what every page shares; ``lastgood.ui.diff``, ``.integrity``, ``.overview`` and
``.recovery`` hold one page's helpers each. Pages call into this package for everything that touches the index or a
store: the cached catalog, cached query results, the store picker shared by
every page, and renderers (tables, plotly figures, the checkpoint and state
viewers). Everything shown has been redacted (app.redact) and every URL is
shown without credentials (readers.registry.display_url).
"""

from __future__ import annotations

import atexit
import json
import os
import re
import threading
import time
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NoReturn

import pyarrow as pa

from lastgood.display import plotly_theme as lazy_plotly_theme
from lastgood.display.plotly_theme import warm_up as warm_up_plotly_pages  # noqa: F401 - for pages

lazy_plotly_theme.install()  # before Streamlit's import: its Plotly theme waits for the first Plotly page

import streamlit as st  # noqa: E402

from lastgood.index import page_queries  # noqa: E402
from lastgood.index import queries  # noqa: E402
from lastgood.serve import process as serve  # noqa: E402
from lastgood.index.catalog import Catalog
from lastgood.config import load_settings
from lastgood.credentials import split_url
from lastgood.errors import LastgoodError
from lastgood.cli.output import dumps, escape_controls, human_bytes
from lastgood.redact import redact, redact_text
from lastgood.investigate.show import checkpoint_view
from lastgood.stores import OpenStore, index_store, normalize_url, open_store
from lastgood.display.figures import (  # the names pages use are re-exported here
    ALL_RUNS as ALL_RUNS,
    DAMAGED,
    TimelineData,
    checkpoint_choices as checkpoint_choices,
    compact,
    run_labels as run_labels,
    selected_checkpoint as selected_checkpoint,
    timeline_figure as timeline_figure,
    timeline_placeholder as timeline_placeholder,
    utc,
)
from lastgood.investigate.stateview import (
    find_conversation,
    get_path,
    order_channels,
    tool_call,
    truncate,
    without_path,
)
from lastgood.pages import page_path
from lastgood.readers.registry import display_url

if TYPE_CHECKING:  # pandas is imported by the pages that need frames: the Overview does not
    import pandas as pd

CACHE_TTL = 60
_warm_lock = threading.Lock()
TIMELINE_PAGE = page_path("timeline")
DIFF_PAGE = page_path("diff")
ALL_AGENTS = "All agents"
MAX_TABLE_ROWS = 500
FAILURES_SHOWN = 20  # lastgood.index.overview.failures' default limit
TIMELINE_MAX_POINTS = queries.DEFAULT_MAX_POINTS  # above this, queries.timeline buckets in SQL
MAX_MESSAGES = 50
CONVERSATION_HEIGHT = 420
UI_CHECK_DEPTH = "structure"  # the picker's fast check; `lastgood verify --read-data` re-reads blobs

BADGE_COLORS = {"ok": "green", "corrupt": "red", "incomplete": "orange", "quarantined": "violet",
                "superseded": "gray"}

# session-state keys
STORE_KEY = "lastgood_store"
NEW_URL_KEY = "lastgood_new_url"
PENDING_URL_KEY = "lastgood_pending_url"
EXTRA_URLS_KEY = "lastgood_extra_urls"
REFRESHED_KEY = "lastgood_refreshed"
ERROR_KEY = "lastgood_store_error"
FOCUS_RUN_KEY = "lastgood_focus_run"


@dataclass(frozen=True)
class StoreRef:
    """The store a page shows: where its index lives, its URL and id there."""

    index_path: str
    url: str
    store_id: int
    allow_write: bool = False

    @property
    def display(self) -> str:
        return display_url(self.url)


# ---- cached resources and queries --------------------------------------------------


@st.cache_resource(show_spinner=False, max_entries=4)
def _catalog(index_path: str) -> Catalog:
    # short-lived connections: a CLI beside the running dashboard can still write the index
    return Catalog(index_path, keep_open=False)


@st.cache_resource(show_spinner=False, max_entries=16)
def _open_store(index_path: str, url: str) -> OpenStore:
    return open_store(_catalog(index_path), url)


QUERIES = page_queries.QUERIES  # the dashboard's queries by name (lastgood.index.page_queries)


@st.cache_data(ttl=CACHE_TTL, max_entries=256, show_spinner=False)
def _query(index_path: str, name: str, store_id: int, *args: Any) -> Any:
    """``QUERIES[name]`` over the cached catalog, cached by these plain arguments (redacted); the
    first page takes what ``lastgood ui`` read ahead of it (page_queries.prepare)."""
    prepared = page_queries.take(index_path, store_id, name, args)
    if prepared is not page_queries.MISSING:
        return prepared
    return page_queries.run(_catalog(index_path), name, store_id, *args)


def query(ref: StoreRef, name: str, *args: Any) -> Any:
    return _query(ref.index_path, name, ref.store_id, *args)


@st.cache_data(ttl=CACHE_TTL, max_entries=32, show_spinner=False)
def _checkpoint(index_path: str, url: str, store_id: int, ref: str) -> dict[str, Any]:
    return redact(checkpoint_view(_catalog(index_path), store_id, ref, lambda: _open_store(index_path, url)))


def clear_query_caches() -> None:
    page_queries.forget()
    _query.clear()
    _checkpoint.clear()


@contextmanager
def guarded() -> Iterator[None]:
    """Show a LastgoodError as st.error and stop the page (never a traceback)."""
    try:
        yield
    except LastgoodError as exc:
        st.error(md_escape(redact_text(str(exc))))
        stop()


def stop() -> NoReturn:
    """``st.stop()`` for pages: what the run deferred to the end of the page (the store picker's
    widgets, the sidebar's check: ``server.after_page``) is drawn first, as nothing can be drawn
    once Streamlit was asked to stop."""
    from lastgood.ui import server  # the dashboard process's page-run hooks (imports this module)

    server.run_after_page()
    st.stop()


# ---- store picker ---------------------------------------------------------------------


REMEMBERED_KEY = "lastgood_remembered"


def remember(*keys: str) -> None:
    """Keep these widgets' values when the operator moves to another page and back: Streamlit
    forgets a widget's value once a run of another page does not draw it (and the same key on
    another page is another widget). Call at the top of the page, before its widgets."""
    memory = st.session_state.setdefault(REMEMBERED_KEY, {})
    for key in keys:
        if key in st.session_state:
            memory[key] = st.session_state[key]
        if key in memory:  # set again: a widget drawn by another page takes its value from here
            st.session_state[key] = memory[key]


def store_picker() -> StoreRef | None:
    """The sidebar store picker shared by every page; None when no store is usable."""
    remember(STORE_KEY)
    settings = load_settings()
    index_path = str(settings.index_path)
    with st.sidebar:
        _write_badge(settings.allow_write)
        try:
            catalog = _catalog(index_path)
            ref = _pick(catalog, index_path, settings.allow_write)
        except LastgoodError as exc:
            st.error(md_escape(redact_text(str(exc))))
            ref = None
        _show_last_error()
        if ref is not None:
            from lastgood.ui import server  # the dashboard process's page-run hooks (imports this module)

            server.sidebar_check_after_page(st.container(), ref)
    if ref is None:
        st.info("No store selected. Add one in the sidebar: a folder, `file://…`, `memory://…`, "
                "`s3://bucket/prefix`, a LangGraph SQLite file or a `postgresql://` DSN.")
    return ref


def _write_badge(allow_write: bool) -> None:
    if allow_write:
        st.badge("writes enabled", icon=":material/edit:", color="orange",
                 help="LASTGOOD_ALLOW_WRITE is set: recovery actions are available")
    else:
        st.badge("read-only", icon=":material/lock:", color="gray",
                 help="Start with `lastgood ui --allow-write` (or LASTGOOD_ALLOW_WRITE=1) to enable writes")


def _pick(catalog: Catalog, index_path: str, allow_write: bool) -> StoreRef | None:
    """The chosen store, decided before anything is drawn: its widgets (a text input, the store
    choice, Re-index) are drawn after the page's content (``server.after_page``) in a slot placed
    here, so the first screen's numbers and figures reach the browser first. The choice is the
    widgets' own state: a store typed or re-indexed acts through their callbacks before the run."""
    slot = st.container()
    pending = st.session_state.pop(PENDING_URL_KEY, None)
    if pending:
        _add_store(catalog, pending)
    urls = _candidate_urls(catalog)
    if urls and st.session_state.get(STORE_KEY) not in urls:
        st.session_state[STORE_KEY] = urls[0]
    from lastgood.ui import server  # the dashboard process's page-run hooks (imports this module)

    server.after_page(lambda: _draw_picker(slot, urls))
    if not urls:
        return None
    return _ensure_indexed(catalog, index_path, st.session_state[STORE_KEY], allow_write)


def _draw_picker(slot: Any, urls: list[str]) -> None:
    with slot:
        st.text_input("Open a store", key=NEW_URL_KEY, on_change=_queue_new_url,
                      placeholder="path, s3://…, file.sqlite, postgresql://…",
                      help="Any store URL; it is indexed (fast structural check) when added.")
        if not urls:
            return
        st.selectbox("Store", urls, format_func=display_url, key=STORE_KEY)
        st.button("Re-index", icon=":material/refresh:", help="Read what changed in the store",
                  on_click=_reindex)


def _reindex() -> None:
    """Re-index (before the run it triggers): the shown store is refreshed again by that run."""
    st.session_state.get(REFRESHED_KEY, set()).discard(st.session_state.get(STORE_KEY))
    clear_query_caches()


def _queue_new_url() -> None:
    typed = (st.session_state.get(NEW_URL_KEY) or "").strip()
    if typed:
        st.session_state[PENDING_URL_KEY] = typed
    st.session_state[NEW_URL_KEY] = ""  # never keep a typed DSN (it may hold a password) on screen


def _candidate_urls(catalog: Catalog) -> list[str]:
    env = [normalize_url(u) for u in stores_from_env(os.environ.get("LASTGOOD_STORES", ""))]
    extra = st.session_state.get(EXTRA_URLS_KEY, [])
    return list(dict.fromkeys([*extra, *env, *queries.indexed_stores(catalog)]))


def stores_from_env(text: str) -> list[str]:
    """The stores ``lastgood ui`` passes: a JSON list of public URLs (a plain value is one URL,
    never split: URLs contain ':')."""
    text = text.strip()
    if not text:
        return []
    try:
        value = json.loads(text)
    except ValueError:
        return [text]
    if isinstance(value, str):
        return [value]
    return [u for u in value if isinstance(u, str) and u] if isinstance(value, list) else []


def _add_store(catalog: Catalog, typed: str) -> None:
    st.session_state.pop(ERROR_KEY, None)
    if _index(catalog, normalize_url(typed)) is None:
        return
    url = split_url(normalize_url(typed))[0]  # the secret went to the private credentials file
    extra = st.session_state.setdefault(EXTRA_URLS_KEY, [])
    if url not in extra:
        extra.insert(0, url)
    st.session_state[STORE_KEY] = url


def _ensure_indexed(catalog: Catalog, index_path: str, url: str, allow_write: bool) -> StoreRef | None:
    """Refresh the store once per session (incremental); fall back to the index on failure."""
    refreshed: set[str] = st.session_state.setdefault(REFRESHED_KEY, set())
    known = queries.indexed_stores(catalog)
    if url not in refreshed:
        refreshed.add(url)
        from lastgood.ui import server  # imports this module

        startup = serve.take_startup_refresh(index_path, url)
        # a store the command found in the index (not one its start-up refresh is adding right now)
        if startup is not None and startup.known and not startup.done.is_set() and not allow_write:
            server.follow_startup_refresh(startup)  # a read-only reopen: the index as it is, updated after
        elif server.startup_refreshed(startup) or _index(catalog, url) is not None:
            known = queries.indexed_stores(catalog)
        elif url in known:
            st.session_state[ERROR_KEY] += " — showing the index as it was when last read."
    if url not in known:
        return None
    return StoreRef(index_path, url, known[url], allow_write)


def _index(catalog: Catalog, url: str) -> int | None:
    """Index ``url`` inside st.status; the store id, or None with the error remembered."""
    holder = st.empty()
    try:
        with holder.status(f"Indexing {display_url(url)}…"):
            summary = index_store(catalog, url, check=UI_CHECK_DEPTH)
    except Exception as exc:  # any URL can be typed: fsspec/botocore errors are not LastgoodErrors
        st.session_state[ERROR_KEY] = open_error_message(url, exc)
        return None
    finally:
        holder.empty()
    st.session_state.pop(ERROR_KEY, None)
    if summary.refresh.changed:
        clear_query_caches()
    return summary.store.store_id


def open_error_message(url: str, exc: Exception) -> str:
    """One line for the operator, credentials stripped."""
    text = redact_text(str(exc)).replace(url, display_url(url))
    if isinstance(exc, LastgoodError):
        return text
    return f"Could not open {display_url(url)}: {text or type(exc).__name__}"


def _show_last_error() -> None:
    message = st.session_state.get(ERROR_KEY)
    if message:
        st.error(md_escape(message), icon=":material/error:")


def md_escape(text: str) -> str:
    """``text`` from a store shown literally in markdown (no links, images, LaTeX, HTML)."""
    text = _MD_ALWAYS.sub(r"\\\1", escape_controls(str(text)))
    text = _MD_SHORTCODE.sub(r"\\:", text)  # :emoji:, :material/icon:, :red[…] directives
    text = _MD_AUTOLINK.sub(lambda m: m.group(0).replace(":", "\\:").replace(".", "\\."), text)
    return _MD_LINE_START.sub(lambda m: m.group(1) + "\\" + m.group(2), text)


_MD_ALWAYS = re.compile(r"([\\`*_{}\[\]<>|~$!&])")
_MD_SHORTCODE = re.compile(r":(?=[A-Za-z])")
_MD_AUTOLINK = re.compile(r"(?i)\b(https?|ftp)://|\bwww\.")
_MD_LINE_START = re.compile(r"^(\d*)([#+\-=.)])")  # headings, lists, rules


def literal_lines(text: str) -> str:
    """Multi-line store text (a chat message) literally, its line breaks kept."""
    return "  \n".join(md_escape(line) for line in str(text).split("\n"))


def code(text: Any) -> str:
    """``text`` from a store as a literal code span (no backtick or line break can end it)."""
    return f"`{escape_controls(str(text)).replace('`', chr(39))}`"


def focus_run_in_timeline(run_id: str) -> None:
    """Open the Timeline page on ``run_id``."""
    st.session_state[FOCUS_RUN_KEY] = run_id
    st.switch_page(TIMELINE_PAGE)


def take_focus_run() -> str | None:
    return st.session_state.pop(FOCUS_RUN_KEY, None)


# ---- tables ---------------------------------------------------------------------------


_redact_frame = page_queries.redacted  # for the pages that redact a frame of their own


def _is_time(frame: pd.DataFrame | pa.Table, column: str) -> bool:
    if isinstance(frame, pa.Table):
        return pa.types.is_timestamp(frame.schema.field(column).type)
    import pandas as pd

    return pd.api.types.is_datetime64_any_dtype(frame[column])


def _utc_columns(frame: pd.DataFrame | pa.Table) -> dict[str, Any]:
    return {c: st.column_config.DatetimeColumn(f"{c.replace('_', ' ')} (UTC)", timezone="UTC",
                                               format="YYYY-MM-DD HH:mm:ss")
            for c in _columns(frame) if _is_time(frame, c)}


def _byte_columns(frame: pd.DataFrame | pa.Table) -> dict[str, Any]:
    return {c: st.column_config.NumberColumn("size", format="bytes")
            for c in _columns(frame) if c == "size_bytes"}


def _columns(frame: pd.DataFrame | pa.Table) -> list[str]:
    return list(frame.column_names if isinstance(frame, pa.Table) else frame.columns)


LABELS = {"run_id": "run", "checkpoint_id": "checkpoint", "last_step": "last step", "what": "what",
          "task_id": "task"}
WIDE_COLUMNS = ("detail", "message")


def _labels(frame: pd.DataFrame | pa.Table) -> dict[str, Any]:
    return {c: st.column_config.Column(LABELS.get(c, c), width="large" if c in WIDE_COLUMNS else None)
            for c in _columns(frame) if c in LABELS or c in WIDE_COLUMNS}


def show_table(frame: pd.DataFrame | pa.Table, columns: list[str], *, empty: str, key: str | None = None,
               limit: int = MAX_TABLE_ROWS) -> None:
    """A table (a DataFrame or an Arrow table) with UTC times and human sizes; ``empty`` explains
    an empty one."""
    if len(frame) == 0:
        st.caption(empty)
        return
    chosen = [c for c in columns if c in _columns(frame)]
    shown = frame.select(chosen).slice(0, limit) if isinstance(frame, pa.Table) else frame[chosen].head(limit)
    config = {**_labels(shown), **_utc_columns(shown), **_byte_columns(shown)}
    st.dataframe(shown, hide_index=True, column_config=config, key=key, lazy=False)  # small: sent whole
    if len(frame) > limit:
        st.caption(f"Showing {limit:,} of {len(frame):,} rows.")


# ---- timeline -------------------------------------------------------------------------


def runs_frame(ref: StoreRef) -> pd.DataFrame:
    with guarded():
        return query(ref, "runs")


TIMELINE_WARM_UP_DELAY = 3.0  # seconds after the Overview was drawn (the Plotly imports go first)
_timeline_warmed: dict[tuple[str, int], float] = {}
_warm_ups: weakref.WeakSet[threading.Timer] = weakref.WeakSet()


@atexit.register
def _stop_warm_ups() -> None:
    """At exit, a warm-up not yet started is cancelled and one running is awaited: a daemon
    thread still inside DuckDB when the interpreter ends aborts the process."""
    for timer in list(_warm_ups):
        timer.cancel()
        timer.join(timeout=10)


def warm_up_timeline(ref: StoreRef, delay: float | None = None) -> threading.Timer | None:
    """Read what the Timeline's first screen shows for ``ref`` (its runs, the latest run's points
    and events) into the query cache in a background thread ``delay`` seconds from now, while the
    operator reads the Overview: the Timeline's first visit then draws without those queries. At
    most once per store per CACHE_TTL (the cached results live that long); None when not started."""
    key, now = (ref.index_path, ref.store_id), time.monotonic()
    with _warm_lock:
        if now - _timeline_warmed.get(key, -CACHE_TTL) < CACHE_TTL:
            return None
        _timeline_warmed[key] = now
    timer = threading.Timer(TIMELINE_WARM_UP_DELAY if delay is None else delay, _read_timeline_ahead, [ref])
    timer.daemon, timer.name = True, "lastgood-timeline-warm-up"
    timer.start()
    _warm_ups.add(timer)
    return timer


def _read_timeline_ahead(ref: StoreRef) -> None:
    try:
        runs = query(ref, "runs")
        if not runs.empty:  # the Timeline opens on the most recent run (pages/timeline.py)
            latest = str(runs["run_id"].iloc[0])
            query(ref, "timeline", latest, None, TIMELINE_MAX_POINTS)
            query(ref, "events", latest, None)
    except Exception:  # noqa: BLE001 - only a head start: the Timeline queries itself and says why
        return


def timeline_data(ref: StoreRef, run_id: str | None, agent: str | None) -> TimelineData:
    with guarded():
        points, aggregated = query(ref, "timeline", run_id, agent, TIMELINE_MAX_POINTS)
        events = query(ref, "events", run_id, None if run_id else agent)
    total = int(points["count"].sum()) if not points.empty else 0
    return TimelineData(_redact_frame(points), aggregated, _redact_frame(events), total)


# ---- one checkpoint ------------------------------------------------------------------


def render_checkpoint(ref: StoreRef, checkpoint: str) -> None:
    """Metadata, findings, events, pending writes and the (redacted) state of one checkpoint."""
    import pandas as pd

    with guarded():
        result = _checkpoint(ref.index_path, ref.url, ref.store_id, checkpoint)
    c = result["checkpoint"]
    st.subheader(f"Checkpoint {code(c['checkpoint_id'])}")
    st.badge(c["status"], color=BADGE_COLORS.get(c["status"], "gray"))
    if c.get("status_reason"):
        (st.error if c["status"] in DAMAGED else st.info)(f"{c['status']}: {md_escape(c['status_reason'])}")
    if c.get("data_checked") is False and c["status"] not in DAMAGED:
        st.caption(":material/hourglass_top: Data check pending: its blob was not decoded by a data check yet, "
                   "so its status comes from the listing and structure checks.")
    _render_fields(c, result.get("head"))
    from lastgood.ui.recovery import recovery_links  # lazy: ui_recovery imports this module

    recovery_links(ref, c)
    compare = st.columns(4)
    if c.get("parent_id"):
        compare[0].page_link(DIFF_PAGE, label="Compare with parent", icon=":material/difference:",
                             query_params={"store": ref.url, "a": c["parent_id"], "b": c["checkpoint_id"]})
    compare[1].page_link(DIFF_PAGE, label="Compare with…", icon=":material/compare_arrows:",
                         query_params={"store": ref.url, "a": c["checkpoint_id"], "b": c["checkpoint_id"]})
    tabs = st.tabs(["State", f"Findings ({len(result['findings'])})", f"Events ({len(result['events'])})",
                    f"Pending writes ({len(result['pending_writes'])})", "Metadata"])
    with tabs[0]:
        if result.get("state_error"):
            st.warning(f"The state cannot be shown: {md_escape(str(result['state_error']))}")
        else:
            render_state(result["state"])
    with tabs[1]:
        show_table(pd.DataFrame(result["findings"]), ["severity", "check", "message"],
                   empty="No findings: every check passed.")
    with tabs[2]:
        show_table(pd.DataFrame(result["events"]), ["created_at", "kind", "channel", "task_id", "message"],
                   empty="No events recorded on this checkpoint.")
    with tabs[3]:
        _render_writes(result["pending_writes"])
    with tabs[4]:
        st.json(dumps(c.get("metadata") or {}), expanded=2)


def _render_fields(c: dict[str, Any], head: str | None) -> None:
    rows = [("run", c["run_id"] + (f" [{c['namespace']}]" if c.get("namespace") else "")),
            ("created (UTC)", utc(c.get("created_at"))), ("size", human_bytes(c.get("size_bytes"))),
            ("agent", c.get("agent") or "-"), ("trigger", c.get("trigger") or "-"),
            ("codec", c.get("codec") or "-"), ("step", str(c.get("step"))),
            ("kind", c.get("kind") or "-"), ("parent", c.get("parent_id") or "-")]
    columns = st.columns(3)
    for i, (label, value) in enumerate(rows):
        columns[i % 3].markdown(f"**{label}** &nbsp; {code(value)}")
    role = "this is the run's head" if head == c["checkpoint_id"] else f"run head: {code(head or '-')}"
    st.caption(f"{role} · checksum {code(c.get('checksum') or '-')} · location {code(c.get('location') or '-')}")


def _render_writes(writes: list[dict[str, Any]]) -> None:
    if not writes:
        st.caption("No pending writes on this checkpoint.")
        return
    if any("error" in w and "channel" not in w for w in writes):
        st.warning(f"Pending writes cannot be shown: {md_escape(str(writes[0].get('error')))}")
        return
    st.json(dumps(truncate(writes)), expanded=2)


# ---- state viewer --------------------------------------------------------------------


def render_state(state: Any) -> None:
    """A (redacted) state: its chat messages as a conversation, then the tree, user channels first."""
    path, messages = find_conversation(state)
    if messages:
        _render_conversation(messages, path)
        with st.expander(f"Raw messages ({len(messages)})"):
            st.json(dumps(truncate(get_path(state, path))), expanded=1)
        state = without_path(state, path)
    if isinstance(state, dict):
        state = order_channels(state)
    with st.expander("State tree" + (" (messages shown above)" if messages else ""), expanded=True):
        st.json(dumps(truncate(state)), expanded=2)


def _render_conversation(messages: list[dict[str, Any]], path: list[str]) -> None:
    shown = messages[-MAX_MESSAGES:]
    st.markdown(f"**Conversation** · {len(messages)} message(s) in {code('.'.join(map(str, path)))}"
                + (f", last {len(shown)} shown" if len(shown) < len(messages) else ""))
    box = st.container(height=CONVERSATION_HEIGHT, autoscroll=True) if len(shown) > 6 else st.container()
    for m in shown:
        avatar = {"system": ":material/settings:", "tool": ":material/build:"}.get(m["role"])
        with box.chat_message(m["role"], avatar=avatar):
            if isinstance(m["content"], str):
                if m["content"]:
                    st.markdown(literal_lines(m["content"]))  # store text: no links, images, HTML
            else:
                st.json(dumps(truncate(m["content"])), expanded=1)
            for call in m["tool_calls"]:
                st.code(tool_call(call), language=None, wrap_lines=True)


