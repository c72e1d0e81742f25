"""SQL: a read-only console over the store's documented views; results export; the query is in the URL."""

import streamlit as st

from lastgood import ui
from lastgood.ui import sql

st.title("SQL")
sql.take_link()  # ?sql=… (a shared link): the query, before the editor draws
slots = sql.place()  # before the store is opened: the browser loads the grid's code meanwhile
ref = ui.store_picker()
if ref is None:
    slots.clear()
    ui.stop()
slots.intro.caption(f"Store {ui.code(ref.display)} — read-only: one SELECT over the views `checkpoints`, `runs`, "
                    "`findings`, `events`, `actions`, `tensors` (columns below and in docs/sql.md); values "
                    "redacted. The same as `lastgood sql STORE \"QUERY\"`.")
query = sql.render_editor(slots.editor)
sql.render_result(ref, query, slots.result)
sql.render_views()
sql.write_link(ref)
