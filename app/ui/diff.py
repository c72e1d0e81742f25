"""Streamlit glue for the Diff page: selection (with URL query params), the cached diff,
the conversation view, the tree of other changes, the field-over-time chart, export.

Everything shown is redacted: diffs by ``diff_states`` (redact=True), states by
``lastgood.investigate.show.load_state_safely``, tracked values when they are stored.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from lastgood.investigate import history as inv
from lastgood.investigate.diff import message_line, preview
from lastgood.errors import LastgoodError
from lastgood.redact import redact_text
from lastgood.cli.output import dumps
from lastgood.investigate.show import load_state_safely
from lastgood.investigate.stateview import find_conversation, truncate
from lastgood.readers.registry import display_url
from lastgood.ui import (DAMAGED, STORE_KEY, StoreRef, _candidate_urls, _catalog, _ensure_indexed, _open_store,
                         code, guarded, md_escape, runs_frame, stop, utc)

MAX_CHOICES = 500
MAX_MESSAGE_CHANGES = 200
MAX_TREE_ROWS = 2000
# session-state keys
RUN_A, CKPT_A, RUN_B, CKPT_B = "diff_run_a", "diff_ckpt_a", "diff_run_b", "diff_ckpt_b"
PREV_B, PARAMS_TAKEN, ONLY_CHANGES, TRACK_PATH = "diff_prev_b", "diff_params_taken", "diff_only", "diff_track"
PIN_A, STORE_B = "diff_pin_a", "diff_store_b"
TRACK_DEFAULT = "diff_track_default"  # the path last offered by default (a typed one is kept)
SAME_STORE = ""  # STORE_B's value when B is in A's store
REMEMBERED = (RUN_A, CKPT_A, RUN_B, CKPT_B, STORE_B)  # kept when the operator visits another page
SYNC = "_sync_run"  # suffix: a checkpoint chosen by code (link, parent) selects its run too
MARKS = {"add": ("added", "green"), "remove": ("removed", "red"), "edit": ("edited", "orange"),
         "move": ("moved", "blue")}


@dataclass(frozen=True)
class DiffView:
    """One computed diff with what the page shows around it (all redacted)."""

    result: dict[str, Any]
    state_a: Any
    state_b: Any
    error_a: str | None
    error_b: str | None
    messages_path: list[str]
    statuses: tuple[str | None, str | None] = (None, None)


# ---- selection ---------------------------------------------------------------------------


def take_query_params() -> None:
    """On a page's first run, A, B and the store from the URL (a shared link) become the selection."""
    if st.session_state.get(PARAMS_TAKEN):
        return
    st.session_state[PARAMS_TAKEN] = True
    params = st.query_params
    if params.get("store"):
        st.session_state[STORE_KEY] = params["store"]
    st.session_state[STORE_B] = params.get("store_b") or SAME_STORE
    if params.get("b"):
        _queue(CKPT_B, params["b"])
    if params.get("a"):
        _queue(CKPT_A, params["a"])
        st.session_state[PIN_A] = True  # "compare with…": A stays while B is picked


def _queue(ckpt_key: str, checkpoint: str) -> None:
    """Select ``checkpoint`` (its run is selected with it when the side is drawn)."""
    st.session_state[ckpt_key] = checkpoint
    st.session_state[ckpt_key + SYNC] = True


def write_query_params(ref: StoreRef, a: str | None, b: str | None, ref_b: StoreRef | None = None) -> None:
    """The selection in the URL, so a copied link opens this same diff (``store_b`` only when B
    is in another store)."""
    wanted = {"store": ref.url, "a": a or "", "b": b or ""}
    if ref_b is not None and ref_b.url != ref.url:
        wanted["store_b"] = ref_b.url
    elif "store_b" in st.query_params:
        del st.query_params["store_b"]
    if any(st.query_params.get(k) != v for k, v in wanted.items()):
        st.query_params.update(wanted)


def pick_store_b(ref: StoreRef) -> StoreRef:
    """The store B is picked from: A's (default) or another one of the dashboard's stores
    (a native run against a LangGraph thread, say)."""
    others = [u for u in _candidate_urls(_catalog(ref.index_path)) if u != ref.url]
    options = [SAME_STORE, *others]
    if st.session_state.get(STORE_B) not in options:
        st.session_state[STORE_B] = SAME_STORE
    url = st.selectbox("Store (B)", options, key=STORE_B, format_func=lambda u: display_url(u) if u else
                       f"same as A ({display_url(ref.url)})", help="Compare with a checkpoint of another store")
    if url == SAME_STORE:
        return ref
    ref_b = _ensure_indexed(_catalog(ref.index_path), ref.index_path, url, ref.allow_write)
    if ref_b is None:
        st.error(f"Store {code(display_url(url))} cannot be opened: pick another store for B.")
        stop()
    return ref_b


