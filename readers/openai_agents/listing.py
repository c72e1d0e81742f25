"""The listing of a session store: one SQL pass, one walk in Python, Arrow columns.

The walk sees each conversation in order and keeps only its previous row: parent, step and turn
need no window functions (SQLite sorts for those, ~4× the scan). A plain store is read in table
order (``plainwalk``: sessions interleave, each one's ids ascend), an advanced store's branches
by ``sequence_number`` (:class:`Walk`). Each item's JSON is parsed once (orjson when installed;
the SDK's own ``json.loads`` decides what orjson refuses) for its role, type, tool name, call id.

Per checkpoint: ``checkpoint_id`` = the row id (``agent_messages.id`` for a plain session,
``message_structure.id`` for a branch of an advanced one: an item shared by two branches is a
checkpoint of each); ``parent_id`` = the item before it; ``step`` = its position (0-based);
``created_at`` = the row's time (SQLite ``CURRENT_TIMESTAMP``: whole seconds, UTC) plus its step
in microseconds, so the items of one second keep their order wherever times are compared;
``trigger`` = the item's kind (``lastgood.readers.openai_agents.items``); metadata: turn, role,
type, tool, call_id (+ message_id, branch, sequence for advanced rows; the turn's usage on its
first item where ``turn_usage`` has it).

Events: a ``tool_call`` per tool call, an ``error`` per tool output that carries an error, an
``ended_early`` on the last item of a turn that has no final assistant message. An item copied
to another branch (``create_branch_from_turn``) gives its events once, on the branch it was
first written to.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from lastgood.checks import Check
from lastgood.readers.base import Finding, HeadRecord, Status, lazy_schema
from lastgood.readers.common.gc_pause import gc_paused
from lastgood.readers.common.sqlite import NotUtf8
from lastgood.readers.openai_agents import columns as col
from lastgood.readers.openai_agents.items import error_text, is_error_output, loads, trigger
from lastgood.readers.openai_agents.schema import Layout, namespace_of, quote

try:
    import orjson

    def _dumps(value: Any) -> str:
        return orjson.dumps(value).decode()
except ImportError:  # pragma: no cover - depends on the environment
    def _dumps(value: Any) -> str:
        return json.dumps(value, separators=(",", ":"))

MESSAGE_LIMIT = 500
ARCHIVE_PREFIX = "archived:"  # the location of a row a restore took out
SECS = "CAST(strftime('%s', {col}) AS INTEGER)"
# a plain store's rows for the fast walk (table order: sessions interleave, ids ascend)
PLAIN_SQL = "SELECT id, session_id, created_at, length(CAST(message_data AS BLOB)), message_data FROM {m} m {where}"
# Walk's rows: (0 id, 1 session, 2 branch, 3 seconds, 4 size, 5 message_data, 6 message id, 7 sequence,
#  8 turn, 9 tool name, 10 message type)
ADVANCED_SQL = """SELECT s.id, s.session_id, s.branch_id, {secs}, length(CAST(m.message_data AS BLOB)),
    m.message_data, s.message_id, s.sequence_number, s.user_turn_number, s.tool_name, s.message_type
    FROM message_structure s LEFT JOIN {m} m ON m.id = s.message_id {where}
    ORDER BY s.session_id, s.branch_id, s.sequence_number, s.id"""
USAGE_SQL = """SELECT session_id, branch_id, user_turn_number, requests, input_tokens, output_tokens, total_tokens,
    input_tokens_details, output_tokens_details FROM turn_usage {where}"""
SESSIONS_FILTER = "WHERE {alias}session_id IN (SELECT value FROM json_each(?))"


def listing_sql(layout: Layout, sessions: list[str] | None) -> tuple[str, tuple[Any, ...]]:
    """The listing's query (every session, or only ``sessions``) and its parameters: an advanced
    store's :data:`ADVANCED_SQL`, a plain one's ``plainwalk.PLAIN_SQL`` (table order)."""
    alias = "s." if layout.advanced else "m."
    where = SESSIONS_FILTER.format(alias=alias) if sessions is not None else ""
    sql = (ADVANCED_SQL if layout.advanced else PLAIN_SQL).format(
        m=layout.m, where=where, secs=SECS.format(col=f"{alias}created_at"))
    return sql, ((json.dumps(sessions),) if sessions is not None else ())


def usage_rows(conn: Any, sessions: list[str] | None) -> dict[tuple[str, str, int], dict[str, Any]]:
    """``turn_usage`` by (session, branch, turn): what ``store_run_usage`` recorded."""
    where = SESSIONS_FILTER.format(alias="") if sessions is not None else ""
    params = (json.dumps(sessions),) if sessions is not None else ()
    out = {}
    for session, branch, turn, requests, inp, outp, total, in_details, out_details in conn.execute(
            USAGE_SQL.format(where=where), params):
        usage: dict[str, Any] = {"requests": requests, "input_tokens": inp, "output_tokens": outp,
                                 "total_tokens": total}
        for key, raw in (("input_tokens_details", in_details), ("output_tokens_details", out_details)):
            detail = _json_or_none(raw)
            if isinstance(detail, dict):
                usage[key] = detail
        out[(session, branch, turn)] = usage
    return out


def _json_or_none(raw: Any) -> Any:
    if not isinstance(raw, (str, bytes)):
        return None
    try:
        return loads(raw)
    except ValueError:
        return None


@dataclass
class Listing:
    """What one pass over the rows found."""

    columns: dict[str, list[Any]] = field(default_factory=lambda: {k: [] for k in _COLUMNS})
    events: list[EventRow] = field(default_factory=list)
    heads: list[HeadRecord] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)  # per checkpoint (structure depth)

    @property
    def count(self) -> int:
        return len(self.columns["checkpoint_id"])

    def table(self) -> Any:
        return checkpoint_table(self.columns)


# run_id, namespace, checkpoint_id, created_at (microseconds), kind, channel, message
EventRow = tuple[str, str, str, int, str, "str | None", str]
_EVENT_COLUMNS = ("run_id", "namespace", "checkpoint_id", "created_at", "kind", "channel", "message")
_COLUMNS = ("run_id", "namespace", "checkpoint_id", "parent_id", "step", "created_at", "trigger", "size_bytes",
            "location", "metadata")


def checkpoint_table(c: Mapping[str, list[Any]]) -> Any:
    """An Arrow table in CHECKPOINT_SCHEMA from the walk's column lists."""
    import pyarrow as pa

    n = len(c["checkpoint_id"])
    arrays = {"run_id": col.strings(c["run_id"]), "namespace": col.strings(c["namespace"]),
              "checkpoint_id": col.strings(c["checkpoint_id"]), "parent_id": col.strings(c["parent_id"]),
              "step": col.ints(c["step"]), "created_at": col.ints(c["created_at"], pa.timestamp("us", tz="UTC")),
              "trigger": col.strings(c["trigger"]), "kind": col.constant("full", n),
              "status": col.strings(c["status"]) if "status" in c else col.constant("ok", n),
              "status_reason": col.strings(c["status_reason"]) if "status_reason" in c else col.constant(None, n),
              "size_bytes": col.ints(c["size_bytes"]), "checksum": col.constant(None, n),
              "agent": col.constant(None, n), "codec": col.constant("json", n),
              "location": col.strings(c["location"]), "metadata": col.strings(c["metadata"])}
    return col.table(arrays, lazy_schema("CHECKPOINT_SCHEMA"))


