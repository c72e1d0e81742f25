"""The native Lastgood store layout, entry and payload codecs (see docs/format.md).

    <root>/lastgood-store.json            marker: {"format": "lastgood-native", "version": 1}
    <root>/blobs/<run>/<id>.<codec>     immutable payloads, written before they are listed
    <root>/catalog/tail/<name>.jsonl    commit markers: one catalog entry per line
    <root>/catalog/parts/<name>.parquet compacted catalog entries
    <root>/catalog/pending/<id>.json    a save in progress (removed once committed)
    <root>/catalog/rejected/            tail files with malformed lines, kept by compaction
    <root>/heads/<run>.json             per-run head pointer
    <root>/journal/                     write actions (restore, rollback, quarantine, undo)
"""

from __future__ import annotations

import hashlib
import json
import os
import time
import urllib.parse
import uuid
from datetime import UTC, datetime
from typing import Any

import msgpack
import pyarrow as pa

from lastgood.checks import Check
from lastgood.errors import DecodeError
from lastgood.readers.base import CHECKPOINT_SCHEMA, rows_table

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
CODECS = ("json", "msgpack")
KINDS = ("full", "incremental")
PATCH_TAG = "lastgood_patch"

# Catalog entries (tail lines and parquet parts) use these columns.
# Catalog entries (tail lines and parquet parts): the index's columns minus the statuses,
# which a reader derives (pending markers, verification) rather than stores.
ENTRY_SCHEMA = pa.schema([f for f in CHECKPOINT_SCHEMA if f.name not in ("status", "status_reason")])
REQUIRED_FIELDS = ("run_id", "checkpoint_id", "location", "codec")


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
    if value is None or value == "":
        return None
    if isinstance(value, (int, float)):
        return datetime.fromtimestamp(value, UTC)
    text = str(value).replace("Z", "+00:00")
    parsed = datetime.fromisoformat(text)
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


# ---- payloads ---------------------------------------------------------------

def encode_payload(value: Any, codec: str) -> bytes:
    if codec == "json":
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=True).encode()
    if codec == "msgpack":
        return msgpack.packb(value, use_bin_type=True)
    raise ValueError(f"unknown codec {codec!r} (known: {', '.join(CODECS)})")


def decode_payload(data: bytes, codec: str) -> Any:
    """Plain data from a payload; never imports or calls anything named in it."""
    if codec == "json":
        try:
            return json.loads(data)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise DecodeError(f"json payload does not decode: {exc}") from None
    if codec == "msgpack":
        return _decode_msgpack(data)
    raise DecodeError(f"unknown codec {codec!r} (known: {', '.join(CODECS)})", Check.UNKNOWN_CODEC)


def _decode_msgpack(data: bytes) -> Any:
    try:
        return msgpack.unpackb(
            data, raw=False, strict_map_key=False, ext_hook=_plain_ext, use_list=True
        )
    except (msgpack.ExtraData, msgpack.FormatError, msgpack.StackError, ValueError) as exc:
        raise DecodeError(f"msgpack payload does not decode: {exc}") from None


def _plain_ext(code: int, data: bytes) -> dict[str, Any]:
    return {"$ext": code, "size": len(data), "sha256": hashlib.sha256(data).hexdigest()}


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
    try:
        row = json.loads(line)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"not valid JSON ({exc})") from None
    if not isinstance(row, dict):
        raise ValueError("not a JSON object")
    missing = [f for f in REQUIRED_FIELDS if not row.get(f)]
    if missing:
        raise ValueError(f"missing field(s) {', '.join(missing)}")
    return _normalise_entry(row)


def _normalise_entry(row: dict[str, Any]) -> dict[str, Any]:
    out = {name: row.get(name) for name in ENTRY_SCHEMA.names}
    out["namespace"] = out["namespace"] or ""
    out["kind"] = out["kind"] or "full"
    out["created_at"] = parse_time(out["created_at"])
    meta = out["metadata"]
    out["metadata"] = meta if isinstance(meta, str) else json.dumps(meta or {}, sort_keys=True)
    for name in ("step", "size_bytes"):
        if out[name] is not None:
            out[name] = int(out[name])
    return out


def entries_table(entries: list[dict[str, Any]]) -> pa.Table:
    return rows_table(entries, ENTRY_SCHEMA)


def read_part(handle: Any, columns: tuple[str, ...] | None = None) -> pa.Table:
    """A compacted catalog part (or some of its columns), in ENTRY_SCHEMA's order."""
    import pyarrow.parquet as pq

    names = list(columns or ENTRY_SCHEMA.names)
    schema = pa.schema([ENTRY_SCHEMA.field(n) for n in names])
    return pq.ParquetFile(handle).read(columns=names).select(names).cast(schema)


def part_rows(path: str) -> int:
    """Rows in a local Parquet part, from its footer."""
    import pyarrow.parquet as pq

    return int(pq.ParquetFile(path).metadata.num_rows)
