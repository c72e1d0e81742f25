"""Read queries over the index for the CLI and the pages (aggregation happens in SQL)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from lastgood.index import attached
from lastgood.index.catalog import Catalog, distinct_findings
from lastgood.errors import AmbiguousCheckpoint, CheckpointNotFound
from lastgood.checks import Check
from lastgood.readers.base import CheckpointRecord, Finding, record_from_row
from lastgood.readers.base import DAMAGED_STATUSES, Status, sql_statuses
from lastgood.readers.common.gc_pause import gc_paused

if TYPE_CHECKING:  # pandas is imported only by the queries that return frames (fast CLI start)
    import pandas as pd

LS_FIELDS = ("run_id", "namespace", "checkpoint_id", "parent_id", "step", "created_at", "trigger",
             "kind", "status", "status_reason", "size_bytes")
# added to ``ls`` rows: false while the blob has not been decoded by a data check
# (the status then rests on the listing and structure checks alone)
LS_CHECK_FIELDS = ("data_checked",)
DEFAULT_MAX_POINTS = 3000


@dataclass
class Overview:
    """A store's numbers, counted one way for every page and the CLI (:func:`overview`)."""

    checkpoints: int = 0
    runs: int = 0
    agents: int = 0
    size_bytes: int = 0
    first_at: Any = None
    last_at: Any = None
    by_status: dict[str, int] = field(default_factory=dict)
    findings: dict[str, int] = field(default_factory=dict)  # by severity, one per checkpoint and check
    data_unread: int = 0  # checkpoints no data check has decoded yet: their status is from structure checks
    damaged_runs: int = 0  # runs ``lastgood runs`` calls damaged (DAMAGED_RUNS_SQL)
    store_findings: list[dict[str, Any]] = field(default_factory=list)  # about the store itself (redacted)

    @property
    def damaged(self) -> int:
        """Damaged checkpoints: corrupt or incomplete (what ``ls`` shows as not ok and unreadable)."""
        return sum(self.by_status.get(str(s), 0) for s in DAMAGED_STATUSES)

    @property
    def data_checked(self) -> int:
        """Checkpoints a data check has nothing more to read in: decoded by one, or damaged."""
        return self.checkpoints - self.data_unread


def _frame(catalog: Catalog, sql: str, params: Any = None) -> pd.DataFrame:
    """A small result as a DataFrame (built from rows: pages never fetch big results)."""
    import pandas as pd

    with catalog.connect() as con:
        cur = con.execute(sql, params or [])
        names = [d[0] for d in cur.description]
        return pd.DataFrame.from_records(cur.fetchall(), columns=names)


def _rows(catalog: Catalog, sql: str, params: Any = None) -> list[dict[str, Any]]:
    with catalog.connect() as con:
        cur = con.execute(sql, params or [])
        names = [d[0] for d in cur.description]
        with gc_paused():  # a million rows of `ls`: no collection rescans them while they are built
            return [dict(zip(names, row)) for row in cur.fetchall()]


def stores(catalog: Catalog) -> pd.DataFrame:
    """Every indexed store (``url`` may hold credentials: show ``display_url``)."""
    return _frame(catalog, """SELECT s.store_id, s.url, s.display_url, s.reader, s.indexed_at, s.verified_at,
        count(c.checkpoint_id) AS checkpoints, count(DISTINCT c.run_id) AS runs,
        coalesce(sum(c.size_bytes), 0) AS size_bytes
        FROM stores s LEFT JOIN checkpoints c USING (store_id)
        GROUP BY ALL ORDER BY s.store_id""")


def indexed_stores(catalog: Catalog) -> dict[str, int]:
    """url -> store_id for every store in the index."""
    return {r["url"]: int(r["store_id"]) for r in
            _rows(catalog, "SELECT store_id, url FROM stores ORDER BY store_id")}


HAS_STATE = f"status NOT IN {sql_statuses(*DAMAGED_STATUSES)}"  # what a data check could still read


