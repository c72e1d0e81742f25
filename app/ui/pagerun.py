"""What every page run shares: drawing deferred to the page's end, stopping early, errors shown
instead of tracebacks, widget values remembered across pages.

The router wraps each page run in :func:`lastgood.ui.server.page_run`, which opens and closes the
deferral (:func:`begin_page`, :func:`run_after_page`, :func:`end_page`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import NoReturn

import streamlit as st

from lastgood.errors import LastgoodError
from lastgood.redact import redact_text
from lastgood.ui.escape import md_escape

REMEMBERED_KEY = "lastgood_remembered"  # session state: the values remember() keeps

_run = threading.local()  # each page run has its own script thread


# ---- drawing after the page's own content ---------------------------------------------------


def begin_page() -> None:
    """A page run starts: :func:`after_page` defers until :func:`run_after_page`."""
    _run.after = []


def end_page() -> None:
    """The page run ended: :func:`after_page` draws at once again."""
    del _run.after


def after_page(draw: Callable[[], None]) -> None:
    """Draw with ``draw`` once the page's own content was sent (inside ``server.page_run``), in the
    slot the caller already placed: the browser builds the page's numbers and figures first, and
    the sidebar's widgets (whose code Chromium loads and compiles on a first visit) after them.
    Outside page_run (a page run on its own), at once."""
    pending = getattr(_run, "after", None)
    if pending is None:
        draw()
    else:
        pending.append(draw)


def run_after_page() -> None:
    """Draw what the page run deferred (:func:`after_page`), once: at its end, or before a page
    stops early (:func:`stop`)."""
    pending = getattr(_run, "after", None) or []
    if pending:
        _run.after = []
    for draw in pending:
        draw()


# ---- stopping and errors ------------------------------------------------------------------


def stop() -> NoReturn:
    """``st.stop()`` for pages: what the run deferred to the end of the page (the store picker's
    widgets, the sidebar's check: :func:`after_page`) is drawn first, as nothing can be drawn
    once Streamlit was asked to stop."""
    run_after_page()
    st.stop()


@contextmanager
def guarded() -> Iterator[None]:
    """Show a LastgoodError as st.error and stop the page (never a traceback)."""
    try:
        yield
    except LastgoodError as exc:
        st.error(md_escape(redact_text(str(exc))))
        stop()


# ---- widgets across pages -------------------------------------------------------------------


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
