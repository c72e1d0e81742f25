"""What the readers of agent session stores (Google ADK's ``DatabaseSessionService``, Agno's
``SqliteDb``/``PostgresDb``) share: one SQL listing of rows turned into a checkpoint table, events,
findings and heads (:class:`Listing`); the scan and its structure shortcut, the presence check of
listed items, the recovery capability (:class:`SessionStoreReader`); the listing's JSON helpers.

A format subclasses :class:`SessionStoreReader` with its dialect-neutral model (``_list_rows``,
``_events_table``, ``_data_findings``) and each dialect (SQLite, PostgreSQL) keeps only its connection
and its SQL (``_listing``, ``_existing``); a PostgreSQL dialect mixes in :class:`PostgresDialect` (the
shared read-only connection, the store checked when the reader is made).
"""

from __future__ import annotations

import json
import re
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from lastgood.checks import Check
from lastgood.readers.base import CheckpointRecord, EventRecord, Finding, HeadRecord, Reader, Scan, backend_named
from lastgood.readers.common.gc_pause import gc_paused
from lastgood.readers.common.lazy import lazy_module, require_psycopg
from lastgood.readers.common.urls import is_postgres_url
from lastgood.redact import REDACTION_ANCHORS, might_need_redaction, redact, redact_text

if TYPE_CHECKING:
    from lastgood.readers.journal import RecoveryBackend

try:
    import orjson

    loads: Any = orjson.loads

    def dumps(value: Any) -> str:
        """Compact JSON with sorted keys (anything else as its ``str``)."""
        return orjson.dumps(value, option=orjson.OPT_SORT_KEYS, default=str).decode()
except ImportError:  # pragma: no cover - orjson is a dependency
    loads = json.loads

    def dumps(value: Any) -> str:
        """Compact JSON with sorted keys (anything else as its ``str``)."""
        return json.dumps(value, sort_keys=True, default=str)

# the shared Postgres helpers (which import psycopg) on first use: sniffing a SQLite file asks the
# Postgres dialects too, and must not pay psycopg's import (~0.3 s)
pgc = lazy_module("lastgood.readers.common.postgres")

_ANCHORS = re.compile("|".join(map(re.escape, REDACTION_ANCHORS)), re.IGNORECASE)


def args_text(value: Any) -> str:
    """A tool call's arguments as compact JSON, secrets masked (``redact`` only when the text has one
    of ``lastgood.redact``'s anchors: most arguments do not)."""
    shown = dumps(value)
    if not (might_need_redaction(shown) if shown.isascii() else _ANCHORS.search(shown)):
        return shown  # ASCII text: a C substring test per anchor finds what the regex would
    return dumps(redact(value)) if isinstance(value, (Mapping, list)) else redact_text(shown)


@dataclass
class Listing:
    """What a batch of listed rows lists."""

    checkpoints: Any  # a pyarrow Table in CHECKPOINT_SCHEMA
    events: list[EventRecord] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    heads: list[HeadRecord] = field(default_factory=list)


class RawListing(Protocol):
    """What a dialect's listing query returned (each format's dataclass has these fields)."""

    token: str
    full: bool
    rows: list[Any] | None  # None: nothing changed since the token


