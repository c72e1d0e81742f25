"""Content checks: warnings about what a checkpoint holds, not whether it can be read.

- **schema drift**: what is abnormal for a state's shape along a run (each state's *shape* is a
  small ``{path: type}`` map computed where the state was decoded), checkpoint against its parent
  (the checkpoint before it in step order when the format records no parents): a key that
  *disappears*, a key that *changes type*, or a key that *reappears* after the run's lineage had
  it and lost it. A key that appears for the first time is how a state grows (a LangGraph channel
  written by its first node, a summary at the end): never drift. Forks compare with their own
  parent, not with the branch listed before them;
- **NaN/Inf** anywhere in a state's numbers;
- **size spikes**: a checkpoint far bigger than its run's median (SQL over the
  index, no blob reads).

Pure functions over plain data; the SQL for spikes lives with the other
verification SQL in :mod:`lastgood.integrity.verify`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import msgpack

from lastgood.checks import Check
from lastgood.readers.base import CheckpointRecord, Finding

Shape = dict[str, str]

UNKNOWN = "?"            # a value the reader did not decode: matches any type
SHAPE_DEPTH = 2          # top-level channels and the keys of dict-valued channels
MAX_NON_FINITE_NODES = 200_000  # NaN/Inf scan budget per state (huge states are sampled, not walked whole)
SPIKE_FACTOR = 10        # a checkpoint ≥ 10× its run's median size …
SPIKE_MIN_BYTES = 64 * 1024  # … and at least this big …
SPIKE_MIN_CHECKPOINTS = 5    # … in a run with enough checkpoints to have a median


def state_shape(state: Any, depth: int = SHAPE_DEPTH) -> Shape:
    """``{path: type name}`` for the first ``depth`` levels of dict keys.

    Internal LangGraph channels (``__start__``, ``branch:to:x``) come and go on
    every step and are left out; a None value is of no type (UNKNOWN): a field
    being unset is neither a type change nor a key that disappeared."""
    shape: Shape = {}
    _collect_shape(state, "", depth, shape)
    return shape


def _collect_shape(value: Any, prefix: str, depth: int, shape: Shape) -> None:
    if not isinstance(value, Mapping) or depth == 0:
        return
    for key, child in value.items():
        name = str(key)
        if name.startswith(("__", "$")) or ":" in name:
            continue
        path = f"{prefix}/{name}"
        if child is None or _is_placeholder(child):
            shape[path] = UNKNOWN
            continue
        shape[path] = _type_name(child)
        _collect_shape(child, path, depth - 1, shape)


def _is_placeholder(value: Any) -> bool:
    """A reader's stand-in for a value it does not show (``{"$not_shown": …}``)."""
    return isinstance(value, Mapping) and any(str(k).startswith("$") for k in value)


def _type_name(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, Mapping):
        return "object"
    if isinstance(value, (list, tuple)):
        return "array"
    return type(value).__name__


def drift_message(before: Shape, after: Shape, seen: frozenset[str] = frozenset()) -> str | None:
    """What is abnormal between a checkpoint's shape (``after``) and its parent's (``before``), or
    None: keys that disappeared, changed type, or reappeared (absent from the parent but in ``seen``,
    the keys an earlier checkpoint of the lineage had). Keys new to the lineage are not drift."""
    removed = sorted(before.keys() - after.keys())
    retyped = sorted(p for p in before.keys() & after.keys()
                     if before[p] != after[p] and UNKNOWN not in (before[p], after[p]))
    back = sorted(p for p in after.keys() - before.keys() if p in seen)
    parts = []
    if removed:
        parts.append("disappeared: " + _listed(removed))
    if retyped:
        parts.append("changed type: " + _listed(f"{p} {before[p]}→{after[p]}" for p in retyped))
    if back:
        parts.append("reappeared: " + _listed(back))
    return "; ".join(parts) or None


def _listed(items: Iterable[str], limit: int = 5) -> str:
    items = list(items)
    shown = ", ".join(items[:limit])
    return shown + (f" (+{len(items) - limit} more)" if len(items) > limit else "")


