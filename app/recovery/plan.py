"""Recovery: plan, then apply — restore, rollback, quarantine/release, undo.

    plan = plan_restore(catalog, store, "1ef…")            # a dry run: nothing is written
    result = apply_plan(catalog, store, plan, reason="bad tool output", operator="ana")

A plan says exactly what will change: the diff from the run's current head
to the target, what becomes superseded, what the agent resumes from, and the
side effects recorded after the target that a restore does not undo (tool
calls, interrupts, events). Applying needs a reason and an operator, names
the head it expects (``ConflictError`` when it moved), and is atomic in the
store's own way (see the readers' ``*_recovery`` modules). Afterwards the
head is loaded back through the format's own API and a failed check is
journaled. Statuses (quarantined, superseded) are derived from the journal
and copied into the index by :func:`sync_marks`.

Format-neutral: a reader offers writes through ``reader.recovery()`` (capability ``recovery``:
a ``lastgood.readers.journal.RecoveryBackend``). This module plans; ``apply`` commits a plan,
``effects`` lists what a restore does not undo, ``report`` reads the journal.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from lastgood.readers import journal as jr
from lastgood.checks import Check
from lastgood.index import queries
from lastgood.index.catalog import Catalog
from lastgood.errors import CheckpointNotFound, ConflictError, DecodeError, LastgoodError, NothingToDo, UsageError
from lastgood.readers.base import (Capability, CheckpointRecord, Recoverable, Status, capabilities, capability,
                                   sql_statuses)
from lastgood.index.marks import lost_entries
from lastgood.index.store import OpenStore
from lastgood.recovery.effects import side_effects

REFUSED_WITHOUT_FORCE = (Status.QUARANTINED, Status.CORRUPT)
MAX_DIFF_CHANGES = 200


@dataclass
class Plan:
    """What an action will do. ``to_dict`` is the dry-run JSON."""

    action: str
    run_id: str
    namespace: str
    target: str | None
    expected_head: str | None
    restore_from: str | None = None
    superseded: list[str] = field(default_factory=list)
    marks: dict[str, list[str]] = field(default_factory=jr.empty_marks)
    undo_of: str | None = None
    diff: dict[str, Any] | None = None
    side_effects: list[dict[str, Any]] = field(default_factory=list)
    operations: list[str] = field(default_factory=list)  # what the action does to the store's files
    warnings: list[str] = field(default_factory=list)
    target_status: str | None = None
    target_fields: dict[str, Any] = field(default_factory=dict)

    @property
    def resumes_from(self) -> str | None:
        return self.restore_from or self.expected_head

    @property
    def digest(self) -> str:
        keys = ("action", "run_id", "namespace", "target", "expected_head", "restore_from",
                "superseded", "marks", "undo_of")
        return jr.digest({k: getattr(self, k) for k in keys})

    def to_dict(self) -> dict[str, Any]:
        return {"action_id": None, "action": self.action, "run_id": self.run_id,
                "namespace": self.namespace, "target": self.target,
                "previous_head": self.expected_head, "new_head": self.restore_from or self.expected_head,
                "superseded": self.superseded, "dry_run": True, "resumes_from": self.resumes_from,
                "undo_of": self.undo_of, "marks": self.marks, "diff": self.diff,
                "side_effects": self.side_effects, "operations": self.operations, "warnings": self.warnings,
                "target_status": self.target_status, "plan_digest": self.digest}


# ---- the store's write capability ----------------------------------------------------------


def backend(store: OpenStore) -> jr.RecoveryBackend:
    """The reader's recovery capability (``reader.recovery()``), or a UsageError saying why not."""
    writer = capability(store.reader, Recoverable)
    if writer is None:
        raise UsageError(read_only_reason(store))
    return writer.recovery()


def can_write(store: OpenStore) -> bool:
    return Capability.RECOVERY in capabilities(store.reader)


def read_only_reason(store: OpenStore) -> str:
    """Why this store offers no write actions (shown on disabled buttons and in CLI errors)."""
    reason = store.reader.read_only_reason or "recovery is not available for this store format"
    return f"the {store.reader.name} reader cannot write: {reason}"


# ---- planning ------------------------------------------------------------------------


