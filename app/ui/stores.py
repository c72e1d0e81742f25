"""The store a page shows: the cached catalog and query results, which stores are offered, and
opening (indexing) one — with the start-up refresh ``lastgood ui`` already ran, and the error the
operator sees when a store cannot be opened.

Everything a query returns is redacted (lastgood.index.page_queries); URLs are shown without
credentials (readers.registry.display_url).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import streamlit as st

from lastgood.credentials import split_url
from lastgood.errors import LastgoodError
from lastgood.index import page_queries, queries
from lastgood.index.catalog import Catalog
from lastgood.investigate.show import checkpoint_view
from lastgood.readers.registry import display_url
from lastgood.redact import redact, redact_text
from lastgood.serve import process as serve
from lastgood.serve import startup
from lastgood.stores import OpenStore, index_store, normalize_url, open_store
from lastgood.ui.escape import md_escape
from lastgood.ui.pagerun import guarded

if TYPE_CHECKING:  # pandas is imported by the pages that need frames: the Overview does not
    import pandas as pd

CACHE_TTL = 60
UI_CHECK_DEPTH = "structure"  # the picker's fast check; `lastgood verify --read-data` re-reads blobs
QUERIES = page_queries.QUERIES  # the dashboard's queries by name (lastgood.index.page_queries)
STALE = " — showing the index as it was when last read."

# session-state keys
STORE_KEY = "lastgood_store"  # the chosen store's URL (the sidebar's store choice)
EXTRA_URLS_KEY = "lastgood_extra_urls"  # stores typed in this session
REFRESHED_KEY = "lastgood_refreshed"  # stores refreshed in this session
ERROR_KEY = "lastgood_store_error"  # why the last store could not be opened


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
def catalog(index_path: str) -> Catalog:
    # short-lived connections: a CLI beside the running dashboard can still write the index
    return Catalog(index_path, keep_open=False)


@st.cache_resource(show_spinner=False, max_entries=16)
def cached_store(index_path: str, url: str) -> OpenStore:
    return open_store(catalog(index_path), url)


@st.cache_data(ttl=CACHE_TTL, max_entries=256, show_spinner=False)
def _query(index_path: str, name: str, store_id: int, *args: Any) -> Any:
    """``QUERIES[name]`` over the cached catalog, cached by these plain arguments (redacted); the
    first page takes what ``lastgood ui`` read ahead of it (page_queries.prepare)."""
    prepared = page_queries.take(index_path, store_id, name, args)
    if prepared is not page_queries.MISSING:
        return prepared
    return page_queries.run(catalog(index_path), name, store_id, *args)


def query(ref: StoreRef, name: str, *args: Any) -> Any:
    return _query(ref.index_path, name, ref.store_id, *args)


def runs_frame(ref: StoreRef) -> pd.DataFrame:
    """The store's runs, most recent first."""
    with guarded():
        return query(ref, "runs")


@st.cache_data(ttl=CACHE_TTL, max_entries=32, show_spinner=False)
def _checkpoint(index_path: str, url: str, store_id: int, ref: str) -> dict[str, Any]:
    return redact(checkpoint_view(catalog(index_path), store_id, ref, lambda: cached_store(index_path, url)))


def checkpoint(ref: StoreRef, checkpoint_ref: str) -> dict[str, Any]:
    """One checkpoint as ``lastgood show`` reports it (redacted, cached)."""
    with guarded():
        return _checkpoint(ref.index_path, ref.url, ref.store_id, checkpoint_ref)


def clear_query_caches() -> None:
    page_queries.forget()
    _query.clear()
    _checkpoint.clear()


# ---- which stores ---------------------------------------------------------------------


def candidate_urls(index: Catalog) -> list[str]:
    """The stores offered: typed this session, passed by ``lastgood ui``, then the index's."""
    env = [normalize_url(u) for u in stores_from_env(os.environ.get("LASTGOOD_STORES", ""))]
    extra = st.session_state.get(EXTRA_URLS_KEY, [])
    return list(dict.fromkeys([*extra, *env, *queries.indexed_stores(index)]))


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