def events_table(events: list[EventRow]) -> Any:
    """An Arrow table in EVENT_SCHEMA from the walk's event rows."""
    import pyarrow as pa

    values = dict(zip(_EVENT_COLUMNS, map(list, zip(*events)))) if events else {k: [] for k in _EVENT_COLUMNS}
    arrays = {k: col.strings(v) for k, v in values.items() if k != "created_at"}
    arrays["created_at"] = col.ints(values["created_at"], pa.timestamp("us", tz="UTC"))
    arrays["task_id"] = col.constant(None, len(events))
    return col.table(arrays, lazy_schema("EVENT_SCHEMA"))


# ---- the walk ----------------------------------------------------------------------------------


class Walk:
    """Turns the listing's rows into checkpoint columns, events, heads and findings: an advanced
    store's rows (:data:`ADVANCED_SQL`, each branch in order) by :meth:`rows`, a plain store's by
    ``plainwalk.walk_plain``; the archived rows of either by :meth:`archived_row`."""

    def __init__(self, layout: Layout, usage: Mapping[tuple[str, str, int], dict[str, Any]] | None = None,
                 first_refs: Mapping[int, int] | None = None, wanted: set[int] | None = None) -> None:
        self.layout = layout
        self.usage = usage or {}
        self.first_refs = first_refs or {}
        self.wanted = wanted or set()  # rows whose (step, turn, micros) archived rows need
        self.positions: dict[int, tuple[int, int, int]] = {}
        self.out = Listing()
        self.archived = Listing()
        self.table = "message_structure" if layout.advanced else layout.messages
        self.key: tuple[str, str | None] | None = None
        self._kinds: dict[tuple[Any, Any], str] = {}
        self._reset()

    def _reset(self) -> None:
        self.parent: str | None = None
        self.step = 0
        self.turn = 0
        self.last_seq: Any = None
        self.last: tuple[Any, ...] | None = None  # the previous row: (cid, micros, trigger, turn, first)
        self.names: dict[str, str] = {}

    def rows(self, rows: Iterable[tuple[Any, ...]]) -> Listing:
        with gc_paused():
            for row in rows:
                self.row(row)
            self._close_partition()
        return self.out

    def row(self, row: tuple[Any, ...]) -> None:
        rid, session, branch, secs, size, data, msg_id, seq, turn, tool, mtype = row
        key = (session, branch)
        if key != self.key:
            self._close_partition()
            self.key = key
        cid = str(rid)
        namespace = namespace_of(branch) if self.layout.advanced else ""
        item, problem = _parse(data)
        role, kind, name, call_id = _fields(item)
        trig = self._trigger(role, kind if mtype is None else mtype)
        this_turn = self._turn(trig, turn)
        if self.last is not None and this_turn != self.last[3]:
            self._turn_end(session, namespace)
        micros = (secs or 0) * 1_000_000 + self.step
        first = self.first_refs.get(msg_id, rid) == rid
        meta = self._metadata(this_turn, role, kind, tool or name, call_id, row)
        self._append(session, namespace, cid, micros, trig, size, meta, rid)
        self._findings(session, namespace, cid, rid, msg_id, data, problem, item, seq)
        if first:
            self._events(session, namespace, cid, micros, trig, item, tool or name, call_id)
        self.parent, self.last = cid, (cid, micros, trig, this_turn, first)
        if rid in self.wanted:
            self.positions[rid] = (self.step, this_turn, micros)
        self.step += 1

    def archived_row(self, row: tuple[Any, ...], parent: int | None, step: int, turn: int, action_id: str) -> int:
        """One row a restore took out (listed superseded, with the parent it had); its micros."""
        rid, session, branch, secs, size, data, msg_id, seq, _turn, tool, mtype = row
        namespace = namespace_of(branch) if self.layout.advanced else ""
        item, _problem = _parse(data)
        role, kind, name, call_id = _fields(item)
        trig = self._trigger(role, kind if mtype is None else mtype)
        micros = (secs or 0) * 1_000_000 + step
        meta = json.loads(self._metadata(turn, role, kind, tool or name, call_id, row))
        meta.pop("usage", None)
        meta["archived_by"] = action_id
        c = self.archived.columns
        values = {"run_id": session, "namespace": namespace, "checkpoint_id": str(rid),
                  "parent_id": None if parent is None else str(parent), "step": step, "created_at": micros,
                  "trigger": trig, "size_bytes": size, "location": f"{ARCHIVE_PREFIX}{self.table}:{rid}",
                  "metadata": _dumps(meta), "status": Status.SUPERSEDED,
                  "status_reason": f"taken out of the session by Lastgood action {action_id} (kept in its archive "
                                   f"table; `lastgood undo {action_id}` or a restore to it puts it back)"}
        for key, value in values.items():
            c.setdefault(key, []).append(value)
        if self.first_refs.get(msg_id, rid) == rid:
            self._events(session, namespace, str(rid), micros, trig, item, tool or name, call_id)
        return micros

    def _trigger(self, role: Any, kind: Any) -> str:
        memo_key = (role, kind)
        try:
            found = self._kinds.get(memo_key)
        except TypeError:  # an object where a role or type belongs: not memoised
            return trigger(role if isinstance(role, str) else None, kind)
        if found is None:
            found = self._kinds[memo_key] = trigger(role if isinstance(role, str) else None, kind)
        return found

    def _turn(self, trig: str, turn: Any) -> int:
        if self.layout.advanced:
            self.turn = turn if isinstance(turn, int) else self.turn
        elif trig == "user":
            self.turn += 1
        return self.turn

    def _metadata(self, turn: int, role: Any, kind: Any, tool: Any, call_id: Any, row: tuple[Any, ...]) -> str:
        meta: dict[str, Any] = {"turn": turn}
        if isinstance(role, str):
            meta["role"] = role
        if isinstance(kind, str):
            meta["type"] = kind
        if isinstance(tool, str):
            meta["tool"] = tool
        if isinstance(call_id, str):
            meta["call_id"] = call_id
        if self.layout.advanced:
            meta.update(message_id=row[6], branch=row[2], sequence=row[7])
            if self.last is None or self.last[3] != turn:
                usage = self.usage.get((row[1], row[2], turn))
                if usage is not None:
                    meta["usage"] = usage
        return _dumps(meta)

    def _append(self, session: str, namespace: str, cid: str, micros: int, trig: str, size: Any, meta: str,
                rid: int) -> None:
        c = self.out.columns
        c["run_id"].append(session)
        c["namespace"].append(namespace)
        c["checkpoint_id"].append(cid)
        c["parent_id"].append(self.parent)
        c["step"].append(self.step)
        c["created_at"].append(micros)
        c["trigger"].append(trig)
        c["size_bytes"].append(size)
        c["location"].append(f"{self.table}:{rid}")
        c["metadata"].append(meta)

    def _findings(self, session: str, namespace: str, cid: str, rid: int, msg_id: Any, data: Any,
                  problem: str | None, item: Any, seq: Any) -> None:
        where = (session, namespace, cid)
        if data is None and self.layout.advanced:
            self.out.findings.append(missing_message(rid, msg_id, *where))
        elif problem is not None:
            self.out.findings.append(undecodable(self.layout.messages, msg_id, problem, *where, data=data))
        elif not isinstance(item, dict):
            self.out.findings.append(not_an_item(self.layout.messages, msg_id, item, *where))
        if seq is not None and seq == self.last_seq:
            self.out.findings.append(duplicate_sequence(seq, *where))
        self.last_seq = seq

    def _events(self, session: str, namespace: str, cid: str, micros: int, trig: str, item: Any,
                tool: Any, call_id: Any) -> None:
        if trig == "tool_call":
            if isinstance(call_id, str) and isinstance(tool, str):
                self.names[call_id] = tool
            label = tool if isinstance(tool, str) else item.get("type") if isinstance(item, dict) else "tool"
            self._event(session, namespace, cid, micros, "tool_call", f"{label} (call {call_id})", tool)
        elif trig == "tool_output" and is_error_output(item):
            tool = self.names.get(call_id) if isinstance(call_id, str) else None
            text = error_text(item)
            self._event(session, namespace, cid, micros, "error",
                        f"{tool or 'tool'} (call {call_id}) failed: {text}", tool)

    def _event(self, session: str, namespace: str, cid: str, micros: int, kind: str, message: str,
               channel: Any = None) -> None:
        self.out.events.append((session, namespace, cid, micros, kind,
                                channel if isinstance(channel, str) else None, message[:MESSAGE_LIMIT]))

    def _turn_end(self, session: str, namespace: str) -> None:
        """The previous row ended a turn: an ``ended_early`` event unless it is the answer."""
        turn_end(self.out, session, namespace, self.last)

    def _close_partition(self) -> None:
        if self.key is not None and self.last is not None:
            session, branch = self.key
            namespace = namespace_of(branch) if self.layout.advanced else ""
            self._turn_end(session, namespace)
            self.out.heads.append(HeadRecord(session, self.last[0], namespace))
        self._reset()


