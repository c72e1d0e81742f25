"""The layout of a listed ADK event row, shared by the SQL that makes it (``sqlite_fetch``,
``postgres``) and the model that reads it (``model``).

A row: (seq, app, user, session, event id, invocation id, epoch µs, size, info JSON array | None,
valid: 1 | 0 | None (NULL event_data) | :data:`NOT_UTF8`, parts JSON | None). The info array holds the
fields of :data:`INFO_PATHS`, in that order (one parse of ``event_data`` in the database).
"""

from __future__ import annotations

from typing import Any

# the fields each listed row carries in its info array (name, JSON path)
INFO_PATHS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("author", ("author",)), ("role", ("content", "role")), ("error_code", ("error_code",)),
    ("error_message", ("error_message",)), ("rewind", ("actions", "rewind_before_invocation_id")),
    ("json_ts", ("timestamp",)), ("branch", ("branch",)), ("interrupted", ("interrupted",)),
    ("long_running", ("long_running_tool_ids",)),
    ("confirmations", ("actions", "requested_tool_confirmations")),
    ("auth", ("actions", "requested_auth_configs")), ("transfer", ("actions", "transfer_to_agent")),
)
# positions in the info array
(AUTHOR, ROLE, ERROR_CODE, ERROR_MESSAGE, REWIND, JSON_TS, BRANCH, INTERRUPTED, LONG_RUNNING,
 CONFIRMATIONS, AUTH, TRANSFER) = range(len(INFO_PATHS))

Row = tuple[Any, ...]
# positions in a row
SEQ, APP, USER, SESSION, ID, INV, TS, SIZE, INFO, VALID, PARTS = range(11)
NOT_UTF8 = "not-utf8"  # the validity of a row with text that is not UTF-8 (an event ADK cannot load)
