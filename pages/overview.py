"""Overview: what is in this store, what is damaged, what it costs, what to do next."""

import streamlit as st

from lastgood import ui
from lastgood.display import svg_charts
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

overview.render_kpis(o)
data = overview.overview_data(ref, o)

st.subheader("Suggested actions")
overview.render_actions(data.actions)

left, right = st.columns(2)
with left:
    st.subheader("Checkpoints by status")
    overview.figure(svg_charts.status_bars(data.status))
with right:
    st.subheader("Storage growth by agent")
    if data.growth.num_rows == 0:
        st.caption("No timestamps recorded, so growth over time cannot be drawn.")
    else:
        overview.figure(svg_charts.growth_areas(data.growth))


def tables() -> None:
    st.subheader("Recent failures")
    ui.show_table(data.failures, ["created_at", "run_id", "agent", "what", "detail", "checkpoint_id"],
                  empty="No corrupt or incomplete checkpoints and no error events.")

    st.subheader("Agents")
    ui.show_table(data.agents, ["agent", "runs", "checkpoints", "size_bytes", "corrupt", "incomplete",
                                "last_at"], empty="No agents recorded on these checkpoints.")

    st.subheader(f"Runs ({o.runs:,}), most recent first")
    ui.show_table(data.runs, ["run_id", "agent", "checkpoints", "last_step", "first_at", "last_at",
                              "size_bytes", "ok", "corrupt", "incomplete", "quarantined", "superseded",
                              "head"], empty="No runs yet.", key="runs-table")


# the tables (Streamlit's data grid) after the numbers and figures, on a session's first visit
progressive.after_first_screen("overview-tables", tables, "Loading the failures, agents and runs tables…")

ui.warm_up_plotly_pages()  # Timeline/Diff's imports, in the background a little after this page
ui.warm_up_timeline(ref)  # the Timeline's first screen, read into the query cache after that