class SessionStoreReader(Reader):
    """The base of session-store readers (see the module docstring)."""

    recovery_class: ClassVar[str]
    cumulative_states = True  # a state is the conversation up to its item
    missing_message: ClassVar[str] = "the item is no longer stored"  # a listed item gone from the store

    def __init__(self, url: str, storage_options: Mapping[str, Any] | None = None) -> None:
        super().__init__(url, storage_options)
        self._listed: tuple[str, int] | None = None

    # ---- what a format provides ----------------------------------------------------------------

    @abstractmethod
    def _listing(self, since: str | None) -> RawListing:
        """The dialect's rows to list (a :class:`RawListing`): every item (full), those of the
        sessions changed since the token (incremental), or none when the token is unchanged."""

    @abstractmethod
    def _list_rows(self, raw: Any) -> Listing:  # raw: the format's RawListing
        """The format's model of the listed rows."""

    @abstractmethod
    def _events_table(self, events: Sequence[EventRecord]) -> Any:
        """EVENT_SCHEMA table of ``events``."""

    @abstractmethod
    def _existing(self, ids: Sequence[str]) -> set[str]:
        """Which of these checkpoint ids are still stored."""

    @abstractmethod
    def _data_findings(self, record: CheckpointRecord, batch: dict[Any, Any]) -> Iterator[Finding]:
        """What reading one stored item's state finds. ``batch`` is shared by the items of one
        :meth:`check_checkpoints` call: a session read for one of them serves the others (read once
        per batch, not once per item: on PostgreSQL even asking whether it changed is a query)."""

    # ---- listing -------------------------------------------------------------------------------

    def scan(self, since: str | None = None) -> Scan:
        """Every item from SQL alone (full), or the sessions that changed since ``since``."""
        raw = self._listing(since)
        if raw.rows is None:
            return Scan(token=raw.token, full=False, checkpoints=iter(()), heads=None)
        with gc_paused():  # many small objects, no cycles: collections would only rescan them
            listing = self._list_rows(raw)
        table = listing.checkpoints
        self._listed = (raw.token, table.num_rows) if raw.full else None
        events = [self._events_table(listing.events)] if listing.events else []
        return Scan(token=raw.token, full=raw.full, checkpoints=iter([table] if table.num_rows else []),
                    events=iter(events), findings=listing.findings, heads=listing.heads)

    def listed_structure(self, token: str | None) -> tuple[int, list[Finding]] | None:
        """The listing already made every structure finding: when ``token`` is the last full scan's,
        the structure check of what it listed has nothing to add."""
        listed = self._listed
        return (listed[1], []) if listed is not None and token == listed[0] else None

    def listed_catalog_structure(self, token: str | None) -> tuple[int, list[Finding]] | None:
        return self.listed_structure(token)

    # ---- integrity -----------------------------------------------------------------------------

    def check_checkpoints(self, records: Iterable[CheckpointRecord], read_data: bool = False) -> Iterator[Finding]:
        """Structure: the items are still stored. Data: each one's state loads."""
        records = list(records)
        present = self._existing([r.checkpoint_id for r in records])
        batch: dict[Any, Any] = {}
        for record in records:
            if record.checkpoint_id not in present:
                yield Finding(Check.MISSING, "error", self.missing_message, record.run_id,
                              record.namespace, record.checkpoint_id)
            elif read_data:
                yield from self._data_findings(record, batch)

    # ---- capabilities --------------------------------------------------------------------------

    def recovery(self) -> RecoveryBackend:
        return backend_named(self.recovery_class, self)


class PostgresDialect(ABC):
    """The PostgreSQL dialect of a session store, mixed in before the format's reader base: one
    read-only connection its reads share (``_read``), the store checked when the reader is made
    (the connection closed again when that fails)."""

    name: ClassVar[str]
    url: str

    def __init__(self, url: str, storage_options: Mapping[str, Any] | None = None) -> None:
        require_psycopg(f"The {self.name} reader")
        super().__init__(url, storage_options)  # type: ignore[call-arg]
        self._pg = pgc.ReadConnection(url)
        try:
            self._check_store()
        except BaseException:
            self.close()
            raise

    @classmethod
    def sniff(cls, url: str, storage_options: Mapping[str, Any] | None = None) -> bool:
        if not is_postgres_url(url):
            return False
        require_psycopg(f"The {cls.name} reader")
        return cls._sniff_database(url)

    @classmethod
    @abstractmethod
    def _sniff_database(cls, url: str) -> bool:
        """The database at ``url`` holds this format's tables."""

    @abstractmethod
    def _check_store(self) -> None:
        """Raise a one-line ReaderError when the database is not a store this reader reads."""

    def close(self) -> None:
        self._pg.close()
