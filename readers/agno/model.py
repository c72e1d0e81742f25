"""Agno ``agno_runs`` rows, as listed, in Lastgood's common model (dialect-neutral).

A dialect fetches one :data:`Row` per run with SQL alone (the columns Agno mirrors out of
``run_data``, plus one small JSON array of :data:`INFO_PATHS`); runs still held in a session's legacy
Agno 2.x ``runs`` column are turned into the same rows by :func:`legacy_rows`. Here they become:

- checkpoints: one per run (id = ``run_id``), ordered per session as Agno's loader orders them
  (``run_index``, ``created_at``, ``run_id``): ``step`` = position, ``parent_id`` = the run before;
  ``trigger`` = the run's status in lower case (``completed``, ``error``, ``paused``…); ``agent`` =
  ``agent_id`` (or team/workflow id); metadata: user id, run type, status, run index, model, the
  tools called, ``parent_run_id`` (a team member's run), ``forked_from_session_id``;
- events: tool calls, tool errors (``tool_call_error``), runs that ended with status ``ERROR``
  (with Agno's error text), ``PAUSED`` runs waiting on a human (``interrupt``, with what they wait
  for), ``CANCELLED`` runs (``ended_early``);
- findings: ``run_data`` that is not a JSON object, runs of a session that has no
  ``agno_sessions`` row.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Any

from lastgood.checks import Check
from lastgood.readers.adk import columns as col
from lastgood.readers.base import EPOCH, EventRecord, Finding, HeadRecord, Status, lazy_schema
from lastgood.readers.common.sessions import Listing, args_text, dumps, loads


NOTABLE = ("ERROR", "PAUSED", "CANCELLED")  # statuses whose content says why (an error, a question)
INFO_PATHS = (("model",), ("forked_from_session_id",), ("tools",), ("requirements",), ("agent_name",),
              ("team_id",))
MODEL, FORKED, TOOLS, REQUIREMENTS, AGENT_NAME, TEAM_IN_DATA, CONTENT = range(7)

# a listed row: (seq, session, run id, run_index, created_at (s), updated_at (s), status, run_type,
#                agent_id, team_id, workflow_id, user_id, parent_run_id, size, info JSON | None,
#                valid 1 | 0, location)
Row = tuple[Any, ...]
(SEQ, SESSION, RUN, INDEX, CREATED, UPDATED, STATUS, RUN_TYPE, AGENT, TEAM, WORKFLOW, USER, PARENT, SIZE, INFO,
 VALID, LOCATION) = range(17)
TABLE_LOCATION = "agno_runs"
MESSAGE_LIMIT = 2000


def sqlite_info() -> str:
    """The INFO JSON array as SQLite computes it (``content`` only for notable statuses)."""
    paths = ", ".join(f"'$.{'.'.join(p)}'" for p in INFO_PATHS)
    notable = ", ".join(f"'{s}'" for s in NOTABLE)
    return (f"json_insert(json_extract(run_data, {paths}), '$[#]', CASE WHEN status IN ({notable}) "
            "THEN json_extract(run_data, '$.content') END)")


def postgres_info() -> str:
    notable = ", ".join(f"'{s}'" for s in NOTABLE)
    values = ", ".join(f"run_data #> '{{{','.join(p)}}}'" for p in INFO_PATHS)
    return (f"jsonb_build_array({values}, CASE WHEN status IN ({notable}) "
            "THEN run_data -> 'content' END)::text")


def order_key(row: Row) -> tuple[Any, ...]:
    """Agno's order of a session's runs: runs only in the legacy column first, in its order; then
    ``run_index``, ``created_at``, ``run_id`` (NULLs first, as SQL sorts them)."""
    location = row[LOCATION]
    if isinstance(location, str) and location.startswith("legacy:"):
        return (row[SESSION], 0, int(location[7:]), 0, "")
    index = row[INDEX]
    return (row[SESSION], 1 if index is None else 2, index or 0, row[CREATED] or 0, row[RUN])


# ---- legacy (Agno 2.x) runs --------------------------------------------------------------------


def legacy_rows(session: str, blob: Any, table_ids: set[str], agent: Any, user: Any) -> list[Row]:
    """The runs of a session's legacy ``runs`` column not (yet) in ``agno_runs``, as listed rows
    (the table wins on a run id in both, as Agno's ``merge_runs_table_with_legacy_blob`` does)."""
    runs = loads(blob) if isinstance(blob, (str, bytes)) else blob
    if not isinstance(runs, list):
        return []
    rows = []
    for position, run in enumerate(runs):
        if not isinstance(run, Mapping) or not isinstance(run.get("run_id"), str) or run["run_id"] in table_ids:
            continue
        info = [run.get(p[0]) for p in INFO_PATHS] + [run.get("content") if run.get("status") in NOTABLE else None]
        rows.append((None, session, run["run_id"], None, run.get("created_at"), run.get("created_at"),
                     run.get("status"), "agent" if run.get("agent_id") else "team", run.get("agent_id") or agent,
                     run.get("team_id"), run.get("workflow_id"), run.get("user_id") or user,
                     run.get("parent_run_id"), len(json.dumps(run)), dumps(info), 1, f"legacy:{position}"))
    return rows


def archived_row(action: str, row: Mapping[str, Any]) -> Row | None:
    """A run Lastgood archived (a restore took it out of ``agno_runs``; undo brings it back), as a
    listed row: listed superseded, outside the session's chain."""
    data = row.get("run_data")
    run = loads(data) if isinstance(data, (str, bytes)) else data
    if not isinstance(row.get("run_id"), str) or not isinstance(row.get("session_id"), str):
        return None
    valid = 1 if isinstance(run, Mapping) else 0
    run = run if isinstance(run, Mapping) else {}
    info = [run.get(p[0]) for p in INFO_PATHS] + [run.get("content") if row.get("status") in NOTABLE else None]
    return (None, row["session_id"], row["run_id"], row.get("run_index"), row.get("created_at"),
            row.get("updated_at"), row.get("status"), row.get("run_type"), row.get("agent_id"), row.get("team_id"),
            row.get("workflow_id"), row.get("user_id"), row.get("parent_run_id"),
            len(data) if isinstance(data, (str, bytes)) else len(json.dumps(data)), dumps(info), valid,
            f"archived:{action}")


def is_archived(row: Row) -> bool:
    return isinstance(row[LOCATION], str) and row[LOCATION].startswith("archived:")


# ---- the listing -----------------------------------------------------------------------------------


def list_rows(rows: list[Row], orphans: set[str]) -> Listing:
    """Checkpoint table, events, findings and heads of ``rows`` (whole sessions each). Runs Lastgood
    archived are listed superseded, outside the chain (no parent; step = their run_index)."""
    live = sorted((r for r in rows if not is_archived(r)), key=order_key)
    listing = Listing(None)
    cols: dict[str, list[Any]] = {k: [] for k in ("run_id", "checkpoint_id", "parent_id", "step", "created_at",
                                                  "trigger", "status", "status_reason", "size_bytes", "agent",
                                                  "location", "metadata")}
    step = 0
    for i, row in enumerate(live):
        first = i == 0 or live[i - 1][SESSION] != row[SESSION]
        step = 0 if first else step + 1
        if i + 1 == len(live) or live[i + 1][SESSION] != row[SESSION]:
            listing.heads.append(HeadRecord(row[SESSION], row[RUN]))
        _add(cols, listing, row, None if first else live[i - 1][RUN], step, None)
    for row in sorted((r for r in rows if is_archived(r)), key=order_key):
        reason = (f"taken out of agno_runs by Lastgood action {row[LOCATION][9:]} (a restore to an earlier run): "
                  "Agno does not see it; undoing that action puts it back")
        _add(cols, listing, row, None, row[INDEX], reason)
    listing.findings.extend(
        Finding(Check.SESSION_MISSING, "error", f"runs of session {s!r} whose agno_sessions row is gone: Agno "
                "cannot load them (get_session returns None)", s) for s in sorted(orphans & {r[SESSION] for r in rows}))
    listing.checkpoints = _table(cols)
    return listing


def _add(cols: dict[str, list[Any]], listing: Listing, row: Row, parent: str | None, step: Any,
         archived: str | None) -> None:
    info = _info(row[INFO])
    problem = None
    if row[VALID] != 1:
        problem = "run_data is not a JSON object: Agno cannot load this run"
        listing.findings.append(Finding(Check.UNDECODABLE, "error", problem, row[SESSION], "", row[RUN]))
    status = Status.CORRUPT.value if problem else Status.SUPERSEDED.value if archived else Status.OK.value
    for name, value in (("run_id", row[SESSION]), ("checkpoint_id", row[RUN]), ("parent_id", parent),
                        ("step", step), ("created_at", int(row[CREATED] or 0) * 1_000_000),
                        ("trigger", str(row[STATUS] or row[RUN_TYPE] or "run").lower()), ("status", status),
                        ("status_reason", problem or archived), ("size_bytes", row[SIZE]),
                        ("agent", row[AGENT] or row[TEAM] or row[WORKFLOW]), ("location", row[LOCATION]),
                        ("metadata", dumps(metadata(row, info)))):
        cols[name].append(value)
    if not archived:
        listing.events.extend(events_of(row, info))


def _info(text: Any) -> list[Any]:
    try:
        value = loads(text) if isinstance(text, (str, bytes)) else None
    except ValueError:
        value = None
    return value if isinstance(value, list) and len(value) == len(INFO_PATHS) + 1 else [None] * (len(INFO_PATHS) + 1)


def metadata(row: Row, info: Sequence[Any]) -> dict[str, Any]:
    meta = {k: v for k, v in (("user_id", row[USER]), ("run_type", row[RUN_TYPE]), ("status", row[STATUS]),
                              ("run_index", row[INDEX]), ("parent_run_id", row[PARENT]), ("agent_id", row[AGENT]),
                              ("team_id", row[TEAM]), ("workflow_id", row[WORKFLOW]), ("model", info[MODEL]),
                              ("agent_name", info[AGENT_NAME]), ("forked_from_session_id", info[FORKED]),
                              ("updated_at", row[UPDATED])) if v is not None}
    tools = [t.get("tool_name") for t in info[TOOLS] or () if isinstance(t, Mapping)]
    if tools:
        meta["tool_calls"] = tools
    if isinstance(row[LOCATION], str) and row[LOCATION].startswith("legacy:"):
        meta["legacy_runs_column"] = True
    return meta


# ---- events --------------------------------------------------------------------------------------


def events_of(row: Row, info: Sequence[Any]) -> list[EventRecord]:
    """Tool calls and tool errors of a run; its ERROR, PAUSED or CANCELLED status."""
    created = EPOCH + timedelta(seconds=int(row[CREATED] or 0))

    def event(kind: str, message: str, channel: str | None = None, task: str | None = None) -> EventRecord:
        text = message if len(message) <= MESSAGE_LIMIT else message[:MESSAGE_LIMIT] + "…"
        return EventRecord(run_id=row[SESSION], kind=kind, checkpoint_id=row[RUN], created_at=created,
                           channel=channel, task_id=task, message=text)
    out = []
    for tool in info[TOOLS] or ():
        if not isinstance(tool, Mapping):
            continue
        name, call_id = _text(tool.get("tool_name")), _text(tool.get("tool_call_id"))
        if tool.get("result") is None and tool.get("requires_confirmation") and not tool.get("confirmed"):
            continue  # not executed: the pause says it
        out.append(event("tool_call", f"{name}({args_text(tool.get('tool_args'))})", name, call_id))
        if tool.get("tool_call_error"):
            out.append(event("error", f"{name}: {tool.get('result')}", name, call_id))
    status, content = row[STATUS], info[CONTENT]
    if status == "ERROR":
        out.append(event("error", f"the run failed: {content or '(no message)'}", "status"))
    elif status == "CANCELLED":
        out.append(event("ended_early", f"the run was cancelled: {content or ''}".rstrip(": "), "status"))
    elif status == "PAUSED":
        out.append(event("interrupt", pause_text(info[REQUIREMENTS], content), "status"))
    return out


def pause_text(requirements: Any, content: Any) -> str:
    """What a PAUSED run waits for: its requirements (confirmations, user input, external results)."""
    waits = []
    for req in requirements or ():
        tool = req.get("tool_execution") if isinstance(req, Mapping) else None
        if not isinstance(tool, Mapping):
            continue
        call = f"{tool.get('tool_name')}({args_text(tool.get('tool_args'))})"
        if tool.get("requires_user_input"):
            waits.append(f"user input for {call}")
        elif tool.get("external_execution_required"):
            waits.append(f"the external result of {call}")
        else:
            waits.append(f"confirmation of {call}")
    question = f"{content} " if isinstance(content, str) and content else ""
    return f"{question}(waiting for {'; '.join(waits) or 'the user'})"


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


# ---- the table -------------------------------------------------------------------------------------


def _table(cols: dict[str, list[Any]]) -> Any:
    n = len(cols["checkpoint_id"])
    arrays = {k: col.string_array(v) for k, v in cols.items() if k not in ("step", "created_at", "size_bytes")}
    arrays.update(step=col.int64_array(cols["step"]), created_at=col.timestamp_array(cols["created_at"]),
                  size_bytes=col.int64_array(cols["size_bytes"]), namespace=col.constant_strings("", n),
                  kind=col.constant_strings("full", n), codec=col.constant_strings("json", n))
    return col.table(arrays, lazy_schema("CHECKPOINT_SCHEMA"))


def events_table(events: Sequence[EventRecord]) -> Any:
    from lastgood.readers.adk.model import events_table as table

    return table(events)


# ---- one run's state -----------------------------------------------------------------------------------


def conversation(runs: Sequence[tuple[Any, Any]]) -> list[dict[str, Any]]:
    """The messages of ``runs`` (``(parent_run_id, messages)`` in Agno's order) as a conversation:
    a team member's runs and messages Agno tagged ``from_history`` (replayed copies) left out, a
    system message only when it changed."""
    out: list[dict[str, Any]] = []
    system = None
    for parent, messages in runs:
        if parent is not None or not isinstance(messages, list):
            continue
        for message in messages:
            if not isinstance(message, dict) or message.get("from_history"):
                continue
            if message.get("role") == "system":
                if message.get("content") == system:
                    continue
                system = message.get("content")
            out.append(message)
    return out


def normalize_message(value: Any) -> dict[str, Any] | None:
    """An Agno ``Message`` dict as ``{role, content, tool_calls?, name?, tool_call_id?, id?}``."""
    if not isinstance(value, Mapping) or value.get("role") not in ("system", "user", "assistant", "tool", "developer"):
        return None
    content = value.get("content")
    if isinstance(content, list):
        content = "\n".join(str(c.get("text", "")) if isinstance(c, Mapping) else str(c) for c in content)
    message: dict[str, Any] = {"role": value["role"], "content": "" if content is None else str(content)}
    calls = [_call(c) for c in value.get("tool_calls") or () if isinstance(c, Mapping)]
    if calls:
        message["tool_calls"] = calls
    if value.get("role") == "tool":
        message.update(name=value.get("tool_name"), tool_call_id=value.get("tool_call_id"))
    if value.get("id"):
        message["id"] = value["id"]
    return {k: v for k, v in message.items() if v is not None}


def _call(call: Mapping[str, Any]) -> dict[str, Any]:
    function = call.get("function") if isinstance(call.get("function"), Mapping) else {}
    args: Any = function.get("arguments")
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except ValueError:
            pass
    return {"id": call.get("id"), "name": function.get("name"), "args": args}
