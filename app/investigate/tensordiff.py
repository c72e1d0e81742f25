"""Tensor diff of two training checkpoints: which tensors were added or removed, which changed shape
or dtype, and for every tensor both hold, how much it changed — ‖ΔW‖/‖W‖, max |Δ|, cosine — and
whether NaN/Inf appeared. Sorted by change, grouped by layer.

Both checkpoints come through their readers' ``tensors`` capability (headers only to list; the
bytes streamed in bounded chunks, never a whole checkpoint in memory); the numbers come from
``lastgood.readers.tensors`` (numpy, no torch). The two stores may differ (a fine-tune against its
base model, two runs).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from typing import Any

from lastgood.errors import UsageError
from lastgood.index.store import OpenStore
from lastgood.readers.base import CheckpointRecord, HasTensors, TensorEntry, capability
from lastgood.readers.tensors.dtypes import DTYPE_BITS
from lastgood.readers.tensors.errors import TensorsError
from lastgood.readers.tensors.stats import TensorDelta

CHUNK_BYTES = 8 * 2**20
# the layer a tensor belongs to, for grouping: the numbered block it sits in ("model.layers.3.mlp.up_proj.weight"
# -> "model.layers.3"; GPT-2's "h.3", "blocks.3"), else its module (the name without its last part)
_BLOCK = re.compile(r"^(.*?(?:^|\.)(?:layers|layer|h|blocks|block|encoder\.layer|decoder\.layers)\.\d+)(?:\.|$)")
_LAST_PART = re.compile(r"\.[^.]+$")


def layer_of(name: str) -> str:
    block = _BLOCK.match(name)
    return block.group(1) if block else (_LAST_PART.sub("", name) or name)


def tensor_source(store: OpenStore) -> HasTensors:
    source = capability(store.reader, HasTensors)
    if source is None:
        raise UsageError(f"the {store.reader.name} reader lists no tensors: a tensor diff needs two "
                         "training checkpoints (safetensors, torch, DCP… folders)")
    return source


def tensor_diff(store_a: OpenStore, record_a: CheckpointRecord, store_b: OpenStore,
                record_b: CheckpointRecord, chunk_bytes: int = CHUNK_BYTES) -> dict[str, Any]:
    """``{a, b, added, removed, changed_shape, tensors: [...], summary}`` (see the module docstring)."""
    source_a, source_b = tensor_source(store_a), tensor_source(store_b)
    entries_a = {e.name: e for e in source_a.tensors(record_a)}
    entries_b = {e.name: e for e in source_b.tensors(record_b)}
    common = [name for name in entries_a if name in entries_b]
    rows, reshaped = [], []
    for name in common:
        a, b = entries_a[name], entries_b[name]
        if (a.dtype, tuple(a.shape)) != (b.dtype, tuple(b.shape)):
            reshaped.append({"name": name, "a": _describe(a), "b": _describe(b)})
            continue
        rows.append(_compare(name, a, b, source_a, record_a, source_b, record_b, chunk_bytes))
    rows.sort(key=lambda r: (r["error"] is None, -(r["relative_change"] or 0.0), r["name"]))
    return {
        "a": _label(store_a, record_a), "b": _label(store_b, record_b),
        "added": [_describe(entries_b[n]) for n in entries_b if n not in entries_a],
        "removed": [_describe(entries_a[n]) for n in entries_a if n not in entries_b],
        "changed_shape": reshaped, "tensors": rows, "layers": _layers(rows),
        "summary": _summary(rows, entries_a, entries_b, reshaped),
    }


def _compare(name: str, a: TensorEntry, b: TensorEntry, source_a: HasTensors, record_a: CheckpointRecord,
             source_b: HasTensors, record_b: CheckpointRecord, chunk_bytes: int) -> dict[str, Any]:
    row: dict[str, Any] = {"name": name, "layer": layer_of(name), "dtype": a.dtype,
                           "shape": list(a.shape), "error": None}
    try:
        delta = TensorDelta()
        pairs = aligned(source_a.read_tensor(record_a, a, chunk_bytes),
                        source_b.read_tensor(record_b, b, chunk_bytes), _item_bytes(a.dtype))
        for raw_a, raw_b in pairs:
            delta.update_bytes(raw_a, raw_b, a.dtype)
    except (TensorsError, OSError, ValueError) as exc:
        return {**row, "error": f"{type(exc).__name__}: {exc}", "relative_change": None}
    values = delta.as_dict()
    return {**row, "relative_change": _finite(values["relative_change"]), "diff_l2": _finite(values["diff_l2"]),
            "norm_a": _finite(values["a_l2"]), "norm_b": _finite(values["b_l2"]),
            "max_abs_diff": _finite(values["max_abs_diff"]), "cosine": _finite(values["cosine"]),
            "nan_a": values["nan_a"], "nan_b": values["nan_b"], "nan_appeared": values["nan_appeared"],
            "inf_a": values["inf_a"], "inf_b": values["inf_b"]}


def aligned(chunks_a: Iterable[bytes | memoryview], chunks_b: Iterable[bytes | memoryview],
            item: int) -> Iterator[tuple[memoryview, memoryview]]:
    """Pairs of equally long pieces (whole elements) of two byte streams whatever their chunking;
    a stream shorter than the other ends with a ValueError."""
    iter_a, iter_b = iter(chunks_a), iter(chunks_b)
    buf_a, buf_b = memoryview(b""), memoryview(b"")
    while True:
        if not len(buf_a):
            buf_a = memoryview(next(iter_a, b""))
        if not len(buf_b):
            buf_b = memoryview(next(iter_b, b""))
        if not len(buf_a) and not len(buf_b):
            return
        size = min(len(buf_a), len(buf_b)) // item * item
        if size == 0:
            if not len(buf_a) or not len(buf_b):
                raise ValueError("the two tensors' bytes differ in length")
            buf_a, buf_b = _refill(buf_a, iter_a, item), _refill(buf_b, iter_b, item)
            continue
        yield buf_a[:size], buf_b[:size]
        buf_a, buf_b = buf_a[size:], buf_b[size:]


def _refill(buf: memoryview, chunks: Iterator[bytes | memoryview], item: int) -> memoryview:
    """A piece shorter than one element, joined with what follows until it holds one."""
    data = bytes(buf)
    while len(data) < item:
        more = next(chunks, b"")
        if not more:
            raise ValueError("a tensor's bytes end inside an element")
        data += bytes(more)
    return memoryview(data)


def _item_bytes(dtype: str) -> int:
    bits = DTYPE_BITS.get(dtype)
    if bits is None or bits % 8:
        raise UsageError(f"tensors of dtype {dtype} cannot be compared element by element")
    return bits // 8


def _finite(value: Any) -> Any:
    return None if isinstance(value, float) and value != value else value


def _describe(entry: TensorEntry) -> dict[str, Any]:
    return {"name": entry.name, "dtype": entry.dtype, "shape": list(entry.shape), "nbytes": entry.nbytes}


def _label(store: OpenStore, record: CheckpointRecord) -> dict[str, Any]:
    return {"store": store.display_url, "run_id": record.run_id, "namespace": record.namespace,
            "checkpoint_id": record.checkpoint_id, "step": record.step}


def _layers(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per layer: the largest relative change of its tensors (the per-layer bar chart)."""
    layers: dict[str, dict[str, Any]] = {}
    for row in rows:
        layer = layers.setdefault(row["layer"], {"layer": row["layer"], "tensors": 0, "max_relative_change": 0.0,
                                                 "nan_appeared": False})
        layer["tensors"] += 1
        layer["max_relative_change"] = max(layer["max_relative_change"], row.get("relative_change") or 0.0)
        layer["nan_appeared"] = layer["nan_appeared"] or bool(row.get("nan_appeared"))
    return sorted(layers.values(), key=lambda l: -l["max_relative_change"])


def _summary(rows: list[dict[str, Any]], entries_a: dict[str, TensorEntry], entries_b: dict[str, TensorEntry],
             reshaped: list[dict[str, Any]]) -> dict[str, Any]:
    changed = [r for r in rows if (r.get("relative_change") or 0.0) > 0 or r.get("error")]
    return {"tensors_a": len(entries_a), "tensors_b": len(entries_b), "compared": len(rows),
            "changed": len(changed), "unchanged": len(rows) - len(changed),
            "added": sum(1 for n in entries_b if n not in entries_a),
            "removed": sum(1 for n in entries_a if n not in entries_b), "changed_shape": len(reshaped),
            "nan_appeared": sum(1 for r in rows if r.get("nan_appeared")),
            "errors": sum(1 for r in rows if r.get("error"))}
