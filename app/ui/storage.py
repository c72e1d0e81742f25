"""UI helpers of the Storage page: what the store is costing, what a policy would reclaim, prune.

Numbers come from :func:`lastgood.retention.storage_report` (bytes per store, agent, run; for
LangGraph per table and channel; growth per day, its rate and a projection; the largest runs and
checkpoints; stale runs) and are redacted before they are drawn. The policy form previews
:func:`lastgood.retention.plan_prune` (a dry run: nothing is written) per run; with ``lastgood ui
--allow-write`` the preview can be applied — reason, then a confirmation dialog driven by session
state (as on the Recovery page), then the archive-before-delete prune — and undone from its result.
Saving the policy for the store is a journaled write too. The page's link names its store and the
breakdown's tab (``?tab=by-run``: lastgood.ui.tabs).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pandas as pd
import streamlit as st

from lastgood import retention
from lastgood.cli.output import short_bytes
from lastgood.display.numbers import plural, short_id
from lastgood.errors import LastgoodError
from lastgood.redact import redact, redact_text
from lastgood.stores import OpenStore, open_store
from lastgood.ui import links, stores, tabs
from lastgood.ui.escape import code, md_escape
from lastgood.ui.recovery import READ_ONLY, operator
from lastgood.ui.stores import StoreRef
from lastgood.ui.tables import redact_frame, show_table

STALE_KEY = "sg_stale_after"
RULE_KEYS = {name: f"sg_keep_{name}" for name in ("last", "hourly", "daily", "weekly", "monthly", "within",
                                                  "runs_within")}
COUNT_RULES = ("last", "hourly", "daily", "weekly", "monthly")
LOADED_KEY = "sg_policy_loaded"  # the store whose saved policy filled the form
PLAN_KEY = "sg_plan"
ERROR_KEY = "sg_error"
REASON_KEY = "sg_reason"
CONFIRM_KEY = "sg_confirm"
RESULT_KEY = "sg_result"
UNDO_REASON_KEY = "sg_undo_reason"
SAVED_KEY = "sg_saved"
PROJECTION_DAYS = 90
RULE_LABELS = {"last": "Keep last N per run", "hourly": "Hourly", "daily": "Daily", "weekly": "Weekly",
               "monthly": "Monthly", "within": "Keep within (e.g. 7d, 36h)",
               "runs_within": "Delete runs untouched for (e.g. 30d)"}


def _fresh_store(ref: StoreRef) -> OpenStore:
    """A fresh reader (a cached one may not see the journal's latest entries)."""
    return open_store(stores.catalog(ref.index_path), ref.url)


@st.cache_data(ttl=stores.CACHE_TTL, max_entries=32, show_spinner="Measuring the store…")
def _report(index_path: str, url: str, store_id: int, stale_after: str) -> dict[str, Any]:
    store = open_store(stores.catalog(index_path), url)
    try:
        return redact(retention.storage_report(stores.catalog(index_path), store, stale_after=stale_after).to_dict())
    finally:
        store.reader.close()


def storage_report(ref: StoreRef) -> dict[str, Any] | None:
    """The store's numbers (redacted), or None with the error shown."""
    stale = st.session_state.get(STALE_KEY) or "30d"
    try:
        return _report(ref.index_path, ref.url, ref.store_id, stale)
    except LastgoodError as exc:
        st.error(md_escape(redact_text(str(exc))))
        return None


def _frame(records: list[dict[str, Any]]) -> pd.DataFrame:
    frame = pd.DataFrame(records)
    for column in ("created_at", "first_at", "last_at"):
        if column in frame:
            frame[column] = pd.to_datetime(frame[column], utc=True)
    return frame


# ---- the link: the store and the breakdown's tab ---------------------------------------------------


def take_link() -> None:
    """A link's tab (``?tab=by-run``), on the run it arrives in: before the page draws."""
    params = links.take("storage")
    if params:
        tabs.take(tabs.STORAGE, params.get(links.TAB))


def write_link(ref: StoreRef) -> None:
    """The store and the breakdown's tab in the URL."""
    links.write("storage", {links.STORE: ref.url, links.TAB: tabs.selected(tabs.STORAGE)})


# ---- what it is costing ----------------------------------------------------------------------


def render_kpis(report: dict[str, Any]) -> None:
    store, rate = report["store"], report["rate"]
    foot = report.get("footprint") or {}
    ahead = next((p for p in report["projection"] if p["days"] == 30), None)
    row = st.container(horizontal=True)
    row.metric("Checkpoints' bytes", short_bytes(store["size_bytes"]), help=f"{store['size_bytes']:,} bytes "
               "of stored checkpoint payloads (the index's size per checkpoint)", border=True)
    if foot.get("bytes") is not None:
        row.metric("On disk", short_bytes(foot["bytes"]), help="the store's files (or the database's tables); "
                   f"free inside them: {short_bytes(foot.get('free_bytes') or 0)}", border=True)
    row.metric("Checkpoints", f"{store['checkpoints']:,}", border=True)
    row.metric("Runs", f"{store['runs']:,}", border=True)
    row.metric("Growth per day", short_bytes(int(rate["bytes_per_day"])),
               help=f"over the last {rate['window_days']} days: {rate['checkpoints_per_day']:.1f} checkpoints/day",
               border=True)
    if ahead:
        row.metric("In 30 days", short_bytes(ahead["bytes"]), help="at the current rate, without retention",
                   border=True)
    for note in foot.get("notes") or []:
        st.caption(md_escape(str(note)))


def growth_figure(report: dict[str, Any]) -> Any:
    """Bytes written per day (bars), the running total (line) and its projection at the current
    rate (dashed), in UTC days."""
    import plotly.graph_objects as go

    growth = pd.DataFrame(report["growth"])
    fig = go.Figure()
    fig.add_bar(x=growth["day"], y=growth["bytes"], name="written that day", marker_color="#9ecae1",
                hovertemplate="%{x|%Y-%m-%d}: %{y:,} bytes<extra></extra>")
    fig.add_scatter(x=growth["day"], y=growth["cumulative_bytes"], name="total", mode="lines+markers",
                    line={"color": "#08519c"}, hovertemplate="%{x|%Y-%m-%d}: %{y:,} bytes<extra></extra>")
    total, rate = int(growth["cumulative_bytes"].iloc[-1]), float(report["rate"]["bytes_per_day"])
    until = report["rate"].get("until")  # the projection starts today, from the store's size now
    start = pd.Timestamp(until).date() if until is not None else growth["day"].iloc[-1]
    days = [start + timedelta(days=d) for d in (0, PROJECTION_DAYS)]
    fig.add_scatter(x=days, y=[total, int(total + rate * PROJECTION_DAYS)], mode="lines",
                    name=f"projection ({short_bytes(int(rate))}/day)", line={"dash": "dash", "color": "#e6550d"},
                    hovertemplate="%{x|%Y-%m-%d}: %{y:,} bytes<extra></extra>")
    fig.update_layout(height=320, margin={"l": 10, "r": 10, "t": 10, "b": 10}, yaxis_title="bytes",
                      legend={"orientation": "h", "y": -0.2})
    fig.update_yaxes(tickformat="~s")
    return fig


def render_growth(report: dict[str, Any]) -> None:
    if not report["growth"]:
        st.caption("No timestamps recorded, so growth over time cannot be drawn.")
        return
    st.plotly_chart(growth_figure(report), width="stretch", key="sg_growth")
    rate = report["rate"]
    quiet = "" if rate["checkpoints_per_day"] else f" No checkpoint was written in the last {rate['window_days']} days."
    st.caption("Projection from today: " + ", ".join(f"in {p['days']} days {short_bytes(p['bytes'])}"
                                                     for p in report["projection"])
               + f" (the rate of the last {rate['window_days']} days, no retention).{quiet}")


def render_breakdown(report: dict[str, Any]) -> None:
    """Agents, runs, tables and channels, largest checkpoints."""
    agents, runs, parts, largest = tabs.linked_tabs(tabs.STORAGE, [
        ("by-agent", "By agent"), ("by-run", "By run"), ("by-table", "By table and channel"),
        ("largest", "Largest checkpoints")])
    with agents:
        show_table(redact_frame(_frame(report["agents"])), ["agent", "runs", "checkpoints", "size_bytes"],
                   empty="No checkpoints.", key="sg_agents")
    with runs:
        show_table(redact_frame(_frame(report["runs"])), ["run_id", "agent", "checkpoints", "namespaces",
                                                          "size_bytes", "first_at", "last_at", "head"],
                   empty="No runs.", key="sg_runs")
    with parts:
        render_tables(report)
    with largest:
        show_table(redact_frame(_frame(report["largest_checkpoints"])),
                   ["size_bytes", "run_id", "namespace", "checkpoint_id", "step", "created_at", "status"],
                   empty="No sizes recorded.", key="sg_largest")


def render_tables(report: dict[str, Any]) -> None:
    """Per table (checkpoints, blobs, writes) and which channels bloat (LangGraph)."""
    if not report["tables"]:
        st.caption("This store format reports no per-table breakdown.")
        return
    tables = _frame(report["tables"]).rename(columns={"bytes": "size_bytes"})
    show_table(tables, ["table", "rows", "size_bytes"], empty="No tables.", key="sg_tables")
    channels = _frame(report["channels"]).rename(columns={"bytes": "size_bytes"})
    if channels.empty:
        return
    st.markdown("**By channel**, largest first" + (" (checkpoint blobs estimated from a sample)"
                                                    if channels["estimated"].any() else ""))
    show_table(redact_frame(channels), ["table", "channel", "rows", "size_bytes", "estimated"],
               empty="No channels.", key="sg_channels")


def render_stale(report: dict[str, Any]) -> None:
    st.text_input("Stale after (no checkpoint for; e.g. 30d, 12h, 1y)", key=STALE_KEY, value="30d",
                  help="restic durations: y years, m months, d days, h hours")
    stale = _frame(report["stale_runs"])
    if not stale.empty:
        st.caption(f"{plural(len(stale), 'stale run')}, {short_bytes(int(stale['size_bytes'].sum()))}: "
                   "`--keep-runs-within` deletes such runs whole (archived first).")
    show_table(redact_frame(stale), ["run_id", "agent", "last_at", "checkpoints", "size_bytes"],
               empty=f"No run has gone without a checkpoint for {report['stale_after']}.", key="sg_stale")


def render_pins_and_policy(report: dict[str, Any]) -> None:
    policy = report.get("policy")
    if policy:
        st.markdown(f"**Saved policy**: {md_escape(policy['text'])} — {code(' '.join(policy['options']))} "
                    f"(saved by {code(str(policy.get('operator')))}, {md_escape(str(policy.get('time') or '')[:19])})")
    else:
        st.caption("No policy saved for this store (`lastgood prune STORE --keep-… --save-policy`, or below).")
    pins = report.get("pins") or []
    if pins:
        st.markdown(f"**Pinned** ({len(pins)}): kept by every prune")
        show_table(redact_frame(pd.DataFrame(pins)), ["run_id", "namespace", "checkpoint_id", "reason", "operator",
                                                      "time"], empty="", key="sg_pins")


# ---- what a policy would reclaim ---------------------------------------------------------------


def _fill_from_saved(ref: StoreRef, report: dict[str, Any]) -> None:
    """The form starts from the store's saved policy (once per store), else keep-last 10."""
    state = st.session_state
    if state.get(LOADED_KEY) == ref.url:
        return
    saved = (report.get("policy") or {}).get("policy") or {"last": 10}
    for name, key in RULE_KEYS.items():
        value = saved.get(name)
        state[key] = (int(value) if str(value).lstrip("-").isdigit() else 0) if name in COUNT_RULES \
            else str(value or "")
    state[LOADED_KEY] = ref.url
    _forget_plan()


def policy_form(ref: StoreRef, report: dict[str, Any]) -> retention.Policy | None:
    """The rules (restic's options); the Policy they give, or None with the error shown."""
    _fill_from_saved(ref, report)
    cols = st.columns(len(COUNT_RULES))
    for col, name in zip(cols, COUNT_RULES):
        col.number_input(RULE_LABELS[name], min_value=0, step=1, key=RULE_KEYS[name], on_change=_rule_changed,
                         help=f"--keep-{name} (0: off)")
    left, right = st.columns(2)
    left.text_input(RULE_LABELS["within"], key=RULE_KEYS["within"], on_change=_rule_changed,
                    help="--keep-within: every checkpoint within this of a run's newest")
    right.text_input(RULE_LABELS["runs_within"], key=RULE_KEYS["runs_within"], on_change=_rule_changed,
                     help="--keep-runs-within: runs with no checkpoint for longer go whole")
    values = {name: (st.session_state.get(key) or None) for name, key in RULE_KEYS.items()}
    try:
        policy = retention.policy_from_options(**values)
    except LastgoodError as exc:
        st.error(md_escape(str(exc)))
        return None
    text = policy.describe()
    st.caption(f"{md_escape(text[:1].upper() + text[1:])}. Always kept: each run's head and last good, pinned checkpoints, "
               "targets of journaled actions not undone, and every checkpoint a kept one needs to be read.")
    return None if policy.empty else policy


def _rule_changed() -> None:
    """A rule edited: its rerun's address is no link (links.not_a_link), and the plan is stale."""
    links.not_a_link()
    _forget_plan()


def _forget_plan() -> None:
    for key in (PLAN_KEY, ERROR_KEY, CONFIRM_KEY, SAVED_KEY):
        st.session_state.pop(key, None)


def make_plan(ref: StoreRef, policy: retention.Policy) -> None:
    """The dry run (nothing written), kept in the session for the preview and the apply."""
    _forget_plan()
    store = _fresh_store(ref)
    try:
        st.session_state[PLAN_KEY] = retention.plan_prune(stores.catalog(ref.index_path), store, policy)
    except LastgoodError as exc:
        st.session_state[ERROR_KEY] = redact_text(str(exc))
    finally:
        store.reader.close()


def render_preview(ref: StoreRef, policy: retention.Policy | None) -> None:
    """The preview button, then what the policy would reclaim per run."""
    cannot = prune_unavailable(ref)
    blocked = cannot or (None if policy else "Give at least one rule.")
    if st.button("Preview what it would reclaim (dry run)", icon=":material/preview:", disabled=blocked is not None,
                 help=blocked) and policy is not None:
        make_plan(ref, policy)
    if cannot:
        st.caption(md_escape(cannot))
    if st.session_state.get(ERROR_KEY):
        st.error(md_escape(st.session_state[ERROR_KEY]))
    plan = st.session_state.get(PLAN_KEY)
    if plan is not None:
        render_plan(plan)
        render_save_policy(ref, plan)
        _reason_and_apply(ref)


def prune_unavailable(ref: StoreRef) -> str | None:
    """Why this store's format cannot prune, or None."""
    store = stores.cached_store(ref.index_path, ref.url)
    if retention.can_prune(store):
        return None
    return f"The {store.reader.name} reader cannot prune: " + (store.reader.read_only_reason or
                                                               "retention is not available for this store format")


def render_plan(plan: Any) -> None:
    s = plan.summary
    st.subheader("Preview (dry run)")
    row = st.container(horizontal=True)
    row.metric("Checkpoints that go", f"{s['forget']:,}", help=f"of {s['checkpoints']:,}", border=True)
    row.metric("Bytes reclaimed", short_bytes(s["bytes_forget"]), help=f"{s['bytes_forget']:,} of {s['bytes']:,} "
               "bytes of checkpoint payloads", border=True)
    row.metric("Runs pruned", f"{s['runs_pruned']:,}", help=f"of {s['runs']:,}", border=True)
    row.metric("Runs deleted whole", f"{s['runs_deleted_whole']:,}", border=True)
    for warning in plan.warnings:
        st.warning(md_escape(warning))
    st.markdown(f"Kept: {s['keep']:,} checkpoints — " + ", ".join(f"{md_escape(k)}: {v:,}"
                                                                  for k, v in s["kept_by"].items()))
    st.caption(f"Archive (pruned checkpoints are written there first; undo brings them back): "
               f"{code(redact_text(plan.archive))}. The CLI: {code('lastgood prune STORE ' + ' '.join(plan.policy.options()) + ' --dry-run')}")
    per_run = redact_frame(_frame(plan.per_run)).rename(columns={"bytes_forget": "size_bytes"})
    show_table(per_run, ["run_id", "namespace", "checkpoints", "keep", "forget", "size_bytes", "goes_whole",
                         "last_at"], empty="No runs.", key="sg_plan_runs")
    st.caption("size: the bytes that would go from each run.")


# ---- writes: save the policy, prune, undo ------------------------------------------------------


def write_blocked(ref: StoreRef) -> str | None:
    return None if ref.allow_write else READ_ONLY


def _reason() -> str:
    return str(st.session_state.get(REASON_KEY) or "").strip()


def render_save_policy(ref: StoreRef, plan: Any) -> None:
    blocked = write_blocked(ref) or (None if _reason() else "Give a reason first.")
    if st.button("Save this policy for the store", icon=":material/save:", disabled=blocked is not None,
                 help=blocked or "journaled; `lastgood prune STORE` without options uses it"):
        store = _fresh_store(ref)
        try:
            retention.save_policy(store, plan.policy, reason=_reason(), operator=operator())
            st.session_state[SAVED_KEY] = plan.policy.describe()
        except LastgoodError as exc:
            st.session_state[ERROR_KEY] = redact_text(str(exc))
        finally:
            store.reader.close()
            _report.clear()
    if st.session_state.get(SAVED_KEY):
        st.success(f"Saved as this store's policy: {md_escape(st.session_state[SAVED_KEY])}",
                   icon=":material/save:")


def _reason_and_apply(ref: StoreRef) -> None:
    st.text_input("Reason (required; recorded in the journal)", key=REASON_KEY)
    plan = st.session_state[PLAN_KEY]
    blocked = write_blocked(ref) or (None if plan.summary["forget"] else "Nothing would go.") or \
        (None if _reason() else "Give a reason first.")
    if st.button("Prune…", type="primary", disabled=blocked is not None, help=blocked, icon=":material/delete_sweep:"):
        st.session_state[CONFIRM_KEY] = True
    if blocked:
        st.caption(blocked)
    if st.session_state.get(CONFIRM_KEY) and not blocked:
        _confirm_dialog(ref)


@st.dialog("Confirm the prune", width="medium")
def _confirm_dialog(ref: StoreRef) -> None:
    plan = st.session_state[PLAN_KEY]
    s = plan.summary
    st.markdown(f"**Prune** {s['forget']:,} of {s['checkpoints']:,} checkpoints ({short_bytes(s['bytes_forget'])}) "
                f"in {plural(s['runs_pruned'], 'run')}" + (f"; {s['runs_deleted_whole']:,} go whole" if
                                                           s["runs_deleted_whole"] else "") + ".")
    st.markdown(f"They are archived to {code(redact_text(plan.archive))} before anything is deleted; "
                "`lastgood undo` (or the button after) brings them back byte for byte.")
    st.markdown(f"**Reason** (recorded in the journal) · operator {code(operator())}:")
    st.text(_reason())
    ok, cancel = st.columns(2)
    if ok.button("Confirm and prune", type="primary", key="sg_confirm_apply"):
        _apply(ref, plan)
        st.rerun()
    if cancel.button("Cancel", key="sg_confirm_cancel"):
        st.session_state.pop(CONFIRM_KEY, None)
        st.rerun()


def _apply(ref: StoreRef, plan: Any) -> None:
    st.session_state.pop(CONFIRM_KEY, None)
    store = _fresh_store(ref)
    try:
        result = retention.apply_prune(stores.catalog(ref.index_path), store, plan, reason=_reason(),
                                       operator=operator())
        st.session_state[RESULT_KEY] = result.to_dict()
        _forget_plan()
        st.session_state.pop(REASON_KEY, None)
    except LastgoodError as exc:
        st.session_state[ERROR_KEY] = f"Nothing was pruned: {redact_text(str(exc))}"
    finally:
        store.reader.close()
        _after_write()


def _after_write() -> None:
    _report.clear()
    stores.clear_query_caches()
    stores.cached_store.clear()


def render_result(ref: StoreRef) -> None:
    """The last prune (or its undo) this session applied, with the undo of a prune."""
    result = st.session_state.get(RESULT_KEY)
    if not result:
        return
    if result["action"] == "undo":
        st.success(f"**Undo** {code(short_id(result['action_id']))}: {result['checkpoints']:,} checkpoints restored "
                   f"from the archive (prune {code(short_id(result['undo_of']))}).", icon=":material/undo:")
        return
    if not result["action_id"]:
        st.info("Nothing to forget: nothing was written.")
        return
    st.success(f"**Prune** {code(short_id(result['action_id']))}: {result['checkpoints']:,} checkpoints "
               f"({short_bytes(result['bytes'])}) archived to {code(redact_text(str(result['archive'])))} and deleted.",
               icon=":material/check_circle:")
    for note in (result.get("space") or {}).get("notes") or []:
        st.caption(md_escape(str(note)))
    for skip in (result.get("skipped") or [])[:10]:
        st.caption(md_escape(redact_text(f"skipped {skip['checkpoint_id']} of {skip['run_id']}: {skip['reason']}")))
    _undo_form(ref, result)


def _undo_form(ref: StoreRef, result: dict[str, Any]) -> None:
    left, right = st.columns([3, 1])
    left.text_input("Reason for the undo", key=UNDO_REASON_KEY)
    reason = str(st.session_state.get(UNDO_REASON_KEY) or "").strip()
    blocked = write_blocked(ref) or (None if reason else "Give a reason first.")
    if right.button("Undo this prune", icon=":material/undo:", disabled=blocked is not None, help=blocked):
        _undo(ref, result["action_id"], reason)
        st.rerun()


def _undo(ref: StoreRef, action_id: str, reason: str) -> None:
    store = _fresh_store(ref)
    index = stores.catalog(ref.index_path)
    try:
        plan = retention.plan_undo_prune(index, store, action_id)
        done = retention.apply_undo_prune(index, store, plan, reason=reason, operator=operator())
        st.session_state[RESULT_KEY] = done.to_dict()
        st.session_state.pop(UNDO_REASON_KEY, None)
    except LastgoodError as exc:
        st.session_state[ERROR_KEY] = f"Nothing was restored: {redact_text(str(exc))}"
    finally:
        store.reader.close()
        _after_write()
