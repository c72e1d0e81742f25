"""The native Lastgood store layout, entry and payload codecs (see docs/format.md).

    <root>/lastgood-store.json            marker: {"format": "lastgood-native", "version": 1}
    <root>/blobs/<run>/<id>.<codec>     immutable payloads, written before they are listed
    <root>/catalog/tail/<name>.jsonl    commit markers: one catalog entry per line
    <root>/catalog/parts/<name>.parquet compacted catalog entries
    <root>/catalog/pending/<id>.json    a save in progress (removed once committed)
    <root>/catalog/rejected/            tail files with malformed lines, kept by compaction
    <root>/catalog/epoch.json           rewritten when entries are removed (prune, its undo)
    <root>/heads/<run>.json             per-run head pointer
    <root>/journal/                     write actions (restore, rollback, quarantine, undo)
    <root>/writes/<thread>/<id>/        pending writes of LangGraph checkpoints (the last section below)
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import threading
import time
import urllib.parse
import uuid
from datetime import UTC, datetime
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import msgpack
import orjson

from lastgood import limits
from lastgood.checks import Check
from lastgood.errors import DecodeError
from lastgood.readers.common import validate
from lastgood.readers.base import (CHECKPOINT_FIELDS, EVENT_NAMES, CheckpointRecord, Finding, Status, arrow_schema,
                                   lazy_schema, rows_table)

if TYPE_CHECKING:
    import pyarrow as pa

FORMAT_NAME = "lastgood-native"
FORMAT_VERSION = 1
MARKER = "lastgood-store.json"
BLOBS = "blobs"
TAIL = "catalog/tail"
PARTS = "catalog/parts"
PENDING = "catalog/pending"
REJECTED = "catalog/rejected"
HEADS = "heads"
JOURNAL = "journal"
CATALOG = "catalog"
CATALOG_EPOCH = "epoch.json"  # catalog/epoch.json: rewritten when entries are removed (prune, its undo)
LANGGRAPH_CODEC = "langgraph"  # written by lastgood.langgraph.LastgoodSaver (see the end of this module)
CODECS = ("json", "msgpack", LANGGRAPH_CODEC)
WRITER_CODECS = ("json", "msgpack")  # what NativeWriter encodes states with
KINDS = ("full", "incremental")
PATCH_TAG = "lastgood_patch"

# Catalog entries (tail lines and parquet parts) use these columns.
# Catalog entries (tail lines and parquet parts): the index's columns minus the statuses,
# which a reader derives (pending markers, verification) rather than stores.
ENTRY_FIELDS = tuple(f for f in CHECKPOINT_FIELDS if f[0] not in ("status", "status_reason"))
ENTRY_NAMES = tuple(name for name, _ in ENTRY_FIELDS)


@functools.cache
def entry_schema() -> pa.Schema:
    """ENTRY_SCHEMA, built on first use (no pyarrow import for a command that lists nothing new)."""
    return arrow_schema(ENTRY_FIELDS)


def __getattr__(name: str) -> Any:
    if name == "ENTRY_SCHEMA":
        return entry_schema()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def new_checkpoint_id(now_ms: int | None = None) -> str:
    """A UUIDv7 string: sorts by creation time, unique without coordination."""
    ms = int(time.time() * 1000) if now_ms is None else now_ms
    rand = int.from_bytes(os.urandom(10), "big")
    value = (ms & ((1 << 48) - 1)) << 80 | 0x7 << 76 | (rand >> 68 & 0xFFF) << 64
    value |= 0b10 << 62 | (rand & ((1 << 62) - 1))
    return str(uuid.UUID(int=value))


def quote_name(name: str) -> str:
    """A run id or checkpoint id as one safe path segment."""
    return urllib.parse.quote(name, safe="-_.") or "_"


def blob_location(run_id: str, checkpoint_id: str, codec: str) -> str:
    return f"{BLOBS}/{quote_name(run_id)}/{quote_name(checkpoint_id)}.{codec}"


def sha256_text(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def iso(ts: datetime) -> str:
    return ts.astimezone(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


def parse_time(value: Any) -> datetime | None:
    """A time from a catalog field; ValueError (validate.Invalid) when it is not one."""
    return validate.timestamp(value, "time")


# ---- payloads ---------------------------------------------------------------

def encode_payload(value: Any, codec: str) -> bytes:
    if codec == "json":
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=True).encode()
    if codec == "msgpack":
        return msgpack.packb(value, use_bin_type=True)
    raise ValueError(f"unknown codec {codec!r} (states are encoded as: {', '.join(WRITER_CODECS)})")


def decode_payload(data: bytes, codec: str) -> Any:
    """Plain data from a payload; never imports or calls anything named in it.

    Bounded: nesting deeper than limits.MAX_DEPTH or more than MAX_STATE_COST
    values is a DecodeError (TOO_DEEP / TOO_LARGE), not a RecursionError.

    Fast paths first (orjson; msgpack maps built in C), each used only when it is
    certain to give the exact path's value; anything else (an error, a bound
    exceeded, a number or key the fast path would change) takes the exact path,
    which decides, with its messages. A value the fast path proved free of
    NaN/±Inf is marked (validate.mark_finite): the content check skips its walk."""
    if codec == "json":
        value = _fast_json(data)
        return _exact_json(data) if value is _EXACT else value
    if codec == "msgpack":
        value = _fast_msgpack(data)
        return _exact_msgpack(data) if value is _EXACT else value
    if codec == LANGGRAPH_CODEC:
        return decode_langgraph(data)
    raise DecodeError(f"unknown codec {codec!r} (known: {', '.join(CODECS)})", Check.UNKNOWN_CODEC)


_EXACT = object()  # the fast path cannot answer: take the exact path
_PLAIN_KEY_TYPES = frozenset((str, int, float, bool, type(None)))


def _fast_json(data: bytes) -> Any:
    """orjson's value when it equals ``json.loads``'s, else _EXACT.

    orjson refuses what json.loads reads and it does not (NaN/Infinity tokens, lone
    surrogates, a BOM, UTF-16, numbers past a double) — so a value it returns holds no
    NaN/±Inf — but reads an integer past 64 bits as a float: any float of magnitude
    ≥ 2**63 sends the payload down the exact path. Its nesting limit (1024) is above
    ours; deeper payloads take the exact path too (for its message)."""
    try:
        value = orjson.loads(data)
    except orjson.JSONDecodeError:
        return _EXACT
    floats: list[bool] = []
    try:
        validate.check_state(value, "payload", len(data), floats=floats, cost_per_byte=1)
    except validate.Invalid:
        return _EXACT
    if floats:
        return _EXACT
    validate.mark_finite(value)
    return value


def _exact_json(data: bytes) -> Any:
    try:
        value = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DecodeError(f"json payload does not decode: {exc}") from None
    except RecursionError:
        raise DecodeError("json payload is nested too deeply", Check.TOO_DEEP) from None
    return _bounded(value, data)


def _fast_msgpack(data: bytes) -> Any:
    """The value with maps built in C (no Python hook per map) when the exact path
    would build the same: every key plain (text, number, boolean, None; a bytes,
    list or map key is changed by ``_pairs_as_dict``), within the bounds. Else _EXACT."""
    try:
        value = msgpack.unpackb(data, **_FAST_MSGPACK)
    except Exception:  # noqa: BLE001 - the exact path names the problem
        return _EXACT
    keys: set[type] = set()
    floats: list[bool] = []
    try:
        validate.check_state(value, "payload", len(data), key_types=keys, floats=floats)
    except validate.Invalid:
        return _EXACT
    if not keys <= _PLAIN_KEY_TYPES:
        return _EXACT
    if not floats:
        validate.mark_finite(value)
    return value


def _exact_msgpack(data: bytes) -> Any:
    try:
        value = msgpack.unpackb(data, **_FAST_MSGPACK, object_pairs_hook=_pairs_as_dict)
    except msgpack.StackError:
        raise DecodeError("msgpack payload is nested too deeply", Check.TOO_DEEP) from None
    except (msgpack.ExtraData, msgpack.FormatError, ValueError, TypeError) as exc:
        raise DecodeError(f"msgpack payload does not decode: {exc}") from None
    return _bounded(value, data)


def _bounded(value: Any, data: bytes) -> Any:
    try:
        validate.check_state(value, "payload", len(data))
    except validate.Invalid as exc:
        raise DecodeError(str(exc), exc.check) from None
    return value


def _pairs_as_dict(pairs: list[tuple[Any, Any]]) -> dict[Any, Any]:
    """A msgpack map; keys that cannot be dict keys (lists, maps) become their JSON text."""
    out: dict[Any, Any] = {}
    for key, value in pairs:
        if isinstance(key, (list, dict)):
            key = json.dumps(key, sort_keys=True, default=str)
        elif isinstance(key, bytes):
            key = key.decode("utf-8", "backslashreplace")
        out[key] = value
    return out


def _plain_ext(code: int, data: bytes) -> dict[str, Any]:
    return {"$ext": code, "size": len(data), "sha256": hashlib.sha256(data).hexdigest()}


_FAST_MSGPACK: dict[str, Any] = {"raw": False, "strict_map_key": False, "ext_hook": _plain_ext, "use_list": True}


def patch_envelope(parent: dict[str, Any], ops: list[dict[str, Any]]) -> dict[str, Any]:
    """The payload of an incremental checkpoint: where its base is, and the ops."""
    return {PATCH_TAG: 1, "parent": parent, "ops": ops}


def is_patch(value: Any) -> bool:
    return isinstance(value, dict) and value.get(PATCH_TAG) == 1 and "ops" in value


# ---- catalog entries ----------------------------------------------------------

def entry_line(entry: dict[str, Any]) -> bytes:
    """One catalog entry as a JSON line (times in ISO 8601 UTC)."""
    row = dict(entry)
    if isinstance(row.get("created_at"), datetime):
        row["created_at"] = iso(row["created_at"])
    if not isinstance(row.get("metadata"), str):
        row["metadata"] = json.dumps(row.get("metadata") or {}, sort_keys=True, default=str)
    return json.dumps(row, separators=(",", ":"), ensure_ascii=False).encode() + b"\n"


def parse_entry(line: bytes) -> dict[str, Any]:
    """A catalog entry from one JSON line; ValueError says what is wrong."""
    return parse_entry_checked(line)[0]


def parse_entry_checked(line: bytes) -> tuple[dict[str, Any], str | None]:
    """(entry, metadata problem or None) from one JSON line; validate.Invalid when unusable."""
    if len(line) > limits.MAX_LINE_BYTES:
        raise validate.Invalid(f"line is longer than {limits.MAX_LINE_BYTES} bytes", Check.TOO_LARGE)
    return validate.native_entry(validate.loads(line, "line"))


def entries_table(entries: list[dict[str, Any]]) -> pa.Table:
    return rows_table(entries, entry_schema())


def read_part(handle: Any, columns: tuple[str, ...] | None = None) -> pa.Table:
    """A compacted catalog part (or some of its columns), in ENTRY_SCHEMA's order."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    names = list(columns or ENTRY_NAMES)
    schema = pa.schema([entry_schema().field(n) for n in names])
    return pq.ParquetFile(handle).read(columns=names).select(names).cast(schema)


