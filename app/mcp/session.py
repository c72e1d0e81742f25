"""What every tool call shares: the stores served, one index connection per call, answers, errors.

A tool call takes the server's one lock (calls run one at a time, in a worker thread), opens the
index for that call only and closes it at the end, so ``lastgood`` commands and the dashboard use
the same index between calls (DuckDB lets one process open it at a time). A store is named by
its URL (as served) or by its index handle ``store:N`` (``list_stores``); a store the server was
not started with is refused. Answers are the CLI's JSON (redacted, controls escaped); errors are
one line, as the CLI prints them, never a traceback.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from mcp.server.mcpserver.exceptions import ToolError

from lastgood.config import Settings
from lastgood.errors import LastgoodError, UsageError, as_fault
from lastgood.index.catalog import Catalog
from lastgood.index.store import OpenStore
from lastgood.redact import redact, redact_text

HANDLE_PREFIX = "store:"
Progress = Callable[[int, "int | None"], None]  # the core's progress callbacks
Report = Callable[[int, "int | None", str], None]  # a call's: with what is in progress


@dataclass
class ServerConfig:
    """How ``lastgood mcp`` was started."""

    settings: Settings
    stores: list[str] = field(default_factory=list)  # public URLs, as the index names them; []: every indexed store
    allow_write: bool = False
    reader_name: str | None = None


class CallFailed(ToolError):
    """A tool call's one-line error (a LastgoodError's message, redacted, controls escaped)."""


def one_line(message: Any) -> str:
    from lastgood.cli.output import escape_controls

    return escape_controls(redact_text(str(message)))


def failure(exc: BaseException) -> CallFailed:
    """``exc`` as the line the CLI would print for it (an unexpected one: "a bug", one line)."""
    if isinstance(exc, CallFailed):
        return exc
    if not isinstance(exc, LastgoodError) and os.environ.get("LASTGOOD_DEBUG"):
        import traceback

        traceback.print_exception(exc, file=sys.stderr)  # the server's log, never the client
    return CallFailed(one_line(as_fault(exc)))


# ---- the stores served --------------------------------------------------------------------


def public_urls(urls: list[str], home: Any) -> list[str]:
    """Each URL as the index names it; a secret in it is kept in the home's credentials file."""
    from lastgood.credentials import Vault, split_url
    from lastgood.readers.registry import normalize_url

    found = []
    for url in urls:
        full = normalize_url(url)
        public, had_secret = split_url(full)
        found.append(Vault(home).remember(full) if had_secret else public)
    return found


def store_rows(catalog: Catalog, sizes: bool = False) -> list[dict[str, Any]]:
    """Every store in the index (``url`` is the public form, without a secret), with its
    checkpoints, runs and bytes when ``sizes``."""
    counted = """count(c.checkpoint_id) AS checkpoints, count(DISTINCT c.run_id) AS runs,
                 coalesce(sum(c.size_bytes), 0) AS size_bytes""" if sizes else "NULL AS checkpoints"
    joined = "LEFT JOIN checkpoints c USING (store_id)" if sizes else ""
    with catalog.connect() as con:
        cur = con.execute(f"""SELECT s.store_id, s.url, s.display_url, s.reader, s.indexed_at, {counted}
                              FROM stores s {joined} GROUP BY ALL ORDER BY s.store_id""")
        names = [d[0] for d in cur.description]
        return [dict(zip(names, row)) for row in cur.fetchall()]


class Served:
    """The server's stores and its one lock; ``call()`` opens what one tool call needs."""

    def __init__(self, config: ServerConfig) -> None:
        self.config = config
        self.lock = threading.Lock()

    @contextmanager
    def call(self, progress: Report | None = None, cancel: threading.Event | None = None,
             operator: str = "mcp:unknown") -> Iterator[Call]:
        with self.lock:
            call = Call(self.config, progress, cancel, operator)
            try:
                yield call
            finally:
                call.close()