def turn_end(out: Listing, session: str, namespace: str, last: tuple[Any, ...] | None) -> None:
    """``last`` = (cid, micros, trigger, turn, first) ended its turn: ``ended_early`` unless it is the answer."""
    if last is None:
        return
    cid, micros, trig, turn, first = last
    if turn >= 1 and trig != "assistant" and first:
        out.events.append((session, namespace, cid, micros, "ended_early", None,
                           f"turn {turn} ended without a final assistant message (its last item is {trig}): "
                           "the run raised, hit max_turns, or was cut off"))


def _parse(data: Any) -> tuple[Any, str | None]:
    if data is None:
        return None, None
    try:
        return loads(data), None
    except (ValueError, UnicodeDecodeError) as exc:
        return None, str(exc).splitlines()[0][:200]


def _fields(item: Any) -> tuple[Any, Any, Any, Any]:
    if type(item) is not dict:
        return None, None, None, None
    get = item.get
    return get("role"), get("type"), get("name"), get("call_id")


# ---- findings ------------------------------------------------------------------------------------


def undecodable(table: str, msg_id: Any, problem: str, run: str, ns: str, cid: str,
                data: Any = None) -> Finding:
    if isinstance(data, NotUtf8):  # Python's sqlite3 fails the SDK's whole query on it
        return Finding(Check.UNDECODABLE, "error", f"{table} row {msg_id}: message_data is not UTF-8 text "
                       f"({problem}); the SDK cannot read this session (get_items fails on it)", run, ns, cid)
    return Finding(Check.UNDECODABLE, "error", f"{table} row {msg_id}: message_data is not valid JSON "
                   f"({problem}); the SDK skips this item, the rest of the session loads", run, ns, cid)


