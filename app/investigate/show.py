"""One checkpoint in full: fields, decoded state, pending writes, findings — redacted."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict
from typing import Any

from lastgood.index import queries
from lastgood.index.catalog import Catalog
from lastgood.errors import CheckpointNotFound, DecodeError, LastgoodError
from lastgood.redact import redact
from lastgood.index.store import OpenStore
from lastgood.readers.base import Capability, CheckpointRecord, HasTensors, Status, capabilities, capability
from lastgood.integrity.verify import store_findings
from lastgood.investigate.preview import redacted_prefix


def show_checkpoint(catalog: Catalog, store: OpenStore, ref: str, state_chars: int | None = None) -> dict[str, Any]:
    """The ``show`` JSON shape: {checkpoint, state, pending_writes} plus findings and events.

    ``state_chars``: only the first that many characters of the state's text view will be shown;
    the state is then the redacted part of it they need (``lastgood.investigate.preview``)."""
    record = queries.resolve_checkpoint(catalog, store.store_id, ref)
    state, error = load_state_safely(store, record, state_chars)
    result: dict[str, Any] = {
        "checkpoint": _fields(catalog, store.store_id, record),
        "state": state,
        "pending_writes": pending_writes(store, record),
        "findings": store_findings(catalog, store.store_id, checkpoint_id=record.checkpoint_id),
        "events": redact(queries.checkpoint_events(catalog, store.store_id, record.run_id, record.namespace,
                                                   record.checkpoint_id)),
        "head": queries.head_of(catalog, store.store_id, record.run_id, record.namespace),
    }
    if Capability.TENSORS in capabilities(store.reader):
        result["tensors"] = _tensors(catalog, store, record)
    if error:
        result["state_error"] = error
    return _redact_small_parts(result)


def _redact_small_parts(result: dict[str, Any]) -> dict[str, Any]:
    """Every part redacted; the state, events, fields and writes already are (redacting a
    10,000-message state a second time cost more than reading it), so the rest is done here."""
    done = ("checkpoint", "state", "pending_writes", "events")
    return {key: value if key in done else redact(value) for key, value in result.items()}


def _tensors(catalog: Catalog, store: OpenStore, record: CheckpointRecord) -> list[dict[str, Any]]:
    """A training checkpoint's tensors: name, dtype, shape, size from its headers, with the
    statistics a full read stored (NaN/Inf counts, min, max, mean, std, norm; empty before one)."""
    from lastgood.index.tensors import tensor_stats

    stats = {row["name"]: row for row in tensor_stats(catalog, store.store_id, record.run_id,
                                                      record.namespace, record.checkpoint_id)}
    try:
        entries = capability(store.reader, HasTensors).tensors(record)  # type: ignore[union-attr]
    except (DecodeError, LastgoodError):
        entries = []
    return [{"name": e.name, "dtype": e.dtype, "shape": list(e.shape), "nbytes": e.nbytes,
             **{k: v for k, v in stats.get(e.name, {}).items() if k not in ("name", "dtype", "shape")}}
            for e in entries]


def _fields(catalog: Catalog, store_id: int, record: CheckpointRecord) -> dict[str, Any]:
    """The checkpoint's fields (redacted), with ``data_checked`` as ``ls`` rows carry it."""
    fields = redact(queries.checkpoint_fields(record))
    fields["data_checked"] = queries.data_checked(catalog, store_id, record)
    return fields


def load_state_safely(store: OpenStore, record: CheckpointRecord,
                      chars: int | None = None) -> tuple[Any, str | None]:
    """(redacted state, None) or (None, the reason it cannot be shown); with ``chars``, the
    redacted part the first ``chars`` characters of its text view need."""
    if record.status == Status.INCOMPLETE:
        return None, record.status_reason or "the save never completed"
    try:
        state = store.reader.load_state(record)
        return (redact(state) if chars is None else redacted_prefix(state, chars)), None
    except DecodeError as exc:
        return None, str(exc)


def pending_writes(store: OpenStore, record: CheckpointRecord) -> list[dict[str, Any]]:
    try:
        writes = store.reader.pending_writes(record)
    except DecodeError as exc:
        return [{"error": str(exc)}]
    return [redact(asdict(w)) for w in writes]


def checkpoint_view(catalog: Catalog, store_id: int, ref: str,
                    open_store: Callable[[], OpenStore]) -> dict[str, Any]:
    """``show_checkpoint``, or — when the store cannot be opened any more — what the
    index knows about the checkpoint, with the reason in ``state_error``."""
    try:
        return show_checkpoint(catalog, open_store(), ref)
    except CheckpointNotFound:
        raise
    except (LastgoodError, OSError) as exc:
        reason = f"the store cannot be opened: {exc}"
    record = queries.resolve_checkpoint(catalog, store_id, ref)
    events = queries.checkpoint_events(catalog, store_id, record.run_id, record.namespace, record.checkpoint_id)
    return {"checkpoint": _fields(catalog, store_id, record), "state": None,
            "pending_writes": [], "findings": store_findings(catalog, store_id, checkpoint_id=record.checkpoint_id),
            "events": redact(events), "state_error": redact(reason),
            "head": queries.head_of(catalog, store_id, record.run_id, record.namespace)}