class Call:
    """One tool call: the index (opened on first use, closed at the end) and the stores it opened."""

    def __init__(self, config: ServerConfig, progress: Report | None, cancel: threading.Event | None,
                 operator: str) -> None:
        self.config, self.progress, self.cancel, self.operator = config, progress, cancel, operator
        self._catalog: Catalog | None = None
        self._opened: dict[str, OpenStore] = {}
        self._served: list[dict[str, Any]] | None = None

    @property
    def catalog(self) -> Catalog:
        if self._catalog is None:
            self._catalog = Catalog(self.config.settings.index_path)
        return self._catalog

    def close(self) -> None:
        for store in self._opened.values():
            try:
                store.reader.close()
            except Exception:  # noqa: BLE001 - closing a reader never fails a call that answered
                pass
        if self._catalog is not None:
            self._catalog.close()

    def served(self, sizes: bool = False) -> list[dict[str, Any]]:
        """The index's rows of the stores this server serves (all indexed stores when none was given)."""
        if self._served is not None and not sizes:
            return self._served
        rows = store_rows(self.catalog, sizes)
        if self.config.stores:
            by_url = {r["url"]: r for r in rows}
            rows = [by_url.get(url) or {"store_id": None, "url": url, "display_url": url, "reader": None,
                                        "indexed_at": None, "checkpoints": 0, "runs": 0, "size_bytes": 0}
                    for url in self.config.stores]
        if not sizes:
            self._served = rows
        return rows

    def url_of(self, ref: str) -> str:
        """The public URL of a served store named by its URL, display URL or ``store:N`` handle."""
        text = (ref or "").strip()
        if not text:
            raise UsageError("name a store: its URL or its handle (list_stores lists them)")
        served = self.served()
        if text.startswith(HANDLE_PREFIX):
            for row in served:
                if row["store_id"] is not None and f"{HANDLE_PREFIX}{row['store_id']}" == text:
                    return str(row["url"])
            raise UsageError(f"no store {text!r} is served here (list_stores lists them)")
        for row in served:
            if text in (row["url"], row["display_url"]):
                return str(row["url"])
        wanted = _public(text)
        for row in served:
            if wanted == row["url"]:
                return str(row["url"])
        raise UsageError(f"{text!r} is not served by this server: start `lastgood mcp` with it "
                         "(list_stores lists the stores served)")

    def store(self, ref: str, check: str = "auto") -> OpenStore:
        """The store ``ref`` names, its index refreshed (as every CLI command does first)."""
        from lastgood.stores import index_store

        url = self.url_of(ref)
        if url in self._opened:
            return self._opened[url]
        self._served = None  # a refresh may index the store for the first time
        summary = index_store(self.catalog, url, reader_name=self.config.reader_name, check=check,
                              progress=self.reporter("indexing"))
        self._opened[url] = summary.store
        return summary.store

    def store_id(self, ref: str, refresh: bool = True) -> int:
        """The store's id in the index; refreshed first unless ``refresh`` is False and it is indexed."""
        if not refresh:
            url = self.url_of(ref)
            known = [r["store_id"] for r in self.served() if r["url"] == url and r["indexed_at"] is not None]
            if known:
                return int(known[0])
        return self.store(ref).store_id

    def reporter(self, label: str) -> Progress | None:
        """A progress callback for the core that sends ``label`` with every report."""
        progress = self.progress
        if progress is None:
            return None
        return lambda done, total: progress(done, total, label)


def _public(ref: str) -> str | None:
    """``ref`` as the index would name it (a secret in it is dropped, never kept: a client's text)."""
    from lastgood.credentials import split_url
    from lastgood.readers.registry import normalize_url

    try:
        return split_url(normalize_url(ref))[0]
    except (LastgoodError, OSError, ValueError):
        return None


# ---- answers ------------------------------------------------------------------------------


@dataclass
class Answer:
    """A tool's result: the CLI's JSON shape, and for a paged list where this page sits."""

    value: Any
    page: dict[str, Any] | None = None


def json_text(value: Any) -> str:
    """The CLI's ``--format json`` text of ``value`` (redacted, controls escaped), on one line."""
    from lastgood.cli.output import dumps, json_safe

    return json_safe(dumps(redact(value), indent=None))


def paged(items: list[Any], offset: int, limit: int) -> tuple[list[Any], dict[str, Any]]:
    """``items[offset:offset + limit]`` and where that page sits."""
    return items[offset:offset + limit], page_info(offset, limit, min(limit, max(0, len(items) - offset)),
                                                   len(items))


def page_info(offset: int, limit: int, returned: int, total: int) -> dict[str, Any]:
    end = offset + returned
    return {"offset": offset, "limit": limit, "returned": returned, "total": total,
            "next_offset": end if end < total else None}


class Throttle:
    """Calls ``send`` at most every ``every`` seconds, and always for the last report."""

    def __init__(self, send: Callable[[float, float | None, str], None], every: float = 0.25) -> None:
        self.send, self.every, self.last = send, every, 0.0

    def __call__(self, done: int, total: int | None, label: str = "") -> None:
        now = time.monotonic()
        if now - self.last >= self.every or (total is not None and done >= total):
            self.last = now
            self.send(float(done), None if total is None else float(total), label)