def drift_findings(records: list[CheckpointRecord], shapes: Mapping[str, Shape]) -> Iterator[Finding]:
    """Schema drift along each run (records in run, step order; ``parent_id`` when the format
    records parents): each checkpoint against its parent, else the checkpoint before it.

    Only a checkpoint and a parent that both have a shape are compared (a damaged checkpoint in
    between is reported by the integrity checks, not as drift); a parent named but not among the
    run's records (a missing parent) is not replaced by a neighbour."""
    previous: dict[tuple[str, str], CheckpointRecord] = {}
    seen: dict[tuple[str, str, str], frozenset[str]] = {}  # a checkpoint -> every key its lineage had, up to it
    for record in records:
        key = (record.run_id, record.namespace)
        before = _parent(record, previous.get(key), seen)
        previous[key] = record
        shape = shapes.get(record.checkpoint_id)
        if shape is None:
            continue
        lineage = seen.get(_at(before), frozenset()) if before is not None else frozenset()
        seen[_at(record)] = lineage if shape.keys() <= lineage else lineage | shape.keys()
        parent_shape = shapes.get(before.checkpoint_id) if before is not None else None
        if not parent_shape:  # none, or an empty first state (LangGraph's input checkpoint) that only gains keys
            continue
        message = drift_message(parent_shape, shape, lineage)
        if message:
            yield Finding(Check.SCHEMA_DRIFT, "warning", f"state schema changed since {before.checkpoint_id}: "
                          f"{message}", record.run_id, record.namespace, record.checkpoint_id)


def _at(record: CheckpointRecord) -> tuple[str, str, str]:
    return record.run_id, record.namespace, record.checkpoint_id


def _parent(record: CheckpointRecord, previous: CheckpointRecord | None,
            seen: Mapping[tuple[str, str, str], frozenset[str]]) -> CheckpointRecord | None:
    """What ``record`` is compared with: its parent when the format names one (known only once
    its shape was seen: records come in step order), else the checkpoint before it in its run."""
    if record.parent_id is None:
        return previous
    parent = CheckpointRecord(run_id=record.run_id, checkpoint_id=record.parent_id, namespace=record.namespace)
    return parent if _at(parent) in seen else None


def non_finite_paths(state: Any, limit: int = 5, budget: int = MAX_NON_FINITE_NODES) -> list[str]:
    """JSON Pointer paths of NaN/±Inf numbers in ``state`` (at most ``limit``)."""
    found: list[str] = []
    stack: list[tuple[str, Any]] = [("", state)]
    while stack and budget > 0 and len(found) < limit:
        path, value = stack.pop()
        budget -= 1
        if isinstance(value, float):
            if not math.isfinite(value):
                found.append(path or "/")
        elif isinstance(value, Mapping):
            stack.extend((f"{path}/{k}", v) for k, v in value.items())
        elif isinstance(value, (list, tuple)):
            stack.extend((f"{path}/{i}", v) for i, v in enumerate(value))
    return sorted(found)


# a msgpack float64 (0xcb) whose exponent bits are all ones: NaN or ±Inf
_NON_FINITE_FLOAT64 = re.compile(rb"\xcb[\x7f\xff][\xf0-\xff]")


def has_non_finite(state: Any) -> bool:
    """Whether ``state`` holds a NaN/±Inf anywhere.

    The state is packed with msgpack (C speed; every float becomes a float64)
    and the bytes searched for non-finite float64s; only a hit (or a value
    msgpack cannot pack) leads to the Python walk that confirms it."""
    try:
        packed = msgpack.packb(state, default=_as_null)
    except (TypeError, ValueError, OverflowError, RecursionError):
        return bool(non_finite_paths(state))
    return _NON_FINITE_FLOAT64.search(packed) is not None and bool(non_finite_paths(state))


def _as_null(_value: Any) -> None:
    return None


def non_finite_finding(record: CheckpointRecord, state: Any) -> Finding | None:
    if not has_non_finite(state):
        return None
    paths = non_finite_paths(state)
    if not paths:
        return None
    return Finding(Check.NON_FINITE, "warning", f"NaN or infinite number at {', '.join(paths)}",
                   record.run_id, record.namespace, record.checkpoint_id)
