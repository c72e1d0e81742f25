"""The Timeline's data: which runs get a lane, their lanes, points and events, the problems "next /
previous problem" steps through, and a training run's logged metrics — each query by name through
the dashboard's cached, redacted queries (lastgood.ui.stores.query), aggregated in SQL
(lastgood.index.lanes: ``lanes``, ``lane_points``, ``lane_events``, ``problems``, ``search``,
``waiting_runs``).

A checkpoint id that looks like a secret is replaced by its handle (``key:…``) before the redactor
sees it: the chart, the pickers and the URL name it by the handle, which every lookup accepts.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date
from typing import TYPE_CHECKING, Any

import streamlit as st

from lastgood.display.lanes import LanesData
from lastgood.index import lanes as lane_queries
from lastgood.index import page_queries
from lastgood.index.queries import checkpoint_handle
from lastgood.readers.base import DAMAGED_STATUSES, HasMetrics, NamesTaskNodes, Status, capability
from lastgood.redact import redact_text
from lastgood.ui.pagerun import guarded
from lastgood.ui.stores import CACHE_TTL, StoreRef, cached_store, query

if TYPE_CHECKING:
    import pandas as pd

MAX_POINTS = lane_queries.DEFAULT_MAX_POINTS  # above this, lane_points buckets healthy checkpoints in SQL
MAX_LANES = lane_queries.MAX_LANES
STATUSES = tuple(s.value for s in Status)


def with_handles(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` with every secret-shaped checkpoint (and parent) id replaced by its handle."""
    if frame.empty or "checkpoint_id" not in frame:
        return frame
    out = frame.copy()
    namespaces = out["namespace"] if "namespace" in out else [""] * len(out)
    for column in ("checkpoint_id", "parent_id", "head", "parent_checkpoint"):
        if column in out:
            out[column] = [_handle(r, n, c) for r, n, c in zip(out["run_id"], namespaces, out[column])]
    return out


def _handle(run_id: Any, namespace: Any, checkpoint_id: Any) -> Any:
    if not isinstance(checkpoint_id, str) or redact_text(checkpoint_id) == checkpoint_id:
        return checkpoint_id
    return checkpoint_handle(str(run_id), namespace if isinstance(namespace, str) else "", checkpoint_id)


def _handled(fn: Any) -> Any:
    return lambda *args: with_handles(fn(*args))


# the Timeline's queries, by name (lastgood.index.page_queries runs and redacts them; the query cache
# and clear_query_caches cover them like every page's)
page_queries.QUERIES.update({
    "lanes": _handled(lane_queries.lanes), "lane_points": _handled(lane_queries.lane_points),
    "lane_events": _handled(lane_queries.lane_events), "problems": _handled(lane_queries.problems),
    "search": _handled(lane_queries.search), "waiting_runs": _handled(lane_queries.waiting_runs),
})


# ---- which runs get a lane -------------------------------------------------------------------


@dataclass(frozen=True)
class Filters:
    """What the run list keeps: an agent, runs with a checkpoint in one of ``statuses``, runs active
    between ``since`` and ``until`` (UTC dates, both included)."""

    agent: str | None = None
    statuses: tuple[str, ...] = ()
    since: date | None = None
    until: date | None = None

    @property
    def range(self) -> tuple[str | None, str | None]:
        """The range as the queries take it (times, UTC)."""
        return (f"{self.since.isoformat()} 00:00:00+00" if self.since else None,
                f"{self.until.isoformat()} 23:59:59.999999+00" if self.until else None)


def filter_runs(runs: pd.DataFrame, filters: Filters) -> pd.DataFrame:
    """The runs (the ``runs`` query: aggregated in SQL, most recent first) ``filters`` keeps."""
    import pandas as pd

    keep = pd.Series(True, index=runs.index)
    if filters.agent is not None:
        keep &= runs["agent"] == filters.agent
    if filters.statuses:
        keep &= runs[[s for s in filters.statuses if s in runs]].sum(axis=1) > 0
    since, until = filters.range
    if since:
        keep &= runs["last_at"] >= pd.Timestamp(since)
    if until:
        keep &= runs["first_at"] <= pd.Timestamp(until)
    return runs[keep]


def lanes_data(ref: StoreRef, run_ids: tuple[str, ...], filters: Filters) -> LanesData:
    """The lanes of ``run_ids`` (in that order), their points (bucketed beyond MAX_POINTS) and events."""
    since, until = filters.range
    with guarded():
        lanes = query(ref, "lanes", run_ids, since, until)
        points = query(ref, "lane_points", run_ids, since, until, MAX_POINTS)
        events = query(ref, "lane_events", run_ids, since, until)
    total = int(points["count"].sum()) if len(points) else 0
    return LanesData(lanes, with_task_nodes(ref, points), events, list(run_ids), total)


