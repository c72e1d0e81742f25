"""A page's heavy parts drawn after its first screen, on a session's first visit of the page.

In Chromium's profile of the Overview, the first metric appeared only after the browser code of
every element sent with it was loaded and run: the tables (Streamlit's data grid, its largest
element bundle) held back the numbers and figures above them. :func:`after_first_screen` puts such
parts in a fragment that, on the page's first run in a session, draws a short note; the
browser re-runs the fragment a moment later (``run_every``), once it has drawn the first
screen, and that run asks for a whole-page run which draws the parts in place. Every later run
of the page in the session draws them at once (no fragment, no timer left behind).
"""

from __future__ import annotations

from collections.abc import Callable

import streamlit as st

DELAY_SECONDS = 1.0  # after the browser got the first screen (it draws it meanwhile): it re-runs the fragment then
_STATE = "progressive:{name}"  # session state: how many times the fragment ran (first visit only)


def after_first_screen(name: str, draw: Callable[[], None], note: str = "Loading tables…") -> None:
    """Draw ``draw()`` here: at once, unless this is the session's first run of the part ``name``,
    in which case ``note`` shows until the browser drew the first screen."""
    key = _STATE.format(name=name)
    if key in st.session_state:  # a later run (or the run the fragment asked for): in place
        st.session_state[key] = -1
        draw()
        return
    st.session_state[key] = 0
    _later(key, note)


@st.fragment(run_every=DELAY_SECONDS)
def _later(key: str, note: str) -> None:
    runs = st.session_state.get(key, -1)
    if runs < 0:  # the page already drew the part (a full run came first): nothing left to do
        return
    st.session_state[key] = runs + 1
    if runs == 0:  # the first screen's own run
        st.caption(f":material/hourglass_empty: {note}")
        return
    st.rerun(scope="app")  # the browser drew the first screen: the whole page, the part in place
