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

Format-neutral: a reader offers writes through ``reader.recovery()``
(a ``lastgood.readers.journal.RecoveryBackend``); built-in formats are mapped below.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from lastgood.index import attached
from lastgood.readers import journal as jr
from lastgood.index import queries
from lastgood.index.catalog import Catalog, _apply_error_statuses
from lastgood.errors import CheckpointNotFound, ConflictError, DecodeError, NothingToDo, UsageError
from lastgood.readers.base import CheckpointRecord
from lastgood.stores import OpenStore

BACKENDS: dict[str, str] = {
    "native": "lastgood.readers.native.recovery:NativeRecovery",
    "langgraph-sqlite": "lastgood.readers.langgraph.recovery:SqliteRecovery",
    "langgraph-postgres": "lastgood.readers.langgraph.recovery:PostgresRecovery",
}
REFUSED_WITHOUT_FORCE = ("quarantined", "corrupt")
MAX_DIFF_CHANGES = 200
MAX_EFFECT_CHECKPOINTS = 500
SIDE_EFFECT_CHANNELS = {"__interrupt__": "interrupt", "__resume__": "resume", "__error__": "error"}


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
                "side_effects": self.side_effects, "warnings": self.warnings,
                "target_status": self.target_status, "plan_digest": self.digest}


# ---- the store's write capability ----------------------------------------------------------


def backend(store: OpenStore) -> jr.RecoveryBackend:
    """The reader's recovery capability (``reader.recovery()``), or a UsageError."""
    own = getattr(store.reader, "recovery", None)
    if callable(own):
        return own()
    spec = BACKENDS.get(store.reader.name)
    if spec is None:
        raise UsageError(f"the {store.reader.name} reader cannot write: recovery is not available "
                         "for this store format")
    module, name = spec.split(":")
    cls = getattr(importlib.import_module(module), name)
    return cls(store.reader.url, store.reader.storage_options)


def can_write(store: OpenStore) -> bool:
    return callable(getattr(store.reader, "recovery", None)) or store.reader.name in BACKENDS


# ---- planning ------------------------------------------------------------------------


def plan_restore(catalog: Catalog, store: OpenStore, ref: str, *, force: bool = False,
                 rollback: bool = False, run_id: str | None = None) -> Plan:
    """Restore (or roll back to) the checkpoint ``ref`` names."""
    record = queries.resolve_checkpoint(catalog, store.store_id, ref)
    if run_id is not None and record.run_id != run_id:
        raise UsageError(f"checkpoint {record.checkpoint_id} belongs to run {record.run_id!r}, "
                         f"not {run_id!r}")
    _refuse_bad_target(record, force)
    head = backend(store).head(record.run_id, record.namespace)
    later = _later_checkpoints(catalog, store.store_id, record)
    plan = Plan("rollback" if rollback else "restore", record.run_id, record.namespace,
                record.checkpoint_id, head, restore_from=record.checkpoint_id,
                target_status=record.status, target_fields=_fields(record))
    if rollback:
        plan.superseded = [r.checkpoint_id for r in later if r.status != "superseded"]
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
    quarantined = current is not None and current.status == "quarantined"
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


def plan_undo(catalog: Catalog, store: OpenStore, action_id: str) -> Plan:
    """Undo an earlier action: move the head back and invert its marks."""
    entries = backend(store).journal_entries()
    original = _find_action(entries, action_id)
    if original.get("action") == "check-failed":
        raise UsageError(f"{original['id']} records a failed check; there is nothing to undo")
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
        record = queries.resolve_checkpoint(catalog, store.store_id, restore_from)
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
        return mark is not None and mark.status == "quarantined"
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


def _find_action(entries: list[dict[str, Any]], action_id: str) -> dict[str, Any]:
    found = [e for e in entries if str(e.get("id") or "").startswith(action_id)]
    if not found:
        raise CheckpointNotFound(f"no journal entry matches {action_id!r}")
    if len({e["id"] for e in found}) > 1:
        raise UsageError(f"{action_id!r} matches several journal entries: give more characters")
    return found[0]


