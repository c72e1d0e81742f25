"""Write capability of OpenAI Agents SDK session stores (``SQLiteSession``, ``AdvancedSQLiteSession``).

restore (or rollback) to item X = the session rewound to X the SDK's way (repeated ``pop_item()``
down to X: :mod:`lastgood.readers.openai_agents.rewind`), with every row it takes out kept in an
archive table of the same database; restoring to an archived item (what an undo does) puts its
rows back with their ids. The run's head — the checkpoint the SDK resumes from — is the
session's newest item (plain) or the branch's last item by ``sequence_number`` (advanced); after
a restore it is X itself, so ``SQLiteSession(session_id, db).get_items()`` (or, on a branch,
``AdvancedSQLiteSession(...).get_items(branch_id=…)``) returns X's history and the next
``Runner.run`` continues from it. A restore and a rollback do the same to the session (the SDK
has no pointer to move: the items after X leave the session either way); a rollback also marks
them superseded in the journal.

Why a rewind and not a new branch for an advanced session: a restore moves the head of the
target's own run and namespace (branch), and the SDK starts every session object on ``main`` and
keeps the current branch in memory only — a rewound ``main`` is what an unchanged app resumes
from, a new branch would be resumed by no app that is not told its name. The branch a restore
rewound is named in the journal entry's note (``branch``; ``main`` is the root namespace).

Journal: table ``lastgood_journal`` in the same database (created by the first write action,
never by reading), written in the same ``BEGIN IMMEDIATE`` transaction as the rewind, which
first re-checks the expected head (the newest item id). The post-apply check reads the session
back with the SDK's own queries (``get_items``: ``ORDER BY id`` / ``ORDER BY sequence_number``).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Mapping, Sequence
from contextlib import closing
from typing import Any, TypeVar

from lastgood.errors import ConflictError, LastgoodError, ReaderError
from lastgood.readers import journal as jr
from lastgood.readers.common import sqljournal
from lastgood.readers.common.sqlite import connect_readonly, sqlite_path, table_columns
from lastgood.readers.openai_agents.history import lineage, live_units, table_exists
from lastgood.readers.openai_agents.items import loads
from lastgood.readers.openai_agents.rewind import rewind
from lastgood.readers.openai_agents.schema import JOURNAL, Layout, branch_of, detect

T = TypeVar("T")
MAX_NOTE_IDS = 200


def layout_of(conn: sqlite3.Connection, path: Any) -> Layout:
    tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
    layout = detect({t: frozenset(table_columns(conn, t)) for t in tables})
    if layout is None:
        raise ReaderError(f"{path} holds no OpenAI Agents SDK session tables")
    return layout


def head_of(conn: sqlite3.Connection, layout: Layout, run_id: str, namespace: str) -> str | None:
    """The item the SDK resumes the session (branch) from: its newest one."""
    if layout.advanced:
        row = conn.execute("SELECT id FROM message_structure WHERE session_id = ? AND branch_id = ? "
                           "ORDER BY sequence_number DESC, id DESC LIMIT 1", (run_id, branch_of(namespace))).fetchone()
    else:
        row = conn.execute(f"SELECT max(id) FROM {layout.m} WHERE session_id = ?", (run_id,)).fetchone()
    return str(row[0]) if row and row[0] is not None else None


def sdk_items(conn: sqlite3.Connection, layout: Layout, run_id: str, namespace: str) -> list[Any]:
    """What ``get_items()`` returns for the session (branch): the SDK's query, undecodable rows skipped."""
    return decoded([u.data for u in live_units(conn, layout, run_id, namespace)])


def decoded(values: Sequence[Any]) -> list[Any]:
    items = []
    for data in values:
        if data is None:
            continue
        try:
            items.append(loads(data))
        except (ValueError, UnicodeDecodeError):
            continue
    return items


