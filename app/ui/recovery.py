"""UI helpers of the Recovery page (and the Timeline's and Diff's recovery links).

Flow: pick an action → preview (the dry-run plan: what the run resumes from now and after, the
state change, what becomes superseded, the side effects a restore does not undo) → reason →
confirmation dialog (driven by session state, so it works for people and under AppTest; it repeats
the reason and what will not be undone) → apply → result with an undo button. A corrupt or
quarantined target (also the head an undo moves back to) needs an explicit override that shows
why it is refused. Writes need ``lastgood ui --allow-write`` (or LASTGOOD_ALLOW_WRITE) and a store
format that can write; previews never write. Checkpoints are named by step, time and a short id.
"""

from __future__ import annotations

from typing import Any

import pandas as pd
import streamlit as st

from lastgood import recovery
from lastgood.display.changes import change_rows
from lastgood.display.figures import utc
from lastgood.display.numbers import plural, short_id
from lastgood.errors import LastgoodError
from lastgood.index import queries
from lastgood.integrity import health
from lastgood.readers.base import Status
from lastgood.redact import redact_text
from lastgood.stores import OpenStore, open_store
from lastgood.ui import links, stores, tabs
from lastgood.ui.escape import code, md_escape
from lastgood.ui.navigation import page_path
from lastgood.ui.stores import STORE_KEY, StoreRef, runs_frame
from lastgood.ui.tables import export_buttons, redact_frame, show_table

RECOVERY_PAGE = page_path("recovery")
TIMELINE_PAGE = page_path("timeline")
ACTION_KEY = "rc_action"
RUN_KEY = "rc_run"
TARGET_KEY = "rc_target"
UNDO_KEY = "rc_undo_of"
FORCE_KEY = "rc_force"
RESET_FORCE_KEY = "rc_reset_force"
LINKED_KEY = "rc_linked"  # the run and target a link named, until its preview
MARKS_ONLY = ("quarantine", "release")
REASON_KEY = "rc_reason"
PLAN_KEY = "rc_plan"
CONFIRM_KEY = "rc_confirm"
RESULT_KEY = "rc_result"
ERROR_KEY = "rc_error"
AUTOPLAN_KEY = "rc_autoplan"  # preview at once (a link arrived, Undo was clicked, the override ticked)
ACTIONS = {"restore": "Restore a checkpoint", "rollback": "Roll back the run to a checkpoint",
           "restore-last-good": "Restore the run's last good checkpoint",
           "quarantine": "Quarantine a checkpoint", "release": "Release a quarantine",
           "undo": "Undo an earlier action"}
# one line each: what the action does to the run
MEANING = {
    "restore": "**Restore** adds a new head whose state is the checkpoint's: the run resumes from it; "
               "later checkpoints stay as they are.",
    "rollback": "**Roll back** restores the checkpoint and marks every later checkpoint of the run superseded: "
                "hidden from the resuming agent, kept for audit.",
    "restore-last-good": "**Restore last good** restores the run's newest checkpoint that passed a data check "
                         "with no error.",
    "quarantine": "**Quarantine** marks the checkpoint bad by hand: never offered as a restore target unless "
                  "overridden; the head stays.",
    "release": "**Release** lifts a quarantine; the head stays.",
    "undo": "**Undo** reverses an earlier action: the head moves back and its marks are lifted (journaled too).",
}
NEEDS_TARGET = ("restore", "rollback", "quarantine", "release")
TABS = (("action", "Action"), ("journal", "Journal"))  # (the link's tab=…, the label)
REFUSED = tuple(str(s) for s in recovery.REFUSED_WITHOUT_FORCE)  # quarantined, corrupt: restored only overridden
READ_ONLY = ("Read-only: previews work, applying needs `lastgood ui --allow-write` "
             "(or LASTGOOD_ALLOW_WRITE=1).")
EFFECTS_IN_DIALOG = 8


def write_blocked(ref: StoreRef) -> str | None:
    """Why writes are off, or None when they are on."""
    return None if ref.allow_write else READ_ONLY


def operator() -> str:
    """``st.user`` when a login is configured, else LASTGOOD_OPERATOR, else the OS user."""
    from lastgood.config import load_settings

    try:
        user = st.user
        if user.get("is_logged_in"):
            return str(user.get("email") or user.get("name") or load_settings().operator)
    except (AttributeError, KeyError, RuntimeError):
        pass
    return load_settings().operator


