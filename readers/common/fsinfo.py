"""What an fsspec ``info`` dict says, whatever the backend calls it."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

MTIME_KEYS = ("mtime", "LastModified", "last_modified", "updated", "modified", "created", "creation_time")


def info_mtime(info: Mapping[str, Any]) -> float | None:
    """Seconds since the epoch from whichever field an fsspec backend fills (None: none does)."""
    for key in MTIME_KEYS:
        value = info.get(key)
        if isinstance(value, bool) or value is None:
            continue
        if isinstance(value, (int, float)):
            return float(value)
        if isinstance(value, datetime):
            return (value if value.tzinfo else value.replace(tzinfo=UTC)).timestamp()
        if isinstance(value, str):
            try:
                parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
            except ValueError:
                continue
            return (parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)).timestamp()
    return None
