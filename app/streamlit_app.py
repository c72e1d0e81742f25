"""Lastgood's Streamlit entry point: a router over the package's pages (run by `lastgood ui`)."""

import streamlit as st

from lastgood.ui import server
from lastgood.ui.navigation import PAGES, page_path

st.set_page_config(page_title="Lastgood", page_icon=":material/history:", layout="wide")
page = st.navigation([st.Page(page_path(p.name), title=p.title, icon=p.icon, default=i == 0)
                      for i, p in enumerate(PAGES)])
with server.page_run():  # the index held open for the run; the sidebar's background check after the page
    page.run()