def _store(ref: StoreRef) -> OpenStore:
    """A fresh reader (a cached one may not see the store's latest writes)."""
    return open_store(stores.catalog(ref.index_path), ref.url)


def read_only_reason(ref: StoreRef) -> str | None:
    """Why this store's format offers no write actions (``recovery.read_only_reason``), or None."""
    store = stores.cached_store(ref.index_path, ref.url)
    return None if recovery.can_write(store) else recovery.read_only_reason(store)


# ---- checkpoints in words -------------------------------------------------------------------


@st.cache_data(ttl=60, max_entries=256, show_spinner=False)
def _checkpoint(index_path: str, store_id: int, ref: str) -> dict[str, Any] | None:
    try:
        record = queries.resolve_checkpoint(stores.catalog(index_path), store_id, ref)
    except LastgoodError:
        return None
    return {"checkpoint_id": record.checkpoint_id, "step": record.step, "created_at": record.created_at,
            "status": str(record.status), "status_reason": record.status_reason}


def describe(ref: StoreRef, checkpoint_id: str | None, run_id: str | None = None, namespace: str = "") -> str:
    """``step 190 · 2026-11-02 16:22:20 UTC · `01a19d11-9e60…``` (and its status when not ok)."""
    if not checkpoint_id:
        return "nothing (the run has no head)"
    name = f"{run_id}/{checkpoint_id}@{namespace}" if run_id else checkpoint_id
    found = _checkpoint(ref.index_path, ref.store_id, name) or _checkpoint(ref.index_path, ref.store_id, checkpoint_id)
    shown = code(redact_text(short_id(checkpoint_id)))
    if found is None:
        return shown
    status = "" if found["status"] == Status.OK else f" · **{found['status']}**"
    return f"step {found['step']} · {utc(found['created_at'])} UTC · {shown}{status}"


def _real_run(ref: StoreRef, run: str) -> str:
    """The run id a picker value names (a secret-shaped run is listed by its handle)."""
    return queries.resolve_run(stores.catalog(ref.index_path), ref.store_id, run)


# ---- arriving from other pages ----------------------------------------------------------


def take_link() -> None:
    """``?action=…&run=…&target=…`` (Overview, Timeline, Integrity, Diff) preselect the form once, then
    preview. A secret-shaped run travels by its handle (lastgood.ui.links)."""
    params = links.take("recovery", [links.STORE, links.ACTION, links.RUN, links.TARGET, links.UNDO, links.TAB])
    if not params:
        return
    tabs.take(tabs.RECOVERY, params.get(links.TAB))
    if params.get(links.STORE):  # the link's store, never the one last picked: the target is one of its checkpoints
        st.session_state[STORE_KEY] = params[links.STORE]
    if params.get(links.ACTION) in ACTIONS:
        st.session_state[ACTION_KEY] = params[links.ACTION]
    if params.get(links.RUN):
        st.session_state[RUN_KEY] = links.run_value(params[links.RUN])
    if params.get(links.TARGET):
        st.session_state[TARGET_KEY] = params[links.TARGET]
    st.session_state[LINKED_KEY] = {"run": st.session_state.get(RUN_KEY) if params.get(links.RUN) else None,
                                    "target": params.get(links.TARGET), "store": params.get(links.STORE)}
    if params.get(links.UNDO):
        st.session_state[UNDO_KEY] = params[links.UNDO]
    st.session_state[FORCE_KEY] = False  # an override is never carried by a link
    st.session_state[AUTOPLAN_KEY] = True


def write_link(ref: StoreRef) -> None:
    """The form's action, run and target (or the action to undo) in the URL."""
    state = st.session_state
    action = state.get(ACTION_KEY)
    links.write("recovery", {links.STORE: ref.url, links.ACTION: action,
                             links.RUN: state.get(RUN_KEY) if action != "undo" else None,
                             links.TARGET: state.get(TARGET_KEY) if action in NEEDS_TARGET else None,
                             links.UNDO: state.get(UNDO_KEY) if action == "undo" else None,
                             links.TAB: tabs.selected(tabs.RECOVERY)})


