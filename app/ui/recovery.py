"""UI helpers of the Recovery page (and the Timeline's recovery links).

Flow: pick an action → preview (the dry-run plan: diff, superseded, side
effects) → reason → confirmation dialog (driven by session state, so it works
for people and under AppTest) → apply → result with an undo button. Writes
need ``lastgood ui --allow-write`` (or LASTGOOD_ALLOW_WRITE); previews never write.
"""

from __future__ import annotations

from typing import Any

import pandas as pd
import streamlit as st

from lastgood import ui
from lastgood.integrity import health
from lastgood.index import queries
from lastgood.recovery import plan as recovery
from lastgood.errors import LastgoodError
from lastgood.pages import page_path
from lastgood.stores import OpenStore, open_store

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
QUERY_SEEN_KEY = "rc_query_seen"
ACTIONS = {"restore": "Restore a checkpoint", "rollback": "Roll back the run to a checkpoint",
           "restore-last-good": "Restore the run's last good checkpoint",
           "quarantine": "Quarantine a checkpoint", "release": "Release a quarantine",
           "undo": "Undo an earlier action"}
NEEDS_TARGET = ("restore", "rollback", "quarantine", "release")
READ_ONLY = ("Read-only: previews work, applying needs `lastgood ui --allow-write` "
             "(or LASTGOOD_ALLOW_WRITE=1).")


def write_blocked(ref: ui.StoreRef) -> str | None:
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


def _store(ref: ui.StoreRef) -> OpenStore:
    """A fresh reader (a cached one may not see the store's latest writes)."""
    return open_store(ui._catalog(ref.index_path), ref.url)


# ---- arriving from other pages ----------------------------------------------------------


def take_query_params() -> None:
    """``?action=…&run=…&target=…`` (Timeline, Integrity) preselect the form once, then preview."""
    params = {k: st.query_params.get(k) for k in ("store", "action", "run", "target", "undo")}
    marker = tuple(params.values())
    if not any(marker) or st.session_state.get(QUERY_SEEN_KEY) == marker:
        return
    st.session_state[QUERY_SEEN_KEY] = marker
    if params["store"]:  # the link's store, never the one last picked: the target is one of its checkpoints
        st.session_state[ui.STORE_KEY] = params["store"]
    if params["action"] in ACTIONS:
        st.session_state[ACTION_KEY] = params["action"]
    if params["run"]:
        st.session_state[RUN_KEY] = params["run"]
    if params["target"]:
        st.session_state[TARGET_KEY] = params["target"]
    st.session_state[LINKED_KEY] = {"run": params["run"], "target": params["target"], "store": params["store"]}
    if params["undo"]:
        st.session_state[UNDO_KEY] = params["undo"]
    st.session_state["rc_autoplan"] = True


def recovery_links(ref: ui.StoreRef, checkpoint: dict[str, Any]) -> None:
    """Timeline detail: restore this / rollback to here / quarantine, as links to the Recovery page."""
    status = checkpoint.get("status")
    base = {"store": ref.url, "run": checkpoint["run_id"], "target": checkpoint["checkpoint_id"]}
    bad = status in ("incomplete",)
    why = ("an incomplete checkpoint (its save never committed) cannot be restored" if bad
           else "preview first; applying needs --allow-write" if not ref.allow_write
           else "opens the Recovery page with a dry-run preview")
    cols = st.columns(3)
    cols[0].page_link(RECOVERY_PAGE, label="Restore this", icon=":material/restore:",
                      query_params={**base, "action": "restore"}, disabled=bad, help=why)
    cols[1].page_link(RECOVERY_PAGE, label="Rollback to here", icon=":material/undo:",
                      query_params={**base, "action": "rollback"}, disabled=bad, help=why)
    quarantined = status == "quarantined"
    cols[2].page_link(RECOVERY_PAGE, label="Release quarantine" if quarantined else "Quarantine",
                      icon=":material/block:",
                      query_params={**base, "action": "release" if quarantined else "quarantine"},
                      help="mark this snapshot bad by hand (with a reason)")


# ---- the form --------------------------------------------------------------------------


