"""The Diff page's views along a run's checkpoints: a field over time (in B's run), where two runs
first diverge (A's and B's, in one store), and what each checkpoint changed from its parent.

Backed by lastgood.investigate.history; every value shown is redacted when it is stored.
"""

from __future__ import annotations

from typing import Any

import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from lastgood.investigate import history as inv
from lastgood.investigate.diff import preview
from lastgood.ui import stores
from lastgood.ui.diff import DiffView, select_pair
from lastgood.ui.escape import code
from lastgood.ui.pagerun import guarded
from lastgood.ui.stores import StoreRef
from lastgood.ui.tables import export_buttons

# session-state keys
TRACK_PATH = "diff_track"  # the field-over-time path box
TRACK_DEFAULT = "diff_track_default"  # the path last offered by default (a typed one is kept)
TRACK_CHART = "diff_track_chart"
DIVERGE = "diff_diverge"  # the Find where runs … first diverge button
SHOW_DIVERGENCE = "diff_show_divergence"  # its Show that diff button
STEPS = "diff_steps"  # the What each checkpoint … changed toggle


# ---- a field over time -------------------------------------------------------------------


@st.cache_data(ttl=60, max_entries=32, show_spinner="Reading the field at every checkpoint…")
def _tracked(index_path: str, url: str, store_id: int, run_id: str, path: str) -> pd.DataFrame:
    rows = inv.track_field(stores.catalog(index_path), stores.cached_store(index_path, url), run_id, path)
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
    st.plotly_chart(_field_figure(frame, path, view), width="stretch", key=TRACK_CHART)


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
    return inv.diverge(stores.catalog(index_path), stores.cached_store(index_path, url), run_a, run_b)


def render_divergence(ref: StoreRef, view: DiffView, ref_b: StoreRef | None = None) -> None:
    """When A and B are in different runs of one store: the first step where the two runs' states differ."""
    run_a, run_b = view.result["a"]["run_id"], view.result["b"]["run_id"]
    if run_a == run_b or (ref_b is not None and ref_b.url != ref.url):
        return
    if not st.button(f"Find where runs {code(run_a)} and {code(run_b)} first diverge", key=DIVERGE):
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
    st.button("Show that diff", key=SHOW_DIVERGENCE, on_click=select_pair,
              args=(first["a"]["checkpoint_id"], first["b"]["checkpoint_id"]))


# ---- what each step changed ------------------------------------------------------------------


@st.cache_data(ttl=60, max_entries=16, show_spinner="Comparing every checkpoint with its parent…")
def _steps(index_path: str, url: str, store_id: int, run_id: str) -> pd.DataFrame:
    index, store = stores.catalog(index_path), stores.cached_store(index_path, url)
    inv.record_step_changes(index, store, run_id=run_id)  # computed once, kept in the index
    return pd.DataFrame(inv.step_changes(index, store_id, run_id))


def render_step_changes(ref: StoreRef, view: DiffView) -> None:
    run_id = view.result["b"]["run_id"]
    if not st.toggle(f"What each checkpoint of run {code(run_id)} changed", key=STEPS):
        return
    with guarded():
        frame = _steps(ref.index_path, ref.url, ref.store_id, run_id)
    if frame.empty:
        st.caption("No checkpoints.")
        return
    frame["paths"] = frame["paths"].map(lambda p: ", ".join(p) if isinstance(p, (list, tuple)) else "")
    st.dataframe(frame[["step", "checkpoint_id", "added", "removed", "changed", "moved", "paths", "error"]],
                 hide_index=True, width="stretch")
    export_buttons(frame[["step", "checkpoint_id", "added", "removed", "changed", "moved", "paths", "error"]],
                   "step-changes")
