"""The rows a Lastgood restore took out of a session, listed as superseded checkpoints.

They keep their ids and the parent they had (recorded when they were taken out), so the history
of the run stays whole and an undo can name them as its target. Their step and turn continue
from that parent (in the session, or itself archived).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable
from typing import Any

from lastgood.readers.openai_agents.items import loads
from lastgood.readers.openai_agents.listing import SECS, Walk
from lastgood.readers.openai_agents.schema import ARCHIVED_ITEMS, ARCHIVED_STRUCTURE, Layout

# the listing's row (see listing.PLAIN_SQL) + parent_id, action_id
PLAIN_SQL = """SELECT a.id, a.session_id, NULL, {secs}, length(CAST(a.message_data AS BLOB)), a.message_data,
    a.id, NULL, NULL, NULL, NULL, a.parent_id, a.action_id FROM {archive} a ORDER BY a.session_id, a.id"""
ADVANCED_SQL = """SELECT a.id, a.session_id, a.branch_id, {secs},
    length(CAST(coalesce(m.message_data, x.message_data) AS BLOB)), coalesce(m.message_data, x.message_data),
    a.message_id, a.sequence_number, a.user_turn_number, a.tool_name, a.message_type, a.parent_id, a.action_id
    FROM {archive} a LEFT JOIN {m} m ON m.id = a.message_id LEFT JOIN {items} x ON x.id = a.message_id
    ORDER BY a.session_id, a.branch_id, a.sequence_number, a.id"""


def archived_rows(conn: sqlite3.Connection, layout: Layout) -> list[tuple[Any, ...]]:
    """Every archived checkpoint row (empty before the first restore)."""
    if not layout.archive:
        return []
    if layout.advanced:
        sql = ADVANCED_SQL.format(archive=ARCHIVED_STRUCTURE, m=layout.m, items=ARCHIVED_ITEMS,
                                  secs=SECS.format(col="a.created_at"))
    else:
        sql = PLAIN_SQL.format(archive=ARCHIVED_ITEMS, secs=SECS.format(col="a.created_at"))
    try:
        return conn.execute(sql).fetchall()
    except sqlite3.OperationalError:  # an archive table of another shape (edited by hand): not listed
        return []


def parents_of(rows: Iterable[tuple[Any, ...]]) -> set[int]:
    return {row[11] for row in rows if row[11] is not None}


def list_archived(walk: Walk, rows: list[tuple[Any, ...]]) -> None:
    """Add the archived rows to ``walk.archived`` (after the live rows were walked): each one's
    step and turn continue from its parent's, found by walking up to a placed or live row."""
    by_id = {row[0]: row for row in rows}
    placed: dict[int, tuple[int, int, int]] = {}
    for rid in by_id:
        chain: list[int] = []
        cursor: Any = rid
        while cursor in by_id and cursor not in placed and cursor not in chain:
            chain.append(cursor)
            cursor = by_id[cursor][11]
        base = placed.get(cursor) or walk.positions.get(cursor) or (-1, 0, 0)
        for row_id in reversed(chain):
            row = by_id[row_id]
            step = base[0] + 1
            turn = row[8] if walk.layout.advanced and isinstance(row[8], int) else base[1] + _is_user(row[5])
            micros = walk.archived_row(row[:11], row[11], step, turn, str(row[12]))
            base = placed[row_id] = (step, turn, micros)


def _is_user(data: Any) -> int:
    try:
        item = loads(data) if data is not None else None
    except (ValueError, UnicodeDecodeError):
        return 0
    return int(isinstance(item, dict) and item.get("role") == "user")