def plan_restore(catalog: Catalog, store: OpenStore, ref: str, *, force: bool = False,
                 rollback: bool = False, run_id: str | None = None) -> Plan:
    """Restore (or roll back to) the checkpoint ``ref`` names."""
    record = queries.resolve_checkpoint(catalog, store.store_id, ref)
    if run_id is not None and record.run_id != run_id:
        raise UsageError(f"checkpoint {record.checkpoint_id} belongs to run {record.run_id!r}, "
                         f"not {run_id!r}")
    _refuse_bad_target(record, force)
    _refuse_unsafe_target(catalog, store, record)
    head = backend(store).head(record.run_id, record.namespace)
    later = _later_checkpoints(catalog, store.store_id, record)
    plan = Plan("rollback" if rollback else "restore", record.run_id, record.namespace,
                record.checkpoint_id, head, restore_from=record.checkpoint_id,
                target_status=record.status, target_fields=_fields(record))
    if rollback:
        plan.superseded = [r.checkpoint_id for r in later if r.status != Status.SUPERSEDED]
        plan.marks["supersede"] = list(plan.superseded)
    if head == record.checkpoint_id and not plan.superseded:
        raise NothingToDo(f"{record.checkpoint_id} is already the head of run {record.run_id!r}: "
                          "nothing to do", run_id=record.run_id, namespace=record.namespace,
                          checkpoint_id=record.checkpoint_id)
    if record.status in REFUSED_WITHOUT_FORCE:
        plan.warnings.append(f"target is {record.status} ({record.status_reason}); forced")
    _preview(catalog, store, plan, record, later)
    return _warn_broken_journal(store, plan, catalog=catalog)


def plan_rollback(catalog: Catalog, store: OpenStore, run_id: str, ref: str, *,
                  force: bool = False) -> Plan:
    return plan_restore(catalog, store, ref, force=force, rollback=True, run_id=run_id)


def plan_restore_last_good(catalog: Catalog, store: OpenStore, run_id: str, namespace: str = "",
                           *, rollback: bool = False) -> Plan:
    from lastgood.integrity.health import last_good

    good = last_good(catalog, store.store_id, run_id, namespace)
    if good is None and not queries.run_exists(catalog, store.store_id, run_id, namespace):
        raise CheckpointNotFound(f"no run {run_id!r}" + (f" (namespace {namespace!r})" if namespace else ""))
    if good is None:
        raise CheckpointNotFound(f"run {run_id!r} has no good checkpoint (none passed a data check "
                                 "without errors): run `lastgood verify --read-data` first")
    return plan_restore(catalog, store, good, rollback=rollback, run_id=run_id)


def plan_quarantine(catalog: Catalog, store: OpenStore, ref: str, *, release: bool = False) -> Plan:
    record = queries.resolve_checkpoint(catalog, store.store_id, ref)
    entries = backend(store).journal_entries()
    marks = jr.fold_marks(entries)
    current = marks.get((record.run_id, record.namespace, record.checkpoint_id))
    quarantined = current is not None and current.status == Status.QUARANTINED
    if release and not quarantined:
        raise UsageError(f"{record.checkpoint_id} is not quarantined: nothing to release")
    if not release and quarantined:
        raise UsageError(f"{record.checkpoint_id} is already quarantined")
    head = backend(store).head(record.run_id, record.namespace)
    plan = Plan("release" if release else "quarantine", record.run_id, record.namespace,
                record.checkpoint_id, head, target_status=record.status,
                target_fields=_fields(record))
    plan.marks["release" if release else "quarantine"] = [record.checkpoint_id]
    if not release and head == record.checkpoint_id:
        plan.warnings.append("this checkpoint is the run's head: the agent still resumes from it "
                             "until you restore another one")
    return _warn_broken_journal(store, plan, entries, catalog)