def recovery_links(ref: StoreRef, checkpoint: dict[str, Any]) -> None:
    """A checkpoint's restore / rollback / quarantine, as links to the Recovery page's dry-run preview.
    A corrupt or quarantined checkpoint is not offered as a target up front: its restore sits behind
    "Restore anyway…", which names why and opens a preview that asks for an override."""
    status = str(checkpoint.get("status"))
    target = checkpoint["checkpoint_id"]
    base = {links.STORE: ref.url, links.RUN: links.run_value(str(checkpoint["run_id"])),
            links.TARGET: target if not links.is_secret_shaped(target) else None}
    base = {k: v for k, v in base.items() if v}
    why = ("preview first; applying needs --allow-write" if not ref.allow_write
           else "opens the Recovery page with a dry-run preview")
    cols = st.columns(3)
    quarantined = status == Status.QUARANTINED
    release = {**base, links.ACTION: "release" if quarantined else "quarantine"}
    if status == Status.INCOMPLETE:
        cols[0].caption(":material/block: An incomplete checkpoint (its save never committed) cannot be restored.")
    elif status in REFUSED:
        with cols[0].popover("Restore anyway…", icon=":material/warning:",
                             help=f"This checkpoint is {status}: a restore needs an override"):
            st.caption(f"This checkpoint is **{status}**"
                       + (f": {md_escape(str(checkpoint.get('status_reason')))}" if checkpoint.get("status_reason")
                          else "") + ". The preview asks for an explicit override.")
            st.page_link(RECOVERY_PAGE, label="Restore this (override)", icon=":material/restore:",
                         query_params={**base, links.ACTION: "restore"}, help=why)
            st.page_link(RECOVERY_PAGE, label="Rollback to here (override)", icon=":material/undo:",
                         query_params={**base, links.ACTION: "rollback"}, help=why)
    else:
        cols[0].page_link(RECOVERY_PAGE, label="Restore this", icon=":material/restore:",
                          query_params={**base, links.ACTION: "restore"}, help=why)
        cols[1].page_link(RECOVERY_PAGE, label="Rollback to here", icon=":material/undo:",
                          query_params={**base, links.ACTION: "rollback"}, help=why)
    cols[2].page_link(RECOVERY_PAGE, label="Release quarantine" if quarantined else "Quarantine",
                      icon=":material/block:", query_params=release,
                      help="mark this snapshot bad by hand (with a reason)")


# ---- the form --------------------------------------------------------------------------


def render_form(ref: StoreRef) -> None:
    """Action, run, target; the override when the target is refused; a preview button; the plan,
    reason and apply button."""
    runs = list(dict.fromkeys(runs_frame(ref)["run_id"]))  # most recent first, as the Timeline
    if not runs:
        st.info("No runs in this store.")
        return
    left, middle, right = st.columns([3, 3, 4])
    action = left.selectbox("Action", list(ACTIONS), format_func=ACTIONS.get, key=ACTION_KEY,
                            on_change=_control_changed)
    if action == "undo":
        _undo_picker(ref, middle)
    else:
        if st.session_state.get(RUN_KEY) not in runs:
            st.session_state[RUN_KEY] = runs[0]
        run = middle.selectbox("Run", runs, key=RUN_KEY, on_change=_control_changed)
        if action in NEEDS_TARGET:
            _target_picker(ref, run, action, right)
    st.caption(MEANING["restore"] + "  \n" + MEANING["rollback"] + ("" if action in ("restore", "rollback")
                                                                     else "  \n" + MEANING[action]))
    if st.session_state.pop(RESET_FORCE_KEY, False):
        st.session_state[FORCE_KEY] = False
    bad = _refused_target(ref, action)
    force = _override(ref, action, bad)
    link_kept = _link_kept(ref, action)  # once, in the run right after a link
    # a refused target is previewed once the override is ticked (the warning above says why)
    auto = st.session_state.pop(AUTOPLAN_KEY, False) and link_kept and (bad is None or force)
    cannot = read_only_reason(ref)
    if st.button("Preview (dry run)", icon=":material/preview:", disabled=cannot is not None, help=cannot) or \
            (auto and cannot is None):
        _make_plan(ref, action, force)
    if st.session_state.get(ERROR_KEY):
        st.error(md_escape(st.session_state[ERROR_KEY]))
    plan = st.session_state.get(PLAN_KEY)
    if plan is not None:
        render_plan(ref, plan.to_dict())
        _reason_and_apply(ref)


