"""Per-tensor statistics of training checkpoints in the index: what a full read (``verify
--read-data``, the dashboard's data check) found in each tensor — NaN/Inf counts, zeros, min, max,
mean, std, norm, a hash of its bytes. Pages, ``lastgood show`` and SQL read them; a tensor diff
uses the stored norms when both sides were read."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from lastgood.index.catalog import Catalog
from lastgood.readers.base import TensorSummary

COLUMNS = ("run_id", "namespace", "checkpoint_id", "name", "dtype", "shape", "numel", "nan", "posinf",
           "neginf", "zeros", "min", "max", "mean", "std", "norm", "sha256")
TYPES = ("VARCHAR", "VARCHAR", "VARCHAR", "VARCHAR", "VARCHAR", "VARCHAR", "BIGINT", "BIGINT", "BIGINT",
         "BIGINT", "BIGINT", "DOUBLE", "DOUBLE", "DOUBLE", "DOUBLE", "DOUBLE", "VARCHAR")


def record_tensors(catalog: Catalog, store_id: int, summaries: Sequence[TensorSummary]) -> None:
    """Replace the stored statistics of every checkpoint ``summaries`` cover (one transaction)."""
    if not summaries:
        return
    values = {col: [_value(s, col) for s in summaries] for col in COLUMNS}
    select = ", ".join(f"unnest(${col}::{sql_type}[]) AS {col}" for col, sql_type in zip(COLUMNS, TYPES))
    keys = sorted({(s.run_id, s.namespace, s.checkpoint_id) for s in summaries})
    with catalog.connect() as con:
        con.execute("BEGIN TRANSACTION")
        try:
            con.execute("""DELETE FROM tensor_stats WHERE store_id = $sid AND (run_id, namespace, checkpoint_id)
                IN (SELECT unnest($r::VARCHAR[]), unnest($n::VARCHAR[]), unnest($c::VARCHAR[]))""",
                        {"sid": store_id, "r": [k[0] for k in keys], "n": [k[1] for k in keys],
                         "c": [k[2] for k in keys]})
            con.execute(f"INSERT INTO tensor_stats ({', '.join(COLUMNS)}, store_id) SELECT *, $sid FROM "
                        f"(SELECT {select})", {**values, "sid": store_id})
            con.execute("COMMIT")
        except BaseException:
            con.execute("ROLLBACK")
            raise


def tensor_stats(catalog: Catalog, store_id: int, run_id: str, namespace: str,
                 checkpoint_id: str) -> list[dict[str, Any]]:
    """The stored statistics of one checkpoint's tensors, by name (empty before a full read)."""
    with catalog.connect() as con:
        cur = con.execute(f"""SELECT {', '.join(COLUMNS[3:])}, checked_at FROM tensor_stats
            WHERE store_id = ? AND run_id = ? AND namespace = ? AND checkpoint_id = ? ORDER BY name""",
                          [store_id, run_id, namespace, checkpoint_id])
        names = [d[0] for d in cur.description]
        rows = [dict(zip(names, row)) for row in cur.fetchall()]
    for row in rows:
        row["shape"] = json.loads(row["shape"]) if row["shape"] else None
    return rows


def _value(summary: TensorSummary, column: str) -> Any:
    value = getattr(summary, column)
    if column == "shape":
        return json.dumps(list(value))
    if isinstance(value, float) and value != value:  # NaN statistics (no finite value) are stored as NULL
        return None
    return value
