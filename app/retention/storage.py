"""What a store is costing: the Storage page's and ``lastgood storage``'s numbers.

From the index (aggregated in SQL): bytes per store, agent, run; growth per day, its rate and a
projection; the largest runs and checkpoints; stale runs (no checkpoint for a while). From the
reader's retention capability: bytes per table and per channel (which channels bloat), and the bytes
on disk (with what is free inside the files). Each piece is its own function returning plain data
(dicts, pandas DataFrames); :func:`storage_report` gathers them (``to_dict()`` is the JSON).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from lastgood.index import queries
from lastgood.index.catalog import Catalog
from lastgood.index.store import OpenStore
from lastgood.readers.base import Prunable, capability
from lastgood.retention.policy import Duration

if TYPE_CHECKING:
    import pandas as pd

HORIZONS = (30, 90, 365)


def _frame(catalog: Catalog, sql: str, params: Any) -> pd.DataFrame:
    return queries._frame(catalog, sql, params)  # noqa: SLF001 - the index's small-result helper


def totals(catalog: Catalog, store_id: int) -> dict[str, Any]:
    row = _frame(catalog, """SELECT count(*) AS checkpoints, count(DISTINCT run_id) AS runs,
        count(DISTINCT agent) AS agents, coalesce(sum(size_bytes), 0) AS size_bytes,
        min(created_at) AS first_at, max(created_at) AS last_at FROM checkpoints WHERE store_id = ?""",
                 [store_id]).to_dict(orient="records")[0]
    return {k: (int(v) if k in ("checkpoints", "runs", "agents", "size_bytes") else v) for k, v in row.items()}


def by_agent(catalog: Catalog, store_id: int) -> pd.DataFrame:
    return _frame(catalog, """SELECT coalesce(agent, '') AS agent, count(DISTINCT run_id) AS runs,
        count(*) AS checkpoints, coalesce(sum(size_bytes), 0)::BIGINT AS size_bytes
        FROM checkpoints WHERE store_id = ? GROUP BY 1 ORDER BY size_bytes DESC""", [store_id])


def by_run(catalog: Catalog, store_id: int, limit: int | None = None) -> pd.DataFrame:
    """Every run (namespaces summed), biggest first, with its head and when it was last written."""
    sql = """SELECT c.run_id, arg_max(c.agent, c.created_at) AS agent, count(*) AS checkpoints,
        count(DISTINCT c.namespace) AS namespaces, coalesce(sum(c.size_bytes), 0)::BIGINT AS size_bytes,
        min(c.created_at) AS first_at, max(c.created_at) AS last_at, any_value(h.checkpoint_id) AS head
        FROM checkpoints c LEFT JOIN heads h ON h.store_id = c.store_id AND h.run_id = c.run_id AND h.namespace = ''
        WHERE c.store_id = ? GROUP BY 1 ORDER BY size_bytes DESC, c.run_id"""
    return _frame(catalog, sql + (f" LIMIT {int(limit)}" if limit else ""), [store_id])


def largest_checkpoints(catalog: Catalog, store_id: int, limit: int = 20) -> pd.DataFrame:
    return _frame(catalog, f"""SELECT run_id, namespace, checkpoint_id, step, created_at, size_bytes, status
        FROM checkpoints WHERE store_id = ? AND size_bytes IS NOT NULL
        ORDER BY size_bytes DESC, checkpoint_id LIMIT {int(limit)}""", [store_id])


def growth(catalog: Catalog, store_id: int) -> pd.DataFrame:
    """Per day (UTC): checkpoints and bytes written that day, and the running total of bytes."""
    return _frame(catalog, """SELECT day, checkpoints, bytes, sum(bytes) OVER (ORDER BY day) AS cumulative_bytes
        FROM (SELECT CAST(make_timestamp(epoch_us(created_at)) AS DATE) AS day, count(*) AS checkpoints,
                     coalesce(sum(size_bytes), 0)::BIGINT AS bytes
              FROM checkpoints WHERE store_id = ? AND created_at IS NOT NULL GROUP BY 1) ORDER BY day""", [store_id])


def growth_rate(catalog: Catalog, store_id: int, window_days: int = 7, now: datetime | None = None
                ) -> dict[str, Any]:
    """Bytes and checkpoints per day over the last ``window_days`` before ``now``."""
    now = now or datetime.now(UTC)
    row = _frame(catalog, """SELECT count(*) AS checkpoints, coalesce(sum(size_bytes), 0)::BIGINT AS bytes
        FROM checkpoints WHERE store_id = ? AND created_at > ?::TIMESTAMPTZ - to_days(?)
          AND created_at <= ?::TIMESTAMPTZ""", [store_id, now, window_days, now]).to_dict(orient="records")[0]
    return {"window_days": window_days, "bytes_per_day": int(row["bytes"]) / window_days,
            "checkpoints_per_day": int(row["checkpoints"]) / window_days, "until": now}


def projection(size_bytes: int, rate: dict[str, Any], horizons: tuple[int, ...] = HORIZONS) -> list[dict[str, Any]]:
    """The store's size in ``horizons`` days at the current rate (no retention)."""
    return [{"days": d, "bytes": int(size_bytes + rate["bytes_per_day"] * d)} for d in horizons]