def verification_depths(catalog: Catalog, store_id: int) -> dict[str, int]:
    """Checkpoints with a state to read, per depth of their last check: 'data', 'structure',
    'catalog' (blob files not walked) or 'never' (corrupt and incomplete ones not read by a data check
    are left out, as from the runs' ``unverified``: there is nothing more a data check could read)."""
    return {str(depth): int(n) for depth, n in _pairs(catalog, f"""SELECT coalesce(verified, 'never'),
        count(*) FROM checkpoints WHERE store_id = ? AND (verified = 'data' OR {HAS_STATE})
        GROUP BY ALL""", store_id)}


# what a listed checkpoint's row holds beyond LS_FIELDS, by name
LISTED_EXTRA = {"agent": "agent", "data_checked": "coalesce(verified = 'data', false)",
                "blobs_pending": "coalesce(verified = 'catalog', false)"}


# ``created_at`` as the text lastgood.cli.output prints for it, formatted by DuckDB (a million rows: the
# datetimes alone cost Python ~6 s): "table" as ``output._time`` (in the index session's zone), "json"
# as ``output.to_jsonable`` in a UTC session (elsewhere the offset is Python's to write)
TIME_TEXT = {
    "table": "strftime(created_at, '%Y-%m-%d %H:%M:%S')",
    "json": "strftime(created_at, '%Y-%m-%dT%H:%M:%S') || CASE strftime(created_at, '%f') WHEN '000000' "
            "THEN '' ELSE '.' || strftime(created_at, '%f') END || 'Z'",
}


def list_checkpoints(catalog: Catalog, store_id: int, run_id: str | None = None,
                     status: str | None = None, limit: int | None = None,
                     fields: tuple[str, ...] | None = None, time_text: str | None = None
                     ) -> list[dict[str, Any]]:
    """Checkpoints by run then time: LS_FIELDS and LISTED_EXTRA, or only ``fields`` (of those),
    in that order (the ``ls`` JSON shape is ``LS_FIELDS + LS_CHECK_FIELDS``); ``time_text``
    ("table" or "json"): ``created_at`` as the text that output prints for it (TIME_TEXT)."""
    return _rows(catalog, *listing_sql(catalog, store_id, run_id, status, limit, fields, time_text))


LISTING_CHUNK_ROWS = 65_536


def iter_checkpoints(catalog: Catalog, store_id: int, run_id: str | None = None,
                     status: str | None = None, fields: tuple[str, ...] | None = None,
                     time_text: str | None = None, chunk_rows: int = LISTING_CHUNK_ROWS
                     ) -> Iterator[list[dict[str, Any]]]:
    """:func:`list_checkpoints`, ``chunk_rows`` rows at a time: a million rows are never all
    Python dicts at once (``lastgood ls`` prints each chunk as it comes)."""
    sql, params = listing_sql(catalog, store_id, run_id, status, None, fields, time_text)
    with catalog.connect() as con:
        cur = con.execute(sql, params)
        names = [d[0] for d in cur.description]
        while rows := cur.fetchmany(chunk_rows):
            with gc_paused():
                chunk = [dict(zip(names, row)) for row in rows]
            yield chunk


def listing_sql(catalog: Catalog, store_id: int, run_id: str | None, status: str | None, limit: int | None,
                fields: tuple[str, ...] | None, time_text: str | None) -> tuple[str, list[Any]]:
    """(SQL, parameters) of the checkpoint listing :func:`list_checkpoints` reads, ordered by run,
    namespace and time (the MCP server pages it with its own LIMIT/OFFSET)."""
    where, params = where_clause(store_id, run_id=run_id, status=status)
    exprs = {**{f: f for f in LS_FIELDS}, **LISTED_EXTRA}
    if time_text == "table" or (time_text == "json" and _session_zone(catalog) == "UTC"):
        exprs["created_at"] = TIME_TEXT[time_text]
    select = ", ".join(exprs[f] if exprs[f] == f else f"{exprs[f]} AS {f}" for f in fields or exprs)
    # ordered by the table's columns (c.…): a bare name would be the select's alias, the time's text
    sql = f"""SELECT {select} FROM checkpoints c WHERE {where}
              ORDER BY c.run_id, c.namespace, c.created_at, c.step, c.checkpoint_id"""
    if limit:
        sql += f" LIMIT {int(limit)}"
    return sql, params


def _session_zone(catalog: Catalog) -> str:
    return str(_rows(catalog, "SELECT current_setting('TimeZone') AS zone")[0]["zone"])