def runs_of(ref: StoreRef) -> list[str]:
    """The store's runs, most recent first (as the Timeline lists them): the default is the latest."""
    runs = runs_frame(ref)
    return [] if runs.empty else list(dict.fromkeys(runs["run_id"]))


@st.cache_data(ttl=60, max_entries=64, show_spinner=False)
def _run_choices(index_path: str, store_id: int, run_id: str) -> dict[str, tuple[str, str]]:
    """The run's newest checkpoints, newest first: id -> (label, status)."""
    records = inv.run_checkpoints(_catalog(index_path), store_id, run_id)[-MAX_CHOICES:]
    return {r.checkpoint_id: (f"step {r.step} · {utc(r.created_at)} · {r.status} · {r.checkpoint_id[:13]}…",
                              r.status) for r in reversed(records)}


def _newest_with_state(choices: dict[str, tuple[str, str]]) -> str | None:
    """The default of a side: the newest checkpoint with a state to compare (not incomplete or
    corrupt, whose state cannot be shown), else the newest."""
    usable = (cid for cid, (_, status) in choices.items() if status not in DAMAGED)
    return next(usable, next(iter(choices), None))


@st.cache_data(ttl=60, max_entries=64, show_spinner=False)
def _record(index_path: str, store_id: int, ref: str) -> dict[str, Any]:
    record = inv.resolve_ref(_catalog(index_path), store_id, ref)
    parent = inv.parent_of(_catalog(index_path), store_id, record)
    return {"checkpoint_id": record.checkpoint_id, "run_id": record.run_id, "step": record.step,
            "created_at": record.created_at, "status": record.status,
            "parent_id": parent.checkpoint_id if parent else None}


def pick_checkpoints(ref: StoreRef, runs: list[str], ref_b: StoreRef | None = None,
                     runs_b: list[str] | None = None) -> tuple[str | None, str | None]:
    """Run and checkpoint for B (default: the newest checkpoint with a state of the most recent run;
    from ``ref_b`` when given)
    and A (default: B's parent — when B is in A's store — re-chosen whenever B changes until A is
    picked by hand or named by a link)."""
    ref_b, runs_b = ref_b or ref, runs_b if runs_b is not None else runs
    with guarded():
        b = _pick_side(ref_b, runs_b, "B", RUN_B, CKPT_B)
        if b and st.session_state.get(PREV_B) != (ref_b.url, b):
            st.session_state[PREV_B] = (ref_b.url, b)
            parent = _record(ref_b.index_path, ref_b.store_id, b)["parent_id"] if ref_b == ref else None
            if not st.session_state.get(PIN_A) and ref_b == ref:
                _queue(CKPT_A, parent or b)
        a = _pick_side(ref, runs, "A", RUN_A, CKPT_A)
    return a, b


def _maybe_record(ref: StoreRef, checkpoint: str) -> dict[str, Any] | None:
    try:
        return _record(ref.index_path, ref.store_id, checkpoint)
    except LastgoodError:  # e.g. a checkpoint of the store picked before
        return None


def _pick_side(ref: StoreRef, runs: list[str], side: str, run_key: str, ckpt_key: str) -> str | None:
    wanted = st.session_state.get(ckpt_key)
    if wanted and st.session_state.pop(ckpt_key + SYNC, False):
        try:
            record = _record(ref.index_path, ref.store_id, wanted)
        except LastgoodError as exc:  # a bad link: one error line, and the pickers to choose another
            st.error(f"{side}: {md_escape(redact_text(str(exc)))}")
            st.session_state[ckpt_key] = wanted = None
        else:
            st.session_state[run_key] = record["run_id"]
            st.session_state[ckpt_key] = wanted = record["checkpoint_id"]
    if st.session_state.get(run_key) not in runs:
        st.session_state[run_key] = runs[0]
    left, right = st.columns([2, 5])
    run = left.selectbox(f"Run ({side})", runs, key=run_key)
    listed = _run_choices(ref.index_path, ref.store_id, run)
    choices = {cid: label for cid, (label, _) in listed.items()}
    record = _maybe_record(ref, wanted) if wanted and wanted not in choices else None
    if record and record["run_id"] == run:  # older than the newest MAX_CHOICES
        choices[wanted] = f"step {record['step']} · {wanted[:13]}…"
    if st.session_state.get(ckpt_key) not in choices:
        st.session_state[ckpt_key] = _newest_with_state(listed)
    pin = (lambda: st.session_state.update({PIN_A: True})) if side == "A" else None
    return right.selectbox(side, list(choices), format_func=choices.get, key=ckpt_key, on_change=pin)


