"""Lastgood's Streamlit entry point: a router over the package's pages (run by `lastgood ui`)."""

import streamlit as st

from lastgood.ui import server
from lastgood.pages import page_path

st.set_page_config(page_title="Lastgood", page_icon=":material/history:", layout="wide")
page = st.navigation([
    st.Page(page_path("overview"), title="Overview", icon=":material/dashboard:", default=True),
    st.Page(page_path("timeline"), title="Timeline", icon=":material/timeline:"),
    st.Page(page_path("integrity"), title="Integrity", icon=":material/verified_user:"),
    st.Page(page_path("diff"), title="Diff", icon=":material/difference:"),
    st.Page(page_path("recovery"), title="Recovery", icon=":material/restore:"),
])
with server.page_run():  # the index held open for the run; the sidebar's background check after the page
    page.run()
