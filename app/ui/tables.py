"""Tables as every page shows them: a DataFrame or an Arrow table, readable column labels, times in
UTC, sizes in bytes, at most MAX_TABLE_ROWS rows sent — and under each one its exports (CSV,
Parquet, JSON) named after what it holds, made only when clicked (lastgood.display.export)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pyarrow as pa
import streamlit as st

from lastgood.display import export
from lastgood.index import page_queries

if TYPE_CHECKING:  # pandas is imported by the pages that need frames: the Overview does not
    import pandas as pd

MAX_TABLE_ROWS = 500
LABELS = {"run_id": "run", "checkpoint_id": "checkpoint", "last_step": "last step", "what": "what",
          "task_id": "task"}
WIDE_COLUMNS = ("detail", "message")

redact_frame = page_queries.redacted  # for the pages that redact a frame of their own


def show_table(frame: pd.DataFrame | pa.Table, columns: list[str], *, empty: str, key: str | None = None,
               limit: int = MAX_TABLE_ROWS, name: str | None = None) -> None:
    """A table (a DataFrame or an Arrow table) with UTC times and human sizes, and its exports
    (every row of ``frame`` in ``columns``; files named after ``name``, else ``key``); ``empty``
    explains an empty one."""
    if len(frame) == 0:
        st.caption(empty)
        return
    chosen = [c for c in columns if c in _columns(frame)]
    whole = frame.select(chosen) if isinstance(frame, pa.Table) else frame[chosen]
    shown = whole.slice(0, limit) if isinstance(whole, pa.Table) else whole.head(limit)
    config = column_config(shown)
    st.dataframe(shown, hide_index=True, column_config=config, key=key, lazy=False)  # small: sent whole
    if len(frame) > limit:
        st.caption(f"Showing {limit:,} of {len(frame):,} rows (the exports hold them all).")
    export_buttons(whole, name or key or "table")


def empty_grid(slot: Any = st) -> None:
    """An empty table in ``slot``: the browser fetches and compiles the data grid's code (Streamlit
    loads an element's code the first time one is shown) while the server works on what the page's
    tables will hold, so they draw without that wait."""
    slot.dataframe(pa.table({"": pa.array([], pa.string())}), height=40, lazy=False)


def export_buttons(frame: Any, name: str, rows: int | None = None) -> None:
    """CSV, Parquet and JSON downloads of ``frame`` (a DataFrame, a Styler, an Arrow table, or a
    function returning one when clicked), files ``lastgood-<name>.<ext>``; each file is made on
    click. What the pages show was redacted when read, so the files are redacted too."""
    data = getattr(frame, "data", frame)  # a Styler exports its data
    count = rows if rows is not None else (len(data) if not callable(data) else None)
    held = f" ({count:,} rows)" if count is not None else ""
    stem = export.file_stem(name)
    with st.container(horizontal=True, gap="small"):
        for fmt in export.FORMATS:
            st.download_button(fmt.label, data=_deferred(data, fmt.name), file_name=f"{stem}.{fmt.suffix}",
                               mime=fmt.mime, on_click="ignore", type="tertiary", icon=":material/download:",
                               key=_unique_key(f"export-{stem}-{fmt.name}"),
                               help=f"Download this table{held} as {fmt.label}")


def column_config(frame: pd.DataFrame | pa.Table) -> dict[str, Any]:
    """Readable labels, UTC times and human sizes for ``frame``'s columns."""
    return {**_labels(frame), **_utc_columns(frame), **_byte_columns(frame)}


def _deferred(data: Any, fmt: str) -> Any:
    return lambda: export.encode(data() if callable(data) else data, fmt)


def _unique_key(base: str) -> str:
    """``base``, or ``base-2``, ``base-3``… when this page run already has a widget by that key (two
    tables holding the same kind of rows on one page)."""
    from streamlit.runtime.scriptrunner import get_script_run_ctx

    ctx = get_script_run_ctx()
    used = getattr(getattr(ctx, "shared", None), "widget_user_keys_this_run", None)
    key, n = base, 2
    while used is not None and key in used:
        key, n = f"{base}-{n}", n + 1
    return key


def _columns(frame: pd.DataFrame | pa.Table) -> list[str]:
    return list(frame.column_names if isinstance(frame, pa.Table) else frame.columns)


def _is_time(frame: pd.DataFrame | pa.Table, column: str) -> bool:
    if isinstance(frame, pa.Table):
        return pa.types.is_timestamp(frame.schema.field(column).type)
    import pandas as pd

    return pd.api.types.is_datetime64_any_dtype(frame[column])


def _utc_columns(frame: pd.DataFrame | pa.Table) -> dict[str, Any]:
    return {c: st.column_config.DatetimeColumn(f"{c.replace('_', ' ')} (UTC)", timezone="UTC",
                                               format="YYYY-MM-DD HH:mm:ss")
            for c in _columns(frame) if _is_time(frame, c)}


def _byte_columns(frame: pd.DataFrame | pa.Table) -> dict[str, Any]:
    return {c: st.column_config.NumberColumn("size", format="bytes")
            for c in _columns(frame) if c == "size_bytes"}


def _labels(frame: pd.DataFrame | pa.Table) -> dict[str, Any]:
    return {c: st.column_config.Column(LABELS.get(c, c), width="large" if c in WIDE_COLUMNS else None)
            for c in _columns(frame) if c in LABELS or c in WIDE_COLUMNS}