# ---- the diff ---------------------------------------------------------------------------


@st.cache_data(ttl=60, max_entries=16, show_spinner="Decoding and comparing…")
def _diff_view(index_path: str, url: str, store_id: int, a: str, b: str, url_b: str, store_id_b: int) -> DiffView:
    catalog, store, store_b = _catalog(index_path), _open_store(index_path, url), _open_store(index_path, url_b)
    result, label_a, label_b = inv.diff_checkpoints(catalog, store, a, b, store_b)
    record_a = inv.resolve_ref(catalog, store_id, a)
    record_b = inv.resolve_ref(catalog, store_id_b, b)
    state_a, error_a = load_state_safely(store, record_a)
    state_b, error_b = load_state_safely(store_b, record_b)
    path, _ = find_conversation(state_b)
    if not path:
        path, _ = find_conversation(state_a)
    return DiffView(result.to_dict(label_a, label_b), state_a, state_b, error_a, error_b, path,
                    (record_a.status, record_b.status))


def diff_view(ref: StoreRef, a: str, b: str, ref_b: StoreRef | None = None) -> DiffView:
    ref_b = ref_b or ref
    with guarded():
        return _diff_view(ref.index_path, ref.url, ref.store_id, a, b, ref_b.url, ref_b.store_id)


def render_summary(view: DiffView) -> None:
    s = view.result["summary"]
    cols = st.columns(4)
    for col, (label, key) in zip(cols, [("Added", "added"), ("Removed", "removed"), ("Changed", "changed"),
                                        ("Moved", "moved")]):
        col.metric(label, f"{s.get(key, 0):,}")
    if not view.result["changes"]:
        st.success("No changes: A and B hold the same state.")


def render_recovery_links(ref: StoreRef, view: DiffView, ref_b: StoreRef | None = None) -> None:
    """Restore / rollback / quarantine A or B: links to the Recovery page's dry-run preview
    (B only when it is in A's store: the Recovery page acts on the selected store)."""
    from lastgood.ui.recovery import recovery_links  # lazy, as in the Timeline detail

    sides = ("a", "b") if ref_b is None or ref_b.url == ref.url else ("a",)
    with st.expander("Act on A or B (restore, rollback, quarantine)"):
        for side, status in zip(sides, view.statuses):
            checkpoint = {**view.result[side], "status": status}
            st.markdown(f"**{side.upper()}** {code(checkpoint['checkpoint_id'])} in run {code(checkpoint['run_id'])}")
            recovery_links(ref, checkpoint)


def message_changes(view: DiffView) -> list[dict[str, Any]]:
    """One row per changed chat message: {mark, index, message, fields} in B's order."""
    if not view.messages_path:
        return []
    prefix = "/" + "/".join(view.messages_path) + "/"
    edits: dict[int, list[str]] = {}
    rows: list[dict[str, Any]] = []
    for c in view.result["changes"]:
        if not c["path"].startswith(prefix):
            continue
        index, _, rest = c["path"][len(prefix):].partition("/")
        if not index.isdigit():
            continue
        if rest:
            edits.setdefault(int(index), []).append(rest)
        elif c["op"] in ("add", "remove", "move"):
            value = c["new"] if c["op"] == "add" else c["old"]
            if c["op"] == "move":
                value = _message_at(view.state_b, view.messages_path, int(index))
            rows.append({"mark": c["op"], "index": int(index), "message": value,
                         "fields": [f"from {c['from']}"] if c["op"] == "move" else []})
    for index, fields in edits.items():
        rows.append({"mark": "edit", "index": index, "fields": list(dict.fromkeys(fields)),
                     "message": _message_at(view.state_b, view.messages_path, index)})
    return sorted(rows, key=lambda r: (r["index"], r["mark"] != "remove"))


def _message_at(state: Any, path: list[str], index: int) -> Any:
    try:
        for key in path:
            state = state[key]
        return state[index]
    except (KeyError, IndexError, TypeError):
        return None


