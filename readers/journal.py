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
from lastgood.readers.base import Status
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol, runtime_checkable

ACTIONS = ("restore", "rollback", "quarantine", "release", "undo", "check-failed", "prune", "pin", "unpin", "policy")
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
        marks[key] = Mark(Status.QUARANTINED, f"quarantined by {entry.get('operator')}: {entry.get('reason')}",
                          action_id)
    elif kind == "supersede":
        if key not in marks or marks[key].status != Status.QUARANTINED:
            marks[key] = Mark(Status.SUPERSEDED, f"superseded by {entry.get('action')} {action_id} "
                              f"to {entry.get('target')}", action_id)
    elif kind == "release" and key in marks and marks[key].status == Status.QUARANTINED:
        del marks[key]
    elif kind == "unsupersede" and key in marks and marks[key].status == Status.SUPERSEDED:
        del marks[key]


def inverse_marks(marks: Mapping[str, Sequence[str]]) -> dict[str, list[str]]:
    pairs = {"quarantine": "release", "release": "quarantine",
             "supersede": "unsupersede", "unsupersede": "supersede", "pin": "unpin", "unpin": "pin"}
    out = empty_marks()
    for kind, ids in marks.items():
        if kind in pairs:
            out.setdefault(pairs[kind], []).extend(ids)
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

    def pending(self) -> list[dict[str, Any]]:
        """Actions begun but not completed (an intent left by a crash); [] where commits are one
        transaction."""
        ...


@runtime_checkable
class PreviewsOperations(Protocol):
    """Optional for a :class:`RecoveryBackend` that changes files: what an action will do to the
    store, one line per operation ("move checkpoint-24 → .lastgood/quarantine/…"), computed without
    writing anything. Dry runs list them."""

    def planned_operations(self, change: Change) -> list[str]: ...


def planned_operations(backend: object, change: Change) -> list[str]:
    """The backend's preview of its file operations, or [] when it has none to show."""
    return list(backend.planned_operations(change)) if isinstance(backend, PreviewsOperations) else []


# ---- retention: pins, the saved policy, what journaled actions protect, prune ---------------
#
# A pin is a mark (``marks.pin`` / ``marks.unpin`` of a "pin"/"unpin" entry; ``lastgood undo`` inverts
# it like any mark). The store's retention policy is the newest "policy" entry not undone (its
# ``note.policy``). A prune is one "prune" entry naming its archive and the archive's manifest (the
# list of what went, with each bundle's sha256); undoing it is an "undo" entry whose
# ``note.retention`` is "unprune". Both are written by a reader's :class:`RetentionBackend`.

PIN_KINDS = ("pin", "unpin")
RETENTION_ACTIONS = ("prune", "pin", "unpin", "policy")
UNPRUNE = "unprune"  # ``note.retention`` of the undo of a prune
# the columns of a keep-set's dependency edges: to read (run, namespace, checkpoint) the
# checkpoint (run, needs_namespace, needs_id) must be there too, because of ``rule``
EDGE_COLUMNS = ("run_id", "namespace", "checkpoint_id", "needs_namespace", "needs_id", "rule")
# the index's fields of each checkpoint a prune archives (the archive's catalog lists them)
FORGET_COLUMNS = ("run_id", "namespace", "checkpoint_id", "parent_id", "step", "created_at", "trigger",
                  "agent", "metadata", "size_bytes")
# what the core hands ``RetentionBackend.dependencies`` (one row per checkpoint of the store)
DEPENDENCY_COLUMNS = ("run_id", "namespace", "checkpoint_id", "parent_id", "kind", "codec", "metadata")


@dataclass(frozen=True, slots=True)
class Pin:
    reason: str
    action_id: str
    operator: str
    time: str


def fold_pins(entries: Iterable[Mapping[str, Any]]) -> dict[MarkKey, Pin]:
    """Checkpoints pinned now: ``pin`` marks add, ``unpin`` marks remove, in journal order."""
    pins: dict[MarkKey, Pin] = {}
    for entry in entries:
        kinds = entry.get("marks") or {}
        if not isinstance(kinds, Mapping):
            continue
        run, ns = str(entry.get("run_id") or ""), str(entry.get("namespace") or "")
        for cid in kinds.get("pin") or []:
            pins[(run, ns, str(cid))] = Pin(str(entry.get("reason") or ""), str(entry.get("id")),
                                            str(entry.get("operator") or ""), str(entry.get("time") or ""))
        for cid in kinds.get("unpin") or []:
            pins.pop((run, ns, str(cid)), None)
    return pins


def undone_ids(entries: Iterable[Mapping[str, Any]]) -> set[str]:
    return {str(e["undo_of"]) for e in entries if e.get("action") == "undo" and e.get("undo_of")}


def journal_targets(entries: Sequence[Mapping[str, Any]]) -> dict[MarkKey, str]:
    """Checkpoints that journaled actions not undone name, with why: a prune keeps them, so every such
    action can still be read back and undone — the target of a restore, rollback, quarantine or
    release, and the heads before and after any action that moved the head (an undo's too)."""
    undone = undone_ids(entries)
    out: dict[MarkKey, str] = {}
    for entry in entries:
        action = entry.get("action")
        if not entry.get("id") or str(entry["id"]) in undone or action in (*RETENTION_ACTIONS, "check-failed"):
            continue
        run, ns = str(entry.get("run_id") or ""), str(entry.get("namespace") or "")
        names = ["target"] if action in ("restore", "rollback", "quarantine", "release") else []
        if entry.get("new_head") != entry.get("previous_head"):
            names += ["previous_head", "new_head"]
        for name in names:
            cid = entry.get(name)
            if isinstance(cid, str) and cid:
                out.setdefault((run, ns, cid), f"{name.replace('_', ' ')} of {action} {entry['id']}")
    return out


