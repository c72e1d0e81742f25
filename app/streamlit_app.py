"""Rewind's Streamlit entry point: a router over ../pages (run by `rewind ui`)."""

import streamlit as st

st.set_page_config(page_title="Rewind", page_icon=":material/history:", layout="wide")
st.navigation([
    st.Page("../pages/overview.py", title="Overview", icon=":material/dashboard:", default=True),
    st.Page("../pages/timeline.py", title="Timeline", icon=":material/timeline:"),
]).run()
