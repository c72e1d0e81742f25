"""What the LangGraph SQLite and Postgres readers share.

- uuid6 helpers: checkpoint ids are time-ordered uuid6 strings; their
  timestamp is the checkpoint's creation time (no blob decoding needed);
- checkpoint rows -> ``CheckpointRecord`` (one at a time) or straight to an
  Arrow table in ``CHECKPOINT_SCHEMA`` (column-wise, for big listings);
- writes rows -> ``EventRecord`` (errors, interrupts, resumes, scheduled).

DeltaChannel values rebuilt from writes: :mod:`lastgood.readers.langgraph.delta`.
"""

from __future__ import annotations

from lastgood.checks import Check
import functools
import io
import json
import random
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

from lastgood.errors import DecodeError
from lastgood.readers import base as readers_base
from lastgood.readers.base import (
    Status,
    CheckpointRecord,
    EventRecord,
    Finding,
    PendingWrite,
)
from lastgood.readers.common.columns import (  # the Arrow builders every format shares
    constant_strings,
    int64_array,
    string_array,
    utf8_view,
)
from lastgood.readers.common.lazy import installed, lazy_module
from lastgood.readers.langgraph.serde import (
    KNOWN_CIPHERS,
    KNOWN_TYPES,
    decode_typed,
    is_known_type,
)

try:  # orjson is optional; the standard library is the fallback
    import orjson

    _loads: Callable[[Any], Any] = orjson.loads
except ImportError:  # pragma: no cover - depends on the environment
    _loads = json.loads

# pyarrow and numpy are imported on first use (~0.25 s): decoding one state (lastgood diff,
# show) never needs them; module-level code reads none of their attributes
pa = lazy_module("pyarrow")
pa_json = lazy_module("pyarrow.json")
np = lazy_module("numpy") if installed("numpy") else None  # numpy comes with pandas

ERROR, INTERRUPT, RESUME, SCHEDULED = "__error__", "__interrupt__", "__resume__", "__scheduled__"
IDX_KINDS = {-1: "error", -2: "scheduled", -3: "interrupt", -4: "resume"}
CHANNEL_KINDS = {ERROR: "error", INTERRUPT: "interrupt", RESUME: "resume", SCHEDULED: "scheduled"}
MESSAGE_LIMIT = 2000
_UUID_EPOCH_100NS = 0x01B21DD213814000
_UTC_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_HEX_POSITIONS = [0, 1, 2, 3, 4, 5, 6, 7, 9, 10, 11, 12, 15, 16, 17]


@functools.cache
def _metadata_fields() -> Any:
    return pa.schema([("source", pa.string()), ("step", pa.int64()), ("graph_id", pa.string())])


_last_v6_timestamp: int | None = None
# every codec ``is_known_type`` accepts, as a SQL list (set-based codec checks)
KNOWN_CODECS_SQL = ", ".join(
    f"'{t}'" for t in sorted({*KNOWN_TYPES, *(f"{t}+{c}" for t in KNOWN_TYPES for c in KNOWN_CIPHERS)}))


# --- uuid6 ---------------------------------------------------------------------


def uuid6_timestamp(checkpoint_id: str) -> int | None:
    """The uuid6 timestamp (100 ns since 1582-10-15), or None for other ids."""
    if len(checkpoint_id) != 36 or checkpoint_id[14] != "6":
        return None
    try:
        return int(checkpoint_id[0:8] + checkpoint_id[9:13] + checkpoint_id[15:18], 16)
    except ValueError:
        return None