def where_clause(store_id: int, **filters: Any) -> tuple[str, list[Any]]:
    """(SQL condition, parameters) over ``checkpoints``: the store and every filter given (column =
    value; a ``run_id`` may be the ``key:…`` handle of a secret-shaped run)."""
    clauses, params = ["store_id = ?"], [store_id]
    for column, value in filters.items():
        if value is None:
            continue
        if column == "run_id" and is_handle(value):  # a secret-shaped run, named by its handle
            clauses.append(f"(run_id = ? OR {_RUN_HANDLE_SQL} = ?)")
            params += [value, value[len(HANDLE_PREFIX):]]
        else:
            clauses.append(f"{column} = ?")
            params.append(value)
    return " AND ".join(clauses), params


def resolve_checkpoint(catalog: Catalog, store_id: int, ref: str) -> CheckpointRecord:
    """The checkpoint whose id is ``ref`` or starts with it (like git); ``RUN/ID`` picks one run's
    checkpoint when the same id exists in several runs, and ``RUN/ID@NS`` (or ``ID@NS``) one
    namespace's (LangGraph ``checkpoint_ns``; ``RUN/ID@`` is the root namespace) when the same id
    exists in several namespaces of a thread."""
    if not ref.strip():
        raise CheckpointNotFound("an empty checkpoint id: give an id or a unique prefix")
    rows = _matches(catalog, store_id, ref)
    if not rows:
        raise CheckpointNotFound(f"no checkpoint matches {ref!r}")
    if len({r["checkpoint_id"] for r in rows}) > 1:
        shown = ", ".join(r["checkpoint_id"] for r in rows[:5])
        raise AmbiguousCheckpoint(f"{ref!r} matches several checkpoints: {shown}… — give more characters")
    if len({(r["run_id"], r["namespace"]) for r in rows}) > 1:
        shown = ", ".join(checkpoint_ref(r["run_id"], r["namespace"], r["checkpoint_id"]) for r in rows[:5])
        where = "runs" if len({r["run_id"] for r in rows}) > 1 else "namespaces of one run"
        raise AmbiguousCheckpoint(f"checkpoint id {ref!r} exists in several {where}: give "
                                  f"{'RUN/ID' if where == 'runs' else 'RUN/ID@NS'} ({shown})")
    return record_from_row(rows[0])


def run_exists(catalog: Catalog, store_id: int, run_id: str, namespace: str | None = None) -> bool:
    """True when the store has a checkpoint in run ``run_id`` (in ``namespace``, if given)."""
    sql = "SELECT 1 FROM checkpoints WHERE store_id = ? AND run_id = ?"
    params: list[Any] = [store_id, run_id]
    if namespace is not None:
        sql, params = sql + " AND namespace = ?", [*params, namespace]
    with catalog.connect() as con:
        return con.execute(sql + " LIMIT 1", params).fetchone() is not None


def resolve_run(catalog: Catalog, store_id: int, run: str) -> str:
    """The run id ``run`` names: itself, or the run whose handle it is (:func:`run_handle`: pages and
    links name a secret-shaped run by it); CheckpointNotFound when the store has no such run."""
    if is_handle(run) and not run_exists(catalog, store_id, run):
        rows = _rows(catalog, f"""SELECT DISTINCT run_id FROM checkpoints WHERE store_id = ?
            AND {_RUN_HANDLE_SQL} = ? LIMIT 2""", [store_id, run[len(HANDLE_PREFIX):]])
        if len(rows) == 1:
            return str(rows[0]["run_id"])
    if not run_exists(catalog, store_id, run):
        raise CheckpointNotFound("no such run in this store (`lastgood runs STORE` lists them)")
    return run


def require_run(catalog: Catalog, store_id: int, run_id: str | None) -> None:
    """CheckpointNotFound (exit 2) for a ``--run`` the store does not have: a typo never reads
    as "no checkpoints"."""
    if run_id is not None and not run_exists(catalog, store_id, run_id):
        raise CheckpointNotFound(f"no run {run_id!r} in this store (`lastgood runs STORE` lists them)")


def checkpoint_ref(run_id: str, namespace: str, checkpoint_id: str) -> str:
    """The unambiguous name of a checkpoint: ``RUN/ID``, or ``RUN/ID@NS`` in a namespace."""
    return f"{run_id}/{checkpoint_id}" + (f"@{namespace}" if namespace else "")