def render_form(ref: ui.StoreRef) -> None:
    """Action, run, target; a preview button; the plan, reason and apply button."""
    runs = list(dict.fromkeys(ui.runs_frame(ref)["run_id"]))  # most recent first, as the Timeline
    if not runs:
        st.info("No runs in this store.")
        return
    left, middle, right = st.columns([3, 3, 4])
    action = left.selectbox("Action", list(ACTIONS), format_func=ACTIONS.get, key=ACTION_KEY,
                            on_change=_forget_plan)
    if action == "undo":
        _undo_picker(ref, middle)
    else:
        if st.session_state.get(RUN_KEY) not in runs:
            st.session_state[RUN_KEY] = runs[0]
        run = middle.selectbox("Run", runs, key=RUN_KEY, on_change=_forget_plan)
        if action in NEEDS_TARGET:
            _target_picker(ref, run, action, right)
    if st.session_state.pop(RESET_FORCE_KEY, False):
        st.session_state[FORCE_KEY] = False
    force = st.checkbox("Allow a quarantined or corrupt target (--force)", key=FORCE_KEY,
                        on_change=_forget_plan)
    link_kept = _link_kept(ref, action)  # once, in the run right after a link
    auto = st.session_state.pop("rc_autoplan", False) and link_kept
    if st.button("Preview (dry run)", icon=":material/preview:") or auto:
        _make_plan(ref, action, force)
    if st.session_state.get(ERROR_KEY):
        st.error(ui.md_escape(st.session_state[ERROR_KEY]))
    plan = st.session_state.get(PLAN_KEY)
    if plan is not None:
        render_plan(plan.to_dict())
        _reason_and_apply(ref)


def _link_kept(ref: ui.StoreRef, action: str) -> bool:
    """False (and an error) when the store, run or checkpoint a link named is not what the form
    shows (another store, a run it does not have): a preview never goes ahead on another target."""
    linked = st.session_state.pop(LINKED_KEY, None) or {}
    state = st.session_state
    lost = [f"{what} {value}" for what, value, shown in (
        ("store", linked.get("store"), ref.url), ("run", linked.get("run"), state.get(RUN_KEY)),
        ("checkpoint", linked.get("target") if action in NEEDS_TARGET else None, state.get(TARGET_KEY)))
        if value and value != shown]
    if lost:  # kept until the next preview or change (a rerun must not wipe it: the pickers moved)
        st.session_state[ERROR_KEY] = ("The link named " + ", ".join(lost) + ", which this store does not "
                                       "have (or has not finished indexing): nothing was previewed. Pick the "
                                       "store and checkpoint here.")
    return not lost


def _target_picker(ref: ui.StoreRef, run: str, action: str, column: Any) -> None:
    rows = list(reversed(queries.list_checkpoints(ui._catalog(ref.index_path), ref.store_id, run_id=run)))
    choices = {r["checkpoint_id"]: f"step {r['step']} · {r['status']} · {r['checkpoint_id'][:18]}" for r in rows}
    if st.session_state.get(TARGET_KEY) not in choices:
        st.session_state[TARGET_KEY] = default_target(ref, run, action, rows)
    column.selectbox("Checkpoint", list(choices), format_func=choices.get, key=TARGET_KEY,
                     on_change=_forget_plan)


def default_target(ref: ui.StoreRef, run: str, action: str, rows: list[dict[str, Any]]) -> str | None:
    """What an operator most likely means (``rows``: newest first): for a restore or rollback the
    run's last good checkpoint (else its newest ok one), for a release the newest quarantined one,
    otherwise the newest."""
    wanted: tuple[str, ...] = {"restore": ("ok",), "rollback": ("ok",), "release": ("quarantined",)}.get(action, ())
    if action in ("restore", "rollback"):
        good = health.last_good(ui._catalog(ref.index_path), ref.store_id, run)
        if good and any(r["checkpoint_id"] == good for r in rows):
            return good
    matching = (r["checkpoint_id"] for r in rows if r["status"] in wanted)
    return next(matching, rows[0]["checkpoint_id"] if rows else None)


def _undo_picker(ref: ui.StoreRef, column: Any) -> None:
    try:
        listed = journal(ref)["actions"]
        undone = recovery.undone_actions(listed)  # undone once: not offered again
        actions = [a for a in listed if a.get("id") and a.get("action") != "check-failed"
                   and a.get("id") not in undone]
    except LastgoodError as exc:
        column.error(str(exc))
        return
    choices = {a["id"]: f"{a['action']} · {a['run_id']} · {a['id']}" for a in reversed(actions)}
    if st.session_state.get(UNDO_KEY) not in choices:
        st.session_state[UNDO_KEY] = next(iter(choices), None)
    column.selectbox("Action to undo", list(choices), format_func=choices.get, key=UNDO_KEY,
                     on_change=_forget_plan, placeholder="no actions yet")


