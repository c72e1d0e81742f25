"""Which checkpoints a kept LangGraph checkpoint needs to be read (the keep-set's dependencies).

LangGraph's own savers compute the same set before they delete anything (``BasePostgresSaver.prune``
keeps the latest checkpoint, its pending-sends parent and its subgraph calls, and refuses
DeltaChannel threads; ``BaseCheckpointSaver.prune`` says what a DeltaChannel-aware prune must keep):

- **DeltaChannel ancestors** (rule ``delta-ancestor``): a checkpoint whose metadata carries
  ``counters_since_delta_snapshot`` stores some DeltaChannel only as writes since its last snapshot;
  ``get_delta_channel_history`` walks its parents, collecting their writes, to the nearest ancestor
  that stores every such channel (no counters: every channel snapshotted there). So it needs its
  parent, which needs its own while it has counters — the closure stops at the snapshot. A thread
  marked ``delta_writes_versioned`` (LangGraph.js) gives no counters: every checkpoint needs its parent.
- **subgraph parents** (``subgraph-parent``): a checkpoint in a subgraph namespace names, in
  ``metadata.parents``, the checkpoint of each enclosing namespace its call runs under;
- **interrupt chains** (``interrupt-chain``): a checkpoint with a pending ``__interrupt__`` needs the
  subgraph checkpoints whose ``parents`` name it (resuming re-enters them);
- **pending sends** (``pending-sends``): a checkpoint older than format v4 reads its pending sends
  from its parent's ``__pregel_tasks`` writes.

Pending writes are never separated from their checkpoint (they go and come back with it).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from lastgood.readers.journal import EDGE_COLUMNS


DELTA_COUNTERS = "counters_since_delta_snapshot"
DELTA_VERSIONED = "delta_writes_versioned"
TASKS = "__pregel_tasks"
DELTA_RULE, SUBGRAPH_RULE, INTERRUPT_RULE, SENDS_RULE = (
    "delta-ancestor", "subgraph-parent", "interrupt-chain", "pending-sends")
RULES = {DELTA_RULE: "DeltaChannel ancestor", SUBGRAPH_RULE: "subgraph parent",
         INTERRUPT_RULE: "interrupt chain", SENDS_RULE: "pending sends of a pre-v4 checkpoint",
         "incremental": "incremental parent"}

Key = tuple[str, str, str]
Edge = tuple[str, str, str, str, str, str]


def edges_table(edges: Iterable[Edge]) -> Any:
    """EDGE_COLUMNS as an Arrow table (built by DuckDB: pyarrow's own conversion would import pandas)."""
    import duckdb

    rows = list(dict.fromkeys(edges))
    columns = [list(col) for col in zip(*rows)] if rows else [[] for _ in EDGE_COLUMNS]
    con = duckdb.connect()
    try:
        select = ", ".join(f"unnest(${name}::VARCHAR[]) AS {name}" for name in EDGE_COLUMNS)
        return con.sql(f"SELECT {select}", params=dict(zip(EDGE_COLUMNS, columns))).to_arrow_table()
    finally:
        con.close()


def _select(rows: Any, where: str, params: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
    """Rows of the Arrow table ``rows`` matching ``where`` (DuckDB: pyarrow's compute would import pandas)."""
    import duckdb

    con = duckdb.connect()
    try:
        con.register("rows", rows)
        cur = con.execute(f"""SELECT run_id, coalesce(namespace, '') AS namespace, checkpoint_id, parent_id,
            CAST(metadata AS VARCHAR) AS metadata FROM rows WHERE {where}""", dict(params or {}))
        names = [d[0] for d in cur.description]
        return [dict(zip(names, r)) for r in cur.fetchall()]
    finally:
        con.close()


def metadata_edges(rows: Any, interrupted: set[Key] | None = None) -> list[Edge]:
    """Edges from the checkpoints' metadata alone (``rows``: journal.DEPENDENCY_COLUMNS, Arrow).
    ``interrupted``: checkpoints with a pending ``__interrupt__`` (for interrupt chains)."""
    if rows.num_rows == 0:
        return []
    return _delta_edges(rows) + _subgraph_edges(rows, interrupted or set())


def _delta_edges(rows: Any) -> list[Edge]:
    edges: list[Edge] = []
    versioned = {(r["run_id"], r["namespace"]) for r in _select(rows, f"contains(CAST(metadata AS VARCHAR), '{DELTA_VERSIONED}')")
                 if DELTA_VERSIONED in _metadata(r["metadata"])}
    if versioned:
        for row in _select(rows, "run_id IN (SELECT unnest($runs::VARCHAR[]))", {"runs": sorted({r for r, _ in versioned})}):
            if (row["run_id"], row["namespace"]) in versioned and row["parent_id"]:
                edges.append(_edge(row, row["namespace"], row["parent_id"], DELTA_RULE))
    for row in _select(rows, f"contains(CAST(metadata AS VARCHAR), '{DELTA_COUNTERS}')"):
        counters = _metadata(row["metadata"]).get(DELTA_COUNTERS)
        if isinstance(counters, Mapping) and counters and row["parent_id"]:
            edges.append(_edge(row, row["namespace"], row["parent_id"], DELTA_RULE))
    return edges


def _subgraph_edges(rows: Any, interrupted: set[Key]) -> list[Edge]:
    edges: list[Edge] = []
    for row in _select(rows, "coalesce(namespace, '') <> ''"):
        parents = _metadata(row["metadata"]).get("parents")
        if not isinstance(parents, Mapping):
            continue
        for ns, cid in parents.items():
            if not isinstance(ns, str) or not isinstance(cid, str) or not cid or ns == row["namespace"]:
                continue
            edges.append(_edge(row, ns, cid, SUBGRAPH_RULE))
            if (row["run_id"], ns, cid) in interrupted:
                edges.append((row["run_id"], ns, cid, row["namespace"], row["checkpoint_id"], INTERRUPT_RULE))
    return edges


def sends_edges(rows: Any, senders: set[Key], version_of: Any) -> list[Edge]:
    """Children of a checkpoint with ``__pregel_tasks`` writes whose format is older than v4
    (``version_of(keys) -> {key: v}`` reads ``v`` from the store, for those few rows only)."""
    if not senders:
        return []
    children = [r for r in _select(rows, "parent_id IN (SELECT unnest($ids::VARCHAR[]))",
                                   {"ids": sorted({cid for _, _, cid in senders})})
                if (r["run_id"], r["namespace"], r["parent_id"]) in senders]
    if not children:
        return []
    versions = version_of([(r["run_id"], r["namespace"], r["checkpoint_id"]) for r in children])
    return [_edge(r, r["namespace"], r["parent_id"], SENDS_RULE) for r in children
            if _older_than_v4(versions.get((r["run_id"], r["namespace"], r["checkpoint_id"])))]


def _older_than_v4(version: Any) -> bool:
    try:
        return int(version) < 4
    except (TypeError, ValueError):
        return True  # unknown: keep the parent (safe)


def _edge(row: Mapping[str, Any], needs_ns: str, needs_id: str, rule: str) -> Edge:
    return (row["run_id"], row["namespace"] or "", row["checkpoint_id"], needs_ns, needs_id, rule)


def _metadata(raw: Any) -> dict[str, Any]:
    if isinstance(raw, Mapping):
        return dict(raw)
    try:
        value = json.loads(raw) if raw else {}
    except (TypeError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}