HANDLE_PREFIX = "key:"
HANDLE_LENGTH = 24
_HANDLE_SQL = f"substr(sha256(run_id || chr(0) || namespace || chr(0) || checkpoint_id), 1, {HANDLE_LENGTH})"


def checkpoint_handle(run_id: str, namespace: str, checkpoint_id: str) -> str:
    """A non-secret name for a checkpoint (``key:`` + 24 hex digits of a sha256 of run, namespace
    and id): links use it when an id is secret-shaped, so no secret travels in a URL."""
    import hashlib

    digest = hashlib.sha256(f"{run_id}\0{namespace}\0{checkpoint_id}".encode("utf-8", "surrogatepass"))
    return HANDLE_PREFIX + digest.hexdigest()[:HANDLE_LENGTH]


_RUN_HANDLE_SQL = f"substr(sha256(run_id), 1, {HANDLE_LENGTH})"


def run_handle(run_id: str) -> str:
    """A non-secret name for a run (``key:`` + 24 hex digits of a sha256 of its id): pages show
    and select a secret-shaped run by it, and every query that filters by run accepts it."""
    import hashlib

    return HANDLE_PREFIX + hashlib.sha256(run_id.encode("utf-8", "surrogatepass")).hexdigest()[:HANDLE_LENGTH]


def is_handle(text: str) -> bool:
    digest = text[len(HANDLE_PREFIX):]
    return (text.startswith(HANDLE_PREFIX) and len(digest) == HANDLE_LENGTH
            and all(c in "0123456789abcdef" for c in digest))


def _by_handle(catalog: Catalog, store_id: int, ref: str) -> list[dict[str, Any]]:
    digest = ref[len(HANDLE_PREFIX):]
    if len(digest) != HANDLE_LENGTH or any(c not in "0123456789abcdef" for c in digest):
        return []
    return _rows(catalog, f"SELECT * FROM checkpoints WHERE store_id = ? AND {_HANDLE_SQL} = ? LIMIT 6",
                 [store_id, digest])


def _matches(catalog: Catalog, store_id: int, ref: str) -> list[dict[str, Any]]:
    if ref.startswith(HANDLE_PREFIX) and (found := _by_handle(catalog, store_id, ref)):
        return found
    exact = _rows(catalog, "SELECT * FROM checkpoints WHERE store_id = ? AND checkpoint_id = ? LIMIT 6",
                  [store_id, ref])
    if exact:
        return exact
    for i in (i for i, ch in enumerate(ref) if ch == "@"):  # RUN/ID@NS: NS may hold '@' too
        rows = _lookup(catalog, store_id, ref[:i], ref[i + 1:])
        if rows:
            return rows
    return _lookup(catalog, store_id, ref, None)


def _lookup(catalog: Catalog, store_id: int, ref: str, namespace: str | None) -> list[dict[str, Any]]:
    """Rows for ``ID``, ``RUN/ID`` or an id prefix, in ``namespace`` when given."""
    where, params = "store_id = ?", [store_id]
    if namespace is not None:
        where, params = where + " AND namespace = ?", params + [namespace]
    exact = _rows(catalog, f"SELECT * FROM checkpoints WHERE {where} AND checkpoint_id = ? LIMIT 6",
                  params + [ref]) if namespace is not None else []
    return exact or _run_qualified(catalog, where, params, ref) or _rows(catalog, f"""SELECT * FROM checkpoints
        WHERE {where} AND starts_with(checkpoint_id, ?) ORDER BY checkpoint_id LIMIT 6""", params + [ref])


def _run_qualified(catalog: Catalog, where: str, params: list[Any], ref: str) -> list[dict[str, Any]]:
    """Rows for ``RUN/ID``: an exact id first, then an id prefix. Either part may contain '/': each
    split of the reference is tried, the run's own id being the longest that names a run."""
    for i in sorted((i for i, ch in enumerate(ref) if ch == "/"), reverse=True):
        run_id, cid = ref[:i], ref[i + 1:]
        exact = _rows(catalog, f"SELECT * FROM checkpoints WHERE {where} AND run_id = ? AND checkpoint_id = ? "
                               "LIMIT 6", params + [run_id, cid])
        found = exact or _rows(catalog, f"""SELECT * FROM checkpoints WHERE {where} AND run_id = ?
            AND starts_with(checkpoint_id, ?) ORDER BY checkpoint_id LIMIT 6""", params + [run_id, cid])
        if found:
            return found
    return []


