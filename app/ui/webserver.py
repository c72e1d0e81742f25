"""Streamlit's server in ``lastgood ui``'s own interpreter, listening before the first page's work.

``streamlit run`` is a thin shell over :func:`streamlit.web.bootstrap.run`: it loads the config
options given as flags, then runs the server's event loop in the main thread, where it installs
its SIGTERM/SIGINT/SIGQUIT handlers (they stop the server; :func:`run` then returns). Calling it
here serves the dashboard without a second interpreter importing everything again.

The first page's queries and its page modules load in a thread once the server listens
(:func:`run`'s ``when_listening``), while the browser loads and compiles the dashboard's static
files, a wait in which this process is otherwise idle; the first page run finds them ready.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

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


def run(host: str, port: int, when_listening: Callable[[], None] | None = None) -> None:
    """Serve the dashboard until a signal stops the server; ``when_listening`` runs in a daemon
    thread once the server accepts connections."""
    from streamlit import config
    from streamlit.web import bootstrap

    flags = options(host, port)
    skip_component_scan()
    skip_use_warning_probe()
    if when_listening is not None:
        call_when_listening(bootstrap, when_listening)
    config._main_script_path = str(ENTRY)  # as `streamlit run` does: config and secrets beside it
    bootstrap.load_config_options(flag_options=flags)
    bootstrap.run(str(ENTRY), False, [], flags)


def call_when_listening(bootstrap: Any, action: Callable[[], None]) -> None:
    """Start ``action`` in a daemon thread after Streamlit's server started (its own start hook,
    which prints the address, is wrapped); at once if this Streamlit has no such hook."""
    started = getattr(bootstrap, "_on_server_start", None)
    if not callable(started):
        _in_thread(action)
        return

    def on_server_start(server: Any) -> None:
        started(server)
        _in_thread(action)

    bootstrap._on_server_start = on_server_start


def _in_thread(action: Callable[[], None]) -> None:
    threading.Thread(target=action, daemon=True, name="lastgood-load-pages").start()


def load_pages(index_path: str, first_store_id: int | None) -> None:
    """The first page's queries and code, ahead of the browser's first request: the Overview's
    queries in their own thread (DuckDB runs them without the interpreter lock) while the page
    modules are imported here. ``first_store_id``: the store the first page shows,
    when the index holds it (None: a never-seen store, being indexed meanwhile)."""
    if first_store_id is not None:
        from lastgood.index import page_queries

        page_queries.prepare(index_path, first_store_id)
    from lastgood.ui import overview, server  # noqa: F401 - imported for the first page run
