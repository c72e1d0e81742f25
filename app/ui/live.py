"""Live: an auto-refresh interval in the sidebar (off, 5 s, 30 s, 1 min; in the URL as ``live``), as
Grafana does. Every interval a fragment refreshes the shown store's index incrementally
(``index_store(..., check="auto")``: new checkpoints and events listed, new checkpoints checked) and,
only when that changed something, clears the query caches and reruns the page: new checkpoints and
findings show up without a full re-index, and a quiet store costs one listing per interval.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime

import streamlit as st

from lastgood.redact import redact_text
from lastgood.stores import index_store
from lastgood.ui import links
from lastgood.ui.escape import md_escape
from lastgood.ui.stores import StoreRef, catalog, clear_query_caches

OFF = "off"
INTERVALS = {OFF: None, "5s": 5.0, "30s": 30.0, "1m": 60.0}  # the URL's value -> seconds

# session-state keys
LIVE_KEY = "lastgood_live"  # the interval control
LAST_KEY = "lastgood_live_last"  # (store URL, monotonic time) of the last refresh
STATUS_KEY = "lastgood_live_status"  # what the last refresh found, for the caption


def take_link(value: str | None) -> None:
    """The link's ``live`` value (when it is a known interval) becomes the control's."""
    if value in INTERVALS:
        st.session_state[LIVE_KEY] = value


def interval() -> str:
    chosen = st.session_state.get(LIVE_KEY)
    return chosen if chosen in INTERVALS else OFF


def url_value() -> str | None:
    """The interval as the URL holds it (None: off, left out)."""
    return None if interval() == OFF else interval()


def live_control(ref: StoreRef) -> None:
    """The sidebar's Auto-refresh control and, while it is on, the refreshing fragment."""
    if st.session_state.get(LIVE_KEY) not in INTERVALS:
        st.session_state[LIVE_KEY] = OFF
    st.segmented_control("Auto-refresh", list(INTERVALS), key=LIVE_KEY, required=True,
                         help="Pick up new checkpoints and findings every interval (an incremental "
                              "refresh of the index; the page redraws only when something changed)")
    seconds = INTERVALS[interval()]
    if seconds is not None:
        _follow(ref, seconds)


def _follow(ref: StoreRef, seconds: float) -> None:
    @st.fragment(run_every=seconds)
    def tick() -> None:
        if due(ref, seconds):
            if refresh(ref):
                st.rerun(scope="app")
        st.caption(st.session_state.get(STATUS_KEY) or f":material/sync: Live: every {interval()}")

    tick()


def due(ref: StoreRef, seconds: float, now: float | None = None) -> bool:
    """Whether ``ref`` is due for a refresh: the first tick of a store only starts the clock (the
    page was just drawn from the index), later ones refresh once ``seconds`` (less a little slack)
    have passed since the last."""
    now = time.monotonic() if now is None else now
    store, last = st.session_state.get(LAST_KEY) or (None, None)
    if store != ref.url or last is None:
        st.session_state[LAST_KEY] = (ref.url, now)
        return False
    if now - last < seconds * 0.8:
        return False
    st.session_state[LAST_KEY] = (ref.url, now)
    return True


def refresh(ref: StoreRef) -> bool:
    """One incremental refresh of ``ref``'s index; True when it changed something (the query caches
    were cleared then). A failure is said under the control, never raised."""
    stamp = datetime.now(UTC).strftime("%H:%M:%S")
    try:
        summary = index_store(catalog(ref.index_path), ref.url, check="auto")
    except Exception as exc:  # noqa: BLE001 - a store can vanish or lock: say so, try again next tick
        st.session_state[STATUS_KEY] = f":material/sync_problem: Live: {md_escape(redact_text(str(exc))[:160])}"
        return False
    found = len(summary.verify.findings) if summary.verify is not None else 0
    changed = summary.refresh.changed or found > 0
    news = f"{summary.refresh.checkpoints:,} new checkpoint(s), {found:,} finding(s)" if changed else "no change"
    st.session_state[STATUS_KEY] = f":material/sync: Live: every {interval()} · {stamp} UTC · {news}"
    if changed:
        clear_query_caches()
    return changed


def link_params() -> dict[str, str | None]:
    return {links.LIVE: url_value()}