def render_conversation_changes(view: DiffView) -> None:
    rows = message_changes(view)
    if not view.messages_path:
        return
    st.markdown(f"**Conversation** · {code('/'.join(view.messages_path))} · {len(rows)} message(s) changed")
    prefix = "/" + "/".join(view.messages_path)
    whole = next((c for c in view.result["changes"]  # the list, or a dict above it, is on one side only
                  if c["path"] == prefix or prefix.startswith(c["path"] + "/")), None)
    if whole is not None and not rows:  # the list itself appeared, went or changed type
        what = {"add": "only B has it", "remove": "only A has it"}.get(whole["op"], "it changed as a whole")
        st.caption(f"The conversation is not in both states ({what}): see {code(whole['path'] or '/')} under "
                   "Other changes.")
        return
    if not rows:
        st.caption("No message was added, removed, edited or moved.")
        return
    box = st.container(height=420) if len(rows) > 6 else st.container()
    for row in rows[:MAX_MESSAGE_CHANGES]:
        label, color = MARKS[row["mark"]]
        message = row["message"] if isinstance(row["message"], dict) else {}
        role = str(message.get("role") or message.get("type") or "assistant")
        with box.chat_message(role if role in ("user", "assistant", "human", "ai") else "assistant"):
            st.badge(f"{label} · #{row['index']}", color=color)
            st.markdown(md_escape(message_line(message) or preview(message)))
            if row["fields"]:
                st.caption("changed: " + ", ".join(code(f) for f in row["fields"][:10]))
    if len(rows) > MAX_MESSAGE_CHANGES:
        st.caption(f"{len(rows) - MAX_MESSAGE_CHANGES:,} more changed messages: export the JSON for all.")


def render_change_tree(view: DiffView) -> None:
    """The other changes, one collapsible group per top-level key."""
    prefix = "/" + "/".join(view.messages_path) if view.messages_path else None
    groups: dict[str, list[dict[str, Any]]] = {}
    for c in view.result["changes"]:
        if prefix and c["path"].startswith(prefix + "/"):  # shown message by message above
            continue
        top = "/" + c["path"].split("/")[1] if c["path"] else "(root)"
        groups.setdefault(top, []).append(c)
    if not groups:
        return
    st.markdown("**Other changes**")
    for top, changes in sorted(groups.items()):
        with st.expander(f"{code(top)} · {len(changes)} change(s)", expanded=len(groups) <= 3):
            frame = pd.DataFrame([{"op": c["op"], "path": c["path"], "old": preview(c["old"]),
                                   "new": preview(c["new"]), "delta": c.get("delta")}
                                  for c in changes[:MAX_TREE_ROWS]])
            st.dataframe(frame, hide_index=True, width="stretch")


def render_side_by_side(view: DiffView) -> None:
    left, right = st.columns(2)
    for col, side, state, error in ((left, "A", view.state_a, view.error_a), (right, "B", view.state_b,
                                                                               view.error_b)):
        with col:
            st.markdown(f"**{side}** {code(view.result[side.lower()]['checkpoint_id'])}")
            if error:
                st.warning(f"The state cannot be shown: {md_escape(error)}")
            else:
                st.json(dumps(truncate(state)), expanded=1)


def export_button(view: DiffView) -> None:
    a, b = view.result["a"]["checkpoint_id"], view.result["b"]["checkpoint_id"]
    st.download_button("Export JSON", dumps(view.result), file_name=f"diff-{a[:13]}-{b[:13]}.json",
                       mime="application/json", icon=":material/download:")


# ---- a field over time -------------------------------------------------------------------


@st.cache_data(ttl=60, max_entries=32, show_spinner="Reading the field at every checkpoint…")
def _tracked(index_path: str, url: str, store_id: int, run_id: str, path: str) -> pd.DataFrame:
    rows = inv.track_field(_catalog(index_path), _open_store(index_path, url), run_id, path)
    return pd.DataFrame(rows)


def render_field_over_time(ref: StoreRef, view: DiffView) -> None:
    run_id = view.result["b"]["run_id"]
    default = "/" + "/".join(view.messages_path) if view.messages_path else "/"
    previous = st.session_state.get(TRACK_DEFAULT)
    if TRACK_PATH not in st.session_state or st.session_state[TRACK_PATH] == previous:
        st.session_state[TRACK_PATH] = default  # follows the conversation until a path is typed
    st.session_state[TRACK_DEFAULT] = default
    path = st.text_input("Field over time (JSON Pointer; lists and dicts by length)", key=TRACK_PATH).strip()
    if not path:
        return
    with guarded():
        frame = _tracked(ref.index_path, ref.url, ref.store_id, run_id, inv.normalize_track_path(path))
    if frame.empty or frame["number"].isna().all():
        st.caption(f"{code(path)} has no numeric value (or length) in run {code(run_id)}.")
        return
    st.plotly_chart(_field_figure(frame, path, view), width="stretch", key="diff_track_chart")


