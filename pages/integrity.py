"""Integrity: every finding the index holds, the health and last good of each run, re-verification."""

import streamlit as st

from lastgood import ui
from lastgood.ui import integrity

st.title("Integrity")
ref = ui.store_picker()
if ref is None:
    ui.stop()
st.caption(f"Store {ui.code(ref.display)} — findings from listing, structure, lineage, content and data checks; "
           "the same set `lastgood verify` reports and `ls` statuses reflect.")

integrity.ensure_data_check(ref)  # checkpoints never read get a full read in the background
integrity.render_check_controls(ref)
data = integrity.integrity_data(ref)
integrity.render_summary(data)

st.subheader("Runs: health and last good")
integrity.render_runs(ref, data.runs)

left, right = st.columns([1, 3])
with left:
    st.subheader("By check")
    st.dataframe(integrity.counts_by_check(data.findings), hide_index=True, width="stretch")
with right:
    st.subheader("Findings")
    integrity.render_findings(ref, data.findings)