def duplicate_id_findings(catalog: Catalog, store_id: int) -> list[Finding]:
    """A warning on every checkpoint whose id is also used in another run or namespace (address it as
    RUN/ID or RUN/ID@NS)."""
    with catalog.connect() as con:
        known = attached.facts(con, store_id)
        if known is not None and not known["shared_ids"]:
            return []  # the attached part's one pass found every id once
        # hashes first: a 1M-row store costs ~0.2 s, not a string GROUP BY's ~0.8 s
        rows = con.execute("""WITH twice AS (
                SELECT hash(checkpoint_id) AS h FROM checkpoints WHERE store_id = $sid
                GROUP BY h HAVING count(*) > 1)
            SELECT run_id, namespace, checkpoint_id FROM checkpoints
            WHERE store_id = $sid AND hash(checkpoint_id) IN (SELECT h FROM twice)
            ORDER BY checkpoint_id, run_id LIMIT 10000""", {"sid": store_id}).fetchall()
    places: dict[str, set[tuple[str, str]]] = {}
    for run_id, namespace, cid in rows:
        places.setdefault(cid, set()).add((run_id, namespace))
    return [Finding(Check.DUPLICATE_ID, "warning", _duplicate_message(places[cid], run_id, namespace, cid),
                    run_id, namespace, cid)
            for run_id, namespace, cid in rows if len(places[cid]) > 1]


def _duplicate_message(places: set[tuple[str, str]], run_id: str, namespace: str, cid: str) -> str:
    runs = {run for run, _ in places}
    where = f"{len(runs)} runs" if len(runs) > 1 else f"{len(places)} namespaces of this run"
    form = "RUN/ID@NS" if namespace or len(runs) == 1 else "RUN/ID"
    return f"checkpoint id is used in {where}: address it as {form} ({checkpoint_ref(run_id, namespace, cid)})"


# the runs every page, ``lastgood runs`` (health "damaged") and the Overview call damaged: a corrupt or
# incomplete checkpoint, or an error finding on one of its checkpoints (a finding about the store itself
# belongs to no run)
DAMAGED_RUNS_SQL = f"""SELECT run_id FROM checkpoints WHERE store_id = $sid AND status IN {sql_statuses(*DAMAGED_STATUSES)}
    UNION SELECT f.run_id FROM findings f WHERE f.store_id = $sid AND f.severity = 'error'
        AND f.checkpoint_id IS NOT NULL AND EXISTS (SELECT 1 FROM checkpoints c WHERE c.store_id = $sid
            AND c.run_id = f.run_id AND c.namespace = coalesce(f.namespace, ''))"""
STORE_FINDINGS_SHOWN = 20


def overview(catalog: Catalog, store_id: int) -> Overview:
    """The store's numbers as every page and the CLI count them: checkpoints by status (damaged:
    corrupt or incomplete), runs and damaged runs (DAMAGED_RUNS_SQL), findings by severity (one per
    checkpoint and check, as ``verify`` lists them), those about the store itself, what a data
    check has still to read."""
    params = {"sid": store_id}
    with catalog.connect() as con:
        cur = con.execute(f"""SELECT count(*) AS checkpoints, count(DISTINCT run_id) AS runs,
            count(DISTINCT agent) AS agents, coalesce(sum(size_bytes), 0) AS size_bytes,
            min(created_at) AS first_at, max(created_at) AS last_at,
            count(*) FILTER (WHERE verified IS DISTINCT FROM 'data' AND {HAS_STATE}) AS data_unread
            FROM checkpoints WHERE store_id = $sid""", params)
        row = dict(zip([d[0] for d in cur.description], cur.fetchone()))
        result = Overview(**{k: v for k, v in row.items() if v is not None})
        result.by_status = dict(con.execute("""SELECT status, count(*) FROM checkpoints
            WHERE store_id = $sid GROUP BY status ORDER BY 2 DESC""", params).fetchall())
        counts = con.execute(f"""SELECT severity, count(*), count(*) FILTER (WHERE checkpoint_id IS NULL)
            FROM {distinct_findings("store_id = $sid")} GROUP BY severity""", params).fetchall()
        result.findings = {severity: n for severity, n, _ in counts}
        if result.damaged or result.findings.get("error"):  # else none: the usual case skips the query
            result.damaged_runs = con.execute(f"SELECT count(DISTINCT run_id) FROM ({DAMAGED_RUNS_SQL})",
                                              params).fetchone()[0]
        if any(on_store for *_, on_store in counts):
            result.store_findings = _store_findings(con, store_id)
    return result