class SessionRecovery(sqljournal.SqlJournal):
    """``RecoveryBackend`` for a SQLiteSession / AdvancedSQLiteSession database."""

    def __init__(self, url: str, storage_options: Mapping[str, Any] | None = None) -> None:
        self.url = url
        self.path = sqlite_path(url)

    # ---- reading --------------------------------------------------------------------------

    def _read(self) -> sqlite3.Connection:
        return connect_readonly(self.path)

    def head(self, run_id: str, namespace: str = "") -> str | None:
        with closing(self._read()) as conn:
            return head_of(conn, layout_of(conn, self.path), run_id, namespace)

    def _journal_exists(self, conn: Any) -> bool:
        return bool(table_exists(conn, JOURNAL))

    # ---- writing --------------------------------------------------------------------------

    def _commit_in(self, conn: sqlite3.Connection, change: jr.Change) -> dict[str, Any]:
        layout = layout_of(conn, self.path)
        head = head_of(conn, layout, change.run_id, change.namespace)
        if head != change.expected_head:
            raise ConflictError(f"the head of session {change.run_id!r} moved: expected {change.expected_head}, "
                                f"found {head}; nothing was written — re-plan and try again")
        entry = dict(change.entry)
        if change.restore_from:
            target = lineage(conn, layout, change.run_id, change.namespace, change.restore_from)
            done = rewind(conn, layout, change.run_id, change.namespace, target, str(entry.get("id")), jr.now_iso())
            head = head_of(conn, layout, change.run_id, change.namespace)
            entry["note"] = {**(entry.get("note") or {}), **_note(layout, change, done.archived, done.restored)}
        return self._append(conn, entry, head)

    def _append(self, conn: sqlite3.Connection, entry: Mapping[str, Any], new_head: Any) -> dict[str, Any]:
        return sqljournal.append(conn, entry, new_head)

    def _transaction(self, body: Callable[[sqlite3.Connection], T]) -> T:
        return sqljournal.sqlite_transaction(self.path, body)

    # ---- checks -----------------------------------------------------------------------------

    def check_head(self, run_id: str, namespace: str, target_id: str, expected_state: Any) -> jr.HeadCheck:
        """The session read back with the SDK's own query equals the target's history."""
        try:
            with closing(self._read()) as conn:
                layout = layout_of(conn, self.path)
                head = head_of(conn, layout, run_id, namespace)
                items = sdk_items(conn, layout, run_id, namespace)
                expected = decoded([u.data for u in lineage(conn, layout, run_id, namespace, target_id).units])
        except (LastgoodError, sqlite3.Error) as exc:
            return jr.HeadCheck(False, f"the session does not read back: {exc}")
        where = f"branch {branch_of(namespace)!r} of " if layout.advanced else ""
        if head != target_id:
            return jr.HeadCheck(False, f"the {where}session's newest item is {head}, not {target_id}")
        if items != expected:
            return jr.HeadCheck(False, f"get_items() of the {where}session differs from item {target_id}'s history")
        call = "get_items(branch_id=…)" if layout.advanced else "get_items()"
        return jr.HeadCheck(True, f"{layout.kind}.{call} (the SDK's query) returns the {len(items)} items up to "
                                  f"{target_id} on {where or ''}session {run_id!r}")

    def side_effects(self, run_id: str, namespace: str, after: Sequence[str]) -> list[dict[str, Any]]:
        return []  # tool calls after the target come from the index's events (lastgood.recovery.effects)


def _note(layout: Layout, change: jr.Change, archived: list[int], restored: list[int]) -> dict[str, Any]:
    note: dict[str, Any] = {"store": layout.kind, "session_id": change.run_id,
                            "archived": archived[:MAX_NOTE_IDS], "put_back": restored[:MAX_NOTE_IDS]}
    if layout.advanced:
        branch = branch_of(change.namespace)
        note["branch"] = branch
        note["resume"] = (f"AdvancedSQLiteSession(session_id={change.run_id!r}, …) resumes from "
                          f"{change.restore_from} on branch {branch!r}" +
                          ("" if branch == "main" else f": the SDK keeps the current branch in memory only — "
                           f"call switch_to_branch({branch!r}) (a new session object starts on 'main')"))
    else:
        note["resume"] = f"SQLiteSession({change.run_id!r}, …).get_items() ends at item {change.restore_from}"
    if len(archived) > MAX_NOTE_IDS or len(restored) > MAX_NOTE_IDS:
        note["counts"] = {"archived": len(archived), "put_back": len(restored)}
    return note
