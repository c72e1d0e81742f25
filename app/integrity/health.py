"""Health of runs: the *last good* checkpoint of each run.

Last good = the newest checkpoint of a run, not after its head, whose data check passed
(``verified = 'data'``), with no error finding, not quarantined or superseded,
and whose incremental chain is intact. Until a checkpoint's data check has run
it is *unverified*, never good. (Owned by the integrity work; recovery's
"restore last good" calls :func:`last_good`.)
"""

from __future__ import annotations

from typing import Any

from lastgood.index.catalog import Catalog, distinct_findings
from lastgood.readers.base import DAMAGED_STATUSES, Status, sql_status_counts, sql_statuses

# a head moved back (a native restore) bounds the run: what it moved away from is not its last good
_LAST_GOOD_SQL = f"""
WITH head_at AS (
    SELECT h.run_id, h.namespace, hc.created_at, hc.step, hc.checkpoint_id
    FROM heads h JOIN checkpoints hc ON hc.store_id = h.store_id AND hc.run_id = h.run_id
        AND hc.namespace = h.namespace AND hc.checkpoint_id = h.checkpoint_id
    WHERE h.store_id = $sid)
SELECT c.run_id, c.namespace, arg_max(c.checkpoint_id, (c.created_at, c.step, c.checkpoint_id))
FROM checkpoints c LEFT JOIN head_at ha ON ha.run_id = c.run_id AND ha.namespace = c.namespace
WHERE c.store_id = $sid AND c.status = {sql_statuses(Status.OK)} AND c.verified = 'data'
  AND (ha.run_id IS NULL OR (c.created_at, c.step, c.checkpoint_id) <= (ha.created_at, ha.step, ha.checkpoint_id))
  AND NOT EXISTS (SELECT 1 FROM findings f WHERE f.store_id = c.store_id AND f.severity = 'error'
                  AND f.checkpoint_id = c.checkpoint_id AND f.run_id = c.run_id
                  AND f.namespace = c.namespace)
  {{run_filter}}
GROUP BY c.run_id, c.namespace
"""


def last_good_by_run(catalog: Catalog, store_id: int,
                     run_id: str | None = None) -> dict[tuple[str, str], str]:
    """``{(run_id, namespace): checkpoint_id}`` for every run that has a good checkpoint."""
    params: dict[str, object] = {"sid": store_id}
    run_filter = ""
    if run_id is not None:
        run_filter, params["run"] = "AND c.run_id = $run", run_id
    with catalog.connect() as con:
        rows = con.execute(_LAST_GOOD_SQL.format(run_filter=run_filter), params).fetchall()
    return {(run, ns): cid for run, ns, cid in rows}


def last_good(catalog: Catalog, store_id: int, run_id: str, namespace: str = "") -> str | None:
    """The run's last good checkpoint id, or None when none has passed a data check."""
    return last_good_by_run(catalog, store_id, run_id).get((run_id, namespace))


_RUN_HEALTH_SQL = f"""
SELECT c.run_id, c.namespace, arg_max(c.agent, c.created_at) AS agent, count(*) AS checkpoints,
       {sql_status_counts("c.status")},
       count(*) FILTER (WHERE coalesce(c.verified, '') <> 'data'
                        AND c.status NOT IN {sql_statuses(*DAMAGED_STATUSES)}) AS unverified,
       max(c.created_at) AS last_at, any_value(h.checkpoint_id) AS head
FROM checkpoints c
LEFT JOIN heads h ON h.store_id = c.store_id AND h.run_id = c.run_id AND h.namespace = c.namespace
WHERE c.store_id = $sid {{run_filter}}
GROUP BY c.run_id, c.namespace
ORDER BY last_at DESC NULLS LAST, c.run_id, c.namespace
"""

_FINDING_COUNTS_SQL = """
SELECT run_id, coalesce(namespace, ''), count(*) FILTER (WHERE severity = 'error'),
       count(*) FILTER (WHERE severity = 'warning')
FROM """ + distinct_findings("store_id = $sid AND checkpoint_id IS NOT NULL {run_filter}") + """
GROUP BY ALL
"""

RUN_FIELDS = ("run_id", "namespace", "agent", "checkpoints", "ok", "corrupt", "incomplete", "quarantined",
              "superseded", "unverified", "last_good", "head", "errors", "warnings", "health")


def run_health(catalog: Catalog, store_id: int, run_id: str | None = None) -> list[dict[str, Any]]:
    """One row per run (and namespace): status counts, unverified, last good, head, findings.

    ``health`` is ``damaged`` (an error finding), ``unverified`` (no checkpoint
    has passed a data check yet), ``warnings`` or ``good``."""
    params: dict[str, object] = {"sid": store_id}
    run_filter = ""
    if run_id is not None:
        run_filter, params["run"] = "AND run_id = $run", run_id
    with catalog.connect() as con:
        cur = con.execute(_RUN_HEALTH_SQL.format(run_filter=run_filter.replace("run_id", "c.run_id")), params)
        names = [d[0] for d in cur.description]
        rows = [dict(zip(names, row)) for row in cur.fetchall()]
        counts = {(r, ns): (e, w) for r, ns, e, w in
                  con.execute(_FINDING_COUNTS_SQL.format(run_filter=run_filter), params).fetchall()}
    good = last_good_by_run(catalog, store_id, run_id)
    return [_run_row(row, good, counts) for row in rows]


def _run_row(row: dict[str, Any], good: dict[tuple[str, str], str],
             counts: dict[tuple[str, str], tuple[int, int]]) -> dict[str, Any]:
    key = (row["run_id"], row["namespace"])
    errors, warnings = counts.get(key, (0, 0))
    row.update(last_good=good.get(key), errors=int(errors), warnings=int(warnings))
    row["health"] = ("damaged" if errors or row["corrupt"] or row["incomplete"] else
                     "unverified" if row["last_good"] is None else "warnings" if warnings else "good")
    return {name: row[name] for name in RUN_FIELDS}
