"""The sidebar every page shares: the write badge, the store picker, the last store error, the
auto-refresh interval (lastgood.ui.live) and the background data check's progress.

A link's ``store`` and ``live`` are taken here on the run it arrives in, and put back into every
page's URL at the end of each run (lastgood.ui.links): every page's link names its store.

The store is decided before anything is drawn; the picker's widgets and the check are drawn after
the page's own content (:func:`lastgood.ui.pagerun.after_page`), so the first screen's numbers and
figures reach the browser first.
"""

from __future__ import annotations

from typing import Any

import streamlit as st

from lastgood.config import load_settings
from lastgood.errors import LastgoodError
from lastgood.index.catalog import Catalog
from lastgood.readers.registry import display_url
from lastgood.redact import redact_text
from lastgood.ui import links, live, stores
from lastgood.ui.escape import md_escape
from lastgood.ui.pagerun import after_page, remember
from lastgood.ui.stores import STORE_KEY, StoreRef

# session-state keys
NEW_URL_KEY = "lastgood_new_url"  # the "Open a store" box (emptied once read)
PENDING_URL_KEY = "lastgood_pending_url"  # what it held, opened by the next run
CHOSEN_KEY = "lastgood_store_chosen_here"  # the operator picked or typed a store in this run

NO_STORE = ("No store selected. Add one in the sidebar: a folder, `file://…`, `memory://…`, "
            "`s3://bucket/prefix`, a LangGraph SQLite file or a `postgresql://` DSN.")


def store_picker() -> StoreRef | None:
    """The sidebar store picker shared by every page; None when no store is usable."""
    remember(STORE_KEY, live.LIVE_KEY)
    _take_link()
    settings = load_settings()
    index_path = str(settings.index_path)
    with st.sidebar:
        _write_badge(settings.allow_write)
        try:
            ref = _pick(stores.catalog(index_path), index_path, settings.allow_write)
        except LastgoodError as exc:
            st.error(md_escape(redact_text(str(exc))))
            ref = None
        stores.show_last_error()
        if ref is not None:
            _live_after_page(st.container(), ref)
            _check_after_page(st.container(), ref)
    after_page(_write_link)
    if ref is None:
        st.info(NO_STORE)
    return ref


def _write_badge(allow_write: bool) -> None:
    if allow_write:
        st.badge("writes enabled", icon=":material/edit:", color="orange",
                 help="LASTGOOD_ALLOW_WRITE is set: recovery actions are available")
    else:
        st.badge("read-only", icon=":material/lock:", color="gray",
                 help="Start with `lastgood ui --allow-write` (or LASTGOOD_ALLOW_WRITE=1) to enable writes")


def _pick(index: Catalog, index_path: str, allow_write: bool) -> StoreRef | None:
    """The chosen store, decided before anything is drawn: its widgets (a text input, the store
    choice, Re-index) are drawn after the page's content in a slot placed here. The choice is the
    widgets' own state: a store typed or re-indexed acts through their callbacks before the run."""
    slot = st.container()
    pending = st.session_state.pop(PENDING_URL_KEY, None)
    if pending:
        stores.add_store(index, pending)
    urls = stores.candidate_urls(index)
    if urls and st.session_state.get(STORE_KEY) not in urls:
        st.session_state[STORE_KEY] = urls[0]
    after_page(lambda: _draw_picker(slot, urls))
    if not urls:
        return None
    return stores.ensure_indexed(index, index_path, st.session_state[STORE_KEY], allow_write)


def _draw_picker(slot: Any, urls: list[str]) -> None:
    with slot:
        st.text_input("Open a store", key=NEW_URL_KEY, on_change=_queue_new_url,
                      placeholder="path, s3://…, file.sqlite, postgresql://…",
                      help="Any store URL; it is indexed (fast structural check) when added.")
        if not urls:
            return
        st.selectbox("Store", urls, format_func=display_url, key=STORE_KEY, on_change=_chosen_here)
        st.button("Re-index", icon=":material/refresh:", help="Read what changed in the store",
                  on_click=_reindex)


def _reindex() -> None:
    """Re-index (before the run it triggers): the shown store is refreshed again by that run."""
    stores.forget_refresh(st.session_state.get(STORE_KEY))
    stores.clear_query_caches()


def _chosen_here() -> None:
    """The operator picked a store in this run: a URL the browser sent with it names the store shown
    before (it may not have applied the newest address yet, under load), so it is no link to follow."""
    st.session_state[CHOSEN_KEY] = True


def _queue_new_url() -> None:
    typed = (st.session_state.get(NEW_URL_KEY) or "").strip()
    if typed:
        st.session_state[PENDING_URL_KEY] = typed
        _chosen_here()
    st.session_state[NEW_URL_KEY] = ""  # never keep a typed DSN (it may hold a password) on screen


def _check_after_page(slot: Any, ref: StoreRef) -> None:
    """The background data check and its progress, in ``slot`` once the page's content was sent."""
    def draw() -> None:
        with slot:
            from lastgood.ui import integrity  # the background data check: loaded after the first screen

            integrity.sidebar_check(ref)

    after_page(draw)


# ---- the link, and live refresh ---------------------------------------------------------------


def _take_link() -> None:
    """A link's store and auto-refresh interval, on the run it arrives in."""
    shared = links.take("sidebar", (links.STORE, links.LIVE))
    chosen_here = st.session_state.pop(CHOSEN_KEY, False)
    if shared.get(links.STORE) and not chosen_here:
        st.session_state[STORE_KEY] = shared[links.STORE]
    live.take_link(shared.get(links.LIVE))


def _write_link() -> None:
    """The store and interval into the URL, at the end of the run (after the page wrote its own
    state): ``store`` where the URL names none yet but holds nothing else of a page's own (a page
    that filled its URL names its store itself), ``live`` always."""
    own = [k for k in st.query_params if k not in (links.STORE, *links.SHARED)]
    store = st.session_state.get(STORE_KEY) if (not own or links.STORE in st.query_params) else None
    links.merge({**({links.STORE: store} if store else {}), **live.link_params()})


def _live_after_page(slot: Any, ref: StoreRef) -> None:
    """The Auto-refresh control (and its refreshing fragment), in ``slot`` once the page's content was sent."""
    def draw() -> None:
        with slot:
            live.live_control(ref)

    after_page(draw)