def _store_findings(con: Any, store_id: int) -> list[dict[str, Any]]:
    """The findings about the store itself (no checkpoint: a malformed catalog line…), errors first."""
    from lastgood.redact import redact_text  # messages quote store contents

    cur = con.execute(f"""SELECT "check", severity, message, depth FROM {distinct_findings("store_id = $sid")}
        WHERE checkpoint_id IS NULL ORDER BY CASE severity WHEN 'error' THEN 0 WHEN 'warning' THEN 1 ELSE 2 END,
        "check", message LIMIT {STORE_FINDINGS_SHOWN}""", {"sid": store_id})
    return [{"check": c, "severity": s, "message": redact_text(m) if isinstance(m, str) else m, "depth": d}
            for c, s, m, d in cur.fetchall()]


def _pairs(catalog: Catalog, sql: str, store_id: int) -> list[tuple[Any, Any]]:
    with catalog.connect() as con:
        return con.execute(sql, [store_id]).fetchall()


# every run with its head, most recent first (the Timeline's frame, the Overview's Arrow table)
RUNS_SQL = """SELECT r.* REPLACE (CAST(r.size_bytes AS BIGINT) AS size_bytes),
    h.checkpoint_id AS head FROM runs r
    LEFT JOIN heads h ON h.store_id = r.store_id AND h.run_id = r.run_id AND h.namespace = ''
    WHERE r.store_id = ? ORDER BY r.last_at DESC"""


def runs(catalog: Catalog, store_id: int) -> pd.DataFrame:
    return _frame(catalog, RUNS_SQL, [store_id])


def timeline(catalog: Catalog, store_id: int, run_id: str | None = None, agent: str | None = None,
             max_points: int = DEFAULT_MAX_POINTS) -> tuple[pd.DataFrame, bool]:
    """Points for the timeline; bucketed in SQL when there are more than ``max_points``.

    Returns the frame and whether it was aggregated (then ``count`` says how
    many checkpoints a point stands for; damaged ones are always shown alone).
    """
    where, params = where_clause(store_id, run_id=run_id, agent=agent)
    total = int(_rows(catalog, f"SELECT count(*) AS n FROM checkpoints WHERE {where}", params)[0]["n"])
    if total <= max_points:
        return _frame(catalog, f"""SELECT c.run_id, c.namespace, c.checkpoint_id, c.parent_id, c.step,
            c.created_at, c.trigger, c.kind, c.status, c.status_reason, c.size_bytes, c.agent, 1 AS count,
            coalesce(c.verified = 'data', false) AS data_checked,
            s.added AS step_added, s.removed AS step_removed, s.changed AS step_changed,
            s.paths AS step_paths
            FROM (SELECT * FROM checkpoints WHERE {where}) c
            LEFT JOIN step_changes s ON s.store_id = c.store_id AND s.run_id = c.run_id
                 AND s.namespace = c.namespace AND s.checkpoint_id = c.checkpoint_id
            ORDER BY c.created_at""", params), False
    return _bucketed(catalog, where, params, max_points), True


