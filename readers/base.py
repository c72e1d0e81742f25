"""The Reader interface every store format implements, and its records.

A reader turns one store URL into:
- a *scan*: batches of checkpoint rows (metadata only, never state blobs),
  plus event rows and store-level findings, resumable from a token so a
  refresh reads only what changed;
- on demand, one checkpoint's decoded state, raw bytes and pending writes.

Optional capabilities are detected with ``getattr``:

    check_checkpoints(records: Iterable[CheckpointRecord], read_data: bool) -> Iterator[Finding]
        format-specific integrity checks; never raises for damaged data.

Readers never modify a store.
"""

from __future__ import annotations

import functools
import json
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from lastgood.checks import Check

if TYPE_CHECKING:
    import pyarrow as pa

Status = Literal["ok", "corrupt", "incomplete", "quarantined", "superseded"]
Severity = Literal["error", "warning", "info"]
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
STATUSES: tuple[str, ...] = ("ok", "corrupt", "incomplete", "quarantined", "superseded")
TRIGGERS: tuple[str, ...] = ("periodic", "event", "manual", "final", "restore")


@dataclass(frozen=True, slots=True)
class CheckpointRecord:
    """One checkpoint's metadata, as listed (no state)."""

    run_id: str
    checkpoint_id: str
    namespace: str = ""
    parent_id: str | None = None
    step: int | None = None
    created_at: datetime | None = None
    trigger: str | None = None
    kind: str = "full"
    status: str = "ok"
    status_reason: str | None = None
    size_bytes: int | None = None
    checksum: str | None = None
    agent: str | None = None
    codec: str | None = None
    location: str | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class EventRecord:
    """Something that happened on a run: an error, an interrupt, a restart."""

    run_id: str
    kind: str
    namespace: str = ""
    checkpoint_id: str | None = None
    created_at: datetime | None = None
    channel: str | None = None
    task_id: str | None = None
    message: str | None = None


@dataclass(frozen=True, slots=True)
class Finding:
    """One integrity problem. ``checkpoint_id`` is None for store-level findings."""

    check: Check
    severity: Severity
    message: str
    run_id: str | None = None
    namespace: str = ""
    checkpoint_id: str | None = None

    def to_dict(self) -> dict[str, Any]:
        row = asdict(self)
        row["check"] = str(self.check)
        return row


@dataclass(frozen=True, slots=True)
class HeadRecord:
    """The checkpoint a run resumes from."""

    run_id: str
    checkpoint_id: str
    namespace: str = ""


@dataclass(frozen=True, slots=True)
class PendingWrite:
    """A write recorded against a checkpoint but not yet applied (LangGraph ``writes``)."""

    task_id: str
    channel: str
    value: Any
    idx: int = 0
    task_path: str = ""


# column names and Arrow types of a listing's tables; the pyarrow schemas themselves
# (CHECKPOINT_SCHEMA, EVENT_SCHEMA) are built on first use (module ``__getattr__``), so a
# command that lists nothing new (a reopen) never imports pyarrow
TIMESTAMP = "timestamp"
CHECKPOINT_FIELDS = (
    ("run_id", "string"), ("namespace", "string"), ("checkpoint_id", "string"), ("parent_id", "string"),
    ("step", "int64"), ("created_at", TIMESTAMP), ("trigger", "string"), ("kind", "string"),
    ("status", "string"), ("status_reason", "string"), ("size_bytes", "int64"), ("checksum", "string"),
    ("agent", "string"), ("codec", "string"), ("location", "string"), ("metadata", "string"),
)
EVENT_FIELDS = (
    ("run_id", "string"), ("namespace", "string"), ("checkpoint_id", "string"), ("created_at", TIMESTAMP),
    ("kind", "string"), ("channel", "string"), ("task_id", "string"), ("message", "string"),
)
CHECKPOINT_NAMES = tuple(name for name, _ in CHECKPOINT_FIELDS)
EVENT_NAMES = tuple(name for name, _ in EVENT_FIELDS)
_LAZY_SCHEMAS = {"CHECKPOINT_SCHEMA": CHECKPOINT_FIELDS, "EVENT_SCHEMA": EVENT_FIELDS}


def arrow_schema(fields: Iterable[tuple[str, str]]) -> pa.Schema:
    """A pyarrow schema from (name, type) pairs of this module's field lists."""
    import pyarrow as pa

    types = {"string": pa.string(), "int64": pa.int64(), TIMESTAMP: pa.timestamp("us", tz="UTC")}
    return pa.schema([(name, types[kind]) for name, kind in fields])


@functools.cache
def lazy_schema(name: str) -> pa.Schema:
    """CHECKPOINT_SCHEMA or EVENT_SCHEMA, built on first use and kept."""
    return arrow_schema(_LAZY_SCHEMAS[name])


