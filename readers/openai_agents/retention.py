"""Retention of OpenAI Agents SDK session stores (``SQLiteSession``, ``AdvancedSQLiteSession``).

What a prune removes is whole stale sessions (:mod:`lastgood.readers.common.session_retention`):
every row with the session's ``session_id`` in the SDK's tables (sessions, messages, and for an
advanced store ``message_structure``, ``turn_usage``, ``branch_reservations``,
``session_clear_generations``) and in Lastgood's archive of a restore's rows
(``lastgood_archived_*``), archived first, deleted in one transaction with the ``prune`` entry of
the store's ``lastgood_journal`` (the journal its restores use). The undo inserts them back with
their ids and sequence numbers, so ``SQLiteSession(session_id, db).get_items()`` returns the same
items as before the prune.
"""

from __future__ import annotations

import sqlite3
from typing import Any

from lastgood.readers.common.session_retention import SessionTable, SqliteSessionRetention, tables_with
from lastgood.readers.openai_agents.recovery import layout_of
from lastgood.readers.openai_agents.schema import ARCHIVED_ITEMS, ARCHIVED_STRUCTURE, ARCHIVED_USAGE, STRUCTURE, USAGE

SDK_EXTRA = ("branch_reservations", "session_clear_generations")  # AdvancedSQLiteSession's other tables
OURS = (ARCHIVED_ITEMS, ARCHIVED_STRUCTURE, ARCHIVED_USAGE)


class SessionRetention(SqliteSessionRetention):
    """``RetentionBackend`` of the ``openai-agents`` reader."""

    reader_name = "openai-agents"
    reader_class = "lastgood.readers.openai_agents.reader:OpenAIAgentsReader"
    recovery_class = "lastgood.readers.openai_agents.recovery:SessionRecovery"

    def session_tables(self, conn: sqlite3.Connection) -> list[SessionTable]:
        layout = layout_of(conn, self.path)
        own = [n for n in (layout.sessions, layout.messages) if n]
        if layout.advanced:
            own += [STRUCTURE, *([USAGE] if layout.usage else []), *SDK_EXTRA]
        own += list(OURS)
        return [t for t in tables_with(conn, ("session_id",), first=own) if t.name in own]

    def session_key(self, conn: sqlite3.Connection, run_id: str) -> tuple[Any, ...] | None:
        return (run_id,)