def _bucketed(catalog: Catalog, where: str, params: list[Any], max_points: int) -> pd.DataFrame:
    buckets = max(max_points // 12, 10)
    sql = f"""WITH sel AS (SELECT * FROM checkpoints WHERE {where}),
        span AS (SELECT min(epoch(created_at)) AS lo,
                 greatest(max(epoch(created_at)) - min(epoch(created_at)), 1) / {buckets} AS width FROM sel)
        SELECT to_timestamp(lo + floor((epoch(created_at) - lo) / width) * width) AS created_at,
               trigger, status, count(*) AS count, sum(size_bytes) AS size_bytes,
               count(DISTINCT run_id) AS runs, min(step) AS step, NULL AS checkpoint_id,
               run_id, NULL AS status_reason
        FROM sel, span WHERE status = {sql_statuses(Status.OK)} GROUP BY ALL
        UNION ALL
        SELECT * FROM (SELECT created_at, trigger, status, 1, size_bytes, 1, step, checkpoint_id,
               run_id, status_reason FROM sel WHERE status <> {sql_statuses(Status.OK)} ORDER BY created_at DESC
               LIMIT {max_points // 2})
        ORDER BY created_at"""
    return _frame(catalog, sql, params)


def events(catalog: Catalog, store_id: int, run_id: str | None = None,
           checkpoint_id: str | None = None, agent: str | None = None,
           limit: int = 2000) -> pd.DataFrame:
    where, params = where_clause(store_id, run_id=run_id, checkpoint_id=checkpoint_id)
    if agent is not None:
        where += " AND run_id IN (SELECT run_id FROM runs WHERE store_id = ? AND agent = ?)"
        params += [store_id, agent]
    return _frame(catalog, f"""SELECT created_at, run_id, namespace, checkpoint_id, kind, channel,
        task_id, message FROM events WHERE {where} ORDER BY created_at DESC LIMIT {int(limit)}""", params
                  ).iloc[::-1].reset_index(drop=True)


def checkpoint_events(catalog: Catalog, store_id: int, run_id: str, namespace: str,
                      checkpoint_id: str) -> list[dict[str, Any]]:
    """One checkpoint's events as plain rows (``show``: no pandas to import)."""
    return _rows(catalog, """SELECT created_at, run_id, namespace, checkpoint_id, kind, channel, task_id, message
        FROM events WHERE store_id = ? AND run_id = ? AND namespace = ? AND checkpoint_id = ?
        ORDER BY created_at LIMIT 2000""", [store_id, run_id, namespace, checkpoint_id])


def findings(catalog: Catalog, store_id: int, checkpoint_id: str | None = None,
             severity: str | None = None) -> list[dict[str, Any]]:
    where, params = where_clause(store_id, checkpoint_id=checkpoint_id, severity=severity)
    return _rows(catalog, f"""SELECT run_id, namespace, checkpoint_id, "check", severity, message
        FROM {distinct_findings(where)} ORDER BY severity, run_id, checkpoint_id""", params)


def store_findings(catalog: Catalog, store_id: int) -> list[dict[str, Any]]:
    """Findings about the store itself (e.g. malformed catalog lines), not one checkpoint."""
    return _rows(catalog, """SELECT run_id, namespace, checkpoint_id, "check", severity, message
        FROM findings WHERE store_id = ? AND checkpoint_id IS NULL ORDER BY message""", [store_id])


def head_of(catalog: Catalog, store_id: int, run_id: str, namespace: str = "") -> str | None:
    rows = _rows(catalog, """SELECT checkpoint_id FROM heads WHERE store_id = ? AND run_id = ?
        AND namespace = ?""", [store_id, run_id, namespace])
    return rows[0]["checkpoint_id"] if rows else None


def checkpoint_fields(record: CheckpointRecord) -> dict[str, Any]:
    """The ``ls`` fields plus metadata and storage details for ``show``."""
    out = {name: getattr(record, name) for name in LS_FIELDS}
    out.update(agent=record.agent, checksum=record.checksum, codec=record.codec,
               location=record.location, metadata=dict(record.metadata))
    return out


def data_checked(catalog: Catalog, store_id: int, record: CheckpointRecord) -> bool:
    """Whether a data check decoded this checkpoint's blob (``ls``'s ``data_checked``)."""
    with catalog.connect() as con:
        row = con.execute("""SELECT coalesce(bool_or(verified = 'data'), false) FROM checkpoints
            WHERE store_id = ? AND run_id = ? AND namespace = ? AND checkpoint_id = ?""",
                          [store_id, record.run_id, record.namespace, record.checkpoint_id]).fetchone()
    return bool(row[0])


def metadata_json(record: CheckpointRecord) -> str:
    return json.dumps(dict(record.metadata), sort_keys=True, default=str)