def stale_runs(catalog: Catalog, store_id: int, idle: Duration | str = "30d", now: datetime | None = None
               ) -> pd.DataFrame:
    """Runs with no checkpoint for ``idle`` (restic-style duration) before ``now``."""
    span = idle if isinstance(idle, Duration) else Duration.parse(idle)
    cutoff = span.before(now or datetime.now(UTC))
    return _frame(catalog, """SELECT run_id, arg_max(agent, created_at) AS agent, max(created_at) AS last_at,
        count(*) AS checkpoints, coalesce(sum(size_bytes), 0)::BIGINT AS size_bytes
        FROM checkpoints WHERE store_id = ? GROUP BY 1 HAVING max(created_at) <= ?::TIMESTAMPTZ
        ORDER BY last_at""", [store_id, cutoff])


def breakdown(store: OpenStore, channels: bool = True, sample: int = 200) -> pd.DataFrame:
    """The reader's rows ``{table, channel, run_id, rows, bytes, estimated}`` (empty when the format
    offers no retention): per table, per run and table, per channel and table."""
    import pandas as pd

    offer = capability(store.reader, Prunable)
    rows = offer.retention().breakdown(channels, sample) if offer is not None else []
    return pd.DataFrame(rows, columns=["table", "channel", "run_id", "rows", "bytes", "estimated"])


def footprint(store: OpenStore) -> dict[str, Any] | None:
    offer = capability(store.reader, Prunable)
    return offer.retention().footprint() if offer is not None else None


@dataclass
class StorageReport:
    store: dict[str, Any]
    by_agent: Any
    by_run: Any
    tables: Any
    channels: Any
    growth: Any
    rate: dict[str, Any]
    projection: list[dict[str, Any]]
    largest_runs: Any
    largest_checkpoints: Any
    stale_runs: Any
    stale_after: str
    footprint: dict[str, Any] | None
    policy: dict[str, Any] | None
    pins: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        def records(frame: Any) -> list[dict[str, Any]]:
            return frame.to_dict(orient="records")

        return {"store": self.store, "footprint": self.footprint, "policy": self.policy, "pins": self.pins,
                "tables": records(self.tables), "channels": records(self.channels),
                "agents": records(self.by_agent), "runs": records(self.by_run), "growth": records(self.growth),
                "rate": self.rate, "projection": self.projection, "largest_runs": records(self.largest_runs),
                "largest_checkpoints": records(self.largest_checkpoints), "stale_after": self.stale_after,
                "stale_runs": records(self.stale_runs)}


def storage_report(catalog: Catalog, store: OpenStore, *, stale_after: str = "30d", top: int = 20,
                   window_days: int = 7, channels: bool = True, sample: int = 200,
                   now: datetime | None = None) -> StorageReport:
    from lastgood.retention.pins import pins, saved_policy

    now = now or datetime.now(UTC)
    sid = store.store_id
    total = totals(catalog, sid)
    parts = breakdown(store, channels, sample)
    rate = growth_rate(catalog, sid, window_days, now)
    prunable = capability(store.reader, Prunable) is not None
    return StorageReport(
        store={"url": store.display_url, "reader": store.reader.name, "prunable": prunable, **total},
        by_agent=by_agent(catalog, sid), by_run=by_run(catalog, sid),
        tables=parts[parts["run_id"].isna() & parts["channel"].isna()].reset_index(drop=True),
        channels=parts[parts["channel"].notna()].sort_values("bytes", ascending=False).reset_index(drop=True),
        growth=growth(catalog, sid), rate=rate, projection=projection(total["size_bytes"], rate),
        largest_runs=by_run(catalog, sid, limit=top), largest_checkpoints=largest_checkpoints(catalog, sid, top),
        stale_runs=stale_runs(catalog, sid, stale_after, now), stale_after=stale_after,
        footprint=footprint(store), policy=saved_policy(store) if prunable else None,
        pins=pins(store) if prunable else [])
