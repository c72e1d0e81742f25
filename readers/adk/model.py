"""ADK ``events`` rows, as listed, in Lastgood's common model (dialect-neutral).

A dialect (``sqlite.py``, ``postgres.py``) fetches one :data:`Row` per event with SQL alone: the key
columns, the timestamp as epoch microseconds, the size of ``event_data``, a small JSON array of
the fields in :data:`INFO_PATHS` (one parse of ``event_data`` in the database) and, only for events
with ``function_call``/``function_response`` parts, the parts themselves. Here they become:

- checkpoints: one per event, ordered per session by ``(timestamp, id)`` as ADK reads them
  (``step`` = position, ``parent_id`` = the event before); ``trigger`` = what the event is
  (:func:`trigger_of`); metadata: invocation id, author, user id, tools called, error code…;
- events: tool calls, tool errors, model/run errors, aborted invocations (``ended_early``),
  rewinds (naming the invocation rewound before), pauses (long-running tools, confirmations);
- findings: malformed ``event_data``, events of a session that has no ``sessions`` row,
  events whose timestamp sorts them before events written earlier (SQLite rowid order),
  ``event_data.timestamp`` disagreeing with the column.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from operator import itemgetter
from typing import Any

from lastgood.checks import Check
from lastgood.readers.base import EPOCH, EventRecord, Finding, HeadRecord, Status, lazy_schema
from lastgood.readers.adk import columns as col
from lastgood.readers.adk.replay import NOT_UTF8_EVENT
from lastgood.readers.adk.rows import (APP, AUTH, AUTHOR, BRANCH, CONFIRMATIONS, ERROR_CODE, ERROR_MESSAGE, ID,
                                       INFO, INFO_PATHS, INTERRUPTED, INV, JSON_TS, LONG_RUNNING, NOT_UTF8, PARTS,
                                       REWIND, ROLE, SEQ, SESSION, SIZE, TRANSFER, TS, USER, VALID, Row)
from lastgood.readers.common.sessions import Listing, args_text, loads
from lastgood.readers.common.sessions import dumps as _dumps


SessionKey = tuple[str, str, str]  # app_name, user_id, session id

ABORTED = "INVOCATION_ABORTED"
MESSAGE_LIMIT = 2000
TS_TOLERANCE_US = 1000  # event_data.timestamp and the column may differ by rounding
_NO_INFO: list[Any] = [None] * len(INFO_PATHS)


def postgres_paths() -> list[str]:
    """INFO_PATHS as PostgreSQL text-array paths (``#>``)."""
    return ["{" + ",".join(path) + "}" for _, path in INFO_PATHS]


def run_id_of(key: SessionKey, shared_ids: frozenset[str] | set[str]) -> str:
    """The run id of a session: its id, qualified as ``app:user:id`` when the same session id
    exists for several apps or users (ADK's primary key is all three)."""
    return f"{key[0]}:{key[1]}:{key[2]}" if key[2] in shared_ids else key[2]


def trigger_of(info: Sequence[Any], parts: list[dict[str, Any]] | None, valid: Any) -> str:
    """What an event is: rewind, error, tool_call, tool_result, user, model (or its role), event."""
    if valid == 0 or valid == NOT_UTF8:
        return "undecodable"
    if info[REWIND]:
        return "rewind"
    if info[ERROR_CODE]:
        return "error"
    if parts:
        if any(isinstance(p.get("function_call"), dict) for p in parts):
            return "tool_call"
        if any(isinstance(p.get("function_response"), dict) for p in parts):
            return "tool_result"
    if info[AUTHOR] == "user":
        return "user"
    if info[TRANSFER]:
        return "transfer"
    return str(info[ROLE] or "event")


def list_rows(rows: list[Row], shared_ids: frozenset[str], orphans: set[SessionKey],
              check_order: bool) -> Listing:
    """Checkpoint table, events, findings and heads of ``rows`` (whole sessions each).

    One pass per column where it can (this runs over every event of a big store): rows sorted
    as ADK orders a session, each row's small info array parsed once."""
    rows, undated = _sortable(rows)
    rows.sort(key=itemgetter(APP, USER, SESSION, TS, ID))
    keys = list(map(itemgetter(APP, USER, SESSION), rows))
    runs = {key: run_id_of(key, shared_ids) for key in dict.fromkeys(keys)}
    run_ids = [runs[k] for k in keys]
    ids = [r[ID] for r in rows]
    firsts = [i == 0 or keys[i] != keys[i - 1] for i in range(len(rows))]
    steps, step = [], 0
    for first in firsts:
        step = 0 if first else step + 1
        steps.append(step)
    parents = [None if first else ids[i - 1] for i, first in enumerate(firsts)]
    listing = Listing(None)
    listing.heads = [HeadRecord(run_ids[i], ids[i]) for i in range(len(rows)) if i + 1 == len(rows) or firsts[i + 1]]
    triggers, metas, statuses, reasons = _row_columns(rows, run_ids, firsts, listing, check_order)
    listing.findings.extend(_orphan_findings(orphans, shared_ids, set(runs)))
    listing.findings.extend(Finding(Check.METADATA_INVALID, "warning", "the timestamp column is not a date: the "
                                    "event is placed by event_data.timestamp", run_ids[i], "", ids[i])
                            for i in range(len(ids)) if ids[i] in undated)
    listing.checkpoints = _table({"run_id": run_ids, "checkpoint_id": ids, "parent_id": parents, "step": steps,
                                  "created_at": [r[TS] for r in rows], "trigger": triggers, "status": statuses,
                                  "status_reason": reasons, "size_bytes": [r[SIZE] for r in rows],
                                  "agent": [r[APP] for r in rows], "metadata": metas})
    return listing


def _sortable(rows: list[Row]) -> tuple[list[Row], set[str]]:
    """Rows whose timestamp column is not a date get event_data's (or 0), so every row sorts;
    and the ids of those rows."""
    rows = rows if isinstance(rows, list) else list(rows)
    if all(r[TS] is not None for r in rows):
        return rows, set()
    undated = {r[ID] for r in rows if r[TS] is None}
    return [r if r[TS] is not None else (*r[:TS], _micros(r, _info(r)), *r[TS + 1:]) for r in rows], undated


def _row_columns(rows: list[Row], run_ids: list[str], firsts: list[bool], listing: Listing,
                 check_order: bool) -> tuple[list[str], list[str], list[str], list[str | None]]:
    """Trigger, metadata, status and status reason of each row; its events and findings. Most
    events are plain (no tool part, no error, no rewind or pause): they take the short way."""
    triggers, metas, statuses, reasons = [], [], [], []
    ok, corrupt, n_info, empty = Status.OK.value, Status.CORRUPT.value, len(INFO_PATHS), _NO_INFO
    add_trigger, add_meta, add_status, add_reason = triggers.append, metas.append, statuses.append, reasons.append
    previous_seq = None
    for i, row in enumerate(rows):
        seq, info_text = row[SEQ], row[INFO]
        info = loads(info_text) if info_text is not None else empty
        if len(info) != n_info:
            info = empty
        (author, role, code, _message, rewind, json_ts, branch, interrupted, long_running, confirmations, auth,
         transfer) = info
        in_order = not check_order or firsts[i] or previous_seq is None or seq is None or previous_seq < seq
        previous_seq = seq
        if (row[VALID] == 1 and in_order and not (
                code or rewind or interrupted or long_running or confirmations or auth or branch or transfer)
                and (json_ts is None or -TS_TOLERANCE_US <= json_ts * 1_000_000 - row[TS] <= TS_TOLERANCE_US)):
            if row[PARTS] is None:
                add_trigger("user" if author == "user" else role or "event")
                if author is None or (code, branch, rewind, transfer) != (None, None, None, None):  # as _metadata
                    add_meta(_dumps(_metadata(row, info, None)))
                else:
                    add_meta(_dumps({"app_name": row[APP], "author": author, "invocation_id": row[INV], "role": role,
                                     "user_id": row[USER]} if role is not None else
                                    {"app_name": row[APP], "author": author, "invocation_id": row[INV],
                                     "user_id": row[USER]}))
            else:  # a plain tool call or result: its parts read once (what the long way below gives)
                trig, meta = _tool_row(row, run_ids[i], info, listing.events)
                add_trigger(trig)
                add_meta(meta)
            add_status(ok)
            add_reason(None)
            continue
        parts = _parts(row[PARTS])
        problem = _problem(row, info, run_ids[i], None if firsts[i] else rows[i - 1], listing.findings, check_order)
        add_trigger(trigger_of(info, parts, row[VALID]))
        add_meta(_dumps(_metadata(row, info, parts)))
        add_status(corrupt if problem else ok)
        add_reason(problem)
        if parts or _noteworthy(info):
            listing.events.extend(events_of(row, run_ids[i], info, parts,
                                            EPOCH + timedelta(microseconds=row[TS])))
    return triggers, metas, statuses, reasons


def _tool_row(row: Row, run_id: str, info: Sequence[Any], events: list[EventRecord]) -> tuple[str, str]:
    """Trigger and metadata of an event with parts and nothing else of note (no error, rewind,
    pause, branch or transfer), its tool calls and failed tool results added to ``events``: the same
    as :func:`trigger_of`, :func:`_metadata` and :func:`events_of` give, in one pass over the parts."""
    meta = _metadata(row, info, None)
    tools: list[Any] = []
    results: list[Any] = []
    created = None
    for part in _parts(row[PARTS]) or ():
        call, result = part.get("function_call"), part.get("function_response")
        if isinstance(call, dict):
            name = call.get("name")
            tools.append(name)
            created = created or EPOCH + timedelta(microseconds=row[TS])
            events.append(EventRecord(run_id, "tool_call", "", row[ID], created, _text(name), _text(call.get("id")),
                                      _short(f"{name}({args_text(call.get('args'))})")))
        if isinstance(result, dict):
            name = result.get("name")
            results.append(name)
            if _is_error(result.get("response")):
                created = created or EPOCH + timedelta(microseconds=row[TS])
                events.append(EventRecord(run_id, "error", "", row[ID], created, _text(name),
                                          _text(result.get("id")),
                                          _short(f"{name}: {args_text(result.get('response'))}")))
    if tools:
        meta["tool_calls"] = tools
    if results:
        meta["tool_results"] = results
    trig = ("tool_call" if tools else "tool_result" if results else "user" if info[AUTHOR] == "user"
            else str(info[ROLE] or "event"))
    return trig, _dumps(meta)


def _noteworthy(info: Sequence[Any]) -> bool:
    """The row gives events beyond its tool calls (an error, a rewind, a pause)."""
    return bool(info[ERROR_CODE] or info[REWIND] or info[INTERRUPTED] or info[LONG_RUNNING]
                or info[CONFIRMATIONS] or info[AUTH])


def _info(row: Row) -> list[Any]:
    text = row[INFO]
    if text is None:
        return _NO_INFO
    try:
        value = loads(text)
    except ValueError:
        return _NO_INFO
    return value if isinstance(value, list) and len(value) == len(INFO_PATHS) else _NO_INFO


def _parts(text: Any) -> list[dict[str, Any]] | None:
    if text is None:
        return None
    try:
        value = loads(text) if isinstance(text, (str, bytes)) else text
    except ValueError:
        return None
    return [p for p in value if isinstance(p, dict)] if isinstance(value, list) else None


def _micros(row: Row, info: Sequence[Any]) -> int:
    if row[TS] is not None:
        return int(row[TS])
    json_ts = info[JSON_TS]
    return int(round(json_ts * 1_000_000)) if isinstance(json_ts, (int, float)) else 0


def _problem(row: Row, info: Sequence[Any], run_id: str, previous: Row | None, findings: list[Finding],
             check_order: bool) -> str | None:
    """A listed problem of the row (it makes the checkpoint corrupt); warnings become findings."""
    where = (run_id, "", row[ID])
    if row[VALID] == NOT_UTF8:
        reason = NOT_UTF8_EVENT
        findings.append(Finding(Check.UNDECODABLE, "error", reason, *where))
        return reason
    if row[VALID] == 0:
        reason = "event_data is not a JSON object: ADK cannot load this event (get_session fails on it)"
        findings.append(Finding(Check.UNDECODABLE, "error", reason, *where))
        return reason
    if row[VALID] is None:
        findings.append(Finding(Check.METADATA_INVALID, "warning", "event_data is NULL: ADK loads an empty "
                                "event (no author, no content, no state delta)", *where))
    if isinstance(json_ts := info[JSON_TS], (int, float)) and abs(
            json_ts * 1_000_000 - row[TS]) > TS_TOLERANCE_US:
        findings.append(Finding(Check.METADATA_INVALID, "warning", "event_data.timestamp and the timestamp "
                                "column disagree: ADK orders events by the column", *where))
    if check_order and previous is not None and previous[SEQ] is not None and row[SEQ] is not None \
            and previous[SEQ] > row[SEQ]:
        findings.append(Finding(
            Check.OUT_OF_ORDER, "warning", f"event {previous[ID]} was written after this one but its "
            "timestamp sorts it before: ADK replays the session in timestamp order (a clock went back?)",
            where[0], "", previous[ID]))
    return None


def _metadata(row: Row, info: Sequence[Any], parts: list[dict[str, Any]] | None) -> dict[str, Any]:
    meta: dict[str, Any] = {"invocation_id": row[INV], "user_id": row[USER], "app_name": row[APP]}
    for name, index in _META_FIELDS:
        if info[index] is not None:
            meta[name] = info[index]
    if parts:
        tools = [p["function_call"].get("name") for p in parts if isinstance(p.get("function_call"), dict)]
        results = [p["function_response"].get("name") for p in parts if isinstance(p.get("function_response"), dict)]
        if tools:
            meta["tool_calls"] = tools
        if results:
            meta["tool_results"] = results
    return meta


_META_FIELDS = (("author", AUTHOR), ("role", ROLE), ("branch", BRANCH), ("error_code", ERROR_CODE),
                ("rewind_before_invocation_id", REWIND), ("transfer_to_agent", TRANSFER))


# ---- events ---------------------------------------------------------------------------


def events_of(row: Row, run_id: str, info: Sequence[Any], parts: list[dict[str, Any]] | None,
              created: datetime | None = None) -> list[EventRecord]:
    """The EventRecords one event gives (tool calls, errors, rewinds, pauses)."""
    out = []
    checkpoint = row[ID]
    for part in parts or ():
        call, result = part.get("function_call"), part.get("function_response")
        if isinstance(call, dict):
            name = call.get("name")
            out.append(EventRecord(run_id, "tool_call", "", checkpoint, created, _text(name), _text(call.get("id")),
                                   _short(f"{name}({args_text(call.get('args'))})")))
        if isinstance(result, dict) and _is_error(result.get("response")) and not info[ERROR_CODE]:
            name = result.get("name")
            out.append(EventRecord(run_id, "error", "", checkpoint, created, _text(name), _text(result.get("id")),
                                   _short(f"{name}: {args_text(result.get('response'))}")))
    code = info[ERROR_CODE]
    if code:
        kind = "ended_early" if code == ABORTED else "error"
        out.append(EventRecord(run_id, kind, "", checkpoint, created, "error_code", None,
                               _short(f"{code}: {info[ERROR_MESSAGE] or ''}".rstrip(": "))))
    if info[REWIND]:
        out.append(EventRecord(run_id, "rewind", "", checkpoint, created, "rewind", None,
                               f"rewound the session to before invocation {info[REWIND]}"))
    out.extend(EventRecord(run_id, "interrupt", "", checkpoint, created, "pause", None, text) for text in _pauses(info))
    return out


def _pauses(info: Sequence[Any]) -> list[str]:
    found = []
    if info[INTERRUPTED]:
        found.append("the model's turn was interrupted")
    if isinstance(info[LONG_RUNNING], list) and info[LONG_RUNNING]:
        found.append(f"waiting on long-running tool call(s) {', '.join(map(str, info[LONG_RUNNING]))}")
    if isinstance(info[CONFIRMATIONS], dict) and info[CONFIRMATIONS]:
        found.append(f"asks a human to confirm tool call(s) {', '.join(map(str, info[CONFIRMATIONS]))}")
    if isinstance(info[AUTH], dict) and info[AUTH]:
        found.append(f"asks the user to authenticate for {', '.join(map(str, info[AUTH]))}")
    return found


def _is_error(response: Any) -> bool:
    return isinstance(response, dict) and response.get("error") not in (None, "", False)


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _short(text: str) -> str:
    return text if len(text) <= MESSAGE_LIMIT else text[:MESSAGE_LIMIT] + "…"


def _orphan_findings(orphans: set[SessionKey], shared_ids: frozenset[str], listed: set[Any]) -> list[Finding]:
    return [Finding(Check.SESSION_MISSING, "error", f"events of session {key[2]!r} (app {key[0]!r}, user "
                    f"{key[1]!r}) whose sessions row is gone: ADK cannot load them (get_session returns None)",
                    run_id_of(key, shared_ids)) for key in sorted(orphans & listed)]


# ---- the table --------------------------------------------------------------------------


def _table(cols: dict[str, Any]) -> Any:
    n = len(cols["checkpoint_id"])
    return col.table({
        "run_id": col.string_array(cols["run_id"]),
        "namespace": col.constant_strings("", n),
        "checkpoint_id": col.string_array(cols["checkpoint_id"]),
        "parent_id": col.string_array(cols["parent_id"]),
        "step": col.int64_array(cols["step"]),
        "created_at": col.timestamp_array(cols["created_at"]),
        "trigger": col.string_array(cols["trigger"]),
        "kind": col.constant_strings("full", n),
        "status": col.string_array(cols["status"]),
        "status_reason": col.string_array(cols["status_reason"]),
        "size_bytes": col.int64_array(cols["size_bytes"]),
        "agent": col.string_array(cols["agent"]),
        "codec": col.constant_strings("json", n),
        "metadata": col.string_array(cols["metadata"]),
    }, lazy_schema("CHECKPOINT_SCHEMA"))


def events_table(events: Sequence[EventRecord]) -> Any:
    """EVENT_SCHEMA rows of ``events`` (built from buffers)."""
    names = ("run_id", "namespace", "checkpoint_id", "kind", "channel", "task_id", "message")
    columns = {name: col.string_array([getattr(e, name) or ("" if name == "namespace" else None)
                                       for e in events]) for name in names}
    columns["created_at"] = col.timestamp_array([_epoch_micros(e.created_at) for e in events])
    return col.table(columns, lazy_schema("EVENT_SCHEMA"))


def _epoch_micros(value: datetime | None) -> int | None:
    if value is None:
        return None
    delta = value - EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
