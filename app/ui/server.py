"""The dashboard process's hook around each page run (the server itself: lastgood.ui.webserver;
the start-up refresh: lastgood.serve.process, followed by the first session in lastgood.ui.stores).

Around every page run (:func:`page_run`, used by the router) the index stays open, and what the page
deferred (the sidebar's widgets and background data check: lastgood.ui.pagerun.after_page) is drawn
after the page's content.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import streamlit as st

from lastgood.config import load_settings
from lastgood.errors import LastgoodError
from lastgood.index.catalog import Catalog
from lastgood.readers.registry import display_url
from lastgood.serve import process as serve
from lastgood.serve import startup
from lastgood.ui import pagerun


@contextmanager
def page_run() -> Iterator[None]:
    """Around one page run: the index stays open (every query of the run shares one open of the
    file, instead of ~40 ms to open it per query), and the sidebar's widgets and background data
    check are drawn after the page's own content (``pagerun.after_page``: they never hold back the
    first paint)."""
    pagerun.begin_page()
    _wait_for_first_indexing()
    held = _hold_index()
    try:
        yield
    finally:
        try:
            pagerun.run_after_page()
        finally:
            pagerun.end_page()  # outside page_run again
            if held is not None:
                held.close()
            startup.first_page_shown.set()  # a reopen's start-up refresh may start now


def _wait_for_first_indexing() -> None:
    """While ``lastgood ui``'s child process indexes never-seen stores it holds the index's write
    lock: say so and wait for it, before anything on the page opens the index."""
    try:
        index_path = str(load_settings().index_path)
    except (LastgoodError, OSError):
        return
    running = serve.indexing_first(index_path)
    if not running:
        return
    holder = st.empty()
    shown = ", ".join(display_url(r.url) for r in running)
    with holder.status(f"Indexing {shown}…", expanded=True):
        st.caption("Listing its checkpoints and checking their structure; the page follows.")
        from lastgood.ui.tables import empty_grid  # the Overview's tables then draw without that wait

        empty_grid()  # gone with the status box
        for refresh in running:
            refresh.done.wait()
    holder.empty()


def _hold_index() -> Catalog | None:
    try:
        return Catalog(load_settings().index_path)  # keep_open: closed when the run ends
    except (LastgoodError, OSError):  # the store picker shows why the index cannot be opened
        return None
