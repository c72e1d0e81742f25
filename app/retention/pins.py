"""Pins and the store's saved retention policy: both are journal entries (docs/cli.md "Retention").

A pin is a mark in the store's journal ("pin" / "unpin" entries, with a reason and the operator): a
pinned checkpoint is kept by every prune. The saved policy is the newest "policy" entry not undone:
it lives with the store, so every operator and every scheduled ``lastgood prune STORE`` sees the same
one, and changing it is audited like any action (``lastgood undo`` puts the previous one back).
"""

from __future__ import annotations

from typing import Any

from lastgood.errors import UsageError
from lastgood.index import queries
from lastgood.index.catalog import Catalog
from lastgood.index.store import OpenStore
from lastgood.readers import journal as jr
from lastgood.recovery import backend as recovery_backend
from lastgood.retention.plan import journal_entries
from lastgood.retention.policy import Policy


def _entry(action: str, reason: str, operator: str, **fields: Any) -> dict[str, Any]:
    if not reason or not reason.strip():
        raise UsageError("a reason is required (--reason TEXT)")
    entry = {"id": jr.new_action_id(), "time": jr.now_iso(), "operator": operator, "action": action,
             "reason": reason.strip(), "run_id": None, "namespace": "", "target": None, "previous_head": None,
             "new_head": None, "superseded": [], "undo_of": None, "plan_digest": None, "marks": jr.empty_marks(),
             "note": {}}
    entry.update(fields)
    return entry


def pins(store: OpenStore) -> list[dict[str, Any]]:
    """Every pinned checkpoint: ``{run_id, namespace, checkpoint_id, reason, action_id, operator, time}``."""
    return [{"run_id": run, "namespace": ns, "checkpoint_id": cid, "reason": pin.reason, "action_id": pin.action_id,
             "operator": pin.operator, "time": pin.time}
            for (run, ns, cid), pin in sorted(jr.fold_pins(journal_entries(store)).items())]


def pin(catalog: Catalog, store: OpenStore, ref: str, *, reason: str, operator: str, unpin: bool = False
        ) -> dict[str, Any]:
    """Pin (or unpin) the checkpoint ``ref`` names; the journal entry as sealed."""
    record = queries.resolve_checkpoint(catalog, store.store_id, ref)
    key = (record.run_id, record.namespace, record.checkpoint_id)
    pinned = key in jr.fold_pins(journal_entries(store))
    if unpin and not pinned:
        raise UsageError(f"{record.checkpoint_id} is not pinned: nothing to unpin")
    if not unpin and pinned:
        raise UsageError(f"{record.checkpoint_id} is already pinned")
    kind = "unpin" if unpin else "pin"
    entry = _entry(kind, reason, operator, run_id=record.run_id, namespace=record.namespace,
                   target=record.checkpoint_id, marks={**jr.empty_marks(), kind: [record.checkpoint_id]})
    sealed = recovery_backend(store).append(entry)
    return {"action_id": sealed["id"], "action": kind, "run_id": record.run_id, "namespace": record.namespace,
            "target": record.checkpoint_id, "previous_head": None, "new_head": None, "superseded": [],
            "dry_run": False, "reason": sealed.get("reason"), "operator": sealed.get("operator")}


def saved_policy(store: OpenStore) -> dict[str, Any] | None:
    """``{policy, text, options, action_id, operator, time, reason}`` of the store's saved policy, or None."""
    policy, entry = jr.saved_policy(journal_entries(store))
    if policy is None or entry is None:
        return None
    parsed = Policy.from_dict(policy)
    return {"policy": parsed.to_dict(), "text": parsed.describe(), "options": parsed.options(),
            "action_id": entry.get("id"), "operator": entry.get("operator"), "time": entry.get("time"),
            "reason": entry.get("reason")}


def save_policy(store: OpenStore, policy: Policy | None, *, reason: str, operator: str) -> dict[str, Any]:
    """Save ``policy`` as the store's retention policy (None: clear it); the journal entry as sealed."""
    saved = None if policy is None or policy.empty else policy.to_dict()
    entry = _entry("policy", reason, operator, note={"policy": saved})
    return recovery_backend(store).append(entry)
