"""Timeline: runs as lanes over time; find a problem, a run or a checkpoint; pick one to inspect."""

import streamlit as st

from lastgood import ui
from lastgood.ui import search, timeline
from lastgood.ui.checkpoint import render_checkpoint

st.title("Timeline")
ui.remember(*timeline.REMEMBERED)  # back from another page: as left
timeline.take_link()  # a link's whole view (?store=…&run=…&checkpoint=…&axis=…&tab=…): every view is a link
ref = ui.store_picker()
if ref is None:
    ui.stop()
finder, controls, navigation, chart = st.container(), st.container(), st.container(), st.empty()
timeline.draw_placeholder(chart)  # the session's first Timeline: Plotly's script loads meanwhile


def stop(message: str) -> None:
    chart.empty()
    st.info(message)
    ui.stop()


with finder:
    searched = search.search_box(ref, timeline.open_hit)  # run id, checkpoint id/prefix, agent, key=value
    search.render_waiting(search.waiting(ref), timeline.open_hit)  # runs waiting on a human
with controls:
    runs = ui.runs_frame(ref)
    if runs.empty:
        stop("No checkpoints in this store yet: nothing to draw. Use **Re-index** in the sidebar "
             "once agents have saved some.")
    scope = timeline.pick_scope(runs)  # agent, run (or lanes for the most recent), status, time range, axis
    data = timeline.lanes_data(ref, scope)
    if data.points.empty:
        stop("No checkpoints match this selection.")
    timeline.render_counts(scope, data)
found = timeline.problems(ref, scope)  # damaged checkpoints, error and interrupt events, in time order
selection = timeline.take_click(data)  # a link's, hit's or problem's checkpoint; the chart's last click
with navigation:
    timeline.problem_nav(found, selection)
timeline.draw_chart(chart, data, scope, selection)
target = timeline.pick_checkpoint(selection)
timeline.write_link(ref, scope, selection, target, searched)  # the address bar follows every selection
timeline.render_metrics(ref, scope, data, selection)  # training runs: loss, lr… with the checkpoints
if target:
    st.divider()
    render_checkpoint(ref, target)
else:
    st.caption("Select a checkpoint to see its metadata, findings, events, pending writes and state.")