def plan_undo(catalog: Catalog, store: OpenStore, action_id: str, *, force: bool = False) -> Plan:
    """Undo an earlier action: move the head back and invert its marks. The head it moves back to
    is refused as a restore target would be (quarantined or corrupt since: ``force``)."""
    entries = backend(store).journal_entries()
    original = find_action(entries, action_id)
    if original.get("action") == "check-failed":
        raise UsageError(f"{original['id']} records a failed check; there is nothing to undo")
    if original.get("action") == "prune" or (original.get("note") or {}).get("retention"):
        raise UsageError(f"{original['id']} is a prune (or its undo): lastgood.retention undoes prunes "
                         "(`lastgood undo STORE ACTION` does it)")
    _refuse_undone(entries, str(original["id"]))
    run, ns = str(original.get("run_id")), str(original.get("namespace") or "")
    head = backend(store).head(run, ns)
    moved = original.get("new_head") != original.get("previous_head")
    restore_from = original.get("previous_head") if moved else None
    if moved and head != original.get("new_head"):
        raise ConflictError(f"the head of run {run!r} moved since {original['id']} "
                         f"({original.get('new_head')} → {head}); restore the checkpoint you want instead")
    inverse = jr.inverse_marks(original.get("marks") or {})
    _refuse_stacked_marks(entries, run, ns, inverse)
    plan = Plan("undo", run, ns, restore_from or original.get("target"), head,
                restore_from=restore_from, undo_of=str(original["id"]),
                marks=inverse)
    if restore_from:
        record = queries.resolve_checkpoint(catalog, store.store_id, f"{run}/{restore_from}@{ns}")
        _refuse_bad_target(record, force)
        _refuse_unsafe_target(catalog, store, record)
        if record.status in REFUSED_WITHOUT_FORCE:
            plan.warnings.append(f"the checkpoint this undo restores is {record.status} "
                                 f"({record.status_reason}); forced")
        plan.target_status, plan.target_fields = record.status, _fields(record)
        _preview(catalog, store, plan, record, [])
    return _warn_broken_journal(store, plan, entries, catalog)


def _warn_broken_journal(store: OpenStore, plan: Plan, entries: list[dict[str, Any]] | None = None,
                         catalog: Catalog | None = None) -> Plan:
    """A journal whose hash chain does not hold (edited or damaged), or that lost entries from its
    end, is said in every plan: the action still appends, but its history can no longer be
    trusted as a record."""
    entries = backend(store).journal_entries() if entries is None else entries
    if not journal_chain(store, entries, catalog).ok:
        plan.warnings.append("the store's journal chain is BROKEN (an entry was edited, removed or "
                             "damaged): `lastgood journal STORE` shows where")
    return plan


def journal_chain(store: OpenStore, entries: list[dict[str, Any]], catalog: Catalog | None = None
                  ) -> jr.ChainReport:
    """The journal's hash chain; with the ``catalog`` that indexed the store, entries lost from
    its end (:func:`lost_entries`) break it too."""
    chain = jr.verify_chain(entries)
    if catalog is None:
        return chain
    with catalog.connect() as con:
        lost = lost_entries(con, store.store_id, entries)
    return jr.ChainReport(chain.ok and not lost, chain.entries, [*lost, *chain.problems])


def undone_actions(entries: list[dict[str, Any]]) -> dict[str, str]:
    """``{undone action id: the undo's id}`` (an action is undone once; the newest undo wins)."""
    return {str(e["undo_of"]): str(e["id"]) for e in entries if e.get("action") == "undo" and e.get("undo_of")}


def _refuse_stacked_marks(entries: list[dict[str, Any]], run: str, ns: str,
                          inverse: Mapping[str, list[str]]) -> None:
    """An undo that would quarantine a checkpoint already quarantined (by a later action) or
    release one that no longer is: refused, as a quarantine or release by hand would be — a
    stacked mark would be lifted whole by the next undo."""
    current = jr.fold_marks(entries)

    def quarantined(cid: str) -> bool:
        mark = current.get((run, ns, cid))
        return mark is not None and mark.status == Status.QUARANTINED
    stacked = [c for c in inverse.get("quarantine", []) if quarantined(c)]
    if stacked:
        raise UsageError(f"{stacked[0]} is already quarantined (by a later action): undo or release that first")
    gone = [c for c in inverse.get("release", []) if not quarantined(c)]
    if gone:
        raise UsageError(f"{gone[0]} is not quarantined any more: nothing to release")


def _refuse_undone(entries: list[dict[str, Any]], action_id: str) -> None:
    """An action is undone once: a second undo would re-apply the inverse over whatever came after."""
    undone_by = undone_actions(entries).get(action_id)
    if undone_by:
        raise UsageError(f"{action_id} was already undone by {undone_by}; undo {undone_by} to bring it back")


def find_action(entries: list[dict[str, Any]], action_id: str) -> dict[str, Any]:
    found = [e for e in entries if str(e.get("id") or "").startswith(action_id)]
    if not found:
        raise CheckpointNotFound(f"no journal entry matches {action_id!r}")
    if len({e["id"] for e in found}) > 1:
        raise UsageError(f"{action_id!r} matches several journal entries: give more characters")
    return found[0]


