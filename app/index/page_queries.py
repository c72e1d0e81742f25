"""The dashboard's queries by name, redacted, and the first page's queries run ahead of it.

Every page asks for its data by name (``lastgood.ui.query``, cached per process by Streamlit).
``lastgood ui`` on a store the index already holds knows which page comes first, the Overview:
:func:`prepare` runs that page's queries in a thread while Streamlit is imported and the browser
loads the dashboard (~0.6 s in which the index is otherwise idle), and the first page run takes
their results (:func:`take`) instead of querying after the browser asked. A result is taken once,
within :data:`PREPARED_SECONDS` of being read; anything that clears the dashboard's query caches
drops them (:func:`forget`). No streamlit here: the thread starts before Streamlit is imported.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

import pyarrow as pa

from lastgood.index import overview as overview_tables
from lastgood.index import queries
from lastgood.index.catalog import Catalog
from lastgood.redact import redact_text

QUERIES: dict[str, Callable[..., Any]] = {
    "overview": queries.overview, "runs": queries.runs,
    "timeline": lambda c, sid, run, agent, most: queries.timeline(c, sid, run_id=run, agent=agent,
                                                                 max_points=most),
    "events": lambda c, sid, run, agent: queries.events(c, sid, run_id=run, agent=agent),
    "verification": queries.verification_depths,
    "overview_status": overview_tables.status_counts, "overview_runs": overview_tables.runs,
    "overview_agents": overview_tables.agents,
    "overview_growth": overview_tables.growth, "overview_failures": overview_tables.failures,
    "damaged_runs": overview_tables.damaged_runs,
}

# what the Overview asks for, in the order it asks (lastgood.ui.overview)
OVERVIEW: tuple[tuple[Any, ...], ...] = (
    ("overview",), ("overview_status",), ("overview_agents",), ("overview_growth",),
    ("overview_failures",), ("damaged_runs", overview_tables.DAMAGED_RUNS_SHOWN), ("verification",),
    ("overview_runs",),  # for the tables, after the first screen
)
PREPARED_SECONDS = 30.0  # a result read longer ago than this is not shown: the page queries again
TAKE_WAIT_SECONDS = 5.0  # how long a page waits for a query still running ahead of it

Key = tuple[str, int, str, tuple[Any, ...]]
_prepared: dict[Key, Future] = {}  # each resolves to (time.monotonic() when read, result)
_lock = threading.Lock()


def run(catalog: Catalog, name: str, store_id: int, *args: Any) -> Any:
    """``QUERIES[name]`` over ``catalog``, every text in the result redacted."""
    return redacted(QUERIES[name](catalog, store_id, *args))


def redacted(result: Any) -> Any:
    if isinstance(result, pa.Table):
        return _redact_table(result)
    pandas = sys.modules.get("pandas")  # not imported: no query returned a frame
    if pandas is not None and isinstance(result, pandas.DataFrame):
        return _redact_frame(result)
    return result


def _redact_table(table: pa.Table) -> pa.Table:
    """Every text column of ``table`` through redact_text (a column is rebuilt only when a value
    changed; without pandas, see lastgood.index.overview.text_array)."""
    for i, column in enumerate(table.schema):
        if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
            values = table.column(i).to_pylist()
            redact = _run_or_handle if column.name == "run_id" else redact_text
            redacted_values = [redact(v) if v is not None else None for v in values]
            if redacted_values != values:
                table = table.set_column(i, column.with_type(pa.string()),
                                         overview_tables.text_array(redacted_values))
    return table


def _redact_frame(frame: Any) -> Any:
    import pandas as pd

    out = frame.copy()
    for column in out.columns:
        if out[column].dtype == object or pd.api.types.is_string_dtype(out[column]):
            redact = _run_or_handle if column == "run_id" else redact_text
            out[column] = out[column].map(lambda v: redact(v) if isinstance(v, str) else v)
    return out


def _run_or_handle(run_id: str) -> str:
    """A run id as pages show and select it: a secret-shaped one becomes its handle (unique, and
    accepted by every query that filters by run), never a mask that would pick nothing."""
    return run_id if redact_text(run_id) == run_id else queries.run_handle(run_id)


# ---- the first page's queries, ahead of it ----------------------------------------------


def prepare(index_path: str, store_id: int, wanted: tuple[tuple[Any, ...], ...] = OVERVIEW
            ) -> threading.Thread:
    """Run ``wanted`` (name, *args) for ``store_id`` one after another in a daemon thread, each
    result kept for :func:`take`; returns the thread."""
    slots: list[tuple[str, tuple[Any, ...], Future]] = []
    with _lock:
        for name, *args in wanted:
            future: Future = Future()
            _prepared[(index_path, store_id, name, tuple(args))] = future
            slots.append((name, tuple(args), future))
    thread = threading.Thread(target=_run_ahead, args=(index_path, store_id, slots), daemon=True,
                              name="lastgood-first-page")
    thread.start()
    expiry = threading.Timer(PREPARED_SECONDS + TAKE_WAIT_SECONDS, _expire, [[future for *_, future in slots]])
    expiry.daemon = True  # a first page that was not the Overview leaves them: dropped then
    expiry.start()
    return thread


def _expire(futures: list[Future]) -> None:
    with _lock:
        for key in [key for key, future in _prepared.items() if any(future is f for f in futures)]:
            del _prepared[key]


def _run_ahead(index_path: str, store_id: int,
               slots: list[tuple[str, tuple[Any, ...], Future]]) -> None:
    catalog: Catalog | None = None
    try:
        catalog = Catalog(index_path)  # one open of the index for all of them, closed below
        for name, args, future in slots:
            if not future.set_running_or_notify_cancel():
                continue
            try:
                result = run(catalog, name, store_id, *args)
                future.set_result((time.monotonic(), result))
            except Exception as exc:  # noqa: BLE001 - the page runs the query itself and shows why
                future.set_exception(exc)
    except Exception as exc:  # noqa: BLE001 - the index did not open: the page opens it and says why
        for _, _, future in slots:
            if not future.done():
                future.set_exception(exc)
    finally:
        if catalog is not None:
            catalog.close()


MISSING = object()


def take(index_path: str, store_id: int, name: str, args: tuple[Any, ...]) -> Any:
    """The result :func:`prepare` read for this query (waiting for it while it runs), once;
    :data:`MISSING` when none was prepared, it failed, or it is older than PREPARED_SECONDS."""
    with _lock:
        future = _prepared.pop((index_path, store_id, name, tuple(args)), None)
    if future is None:
        return MISSING
    try:
        read_at, result = future.result(timeout=TAKE_WAIT_SECONDS)
    except Exception:  # noqa: BLE001 - failed or still running: the page's own query says why
        future.cancel()
        return MISSING
    return MISSING if time.monotonic() - read_at > PREPARED_SECONDS else result


def forget() -> None:
    """Drop every prepared result (the dashboard's query caches were cleared: the index changed)."""
    with _lock:
        futures = list(_prepared.values())
        _prepared.clear()
    for future in futures:
        future.cancel()
