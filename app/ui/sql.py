"""The SQL page: a read-only console over the store's documented views (lastgood.index.sql, the
same sandbox ``lastgood sql`` runs in) — an editor, example queries, the result grid (the first
PAGE_LIMIT rows, with the query's true row count), exports of the whole result, and the query
in the URL (``?sql=…``) so a copied link runs it again.

The page's parts are placed before the store is opened (:func:`place`): the result's slot holds an
empty grid until the query answers, so a browser's first visit fetches and compiles the grid's code
(Streamlit loads an element's code when one is first shown) while the server refreshes the store
and runs the query, instead of after the result's rows arrived.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import streamlit as st

from lastgood.errors import LastgoodError
from lastgood.index.sql import DEFAULT_TIMEOUT, describe_views, examples, run_query
from lastgood.redact import redact_text
from lastgood.ui import links
from lastgood.ui.escape import md_escape
from lastgood.ui.pagerun import after_page
from lastgood.ui.stores import CACHE_TTL, StoreRef, catalog
from lastgood.ui.tables import column_config, empty_grid, export_buttons

if TYPE_CHECKING:
    import pyarrow as pa

PAGE_LIMIT = 10_000  # rows the grid shows; the count is always the query's true one
EXPORT_LIMIT = 1_000_000  # rows an export holds at most
QUERY_PARAM = "sql"
QUERY_KEY = "sql_query"
EXAMPLE_KEY = "sql_example"
VIEWS_KEY = "sql_views"  # the views' expander (open or not)
GRID_SENT_KEY = "sql_grid_sent"  # the session's browser was sent a grid (its code is loaded)
DEFAULT_QUERY = "SELECT run_id, count(*) AS checkpoints, sum(size_bytes) AS bytes, max(created_at) AS last_at\n" \
                "FROM checkpoints GROUP BY run_id ORDER BY last_at DESC"


@dataclass(frozen=True)
class Slots:
    """The page's parts, top to bottom: the store's note, the editor, the result."""

    intro: Any
    editor: Any
    result: Any

    def clear(self) -> None:
        """Nothing to show (no store): the result's waiting grid goes."""
        self.result.empty()


def place() -> Slots:
    """The page's slots, placed at the top of its run (before the store is opened). On the page's
    first run in a session the result's holds an empty grid (no rows, no count: the result's count
    and grid replace it together); later runs keep the last result on screen until the new one."""
    slots = Slots(st.empty(), st.container(), st.empty())
    if not st.session_state.get(GRID_SENT_KEY):
        st.session_state[GRID_SENT_KEY] = True
        empty_grid(slots.result)
    return slots


def take_link() -> None:
    """A link's query (``?sql=…``) becomes the editor's, once; a first visit starts with an example."""
    linked = links.take("sql", [QUERY_PARAM]).get(QUERY_PARAM)
    if linked:
        st.session_state[QUERY_KEY] = linked
    st.session_state.setdefault(QUERY_KEY, DEFAULT_QUERY)


def write_link(ref: StoreRef) -> None:
    """The store and the query in the URL: a copied link runs it again."""
    links.write("sql", {links.STORE: ref.url, QUERY_PARAM: st.session_state.get(QUERY_KEY, "").strip()})


def _use_example() -> None:
    chosen = st.session_state.get(EXAMPLE_KEY)
    found = {e["title"]: e["sql"] for e in examples()}
    if chosen in found:
        st.session_state[QUERY_KEY] = found[chosen]


def render_editor(slot: Any) -> str:
    """The example picker and the editor, drawn at the end of the page run into ``slot`` (the
    browser builds the result's grid first, the widgets' code after it); the query to run ('' for
    none): the editor's state, set before the run by a link, an example or the editor."""
    after_page(lambda: _draw_editor(slot))
    return str(st.session_state.get(QUERY_KEY) or "").strip()


def _draw_editor(slot: Any) -> None:
    with slot:
        st.selectbox("Example queries", [e["title"] for e in examples()], index=None, key=EXAMPLE_KEY,
                     placeholder="Pick an example to load it into the editor", on_change=_use_example)
        st.text_area("Query (one SELECT over the views below; Ctrl+Enter runs it)", key=QUERY_KEY, height=150)


def render_views() -> None:
    """The views and their columns (docs/sql.md), in an expander whose content is sent only once it
    is opened (a rerun): ~2.6 kB of Markdown the browser would otherwise lay out, hidden, beside the
    result's grid on every first screen."""
    views = st.expander("Views and their columns", key=VIEWS_KEY, on_change="rerun")
    if not views.open:
        return
    with views:  # one block: each element costs the browser a render
        st.markdown("\n\n".join(f"**`{view['name']}`** — {md_escape(view['description'])}  \n"
                                 + ", ".join(f"`{c['name']}` {c['type']}" for c in view["columns"])
                                 for view in describe_views()))


@st.cache_data(ttl=CACHE_TTL, max_entries=32, show_spinner=False)
def _result(index_path: str, store_id: int, sql: str, limit: int) -> tuple[pa.Table, int, bool]:
    return run_query(catalog(index_path), store_id, sql, limit=limit, timeout=DEFAULT_TIMEOUT)


def render_result(ref: StoreRef, sql: str, slot: Any) -> None:
    """The query's first PAGE_LIMIT rows, its true count, and exports of the whole result, in
    ``slot`` (replacing the empty grid it holds)."""
    with slot.container():
        _draw_result(ref, sql)


def _draw_result(ref: StoreRef, sql: str) -> None:
    if not sql:
        st.caption("Write a query, or pick an example.")
        return
    try:
        with st.spinner("Running the query…"):
            table, total, truncated = _result(ref.index_path, ref.store_id, sql, PAGE_LIMIT)
    except LastgoodError as exc:
        st.error(md_escape(redact_text(str(exc))))
        return
    table = _unique_columns(table)
    shown = f"{table.num_rows:,} of {total:,} rows (the first {PAGE_LIMIT:,})" if truncated else f"{total:,} row(s)"
    st.caption(f"{shown} · {table.num_columns} column(s)")
    if table.num_columns:
        st.dataframe(table, hide_index=True, column_config=column_config(table), key="sql_grid")
    export_buttons(table if not truncated else _whole(ref, sql), "sql-result", rows=total)


def _whole(ref: StoreRef, sql: str) -> Any:
    """The whole result (up to EXPORT_LIMIT rows), read when an export is clicked."""
    index = catalog(ref.index_path)  # resolved now: the export runs outside the page's run

    def read() -> pa.Table:
        return _unique_columns(run_query(index, ref.store_id, sql, limit=EXPORT_LIMIT)[0])

    return read


def _unique_columns(table: pa.Table) -> pa.Table:
    """Column names made unique (``count``, ``count_2``): the grid needs distinct names."""
    names: list[str] = []
    for name in table.column_names:
        candidate, n = name or "column", 2
        while candidate in names:
            candidate, n = f"{name}_{n}", n + 1
        names.append(candidate)
    return table.rename_columns(names) if names != table.column_names else table
