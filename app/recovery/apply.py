"""Applying a plan: atomically through the reader's recovery backend, with a reason and an operator,
naming the head it expects (``ConflictError`` when it moved); afterwards the head is read back and a
failed check is journaled, and the index is refreshed so every page shows the new head and marks."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from lastgood.errors import DecodeError, UsageError
from lastgood.index.catalog import Catalog
from lastgood.index.store import OpenStore
from lastgood.readers import journal as jr
from lastgood.readers.base import CheckpointRecord
from lastgood.recovery.plan import Plan, backend


# ---- applying -----------------------------------------------------------------------------


@dataclass
class ActionResult:
    action_id: str
    action: str
    run_id: str
    namespace: str
    target: str | None
    previous_head: str | None
    new_head: str | None
    superseded: list[str]
    undo_of: str | None
    check: dict[str, Any] | None
    dry_run: bool = False

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def apply_plan(catalog: Catalog, store: OpenStore, plan: Plan, *, reason: str, operator: str,
               expected_head: str | None = None, refresh: bool = True) -> ActionResult:
    """Commit the plan atomically; ConflictError (nothing written) when the head moved."""
    if not reason or not reason.strip():
        raise UsageError("a reason is required (--reason TEXT)")
    expected = plan.expected_head if expected_head is None else expected_head
    entry = _entry(plan, reason.strip(), operator, expected)
    writer = backend(store)
    change = jr.Change(plan.run_id, plan.namespace, expected, plan.restore_from, entry,
                       plan.target_fields)
    sealed = writer.commit(change)
    check = _check(store, writer, plan, sealed)
    if refresh:
        refresh_index(catalog, store)
    return ActionResult(str(sealed["id"]), plan.action, plan.run_id, plan.namespace, plan.target,
                        sealed.get("previous_head"), sealed.get("new_head"), plan.superseded,
                        plan.undo_of, check)


def _entry(plan: Plan, reason: str, operator: str, expected: str | None) -> dict[str, Any]:
    return {"id": jr.new_action_id(), "time": jr.now_iso(), "operator": operator,
            "action": plan.action, "reason": reason, "run_id": plan.run_id,
            "namespace": plan.namespace, "target": plan.target, "previous_head": expected,
            "superseded": plan.superseded, "undo_of": plan.undo_of, "plan_digest": plan.digest,
            "marks": plan.marks, "note": {"restored_from": plan.restore_from}}


def _check(store: OpenStore, writer: jr.RecoveryBackend, plan: Plan,
           sealed: Mapping[str, Any]) -> dict[str, Any] | None:
    """Load the new head through the format's own API; journal a failure."""
    if not plan.restore_from:
        return None
    try:
        expected_state = _target_state(store, plan)
        result = writer.check_head(plan.run_id, plan.namespace, plan.restore_from, expected_state)
    except DecodeError as exc:
        result = jr.HeadCheck(False, f"the target's state does not load any more: {exc}")
    except Exception as exc:  # noqa: BLE001 - the format's own API failed on the new head: journal it
        result = jr.HeadCheck(False, f"the new head could not be read back: {type(exc).__name__}: "
                                     f"{' '.join(str(exc).split())[:300]}")
    if not result.ok:
        writer.append({"id": jr.new_action_id(), "time": jr.now_iso(), "operator": sealed["operator"],
                       "action": "check-failed", "reason": result.message, "run_id": plan.run_id,
                       "namespace": plan.namespace, "target": sealed.get("new_head"),
                       "previous_head": sealed.get("new_head"), "new_head": sealed.get("new_head"),
                       "superseded": [], "undo_of": None, "plan_digest": None,
                       "marks": jr.empty_marks(), "note": {"checks": sealed["id"]}})
    return {"ok": result.ok, "message": result.message}


def _target_state(store: OpenStore, plan: Plan) -> Any:
    """The target's state through the reader (file stores; a database checks itself)."""
    if not plan.target_fields.get("location"):
        return None
    fields = {k: v for k, v in plan.target_fields.items() if k != "status"}
    return store.reader.load_state(CheckpointRecord(run_id=plan.run_id, namespace=plan.namespace,
                                                    **fields))


def refresh_index(catalog: Catalog, store: OpenStore) -> None:
    """Re-list the store so ``ls`` shows the new head and the marks."""
    from lastgood.stores import index_store

    fresh = index_store(catalog, store.url, reader_name=store.reader.name, check="none")
    fresh.store.reader.close()  # index_store copies the journal's marks (sync_marks)