def _link_kept(ref: StoreRef, action: str) -> bool:
    """False (and an error) when the store, run or checkpoint a link named is not what the form
    shows (another store, a run it does not have): a preview never goes ahead on another target.
    What the link named is not echoed (a link's text could be anything, a secret included)."""
    linked = st.session_state.pop(LINKED_KEY, None) or {}
    state = st.session_state
    lost = [what for what, value, shown in (
        ("store", linked.get("store"), ref.url), ("run", linked.get("run"), state.get(RUN_KEY)),
        ("checkpoint", linked.get("target") if action in NEEDS_TARGET else None, state.get(TARGET_KEY)))
        if value and value != shown]
    if lost:  # kept until the next preview or change (a rerun must not wipe it: the pickers moved)
        st.session_state[ERROR_KEY] = ("The link named a " + " and a ".join(lost) + " this store does not have (or "
                                       "has not finished indexing): nothing was previewed. Pick the store and "
                                       "checkpoint here.")
    return not lost


def _target_picker(ref: StoreRef, run: str, action: str, column: Any) -> None:
    index = stores.catalog(ref.index_path)
    rows = list(reversed(queries.list_checkpoints(index, ref.store_id, run_id=_real_run(ref, run))))
    choices = {r["checkpoint_id"]: redact_text(f"step {r['step']} · {utc(r['created_at'])} · {r['status']} · "
                                               f"{short_id(r['checkpoint_id'])}") for r in rows}
    if st.session_state.get(TARGET_KEY) not in choices:
        st.session_state[TARGET_KEY] = default_target(ref, run, action, rows)
    column.selectbox("Checkpoint", list(choices), format_func=choices.get, key=TARGET_KEY,
                     on_change=_control_changed)


def default_target(ref: StoreRef, run: str, action: str, rows: list[dict[str, Any]]) -> str | None:
    """What an operator most likely means (``rows``: newest first): for a restore or rollback the
    run's last good checkpoint (else its newest ok one), for a release the newest quarantined one,
    otherwise the newest."""
    wanted: tuple[str, ...] = {"restore": ("ok",), "rollback": ("ok",), "release": ("quarantined",)}.get(action, ())
    if action in ("restore", "rollback"):
        good = health.last_good(stores.catalog(ref.index_path), ref.store_id, _real_run(ref, run))
        if good and any(r["checkpoint_id"] == good for r in rows):
            return good
    matching = (r["checkpoint_id"] for r in rows if r["status"] in wanted)
    return next(matching, rows[0]["checkpoint_id"] if rows else None)


def _undo_picker(ref: StoreRef, column: Any) -> None:
    try:
        listed = journal(ref)["actions"]
        undone = recovery.undone_actions(listed)  # undone once: not offered again
        actions = [a for a in listed if a.get("id") and a.get("action") != "check-failed"
                   and a.get("id") not in undone]
    except LastgoodError as exc:
        column.error(md_escape(str(exc)))
        return
    choices = {a["id"]: redact_text(f"{a['action']} · {a['run_id']} · {str(a.get('time') or '')[:19]} · "
                                    f"{short_id(a['id'])}") for a in reversed(actions)}
    if st.session_state.get(UNDO_KEY) not in choices:
        st.session_state[UNDO_KEY] = next(iter(choices), None)
    column.selectbox("Action to undo", list(choices), format_func=choices.get, key=UNDO_KEY,
                     on_change=_control_changed, placeholder="no actions yet")


def _refused_target(ref: StoreRef, action: str) -> dict[str, Any] | None:
    """The checkpoint this action would make the run resume from, when it is corrupt or quarantined
    (a restore, a rollback, or the head an undo moves back to); None otherwise."""
    state = st.session_state
    if action in ("restore", "rollback") and state.get(TARGET_KEY):
        found = _checkpoint(ref.index_path, ref.store_id, state[TARGET_KEY])
    elif action == "undo" and state.get(UNDO_KEY):
        found = _undo_target(ref, state[UNDO_KEY])
    else:
        return None
    return found if found and found["status"] in REFUSED else None


def _undo_target(ref: StoreRef, action_id: str) -> dict[str, Any] | None:
    try:
        entry = next((a for a in journal(ref)["actions"] if a.get("id") == action_id), None)
    except LastgoodError:
        return None
    if not entry or entry.get("new_head") == entry.get("previous_head") or not entry.get("previous_head"):
        return None
    return _checkpoint(ref.index_path, ref.store_id,
                       f"{entry['run_id']}/{entry['previous_head']}@{entry.get('namespace') or ''}")


