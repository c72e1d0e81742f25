"""Applying a prune plan, and undoing a prune, through the reader's retention backend.

    result = apply_prune(catalog, store, plan, reason="keep the last 10", operator="ana")
    undo = plan_undo_prune(catalog, store, result.action_id)        # dry run: conflicts, counts
    apply_undo_prune(catalog, store, undo, reason="need them back", operator="ana")

The backend archives before it deletes, journals the action with the reason and the operator, and
re-checks under the store's write lock what the plan assumed (heads, pins, journaled targets). The
index is refreshed afterwards so every page shows the store as it is.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from lastgood.errors import CheckpointNotFound, ConflictError, UsageError
from lastgood.index.catalog import Catalog
from lastgood.index.store import OpenStore
from lastgood.readers import journal as jr
from lastgood.recovery.plan import find_action
from lastgood.retention.plan import PrunePlan, journal_entries, retention_backend


@dataclass
class PruneResult:
    """What a prune (or its undo) did; ``to_dict`` is the CLI's JSON."""

    action_id: str
    action: str
    dry_run: bool
    checkpoints: int
    bytes: int
    archive: str | None
    reparented: int = 0
    skipped: list[dict[str, Any]] = field(default_factory=list)
    space: dict[str, Any] = field(default_factory=dict)
    undo_of: str | None = None
    policy: dict[str, Any] | None = None
    summary: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out.update(run_id=None, target=None, previous_head=None, new_head=None, superseded=[])
        return out


def _base_entry(action: str, reason: str, operator: str) -> dict[str, Any]:
    if not reason or not reason.strip():
        raise UsageError("a reason is required (--reason TEXT)")
    return {"id": jr.new_action_id(), "time": jr.now_iso(), "operator": operator, "action": action,
            "reason": reason.strip(), "run_id": None, "namespace": "", "target": None, "previous_head": None,
            "superseded": [], "undo_of": None, "plan_digest": None, "marks": jr.empty_marks(), "note": {}}


def apply_prune(catalog: Catalog, store: OpenStore, plan: PrunePlan, *, reason: str, operator: str,
                vacuum: bool = False, archive_options: dict[str, Any] | None = None,
                progress: jr.ProgressFn | None = None, refresh: bool = True) -> PruneResult:
    """Archive, then delete, what ``plan`` forgets; journaled. With nothing to forget, only
    ``vacuum`` runs (no journal entry)."""
    backend = retention_backend(store)
    entry = _base_entry("prune", reason, operator)
    forget = plan.forget_table(catalog)
    if forget.num_rows == 0:
        space = backend.reclaim(vacuum) if vacuum else {}
        return PruneResult("", "prune", False, 0, 0, None, space=space, policy=plan.policy.to_dict(),
                           summary=plan.summary)
    entry.update(plan_digest=plan.digest, note={"policy": plan.policy.to_dict(), "policy_text": plan.policy.describe(),
                                                "planned": {k: plan.summary[k] for k in ("checkpoints", "keep", "forget",
                                                                                         "bytes_forget")}})
    request = jr.PruneRequest(entry, forget, plan.archive, dict(archive_options or {}), vacuum, progress)
    outcome = backend.prune(request)
    if refresh:
        refresh_index(catalog, store)
    note = outcome.entry.get("note") if isinstance(outcome.entry.get("note"), dict) else {}
    archive = note.get("archive") or plan.archive  # where the backend put it (a format may keep its own)
    return PruneResult(str(outcome.entry.get("id")), "prune", False, outcome.checkpoints, outcome.bytes,
                       archive, outcome.reparented, outcome.skipped, outcome.space,
                       policy=plan.policy.to_dict(), summary=plan.summary)


def refresh_index(catalog: Catalog, store: OpenStore, full: bool = False) -> None:
    """Re-list the store (and copy the journal's marks) so every page shows it as it is now."""
    from lastgood.stores import index_store

    fresh = index_store(catalog, store.url, reader_name=store.reader.name, full=full, check="none")
    fresh.store.reader.close()


# ---- undo ----------------------------------------------------------------------------------


@dataclass
class UndoPrunePlan:
    """The undo of a prune, before it runs: what comes back, and why it would fail."""

    original: dict[str, Any]
    conflicts: list[str]
    force: bool = False

    def to_dict(self) -> dict[str, Any]:
        note = self.original.get("note") or {}
        return {"action_id": None, "action": "undo", "undo_of": self.original.get("id"), "run_id": None,
                "target": None, "previous_head": None, "new_head": None, "superseded": [], "dry_run": True,
                "restores": note.get("count"), "bytes": note.get("bytes"), "archive": note.get("archive"),
                "conflicts": self.conflicts, "force": self.force,
                "warnings": [f"conflict: {c}" for c in self.conflicts]}


def is_prune(store: OpenStore, action_id: str) -> bool:
    """Does ``action_id`` (or a unique prefix) name a prune in the store's journal?"""
    try:
        return find_action(journal_entries(store), action_id).get("action") == "prune"
    except (CheckpointNotFound, UsageError):
        return False


def plan_undo_prune(catalog: Catalog, store: OpenStore, action_id: str, *, force: bool = False) -> UndoPrunePlan:
    entries = journal_entries(store)
    original = find_action(entries, action_id)
    if original.get("action") != "prune":
        raise UsageError(f"{original.get('id')} is a {original.get('action')}, not a prune")
    undone = {str(e["undo_of"]): str(e["id"]) for e in entries if e.get("action") == "undo" and e.get("undo_of")}
    if str(original["id"]) in undone:
        raise UsageError(f"{original['id']} was already undone by {undone[str(original['id'])]}")
    later = [e for e in entries if e.get("action") == "prune" and int(e.get("seq") or 0) > int(original.get("seq") or 0)
             and str(e.get("id")) not in undone]
    if later:
        raise UsageError(f"a later prune ({later[-1]['id']}) is not undone: undo it first "
                         "(prunes are undone newest first)")
    conflicts = retention_backend(store).unprune_conflicts(original, force)
    return UndoPrunePlan(original, conflicts, force)


def apply_undo_prune(catalog: Catalog, store: OpenStore, plan: UndoPrunePlan, *, reason: str, operator: str,
                     archive_options: dict[str, Any] | None = None, progress: jr.ProgressFn | None = None,
                     refresh: bool = True) -> PruneResult:
    if plan.conflicts and not plan.force:
        raise ConflictError("; ".join(plan.conflicts) + "; nothing was restored")
    entry = _base_entry("undo", reason, operator)
    note = plan.original.get("note") or {}
    entry.update(undo_of=str(plan.original["id"]), note={"retention": jr.UNPRUNE, "archive": note.get("archive"),
                                                          "manifest_sha256": note.get("manifest_sha256")})
    request = jr.UnpruneRequest(entry, plan.original, plan.force, dict(archive_options or {}), progress)
    outcome = retention_backend(store).unprune(request)
    if refresh:
        refresh_index(catalog, store, full=True)  # parent ids given back change rows in place
    return PruneResult(str(outcome.entry.get("id")), "undo", False, outcome.checkpoints, outcome.bytes,
                       note.get("archive"), outcome.reparented, outcome.skipped, outcome.space,
                       undo_of=str(plan.original["id"]))


