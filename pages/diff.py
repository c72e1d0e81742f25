"""Diff: what changed between two checkpoints (default: the newest one vs its parent)."""

import streamlit as st

from lastgood import ui
from lastgood.ui import diff as ui_diff
from lastgood.ui import history

st.title("Diff")
ui.remember(*ui_diff.REMEMBERED)  # back from another page: the same two checkpoints
ui_diff.take_link()  # a shared link carries store, A, B (and store_b)
ref = ui.store_picker()
if ref is None:
    ui.stop()
row_a, row_b = st.columns([3, 2, 5]), st.columns([3, 2, 5])  # A's pickers above B's: store, run, checkpoint
ref_b = ui_diff.pick_stores(ref, row_a[0], row_b[0])  # B may come from another store (?store_b=…)
runs, runs_b = ui_diff.runs_of(ref), ui_diff.runs_of(ref_b)  # most recent first
if not runs or not runs_b:
    st.info(f"No checkpoints in store {ui.code((ref if not runs else ref_b).display)} yet: nothing to compare.")
    ui.stop()
a, b = ui_diff.pick_checkpoints(ref, runs, ref_b, runs_b, row_a[1:], row_b[1:])
refused = ui_diff.render_refused(ref, ref_b)  # a link's id that matches nothing: never another checkpoint
ui_diff.write_link(ref, a, b, ref_b)
if refused or not a or not b:
    if not refused:
        st.info("Pick two checkpoints to compare.")
    ui.stop()

view = ui_diff.diff_view(ref, a, b, ref_b)
ui_diff.render_summary(view)
ui_diff.render_recovery_links(ref, view, ref_b)
history.render_divergence(ref, view, ref_b)
only_changes = st.toggle("Only changes", value=True, key=ui_diff.ONLY_CHANGES,
                         help="Off: both states as one tree, key by key, as well")
ui_diff.render_conversation_changes(view)
ui_diff.render_change_tree(view)
if not only_changes:
    ui_diff.render_tree(view)
ui_diff.render_tensor_diff(ref, view, ref_b)  # two training checkpoints: tensor by tensor
ui_diff.export_button(view)
st.divider()
history.render_field_over_time(ref_b, view)  # B's run, in B's store
history.render_step_changes(ref_b, view)