def _override(ref: StoreRef, action: str, bad: dict[str, Any] | None) -> bool:
    """When the run would resume from a corrupt or quarantined checkpoint (``bad``): say why it is
    refused and offer the explicit override (``--force``); False otherwise."""
    if bad is None:
        return False
    why = f": {md_escape(str(bad['status_reason']))}" if bad.get("status_reason") else ""
    what = "the head this undo moves back to" if action == "undo" else "this checkpoint"
    st.warning(f"{what.capitalize()} ({describe(ref, bad['checkpoint_id'])}) is **{bad['status']}**{why}. "
               "It is not restored unless you override.", icon=":material/gpp_maybe:")
    return st.checkbox(f"Override: restore it although it is {bad['status']} (--force)", key=FORCE_KEY,
                       on_change=_override_changed)


def _override_changed() -> None:
    _control_changed()
    st.session_state[AUTOPLAN_KEY] = True  # the preview follows the override at once


def _control_changed() -> None:
    """A picker changed by hand: its rerun's address is no link (links.not_a_link), and the plan is stale."""
    links.not_a_link()
    _forget_plan()


def _forget_plan() -> None:
    for key in (PLAN_KEY, ERROR_KEY, CONFIRM_KEY):
        st.session_state.pop(key, None)


def _make_plan(ref: StoreRef, action: str, force: bool) -> None:
    _forget_plan()
    state = st.session_state
    store = _store(ref)
    index = stores.catalog(ref.index_path)
    try:
        if action == "undo":
            plan = recovery.plan_undo(index, store, state.get(UNDO_KEY) or "", force=force)
        elif action == "restore-last-good":
            plan = recovery.plan_restore_last_good(index, store, _real_run(ref, state[RUN_KEY]))
        elif action in ("quarantine", "release"):
            plan = recovery.plan_quarantine(index, store, state[TARGET_KEY], release=action == "release")
        else:
            plan = recovery.plan_restore(index, store, state[TARGET_KEY], force=force,
                                         rollback=action == "rollback", run_id=_real_run(ref, state[RUN_KEY]))
        state[PLAN_KEY] = plan
    except LastgoodError as exc:
        state[ERROR_KEY] = redact_text(str(exc))
    finally:
        store.reader.close()


# ---- the plan ------------------------------------------------------------------------------


def render_plan(ref: StoreRef, plan: dict[str, Any]) -> None:
    st.subheader("Preview (dry run)")
    run, ns = plan["run_id"], plan.get("namespace") or ""
    st.markdown(f"Run {code(redact_text(run))}{f' (namespace {code(ns)})' if ns else ''}")
    for warning in plan.get("warnings") or []:
        st.warning(md_escape(warning))
    marks = {k: v for k, v in (plan.get("marks") or {}).items() if v}
    if plan["action"] in MARKS_ONLY:
        named = ", ".join(describe(ref, c, run, ns) for ids in marks.values() for c in ids[:5])
        st.markdown(f"**{plan['action'].capitalize()}** {named}: a mark in the journal; the head and every "
                    "state stay as they are.")
        return
    st.markdown(f"- **Now** the agent resumes from {describe(ref, plan['previous_head'], run, ns)}\n"
                f"- **After** it resumes from {describe(ref, plan['resumes_from'], run, ns)}\n"
                f"- **Superseded**: {_superseded_line(plan)}")
    diff = plan.get("diff")
    if diff:
        s = diff.get("summary") or {}
        st.markdown(f"**State change** (now → after): {s.get('added', 0)} added, {s.get('removed', 0)} removed, "
                    f"{s.get('changed', 0)} changed" + (f" (the first {len(diff['changes'])} of "
                                                        f"{diff['truncated']} shown)" if diff.get("truncated") else ""))
        rows = pd.DataFrame(change_rows(diff.get("changes") or []))
        if not rows.empty:
            rows = rows[[c for c in rows.columns if c in ("change", "path", "A", "B") or rows[c].astype(bool).any()]]
            rows = rows.rename(columns={"A": "now", "B": "after"})
        show_table(rows, list(rows.columns), empty="No differences.", key="rc_diff", name="restore-preview-diff")
    effects = plan.get("side_effects") or []
    st.markdown(f"**Side effects after the target** — a restore rewinds state, not the world "
                f"({len(effects)}):")
    show_table(_as_text(effects, ("detail",)), ["checkpoint_id", "kind", "tool", "detail"],
               empty="None recorded after the target.", key="rc_effects", name="side-effects-after-target")
    if plan["superseded"]:
        with st.expander(f"Superseded checkpoints ({len(plan['superseded'])})"):
            st.markdown("\n".join(f"- {describe(ref, c, run, ns)}" for c in plan["superseded"][:200]))


