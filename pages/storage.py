"""Storage: what the store is costing, what a retention policy would reclaim, and prune."""

import streamlit as st

from lastgood import ui
from lastgood.ui import storage

st.title("Storage")
storage.take_link()  # a link's tab (?tab=by-run): before the page draws
ref = ui.store_picker()
if ref is None:
    ui.stop()
st.caption(f"Store {ui.code(ref.display)}")
report = storage.storage_report(ref)
if report is None:
    ui.stop()
if report["store"]["checkpoints"] == 0:
    st.info("No checkpoints in this store yet.")
    storage.render_result(ref)  # a prune that took every (stale) run: its undo stays at hand
    ui.stop()

storage.render_kpis(report)
st.subheader("Growth")
storage.render_growth(report)
st.subheader("Where the bytes are")
storage.render_breakdown(report)
storage.write_link(ref)  # the address bar follows the tab
st.subheader("Stale runs")
storage.render_stale(report)

st.subheader("Retention")
blocked = storage.write_blocked(ref)
if blocked:
    st.info(blocked, icon=":material/lock:")
storage.render_result(ref)
storage.render_pins_and_policy(report)
policy = storage.policy_form(ref, report)
storage.render_preview(ref, policy)
