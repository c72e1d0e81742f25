"""The Reader interface every store format implements, and its records.

A reader turns one store URL into:
- a *scan*: batches of checkpoint rows (metadata only, never state blobs),
  plus event rows and store-level findings, resumable from a token so a
  refresh reads only what changed;
- on demand, one checkpoint's decoded state, raw bytes and pending writes.

Beyond that base contract, a reader may offer optional *capabilities*, each a named
protocol below (:class:`Capability`): format-specific checks, set-based structure checks,
blob files on an fsspec filesystem, write actions through a recovery backend, conversation
messages. The core asks :func:`capabilities` / :func:`capability` and never probes with
``getattr``; a format is named only in :mod:`lastgood.readers.registry`. ``docs/readers.md``
walks through writing one, and :mod:`lastgood.readers.testing` is the conformance kit every
reader passes.

Readers never modify a store (write actions go through ``recovery()``, never ``scan``).
"""

from __future__ import annotations

import functools
import json
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from contextlib import AbstractContextManager, nullcontext
from enum import StrEnum
from typing import TYPE_CHECKING, Any, ClassVar, Literal, Protocol, TypeVar, runtime_checkable

from lastgood.checks import Check

if TYPE_CHECKING:
    import pyarrow as pa

    from lastgood.readers.journal import RecoveryBackend, RetentionBackend

T = TypeVar("T")


class Status(StrEnum):
    """A checkpoint's status. SQL names them through :func:`sql_statuses`, never as literals."""

    OK = "ok"
    CORRUPT = "corrupt"
    INCOMPLETE = "incomplete"
    QUARANTINED = "quarantined"
    SUPERSEDED = "superseded"


STATUSES: tuple[str, ...] = tuple(s.value for s in Status)
DAMAGED_STATUSES = (Status.CORRUPT, Status.INCOMPLETE)  # what a check found: no readable state
MARKED_STATUSES = (Status.QUARANTINED, Status.SUPERSEDED)  # set by an action (the journal)


def sql_statuses(*statuses: Status) -> str:
    """``statuses`` as SQL: ``'ok'`` for one, ``('corrupt', 'incomplete')`` for several."""
    quoted = ", ".join(f"'{Status(s).value}'" for s in statuses)
    return quoted if len(statuses) == 1 else f"({quoted})"


def sql_status_counts(column: str = "status") -> str:
    """``count(*) FILTER (WHERE <column> = 'ok') AS ok, …`` for every status (SQL select items)."""
    return ",\n       ".join(f"count(*) FILTER (WHERE {column} = '{s.value}') AS {s.value}" for s in Status)


Severity = Literal["error", "warning", "info"]
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
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
    status: str = Status.OK
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


@dataclass(frozen=True, slots=True)
class TensorEntry:
    """One tensor of a training checkpoint, as its file's header or index describes it (no data read).

    ``dtype`` uses safetensors' names (F32, BF16, F8_E4M3…; see lastgood.readers.tensors.dtypes);
    ``file`` is relative to the store root; ``offset`` is where its little-endian bytes start in
    that file (None when they cannot be read directly, e.g. a strided view)."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    nbytes: int
    file: str
    offset: int | None = None


@dataclass(frozen=True, slots=True)
class TensorSummary:
    """What a full read found in one tensor (yielded by ``check_checkpoints`` at data depth beside
    the findings; the index keeps them in its ``tensors`` table for pages, SQL and tensor diffs).
    Statistics are over the finite values; ``sha256`` of the tensor's raw bytes when computed."""

    run_id: str
    checkpoint_id: str
    name: str
    dtype: str
    shape: tuple[int, ...]
    namespace: str = ""
    numel: int = 0
    nan: int = 0
    posinf: int = 0
    neginf: int = 0
    zeros: int = 0
    min: float | None = None
    max: float | None = None
    mean: float | None = None
    std: float | None = None
    norm: float | None = None
    sha256: str | None = None


