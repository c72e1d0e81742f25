"""Diff: what changed between two checkpoints (default: the selected one vs its parent)."""

import streamlit as st

from lastgood import ui
from lastgood.ui import diff as ui_diff

st.title("Diff")
ui.remember(*ui_diff.REMEMBERED)  # back from another page: the same two checkpoints
ui_diff.take_query_params()  # a shared link carries store, A, B (and store_b)
ref = ui.store_picker()
if ref is None:
    ui.stop()
runs = ui_diff.runs_of(ref)  # most recent first
if not runs:
    st.info("No checkpoints in this store yet: nothing to compare.")
    ui.stop()

ref_b = ui_diff.pick_store_b(ref)  # B may come from another store (?store_b=…)
runs_b = ui_diff.runs_of(ref_b)
if not runs_b:
    st.info(f"No checkpoints in store {ui.code(ref_b.display)} yet: pick another store for B.")
    ui.stop()
a, b = ui_diff.pick_checkpoints(ref, runs, ref_b, runs_b)
ui_diff.write_query_params(ref, a, b, ref_b)
if not a or not b:
    st.info("Pick two checkpoints to compare.")
    ui.stop()

view = ui_diff.diff_view(ref, a, b, ref_b)
ui_diff.render_summary(view)
ui_diff.render_recovery_links(ref, view, ref_b)
ui_diff.render_divergence(ref, view, ref_b)
only_changes = st.toggle("Only changes", value=True, key=ui_diff.ONLY_CHANGES,
                         help="Off: show both states side by side as well")
ui_diff.render_conversation_changes(view)
ui_diff.render_change_tree(view)
if not only_changes:
    ui_diff.render_side_by_side(view)
ui_diff.export_button(view)
st.divider()
ui_diff.render_field_over_time(ref_b, view)  # B's run, in B's store
ui_diff.render_step_changes(ref_b, view)
