"""The Timeline's queries over the index: runs as lanes (a run's namespaces and forks), their
points (healthy checkpoints bucketed in SQL beyond a limit, so a million checkpoints never leave the
database one by one), their events and the journal's recovery actions, the problems "next /
previous problem" steps through, the search box, and the runs waiting on a human."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from lastgood.index.catalog import Catalog
from lastgood.index.queries import (_HANDLE_SQL, DEFAULT_MAX_POINTS, HANDLE_LENGTH, HANDLE_PREFIX, _frame, _rows,
                                    is_handle)
from lastgood.readers.base import DAMAGED_STATUSES, Status, sql_statuses

if TYPE_CHECKING:
    import pandas as pd

MAX_LANES = 20  # the Timeline's default: lanes for this many of the most recent runs
PROBLEM_EVENTS = ("error", "crash", "failure", "interrupt")  # events "next problem" stops at
JOURNAL_ACTIONS = ("restore", "rollback", "quarantine", "release", "undo")  # drawn on the events band
# the node, method or tool that produced a checkpoint, from its metadata: LangGraph's ``writes`` (the
# nodes that wrote), the frameworks' names (pydantic-graph's node, CrewAI's method, OpenAI's tool, ADK's
# author, Agno's agent, the native store's event), else LangGraph's ``source`` or the trigger
NODE_SQL = """coalesce(nullif(array_to_string(json_keys(c.metadata->'writes'), ', '), ''),
    c.metadata->>'node', c.metadata->>'node_id', c.metadata->>'method', c.metadata->>'tool',
    c.metadata->>'author', c.metadata->>'agent_name', c.metadata->>'event', c.metadata->>'source', c.trigger)"""
_DAMAGED_SQL = sql_statuses(*DAMAGED_STATUSES)


def _runs_in(run_ids: tuple[str, ...] | list[str], column: str = "run_id") -> tuple[str, list[Any]]:
    """``column`` among ``run_ids`` (each an id or its handle, :func:`run_handle`)."""
    if not run_ids:
        return "false", []
    marks = ", ".join("?" for _ in run_ids)
    clause, params = f"{column} IN ({marks})", list(run_ids)
    handles = [r[len(HANDLE_PREFIX):] for r in run_ids if is_handle(r)]
    if handles:
        clause = f"({clause} OR substr(sha256({column}), 1, {HANDLE_LENGTH}) IN ({', '.join('?' for _ in handles)}))"
        params += handles
    return clause, params


def _in_range(since: Any, until: Any, column: str = "created_at") -> tuple[str, list[Any]]:
    clauses, params = [], []
    if since is not None:
        clauses.append(f"{column} >= ?")
        params.append(since)
    if until is not None:
        clauses.append(f"{column} <= ?")
        params.append(until)
    return "".join(f" AND {c}" for c in clauses), params


def lanes(catalog: Catalog, store_id: int, run_ids: tuple[str, ...], since: Any = None,
          until: Any = None) -> pd.DataFrame:
    """One row per lane of these runs — a run's root namespace and each of its other namespaces
    (LangGraph subgraphs, OpenAI branches) — with its span (first/last time and step), counts, head,
    and, for a namespace, the checkpoint it started from (LangGraph's ``parents``) and where it is."""
    runs_sql, params = _runs_in(run_ids)
    range_sql, range_params = _in_range(since, until)
    return _frame(catalog, f"""WITH sel AS (SELECT run_id, namespace, created_at, step, status, metadata
            FROM checkpoints WHERE store_id = ? AND {runs_sql}{range_sql}),
        lane AS (SELECT run_id, namespace, min(created_at) AS first_at, max(created_at) AS last_at,
            min(step) AS first_step, max(step) AS last_step, count(*) AS checkpoints,
            count(*) FILTER (WHERE status IN {_DAMAGED_SQL}) AS damaged,
            arg_min(json_extract_string(metadata, '$.parents.*')[-1], created_at) AS parent_checkpoint,
            arg_min(json_keys(metadata->'parents')[-1], created_at) AS parent_namespace
            FROM sel GROUP BY run_id, namespace)
        SELECT l.* REPLACE (CASE WHEN l.namespace = '' THEN NULL ELSE l.parent_checkpoint END AS parent_checkpoint),
            h.checkpoint_id AS head, p.created_at AS parent_at, p.step AS parent_step
        FROM lane l
        LEFT JOIN heads h ON h.store_id = ? AND h.run_id = l.run_id AND h.namespace = l.namespace
        LEFT JOIN checkpoints p ON p.store_id = ? AND p.run_id = l.run_id AND l.namespace <> ''
             AND p.namespace = coalesce(l.parent_namespace, '') AND p.checkpoint_id = l.parent_checkpoint
        ORDER BY l.run_id, l.namespace <> '', l.first_at, l.namespace""",
                  [store_id, *params, *range_params, store_id, store_id])


def lane_points(catalog: Catalog, store_id: int, run_ids: tuple[str, ...], since: Any = None,
                until: Any = None, max_points: int = DEFAULT_MAX_POINTS) -> pd.DataFrame:
    """The checkpoints of these runs' lanes, oldest first, each with the node that produced it
    (NODE_SQL), whether it is its lane's head, and whether it is a fork (its parent is in its lane
    and had an earlier child: ``parent_at``/``parent_step`` say where that parent is).
    Beyond ``max_points``, healthy checkpoints are bucketed in time per lane (``count`` says how many
    a row stands for, ``checkpoint_id`` is NULL); damaged, marked, fork and head checkpoints stay
    one by one (the newest ``max_points // 2``)."""
    runs_sql, params = _runs_in(run_ids)
    range_sql, range_params = _in_range(since, until)
    params = [store_id, *params, *range_params]
    total, lanes_n = _rows(catalog, f"""SELECT count(*) AS n, count(DISTINCT (run_id, namespace)) AS lanes
        FROM checkpoints WHERE store_id = ? AND {runs_sql}{range_sql}""", params)[0].values()
    # no window over a whole lane (one sort of a million rows): a fork is a checkpoint that is not
    # its parent's first child in time, so only parents with several children are looked at
    marked = f"""WITH sel AS MATERIALIZED (SELECT c.store_id, c.run_id, c.namespace, c.checkpoint_id, c.parent_id, c.step,
                c.created_at, c.trigger, c.status, c.verified, c.size_bytes, c.agent
                FROM checkpoints c WHERE c.store_id = ? AND {runs_sql}{range_sql}),
        multi AS (SELECT run_id, namespace, parent_id FROM sel WHERE parent_id IS NOT NULL
            GROUP BY ALL HAVING count(*) > 1),
        later AS (SELECT * FROM (SELECT s.run_id, s.namespace, s.checkpoint_id, s.parent_id,
                row_number() OVER (PARTITION BY s.run_id, s.namespace, s.parent_id ORDER BY s.created_at, s.checkpoint_id)
                AS nth FROM sel s JOIN multi m USING (run_id, namespace, parent_id)) WHERE nth > 1),
        forks AS (SELECT s.run_id, s.namespace, s.checkpoint_id, p.created_at AS parent_at, p.step AS parent_step
            FROM later s JOIN sel p ON p.run_id = s.run_id AND p.namespace = s.namespace AND p.checkpoint_id = s.parent_id),
        marked AS (SELECT s.*, f.checkpoint_id IS NOT NULL AS fork, f.parent_at, f.parent_step,
                h.checkpoint_id IS NOT NULL AS is_head
            FROM sel s
            LEFT JOIN forks f ON f.run_id = s.run_id AND f.namespace = s.namespace AND f.checkpoint_id = s.checkpoint_id
            LEFT JOIN heads h ON h.store_id = s.store_id AND h.run_id = s.run_id AND h.namespace = s.namespace
                 AND h.checkpoint_id = s.checkpoint_id)"""
    # a point shown one by one: its metadata (for its node), kind and reason read for it alone
    one = f"""m.run_id, m.namespace, m.checkpoint_id, m.parent_id, m.step, m.created_at, m.trigger, c.kind, m.status,
        c.status_reason, m.size_bytes, m.agent, 1 AS count, coalesce(m.verified = 'data', false) AS data_checked,
        {NODE_SQL} AS node, m.fork, m.parent_at, m.parent_step, m.is_head"""
    detail = """JOIN checkpoints c ON c.store_id = m.store_id AND c.run_id = m.run_id AND c.namespace = m.namespace
        AND c.checkpoint_id = m.checkpoint_id"""
    if int(total) <= max_points:
        return _frame(catalog, f"""{marked} SELECT o.*, s.added AS step_added, s.removed AS step_removed,
                s.changed AS step_changed, s.paths AS step_paths
            FROM (SELECT {one} FROM marked m {detail}) o LEFT JOIN step_changes s ON s.store_id = ? AND s.run_id = o.run_id
                 AND s.namespace = o.namespace AND s.checkpoint_id = o.checkpoint_id
            ORDER BY o.created_at, o.checkpoint_id""", [*params, store_id])
    buckets = min(max(max_points // (2 * max(int(lanes_n), 1)), 8), 400)
    ok = sql_statuses(Status.OK)
    return _frame(catalog, f"""{marked},
        span AS (SELECT min(epoch(created_at)) AS lo,
                 greatest(max(epoch(created_at)) - min(epoch(created_at)), 1) / {buckets} AS width FROM sel)
        SELECT run_id, namespace, NULL AS checkpoint_id, NULL AS parent_id, min(step) AS step,
            to_timestamp(lo + floor((epoch(created_at) - lo) / width) * width) AS created_at,
            mode(trigger) AS trigger, NULL AS kind, {ok} AS status, NULL AS status_reason,
            sum(size_bytes) AS size_bytes, any_value(agent) AS agent, count(*) AS count,
            bool_and(coalesce(verified = 'data', false)) AS data_checked, NULL AS node, false AS fork,
            NULL AS parent_at, NULL AS parent_step, false AS is_head
        FROM marked, span WHERE status = {ok} AND NOT fork AND NOT is_head
        GROUP BY run_id, namespace, lo, width, floor((epoch(created_at) - lo) / width)
        UNION ALL
        SELECT {one} FROM (SELECT * FROM marked WHERE status <> {ok} OR fork OR is_head
                           ORDER BY created_at DESC LIMIT {max_points // 2}) m {detail}
        ORDER BY created_at""", params)


def lane_events(catalog: Catalog, store_id: int, run_ids: tuple[str, ...], since: Any = None,
                until: Any = None, limit: int = 2000) -> pd.DataFrame:
    """The events of these runs and the recovery actions of the store's journal on them (``source``
    'journal': kind is the action, ``checkpoint_id`` the new head or the marked checkpoint), the
    newest ``limit``, oldest first."""
    runs_sql, params = _runs_in(run_ids)
    range_sql, range_params = _in_range(since, until)
    journal_range, journal_params = _in_range(since, until, "acted_at")
    actions = ", ".join(f"'{a}'" for a in JOURNAL_ACTIONS)
    return _frame(catalog, f"""SELECT * FROM (
        SELECT created_at, run_id, coalesce(namespace, '') AS namespace, checkpoint_id, kind, message,
               'event' AS source FROM events WHERE store_id = ? AND {runs_sql}{range_sql}
        UNION ALL
        SELECT acted_at, run_id, coalesce(namespace, ''), coalesce(new_head, target), action,
               action || coalesce(' of ' || target, '') || coalesce(': head ' || previous_head || ' → ' || new_head, '')
               || coalesce(' · ' || reason, '') || coalesce(' (by ' || operator || ')', ''), 'journal'
        FROM journal WHERE store_id = ? AND action IN ({actions}) AND {runs_sql}{journal_range}
        ORDER BY 1 DESC LIMIT {int(limit)}) ORDER BY created_at""",
                  [store_id, *params, *range_params, store_id, *params, *journal_params])


def problems(catalog: Catalog, store_id: int, run_ids: tuple[str, ...], since: Any = None,
             until: Any = None, limit: int = 5000) -> pd.DataFrame:
    """What "next/previous problem" steps through, oldest first: damaged checkpoints and the
    checkpoints of error, crash, failure and interrupt events (PROBLEM_EVENTS) in these runs (the
    newest ``limit``). ``what`` is the status or the event's kind, ``detail`` its reason or message."""
    runs_sql, params = _runs_in(run_ids)
    range_sql, range_params = _in_range(since, until)
    kinds = ", ".join(f"'{k}'" for k in PROBLEM_EVENTS)
    return _frame(catalog, f"""SELECT * FROM (
        SELECT created_at, run_id, namespace, checkpoint_id, status AS what, status_reason AS detail
        FROM checkpoints WHERE store_id = ? AND status IN {_DAMAGED_SQL} AND {runs_sql}{range_sql}
        UNION ALL
        SELECT e.created_at, e.run_id, coalesce(e.namespace, ''), e.checkpoint_id, e.kind, e.message
        FROM events e WHERE e.store_id = ? AND e.kind IN ({kinds}) AND e.checkpoint_id IS NOT NULL
             AND {runs_sql.replace('run_id', 'e.run_id')}{range_sql.replace('created_at', 'e.created_at')}
        ORDER BY 1 DESC, 4 DESC LIMIT {int(limit)}) ORDER BY created_at, checkpoint_id""",
                  [store_id, *params, *range_params, store_id, *params, *range_params])


SEARCH_LIMIT = 50


def search(catalog: Catalog, store_id: int, text: str, limit: int = SEARCH_LIMIT) -> pd.DataFrame:
    """Runs and checkpoints matching the search box, best first: ``key=value`` (or ``a.b=value``)
    matches checkpoints whose metadata holds that value at that path (a JSON value, or its text);
    anything else matches a run id or agent (exactly, by prefix, or containing it, case-insensitive)
    and a checkpoint id by prefix (or its handle). ``hit`` says what matched ('run', 'agent',
    'checkpoint', 'metadata')."""
    text = text.strip()
    if not text:
        return _frame(catalog, "SELECT NULL AS hit WHERE false")
    key, eq, value = text.partition("=")
    if eq and key.strip() and " " not in key.strip():
        return _metadata_hits(catalog, store_id, key.strip(), value.strip(), limit)
    like = "%" + text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_").lower() + "%"
    handle = text[len(HANDLE_PREFIX):] if is_handle(text) else None
    return _frame(catalog, f"""SELECT * FROM (
        SELECT CASE WHEN lower(r.run_id) LIKE ? ESCAPE '\\' OR r.run_id = ? THEN 'run' ELSE 'agent' END AS hit,
            r.run_id, '' AS namespace, h.checkpoint_id, r.agent, r.last_at AS created_at,
            CASE WHEN r.corrupt + r.incomplete > 0 THEN 'damaged' ELSE 'ok' END AS status,
            CASE WHEN r.run_id = ? OR substr(sha256(r.run_id), 1, {HANDLE_LENGTH}) = ? THEN 0
                 WHEN starts_with(lower(r.run_id), lower(?)) THEN 1 ELSE 2 END AS rank, r.checkpoints
        FROM runs r LEFT JOIN heads h ON h.store_id = r.store_id AND h.run_id = r.run_id AND h.namespace = ''
        WHERE r.store_id = ? AND (lower(r.run_id) LIKE ? ESCAPE '\\' OR lower(coalesce(r.agent, '')) LIKE ? ESCAPE '\\'
              OR substr(sha256(r.run_id), 1, {HANDLE_LENGTH}) = ?)
        UNION ALL
        SELECT * FROM (SELECT 'checkpoint', run_id, namespace, checkpoint_id, agent, created_at, status,
            CASE WHEN checkpoint_id = ? THEN 0 ELSE 1 END, 1
            FROM checkpoints WHERE store_id = ? AND (starts_with(checkpoint_id, ?) OR {_HANDLE_SQL} = ?)
            ORDER BY checkpoint_id LIMIT ?))
        ORDER BY rank, hit = 'agent', created_at DESC LIMIT ?""",
                  [like, text, text, handle, text, store_id, like, like, handle,
                   text, store_id, text, handle, limit, limit])


def _metadata_hits(catalog: Catalog, store_id: int, key: str, value: str, limit: int) -> pd.DataFrame:
    path = "$." + ".".join(f'"{part}"' for part in key.replace('"', "").split(".") if part)
    return _frame(catalog, """SELECT 'metadata' AS hit, run_id, namespace, checkpoint_id, agent, created_at,
            status, 0 AS rank, 1 AS checkpoints
        FROM checkpoints WHERE store_id = ? AND (json_extract_string(metadata, ?) = ?
             OR CAST(json_extract(metadata, ?) AS VARCHAR) = ?)
        ORDER BY created_at DESC LIMIT ?""", [store_id, path, value, path, value, limit])


def waiting_runs(catalog: Catalog, store_id: int, limit: int = 200) -> pd.DataFrame:
    """Runs waiting on a human: their newest interrupt (LangGraph's ``interrupt()``, a framework's
    pause) has no resume event at or after it and no checkpoint after it in its namespace. With the
    question asked (the event's message), the longest waiting first."""
    return _frame(catalog, f"""WITH asked AS (
            SELECT run_id, coalesce(namespace, '') AS namespace,
                   arg_max(checkpoint_id, created_at) AS checkpoint_id, max(created_at) AS asked_at,
                   arg_max(message, created_at) AS question
            FROM events WHERE store_id = $sid AND kind = 'interrupt' GROUP BY ALL),
        later AS (SELECT run_id, namespace, max(created_at) AS last_at, arg_max(agent, created_at) AS agent
            FROM checkpoints WHERE store_id = $sid AND run_id IN (SELECT run_id FROM asked) GROUP BY ALL),
        answered AS (SELECT e.run_id, coalesce(e.namespace, '') AS namespace, max(e.created_at) AS at
            FROM events e WHERE e.store_id = $sid AND e.kind = 'resume' GROUP BY ALL)
        SELECT a.run_id, a.namespace, a.checkpoint_id, a.asked_at, a.question, l.agent
        FROM asked a LEFT JOIN later l USING (run_id, namespace) LEFT JOIN answered r USING (run_id, namespace)
        WHERE (r.at IS NULL OR r.at < a.asked_at) AND (l.last_at IS NULL OR l.last_at <= a.asked_at)
        ORDER BY a.asked_at LIMIT {int(limit)}""", {"sid": store_id})