def _superseded_line(plan: dict[str, Any]) -> str:
    n = len(plan["superseded"])
    if not n:
        return "none (later checkpoints stay as they are)" if plan["action"] != "undo" else "none"
    return f"{plural(n, 'later checkpoint')}: hidden from the resuming agent, kept for audit"


def _as_text(rows: list[dict[str, Any]], columns: tuple[str, ...]) -> pd.DataFrame:
    """Rows with mixed-type cells as short JSON text (a table column has one type), redacted."""
    from lastgood.cli.output import dumps

    def text(value: Any) -> str:
        shown = value if isinstance(value, str) else dumps(value, indent=None)
        return shown if len(shown) <= 200 else shown[:200] + "…"
    return redact_frame(pd.DataFrame([{**r, **{c: text(r.get(c)) for c in columns}} for r in rows]))


def _reason_and_apply(ref: StoreRef) -> None:
    reason = st.text_input("Reason (required; recorded in the journal)", key=REASON_KEY).strip()
    cannot = read_only_reason(ref)
    blocked = write_blocked(ref) or cannot or (None if reason else "Give a reason first.")
    if st.button("Apply…", type="primary", disabled=blocked is not None, help=blocked,
                 icon=":material/check:"):
        st.session_state[CONFIRM_KEY] = True
    if blocked:
        st.caption(md_escape(blocked) if blocked == cannot else blocked)
    if st.session_state.get(CONFIRM_KEY) and not blocked:
        _confirm_dialog(ref)


@st.dialog("Confirm the recovery action", width="medium")
def _confirm_dialog(ref: StoreRef) -> None:
    plan = st.session_state[PLAN_KEY]
    reason = st.session_state.get(REASON_KEY, "").strip()
    run = code(redact_text(plan.run_id))
    if plan.action in MARKS_ONLY:
        st.markdown(f"**{plan.action.capitalize()}** {describe(ref, plan.target, plan.run_id, plan.namespace)} of run "
                    f"{run}; the agent still resumes from {describe(ref, plan.expected_head, plan.run_id, plan.namespace)}.")
    else:
        st.markdown(f"**{ACTIONS[plan.action] if plan.action != 'undo' else 'Undo'}** on run {run}: the agent will "
                    f"resume from {describe(ref, plan.resumes_from, plan.run_id, plan.namespace)}; "
                    f"{plural(len(plan.superseded), 'checkpoint')} become superseded.")
        _not_undone(plan.side_effects)
    for warning in plan.warnings:
        st.warning(md_escape(warning))
    st.markdown(f"**Reason** (recorded in the journal) · operator {code(operator())}:")
    st.text(reason)  # plain text: a URL in it is not a link
    ok, cancel = st.columns(2)
    if ok.button("Confirm and apply", type="primary", key="rc_confirm_apply"):
        _apply(ref, plan, reason)
        st.rerun()
    if cancel.button("Cancel", key="rc_confirm_cancel"):
        st.session_state.pop(CONFIRM_KEY, None)
        st.rerun()


def _not_undone(effects: list[dict[str, Any]]) -> None:
    """The side effects recorded after the target: a restore rewinds state, not the world."""
    if not effects:
        st.caption("No side effect (tool call, interrupt, event) was recorded after the target.")
        return
    st.markdown(f"**Not undone** — {plural(len(effects), 'side effect')} recorded after the target stay done "
                "(compensate them yourself):")
    lines = [f"- {md_escape(str(e.get('kind') or ''))} {code(redact_text(str(e['tool'])) if e.get('tool') else '')} "
             f"{md_escape(redact_text(str(e.get('detail') or ''))[:120])}" for e in effects[:EFFECTS_IN_DIALOG]]
    if len(effects) > EFFECTS_IN_DIALOG:
        lines.append(f"- … and {len(effects) - EFFECTS_IN_DIALOG} more (listed in the preview)")
    st.markdown("\n".join(lines))