def _refuse_bad_target(record: CheckpointRecord, force: bool) -> None:
    if record.status == "incomplete":
        raise UsageError(f"{record.checkpoint_id} is incomplete (its save never committed): "
                         "it cannot be restored")
    if record.status in REFUSED_WITHOUT_FORCE and not force:
        raise UsageError(f"{record.checkpoint_id} is {record.status} ({record.status_reason}); "
                         "pass --force to restore it anyway")


def _later_checkpoints(catalog: Catalog, store_id: int, record: CheckpointRecord) -> list[CheckpointRecord]:
    with catalog.connect() as con:
        cur = con.execute("""SELECT * FROM checkpoints WHERE store_id = $sid AND run_id = $run
            AND namespace = $ns AND checkpoint_id <> $cid AND status <> 'incomplete'
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


def side_effects(catalog: Catalog, store: OpenStore, target: CheckpointRecord,
                 later: list[CheckpointRecord], warnings: list[str]) -> list[dict[str, Any]]:
    """What happened in the world after ``target`` (tool calls, interrupts, events):
    a restore rewinds the state, not these."""
    scanned = [target, *later][:MAX_EFFECT_CHECKPOINTS]
    if len(later) + 1 > MAX_EFFECT_CHECKPOINTS:
        warnings.append(f"side effects listed for the first {MAX_EFFECT_CHECKPOINTS} checkpoints "
                        f"after the target only ({len(later) + 1} in all)")
    effects: list[dict[str, Any]] = []
    for record in scanned:
        effects.extend(_write_effects(store, record))
        effects.extend(_metadata_effects(record, record is target))
    events = queries.events(catalog, store.store_id, run_id=target.run_id)
    ids = {r.checkpoint_id for r in scanned}
    for row in events.to_dict(orient="records"):
        if row.get("checkpoint_id") in ids and row.get("checkpoint_id") != target.checkpoint_id:
            effects.append({"checkpoint_id": row["checkpoint_id"], "kind": f"event:{row.get('kind')}",
                            "detail": row.get("message")})
    from lastgood.redact import redact

    return redact(_dedupe(effects))


def _write_effects(store: OpenStore, record: CheckpointRecord) -> list[dict[str, Any]]:
    try:
        writes = store.reader.pending_writes(record)
    except DecodeError:
        return []
    effects = []
    for write in writes:
        if write.channel in SIDE_EFFECT_CHANNELS:
            effects.append({"checkpoint_id": record.checkpoint_id,
                            "kind": SIDE_EFFECT_CHANNELS[write.channel],
                            "task_id": write.task_id, "detail": _short(write.value)})
            continue
        for message in _messages(write.value):
            effects.extend(_message_effects(record.checkpoint_id, write.task_id, message))
    return effects


def _message_effects(checkpoint_id: str, task_id: str, message: Mapping[str, Any]) -> list[dict[str, Any]]:
    out = []
    for call in message.get("tool_calls") or []:
        if isinstance(call, Mapping):
            out.append({"checkpoint_id": checkpoint_id, "kind": "tool_call", "task_id": task_id,
                        "tool": call.get("name"), "call_id": call.get("id"),
                        "detail": _short(call.get("args"))})
    if message.get("role") == "tool":
        out.append({"checkpoint_id": checkpoint_id, "kind": "tool_result", "task_id": task_id,
                    "tool": message.get("name"), "call_id": message.get("tool_call_id"),
                    "detail": _short(message.get("content"))})
    return out


def _messages(value: Any) -> list[Mapping[str, Any]]:
    from lastgood.readers.langgraph.serde import normalize_message

    items = value if isinstance(value, list) else [value]
    found = []
    for item in items:
        message = normalize_message(item) if isinstance(item, dict) else None
        if message is None and isinstance(item, dict) and "role" in item:
            message = item
        if message is not None:
            found.append(message)
    return found


def _metadata_effects(record: CheckpointRecord, is_target: bool) -> list[dict[str, Any]]:
    """Native stores: an agent's own notes of external actions in checkpoint metadata."""
    if is_target or store_kind(record) != "native":
        return []
    meta = dict(record.metadata or {})
    meta.pop("event", None)
    actions = meta.get("side_effects") or meta.get("tool_calls") or meta.get("actions")
    if not actions:
        return []
    return [{"checkpoint_id": record.checkpoint_id, "kind": "metadata", "detail": _short(actions)}]


def store_kind(record: CheckpointRecord) -> str:
    return "native" if record.location else "langgraph"


def _short(value: Any, limit: int = 300) -> str:
    text = value if isinstance(value, str) else jr.canonical(value).decode(errors="replace")
    return text if len(text) <= limit else text[:limit] + "…"


def _dedupe(effects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    seen, out = set(), []
    for effect in effects:
        key = jr.digest(effect)
        if key not in seen:
            seen.add(key)
            out.append(effect)
    return out


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


# ---- the journal, read -----------------------------------------------------------------------


def journal_report(store: OpenStore, run_id: str | None = None, action: str | None = None,
                   catalog: Catalog | None = None) -> dict[str, Any]:
    """``{chain_ok, actions: [...]}`` (+ problems and interrupted actions); with the ``catalog``
    that indexed the store, entries lost from the journal's end are problems too."""
    writer = backend(store)
    entries = writer.journal_entries()
    chain = journal_chain(store, entries, catalog)
    shown = [e for e in entries if (run_id is None or e.get("run_id") == run_id)
             and (action is None or e.get("action") == action)]
    pending = getattr(writer, "pending", lambda: [])()
    from lastgood.redact import redact  # a reason typed by an operator may quote a secret

    return {"chain_ok": chain.ok, "entries": chain.entries, "problems": chain.problems,
            "actions": redact(shown), "pending": redact(pending)}


def sync_marks(catalog: Catalog, store: OpenStore) -> int:
    """Copy the journal's marks into the index statuses; returns how many are marked."""
    if not can_write(store):
        return 0
    try:
        entries = backend(store).journal_entries()
    except (OSError, DecodeError):
        return 0
    marks = jr.fold_marks(entries)
    with catalog.connect() as con:
        _remember_tip(con, store.store_id, entries)
        had = con.execute("""SELECT count(*) FROM checkpoints WHERE store_id = ?
            AND status IN ('quarantined', 'superseded')""", [store.store_id]).fetchone()[0]
        if not marks and not had and not entries:
            return 0
        con.execute("BEGIN TRANSACTION")
        try:
            if marks:  # marks are per checkpoint: an attached part's rows become the table's
                attached.materialize(con, store.store_id)
            con.execute("""UPDATE checkpoint_rows SET status = listed_status, status_reason = listed_reason
                WHERE store_id = ? AND status IN ('quarantined', 'superseded')""", [store.store_id])
            _write_marks(con, store.store_id, marks)
            _apply_error_statuses(con, store.store_id)
            _mirror_journal(con, store.store_id, entries)
            con.execute("COMMIT")
        except BaseException:
            con.execute("ROLLBACK")
            raise
    return len(marks)


def _write_marks(con: Any, store_id: int, marks: Mapping[jr.MarkKey, jr.Mark]) -> None:
    if not marks:
        return
    import pyarrow as pa

    keys = list(marks)
    table = pa.table({"run_id": [k[0] for k in keys], "namespace": [k[1] for k in keys],
                      "checkpoint_id": [k[2] for k in keys],
                      "status": [marks[k].status for k in keys],
                      "reason": [marks[k].reason for k in keys]})
    con.register("lastgood_marks", table)
    try:
        con.execute("""UPDATE checkpoint_rows c SET status = m.status, status_reason = m.reason
            FROM lastgood_marks m WHERE c.store_id = ? AND c.run_id = m.run_id
            AND c.namespace = m.namespace AND c.checkpoint_id = m.checkpoint_id""", [store_id])
    finally:
        con.unregister("lastgood_marks")


def _remember_tip(con: Any, store_id: int, entries: list[dict[str, Any]]) -> None:
    """Keep the furthest journal entry this index has read; a journal that lost it keeps the old
    one (the loss stays reported: :func:`lost_entries`). A reopen writes nothing."""
    last = entries[-1] if entries else None
    seen = _seen_tip(con, store_id)
    if last is None or not last.get("hash") or _lost(entries, seen):
        return
    tip = (int(last.get("seq") or len(entries)), str(last["hash"]))
    if seen is None or tuple(seen[:2]) != tip:
        con.execute("INSERT OR REPLACE INTO journal_tips VALUES (?, ?, ?, ?, now())",
                    [store_id, *tip, last.get("id")])


def lost_entries(con: Any, store_id: int, entries: list[dict[str, Any]]) -> list[str]:
    """A problem when the journal no longer holds the furthest entry this index read from it:
    entries were removed from its end (or the end rewritten). Its hash chain cannot show that:
    what is left still links. Empty when it holds it, or nothing was read before."""
    return _lost(entries, _seen_tip(con, store_id))


def _seen_tip(con: Any, store_id: int) -> tuple[Any, ...] | None:
    return con.execute("SELECT seq, hash, action_id, seen_at FROM journal_tips WHERE store_id = ?",
                       [store_id]).fetchone()


def _lost(entries: list[dict[str, Any]], seen: tuple[Any, ...] | None) -> list[str]:
    if seen is None:
        return []
    seq, digest, action_id, seen_at = seen
    kept = entries[seq - 1] if 0 < seq <= len(entries) else None
    if kept is not None and kept.get("hash") == digest:
        return []
    ends = f"ends at entry {len(entries)}" if entries else "is empty"
    return [f"the journal {ends}, but entry {seq} (action {action_id}), read by this index on "
            f"{seen_at:%Y-%m-%d %H:%M} UTC, is {'gone' if kept is None else 'rewritten'}: entries were "
            "removed from its end"]


def _mirror_journal(con: Any, store_id: int, entries: list[dict[str, Any]]) -> None:
    """The index's ``journal`` table mirrors the store's journal (for SQL and pages); an entry
    that cannot be read (no id: the chain check reports it) is left out."""
    entries = [e for e in entries if e.get("id")]
    tip = entries[-1].get("hash") if entries else None
    row = con.execute("SELECT count(*), max_by(hash, seq) FROM journal WHERE store_id = ?",
                      [store_id]).fetchone()
    if row[0] == len(entries) and row[1] == tip:
        return
    import pyarrow as pa

    con.execute("DELETE FROM journal WHERE store_id = ?", [store_id])
    if not entries:
        return
    columns = {"action_id": "id", "seq": "seq", "acted_at": "time", "operator": "operator",
               "action": "action", "run_id": "run_id", "namespace": "namespace", "target": "target",
               "previous_head": "previous_head", "new_head": "new_head", "reason": "reason",
               "undoes": "undo_of", "hash": "hash", "prev_hash": "prev_hash"}
    data = {col: [None if e.get(key) is None else str(e.get(key)) for e in entries]
            for col, key in columns.items()}
    data["superseded"] = [jr.canonical(e.get("superseded") or []).decode() for e in entries]
    con.register("lastgood_journal_rows", pa.table(data))
    try:
        con.execute("""INSERT INTO journal SELECT ?, action_id, TRY_CAST(seq AS BIGINT),
            TRY_CAST(acted_at AS TIMESTAMPTZ), operator, action, run_id, namespace, target, previous_head,
            new_head, CAST(superseded AS JSON), reason, undoes, hash, prev_hash
            FROM lastgood_journal_rows""", [store_id])
    finally:
        con.unregister("lastgood_journal_rows")
