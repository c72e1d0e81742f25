"""Retention of CrewAI Flows ``SQLiteFlowPersistence`` databases.

What a prune removes is whole stale flows (:mod:`lastgood.readers.common.session_retention`): every
``flow_states`` row of the flow (ids kept), its ``pending_feedback`` row and the rows a restore moved
into ``lastgood_archive``, archived first, deleted in one ``BEGIN IMMEDIATE`` transaction with the
``prune`` entry of the database's ``lastgood_journal`` (the journal its restores use). Each
``flow_states`` row holds a whole state, but a flow's rows are its method-by-method history (what
the Timeline, diffs and restores read), so a flow is kept whole like a session: each row "needs" the
one before it. The undo inserts the rows back as they were, so ``load_state(uuid)`` (the latest row)
and ``Flow.from_pending`` read the same state as before the prune.
"""

from __future__ import annotations

import sqlite3
from typing import Any

from lastgood.readers.common.session_retention import SessionTable, SqliteSessionRetention, tables_with

STATES, PENDING, ARCHIVE = "flow_states", "pending_feedback", "lastgood_archive"


class FlowRetention(SqliteSessionRetention):
    """``RetentionBackend`` of the ``crewai-flows`` reader."""

    reader_name = "crewai-flows"
    reader_class = "lastgood.readers.crewai.reader:CrewAIFlowsReader"
    recovery_class = "lastgood.readers.crewai.recovery:CrewAIRecovery"

    def session_tables(self, conn: sqlite3.Connection) -> list[SessionTable]:
        own = (STATES, PENDING, ARCHIVE)
        return [t for t in tables_with(conn, ("flow_uuid",), first=own) if t.name in own]

    def session_key(self, conn: sqlite3.Connection, run_id: str) -> tuple[Any, ...] | None:
        return (run_id,)

    def session_label(self, run_id: str) -> str:
        return f"flow {run_id!r}"
