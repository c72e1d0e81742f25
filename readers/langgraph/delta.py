"""DeltaChannel (beta), shared by the LangGraph SQLite and Postgres readers: channels kept out of
``channel_values`` and rebuilt by replaying writes along the parent chain. Message channels are
rebuilt with LangGraph's message reducer semantics (dedupe by id, ``RemoveMessage``,
``Overwrite``); any other channel is shown as a ``$not_shown`` marker that carries the stored
seed and the writes, never as missing."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

from lastgood.errors import DecodeError
from lastgood.readers.base import PendingWrite
from lastgood.readers.langgraph.serde import DELTA_SNAPSHOT_TYPE, message_role

DELTA_COUNTERS_KEY = "counters_since_delta_snapshot"
DELTA_NOTE = (
    "DeltaChannel value is rebuilt from writes; Lastgood does not run the graph's reducer, "
    "so the stored seed and the writes since it are shown instead"
)
OVERWRITE_TYPE = "langgraph.types.Overwrite"


class Ancestor(NamedTuple):
    """One checkpoint on the parent chain: decoded checkpoint, parent id, its writes."""

    checkpoint: Mapping[str, Any]
    parent_id: str | None
    writes: list[PendingWrite]


AncestorLoader = Callable[[str], "Ancestor | None"]


def delta_channels(checkpoint: Mapping[str, Any], metadata: Mapping[str, Any]) -> list[str]:
    """DeltaChannels whose value this checkpoint does not store (rebuilt from writes)."""
    counters = metadata.get(DELTA_COUNTERS_KEY)
    if not isinstance(counters, Mapping):
        return []
    values = checkpoint.get("channel_values") or {}
    versions = checkpoint.get("channel_versions") or {}
    return [ch for ch in counters if ch not in values and ch in versions]


def rebuild_delta_values(
    checkpoint: Mapping[str, Any], metadata: Mapping[str, Any], parent_id: str | None,
    load_ancestor: AncestorLoader,
) -> dict[str, Any]:
    """``channel_values`` with every DeltaChannel rebuilt (messages) or marked ``$not_shown``."""
    values = dict(checkpoint.get("channel_values") or {})
    channels = delta_channels(checkpoint, metadata)
    if not channels:
        return values
    history, broken = delta_history(parent_id, channels, load_ancestor)
    for ch in channels:
        seeded, seed, writes = history[ch]
        values[ch] = _rebuilt_value(seeded, seed, writes, broken)
    return values


def delta_history(
    parent_id: str | None, channels: Sequence[str], load_ancestor: AncestorLoader
) -> tuple[dict[str, tuple[bool, Any, list[Any]]], str | None]:
    """Per channel ``(seed found, seed, write values oldest first)`` and a broken-chain note.

    Walks parents like ``BaseCheckpointSaver.get_delta_channel_history``: each
    ancestor's writes count, and the walk stops at the nearest ancestor that
    stores the channel (the seed).
    """
    remaining = set(channels)
    collected: dict[str, list[Any]] = {ch: [] for ch in channels}
    seeds: dict[str, Any] = {}
    seen: set[str] = set()
    cursor, broken = parent_id, None
    while cursor and remaining and cursor not in seen:
        seen.add(cursor)
        try:
            ancestor = load_ancestor(cursor)
        except DecodeError as exc:
            broken = f"ancestor checkpoint {cursor} could not be decoded ({exc})"
            break
        if ancestor is None:
            broken = f"ancestor checkpoint {cursor} is missing"
            break
        _collect_ancestor(ancestor, remaining, collected, seeds)
        cursor = ancestor.parent_id
    result = {ch: (ch in seeds, seeds.get(ch), list(reversed(collected[ch]))) for ch in channels}
    return result, broken


def _collect_ancestor(
    ancestor: Ancestor, remaining: set[str], collected: dict[str, list[Any]], seeds: dict[str, Any]
) -> None:
    for write in reversed(ancestor.writes):
        if write.channel in remaining:
            collected[write.channel].append(write.value)
    stored = ancestor.checkpoint.get("channel_values") or {}
    for ch in [ch for ch in remaining if ch in stored]:
        seeds[ch] = stored[ch]
        remaining.discard(ch)


def _rebuilt_value(seeded: bool, seed: Any, writes: list[Any], broken: str | None) -> Any:
    base = _unwrap_snapshot(seed) if seeded else []
    if broken is None and seeded and not writes:
        return base  # nothing written since the stored value: no reducer needed
    if broken is None:
        messages = replay_messages(base, writes)
        if messages is not None:
            return messages
    note = DELTA_NOTE if broken is None else f"{DELTA_NOTE}; {broken}, so the value is incomplete"
    return {"$not_shown": note, "seed": base if seeded else None, "writes": writes}


def _unwrap_snapshot(value: Any) -> Any:
    if isinstance(value, dict) and value.get("$type") == DELTA_SNAPSHOT_TYPE:
        return value.get("value")
    return value


def replay_messages(base: Any, writes: Sequence[Any]) -> list[Any] | None:
    """Apply message writes like ``_messages_delta_reducer``; None if not all messages."""
    if not isinstance(base, list) or not all(message_role(m) for m in base):
        return None
    result: list[Any] = list(base)
    for write in writes:
        if isinstance(write, dict) and write.get("$type") == OVERWRITE_TYPE:
            replaced = write.get("value")
            if not isinstance(replaced, list) or not all(message_role(m) for m in replaced):
                return None
            result = list(replaced)
            continue
        batch = write if isinstance(write, list) else [write]
        if not all(message_role(m) for m in batch):
            return None
        result = _merge_messages(result, batch)
    return result


def _merge_messages(state: list[Any], batch: list[Any]) -> list[Any]:
    index = {m.get("id"): i for i, m in enumerate(state) if m.get("id") is not None}
    result: list[Any] = list(state)
    for msg in batch:
        mid = msg.get("id")
        if mid is None:
            result.append(msg)
        elif message_role(msg) == "remove":
            if mid in index:
                result[index.pop(mid)] = None
        elif mid in index:
            result[index[mid]] = msg
        else:
            index[mid] = len(result)
            result.append(msg)
    return [m for m in result if m is not None]
