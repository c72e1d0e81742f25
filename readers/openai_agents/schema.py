"""Which tables of a SQLite file are an OpenAI Agents SDK session store, and how they are named.

``SQLiteSession(session_id, db_path, sessions_table=…, messages_table=…)`` keeps two tables
(defaults ``agent_sessions`` and ``agent_messages``); ``AdvancedSQLiteSession`` adds the fixed
``message_structure`` (one row per item and branch) and ``turn_usage`` tables. A store is sniffed
by those columns, never by the file name. Branch ``main`` (where every session object starts: the
SDK keeps the current branch in memory only) is the root namespace ``""``; any other branch is the
namespace of its own id.

Lastgood's own tables (``lastgood_*``: the journal and the archive of items a restore took out of a
session) are created by the first write action, never by reading.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

MAIN = "main"
MESSAGE_COLUMNS = frozenset({"id", "session_id", "message_data", "created_at"})
SESSION_COLUMNS = frozenset({"session_id", "created_at", "updated_at"})
STRUCTURE_COLUMNS = frozenset({"id", "session_id", "message_id", "branch_id", "message_type",
                               "sequence_number", "user_turn_number"})
USAGE_COLUMNS = frozenset({"session_id", "branch_id", "user_turn_number", "requests", "input_tokens",
                           "output_tokens", "total_tokens"})
DEFAULT_MESSAGES, DEFAULT_SESSIONS = "agent_messages", "agent_sessions"
STRUCTURE, USAGE = "message_structure", "turn_usage"
OURS = "lastgood_"
JOURNAL = "lastgood_journal"
ARCHIVED_ITEMS = "lastgood_archived_items"
ARCHIVED_STRUCTURE = "lastgood_archived_structure"
ARCHIVED_USAGE = "lastgood_archived_turn_usage"


def quote(name: str) -> str:
    """``name`` as a SQL identifier."""
    return '"' + name.replace('"', '""') + '"'


@dataclass(frozen=True, slots=True)
class Layout:
    """The store's tables: messages (+ sessions), and for an advanced store the structure tables."""

    messages: str
    sessions: str | None
    advanced: bool
    usage: bool = False
    archive: bool = False  # Lastgood's archive tables exist (a restore was made)

    @property
    def kind(self) -> str:
        return "AdvancedSQLiteSession" if self.advanced else "SQLiteSession"

    @property
    def m(self) -> str:
        return quote(self.messages)

    @property
    def s(self) -> str | None:
        return quote(self.sessions) if self.sessions else None


def detect(schema: Mapping[str, frozenset[str]] | None) -> Layout | None:
    """The layout of a database with these tables and columns, or None when it is not a store."""
    if not schema:
        return None
    messages = _pick(schema, DEFAULT_MESSAGES, MESSAGE_COLUMNS)
    if messages is None:
        return None
    sessions = _pick(schema, DEFAULT_SESSIONS, SESSION_COLUMNS)
    advanced = STRUCTURE_COLUMNS <= schema.get(STRUCTURE, frozenset())
    usage = advanced and USAGE_COLUMNS <= schema.get(USAGE, frozenset())
    archive = ARCHIVED_ITEMS in schema
    return Layout(messages, sessions, advanced, usage, archive)


def _pick(schema: Mapping[str, frozenset[str]], default: str, columns: frozenset[str]) -> str | None:
    """The default table when it has the columns, else the one other table that has them."""
    if columns <= schema.get(default, frozenset()):
        return default
    found = sorted(t for t, cols in schema.items() if columns <= cols and not t.startswith(OURS)
                   and t not in (STRUCTURE, USAGE))
    return found[0] if len(found) == 1 else None


def namespace_of(branch: str | None) -> str:
    return "" if branch in (None, MAIN) else str(branch)


def branch_of(namespace: str) -> str:
    return namespace or MAIN