def uuid6_datetime(checkpoint_id: str) -> datetime | None:
    """When a uuid6 checkpoint id was made, tz-aware UTC (None for other ids)."""
    ticks = uuid6_timestamp(checkpoint_id)
    if ticks is None:
        return None
    return _UTC_EPOCH + timedelta(microseconds=(ticks - _UUID_EPOCH_100NS) // 10)


def new_uuid6(clock_seq: int | None = None, node: int | None = None) -> str:
    """A new uuid6 checkpoint id, laid out exactly as LangGraph's ``uuid6()``.

    LangGraph passes the step as ``clock_seq`` so that ids made in the same
    100 ns sort by step; ids made in one process are strictly increasing.
    """
    global _last_v6_timestamp
    timestamp = time.time_ns() // 100 + _UUID_EPOCH_100NS
    if _last_v6_timestamp is not None and timestamp <= _last_v6_timestamp:
        timestamp = _last_v6_timestamp + 1
    _last_v6_timestamp = timestamp
    seq = random.getrandbits(14) if clock_seq is None else clock_seq
    node = random.getrandbits(48) if node is None else node
    value = ((timestamp >> 12) & 0xFFFFFFFFFFFF) << 80
    value |= (0x6000 | (timestamp & 0x0FFF)) << 64
    value |= (0x8000 | (seq & 0x3FFF)) << 48
    value |= node & 0xFFFFFFFFFFFF
    text = f"{value:032x}"
    return f"{text[:8]}-{text[8:12]}-{text[12:16]}-{text[16:20]}-{text[20:]}"


def uuid6_timestamps(checkpoint_ids: pa.Array) -> pa.Array:
    """``created_at`` for a column of checkpoint ids (vectorised when all are uuid6)."""
    ids = checkpoint_ids.cast(pa.string()) if checkpoint_ids.type != pa.string() else checkpoint_ids
    micros = _uuid6_micros_numpy(ids) if np is not None else None
    if micros is None:
        micros = int64_array([_micros(cid) for cid in ids.to_pylist()])
    return micros.view(pa.timestamp("us", tz="UTC"))  # same int64 buffers; no pyarrow.compute import


def _micros(checkpoint_id: str | None) -> int | None:
    ticks = uuid6_timestamp(checkpoint_id) if checkpoint_id else None
    return None if ticks is None else (ticks - _UUID_EPOCH_100NS) // 10


def _uuid6_micros_numpy(ids: pa.Array) -> pa.Array | None:
    if len(ids) == 0 or ids.null_count:
        return None
    offsets = np.frombuffer(ids.buffers()[1], dtype=np.int32)[ids.offset : ids.offset + len(ids) + 1]
    if not (np.diff(offsets) == 36).all():
        return None
    chars = np.frombuffer(ids.buffers()[2], dtype=np.uint8)[offsets[0] : offsets[-1]].reshape(-1, 36)
    if not (chars[:, 14] == ord("6")).all():
        return None
    hex_lut, powers_16 = _uuid_tables()
    values = hex_lut[chars[:, _HEX_POSITIONS]]
    if (values == 255).any():
        return None
    micros = (values.astype(np.int64) @ powers_16 - _UUID_EPOCH_100NS) // 10
    return pa.Array.from_buffers(pa.int64(), len(ids), [None, pa.py_buffer(np.ascontiguousarray(micros))])


def _hex_lut() -> Any:
    lut = np.full(256, 255, dtype=np.uint8)
    for i, ch in enumerate("0123456789abcdef"):
        lut[ord(ch)] = lut[ord(ch.upper())] = i
    return lut


@functools.cache
def _uuid_tables() -> tuple[Any, Any]:
    """The hex digit lookup table and the powers of 16 of a uuid6 timestamp's 15 digits."""
    return _hex_lut(), 16 ** np.arange(14, -1, -1, dtype=np.int64)


# --- checkpoint rows -------------------------------------------------------------


def metadata_fields(metadata: Mapping[str, Any]) -> tuple[int | None, str | None, str | None]:
    """``(step, trigger, agent)`` from LangGraph checkpoint metadata."""
    step = metadata.get("step")
    source = metadata.get("source")
    agent = metadata.get("graph_id")
    return (
        step if isinstance(step, int) and not isinstance(step, bool) else None,
        source if isinstance(source, str) else None,
        agent if isinstance(agent, str) else None,
    )


def parse_metadata(raw: Any) -> tuple[dict[str, Any], str | None]:
    """Metadata (JSON text, bytes or an already-decoded dict) and the problem, if any."""
    if raw is None:
        return {}, None
    if isinstance(raw, Mapping):
        return dict(raw), None
    data = bytes(raw) if isinstance(raw, memoryview) else raw
    try:
        value = _loads(data)
    except (ValueError, TypeError):
        try:  # the standard library also reads NaN/Infinity, which json.dumps writes
            value = json.loads(data)
        except (ValueError, TypeError) as exc:
            text = data.decode("utf-8", "replace") if isinstance(data, bytes) else str(data)
            return {"$raw": text[:4096]}, f"metadata is not valid JSON: {exc}"
    if not isinstance(value, dict):
        return {"$raw": value}, f"metadata is not a JSON object but {type(value).__name__}"
    return value, None


def checkpoint_record(
    thread_id: str,
    checkpoint_ns: str,
    checkpoint_id: str,
    parent_checkpoint_id: str | None,
    metadata: Any,
    size: int | None = None,
    *,
    codec: str | None = None,
    status: str = Status.OK,
    status_reason: str | None = None,
) -> CheckpointRecord:
    """One checkpoints row as a CheckpointRecord (no blob decoding)."""
    meta, problem = parse_metadata(metadata)
    step, trigger, agent = metadata_fields(meta)
    if problem:
        status, status_reason = Status.CORRUPT, problem
    elif codec is not None and not is_known_type(codec):
        status, status_reason = Status.CORRUPT, f"unknown serialization type {codec!r}"
    return CheckpointRecord(
        run_id=thread_id, checkpoint_id=checkpoint_id, namespace=checkpoint_ns or "",
        parent_id=parent_checkpoint_id or None, step=step,
        created_at=uuid6_datetime(checkpoint_id), trigger=trigger, kind="full", status=status,
        status_reason=status_reason, size_bytes=size, agent=agent, codec=codec, metadata=meta,
    )


@dataclass
class CheckpointColumns:
    """One batch of checkpoints rows, column-wise (what ``zip(*rows)`` gives).

    ``metadata`` items may be JSON bytes/text or dicts; ``parent_ok`` (1/0 per
    row, optional) says whether the parent row exists.
    """

    thread_ids: Sequence[str]
    namespaces: Sequence[str]
    checkpoint_ids: Sequence[str]
    parent_ids: Sequence[str | None]
    metadata: Sequence[Any]
    codecs: Sequence[str | None] | None = None
    sizes: Sequence[int | None] | None = None
    parent_ok: Sequence[int | None] | None = None
    arrays: Mapping[str, pa.Array] | None = None  # key columns already built (langgraph_rows.key_arrays)
    parsed_metadata: tuple[pa.Array, pa.Table] | None = None  # metadata_joined's result, when taken


MetadataColumns = "tuple[pa.Array, pa.Table, dict[int, str]]"  # text: pyarrow is imported on first use


def checkpoints_batch(cols: CheckpointColumns) -> tuple[pa.Table, list[Finding]]:
    """A ``CHECKPOINT_SCHEMA`` table and its findings, built column-wise."""
    n = len(cols.checkpoint_ids)
    built = cols.arrays or {}
    ids = _built(built, "checkpoint_id", lambda: string_array(cols.checkpoint_ids))
    text, fields, problems = ((*cols.parsed_metadata, {}) if cols.parsed_metadata is not None
                              else metadata_columns(cols.metadata))
    codecs = _built(built, "codec", lambda: string_array(cols.codecs) if cols.codecs is not None
                    else pa.nulls(n, pa.string()))
    codec_problems = _codec_problems(cols.codecs)
    findings = _row_findings(cols, problems, Check.METADATA_INVALID)
    findings += _row_findings(cols, codec_problems, Check.UNKNOWN_CODEC)
    for i, reason in codec_problems.items():
        problems[i] = f"{problems[i]}; {reason}" if i in problems else reason
    findings.extend(_parent_findings(cols, problems))
    status, reason = _status_columns(n, problems)
    columns = {
        "run_id": _built(built, "run_id", lambda: string_array(cols.thread_ids)),
        "namespace": _built(built, "namespace", lambda: string_array(_none_as(cols.namespaces, ""))),
        "checkpoint_id": ids,
        "parent_id": _built(built, "parent_id", lambda: string_array(_none_as(cols.parent_ids, None, ""))),
        "step": fields.column("step"),
        "created_at": uuid6_timestamps(ids),
        "trigger": fields.column("source"),
        "kind": constant_strings("full", n),
        "status": status,
        "status_reason": reason,
        "size_bytes": _built(built, "size_bytes", lambda: int64_array(cols.sizes) if cols.sizes is not None
                             else pa.nulls(n, pa.int64())),
        "checksum": pa.nulls(n, pa.string()),
        "agent": fields.column("graph_id"),
        "codec": codecs,
        "location": pa.nulls(n, pa.string()),
        "metadata": text,
    }
    return pa.Table.from_pydict(columns, schema=readers_base.CHECKPOINT_SCHEMA), findings


def _built(built: Mapping[str, pa.Array], name: str, make: Callable[[], pa.Array]) -> pa.Array:
    array = built.get(name)
    return array if array is not None else make()


def _none_as(values: Sequence[Any], replacement: Any, replaced: Any = None) -> Sequence[Any]:
    """``values`` with each ``replaced`` item (None, or e.g. '' for "no parent") as ``replacement``."""
    if replaced not in values:
        return values
    return [replacement if v == replaced and type(v) is type(replaced) else v for v in values]


def metadata_columns(metadata: Sequence[Any]) -> MetadataColumns:
    """Metadata as JSON text, its (source, step, graph_id) columns and per-row problems.

    Arrow's JSON reader parses the whole batch at once (releasing the GIL);
    anything it cannot take (text, NULLs, bad JSON…) goes row by row.
    """
    fast = _metadata_fast(metadata)
    if fast is not None:
        return fast[0], fast[1], {}
    return _metadata_slow(metadata)


def _metadata_fast(metadata: Sequence[Any]) -> tuple[pa.Array, pa.Table] | None:
    """Parse all metadata at once with Arrow's JSON reader (None: use the slow path)."""
    n = len(metadata)
    try:
        joined = b"\n".join(metadata)
    except TypeError:  # text, dicts or NULLs: the slow path handles them
        return None
    if n == 0 or joined.count(b"\n") != n - 1:
        return None
    try:
        return metadata_joined(joined, string_array(metadata, binary=True))
    except (TypeError, OverflowError):
        return None


def metadata_joined(joined: bytes, binary: pa.Array) -> tuple[pa.Array, pa.Table] | None:
    """``metadata_columns``' fast path for metadata already joined by newlines (one value
    per line, ``binary`` the same values as an array): None when Arrow cannot take them."""
    try:
        text = utf8_view(binary)
        options = pa_json.ParseOptions(explicit_schema=_metadata_fields(), unexpected_field_behavior="ignore")
        # on the calling thread: a listing's batches are small and the other core is busy
        # (fetching the next ranges); handing each to Arrow's pool cost 2-3x the parse in waits
        fields = pa_json.read_json(io.BytesIO(joined), read_options=pa_json.ReadOptions(use_threads=False),
                                   parse_options=options)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
        return None
    if fields.num_rows != len(binary):
        return None
    return text, fields.combine_chunks()


def _metadata_slow(metadata: Sequence[Any]) -> tuple[pa.Array, pa.Table, dict[int, str]]:
    texts: list[str] = []
    steps: list[int | None] = []
    sources: list[str | None] = []
    agents: list[str | None] = []
    problems: dict[int, str] = {}
    for i, raw in enumerate(metadata):
        meta, problem = parse_metadata(raw)
        if problem:
            problems[i] = problem
        step, source, agent = metadata_fields(meta)
        steps.append(step if step is None or -(2**63) <= step < 2**63 else None)
        sources.append(source)
        agents.append(agent)
        texts.append(_metadata_text(raw, meta, problem))
    fields = pa.table({"source": string_array(sources), "step": int64_array(steps),
                       "graph_id": string_array(agents)})
    return string_array(texts), fields, problems


def _metadata_text(raw: Any, meta: dict[str, Any], problem: str | None) -> str:
    if not problem and isinstance(raw, (bytes, str)):
        text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
        if "\x00" not in text:
            return text
    return json.dumps(meta, default=str, sort_keys=True)


def _codec_problems(codecs: Sequence[str | None] | None) -> dict[int, str]:
    if codecs is None or all(is_known_type(c) for c in set(codecs)):
        return {}
    return {i: f"unknown serialization type {c!r}" for i, c in enumerate(codecs) if not is_known_type(c)}


def _row_findings(cols: CheckpointColumns, problems: Mapping[int, str], check: Check) -> list[Finding]:
    return [Finding(check, "error", reason, cols.thread_ids[i], cols.namespaces[i] or "", cols.checkpoint_ids[i])
            for i, reason in problems.items()]


def _parent_findings(cols: CheckpointColumns, problems: dict[int, str]) -> list[Finding]:
    if cols.parent_ok is None or all(cols.parent_ok):
        return []
    findings = []
    for i, ok in enumerate(cols.parent_ok):
        if ok:
            continue
        reason = f"parent checkpoint {cols.parent_ids[i]} is missing"
        problems[i] = f"{problems[i]}; {reason}" if i in problems else reason
        findings.append(Finding(Check.PARENT_MISSING, "error", reason, cols.thread_ids[i],
                                cols.namespaces[i] or "", cols.checkpoint_ids[i]))
    return findings


def _status_columns(n: int, problems: Mapping[int, str]) -> tuple[pa.Array, pa.Array]:
    if not problems:
        return constant_strings(Status.OK.value, n), pa.nulls(n, pa.string())
    status = [Status.CORRUPT.value if i in problems else Status.OK.value for i in range(n)]
    reason = [problems.get(i) for i in range(n)]
    return string_array(status), string_array(reason)


# --- writes -> events ---------------------------------------------------------------


def event_kind(channel: str, idx: int | None) -> str | None:
    """``error``/``interrupt``/``resume``/``scheduled`` for a special write, else None."""
    return CHANNEL_KINDS.get(channel) or (IDX_KINDS.get(idx) if idx is not None else None)


def event_record(
    thread_id: str, checkpoint_ns: str, checkpoint_id: str, task_id: str, idx: int | None,
    channel: str, type_: str | None, value: bytes | None, *, aes_key: bytes | None = None,
) -> EventRecord | None:
    """One writes row as an EventRecord (None for ordinary channel writes)."""
    kind = event_kind(channel, idx)
    if kind is None:
        return None
    try:
        message = event_message(kind, decode_typed(type_, value, aes_key=aes_key))
    except DecodeError as exc:
        message = f"(undecodable {channel} write: {exc})"
    return EventRecord(
        run_id=thread_id, kind=kind, namespace=checkpoint_ns or "", checkpoint_id=checkpoint_id,
        created_at=uuid6_datetime(checkpoint_id), channel=channel, task_id=task_id, message=message,
    )


def event_message(kind: str, value: Any) -> str | None:
    """Readable text for an event's decoded value (interrupt values, error text…)."""
    if kind == "interrupt" and isinstance(value, list):
        value = [v.get("value") if isinstance(v, dict) and "$type" in v else v for v in value]
        value = value[0] if len(value) == 1 else value
    if value is None:
        return None
    text = value if isinstance(value, str) else json.dumps(value, default=str, ensure_ascii=False)
    return text if len(text) <= MESSAGE_LIMIT else text[:MESSAGE_LIMIT] + "…"


def events_table(events: Sequence[EventRecord]) -> pa.Table:
    """``EVENT_SCHEMA`` rows built column-wise from buffers (``base.events_table`` goes
    through ``pa.array``, which imports pandas on first use)."""
    ids = string_array([e.checkpoint_id for e in events])
    columns = {name: string_array([getattr(e, name) for e in events])
               for name in readers_base.EVENT_SCHEMA.names if name not in ("checkpoint_id", "created_at")}
    columns["checkpoint_id"] = ids
    columns["created_at"] = uuid6_timestamps(ids)
    schema = readers_base.EVENT_SCHEMA
    return pa.Table.from_pydict({name: columns[name] for name in schema.names}, schema=schema)


def sort_writes(writes: Iterable[PendingWrite]) -> list[PendingWrite]:
    """LangGraph's ``writes_sort_key`` order: (task_path, task_id, idx)."""
    return sorted(writes, key=lambda w: (w.task_path, w.task_id, w.idx))
