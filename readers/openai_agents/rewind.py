"""A session rewound to one of its checkpoints, the SDK's way, keeping what it takes out.

The SDK rewinds a session with ``pop_item()`` (plain: the newest item is deleted; advanced: the
newest ``message_structure`` row of the current branch, its message only when no other branch
references it, and the turn's ``turn_usage`` row once the turn is empty). A Lastgood restore to
item X does what repeated ``pop_item()`` calls down to X would do — but moves every row it takes
out, verbatim and with its id, into an archive table of the same database
(``lastgood_archived_items`` / ``_structure`` / ``_turn_usage``, tagged with the action id and
the parent each row had), so a later restore to an archived item (an undo) puts them back with
their original ids and ``get_items()`` returns exactly the list it returned before.

Restoring to an archived item X: the items of the session after X's first ancestor still in the
session are taken out, then X's archived chain is put back. Everything runs inside the caller's
transaction (:mod:`lastgood.readers.openai_agents.recovery`).
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field
from typing import Any

from lastgood.readers.openai_agents.history import Lineage, live_units, table_exists
from lastgood.readers.openai_agents.schema import (ARCHIVED_ITEMS, ARCHIVED_STRUCTURE, ARCHIVED_USAGE, STRUCTURE,
                                                   USAGE, Layout, branch_of, quote)

ARCHIVE_COLUMNS = "NULL AS parent_id, '' AS action_id, '' AS archived_at"


@dataclass
class Rewind:
    """What one restore took out and put back (ids of checkpoint rows), for the journal's note."""

    archived: list[int] = field(default_factory=list)
    restored: list[int] = field(default_factory=list)


def ensure_archive(conn: sqlite3.Connection, layout: Layout) -> None:
    """The archive tables, shaped like the SDK's own (same columns, whatever its version)."""
    _archive_like(conn, ARCHIVED_ITEMS, layout.messages)
    if layout.advanced:
        _archive_like(conn, ARCHIVED_STRUCTURE, STRUCTURE)
        if layout.usage:
            _archive_like(conn, ARCHIVED_USAGE, USAGE)


def _archive_like(conn: sqlite3.Connection, archive: str, source: str) -> None:
    """``archive``: ``source``'s columns (rows kept verbatim, ids included) + parent, action, time."""
    if table_exists(conn, archive):
        return
    conn.execute(f"CREATE TABLE {quote(archive)} AS SELECT *, {ARCHIVE_COLUMNS} FROM {quote(source)} WHERE 0")
    conn.execute(f"CREATE UNIQUE INDEX {quote(archive + '_id')} ON {quote(archive)} (id)")


def columns(conn: sqlite3.Connection, table: str) -> list[str]:
    return [row[1] for row in conn.execute(f"PRAGMA table_info({quote(table)})")]


def rewind(conn: sqlite3.Connection, layout: Layout, session: str, namespace: str, target: Lineage,
           action_id: str, now: str) -> Rewind:
    """Make the session (branch) hold exactly ``target``'s history (see the module docstring)."""
    ensure_archive(conn, layout)
    live = live_units(conn, layout, session, namespace)
    anchor = target.anchor
    keep = 0 if anchor is None else next((i + 1 for i, u in enumerate(live) if u.id == anchor), len(live))
    done = Rewind()
    out = live[keep:]
    parents = [live[i - 1].id if i > 0 else None for i in range(keep, len(live))]
    for unit, parent in zip(out, parents):
        _take_out(conn, layout, unit.id, parent, action_id, now)
        done.archived.append(unit.id)
    if layout.advanced and out:
        _archive_orphans(conn, layout, session, [u.message_id for u in out], action_id, now)
        _archive_empty_turns(conn, layout, session, namespace, action_id, now)
    for unit in target.archived:
        _put_back(conn, layout, unit)
        done.restored.append(unit.id)
    if layout.advanced and target.archived:
        _restore_turn_usage(conn, layout, session, namespace, {u.action_id for u in target.archived})
    return done


def _take_out(conn: sqlite3.Connection, layout: Layout, rid: int, parent: int | None, action_id: str,
              now: str) -> None:
    table, archive = (STRUCTURE, ARCHIVED_STRUCTURE) if layout.advanced else (layout.messages, ARCHIVED_ITEMS)
    names = ", ".join(quote(c) for c in columns(conn, table))
    conn.execute(f"INSERT INTO {quote(archive)} ({names}, parent_id, action_id, archived_at) "
                 f"SELECT {names}, ?, ?, ? FROM {quote(table)} WHERE id = ?", (parent, action_id, now, rid))
    conn.execute(f"DELETE FROM {quote(table)} WHERE id = ?", (rid,))


