"""Timeline: the checkpoints of a run (or of all runs of an agent) over time; pick one to inspect."""

import streamlit as st

from lastgood import ui
from lastgood.ui import integrity as ui_integrity

st.title("Timeline")
ui.remember("tl_agent", "tl_run", "tl_ckpt", "tl_ref", "tl_by_status")  # back from another page: as left
ui_integrity.apply_timeline_link()  # ?store=…&run=…&checkpoint=… (links from the Integrity page)
ref = ui.store_picker()
if ref is None:
    ui.stop()
controls, chart = st.container(), st.empty()
if not st.session_state.get("tl_chart_drawn"):  # the session's first Timeline: Plotly's script loads meanwhile
    chart.plotly_chart(ui.timeline_placeholder())


def stop(message: str) -> None:
    chart.empty()
    st.info(message)
    ui.stop()


with controls:
    runs = ui.runs_frame(ref)
    if runs.empty:
        stop("No checkpoints in this store yet: nothing to draw. Use **Re-index** in the sidebar "
             "once agents have saved some.")

    focus = ui.take_focus_run()
    if focus:
        st.session_state["tl_agent"] = ui.ALL_AGENTS
        st.session_state["tl_run"] = focus

    agents = [ui.ALL_AGENTS, *sorted(runs["agent"].dropna().unique())]
    pick_agent, pick_run, pick_rows, pick_color = st.columns([2, 4, 2, 2], vertical_alignment="bottom")
    agent = pick_agent.selectbox("Agent", agents, key="tl_agent")
    shown = runs if agent == ui.ALL_AGENTS else runs[runs["agent"] == agent]
    labels = ui.run_labels(shown)
    if st.session_state.get("tl_run") not in labels:
        st.session_state["tl_run"] = ui.ALL_RUNS if agent != ui.ALL_AGENTS else next(iter(shown["run_id"]))
    run = pick_run.selectbox("Run", list(labels), format_func=labels.get, key="tl_run")
    single = run != ui.ALL_RUNS
    y_axis = pick_rows.segmented_control("Rows", ["run", "step"], default="step" if single else "run",
                                         required=True, key=f"tl_rows_{single}")
    by_status = pick_color.toggle("Color by status", key="tl_by_status",
                                  help="Color points by status instead of trigger; damaged ones are X marks")

    data = ui.timeline_data(ref, run if single else None, None if agent == ui.ALL_AGENTS else agent)
    if data.points.empty:
        stop("No checkpoints match this selection.")
    if data.aggregated:
        st.info(f"{data.total:,} checkpoints: healthy ones are aggregated into time buckets (hover a point for "
                "its count); damaged ones are shown one by one. Pick a single run to see every checkpoint.")
    else:
        st.caption(f"{data.total:,} checkpoint(s), {len(data.events):,} event(s). Click a point to inspect it; "
                   "drag to zoom, double-click to reset.")
choices = ui.checkpoint_choices(data.points)
clicked, bucket_clicked = ui.selected_checkpoint(st.session_state.get("tl_chart"))  # read before drawing
if clicked and clicked != st.session_state.get("tl_clicked"):
    st.session_state["tl_clicked"] = clicked
    if clicked in choices:
        st.session_state.update(tl_ckpt=clicked, tl_ref="")
    else:
        st.session_state["tl_ref"] = clicked
if st.session_state.get("tl_ckpt") not in choices:
    st.session_state["tl_ckpt"] = None
highlight = (st.session_state.get("tl_ref") or "").strip() or st.session_state["tl_ckpt"]
chart.plotly_chart(ui.timeline_figure(data, by_status, y_axis, highlight), on_select="rerun",
                   selection_mode="points", key="tl_chart")
st.session_state["tl_chart_drawn"] = True
if bucket_clicked and not clicked:
    st.info("That point stands for many checkpoints: pick a single run to inspect them one by one.")

pick, typed = st.columns([3, 2])
chosen = pick.selectbox("Checkpoint", list(choices), format_func=choices.get, index=None,
                        placeholder="Click a point above, or pick one here", key="tl_ckpt",
                        on_change=lambda: st.session_state.update(tl_ref=""))
prefix = typed.text_input("…or a checkpoint id / unique prefix", key="tl_ref").strip()
target = prefix or chosen
if target:
    st.divider()
    ui.render_checkpoint(ref, target)
else:
    st.caption("Select a checkpoint to see its metadata, findings, events, pending writes and state.")
