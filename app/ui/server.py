"""The dashboard's process: Streamlit's server started in ``lastgood ui``'s own interpreter, and
the hooks around each page run (see lastgood.serve).

``streamlit run`` is a thin shell over :func:`streamlit.web.bootstrap.run`: it loads the config
options given as flags, then runs the server's event loop in the main thread, where it installs
its SIGTERM/SIGINT/SIGQUIT handlers (they stop the server; :func:`run` then returns). Calling it
here serves the dashboard without a second interpreter importing everything again.

Around every page run (:func:`page_run`, used by the router) the index stays open and the
sidebar's background data check starts after the page's content; the first session of a
store uses the command's start-up refresh (:func:`startup_refreshed`, or
:func:`follow_startup_refresh` for a store the index already holds).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import streamlit as st

from lastgood import background, serve, ui

ENTRY = Path(__file__).resolve().parent.parent / "streamlit_app.py"


def options(host: str, port: int) -> dict[str, object]:
    """The server options ``lastgood ui`` always sets (the flags ``streamlit run`` would take)."""
    return {
        "server.address": host, "server.port": port, "server.headless": True,
        "browser.gatherUsageStats": False, "client.toolbarMode": "viewer",
        "server.fileWatcherType": "none", "server.runOnSave": False,  # installed code: no reloads
        # no full garbage collection after every page and fragment run (Streamlit's default): with
        # the index's modules loaded it holds the interpreter lock 50-400 ms, as the page is sent
        "runner.postScriptGC": False,
    }


def skip_component_scan() -> bool:
    """Skip Streamlit's start-up scan of every installed distribution for v2 component manifests.

    The scan parses each distribution's metadata several times (0.2-0.8 s of CPU before the
    server answers, more in a big environment) to register custom components that Lastgood's
    pages never use; no config option turns it off. Replaced, in this process only, by a scan
    that finds nothing. Returns whether it was replaced (False if Streamlit moved the function:
    the scan then simply runs)."""
    try:
        from streamlit.components.v2 import manifest_scanner
    except ImportError:
        return False
    if not callable(getattr(manifest_scanner, "scan_component_manifests", None)):
        return False
    manifest_scanner.scan_component_manifests = _no_manifests
    return True


def _no_manifests(max_workers: int | None = None) -> list:
    return []


def skip_use_warning_probe() -> None:
    """Spare the first page run Streamlit's one-time "are we in a REPL?" probe.

    Before the first element of the process is sent, Streamlit calls ``inspect.stack()`` to
    decide whether to warn that the app was not started with ``streamlit run`` (0.2-0.4 s of
    CPU: it resolves the source file of every frame against every loaded module). Here the
    server is running, so that warning can never apply; the flag that records "already
    checked" is set up front."""
    from streamlit import delta_generator

    delta_generator._use_warning_has_been_displayed = True


def run(host: str, port: int) -> None:
    """Serve the dashboard until a signal stops the server."""
    from streamlit import config
    from streamlit.web import bootstrap

    flags = options(host, port)
    skip_component_scan()
    skip_use_warning_probe()
    config._main_script_path = str(ENTRY)  # as `streamlit run` does: config and secrets beside it
    bootstrap.load_config_options(flag_options=flags)
    bootstrap.run(str(ENTRY), False, [], flags)


# ---- one page run (the router wraps every page in these) -----------------------------------

_run = threading.local()  # each page run has its own script thread


@contextmanager
def page_run() -> Iterator[None]:
    """Around one page run: the index stays open (every query of the run shares one open of the
    file, instead of ~40 ms to open it per query), and the sidebar's background data check is
    started after the page's own content (so it never delays the first paint)."""
    _run.after = None
    _wait_for_first_indexing()
    held = _hold_index()
    try:
        yield
    finally:
        try:
            _run_after_page()
        finally:
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


def sidebar_check_after_page(slot: Any, ref: ui.StoreRef) -> None:
    if hasattr(_run, "after"):  # inside page_run: after the page's content
        _run.after = (slot, ref)
        return
    _sidebar_check(slot, ref)  # a page run on its own: at once


def _run_after_page() -> None:
    after = getattr(_run, "after", None)
    del _run.after  # outside page_run again
    if after is not None:
        _sidebar_check(*after)


def _sidebar_check(slot: Any, ref: ui.StoreRef) -> None:
    from lastgood.ui import integrity as ui_integrity  # the background data check and its progress

    _start_data_check(ref, ui_integrity)
    with slot:
        ui_integrity.sidebar_check(ref)


def _start_data_check(ref: ui.StoreRef, ui_integrity: Any) -> None:
    """Start the automatic background data check (``lastgood ui`` sets its variable) when the
    index holds checkpoints no data check has read, decided by one small count: the Integrity
    page's own decision reads every run's health (~0.5 s for 1,600 runs, CPU the browser needs
    to draw the first page). ``sidebar_check`` then finds the job running and shows it."""
    if os.environ.get(ui_integrity.AUTO_CHECK_ENV, "").strip() in ("", "0"):
        return
    if background.job(ref.index_path, ref.url) is not None:
        return
    depths = ui.query(ref, "verification")
    if sum(depths.values()) > depths.get("data", 0):
        background.start(ref.index_path, ref.url, "data", only_unverified=True,
                         delay=ui_integrity.AUTO_CHECK_DELAY)


# ---- the start-up refresh, seen from the first session ---------------------------------------


STARTUP_POLL_SECONDS = 0.5


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
    """Whether ``lastgood ui``'s start-up thread refreshed the store (lastgood.serve): the first
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
