"""Recovery as tools: ``plan_*`` dry runs always; ``apply_*`` only on a server started with ``--allow-write``.

A plan is exactly the CLI's ``--dry-run --format json`` (``lastgood.recovery.Plan.to_dict``); an
action whose target is already the run's head is ``{changed: false, …}`` as in the CLI. Applying
plans again (never trusting a plan the client sends back), needs a ``reason``, records the operator
as ``mcp:<client name>`` (from the client's ``initialize`` request), names the head it expects
(``expect_head``, default: the head when planned) and, when ``plan_digest`` is given, refuses a plan
that changed since it was previewed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

from pydantic import Field

from lastgood.errors import ConflictError, NothingToDo, UsageError
from lastgood.mcp.calls import Ref, Run, Store
from lastgood.mcp.session import Answer, Call

Reason = Annotated[str, Field(min_length=1, description="why (required; recorded in the store's journal)")]
Force = Annotated[bool, Field(description="allow a quarantined or corrupt target")]
ExpectHead = Annotated[str | None, Field(description="fail with a conflict unless the run's head is this "
                                         "checkpoint (default: the head when planned)")]
Digest = Annotated[str | None, Field(description="the plan_digest of the dry run you reviewed: refuse if the "
                                     "plan differs now")]
LastGood = Annotated[str | None, Field(description="restore this run's last good checkpoint instead")]
Planner = Callable[[Any, Any], Any]


# ---- planning, shared by plan_* and apply_* ------------------------------------------------------


def _restore(checkpoint: str | None, last_good: str | None, force: bool) -> Planner:
    from lastgood import recovery

    if bool(checkpoint) == bool(last_good):
        raise UsageError("name a checkpoint, or last_good RUN (not both)")
    if last_good:
        return lambda catalog, store: recovery.plan_restore_last_good(catalog, store, last_good)
    return lambda catalog, store: recovery.plan_restore(catalog, store, checkpoint, force=force)


def _rollback(run: str, to: str, force: bool) -> Planner:
    from lastgood import recovery

    return lambda catalog, store: recovery.plan_rollback(catalog, store, run, to, force=force)


def _quarantine(checkpoint: str, release: bool) -> Planner:
    from lastgood import recovery

    return lambda catalog, store: recovery.plan_quarantine(catalog, store, checkpoint, release=release)


def _undo(action: str, force: bool) -> Planner:
    from lastgood import recovery

    return lambda catalog, store: recovery.plan_undo(catalog, store, action, force=force)


def _full_id(call: Call, store: Any, ref: str | None) -> str | None:
    """``expect_head`` as a full id (a unique prefix works, like git)."""
    from lastgood.errors import CheckpointNotFound
    from lastgood.index import queries

    if not ref:
        return None
    try:
        return queries.resolve_checkpoint(call.catalog, store.store_id, ref).checkpoint_id
    except CheckpointNotFound:
        return ref


def _unchanged(action: str, done: NothingToDo, dry_run: bool) -> dict[str, Any]:
    return {"action": action, "run_id": done.run_id, "namespace": done.namespace, "target": done.checkpoint_id,
            "changed": False, "dry_run": dry_run, "message": str(done)}


def _planned(call: Call, action: str, store_ref: str, planner: Planner, expect_head: str | None,
             apply: dict[str, Any] | None = None) -> Answer:
    """The dry run (``apply`` None), or the plan applied with ``apply``'s reason and digest."""
    from lastgood import recovery

    store = call.store(store_ref)
    try:
        plan = planner(call.catalog, store)
    except NothingToDo as done:
        return Answer(_unchanged(action, done, apply is None))
    expected = _full_id(call, store, expect_head)
    if apply is None:
        if expected is not None and expected != plan.expected_head:
            plan.warnings.append(f"expect_head {expect_head} is not the run's head ({plan.expected_head}): "
                                 "applying would fail with a conflict")
        return Answer(plan.to_dict())
    _same_plan(apply.get("plan_digest"), plan.digest)
    result = recovery.apply_plan(call.catalog, store, plan, reason=_reason(apply["reason"]),
                                 operator=call.operator, expected_head=expected)
    return Answer(result.to_dict())


def _reason(reason: str) -> str:
    if not reason or not reason.strip():
        raise UsageError("a reason is required: why this action (recorded in the journal)")
    return reason.strip()


def _same_plan(previewed: str | None, digest: str) -> None:
    if previewed and previewed.strip() != digest:
        raise ConflictError(f"the plan changed since it was previewed (plan_digest {digest}, not {previewed}): "
                            "preview it again; nothing was written")