@dataclass(frozen=True, slots=True)
class MetricPoint:
    """One value a training run logged (Trainer's ``log_history``, Lightning's logged metrics)."""

    step: int
    name: str
    value: float
    run_id: str = ""
    created_at: datetime | None = None


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
            values = [epoch_micros(v) for v in values]
        columns.append(pa.array(values, f.type))
    return pa.Table.from_arrays(columns, schema=schema)


def epoch_micros(value: Any) -> int | None:
    """Microseconds since the Unix epoch of a datetime (naive: UTC) or an int (as it is); None stays None."""
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
    # a format without write actions says why (shown on disabled buttons); None: the generic reason
    read_only_reason: ClassVar[str | None] = None
    # checkpoint ids are unique within a run only (step folders, numbered files): the same id in
    # several runs is normal and gets no warning (pages and commands name them RUN/ID)
    ids_per_run: ClassVar[bool] = False
    # each checkpoint's state is every earlier item plus its own (a session's messages, an event log):
    # a full check reads each item through the reader's own checks instead of decoding every
    # checkpoint's whole state (which grows with the square of the run's length)
    cumulative_states: ClassVar[bool] = False
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

    def decoding_together(self) -> AbstractContextManager[Any]:
        """A block in which several states of this store are decoded (a diff, a history walk):
        a reader may share what they hold in common (equal values decode to one object, which
        the diff skips). Decoded values may then be shared: callers must not mutate them."""
        return nullcontext()

    def close(self) -> None:
        """Release connections and handles."""

    def __enter__(self) -> Reader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# ---- optional capabilities -------------------------------------------------------------
# A reader offers a capability by defining its methods; the core asks ``capabilities(reader)``
# (or ``capability(reader, Protocol)``) and never probes with getattr. Each protocol below is
# the whole written contract of its capability.


class Capability(StrEnum):
    CHECKS = "checks"  # ChecksCheckpoints
    SET_STRUCTURE = "set-structure"  # ChecksStructure
    LISTED_STRUCTURE = "listed-structure"  # ListsStructure
    LISTED_CATALOG = "listed-catalog"  # ListsCatalogStructure
    BLOB_FILES = "blob-files"  # HasBlobFiles
    RECOVERY = "recovery"  # Recoverable
    MESSAGES = "messages"  # NormalizesMessages
    TENSORS = "tensors"  # HasTensors
    METRICS = "metrics"  # HasMetrics
    TASK_NODES = "task-nodes"  # NamesTaskNodes
    RETENTION = "retention"  # Prunable


@runtime_checkable
class ChecksCheckpoints(Protocol):
    """Format-specific integrity checks of listed checkpoints; ``read_data`` reads every byte.
    Never raises for damaged data: every problem is a Finding. At data depth a reader of tensors
    may also yield a :class:`TensorSummary` per tensor it read (the index keeps them)."""

    def check_checkpoints(self, records: Iterable[CheckpointRecord], read_data: bool = False
                          ) -> Iterator[Finding | TensorSummary]: ...


@runtime_checkable
class ChecksStructure(Protocol):
    """Structure checks of many checkpoints at once (a few set-based queries, not one read per
    checkpoint), from bare keys ``(run_id, namespace, checkpoint_id)``."""

    def check_structure(self, keys: Sequence[tuple[str, str, str]]) -> list[Finding]: ...


@runtime_checkable
class ListsStructure(Protocol):
    """The structure findings the reader's last full scan already computed: ``(checkpoints
    covered, findings)`` when ``token`` is that scan's token, else None."""

    def listed_structure(self, token: str | None) -> tuple[int, list[Finding]] | None: ...


@runtime_checkable
class ListsCatalogStructure(Protocol):
    """Like :class:`ListsStructure`, catalog-level checks only (no walk of the blob files)."""

    def listed_catalog_structure(self, token: str | None) -> tuple[int, list[Finding]] | None: ...


@runtime_checkable
class HasBlobFiles(Protocol):
    """Blobs are files of an fsspec filesystem: verification fetches many at once from object
    stores (``fs.cat`` of ``blob_path(record.location)``) and hands them in by swapping ``fs``."""

    fs: Any

    def blob_path(self, location: str) -> str: ...