# ---- the node that produced each checkpoint --------------------------------------------------

LOOP = "loop"  # LangGraph's metadata source of a checkpoint the graph's loop wrote (the node is in its parent's writes)


def with_task_nodes(ref: StoreRef, points: pd.DataFrame) -> pd.DataFrame:
    """``points`` whose node is only LangGraph's ``loop`` named by the nodes that produced them: the
    tasks that ran from their parent (the store's writes, readers.base.NamesTaskNodes), when the
    store's reader offers them and the points are shown one by one (never for buckets)."""
    if points.empty or points["checkpoint_id"].isna().any() or not (points["node"] == LOOP).any():
        return points
    runs = tuple(sorted(set(points["run_id"])))
    nodes = _task_nodes(ref.index_path, ref.url, runs, len(points), str(points["created_at"].max()))
    if not nodes:
        return points
    named = [nodes.get((r, n, p), node) if node == LOOP else node
             for r, n, p, node in zip(points["run_id"], points["namespace"], points["parent_id"], points["node"])]
    return points.assign(node=named)


@st.cache_data(ttl=CACHE_TTL, max_entries=32, show_spinner=False)
def _task_nodes(index_path: str, url: str, run_ids: tuple[str, ...], shown: int, newest: str
                ) -> dict[tuple[str, str, str], str]:
    """(run, namespace, checkpoint id) -> its tasks' nodes, from the store (cached per set of points:
    ``shown`` and ``newest`` only key the cache)."""
    try:
        reader = capability(cached_store(index_path, url).reader, NamesTaskNodes)
        found = reader.task_nodes(list(run_ids)) if reader is not None else {}
    except Exception:  # noqa: BLE001 - the store cannot be read now: the metadata's node stays
        return {}
    return {key: redact_text(", ".join(nodes)) for key, nodes in found.items()}


def problems(ref: StoreRef, run_ids: tuple[str, ...], filters: Filters) -> pd.DataFrame:
    """Damaged checkpoints and error/interrupt events of these runs, oldest first."""
    with guarded():
        return query(ref, "problems", run_ids, *filters.range)


def newest_problem(found: pd.DataFrame) -> dict[str, Any] | None:
    """Where an "Inspect" lands: the newest damaged checkpoint, else the newest problem event."""
    if found.empty:
        return None
    damaged = found[found["what"].isin([s.value for s in DAMAGED_STATUSES])]
    return (damaged if not damaged.empty else found).iloc[-1].to_dict()


def step_problem(found: pd.DataFrame, current: tuple[Any, str] | None, forward: bool) -> dict[str, Any] | None:
    """The problem after (``forward``) or before ``current`` — (time, checkpoint id) of the
    selection — in time order; without a selection, the first (forward) or the newest one."""
    if found.empty:
        return None
    keys = list(zip(found["created_at"], found["checkpoint_id"].fillna("")))
    if current is None:
        return found.iloc[0 if forward else -1].to_dict()
    if forward:
        later = [i for i, k in enumerate(keys) if k > current]
        return found.iloc[later[0]].to_dict() if later else None
    earlier = [i for i, k in enumerate(keys) if k < current]
    return found.iloc[earlier[-1]].to_dict() if earlier else None


# ---- a training run's logged metrics ------------------------------------------------------------


def has_metrics(ref: StoreRef) -> bool:
    """Whether the store's reader offers the runs' logged metrics (training layouts)."""
    try:
        return capability(cached_store(ref.index_path, ref.url).reader, HasMetrics) is not None
    except Exception:  # noqa: BLE001 - the store cannot be opened now: no metrics, the page says why elsewhere
        return False


def run_metrics(ref: StoreRef, run_id: str) -> pd.DataFrame:
    """``run_id``'s logged metrics (step, name, value), read from the store (cached)."""
    return _run_metrics(ref.index_path, ref.url, run_id)


@st.cache_data(ttl=CACHE_TTL, max_entries=16, show_spinner=False)
def _run_metrics(index_path: str, url: str, run_id: str) -> pd.DataFrame:
    import pandas as pd

    reader = capability(cached_store(index_path, url).reader, HasMetrics)
    try:
        found = reader.metrics(run_id) if reader is not None else []
    except Exception:  # noqa: BLE001 - a damaged trainer_state: no chart, never a traceback
        found = []
    return pd.DataFrame([(m.step, m.name, float(m.value)) for m in found], columns=["step", "name", "value"])
