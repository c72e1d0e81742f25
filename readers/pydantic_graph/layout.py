"""Where Lastgood keeps its own files inside a pydantic-graph run folder, and reading them.

    <folder>/.lastgood/journal/entries/<seq:010d>.json   one journal entry per file, never rewritten
    <folder>/.lastgood/journal/lock.json                 the action in progress (its intent)
    <folder>/.lastgood/archive/<run file>/<action>.json  a run file as it was before an action

The folder is hidden (a dot name), so neither Lastgood nor a glob of ``*.json`` takes it for runs.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

from lastgood import limits
from lastgood.readers.common.filejournal import REFUSED, read_entries
from lastgood.readers.common.fsutil import LocalFS, read_bounded

HOME = ".lastgood"
ENTRIES = f"{HOME}/journal/entries"
LOCK = f"{HOME}/journal/lock.json"
ARCHIVE = f"{HOME}/archive"
PG_LOCK_SUFFIX = ".pydantic-graph-persistence-lock"  # FileStatePersistence._lock's file, beside the run


def sha256(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def archive_path(root: Path, file_name: str, action_id: str) -> Path:
    return root / ARCHIVE / file_name / f"{action_id}.json"


def read_small(path: Path) -> bytes | None:
    """A file of Lastgood's own (a journal entry, a lock) of the folder ``path`` is in: bounded,
    not followed through a link, never waited on (a FIFO); None when it is not there, b"" when it is
    refused."""
    try:
        return read_bounded(LocalFS(), str(path), limits.MAX_SMALL_FILE_BYTES, os.path.realpath(path.parent))
    except (FileNotFoundError, NotADirectoryError):
        return None
    except (OSError, *REFUSED):
        return b""


def journal_entries(root: Path) -> list[dict[str, Any]]:
    """The journal, in sequence order (an unreadable entry stays in place, marked)."""
    return read_entries(LocalFS(), str(root / ENTRIES), os.path.realpath(root))