@runtime_checkable
class Recoverable(Protocol):
    """Write actions (restore, rollback, quarantine, undo) through a
    :class:`lastgood.readers.journal.RecoveryBackend`."""

    def recovery(self) -> RecoveryBackend: ...


@runtime_checkable
class NormalizesMessages(Protocol):
    """Conversation messages in this format's shape as ``{role, content, tool_calls?, name?,
    tool_call_id?, id?}`` dicts (None: not a message): the Diff page's conversation, side
    effects of a restore."""

    def normalize_message(self, value: Any) -> dict[str, Any] | None: ...


@runtime_checkable
class HasTensors(Protocol):
    """A training checkpoint's tensors: listed from headers (cheap), read in chunks of raw bytes
    (the core hashes, decodes, computes stats and tensor diffs; lastgood.readers.tensors)."""

    def tensors(self, record: CheckpointRecord) -> list[TensorEntry]: ...

    def read_tensor(self, record: CheckpointRecord, entry: TensorEntry, chunk_bytes: int
                    ) -> Iterator[bytes | memoryview]: ...


@runtime_checkable
class HasMetrics(Protocol):
    """What a training run logged over steps (loss, learning rate, eval…), read on demand."""

    def metrics(self, run_id: str) -> list[MetricPoint]: ...


@runtime_checkable
class NamesTaskNodes(Protocol):
    """The nodes whose tasks ran from each checkpoint of these runs (LangGraph: the task paths of
    its pending writes), keyed ``(run_id, namespace, checkpoint_id)``: the nodes that produced its
    children. One set-based read of the store per call."""

    def task_nodes(self, run_ids: Sequence[str]) -> dict[tuple[str, str, str], list[str]]: ...


@runtime_checkable
class Prunable(Protocol):
    """Retention (storage breakdown, prune with archive, undo) through a
    :class:`lastgood.readers.journal.RetentionBackend`: what each table/channel costs, which
    checkpoints a kept one needs to be read, and archive-then-delete / restore, journaled."""

    def retention(self) -> RetentionBackend: ...


PROTOCOLS: dict[Capability, type] = {
    Capability.CHECKS: ChecksCheckpoints,
    Capability.SET_STRUCTURE: ChecksStructure,
    Capability.LISTED_STRUCTURE: ListsStructure,
    Capability.LISTED_CATALOG: ListsCatalogStructure,
    Capability.BLOB_FILES: HasBlobFiles,
    Capability.RECOVERY: Recoverable,
    Capability.MESSAGES: NormalizesMessages,
    Capability.TENSORS: HasTensors,
    Capability.METRICS: HasMetrics,
    Capability.TASK_NODES: NamesTaskNodes,
    Capability.RETENTION: Prunable,
}


def backend_named(target: str, reader: Reader) -> RecoveryBackend:
    """The recovery backend class ``"module:Class"`` for ``reader``'s store (imported only when an
    action is planned; a reader's ``recovery()`` usually returns this)."""
    import importlib

    module, name = target.split(":")
    return getattr(importlib.import_module(module), name)(reader.url, reader.storage_options)


def capabilities(reader: Reader | type[Reader]) -> frozenset[Capability]:
    """What ``reader`` (an instance or its class) offers beyond the base contract."""
    return frozenset(c for c, proto in PROTOCOLS.items() if _offers(reader, proto))


def capability(reader: Reader, proto: type[T]) -> T | None:
    """``reader`` as ``proto`` when it offers that capability, else None."""
    return reader if _offers(reader, proto) else None  # type: ignore[return-value]


def _offers(reader: Any, proto: type) -> bool:
    if isinstance(reader, type):
        return all(callable(getattr(reader, name, None)) or name in getattr(reader, "__annotations__", {})
                   for name in _members(proto))
    return isinstance(reader, proto)


def _members(proto: type) -> tuple[str, ...]:
    return tuple(n for n in vars(proto) if not n.startswith("_")) + tuple(
        getattr(proto, "__annotations__", {}))
