"""A checkpoint's history: the items of its session (or branch) up to it, as the SDK reads them.

A *live* checkpoint's history is the session's rows up to it in the SDK's own order (plain:
``ORDER BY id``; a branch: ``ORDER BY sequence_number``). An *archived* one (an item a Lastgood
restore took out of the session, kept in ``lastgood_archived_*``) follows the parent each archived
row recorded when it was taken out, back to the first ancestor still in the session: its history
is that ancestor's, then the archived chain. The same walk tells a restore which rows to take out
and which to put back (:mod:`lastgood.readers.openai_agents.recovery`).
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from typing import Any

from lastgood.errors import CheckpointNotFound, DecodeError
from lastgood.readers.openai_agents.schema import (ARCHIVED_ITEMS, ARCHIVED_STRUCTURE, Layout, branch_of)

MAX_CHAIN = 1_000_000


@dataclass(frozen=True, slots=True)
class Unit:
    """One checkpoint's row: an item of a plain session, or a branch's structure row."""

    id: int
    message_id: int | None
    data: Any  # message_data (None when the message row is gone)
    parent: int | None = None  # archived rows: the parent recorded when they were taken out
    action_id: str | None = None  # archived rows: the action that took them out


@dataclass(frozen=True, slots=True)
class Lineage:
    """The history of one checkpoint: live rows up to ``anchor`` (inclusive), then archived ones."""

    live: list[Unit]
    archived: list[Unit]

    @property
    def units(self) -> list[Unit]:
        return [*self.live, *self.archived]

    @property
    def anchor(self) -> int | None:
        return self.live[-1].id if self.live else None


def table_exists(conn: sqlite3.Connection, name: str) -> bool:
    return conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (name,)).fetchone() is not None


def live_position(conn: sqlite3.Connection, layout: Layout, session: str, namespace: str, rid: int
                  ) -> tuple[Any, ...] | None:
    """(sequence, id) of a live row of this session/branch (plain: (id, id)), or None."""
    if layout.advanced:
        return conn.execute("SELECT sequence_number, id FROM message_structure WHERE id = ? AND session_id = ? "
                            "AND branch_id = ?", (rid, session, branch_of(namespace))).fetchone()
    row = conn.execute(f"SELECT id FROM {layout.m} WHERE id = ? AND session_id = ?", (rid, session)).fetchone()
    return (row[0], row[0]) if row else None


def live_units(conn: sqlite3.Connection, layout: Layout, session: str, namespace: str,
               upto: tuple[Any, ...] | None = None) -> list[Unit]:
    """The session's (branch's) live rows in the SDK's order, up to ``upto`` = (sequence, id)."""
    if layout.advanced:
        limit = "AND (s.sequence_number, s.id) <= (?, ?)" if upto else ""
        rows = conn.execute(f"""SELECT s.id, s.message_id, m.message_data FROM message_structure s
            LEFT JOIN {layout.m} m ON m.id = s.message_id WHERE s.session_id = ? AND s.branch_id = ? {limit}
            ORDER BY s.sequence_number, s.id""", (session, branch_of(namespace), *(upto or ()))).fetchall()
    else:
        limit = "AND id <= ?" if upto else ""
        rows = conn.execute(f"SELECT id, id, message_data FROM {layout.m} WHERE session_id = ? {limit} ORDER BY id",
                            (session, *(upto[1:] if upto else ()))).fetchall()
    return [Unit(r[0], r[1], r[2]) for r in rows]


def archived_unit(conn: sqlite3.Connection, layout: Layout, session: str, namespace: str, rid: int) -> Unit | None:
    """The archived row ``rid`` of this session/branch, or None."""
    if not layout.archive:
        return None
    if layout.advanced:
        row = conn.execute(f"""SELECT a.id, a.message_id, coalesce(m.message_data, x.message_data), a.parent_id,
            a.action_id FROM {ARCHIVED_STRUCTURE} a LEFT JOIN {layout.m} m ON m.id = a.message_id
            LEFT JOIN {ARCHIVED_ITEMS} x ON x.id = a.message_id
            WHERE a.id = ? AND a.session_id = ? AND a.branch_id = ?""",
                           (rid, session, branch_of(namespace))).fetchone()
    else:
        row = conn.execute(f"SELECT id, id, message_data, parent_id, action_id FROM {ARCHIVED_ITEMS} "
                           "WHERE id = ? AND session_id = ?", (rid, session)).fetchone()
    return Unit(*row) if row else None


def lineage(conn: sqlite3.Connection, layout: Layout, session: str, namespace: str, checkpoint_id: str) -> Lineage:
    """The history of checkpoint ``checkpoint_id`` (CheckpointNotFound when it is nowhere)."""
    rid = _row_id(checkpoint_id)
    position = live_position(conn, layout, session, namespace, rid)
    if position is not None:
        return Lineage(live_units(conn, layout, session, namespace, position), [])
    chain: list[Unit] = []
    unit = archived_unit(conn, layout, session, namespace, rid)
    if unit is None:
        raise CheckpointNotFound(f"item {checkpoint_id} of session {session!r} is neither in the session nor "
                                 "in Lastgood's archive")
    while unit is not None and len(chain) < MAX_CHAIN:
        chain.append(unit)
        if unit.parent is None:
            return Lineage([], chain[::-1])
        position = live_position(conn, layout, session, namespace, unit.parent)
        if position is not None:
            return Lineage(live_units(conn, layout, session, namespace, position), chain[::-1])
        unit = archived_unit(conn, layout, session, namespace, unit.parent)
    raise DecodeError(f"the history of item {checkpoint_id} is broken: item {chain[-1].parent} before it is "
                      "neither in the session nor in the archive")


def _row_id(checkpoint_id: str) -> int:
    try:
        return int(checkpoint_id)
    except (TypeError, ValueError):
        raise CheckpointNotFound(f"{checkpoint_id!r} is not an item id of this store") from None
