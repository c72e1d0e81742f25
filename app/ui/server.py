"""The dashboard process's hooks around each page run (the server itself: lastgood.ui.webserver;
the start-up refresh: lastgood.serve.process).

Around every page run (:func:`page_run`, used by the router) the index stays open and the
sidebar's background data check starts after the page's content; the first session of a
store uses the command's start-up refresh (:func:`startup_refreshed`, or
:func:`follow_startup_refresh` for a store the index already holds).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import streamlit as st

from lastgood import ui
from lastgood.integrity import background
from lastgood.serve import process as serve


# ---- one page run (the router wraps every page in these) -----------------------------------

_run = threading.local()  # each page run has its own script thread


@contextmanager
def page_run() -> Iterator[None]:
    """Around one page run: the index stays open (every query of the run shares one open of the
    file, instead of ~40 ms to open it per query), and the sidebar's widgets and background data
    check are drawn after the page's own content (:func:`after_page`: they never hold back the
    first paint)."""
    _run.after = []
    _wait_for_first_indexing()
    held = _hold_index()
    try:
        yield
    finally:
        try:
            run_after_page()
        finally:
            del _run.after  # outside page_run again
            if held is not None:
                held.close()
            serve.first_page_shown.set()  # a reopen's start-up refresh may start now


def _wait_for_first_indexing() -> None:
    """While ``lastgood ui``'s child process indexes never-seen stores it holds the index's write
    lock: say so and wait for it, before anything on the page opens the index."""
    try:
        index_path = str(ui.load_settings().index_path)
    except (ui.LastgoodError, OSError):
        return
    running = serve.indexing_first(index_path)
    if not running:
        return
    holder = st.empty()
    shown = ", ".join(ui.display_url(r.url) for r in running)
    with holder.status(f"Indexing {shown}…", expanded=True):
        st.caption("Listing its checkpoints and checking their structure; the page follows.")
        _load_table_code()
        for refresh in running:
            refresh.done.wait()
    holder.empty()


def _load_table_code() -> None:
    """While the store is indexed, let the browser load and compile its table code (Streamlit
    fetches each element's code the first time one is shown): an empty table, gone with the
    status box. The Overview's tables then draw without that wait."""
    import pyarrow as pa

    st.dataframe(pa.table({"": pa.array([], pa.string())}), height=40, lazy=False)


def _hold_index() -> ui.Catalog | None:
    try:
        return ui.Catalog(ui.load_settings().index_path)  # keep_open: closed when the run ends
    except (ui.LastgoodError, OSError):  # the store picker shows why the index cannot be opened
        return None


def after_page(draw: Callable[[], None]) -> None:
    """Draw with ``draw`` once the page's own content was sent (inside :func:`page_run`), in the
    slot the caller already placed: the browser builds the page's numbers and figures first, and
    the sidebar's widgets (whose code Chromium loads and compiles on a first visit) after them.
    Outside page_run (a page run on its own), at once."""
    pending = getattr(_run, "after", None)
    if pending is None:
        draw()
    else:
        pending.append(draw)


def sidebar_check_after_page(slot: Any, ref: ui.StoreRef) -> None:
    def draw() -> None:
        with slot:
            _sidebar_check(ref)

    after_page(draw)


def run_after_page() -> None:
    """Draw what the page run deferred (:func:`after_page`), once: at its end, or before a page
    stops early (``ui.stop``)."""
    pending = getattr(_run, "after", None) or []
    if pending:
        _run.after = []
    for draw in pending:
        draw()


def _sidebar_check(ref: ui.StoreRef) -> None:
    from lastgood.ui import integrity as ui_integrity  # the background data check and its progress

    ui_integrity.sidebar_check(ref)


# ---- the start-up refresh, seen from the first session ---------------------------------------


# the refresh starts serve.FIRST_PAGE_SETTLE (1 s) after the first page was sent: a faster poll only
# re-runs this fragment while the browser is still drawing that page
STARTUP_POLL_SECONDS = 1.0


@st.fragment(run_every=STARTUP_POLL_SECONDS)
def follow_startup_refresh(startup: serve.StartupRefresh) -> None:
    """A store the index already holds is shown at once, never re-listed before the first page;
    this sidebar note follows the start-up refresh and reruns the page when it changed the index
    (or failed: the page then says so)."""
    if not startup.done.is_set():
        shown = ui.md_escape(ui.display_url(startup.url))
        st.caption(f":material/sync: Looking for new checkpoints in {shown}…")
        return
    if startup.error is not None:
        st.session_state[ui.ERROR_KEY] = (ui.open_error_message(startup.url, startup.error)
                                          + " — showing the index as it was when last read.")
    elif not startup.changed:
        return  # nothing new: the page stays as drawn (the note is gone)
    ui.clear_query_caches()
    st.rerun()


def startup_refreshed(startup: serve.StartupRefresh | None) -> bool:
    """Whether ``lastgood ui``'s start-up thread refreshed the store (lastgood.serve.process): the first
    session waits for it instead of refreshing again; False when it did not (or failed: the
    page then indexes the store itself and shows why it cannot)."""
    if startup is None:
        return False
    if not startup.done.is_set():
        holder = st.empty()
        with holder.status(f"Indexing {ui.display_url(startup.url)}…"):
            startup.done.wait()
        holder.empty()
    if startup.error is not None:
        return False
    if startup.changed:
        ui.clear_query_caches()
    return True
