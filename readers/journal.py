"""The recovery journal: append-only, hash-chained records of every write action.

Every restore, rollback, quarantine, release and undo appends one entry to the
store's own journal (files under ``journal/`` for native stores, a table in
the same database for LangGraph). Each entry carries the sha256 of the entry
before it, so removing, reordering or editing an entry breaks the chain:

    hash = sha256(canonical JSON of the entry without "hash")   # includes prev_hash

Checkpoint statuses set by hand (quarantined) or by a rollback (superseded)
are *derived* from the journal: each entry lists the marks it adds or removes,
and folding the entries in order gives the current marks. One source of
truth, written in the same atomic step as the head change.

This module is format-neutral; the readers' recovery backends store entries.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

ACTIONS = ("restore", "rollback", "quarantine", "release", "undo", "check-failed")
MARK_KINDS = ("quarantine", "release", "supersede", "unsupersede")
ENTRY_FIELDS = ("id", "seq", "time", "operator", "action", "reason", "run_id", "namespace",
                "target", "previous_head", "new_head", "superseded", "undo_of", "plan_digest",
                "marks", "note", "prev_hash")


def new_action_id() -> str:
    return "act-" + uuid.uuid4().hex[:16]


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


def canonical(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                      default=str).encode()


def digest(value: Any) -> str:
    return "sha256:" + hashlib.sha256(canonical(value)).hexdigest()


def entry_hash(entry: Mapping[str, Any]) -> str:
    return digest({k: v for k, v in entry.items() if k != "hash"})


def seal(entry: Mapping[str, Any], seq: int, prev_hash: str) -> dict[str, Any]:
    """The entry as stored: numbered, linked to its predecessor, hashed."""
    sealed = {name: entry.get(name) for name in ENTRY_FIELDS}
    sealed["seq"], sealed["prev_hash"] = seq, prev_hash
    sealed["hash"] = entry_hash(sealed)
    return sealed


def tip(entries: Sequence[Mapping[str, Any]]) -> tuple[int, str]:
    """(next sequence number, hash to link to) after ``entries``."""
    if not entries:
        return 1, ""
    last = entries[-1]
    return int(last.get("seq") or len(entries)) + 1, str(last.get("hash") or "")


@dataclass(frozen=True, slots=True)
class ChainReport:
    ok: bool
    entries: int
    problems: list[str] = field(default_factory=list)


def verify_chain(entries: Sequence[Mapping[str, Any]]) -> ChainReport:
    """Check numbering, links and hashes; a problem names the entry it was found at."""
    problems = []
    prev_hash = ""
    for position, entry in enumerate(entries, start=1):
        if entry.get("seq") != position:
            problems.append(f"entry {position}: sequence number {entry.get('seq')!r}, expected {position}")
        if entry.get("prev_hash") != prev_hash:
            problems.append(f"entry {position} ({entry.get('id')}): does not link to the entry before it")
        if entry.get("hash") != entry_hash(entry):
            problems.append(f"entry {position} ({entry.get('id')}): content does not match its hash")
        prev_hash = str(entry.get("hash") or "")
    return ChainReport(not problems, len(entries), problems)


def parse_entry(data: bytes | str) -> dict[str, Any] | None:
    try:
        value = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError, TypeError):
        return None
    return value if isinstance(value, dict) else None


# ---- marks ------------------------------------------------------------------------

MarkKey = tuple[str, str, str]  # run_id, namespace, checkpoint_id


@dataclass(frozen=True, slots=True)
class Mark:
    status: str  # quarantined | superseded
    reason: str
    action_id: str


def empty_marks() -> dict[str, list[str]]:
    return {kind: [] for kind in MARK_KINDS}


def fold_marks(entries: Iterable[Mapping[str, Any]]) -> dict[MarkKey, Mark]:
    """Current marks after every entry: quarantine/supersede add, release/unsupersede remove."""
    marks: dict[MarkKey, Mark] = {}
    for entry in entries:
        run, ns = str(entry.get("run_id") or ""), str(entry.get("namespace") or "")
        kinds = entry.get("marks") or {}
        if not isinstance(kinds, Mapping):
            continue
        for kind in MARK_KINDS:
            for cid in kinds.get(kind) or []:
                _apply_mark(marks, (run, ns, str(cid)), kind, entry)
    return marks


def _apply_mark(marks: dict[MarkKey, Mark], key: MarkKey, kind: str, entry: Mapping[str, Any]) -> None:
    action_id = str(entry.get("id"))
    if kind == "quarantine":
        marks[key] = Mark("quarantined", f"quarantined by {entry.get('operator')}: {entry.get('reason')}",
                          action_id)
    elif kind == "supersede":
        if key not in marks or marks[key].status != "quarantined":
            marks[key] = Mark("superseded", f"superseded by {entry.get('action')} {action_id} "
                              f"to {entry.get('target')}", action_id)
    elif kind == "release" and key in marks and marks[key].status == "quarantined":
        del marks[key]
    elif kind == "unsupersede" and key in marks and marks[key].status == "superseded":
        del marks[key]


def inverse_marks(marks: Mapping[str, Sequence[str]]) -> dict[str, list[str]]:
    pairs = {"quarantine": "release", "release": "quarantine",
             "supersede": "unsupersede", "unsupersede": "supersede"}
    out = empty_marks()
    for kind, ids in marks.items():
        if kind in pairs:
            out[pairs[kind]].extend(ids)
    return out


# ---- what a format provides ------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Change:
    """One action to commit atomically.

    ``restore_from`` names the checkpoint whose state becomes the run's new
    head (None: marks only). ``entry`` is the journal entry without
    ``new_head``/``seq``/``prev_hash``/``hash``, which the backend fills in
    while it holds the store's write lock.
    """

    run_id: str
    namespace: str
    expected_head: str | None
    restore_from: str | None
    entry: Mapping[str, Any]
    target: Mapping[str, Any] | None = None  # the index's fields of ``restore_from``


@dataclass(frozen=True, slots=True)
class HeadCheck:
    ok: bool
    message: str


class RecoveryBackend(Protocol):
    """The write capability a reader offers through ``reader.recovery()``."""

    def head(self, run_id: str, namespace: str = "") -> str | None: ...

    def journal_entries(self) -> list[dict[str, Any]]: ...

    def commit(self, change: Change) -> dict[str, Any]: ...

    def append(self, entry: Mapping[str, Any]) -> dict[str, Any]: ...

    def check_head(self, run_id: str, namespace: str, target_id: str,
                   expected_state: Any) -> HeadCheck: ...

    def side_effects(self, run_id: str, namespace: str, after: Sequence[str]) -> list[dict[str, Any]]: ...