def _archive_orphans(conn: sqlite3.Connection, layout: Layout, session: str, message_ids: list[Any],
                     action_id: str, now: str) -> None:
    """Messages no branch references any more leave too (the SDK's pop_item deletes them)."""
    names = ", ".join(quote(c) for c in columns(conn, layout.messages))
    referenced = {r[0] for r in conn.execute(f"SELECT DISTINCT message_id FROM {STRUCTURE} WHERE session_id = ?",
                                             (session,))}
    for mid in dict.fromkeys(m for m in message_ids if m is not None and m not in referenced):
        conn.execute(f"INSERT INTO {ARCHIVED_ITEMS} ({names}, parent_id, action_id, archived_at) "
                     f"SELECT {names}, NULL, ?, ? FROM {layout.m} WHERE id = ? AND session_id = ?",
                     (action_id, now, mid, session))
        conn.execute(f"DELETE FROM {layout.m} WHERE id = ? AND session_id = ?", (mid, session))


def _archive_empty_turns(conn: sqlite3.Connection, layout: Layout, session: str, namespace: str,
                         action_id: str, now: str) -> None:
    """``turn_usage`` rows of turns left without items on this branch (as pop_item drops them)."""
    if not layout.usage:
        return
    names = ", ".join(quote(c) for c in columns(conn, USAGE))
    empty = f"""session_id = ? AND branch_id = ? AND NOT EXISTS (SELECT 1 FROM {STRUCTURE} s
        WHERE s.session_id = {USAGE}.session_id AND s.branch_id = {USAGE}.branch_id
        AND s.user_turn_number = {USAGE}.user_turn_number)"""
    params = (session, branch_of(namespace))
    conn.execute(f"INSERT INTO {ARCHIVED_USAGE} ({names}, parent_id, action_id, archived_at) "
                 f"SELECT {names}, NULL, ?, ? FROM {USAGE} WHERE {empty}", (action_id, now, *params))
    conn.execute(f"DELETE FROM {USAGE} WHERE {empty}", params)


def _put_back(conn: sqlite3.Connection, layout: Layout, unit: Any) -> None:
    table, archive = (STRUCTURE, ARCHIVED_STRUCTURE) if layout.advanced else (layout.messages, ARCHIVED_ITEMS)
    names = ", ".join(quote(c) for c in columns(conn, table))
    conn.execute(f"INSERT INTO {quote(table)} ({names}) SELECT {names} FROM {quote(archive)} WHERE id = ?",
                 (unit.id,))
    conn.execute(f"DELETE FROM {quote(archive)} WHERE id = ?", (unit.id,))
    if layout.advanced and unit.message_id is not None:
        message_names = ", ".join(quote(c) for c in columns(conn, layout.messages))
        conn.execute(f"INSERT INTO {layout.m} ({message_names}) SELECT {message_names} FROM {ARCHIVED_ITEMS} "
                     "WHERE id = ?", (unit.message_id,))
        conn.execute(f"DELETE FROM {ARCHIVED_ITEMS} WHERE id = ?", (unit.message_id,))


def _restore_turn_usage(conn: sqlite3.Connection, layout: Layout, session: str, namespace: str,
                        actions: set[Any]) -> None:
    """The usage rows the same actions took out, for turns that have items again (none replaced)."""
    if not layout.usage or not table_exists(conn, ARCHIVED_USAGE):
        return
    names = ", ".join(quote(c) for c in columns(conn, USAGE))
    for action in actions:
        where = f"""a.session_id = ? AND a.branch_id = ? AND a.action_id = ?
            AND EXISTS (SELECT 1 FROM {STRUCTURE} s WHERE s.session_id = a.session_id AND s.branch_id = a.branch_id
                        AND s.user_turn_number = a.user_turn_number)
            AND NOT EXISTS (SELECT 1 FROM {USAGE} u WHERE u.session_id = a.session_id AND u.branch_id = a.branch_id
                            AND u.user_turn_number = a.user_turn_number)"""
        params = (session, branch_of(namespace), action)
        picked = [r[0] for r in conn.execute(f"SELECT a.rowid FROM {ARCHIVED_USAGE} a WHERE {where}", params)]
        for rowid in picked:
            conn.execute(f"INSERT INTO {USAGE} ({names}) SELECT {names} FROM {ARCHIVED_USAGE} WHERE rowid = ?",
                         (rowid,))
            conn.execute(f"DELETE FROM {ARCHIVED_USAGE} WHERE rowid = ?", (rowid,))
