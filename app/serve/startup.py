"""``lastgood ui``'s start-up refresh of never-seen stores, in a child process.

The dashboard's own process spends its first second importing and starting Streamlit, holding
the interpreter lock; a refresh in one of its threads (a 100k-checkpoint store: ~2 s of Python)
shared that lock and finished late. Run as ``python -m lastgood.serve.startup INDEX CHECK READER
URL…``, this indexes the stores one after another on the machine's other core while the server
starts, and prints one JSON line per store as it finishes::

    {"url": …, "store_id": 3, "changed": true, "seconds": 1.9, "error": null}
    {"url": …, "error": {"lastgood": true, "message": "…"}}

(URLs are public: a secret stays in the home's credentials file, found through LASTGOOD_HOME.)
:mod:`lastgood.serve.process` reads the lines; the dashboard opens the index once this process ended.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TextIO

NO_READER = "-"  # READER when the command named none
PARENT_ENV = "LASTGOOD_STARTUP_PARENT"  # the dashboard's process id, set by command_env()
FIRST_PAGE_WAIT = 10.0  # seconds a reopen's refresh waits for the first page before it starts
# seconds more while the browser draws that page: the refresh (a count over the store's tables) takes
# a core the browser's renderer needs on a small machine; the sidebar says it is looking meanwhile
FIRST_PAGE_SETTLE = 1.0
first_page_shown = threading.Event()  # set after the dashboard's first page run (lastgood.ui.server)


@dataclass
class StartupRefresh:
    """One store's refresh by the start-up thread (read by the first page that shows it)."""

    url: str
    known: bool = False  # already in the index when the command started: shown as it is meanwhile
    done: threading.Event = field(default_factory=threading.Event)
    store_id: int | None = None
    changed: bool = False
    error: Exception | None = None
    seconds: float = 0.0


def command(index_path: str, urls: Sequence[str], reader_name: str | None, check: str) -> list[str]:
    """The child's argv (run with this interpreter)."""
    return [sys.executable, "-m", "lastgood.serve.startup", index_path, check,
            reader_name or NO_READER, *urls]


def command_env() -> dict[str, str]:
    """The child's environment: this one (LASTGOOD_HOME names the index and the credentials), and
    the dashboard's process id, so the child ends with it."""
    return {**os.environ, PARENT_ENV: str(os.getpid())}


def main(argv: Sequence[str], out: TextIO) -> int:
    index_path, check, reader, *urls = argv
    _end_with_parent()
    if urls:  # never seen: the first store's listing can start before the imports below
        from lastgood.index.prefetch import prefetch_store

        prefetch_store(urls[0], None if reader == NO_READER else reader)
    pending = [StartupRefresh(url) for url in urls]
    refresh_here(index_path, pending, None if reader == NO_READER else reader, check,
                 on_done=lambda refresh: _report(out, _line(refresh)))
    return 0


def refresh_here(index_path: str, pending: list[StartupRefresh], reader_name: str | None,
                 check: str, on_done: Callable[[StartupRefresh], None] | None = None) -> None:
    """Refresh ``pending`` one after another in this process (a known store once the first page
    was drawn), each marked done, and handed to ``on_done``, as it ends (:func:`main`
    reports them to the dashboard this way)."""
    if not pending:
        return
    from lastgood.index.catalog import Catalog
    from lastgood.stores import index_store

    def finish(refresh: StartupRefresh) -> None:
        refresh.done.set()
        if on_done is not None:
            on_done(refresh)

    try:
        catalog = Catalog(index_path, keep_open=False)
        settled = False
        for refresh in pending:
            if refresh.known and not settled:  # once, before the first known store
                settled = True
                if first_page_shown.wait(FIRST_PAGE_WAIT):
                    time.sleep(FIRST_PAGE_SETTLE)
            started = time.perf_counter()
            try:
                summary = index_store(catalog, refresh.url, reader_name=reader_name, check=check)
                refresh.store_id, refresh.changed = summary.store.store_id, summary.refresh.changed
            except Exception as exc:  # noqa: BLE001 - shown on the page that waits for it
                refresh.error = exc
            refresh.seconds = time.perf_counter() - started
            finish(refresh)
    except Exception as exc:  # noqa: BLE001 - the index itself failed to open: every store says so
        for refresh in pending:
            if not refresh.done.is_set():
                refresh.error = exc
                finish(refresh)


def _end_with_parent() -> None:
    """End when the dashboard's process ends, however it ends (a refresh killed half-way leaves the
    index as its last commit left it)."""
    from lastgood.processes import end_with_parent

    end_with_parent(int(os.environ.get(PARENT_ENV) or 0) or None)


def _line(refresh: Any) -> dict[str, Any]:
    """One store's outcome (a lastgood.serve.process.StartupRefresh) as the dashboard reads it."""
    if refresh.error is not None:
        return {"url": refresh.url, "error": _error(refresh.error), "seconds": refresh.seconds}
    return {"url": refresh.url, "store_id": refresh.store_id, "changed": refresh.changed,
            "seconds": refresh.seconds, "error": None}


def _error(exc: BaseException) -> dict[str, Any]:
    from lastgood.errors import LastgoodError

    return {"lastgood": isinstance(exc, LastgoodError), "message": str(exc) or type(exc).__name__}


def _report(out: TextIO, line: dict[str, Any]) -> None:
    out.write(json.dumps(line) + "\n")
    out.flush()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:], sys.stdout))