def _forget_plan() -> None:
    for key in (PLAN_KEY, ERROR_KEY, CONFIRM_KEY):
        st.session_state.pop(key, None)


def _make_plan(ref: ui.StoreRef, action: str, force: bool) -> None:
    _forget_plan()
    state = st.session_state
    store = _store(ref)
    catalog = ui._catalog(ref.index_path)
    try:
        if action == "undo":
            plan = recovery.plan_undo(catalog, store, state.get(UNDO_KEY) or "")
        elif action == "restore-last-good":
            plan = recovery.plan_restore_last_good(catalog, store, state[RUN_KEY])
        elif action in ("quarantine", "release"):
            plan = recovery.plan_quarantine(catalog, store, state[TARGET_KEY], release=action == "release")
        else:
            plan = recovery.plan_restore(catalog, store, state[TARGET_KEY], force=force,
                                         rollback=action == "rollback", run_id=state[RUN_KEY])
        state[PLAN_KEY] = plan
    except LastgoodError as exc:
        state[ERROR_KEY] = str(exc)
    finally:
        store.reader.close()


# ---- the plan ------------------------------------------------------------------------------


def render_plan(plan: dict[str, Any]) -> None:
    st.subheader("Preview (dry run)")
    cols = st.columns(3)
    cols[0].metric("Current head", (plan["previous_head"] or "-")[:18])
    cols[1].metric("Resumes from", (plan["resumes_from"] or "-")[:18])
    cols[2].metric("Becomes superseded", len(plan["superseded"]))
    for warning in plan.get("warnings") or []:
        st.warning(ui.md_escape(warning))
    marks = {k: v for k, v in (plan.get("marks") or {}).items() if v}
    if marks:
        st.caption("Marks: " + "; ".join(f"{k}: {len(v)}" for k, v in marks.items()))
    if plan["action"] in MARKS_ONLY:
        named = ", ".join(ui.code(c) for ids in marks.values() for c in ids[:5])
        st.markdown(f"**{plan['action'].capitalize()}** {named} of run {ui.code(plan['run_id'])}: a mark "
                    "in the journal; the head and every state stay as they are.")
        return
    diff = plan.get("diff")
    if diff:
        s = diff.get("summary") or {}
        st.markdown(f"**State change** (head → target): {s.get('added', 0)} added, "
                    f"{s.get('removed', 0)} removed, {s.get('changed', 0)} changed")
        changes = diff.get("changes") or []
        moved = ["from"] if any(c.get("from") for c in changes) else []  # a move's old place
        ui.show_table(_as_text(changes, ("old", "new")), ["op", "path", *moved, "old", "new"],
                      empty="No differences.", key="rc_diff")
    effects = plan.get("side_effects") or []
    st.markdown(f"**Side effects after the target** — a restore rewinds state, not the world "
                f"({len(effects)}):")
    ui.show_table(_as_text(effects, ("detail",)), ["checkpoint_id", "kind", "tool", "detail"],
                  empty="None recorded after the target.", key="rc_effects")
    if plan["superseded"]:
        with st.expander(f"Superseded checkpoints ({len(plan['superseded'])})"):
            st.code("\n".join(plan["superseded"]))


def _as_text(rows: list[dict[str, Any]], columns: tuple[str, ...]) -> pd.DataFrame:
    """Rows with mixed-type cells as short JSON text (a table column has one type)."""
    from lastgood.cli.output import dumps

    def text(value: Any) -> str:
        shown = value if isinstance(value, str) else dumps(value, indent=None)
        return shown if len(shown) <= 200 else shown[:200] + "…"
    return pd.DataFrame([{**r, **{c: text(r.get(c)) for c in columns}} for r in rows])


def _reason_and_apply(ref: ui.StoreRef) -> None:
    reason = st.text_input("Reason (required; recorded in the journal)", key=REASON_KEY).strip()
    blocked = write_blocked(ref) or (None if reason else "Give a reason first.")
    if st.button("Apply…", type="primary", disabled=blocked is not None, help=blocked,
                 icon=":material/check:"):
        st.session_state[CONFIRM_KEY] = True
    if blocked:
        st.caption(blocked)
    if st.session_state.get(CONFIRM_KEY) and not blocked:
        _confirm_dialog(ref)


