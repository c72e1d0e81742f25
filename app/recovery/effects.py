"""What a restore does not undo: the tool calls, interrupts, errors and events recorded on a run
after the target (pending writes, the format's own messages through the reader's ``messages``
capability, an agent's notes in checkpoint metadata, indexed events). The preview lists them so
the operator knows what to compensate."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from lastgood.errors import DecodeError
from lastgood.index import queries
from lastgood.index.catalog import Catalog
from lastgood.index.store import OpenStore
from lastgood.readers import journal as jr
from lastgood.readers.base import CheckpointRecord, NormalizesMessages, capability

MAX_EFFECT_CHECKPOINTS = 500
SIDE_EFFECT_CHANNELS = {"__interrupt__": "interrupt", "__resume__": "resume", "__error__": "error"}


def side_effects(catalog: Catalog, store: OpenStore, target: CheckpointRecord,
                 later: list[CheckpointRecord], warnings: list[str]) -> list[dict[str, Any]]:
    """What happened in the world after ``target`` (tool calls, interrupts, events):
    a restore rewinds the state, not these."""
    scanned = [target, *later][:MAX_EFFECT_CHECKPOINTS]
    if len(later) + 1 > MAX_EFFECT_CHECKPOINTS:
        warnings.append(f"side effects listed for the first {MAX_EFFECT_CHECKPOINTS} checkpoints "
                        f"after the target only ({len(later) + 1} in all)")
    effects: list[dict[str, Any]] = []
    for record in scanned:
        effects.extend(_write_effects(store, record))
        effects.extend(_metadata_effects(record, record is target))
    events = queries.events(catalog, store.store_id, run_id=target.run_id)
    ids = {r.checkpoint_id for r in scanned}
    for row in events.to_dict(orient="records"):
        if row.get("checkpoint_id") in ids and row.get("checkpoint_id") != target.checkpoint_id:
            effects.append({"checkpoint_id": row["checkpoint_id"], "kind": f"event:{row.get('kind')}",
                            "detail": row.get("message")})
    from lastgood.redact import redact

    return redact(_dedupe(effects))


def _write_effects(store: OpenStore, record: CheckpointRecord) -> list[dict[str, Any]]:
    try:
        writes = store.reader.pending_writes(record)
    except DecodeError:
        return []
    effects = []
    for write in writes:
        if write.channel in SIDE_EFFECT_CHANNELS:
            effects.append({"checkpoint_id": record.checkpoint_id,
                            "kind": SIDE_EFFECT_CHANNELS[write.channel],
                            "task_id": write.task_id, "detail": _short(write.value)})
            continue
        for message in _messages(store, write.value):
            effects.extend(_message_effects(record.checkpoint_id, write.task_id, message))
    return effects


def _message_effects(checkpoint_id: str, task_id: str, message: Mapping[str, Any]) -> list[dict[str, Any]]:
    out = []
    for call in message.get("tool_calls") or []:
        if isinstance(call, Mapping):
            out.append({"checkpoint_id": checkpoint_id, "kind": "tool_call", "task_id": task_id,
                        "tool": call.get("name"), "call_id": call.get("id"),
                        "detail": _short(call.get("args"))})
    if message.get("role") == "tool":
        out.append({"checkpoint_id": checkpoint_id, "kind": "tool_result", "task_id": task_id,
                    "tool": message.get("name"), "call_id": message.get("tool_call_id"),
                    "detail": _short(message.get("content"))})
    return out


def _messages(store: OpenStore, value: Any) -> list[Mapping[str, Any]]:
    """The conversation messages in a written value, in the format's own shape made plain
    (capability ``messages``); a plain ``{role, …}`` dict is one as it is."""
    messages = capability(store.reader, NormalizesMessages)
    items = value if isinstance(value, list) else [value]
    found = []
    for item in items:
        message = messages.normalize_message(item) if messages is not None and isinstance(item, dict) else None
        if message is None and isinstance(item, dict) and "role" in item:
            message = item
        if message is not None:
            found.append(message)
    return found


def _metadata_effects(record: CheckpointRecord, is_target: bool) -> list[dict[str, Any]]:
    """An agent's own notes of external actions in checkpoint metadata (``side_effects``,
    ``tool_calls`` or ``actions``: the native writer's convention)."""
    if is_target:
        return []
    meta = dict(record.metadata or {})
    meta.pop("event", None)
    actions = meta.get("side_effects") or meta.get("tool_calls") or meta.get("actions")
    if not actions:
        return []
    return [{"checkpoint_id": record.checkpoint_id, "kind": "metadata", "detail": _short(actions)}]


def _short(value: Any, limit: int = 300) -> str:
    text = value if isinstance(value, str) else jr.canonical(value).decode(errors="replace")
    return text if len(text) <= limit else text[:limit] + "…"


def _dedupe(effects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    seen, out = set(), []
    for effect in effects:
        key = jr.digest(effect)
        if key not in seen:
            seen.add(key)
            out.append(effect)
    return out