def add_store(index: Catalog, typed: str) -> None:
    """Index a store typed in the sidebar and choose it (its secret goes to the credentials file)."""
    st.session_state.pop(ERROR_KEY, None)
    if _index(index, normalize_url(typed)) is None:
        return
    url = split_url(normalize_url(typed))[0]  # the secret went to the private credentials file
    extra = st.session_state.setdefault(EXTRA_URLS_KEY, [])
    if url not in extra:
        extra.insert(0, url)
    st.session_state[STORE_KEY] = url


def forget_refresh(url: str | None) -> None:
    """The next run refreshes ``url`` again (Re-index)."""
    st.session_state.get(REFRESHED_KEY, set()).discard(url)


# ---- opening one ------------------------------------------------------------------------


def ensure_indexed(index: Catalog, index_path: str, url: str, allow_write: bool) -> StoreRef | None:
    """Refresh the store once per session (incremental); fall back to the index on failure."""
    refreshed: set[str] = st.session_state.setdefault(REFRESHED_KEY, set())
    known = queries.indexed_stores(index)
    if url not in refreshed:
        refreshed.add(url)
        refresh = serve.take_startup_refresh(index_path, url)
        # a store the command found in the index (not one its start-up refresh is adding right now)
        if refresh is not None and refresh.known and not refresh.done.is_set() and not allow_write:
            follow_startup_refresh(refresh)  # a read-only reopen: the index as it is, updated after
        elif startup_refreshed(refresh) or _index(index, url) is not None:
            known = queries.indexed_stores(index)
        elif url in known:
            st.session_state[ERROR_KEY] += STALE
    if url not in known:
        return None
    return StoreRef(index_path, url, known[url], allow_write)


def _index(index: Catalog, url: str) -> int | None:
    """Index ``url`` (a never-seen store, or the session's incremental refresh of a known one) under
    a spinner; the store id, or None with the error remembered. A spinner, not st.status: it shows
    only after half a second (a known store's refresh usually takes less), and st.status sleeps
    0.1 s of every page's first run in a session, before the page's content is sent."""
    try:
        with st.spinner(f"Indexing {md_escape(display_url(url))}…"):
            summary = index_store(index, url, check=UI_CHECK_DEPTH)
    except Exception as exc:  # any URL can be typed: fsspec/botocore errors are not LastgoodErrors
        st.session_state[ERROR_KEY] = open_error_message(url, exc)
        return None
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


def show_last_error() -> None:
    message = st.session_state.get(ERROR_KEY)
    if message:
        st.error(md_escape(message), icon=":material/error:")


# ---- the start-up refresh, seen from the first session ---------------------------------------


# the refresh starts startup.FIRST_PAGE_SETTLE (1 s) after the first page was sent: a faster poll only
# re-runs this fragment while the browser is still drawing that page
STARTUP_POLL_SECONDS = 1.0


@st.fragment(run_every=STARTUP_POLL_SECONDS)
def follow_startup_refresh(refresh: startup.StartupRefresh) -> None:
    """A store the index already holds is shown at once, never re-listed before the first page;
    this sidebar note follows the start-up refresh and reruns the page when it changed the index
    (or failed: the page then says so)."""
    if not refresh.done.is_set():
        shown = md_escape(display_url(refresh.url))
        st.caption(f":material/sync: Looking for new checkpoints in {shown}…")
        return
    if refresh.error is not None:
        st.session_state[ERROR_KEY] = open_error_message(refresh.url, refresh.error) + STALE
    elif not refresh.changed:
        return  # nothing new: the page stays as drawn (the note is gone)
    clear_query_caches()
    st.rerun()


def startup_refreshed(refresh: startup.StartupRefresh | None) -> bool:
    """Whether ``lastgood ui``'s start-up thread refreshed the store (lastgood.serve.process): the first
    session waits for it instead of refreshing again; False when it did not (or failed: the
    page then indexes the store itself and shows why it cannot)."""
    if refresh is None:
        return False
    if not refresh.done.is_set():
        holder = st.empty()
        with holder.status(f"Indexing {display_url(refresh.url)}…"):
            refresh.done.wait()
        holder.empty()
    if refresh.error is not None:
        return False
    if refresh.changed:
        clear_query_caches()
    return True
