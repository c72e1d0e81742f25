"""Health of runs: the *last good* checkpoint of each run.

Last good = the newest checkpoint of a run whose data check passed
(``verified = 'data'``), with no error finding, not quarantined or superseded,
and whose incremental chain is intact. Until a checkpoint's data check has run
it is *unverified*, never good. (Owned by the integrity work; recovery's
"restore last good" calls :func:`last_good`.)
"""

from __future__ import annotations

from lastgood.catalog import Catalog

_LAST_GOOD_SQL = """
SELECT c.run_id, c.namespace, arg_max(c.checkpoint_id, (c.created_at, c.step, c.checkpoint_id))
FROM checkpoints c
WHERE c.store_id = $sid AND c.status = 'ok' AND c.verified = 'data'
  AND NOT EXISTS (SELECT 1 FROM findings f WHERE f.store_id = c.store_id AND f.severity = 'error'
                  AND f.checkpoint_id = c.checkpoint_id AND f.run_id = c.run_id
                  AND f.namespace = c.namespace)
  {run_filter}
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