def __getattr__(name: str) -> Any:
    if name in _LAZY_SCHEMAS:
        return lazy_schema(name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def rows_table(rows: list[Mapping[str, Any]], schema: pa.Schema) -> pa.Table:
    """An Arrow table from dict rows, column by column.

    Timestamps are passed to Arrow as epoch microseconds: converting Python
    datetimes directly makes pyarrow import pandas, a second of start-up.
    """
    import pyarrow as pa

    if not rows:
        return pa.Table.from_batches([], schema=schema)  # empty_table() imports pandas (~0.5 s)
    columns = []
    for f in schema:
        values = [row.get(f.name) for row in rows]
        if pa.types.is_timestamp(f.type):
            values = [_micros(v) for v in values]
        columns.append(pa.array(values, f.type))
    return pa.Table.from_arrays(columns, schema=schema)


def _micros(value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=UTC)
        delta = value - EPOCH
        return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
    return int(value)


def checkpoints_table(records: Iterable[CheckpointRecord]) -> pa.Table:
    """Rows in CHECKPOINT_SCHEMA from records (metadata serialised as JSON)."""
    return rows_table([_checkpoint_row(r) for r in records], lazy_schema("CHECKPOINT_SCHEMA"))


def _checkpoint_row(r: CheckpointRecord) -> dict[str, Any]:
    row = {name: getattr(r, name) for name in CHECKPOINT_NAMES}
    row["metadata"] = json.dumps(dict(r.metadata), default=str, sort_keys=True)
    return row


def events_table(events: Iterable[EventRecord]) -> pa.Table:
    rows = [{name: getattr(e, name) for name in EVENT_NAMES} for e in events]
    return rows_table(rows, lazy_schema("EVENT_SCHEMA"))


def record_from_row(row: Mapping[str, Any]) -> CheckpointRecord:
    """Inverse of the table form: a CheckpointRecord from an index row.

    Field by field (no intermediate dict): verification builds a million of these."""
    get = row.get
    meta = get("metadata")
    return CheckpointRecord(
        run_id=get("run_id"), checkpoint_id=get("checkpoint_id"), namespace=get("namespace") or "",
        parent_id=get("parent_id"), step=get("step"), created_at=get("created_at"),
        trigger=get("trigger"), kind=get("kind") or "full", status=get("status") or "ok",
        status_reason=get("status_reason"), size_bytes=get("size_bytes"), checksum=get("checksum"),
        agent=get("agent"), codec=get("codec"), location=get("location"),
        metadata=json.loads(meta) if isinstance(meta, str) and meta else (meta or {}))


@dataclass(frozen=True, slots=True)
class ParquetSource:
    """Local Parquet files holding checkpoint rows in CHECKPOINT_SCHEMA's columns
    minus ``status``/``status_reason`` (all listed as ok). The index reads them
    with DuckDB directly, which is much faster than through Python."""

    paths: tuple[str, ...]
    num_rows: int
    # a copy the reader took for the index (Reader.snapshot_dir), validated after it was
    # taken: the index may keep it and read it in place (lastgood.index.attached)
    private: bool = False
    profile: Any = None  # what one pass over the part found (readers.native_profile.PartProfile)

    def to_table(self) -> pa.Table:
        import pyarrow as pa
        import pyarrow.parquet as pq

        tables = [pq.ParquetFile(p).read() for p in self.paths]
        table = pa.concat_tables(tables) if tables else pa.table({})
        n = table.num_rows
        table = table.append_column("status", pa.array(["ok"] * n, pa.string()))
        table = table.append_column("status_reason", pa.nulls(n, pa.string()))
        wanted = lazy_schema("CHECKPOINT_SCHEMA")
        return table.select(wanted.names).cast(wanted)


def as_table(batch: pa.Table | ParquetSource) -> pa.Table:
    """A scan batch as an Arrow table in CHECKPOINT_SCHEMA."""
    return batch.to_table() if isinstance(batch, ParquetSource) else batch


@dataclass
class Scan:
    """The result of ``Reader.scan``.

    ``full`` means the batches describe the whole store (the index replaces
    what it had); otherwise they are additions and updates since the token
    passed in (rows with an existing checkpoint id replace the old row; events
    of a checkpoint in the batch replace its earlier events).
    ``token`` is opaque text to hand back on the next refresh; when it equals
    the previous token nothing changed and ``checkpoints`` is empty.
    ``findings`` are complete once the batches have been consumed. ``heads``
    lists heads to set; ``None`` or empty means unchanged.
    """

    token: str
    full: bool
    checkpoints: Iterator[pa.Table | ParquetSource]
    events: Iterator[pa.Table] = field(default_factory=lambda: iter(()))
    findings: list[Finding] = field(default_factory=list)
    heads: list[HeadRecord] | None = None


class Reader(ABC):
    """One store format. Subclasses set ``name`` and implement the methods."""

    name: ClassVar[str]
    description: ClassVar[str] = ""
    # where the index takes private copies of big compacted parts it reads in place
    # (lastgood.index.attached), and from what size; None: the reader takes no copies
    snapshot_dir: str | None = None
    snapshot_min_bytes: int = 0

    def __init__(self, url: str, storage_options: Mapping[str, Any] | None = None) -> None:
        self.url = url
        self.storage_options = dict(storage_options or {})

    @classmethod
    def sniff(cls, url: str, storage_options: Mapping[str, Any] | None = None) -> bool:
        """True when this reader recognises the store at ``url`` (cheap)."""
        return False

    @abstractmethod
    def scan(self, since: str | None = None) -> Scan:
        """List checkpoints (metadata only), resuming after ``since``."""

    @abstractmethod
    def load_state(self, record: CheckpointRecord) -> Any:
        """The checkpoint's state as plain data. Raises DecodeError with the cause."""

    @abstractmethod
    def read_blob(self, record: CheckpointRecord) -> bytes:
        """The raw bytes stored for the checkpoint."""

    def pending_writes(self, record: CheckpointRecord) -> list[PendingWrite]:
        """Writes recorded against the checkpoint (empty when the format has none)."""
        return []

    def close(self) -> None:
        """Release connections and handles."""

    def __enter__(self) -> Reader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