@st.dialog("Confirm the recovery action")
def _confirm_dialog(ref: ui.StoreRef) -> None:
    plan = st.session_state[PLAN_KEY]
    reason = st.session_state.get(REASON_KEY, "").strip()
    if plan.action in MARKS_ONLY:
        st.markdown(f"**{plan.action}** checkpoint {ui.code(plan.target)} of run {ui.code(plan.run_id)}; "
                    f"the head stays {ui.code(plan.expected_head)}.")
    else:
        st.markdown(f"**{plan.action}** on run {ui.code(plan.run_id)}: the agent will resume from "
                    f"{ui.code(plan.resumes_from)}; {len(plan.superseded)} checkpoint(s) become superseded.")
    st.markdown(f"Reason: _{ui.md_escape(reason)}_ · operator: {ui.code(operator())}")
    ok, cancel = st.columns(2)
    if ok.button("Confirm and apply", type="primary", key="rc_confirm_apply"):
        _apply(ref, plan, reason)
        st.rerun()
    if cancel.button("Cancel", key="rc_confirm_cancel"):
        st.session_state.pop(CONFIRM_KEY, None)
        st.rerun()


def _apply(ref: ui.StoreRef, plan: recovery.Plan, reason: str) -> None:
    st.session_state.pop(CONFIRM_KEY, None)
    store = _store(ref)
    try:
        result = recovery.apply_plan(ui._catalog(ref.index_path), store, plan, reason=reason,
                                     operator=operator())
        st.session_state[RESULT_KEY] = result.to_dict()
        _forget_plan()
        st.session_state.pop(REASON_KEY, None)
        st.session_state[RESET_FORCE_KEY] = True  # --force is for one action: unticked before it draws
    except LastgoodError as exc:
        st.session_state[ERROR_KEY] = f"Nothing was applied: {exc}"
    finally:
        store.reader.close()
        ui.clear_query_caches()
        ui._open_store.clear()


def render_result(ref: ui.StoreRef) -> None:
    result = st.session_state.get(RESULT_KEY)
    if not result:
        return
    check = result.get("check")
    message = (f"{result['action']} {ui.code(result['action_id'])} applied: run {ui.code(result['run_id'])} "
               f"head {ui.code(result['previous_head'])} → {ui.code(result['new_head'])}")
    st.success(message, icon=":material/check_circle:")
    if check and not check["ok"]:
        st.error(f"The check after applying failed (journaled): {ui.md_escape(check['message'])}")
    elif check:
        st.caption(f"Checked: {ui.md_escape(check['message'])}")
    cols = st.columns(2)
    head = {"store": ref.url, "run": result["run_id"], "checkpoint": result["new_head"],
            **({"ns": result["namespace"]} if result.get("namespace") else {})}
    cols[0].page_link(TIMELINE_PAGE, label="See the new head in the Timeline", icon=":material/timeline:",
                      query_params={k: v for k, v in head.items() if v})
    if cols[1].button("Undo this action", icon=":material/undo:", disabled=write_blocked(ref) is not None,
                      help=write_blocked(ref)):
        st.session_state.update({ACTION_KEY: "undo", UNDO_KEY: result["action_id"], "rc_autoplan": True})
        st.session_state.pop(RESULT_KEY, None)
        st.rerun()


# ---- the journal ------------------------------------------------------------------------------


def journal(ref: ui.StoreRef) -> dict[str, Any]:
    store = _store(ref)
    try:
        return recovery.journal_report(store, catalog=ui._catalog(ref.index_path))
    finally:
        store.reader.close()


def render_journal(ref: ui.StoreRef) -> None:
    try:
        report = journal(ref)
    except LastgoodError as exc:
        st.error(ui.md_escape(str(exc)))
        return
    if report["chain_ok"]:
        st.badge(f"chain ok · {report['entries']} entries", icon=":material/verified:", color="green")
    else:
        st.badge("chain BROKEN", icon=":material/gpp_bad:", color="red")
        for problem in report["problems"]:
            st.error(ui.md_escape(problem))
    for pending in report.get("pending") or []:
        st.warning(f"An action is in progress or was interrupted: {ui.code(pending.get('action_id'))}")
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
    ui.show_table(frame.iloc[::-1], ["seq", "time", "id", "action", "run_id", "operator", "reason",
                                     "previous_head", "new_head", "undo_of"],
                  empty="No actions match.", key="rc_journal")
