"""What a native store holds: bytes per area (blobs, catalog, heads, journal, LangGraph writes), per
run, and per top-level state key ("channel", estimated from a sample of full checkpoints)."""

from __future__ import annotations

import json
import posixpath
from typing import Any

import msgpack

from lastgood.readers.common.fsutil import safe_join
from lastgood.readers.native import format as nf
from lastgood.readers.native import pruning as steps
from lastgood.readers.journal import breakdown_row

AREAS = {nf.BLOBS: "blobs", "catalog": "catalog", nf.HEADS: "heads", nf.JOURNAL: "journal", nf.WRITES: "writes"}


def footprint(backend: Any) -> dict[str, Any]:
    """Bytes on disk per area (one listing of the store's files)."""
    files: dict[str, int] = {}
    counts: dict[str, int] = {}
    try:
        listing = backend.fs.find(backend.root, detail=True)
    except FileNotFoundError:
        listing = {}
    for path, info in listing.items():
        relative = posixpath.relpath(str(path), backend.root)
        area = AREAS.get(relative.split("/", 1)[0], "other")
        files[area] = files.get(area, 0) + int(info.get("size") or 0)
        counts[area] = counts.get(area, 0) + 1
    return {"files": files, "file_counts": counts, "bytes": sum(files.values()), "free_bytes": 0, "notes": []}


def breakdown(backend: Any, channels: bool, sample: int) -> list[dict[str, Any]]:
    snap = steps.read_catalog(backend.fs, backend.root)
    per_run: dict[str, list[int]] = {}
    for (run, _ns, _cid), entry in snap.entries.items():
        agg = per_run.setdefault(run, [0, 0])
        agg[0] += 1
        agg[1] += int(entry.get("size_bytes") or 0)
    out = [breakdown_row("blobs", sum(a[0] for a in per_run.values()), sum(a[1] for a in per_run.values()))]
    out += [breakdown_row("blobs", n, size, run_id=run) for run, (n, size) in sorted(per_run.items())]
    space = footprint(backend)
    for area in ("catalog", "heads", "journal", "writes"):
        if space["files"].get(area):
            out.append(breakdown_row(area, space["file_counts"].get(area, 0), space["files"][area]))
    if channels:
        out += _sampled_keys(backend, snap, out[0]["bytes"], sample)
    return out


def _sampled_keys(backend: Any, snap: steps.CatalogSnapshot, total: int, sample: int) -> list[dict[str, Any]]:
    """Each top-level state key's share of the blobs, from ``sample`` full checkpoints spread over the
    catalog (their values re-encoded), scaled to the blobs' total."""
    full = [e for e in snap.entries.values() if e.get("kind") == "full" and e.get("codec") in nf.WRITER_CODECS]
    if not full or sample <= 0:
        return []
    step = max(1, len(full) // sample)
    sizes: dict[str, int] = {}
    seen: dict[str, int] = {}
    measured = picked = 0
    for entry in full[::step][:sample]:
        try:
            data = backend.fs.cat_file(safe_join(backend.root, str(entry["location"])))
            state = nf.decode_payload(data, str(entry["codec"]))
        except Exception:  # noqa: BLE001 - a damaged blob is verification's business: not sampled
            continue
        if not isinstance(state, dict):
            continue
        picked += 1
        measured += len(data)
        for key, value in state.items():
            sizes[str(key)] = sizes.get(str(key), 0) + _encoded(value, str(entry["codec"]))
            seen[str(key)] = seen.get(str(key), 0) + 1
    if not measured:
        return []
    count = len(snap.entries)
    return [breakdown_row("blobs", round(count * seen[k] / picked), round(total * size / measured), channel=k, estimated=True)
            for k, size in sorted(sizes.items(), key=lambda kv: -kv[1])]


def _encoded(value: Any, codec: str) -> int:
    if codec == "msgpack":
        return len(msgpack.packb(value, use_bin_type=True))
    return len(json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=str).encode())