def saved_policy(entries: Sequence[Mapping[str, Any]]) -> tuple[dict[str, Any] | None, Mapping[str, Any] | None]:
    """(the store's saved retention policy, the entry that saved it): the newest "policy" entry not
    undone; (None, entry) when that entry cleared it; (None, None) when none was ever saved."""
    undone = undone_ids(entries)
    for entry in reversed(entries):
        if entry.get("action") == "policy" and str(entry.get("id")) not in undone:
            note = entry.get("note") if isinstance(entry.get("note"), Mapping) else {}
            policy = note.get("policy")
            return (dict(policy) if isinstance(policy, Mapping) else None), entry
    return None, None


ProgressFn = Callable[[str, int, int], None]  # (phase, done, total)


@dataclass(frozen=True)
class PruneRequest:
    """Archive, then delete, the checkpoints in ``forget`` (FORGET_COLUMNS, an Arrow table), journaled
    with ``entry`` (action "prune", without seq/hash: the backend seals it). ``vacuum``: also give
    the space back to the filesystem where that needs a lock (SQLite VACUUM)."""

    entry: Mapping[str, Any]
    forget: Any  # pa.Table
    archive_url: str
    archive_options: Mapping[str, Any] = field(default_factory=dict)
    vacuum: bool = False
    progress: ProgressFn | None = None


@dataclass(frozen=True)
class UnpruneRequest:
    """Bring back what the prune ``original`` (its sealed entry) archived, byte for byte, journaled
    with ``entry`` (action "undo"). ``force``: restore into runs written to since the prune deleted
    them whole, and skip checkpoints that came back meanwhile with other bytes."""

    entry: Mapping[str, Any]
    original: Mapping[str, Any]
    force: bool = False
    archive_options: Mapping[str, Any] = field(default_factory=dict)
    progress: ProgressFn | None = None


@dataclass
class RetentionOutcome:
    """What a prune or its undo did."""

    entry: dict[str, Any]
    checkpoints: int = 0  # archived and deleted (prune) or restored (undo)
    bytes: int = 0  # bytes of the archived rows/files
    reparented: int = 0  # kept checkpoints whose parent went (LangGraph: parent set to none, as its own prune)
    skipped: list[dict[str, Any]] = field(default_factory=list)  # {run_id, namespace, checkpoint_id, reason}
    space: dict[str, Any] = field(default_factory=dict)  # what the store gave back (see reclaim)


def breakdown_row(table: str, rows: int, size: int, run_id: str | None = None, channel: str | None = None,
                  estimated: bool = False) -> dict[str, Any]:
    """One row of :meth:`RetentionBackend.breakdown` (``run_id``/``channel`` None: a total)."""
    return {"table": table, "channel": channel, "run_id": run_id, "rows": int(rows or 0), "bytes": int(size or 0),
            "estimated": estimated}


class RetentionBackend(Protocol):
    """The retention capability a reader offers through ``reader.retention()`` (see docs/readers.md).

    Optional attributes, so a million rows are not copied for nothing: ``dependency_rows`` —
    ``{column: [values]}``, only rows matching one are handed to :meth:`dependencies`;
    ``dependency_metadata`` — the same for which rows carry their metadata (absent: every row).
    The incremental parents (``kind`` = incremental) are the common model's: the core adds them.

    Prune: every checkpoint of ``forget`` is written to the archive (a native Lastgood store on any
    fsspec URL) before anything is deleted; the deletion re-checks, under the store's write lock,
    that none of them became a head, a pin or a journaled action's target meanwhile, and never
    touches a checkpoint written after the plan. A kill at any moment leaves each checkpoint in the
    store or the archive (both, until the prune completes), and the journal (or its intent) says
    which; :meth:`resume` completes an interrupted prune or undo."""

    def default_archive(self) -> str | None:
        """Where archives go when no ``--archive`` is given: beside the store (None: the format has no
        "beside", e.g. a database server; the core picks a folder under LASTGOOD_HOME)."""
        ...

    def breakdown(self, channels: bool = True, sample: int = 200) -> list[dict[str, Any]]:
        """What the store holds, as rows ``{table, channel, run_id, rows, bytes, estimated}``
        (``channel``/``run_id`` None for a table's total; ``estimated`` when from a sample)."""
        ...

    def footprint(self) -> dict[str, Any]:
        """Bytes on disk by area (``files``), bytes free inside them (reused, not given back), notes."""
        ...

    def dependencies(self, rows: Any) -> Any:
        """EDGE_COLUMNS (an Arrow table) for ``rows`` (DEPENDENCY_COLUMNS, the store's checkpoints):
        which checkpoints each one needs to be read beyond its incremental parent (DeltaChannel
        ancestors, subgraph parents and interrupt chains, pending sends)."""
        ...

    def prune(self, request: PruneRequest) -> RetentionOutcome: ...

    def unprune_conflicts(self, original: Mapping[str, Any], force: bool = False) -> list[str]:
        """Why undoing ``original`` now would fail (runs written to since they were deleted whole,
        checkpoints back with other bytes, the archive missing or changed): [] when it would not."""
        ...

    def unprune(self, request: UnpruneRequest) -> RetentionOutcome: ...

    def reclaim(self, vacuum: bool = False) -> dict[str, Any]:
        """Give freed space back where the format can (incremental vacuum; VACUUM when ``vacuum``
        and the store can be locked), and say plainly what stays deferred."""
        ...

    def resume(self) -> list[dict[str, Any]]:
        """Complete prunes and undos a crash interrupted; what was completed."""
        ...

    def pending(self) -> list[dict[str, Any]]:
        """Prunes and undos begun and not completed."""
        ...
