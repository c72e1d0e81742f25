"""Integrity: every finding the index holds, the health and last good of each run, re-verification."""

import streamlit as st

from lastgood import ui
from lastgood.ui import integrity

st.title("Integrity")
integrity.take_link()  # ?severity=…&check=… (a shared link): the filters, before they draw
ref = ui.store_picker()
if ref is None:
    ui.stop()
st.caption(f"Store {ui.code(ref.display)} — findings from listing, structure, lineage, content and data checks; "
           "the same set `lastgood verify` reports and `ls` statuses reflect, counted as the Overview counts them.")

integrity.ensure_data_check(ref)  # checkpoints never read get a full read in the background
integrity.render_check_controls(ref)
data = integrity.integrity_data(ref)
integrity.render_summary(ref, data)
integrity.render_store_findings(data)

st.subheader("Runs: health and last good")
integrity.render_runs(ref, data.runs)

st.subheader("Findings")
integrity.render_findings(ref, data.findings)
with st.expander("Findings by check"):
    integrity.render_by_check(data)
integrity.write_link(ref)
