"""Recovery: restore, roll back, quarantine and undo — previewed, confirmed, journaled."""

import streamlit as st

from lastgood import ui
from lastgood.ui import recovery as ui_recovery
from lastgood.ui import tabs

st.title("Recovery")
ui_recovery.take_link()  # a link's store, action, run, target and tab: before the pickers draw
ref = ui.store_picker()
if ref is None:
    ui.stop()
blocked = ui_recovery.write_blocked(ref) or ui_recovery.read_only_reason(ref)
if blocked:
    st.info(ui.md_escape(blocked) if blocked != ui_recovery.READ_ONLY else blocked, icon=":material/lock:")
ui_recovery.render_result(ref)
action_tab, journal_tab = tabs.linked_tabs(tabs.RECOVERY, ui_recovery.TABS)  # the tab is part of the link
with action_tab:
    ui_recovery.render_form(ref)
with journal_tab:
    ui_recovery.render_journal(ref)
ui_recovery.write_link(ref)
