"""Overview: what is in this store, what is damaged, what it costs, what to do next."""

import streamlit as st

from lastgood import ui
from lastgood.ui import overview, progressive

st.title("Overview")
ref = ui.store_picker()
if ref is None:
    ui.stop()
st.caption(f"Store {ui.code(ref.display)}")
o = overview.overview_numbers(ref)  # the numbers first, drawn before the rest is queried

if o.checkpoints == 0:
    st.info("No checkpoints in this store yet. Agents add them with `NativeWriter.save(...)` "
            "(or their framework's checkpointer); use **Re-index** in the sidebar to pick them up.")
    ui.stop()

overview.render_kpis(ref, o)
data = overview.overview_data(ref, o)

st.subheader("Suggested actions")
overview.render_actions(ref, data.actions)

left, right = st.columns(2)
with left:
    st.subheader("Checkpoints by status")
    overview.render_status(data)
with right:
    st.subheader("Storage growth by agent")
    overview.render_growth(data)

# the tables (Streamlit's data grid) after the numbers and figures, on a session's first visit
progressive.after_first_screen("overview-tables", lambda: overview.render_tables(data),
                               "Loading the failures, agents and runs tables…")

overview.warm_up_next_pages(ref)  # Timeline/Diff's imports, then the Timeline's first screen, in the background
