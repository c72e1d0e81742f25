"""The listing of a plain ``SQLiteSession`` store in one tight loop (the 100k-item path).

Rows come in table order (``id`` ascending: sessions interleave), each session's walk state kept
in a small list; per row: one JSON parse, a few dict lookups, memoised trigger/metadata/time text.
Same output as :class:`lastgood.readers.openai_agents.listing.Walk` (which lists branches of an
advanced store and the archived rows).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

from lastgood.readers.base import HeadRecord
from lastgood.readers.common.gc_pause import gc_paused
from lastgood.readers.openai_agents.items import error_text, is_error_output, loads, trigger
from lastgood.readers.openai_agents.listing import (MESSAGE_LIMIT, Listing, Walk, not_an_item, turn_end,
                                                    undecodable)

try:
    import orjson

    def _quoted(text: str) -> str:
        return orjson.dumps(text).decode()
except ImportError:  # pragma: no cover - depends on the environment
    def _quoted(text: str) -> str:
        return json.dumps(text)

# a session's walk state: [parent id, step, turn, last row (cid, micros, trigger, turn, first), tool names]
PARENT, STEP, TURN, LAST, NAMES = range(5)


def seconds(value: Any) -> int:
    """Epoch seconds of a ``created_at`` (SQLite's ``YYYY-MM-DD HH:MM:SS`` UTC text); 0 when unreadable."""
    if isinstance(value, (int, float)):
        return int(value)
    try:
        found = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        return 0
    return int((found if found.tzinfo else found.replace(tzinfo=UTC)).timestamp())


def _head(role: Any, kind: Any, name: Any) -> str:
    """The metadata fields after ``turn`` for an item's role/type/tool (JSON text, memoised)."""
    parts = [f',"{key}":{_quoted(value)}' for key, value in (("role", role), ("type", kind), ("tool", name))
             if isinstance(value, str)]
    return "".join(parts)


def walk_plain(walk: Walk, rows: Iterable[tuple[Any, ...]]) -> Listing:
    """List a plain store's rows (``listing.PLAIN_SQL``) into ``walk.out``."""
    out, wanted, positions = walk.out, walk.wanted, walk.positions
    listed: list[tuple[Any, ...]] = []
    add, add_event = listed.append, out.events.append
    states: dict[str, list[Any]] = {}
    times: dict[Any, int] = {}
    kinds: dict[tuple[Any, Any], str] = {}
    heads: dict[tuple[Any, Any, Any], str] = {}
    with gc_paused():
        for rid, session, created, size, data in rows:
            state = states.get(session)
            if state is None:
                state = states[session] = [None, 0, 0, None, {}]
            secs = times.get(created)
            if secs is None:
                secs = times[created] = seconds(created)
            try:
                item = loads(data)
            except (ValueError, TypeError) as exc:
                item = _bad_item(walk, session, str(rid), exc, data)
            if type(item) is dict:
                get = item.get
                role, kind, name, call_id = get("role"), get("type"), get("name"), get("call_id")
            else:
                role = kind = name = call_id = None
                if item is not _BAD:
                    out.findings.append(not_an_item(walk.layout.messages, rid, item, session, "", str(rid)))
            try:
                trig = kinds.get((role, kind))
            except TypeError:  # an object where a role or type belongs: not memoised
                trig = trigger(role if isinstance(role, str) else None, kind)
            if trig is None:
                trig = kinds[(role, kind)] = trigger(role if isinstance(role, str) else None, kind)
            cid, step = str(rid), state[STEP]
            if trig == "user":
                turn_end(out, session, "", state[LAST])
                state[TURN] += 1
            turn = state[TURN]
            micros = secs * 1_000_000 + step
            try:
                head = heads.get((role, kind, name))
            except TypeError:  # an object where a role, type or name belongs: not memoised
                head = _head(role, kind, name)
            if head is None:
                head = heads[(role, kind, name)] = _head(role, kind, name)
            meta = f'{{"turn":{turn}{head},"call_id":{_quoted(call_id)}}}' if type(call_id) is str \
                else f'{{"turn":{turn}{head}}}'
            add((session, cid, state[PARENT], step, micros, trig, size, meta))
            if trig == "tool_call":
                if type(call_id) is str and type(name) is str:
                    state[NAMES][call_id] = name
                add_event((session, "", cid, micros, "tool_call", name if type(name) is str else None,
                           f"{name if type(name) is str else kind} (call {call_id})"))
            elif trig == "tool_output" and is_error_output(item):
                tool = state[NAMES].get(call_id) if type(call_id) is str else None
                add_event((session, "", cid, micros, "error", tool,
                           f"{tool or 'tool'} (call {call_id}) failed: {error_text(item)}"[:MESSAGE_LIMIT]))
            state[PARENT], state[STEP], state[LAST] = cid, step + 1, (cid, micros, trig, turn, True)
            if wanted and rid in wanted:
                positions[rid] = (step, turn, micros)
        for session, state in states.items():
            turn_end(out, session, "", state[LAST])
            out.heads.append(HeadRecord(session, state[LAST][0], ""))
        _columns(out, listed, walk.layout.messages)
    return out


def _columns(out: Listing, listed: list[tuple[Any, ...]], table: str) -> None:
    """The listed tuples as the listing's columns (one transpose, in C)."""
    if not listed:
        return
    names = ("run_id", "checkpoint_id", "parent_id", "step", "created_at", "trigger", "size_bytes", "metadata")
    c = out.columns
    for name, values in zip(names, zip(*listed)):
        c[name] = values  # type: ignore[assignment]  # a tuple: read-only from here on
    c["namespace"] = [""] * len(listed)
    c["location"] = [f"{table}:{cid}" for cid in c["checkpoint_id"]]


_BAD = object()


def _bad_item(walk: Walk, session: str, cid: str, exc: Exception, data: Any) -> Any:
    out = walk.out
    out.findings.append(undecodable(walk.layout.messages, cid, str(exc).splitlines()[0][:200] if str(exc) else
                                    type(exc).__name__, session, "", cid, data))
    return _BAD