def part_rows(path: str) -> int:
    """Rows in a local Parquet part, from its footer."""
    import pyarrow.parquet as pq

    return int(pq.ParquetFile(path).metadata.num_rows)


def parse_tail_file(name: str, data: bytes, findings: list[Finding]) -> list[dict[str, Any]]:
    """Valid entries of one tail file; each invalid line is a finding naming file:line."""
    entries = []
    for lineno, line in enumerate(data.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            entry, problem = parse_entry_checked(line)
        except validate.Invalid as exc:
            findings.append(Finding(Check.CATALOG_LINE, "error",
                                    f"{name}:{lineno}: malformed catalog line: {exc}"))
            continue
        if problem:
            findings.append(Finding(Check.METADATA_INVALID, "warning", f"{name}:{lineno}: {problem}",
                                    entry["run_id"], entry["namespace"], entry["checkpoint_id"]))
        entries.append(entry)
    return entries


def entry_events(entries: pa.Table | str) -> pa.Table:
    """Events recorded in entry metadata as {"event": {"kind":…, "message":…}}.

    ``entries`` is a table or a local Parquet path; DuckDB finds the few rows that
    carry an event without turning a million metadata strings into Python, and
    builds the result (``pa.array`` would import pandas, ~0.5 s)."""
    import duckdb
    import pyarrow as pa

    event_schema = lazy_schema("EVENT_SCHEMA")
    con = duckdb.connect()
    try:
        if isinstance(entries, str):
            source = "read_parquet($path)"
            params = {"path": entries}
        else:
            con.register("entries", entries)
            source, params = "entries", {}
        rows = con.execute(f"""SELECT run_id, namespace, checkpoint_id, epoch_us(created_at), metadata
            FROM {source} WHERE metadata LIKE '%"event"%'""", params).fetchall()
        found: dict[str, list[Any]] = {name: [] for name in EVENT_NAMES}
        for run_id, namespace, checkpoint_id, created_at, metadata in rows:
            try:
                event = json.loads(metadata or "{}").get("event")
            except (ValueError, AttributeError, RecursionError):
                continue
            if isinstance(event, dict):
                for name, value in (("run_id", run_id), ("namespace", namespace),
                                    ("checkpoint_id", checkpoint_id), ("created_at", created_at),
                                    ("kind", _event_text(event.get("kind", "event"), 64)),
                                    ("channel", None), ("task_id", None),
                                    ("message", _event_text(event.get("message"), limits.MAX_TEXT_CHARS))):
                    found[name].append(value)
        if not found["run_id"]:
            return pa.Table.from_batches([], schema=event_schema)
        columns = ", ".join(f"unnest(${n}::BIGINT[]) AS {n}" if n == "created_at" else
                            f"unnest(${n}::VARCHAR[]) AS {n}" for n in EVENT_NAMES)
        table = con.sql(f"SELECT {columns}", params=found).to_arrow_table()
    finally:
        con.close()
    micros = table.column("created_at").cast(pa.timestamp("us", tz="UTC"))
    return table.set_column(event_schema.get_field_index("created_at"), "created_at", micros).cast(event_schema)


def _event_text(value: Any, limit: int) -> str | None:
    """An event field as bounded text (events come from untrusted metadata)."""
    if value is None:
        return None
    text = value if isinstance(value, str) else json.dumps(value, default=str)[:limit]
    return text[:limit].encode("utf-8", "replace").decode("utf-8")


def pending_record(marker: dict[str, Any]) -> CheckpointRecord:
    started = marker["started_at"]
    return CheckpointRecord(
        run_id=marker["run_id"], checkpoint_id=marker["checkpoint_id"],
        namespace=marker["namespace"], parent_id=marker["parent_id"],
        step=marker["step"], created_at=started, trigger=marker["trigger"],
        kind=marker["kind"], status=Status.INCOMPLETE,
        status_reason=f"save started {_when(started)} but never committed (no commit marker)",
        agent=marker["agent"], codec=marker["codec"], location=marker["location"],
    )


def _when(ts: datetime | None) -> str:
    return iso(ts) if ts else "at an unknown time"


# ---- listing tokens (what a scan saw: stamps of parts, tail, pending markers, heads) ----------

def parse_token(token: str | None) -> dict[str, dict[str, str]] | None:
    if not token:
        return None
    try:
        value = json.loads(token)
    except json.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


def added(before: Mapping[str, str], after: Mapping[str, str]) -> list[str]:
    return [name for name, stamp in after.items() if before.get(name) != stamp]


def something_vanished(before: Mapping[str, Any], after: Mapping[str, Any]) -> bool:
    """Parts or tail files removed with no new part to hold them, or entries removed (a prune or its
    undo rewrote CATALOG_EPOCH): rescan everything."""
    if before.get("epoch", {}) != after.get("epoch", {}):
        return True
    gone = any(n not in after.get(k, {}) for k in ("parts", "tail") for n in before.get(k, {}))
    gone_pending = any(n not in after["pending"] for n in before.get("pending", {}))
    grew = bool(added(before.get("parts", {}), after["parts"]))
    return (gone and not grew) or (gone_pending and not after["tail"] and not grew)


# ---- LangGraph checkpoints (lastgood.langgraph.LastgoodSaver; docs/format.md "LangGraph checkpointer") ----
#
# A LangGraph thread is a run (run_id = thread_id, namespace = checkpoint_ns), a checkpoint keeps
# LangGraph's uuid6 id. Its blob is LangGraph's own serialization of the checkpoint, codec
# "langgraph": a msgpack map {"langgraph": 1, "type": <serde type>, "data": <bytes>} (the (type, bytes)
# pair of ``serde.dumps_typed``), decoded here by Lastgood's safe LangGraph decoder (never imports or
# calls anything named in the data). Pending writes live beside the catalog, one file per
# ``put_writes`` call (the file is its own commit marker and carries the sha256 of its body):
#
#   <root>/catalog/tail/<thread>@<checkpoint>.jsonl   one commit marker per checkpoint (a fixed name:
#                                                     looked up without listing)
#   <root>/blobs/<thread>/<checkpoint>.<sha16>.lg     the checkpoint, immutable
#   <root>/writes/<thread>/<checkpoint>/<seq>.lgw     pending writes of the checkpoint
#
# where <thread> is <run>[@<namespace>] and each of <run>, <namespace>, <checkpoint> is
# :func:`key_segment` of the id.

WRITES = "writes"
LG_TAG = "langgraph"
LG_WRITES_TAG = "langgraph_writes"
LG_BLOB_SUFFIX = ".lg"
LG_WRITES_SUFFIX = ".lgw"
LONG_SEGMENT = 64
_WRITES_CLOCK = [0]
_WRITES_LOCK = threading.Lock()


def key_segment(value: str) -> str:
    """An id as one short path segment: quoted (:func:`quote_name`), or ``=`` and 40 hex digits of its
    sha256 when the quoted form is longer than LONG_SEGMENT (``=`` never appears in a quoted id)."""
    quoted = quote_name(value)
    if len(quoted) <= LONG_SEGMENT:
        return quoted
    return "=" + hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest()[:40]


def thread_folder(run_id: str, namespace: str = "") -> str:
    """``<run>`` or ``<run>@<namespace>`` (segments, see :func:`key_segment`)."""
    return key_segment(run_id) + (f"@{key_segment(namespace)}" if namespace else "")


def langgraph_tail_name(run_id: str, namespace: str, checkpoint_id: str) -> str:
    """The commit marker of one LangGraph checkpoint: ``<thread>@<checkpoint>.jsonl``."""
    return f"{thread_folder(run_id, namespace)}@{key_segment(checkpoint_id)}.jsonl"


def langgraph_tail_parts(name: str) -> tuple[str, str | None, str] | None:
    """(run segment, namespace segment or None, checkpoint segment) of a LangGraph commit marker's
    name; None for any other tail file (NativeWriter's names hold no ``@``)."""
    if not name.endswith(".jsonl"):
        return None
    parts = name[:-len(".jsonl")].split("@")
    if len(parts) == 2:
        return parts[0], None, parts[1]
    if len(parts) == 3:
        return parts[0], parts[1], parts[2]
    return None


def langgraph_blob_location(run_id: str, namespace: str, checkpoint_id: str, checksum: str) -> str:
    digest = checksum.partition(":")[2][:16]
    return f"{BLOBS}/{thread_folder(run_id, namespace)}/{key_segment(checkpoint_id)}.{digest}{LG_BLOB_SUFFIX}"


def langgraph_writes_folder(run_id: str, namespace: str, checkpoint_id: str) -> str:
    return f"{WRITES}/{thread_folder(run_id, namespace)}/{key_segment(checkpoint_id)}"


def langgraph_writes_name() -> str:
    """A new writes file's name: nanoseconds (increasing within a process) and 8 random hex digits;
    files of one checkpoint are applied in name order."""
    with _WRITES_LOCK:
        now = _WRITES_CLOCK[0] = max(time.time_ns(), _WRITES_CLOCK[0] + 1)
    return f"{now:020d}-{os.urandom(4).hex()}{LG_WRITES_SUFFIX}"


def encode_langgraph(type_: str | None, data: bytes) -> bytes:
    """The blob of a LangGraph checkpoint from ``serde.dumps_typed(checkpoint)``."""
    return msgpack.packb({LG_TAG: 1, "type": type_, "data": data}, use_bin_type=True)


def langgraph_typed(blob: bytes) -> tuple[str | None, bytes]:
    """The (serde type, bytes) pair a LangGraph blob holds; DecodeError when it is not one."""
    try:
        value = msgpack.unpackb(blob, raw=False, strict_map_key=False)
    except Exception as exc:  # noqa: BLE001 - any malformed input: one message
        raise DecodeError(f"langgraph blob does not decode: {str(exc)[:200]}") from None
    if (not isinstance(value, dict) or value.get(LG_TAG) != 1 or not isinstance(value.get("data"), bytes)
            or not isinstance(value.get("type"), (str, type(None)))):
        raise DecodeError('not a LangGraph checkpoint blob (expected {"langgraph": 1, "type", "data"})')
    return value["type"], value["data"]


def decode_langgraph(blob: bytes) -> Any:
    """The checkpoint as plain data (``{v, id, ts, channel_values, channel_versions, versions_seen, …}``),
    decoded by Lastgood's safe LangGraph decoder: extension types become tagged plain dicts, nothing
    named in the data is imported or called, pickles are never loaded, ``msgpack+aes`` is decrypted
    only with ``LANGGRAPH_AES_KEY`` (else an ``{"$encrypted": …}`` marker)."""
    from lastgood.readers.langgraph.serde import aes_key_from_env, decode_typed

    type_, data = langgraph_typed(blob)
    return decode_typed(type_, data, aes_key=aes_key_from_env())


@dataclass(frozen=True, slots=True)
class LangGraphWrite:
    """One stored pending write, still serialized (``type``/``data`` from ``serde.dumps_typed``)."""

    task_id: str
    task_path: str
    idx: int
    channel: str
    type: str | None
    data: bytes


def encode_langgraph_writes(task_id: str, task_path: str, rows: list[tuple[int, str, str | None, bytes]],
                            replace: bool) -> bytes:
    """One ``put_writes`` call as a file: rows ``(idx, channel, type, data)``; ``replace`` (every write
    special: error, interrupt, …) makes its rows replace earlier ones of the same (task, idx), as
    LangGraph's savers do; other rows never replace."""
    body = msgpack.packb([list(row) for row in rows], use_bin_type=True)
    return msgpack.packb({LG_WRITES_TAG: 1, "task_id": task_id, "task_path": task_path, "replace": replace,
                          "sha256": hashlib.sha256(body).hexdigest(), "writes": body}, use_bin_type=True)


def parse_langgraph_writes(data: bytes, name: str) -> tuple[bool, list[LangGraphWrite]]:
    """(replace, rows) of one writes file, its sha256 checked; DecodeError names what is wrong."""
    try:
        value = msgpack.unpackb(data, raw=False, strict_map_key=False)
    except Exception as exc:  # noqa: BLE001
        raise DecodeError(f"{name}: writes file does not decode: {str(exc)[:200]}") from None
    if not isinstance(value, dict) or value.get(LG_WRITES_TAG) != 1 or not isinstance(value.get("writes"), bytes):
        raise DecodeError(f"{name}: not a LangGraph writes file")
    body = value["writes"]
    if hashlib.sha256(body).hexdigest() != value.get("sha256"):
        raise DecodeError(f"{name}: sha256 mismatch: the writes file was changed or damaged", Check.SHA256_MISMATCH)
    task_id, task_path = value.get("task_id"), value.get("task_path") or ""
    if not isinstance(task_id, str) or not isinstance(task_path, str):
        raise DecodeError(f"{name}: malformed writes (task id or path)")
    try:
        rows = msgpack.unpackb(body, raw=False, strict_map_key=False)
        writes = [LangGraphWrite(task_id, task_path, idx, channel, type_, payload)
                  for idx, channel, type_, payload in rows]
    except Exception as exc:  # noqa: BLE001
        raise DecodeError(f"{name}: malformed writes: {str(exc)[:200]}") from None
    if not all(
            isinstance(w.idx, int) and isinstance(w.channel, str) and isinstance(w.data, bytes)
            and isinstance(w.type, (str, type(None))) for w in writes):
        raise DecodeError(f"{name}: malformed writes")
    return bool(value.get("replace")), writes


def merge_langgraph_writes(files: Iterable[tuple[bool, list[LangGraphWrite]]]) -> list[LangGraphWrite]:
    """The pending writes of a checkpoint from its files in name order: one per (task, idx), the
    first one unless a later file replaces it; sorted like LangGraph (task_path, task_id, idx)."""
    merged: dict[tuple[str, int], LangGraphWrite] = {}
    for replace, rows in files:
        for write in rows:
            key = (write.task_id, write.idx)
            if replace or key not in merged:
                merged[key] = write
    return sorted(merged.values(), key=lambda w: (w.task_path, w.task_id, w.idx))


RESUME_ACTIONS = ("restore", "rollback")  # journal actions that send a thread back to a checkpoint


def head_note(head: Mapping[str, Any] | None) -> dict[str, Any]:
    """The ``note`` a recovery action left on a head pointer (``{}`` when there is none)."""
    note = head.get("note") if head else None
    return note if isinstance(note, dict) else {}


def writes_time(name: str) -> int | None:
    """When a writes file was written (nanoseconds since the epoch, from its name), or None."""
    stamp = name.split("-", 1)[0]
    return int(stamp) if stamp.isdigit() else None


def langgraph_resume_times(entries: Iterable[Mapping[str, Any]]) -> dict[tuple[str, str, str], int]:
    """When each checkpoint last became its thread's head through a restore or rollback (nanoseconds
    since the epoch), from journal entries. The writes recorded against such a checkpoint before
    then belong to the timeline the action abandoned: a graph resuming from it runs those tasks again
    (as after LangGraph's own fork), so they are not its pending writes."""
    out: dict[tuple[str, str, str], int] = {}
    for entry in entries:
        target = entry.get("new_head")
        if entry.get("action") not in RESUME_ACTIONS or not isinstance(target, str):
            continue
        when = time_ns(entry.get("time"))
        if when is not None:
            key = (str(entry.get("run_id")), str(entry.get("namespace") or ""), target)
            out[key] = max(out.get(key, 0), when)
    return out


def time_ns(value: Any) -> int | None:
    """An ISO 8601 time as nanoseconds since the epoch (None when it is not one)."""
    try:
        moment = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    delta = moment - datetime(1970, 1, 1, tzinfo=UTC)
    return (delta.days * 86_400 + delta.seconds) * 1_000_000_000 + delta.microseconds * 1_000