def not_an_item(table: str, msg_id: Any, value: Any, run: str, ns: str, cid: str) -> Finding:
    return Finding(Check.ROW_INVALID, "warning", f"{table} row {msg_id}: message_data is JSON but not an "
                   f"item object ({type(value).__name__})", run, ns, cid)


def missing_message(sid: Any, msg_id: Any, run: str, ns: str, cid: str) -> Finding:
    return Finding(Check.MISSING, "error", f"message_structure row {sid} points at message {msg_id}, which is "
                   "not in the messages table: the SDK skips it", run, ns, cid)


def duplicate_sequence(seq: Any, run: str, ns: str, cid: str) -> Finding:
    return Finding(Check.SEQUENCE_DUPLICATE, "warning", f"sequence_number {seq} is used twice on this branch: "
                   "the order of these items is undefined", run, ns, cid)


def orphan_findings(conn: Any, layout: Layout, sessions: list[str] | None = None) -> list[Finding]:
    """Sessions whose items have no row in the sessions table (store-level findings)."""
    if layout.s is None:
        return []
    where = "AND m.session_id IN (SELECT value FROM json_each(?))" if sessions is not None else ""
    params = (json.dumps(sessions),) if sessions is not None else ()
    rows = conn.execute(f"""SELECT m.session_id, count(*), min(m.id), max(m.id) FROM {layout.m} m
        WHERE NOT EXISTS (SELECT 1 FROM {layout.s} s WHERE s.session_id = m.session_id) {where}
        GROUP BY m.session_id""", params).fetchall()
    return [Finding(Check.SESSION_MISSING, "warning",
                    f"{n} items (ids {lo}-{hi}) of session {session!r} have no row in {quote(layout.sessions or '')}: "
                    "the SDK still reads them, but the session was not created by it (or its row was deleted)",
                    session) for session, n, lo, hi in rows]
