"""The Overview page's tables as Arrow tables, straight from DuckDB (no pandas, no streamlit).

The Overview is the first page ``lastgood ui`` draws, so its queries avoid what the other pages
can afford: pandas (~0.3-0.5 s to import) and the conversion of every ``TIMESTAMPTZ`` value
through ``pytz`` that a DataFrame built from rows pays (~0.5 s for 1,600 runs). DuckDB hands
its result to Arrow in C; Streamlit sends an Arrow table to the browser as it is. (Tables are
built here rather than in Python: ``pa.array`` and ``pa.table`` of Python values import pandas.)
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from lastgood.index.catalog import Catalog, distinct_findings, use_index
from lastgood.readers.base import DAMAGED_STATUSES, Status, sql_statuses
from lastgood.index.queries import DAMAGED_RUNS_SQL, RUNS_SQL

GROWTH_BUCKETS = 200
DAMAGED_RUNS_SHOWN = 3  # the Overview suggests an action for each of this many damaged runs


def _table(catalog: Catalog, sql: str, params: Any) -> pa.Table:
    with catalog.connect() as con:
        # its own cursor: a relation refuses a connection with a result still open
        cur = use_index(con.cursor(), catalog.path)
        try:
            return cur.sql(sql, params=params).to_arrow_table()
        finally:
            cur.close()


def text_array(values: list[str | None]) -> pa.Array:
    """A string array of ``values``, built by DuckDB (``pa.array`` would import pandas)."""
    import duckdb

    with duckdb.connect() as con:
        table = con.sql("SELECT CAST(unnest($v) AS VARCHAR) AS v", params={"v": values}).to_arrow_table()
    return table.column("v").combine_chunks()


def status_counts(catalog: Catalog, store_id: int) -> pa.Table:
    """Checkpoints per status, most first (the bars of the Overview's status chart)."""
    return _table(catalog, """SELECT status, count(*) AS checkpoints FROM checkpoints
        WHERE store_id = ? GROUP BY status ORDER BY checkpoints DESC, status""", [store_id])


def runs(catalog: Catalog, store_id: int) -> pa.Table:
    """Every run with its head, most recent first (``queries.runs`` as an Arrow table)."""
    return _table(catalog, RUNS_SQL, [store_id])


def agents(catalog: Catalog, store_id: int) -> pa.Table:
    return _table(catalog, """SELECT coalesce(agent, '(none)') AS agent, count(*) AS runs,
        CAST(sum(checkpoints) AS BIGINT) AS checkpoints, CAST(sum(size_bytes) AS BIGINT) AS size_bytes,
        CAST(sum(corrupt) AS BIGINT) AS corrupt, CAST(sum(incomplete) AS BIGINT) AS incomplete,
        max(last_at) AS last_at
        FROM runs WHERE store_id = ? GROUP BY ALL ORDER BY agent""", [store_id])


def damaged_runs(catalog: Catalog, store_id: int, limit: int) -> tuple[list[dict[str, Any]], int]:
    """The ``limit`` damaged runs (the runs ``lastgood runs`` calls damaged: a corrupt or incomplete
    checkpoint, or an error finding on one, ``queries.DAMAGED_RUNS_SQL``) with the most damaged
    checkpoints, then error findings, the most recently damaged first among equals, with whether the
    run's head is damaged (restoring its last good helps); and how many runs are damaged
    (``queries.overview``'s ``damaged_runs``). Only damaged rows are read."""
    rows = _table(catalog, f"""WITH bad AS (
            SELECT run_id, count(*) FILTER (WHERE status = {sql_statuses(Status.CORRUPT)}) AS corrupt,
                count(*) FILTER (WHERE status = {sql_statuses(Status.INCOMPLETE)}) AS incomplete,
                0 AS errors, max(created_at) AS damaged_at
            FROM checkpoints WHERE store_id = $sid AND status IN {sql_statuses(*DAMAGED_STATUSES)} GROUP BY run_id
            UNION ALL
            SELECT run_id, 0, 0, count(*), NULL FROM {distinct_findings("store_id = $sid")} f
            WHERE severity = 'error' AND checkpoint_id IS NOT NULL
                AND run_id IN (SELECT run_id FROM ({DAMAGED_RUNS_SQL})) GROUP BY run_id)
        SELECT run_id, CAST(sum(corrupt) AS BIGINT) AS corrupt, CAST(sum(incomplete) AS BIGINT) AS incomplete,
            CAST(sum(corrupt + incomplete) AS BIGINT) AS damaged, CAST(sum(errors) AS BIGINT) AS errors,
            count(*) OVER () AS total,
            EXISTS (SELECT 1 FROM heads h JOIN checkpoints c ON c.store_id = h.store_id AND c.run_id = h.run_id
                    AND c.namespace = h.namespace AND c.checkpoint_id = h.checkpoint_id
                    WHERE h.store_id = $sid AND h.run_id = bad.run_id AND h.namespace = ''
                    AND c.status IN {sql_statuses(*DAMAGED_STATUSES)}) AS head_damaged
        FROM bad GROUP BY run_id ORDER BY damaged DESC, errors DESC, max(damaged_at) DESC NULLS LAST, run_id
        LIMIT $limit""", {"sid": store_id, "limit": limit}).to_pylist()
    return rows, int(rows[0]["total"]) if rows else 0


def failures(catalog: Catalog, store_id: int, limit: int = 20) -> pa.Table:
    """Damaged checkpoints and error events, newest first (``queries.recent_failures``)."""
    return _table(catalog, f"""SELECT * FROM (
        SELECT created_at, run_id, agent, checkpoint_id, status AS what, status_reason AS detail
        FROM checkpoints WHERE store_id = $sid AND status IN {sql_statuses(*DAMAGED_STATUSES)}
        UNION ALL
        SELECT e.created_at, e.run_id, r.agent, e.checkpoint_id, e.kind AS what, e.message
        FROM events e LEFT JOIN runs r ON r.store_id = e.store_id AND r.run_id = e.run_id
        WHERE e.store_id = $sid AND e.kind IN ('error', 'timeout', 'crash', 'failure'))
        ORDER BY created_at DESC NULLS LAST LIMIT $limit""", {"sid": store_id, "limit": limit})


def growth(catalog: Catalog, store_id: int, buckets: int = GROWTH_BUCKETS) -> pa.Table:
    """Cumulative stored bytes per agent at the end of each of ``buckets`` time buckets, every
    agent at every bucket (a bucket where an agent wrote nothing carries its total forward), so
    the agents stack. ``at_ms``: the bucket's start in milliseconds since the epoch (UTC)."""
    return _table(catalog, """WITH span AS (SELECT min(epoch(created_at)) AS lo,
            greatest(max(epoch(created_at)) - min(epoch(created_at)), 1) / $n AS width
            FROM checkpoints WHERE store_id = $sid),
        written AS (SELECT lo + floor((epoch(created_at) - lo) / width) * width AS bucket,
              coalesce(agent, '(none)') AS agent, sum(size_bytes) AS size_bytes
              FROM checkpoints, span WHERE store_id = $sid AND created_at IS NOT NULL GROUP BY ALL),
        grid AS (SELECT b.bucket, a.agent FROM (SELECT DISTINCT bucket FROM written) b,
              (SELECT DISTINCT agent FROM written) a)
        SELECT CAST(grid.bucket * 1000 AS DOUBLE) AS at_ms, grid.agent,
               CAST(sum(coalesce(w.size_bytes, 0)) OVER (PARTITION BY grid.agent ORDER BY grid.bucket)
                    AS BIGINT) AS total_bytes
        FROM grid LEFT JOIN written w USING (bucket, agent) ORDER BY grid.agent, at_ms""",
                  {"sid": store_id, "n": buckets})
