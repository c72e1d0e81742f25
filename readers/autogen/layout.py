"""Which files of a folder are AutoGen state files, and how they form runs.

AutoGen has no store of its own: an app writes ``json.dumps(await team.save_state())`` wherever it
likes. The usual layout (the sample generator's, and AutoGen's docs') is one file per saved turn,
numbered, one folder per team or agent: ``trip-team/state-0001.json`` … A *series* is the JSON
files of one folder whose names differ only in a trailing number (``state-0001.json``,
``state-0002.json`` → prefix ``state-``); it is a run:

- run id = the folder's path in the store (``trip-team``); when a folder holds several series,
  ``folder/prefix`` for each (``team/a``, ``team/b``); files directly in the store root: the prefix;
- a checkpoint = one file, id = its name without ``.json`` and its folder (``state-0003~trip-team``,
  :func:`checkpoint_id_of`), ordered by its number (file times are not meaningful after a copy or
  a checkout).

A series counts only if at least one of its files has the shape of a saved state
(``{"type": "…State", "version": …}``), so other JSON beside them is not mistaken for one.
Hidden names (``.lastgood/``: the journal of restores; ``.tmp`` files being written) are skipped.
"""

from __future__ import annotations

import json
import os
import posixpath
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from lastgood.readers.common.fsutil import is_local, is_temp_name

NAME = re.compile(r"^(?P<prefix>.*?)(?P<number>\d+)?\.json$", re.IGNORECASE)
HEAD_SHAPE = re.compile(rb'^\s*\{\s*"type"\s*:\s*"[A-Za-z0-9_]*State"\s*,\s*"version"\s*:')
LASTGOOD_DIR = ".lastgood"
MAX_DEPTH = 3  # folders below the store root searched for series
SNIFF_FILES = 6
SNIFF_BYTES = 1 << 20


@dataclass(frozen=True, slots=True)
class StateFile:
    """One JSON file of a series."""

    path: str  # relative to the store root, posix
    size: int
    mtime: float | None
    prefix: str
    number: int | None
    digits: int  # width of the number in the name (0: none)

    @property
    def checkpoint_id(self) -> str:
        return checkpoint_id_of(self.path)

    @property
    def folder(self) -> str:
        return posixpath.dirname(self.path)


@dataclass
class Series:
    """The files of one run, in order."""

    run_id: str
    folder: str
    prefix: str
    files: list[StateFile] = field(default_factory=list)

    def next_name(self) -> str | None:
        """The file name that sorts after every file of the series (None: the names have no number)."""
        numbered = [f for f in self.files if f.number is not None]
        if not numbered:
            return None
        width = max(f.digits for f in numbered)
        name = f"{self.prefix}{max(f.number for f in numbered) + 1:0{width}d}.json"  # type: ignore[type-var]
        return posixpath.join(self.folder, name) if self.folder else name


def checkpoint_id_of(path: str) -> str:
    """A file's checkpoint id: its name without ``.json``, then ``~`` and its folder (``/`` as ``:``) —
    ``state-0003~trip-team``. Unique in the store (each team's folder has its own ``state-0003``), and
    ``RUN/NAME`` still finds it (``trip-team/state-0003``: the id starts with the name); a file in the
    store's root is its bare name."""
    folder, base = posixpath.split(path)
    stem = base[: -len(".json")]
    return f"{stem}~{folder.replace('/', ':')}" if folder else stem


def parse_name(path: str, size: int, mtime: float | None) -> StateFile | None:
    base = posixpath.basename(path)
    match = NAME.match(base)
    if match is None or is_temp_name(base):
        return None
    number = match.group("number")
    return StateFile(path, size, mtime, match.group("prefix"), int(number) if number else None,
                     len(number) if number else 0)


def order_key(f: StateFile) -> tuple[Any, ...]:
    return (f.number is not None, f.number or 0, f.path)


def group(files: Iterable[StateFile], is_state: Any) -> list[Series]:
    """Series of ``files`` (each run's files in order); ``is_state(file)`` says a file has a state's shape."""
    by_key: dict[tuple[str, str], list[StateFile]] = {}
    for f in files:
        by_key.setdefault((f.folder, f.prefix), []).append(f)
    kept = {key: sorted(found, key=order_key) for key, found in by_key.items() if any(is_state(f) for f in found)}
    per_folder: dict[str, int] = {}
    for folder, _prefix in kept:
        per_folder[folder] = per_folder.get(folder, 0) + 1
    series = []
    for (folder, prefix), found in sorted(kept.items()):
        label = prefix.rstrip("-_. ") or "state"
        run = folder if folder and per_folder[folder] == 1 else posixpath.join(folder, label) if folder else label
        series.append(Series(run, folder, prefix, found))
    return series


def walk(fs: Any, root: str) -> Iterator[StateFile]:
    """Every ``*.json`` file under ``root`` (hidden names skipped; folder links not followed)."""
    if is_local(fs):
        yield from _walk_local(root, root, 0)
        return
    pending = [(root, 0)]
    while pending:
        folder, depth = pending.pop()
        try:
            entries = fs.ls(folder, detail=True)
        except (FileNotFoundError, NotADirectoryError, PermissionError):
            continue
        for entry in entries:
            name = str(entry.get("name", "")).rstrip("/")
            base = posixpath.basename(name)
            if not base or base.startswith("."):
                continue
            if entry.get("type") == "directory":
                if depth < MAX_DEPTH:
                    pending.append((name, depth + 1))
            elif entry.get("type") == "file" and base.lower().endswith(".json"):
                found = parse_name(posixpath.relpath(name, root), int(entry.get("size") or 0), _mtime(entry))
                if found is not None:
                    yield found


def _walk_local(root: str, folder: str, depth: int) -> Iterator[StateFile]:
    try:
        entries = sorted(os.scandir(folder), key=lambda e: e.name)
    except (FileNotFoundError, NotADirectoryError, PermissionError):
        return
    for entry in entries:
        if entry.name.startswith("."):
            continue
        if entry.is_dir(follow_symlinks=False):
            if depth < MAX_DEPTH:
                yield from _walk_local(root, entry.path, depth + 1)
        elif entry.name.lower().endswith(".json") and entry.is_file():
            info = entry.stat()
            relative = posixpath.relpath(entry.path, root).replace(os.sep, "/")
            found = parse_name(relative, info.st_size, info.st_mtime)
            if found is not None:
                yield found


def _mtime(entry: Mapping[str, Any]) -> float | None:
    value = entry.get("mtime", entry.get("LastModified", entry.get("created")))
    if isinstance(value, (int, float)):
        return float(value)
    timestamp = getattr(value, "timestamp", None)
    return float(timestamp()) if callable(timestamp) else None


def looks_like_state(head: bytes, whole: bool) -> bool:
    """The first bytes of a file (or all of it, ``whole``) look like a saved AutoGen state."""
    if HEAD_SHAPE.match(head):
        return True
    if not whole:
        return False
    try:
        value = json.loads(head)
    except (ValueError, UnicodeDecodeError):
        return False
    return is_state_shape(value)


def is_state_shape(value: Any) -> bool:
    return (isinstance(value, dict) and isinstance(value.get("type"), str) and value["type"].endswith("State")
            and "version" in value)