def _field_figure(frame: pd.DataFrame, path: str, view: DiffView) -> go.Figure:
    x = (frame["step"] if frame["step"].notna().all() else frame.index.to_series()).tolist()
    hover = [f"{c[:13]}… · {preview(v) if v is not None else n}" for c, v, n in
             zip(frame["checkpoint_id"], frame["value"], frame["number"])]
    fig = go.Figure(go.Scatter(x=x, y=frame["number"].tolist(), mode="lines+markers", name=path, hovertext=hover,
                               hoverinfo="text+x+y"))
    for side in ("a", "b"):
        label = view.result[side]
        same_run = (label["store"], label["run_id"]) == (view.result["b"]["store"], view.result["b"]["run_id"])
        if same_run and label.get("step") is not None:
            fig.add_vline(x=label["step"], line_dash="dot", annotation_text=side.upper())
    fig.update_layout(height=280, margin=dict(l=10, r=10, t=30, b=10), xaxis_title="step",
                      yaxis_title=path, title=f"{path} in run {view.result['b']['run_id']}")
    return fig


# ---- first divergence of two runs ----------------------------------------------------------


@st.cache_data(ttl=60, max_entries=16, show_spinner="Comparing the runs step by step…")
def _divergence(index_path: str, url: str, run_a: str, run_b: str) -> dict[str, Any]:
    return inv.diverge(_catalog(index_path), _open_store(index_path, url), run_a, run_b)


def render_divergence(ref: StoreRef, view: DiffView, ref_b: StoreRef | None = None) -> None:
    """When A and B are in different runs of one store: the first step where the two runs' states differ."""
    run_a, run_b = view.result["a"]["run_id"], view.result["b"]["run_id"]
    if run_a == run_b or (ref_b is not None and ref_b.url != ref.url):
        return
    if not st.button(f"Find where runs {code(run_a)} and {code(run_b)} first diverge", key="diff_diverge"):
        return
    with guarded():
        found = _divergence(ref.index_path, ref.url, run_a, run_b)
    first = found["first_divergence"]
    if first is None:
        st.info(f"No divergence: the {found['common_steps']} steps the runs share hold the same states "
                f"({found['states_decoded']} states decoded).")
        return
    s = first["summary"]
    st.warning(f"First divergence at step {first['step']}: {s['added']} added, {s['removed']} removed, "
               f"{s['changed']} changed ({found['states_decoded']} states decoded).")
    st.button("Show that diff", key="diff_show_divergence", on_click=_select_pair,
              args=(first["a"]["checkpoint_id"], first["b"]["checkpoint_id"]))


def _select_pair(a: str, b: str) -> None:
    _queue(CKPT_B, b)
    _queue(CKPT_A, a)
    st.session_state[PIN_A] = True  # keep this A (not B's parent)


# ---- what each step changed ------------------------------------------------------------------


@st.cache_data(ttl=60, max_entries=16, show_spinner="Comparing every checkpoint with its parent…")
def _steps(index_path: str, url: str, store_id: int, run_id: str) -> pd.DataFrame:
    catalog, store = _catalog(index_path), _open_store(index_path, url)
    inv.record_step_changes(catalog, store, run_id=run_id)  # computed once, kept in the index
    return pd.DataFrame(inv.step_changes(catalog, store_id, run_id))


def render_step_changes(ref: StoreRef, view: DiffView) -> None:
    run_id = view.result["b"]["run_id"]
    if not st.toggle(f"What each checkpoint of run {code(run_id)} changed", key="diff_steps"):
        return
    with guarded():
        frame = _steps(ref.index_path, ref.url, ref.store_id, run_id)
    if frame.empty:
        st.caption("No checkpoints.")
        return
    frame["paths"] = frame["paths"].map(lambda p: ", ".join(p) if isinstance(p, (list, tuple)) else "")
    st.dataframe(frame[["step", "checkpoint_id", "added", "removed", "changed", "moved", "paths", "error"]],
                 hide_index=True, width="stretch")