def _apply(ref: StoreRef, plan: recovery.Plan, reason: str) -> None:
    st.session_state.pop(CONFIRM_KEY, None)
    store = _store(ref)
    try:
        result = recovery.apply_plan(stores.catalog(ref.index_path), store, plan, reason=reason,
                                     operator=operator())
        st.session_state[RESULT_KEY] = result.to_dict()
        _forget_plan()
        st.session_state.pop(REASON_KEY, None)
        st.session_state[RESET_FORCE_KEY] = True  # an override is for one action: unticked before it draws
    except LastgoodError as exc:
        st.session_state[ERROR_KEY] = f"Nothing was applied: {redact_text(str(exc))}"
    finally:
        store.reader.close()
        stores.clear_query_caches()
        stores.cached_store.clear()
        _checkpoint.clear()


def render_result(ref: StoreRef) -> None:
    result = st.session_state.get(RESULT_KEY)
    if not result:
        return
    check = result.get("check")
    run, ns = result["run_id"], result.get("namespace") or ""
    st.success(f"**{result['action']}** applied: run {code(redact_text(run))} now resumes from "
               f"{describe(ref, result['new_head'], run, ns)} (before: {describe(ref, result['previous_head'], run, ns)})"
               f" · action {code(short_id(result['action_id']))}", icon=":material/check_circle:")
    if check and not check["ok"]:
        st.error(f"The check after applying failed (journaled): {md_escape(check['message'])}")
    elif check:
        st.caption(f"Checked: {md_escape(check['message'])}")
    cols = st.columns(2)
    head = links.inspect_params(ref.url, run, result["new_head"], ns)
    cols[0].page_link(TIMELINE_PAGE, label="See the new head in the Timeline", icon=":material/timeline:",
                      query_params=head or None)
    if cols[1].button("Undo this action", icon=":material/undo:", disabled=write_blocked(ref) is not None,
                      help=write_blocked(ref)):
        st.session_state.update({ACTION_KEY: "undo", UNDO_KEY: result["action_id"], AUTOPLAN_KEY: True})
        st.session_state.pop(RESULT_KEY, None)
        st.rerun()


# ---- the journal ------------------------------------------------------------------------------


def journal(ref: StoreRef) -> dict[str, Any]:
    store = _store(ref)
    try:
        return recovery.journal_report(store, catalog=stores.catalog(ref.index_path))
    finally:
        store.reader.close()


def render_journal(ref: StoreRef) -> None:
    cannot = read_only_reason(ref)
    if cannot:
        st.info(md_escape(f"No journal: {cannot}."), icon=":material/lock:")
        return
    try:
        report = journal(ref)
    except LastgoodError as exc:
        st.error(md_escape(str(exc)))
        return
    if report["chain_ok"]:
        st.badge(f"chain ok · {plural(report['entries'], 'entry')}", icon=":material/verified:", color="green")
    else:
        st.badge("chain BROKEN", icon=":material/gpp_bad:", color="red")
        for problem in report["problems"]:
            st.error(md_escape(problem))
    for pending in report.get("pending") or []:
        st.warning(f"An action is in progress or was interrupted: {code(pending.get('action_id'))}")
    frame = pd.DataFrame(report["actions"])
    if frame.empty:
        st.caption("No recovery actions yet.")
        return
    if "time" in frame:  # ISO text in the journal; a time here, shown in UTC like every other table
        frame["time"] = pd.to_datetime(frame["time"], utc=True, errors="coerce")
    left, right = st.columns(2)
    runs = left.multiselect("Run", sorted(frame["run_id"].dropna().unique()), key="rc_j_runs")
    kinds = right.multiselect("Action", sorted(frame["action"].dropna().unique()), key="rc_j_kinds")
    if runs:
        frame = frame[frame["run_id"].isin(runs)]
    if kinds:
        frame = frame[frame["action"].isin(kinds)]
    columns = ["seq", "time", "id", "action", "run_id", "operator", "reason", "previous_head", "new_head", "undo_of"]
    shown = redact_frame(frame.iloc[::-1][[c for c in columns if c in frame]])
    st.dataframe(shown, hide_index=True, width="stretch", key="rc_journal",
                 column_config={"time": st.column_config.DatetimeColumn("time (UTC)", timezone="UTC",
                                                                         format="YYYY-MM-DD HH:mm:ss"),
                                "run_id": st.column_config.TextColumn("run"),
                                "reason": st.column_config.TextColumn("reason", width="medium"),
                                "previous_head": st.column_config.TextColumn("previous head", width=270),
                                "new_head": st.column_config.TextColumn("new head", width=270),
                                "undo_of": st.column_config.TextColumn("undo of")})
    st.caption(f"{plural(len(shown), 'entry')} shown, newest first")
    export_buttons(shown, "journal")