def _undo_prune(call: Call, store_ref: str, action: str, force: bool, apply: dict[str, Any] | None) -> Answer | None:
    """An undo of a prune (its archived checkpoints come back), as ``lastgood undo`` does it; None otherwise."""
    from lastgood import retention

    store = call.store(store_ref)
    if not (retention.can_prune(store) and retention.is_prune(store, action)):
        return None
    plan = retention.plan_undo_prune(call.catalog, store, action, force=force)
    if apply is None:
        return Answer(plan.to_dict())
    result = retention.apply_undo_prune(call.catalog, store, plan, reason=_reason(apply["reason"]),
                                        operator=call.operator)
    return Answer(result.to_dict())


# ---- the dry runs (always served) ------------------------------------------------------------------


def plan_restore(call: Call, store: Store, checkpoint: Annotated[str | None, Field(
                     description="the checkpoint to resume from (id, prefix, RUN/ID…)")] = None,
                 last_good: LastGood = None, force: Force = False, expect_head: ExpectHead = None) -> Answer:
    """Dry run of `lastgood restore`: the diff from the head to the target, what the agent resumes
    from, the side effects after the target a restore does not undo, warnings. Writes nothing."""
    return _planned(call, "restore", store, _restore(checkpoint, last_good, force), expect_head)


def plan_rollback(call: Call, store: Store, run: Run, to: Ref, force: Force = False,
                  expect_head: ExpectHead = None) -> Answer:
    """Dry run of `lastgood rollback`: restore `to` and mark every later checkpoint of the run
    superseded. Writes nothing."""
    return _planned(call, "rollback", store, _rollback(run, to, force), expect_head)


def plan_quarantine(call: Call, store: Store, checkpoint: Ref,
                    release: Annotated[bool, Field(description="lift an earlier quarantine")] = False,
                    expect_head: ExpectHead = None) -> Answer:
    """Dry run of `lastgood quarantine`: mark a checkpoint bad by hand (or release it). Writes nothing."""
    return _planned(call, "quarantine", store, _quarantine(checkpoint, release), expect_head)


def plan_undo(call: Call, store: Store,
              action: Annotated[str, Field(description="action id (or unique prefix) from the journal tool")],
              force: Force = False, expect_head: ExpectHead = None) -> Answer:
    """Dry run of `lastgood undo`: reverse an earlier action (itself journaled). Writes nothing."""
    return (_undo_prune(call, store, action, force, None)
            or _planned(call, "undo", store, _undo(action, force), expect_head))


# ---- applying (served only with --allow-write) ------------------------------------------------------


def apply_restore(call: Call, store: Store, reason: Reason, checkpoint: Annotated[str | None, Field(
                      description="the checkpoint to resume from (id, prefix, RUN/ID…)")] = None,
                  last_good: LastGood = None, force: Force = False, expect_head: ExpectHead = None,
                  plan_digest: Digest = None) -> Answer:
    """Restore: the run resumes from the checkpoint (a new head is added; nothing is deleted).
    Journaled with the reason and the operator mcp:<client>; undoable with apply_undo."""
    return _planned(call, "restore", store, _restore(checkpoint, last_good, force), expect_head,
                    {"reason": reason, "plan_digest": plan_digest})


def apply_rollback(call: Call, store: Store, run: Run, to: Ref, reason: Reason, force: Force = False,
                   expect_head: ExpectHead = None, plan_digest: Digest = None) -> Answer:
    """Rollback: restore `to` and mark every later checkpoint superseded (kept for audit). Journaled;
    undoable."""
    return _planned(call, "rollback", store, _rollback(run, to, force), expect_head,
                    {"reason": reason, "plan_digest": plan_digest})


def apply_quarantine(call: Call, store: Store, checkpoint: Ref, reason: Reason,
                     release: Annotated[bool, Field(description="lift an earlier quarantine")] = False,
                     expect_head: ExpectHead = None, plan_digest: Digest = None) -> Answer:
    """Quarantine a checkpoint (or release it). Journaled; undoable."""
    return _planned(call, "quarantine", store, _quarantine(checkpoint, release), expect_head,
                    {"reason": reason, "plan_digest": plan_digest})


def apply_undo(call: Call, store: Store,
               action: Annotated[str, Field(description="action id (or unique prefix) from the journal tool")],
               reason: Reason, force: Force = False, expect_head: ExpectHead = None,
               plan_digest: Digest = None) -> Answer:
    """Undo an earlier action (journaled too; undoing an undo redoes)."""
    apply = {"reason": reason, "plan_digest": plan_digest}
    return (_undo_prune(call, store, action, force, apply)
            or _planned(call, "undo", store, _undo(action, force), expect_head, apply))


PLAN_TOOLS = (plan_restore, plan_rollback, plan_quarantine, plan_undo)
APPLY_TOOLS = (apply_restore, apply_rollback, apply_quarantine, apply_undo)
