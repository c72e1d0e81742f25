"""``lastgood ui`` in one process: the stores are refreshed in a thread while Streamlit starts.

The command used to index every store, then exec a second interpreter running
``streamlit run``: every import was paid twice and the server only began to
start once the index was done. Now the command's own interpreter serves the
dashboard (:mod:`lastgood.ui.server` starts Streamlit's server in the main
thread, which keeps the signal handlers), and the stores given on the command
line are refreshed at structure depth by one background thread started first:
a never-seen store at once (its first page waits for that refresh instead of
starting its own, :func:`take_startup_refresh`), a store the index already
holds after the first page was drawn (that page shows the index as it is).
No streamlit here.

A URL holding a secret never reaches the process's command line for long: the
command keeps the secret in the home's credentials file and re-executes itself
with public URLs only (:func:`public_urls`) before doing anything else.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path

from lastgood.credentials import Vault, split_url
from lastgood.serve import startup as startup_index
from lastgood.serve.startup import StartupRefresh, refresh_here


CACHE_LOGGER, NO_RUNTIME = "streamlit.runtime.caching.cache_data_api", "No runtime found"


_refreshes: dict[tuple[str, str], StartupRefresh] = {}
_first: list[tuple[str, StartupRefresh]] = []  # never-seen stores: every page waits for these
_children: list = []  # start-up child processes (subprocess.Popen), ended by shutdown()
_lock = threading.Lock()





def refresh_in_background(index_path: str, urls: Sequence[str], *, reader_name: str | None = None,
                          check: str = "structure", known: Sequence[str] = (),
                          in_child: bool = True) -> threading.Thread:
    """Refresh ``urls`` (public URLs) one after another from a daemon thread; returns the thread.

    Never-seen stores go first and at once, in a child process (``in_child``:
    :mod:`lastgood.serve.startup`, on the other core while this process starts Streamlit); every
    page waits for them before opening the index (:func:`indexing_first`). The ``known`` ones
    (already in the index: shown as they are) are refreshed in the thread once the first page
    was drawn, so their refresh does not take CPU from it."""
    pending = sorted((StartupRefresh(url, known=url in known) for url in urls), key=lambda r: r.known)
    with _lock:
        _refreshes.update({(index_path, r.url): r for r in pending})
        _first.extend((index_path, r) for r in pending if not r.known)
    thread = threading.Thread(target=_refresh_all, args=(index_path, pending, reader_name, check, in_child),
                              daemon=True, name="lastgood-startup-index")
    thread.start()
    return thread


def indexing_first(index_path: str) -> list[StartupRefresh]:
    """The never-seen stores whose start-up refresh is still running: a page waits for them before
    it opens the index (the child process holds the index's write lock until it ends)."""
    with _lock:
        return [r for path, r in _first if path == index_path and not r.done.is_set()]


def _refresh_all(index_path: str, pending: list[StartupRefresh], reader_name: str | None,
                 check: str, in_child: bool) -> None:
    fresh = [r for r in pending if not r.known]
    if in_child and fresh:
        _refresh_in_child(index_path, fresh, reader_name, check)
    refresh_here(index_path, [r for r in pending if not r.done.is_set()], reader_name, check)


def _refresh_in_child(index_path: str, pending: list[StartupRefresh], reader_name: str | None,
                      check: str) -> None:
    """Refresh ``pending`` in one child process, each marked done as its line arrives. A child
    that cannot start leaves them to :func:`refresh_here`; one that dies marks the rest failed."""
    import subprocess
    import tempfile

    by_url = {r.url: r for r in pending}
    with tempfile.TemporaryFile() as errors:
        try:
            child = subprocess.Popen(startup_index.command(index_path, list(by_url), reader_name, check),
                                     stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=errors,
                                     text=True, env=startup_index.command_env())
        except OSError:
            return
        _children.append(child)
        for line in child.stdout or ():
            _take_child_line(by_url, line)
        code = child.wait()
        errors.seek(0)
        last = (errors.read().decode(errors="replace").strip().splitlines() or [""])[-1]
    for refresh in by_url.values():
        if not refresh.done.is_set():
            refresh.error = RuntimeError(f"the start-up refresh stopped (exit {code}): {last}".rstrip(": "))
            refresh.done.set()


def _take_child_line(by_url: dict[str, StartupRefresh], line: str) -> None:
    import json

    try:
        done = json.loads(line)
        refresh = by_url[done["url"]]
    except (ValueError, KeyError, TypeError):
        return
    error = done.get("error")
    if error:
        from lastgood.errors import LastgoodError

        refresh.error = (LastgoodError if error.get("lastgood") else RuntimeError)(str(error.get("message")))
    else:
        refresh.store_id, refresh.changed = int(done["store_id"]), bool(done["changed"])
    refresh.seconds = float(done.get("seconds") or 0.0)
    refresh.done.set()


def take_startup_refresh(index_path: str, url: str) -> StartupRefresh | None:
    """The start-up refresh of ``url``, once: the first page session uses it (later sessions
    refresh the store themselves); None when the command did not refresh it."""
    with _lock:
        return _refreshes.pop((index_path, url), None)


def import_pandas_first() -> None:
    """The fallback when :mod:`lastgood.display.plotly_theme` cannot defer Streamlit's Plotly theme
    (a Streamlit without that module): import pandas in the calling (main) thread, after the
    start-up refresh began and before Streamlit is imported. DuckDB imports pandas from C in the
    refresh thread, while Streamlit's import peeks at ``sys.modules["pandas"]`` (plotly's optional
    import): without this, the main thread can see a half-imported pandas and fail. The import
    system makes the refresh thread wait for this import instead."""
    import pandas  # noqa: F401


def quiet_cache_warning() -> None:
    """lastgood.ui declares its cached queries when imported, here before Streamlit's runtime
    exists (the server starts after the import); Streamlit then logs "No runtime found, using
    MemoryCacheStorageManager" for each, though the caches are made by the runtime on first call.
    Drop that one message (a logging filter: no streamlit import here)."""
    import logging

    logging.getLogger(CACHE_LOGGER).addFilter(lambda record: NO_RUNTIME not in record.getMessage())


def shutdown(code: int = 0) -> None:
    """After the server stopped: cancel background checks (their worker processes end), then
    end the process without waiting on daemon threads or finalizing cached index connections."""
    import os
    import sys

    from lastgood.integrity import background

    _end_children()
    background.cancel_all()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _end_children() -> None:
    """Kill a never-seen store's indexing still running (the index keeps its last commit) and
    reap it, so nothing of the dashboard outlives it."""
    import subprocess

    for child in _children:
        if child.poll() is None:
            child.kill()
            try:
                child.wait(5)
            except subprocess.TimeoutExpired:
                pass


def public_urls(stores: Sequence[str], home: str | Path) -> tuple[list[str], bool]:
    """Each store URL as the index names it, without its secret (kept in the home's credentials
    file), and whether any URL held one."""
    from lastgood.stores import normalize_url

    urls, secret = [], False
    for url in stores:
        full = normalize_url(url)
        public, had_secret = split_url(full)
        if had_secret:
            public, secret = Vault(home).remember(full), True
        urls.append(public)
    return urls, secret