# findings that make a checkpoint never a restore target, forced or not: its payload would run code
# when the agent resumes (a pickle, a type that names a class to import), or is of a kind nothing can
# read back (an unknown codec) — a copy of it would break the run's history for the format's own API
SECURITY_CHECKS = frozenset({Check.PICKLE_PAYLOAD, Check.SUSPICIOUS_TYPE, Check.UNKNOWN_CODEC, Check.UNSAFE_PICKLE})


def _refuse_unsafe_target(catalog: Catalog, store: OpenStore, record: CheckpointRecord) -> None:
    found = [f for f in queries.findings(catalog, store.store_id, checkpoint_id=record.checkpoint_id)
             if f["check"] in SECURITY_CHECKS and f["run_id"] == record.run_id
             and (f["namespace"] or "") == record.namespace]
    if found:
        raise UsageError(f"{record.checkpoint_id} can never be restored, forced or not: {found[0]['check']} "
                         f"({found[0]['message']}); nothing was written")


def _refuse_bad_target(record: CheckpointRecord, force: bool) -> None:
    if record.status == Status.INCOMPLETE:
        raise UsageError(f"{record.checkpoint_id} is incomplete (its save never committed): "
                         "it cannot be restored")
    if record.status in REFUSED_WITHOUT_FORCE and not force:
        raise UsageError(f"{record.checkpoint_id} is {record.status} ({record.status_reason}); "
                         "pass --force to restore it anyway")


def _later_checkpoints(catalog: Catalog, store_id: int, record: CheckpointRecord) -> list[CheckpointRecord]:
    with catalog.connect() as con:
        cur = con.execute(f"""SELECT * FROM checkpoints WHERE store_id = $sid AND run_id = $run
            AND namespace = $ns AND checkpoint_id <> $cid AND status <> {sql_statuses(Status.INCOMPLETE)}
            AND (created_at, checkpoint_id) > ($at, $cid)
            ORDER BY created_at, checkpoint_id""",
                          {"sid": store_id, "run": record.run_id, "ns": record.namespace,
                           "cid": record.checkpoint_id, "at": record.created_at})
        names = [d[0] for d in cur.description]
        rows = [dict(zip(names, row)) for row in cur.fetchall()]
    from lastgood.readers.base import record_from_row

    return [record_from_row(r) for r in rows]


def _fields(record: CheckpointRecord) -> dict[str, Any]:
    return {k: getattr(record, k) for k in ("checkpoint_id", "step", "kind", "codec", "location",
                                             "checksum", "created_at", "status")}


# ---- the preview -----------------------------------------------------------------------


def _preview(catalog: Catalog, store: OpenStore, plan: Plan, target: CheckpointRecord,
             later: list[CheckpointRecord]) -> None:
    plan.diff = _diff_head_to_target(catalog, store, plan, target)
    plan.side_effects = side_effects(catalog, store, target, later, plan.warnings)
    plan.operations = _operations(store, plan)


def _operations(store: OpenStore, plan: Plan) -> list[str]:
    """The store's own preview of the files the action moves or rewrites (formats without files: [])."""
    if not plan.restore_from or not can_write(store):
        return []
    change = jr.Change(plan.run_id, plan.namespace, plan.expected_head, plan.restore_from,
                       {"id": "<action-id>", "action": plan.action}, plan.target_fields)
    try:
        return jr.planned_operations(backend(store), change)
    except (LastgoodError, OSError) as exc:
        plan.warnings.append(f"the store's file operations cannot be previewed: {exc}")
        return []


def _diff_head_to_target(catalog: Catalog, store: OpenStore, plan: Plan,
                         target: CheckpointRecord) -> dict[str, Any] | None:
    from lastgood.investigate.diff import diff_states

    try:
        after = store.reader.load_state(target)
    except DecodeError as exc:
        plan.warnings.append(f"the target's state does not decode: {exc}")
        return None
    before: Any = None
    if plan.expected_head:
        try:
            head = queries.resolve_checkpoint(catalog, store.store_id, plan.expected_head)
            before = store.reader.load_state(head)
        except (CheckpointNotFound, DecodeError) as exc:
            plan.warnings.append(f"the current head's state cannot be read ({exc}); diff against empty")
    result = diff_states(before, after)
    data = result.to_dict(plan.expected_head or "(none)", target.checkpoint_id)
    changes = data.get("changes") or []
    if len(changes) > MAX_DIFF_CHANGES:
        data["changes"], data["truncated"] = changes[:MAX_DIFF_CHANGES], len(changes)
    return data
