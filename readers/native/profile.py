"""One pass over a compacted part that validates it and says what else there is to find.

A cold index of a big native store used to read its part six times: validation, events,
the catalog-level structure check, parents, ids shared by runs, size spikes (~1.5 s per
million rows). :func:`part_profile` reads it once (~0.6 s) and returns, besides whether
every row is valid, the counts those checks start from. A count of zero lets a check skip
its own pass (there is nothing it could find); any other count sends it down its usual,
exact path. Each count is a superset of what its check reports, never less.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

from lastgood.readers.native import format as nf
from lastgood.readers.native.structure import PLAIN_LOCATION_SQL
from lastgood.readers.common.validate import BAD_ROW_SQL


@dataclass(frozen=True)
class PartProfile:
    """What one pass over a valid part found (every field a count unless named otherwise)."""

    rows: int
    unclean: int  # rows the catalog-level structure check would look at (codec, location)
    events: int  # rows whose metadata may carry an event
    orphans: int  # parent ids not in the part's same run and namespace
    backwards: int  # parents whose step is not below a child's (or a step is missing)
    shared_ids: int  # checkpoint ids (by hash: a collision only over-counts) in more than one place
    # (checkpoints with a size, median size, largest size) per run and namespace
    run_sizes: list[tuple[int, float, int]] = field(default_factory=list)

    def facts(self) -> dict[str, Any]:
        """The counts the index's own checks start from (kept with an attached part)."""
        return {"orphans": self.orphans, "backwards": self.backwards, "shared_ids": self.shared_ids,
                "run_sizes": self.run_sizes}


_CODECS = ", ".join("'" + codec.replace("'", "''") + "'" for codec in nf.CODECS)  # a literal list: ~0.15 s less than a subquery
# parents are matched to ids by two 64-bit hashes of (run, namespace, id): a wrong match needs
# both to collide (~1e-26 for a million ids), and each repeats only ever over-counts
_PROFILE_SQL = f"""
WITH p AS MATERIALIZED (
    SELECT run_id, coalesce(namespace, '') AS ns, checkpoint_id, parent_id, step, size_bytes,
           ({BAD_ROW_SQL}) AS bad,
           NOT coalesce(codec IN ({_CODECS}) AND {PLAIN_LOCATION_SQL}, false) AS unclean,
           metadata LIKE '%"event"%' AS event
    FROM read_parquet($path)),
ends AS (
    SELECT run_id, ns, checkpoint_id AS id, step, 0 AS side FROM p
    UNION ALL SELECT run_id, ns, parent_id, step, 1 FROM p WHERE parent_id IS NOT NULL),
ids AS (
    SELECT count(*) FILTER (WHERE side = 0) AS selves, max(step) FILTER (WHERE side = 0) AS own_step,
           min(step) FILTER (WHERE side = 1) AS child_step,
           count(*) FILTER (WHERE step IS NULL) AS no_step
    FROM ends GROUP BY hash(run_id, ns, id), hash(id, ns, run_id)),
runs AS (
    SELECT count(size_bytes) AS n, median(size_bytes) AS median, max(size_bytes) AS biggest
    FROM p GROUP BY run_id, ns HAVING count(size_bytes) > 0)
SELECT (SELECT count(*) FROM p), (SELECT count(*) FILTER (WHERE bad) FROM p),
       (SELECT count(*) FILTER (WHERE unclean) FROM p), (SELECT count(*) FILTER (WHERE event) FROM p),
       (SELECT count(*) FILTER (WHERE selves > 1) FROM ids),
       (SELECT count(*) FILTER (WHERE selves = 0) FROM ids),
       (SELECT count(*) FILTER (WHERE selves = 1 AND (no_step > 0 OR child_step <= own_step)) FROM ids),
       (SELECT count(*) FROM (SELECT hash(checkpoint_id) AS h FROM p GROUP BY h HAVING count(*) > 1)),
       (SELECT list({{'n': n, 'median': median, 'biggest': biggest}}) FROM runs)
"""


_scratch_db: Any = None
_scratch_lock = threading.Lock()


def _scratch() -> Any:
    """A cursor of the process's in-memory DuckDB kept for these passes: a database opened and
    closed for each costs ~0.06 s (its threads and memory set up, then torn down)."""
    global _scratch_db
    import duckdb

    with _scratch_lock:
        if _scratch_db is None:
            _scratch_db = duckdb.connect()
        return _scratch_db.cursor()


def part_profile(path: str) -> PartProfile | None:
    """The profile of the local Parquet part at ``path``; None when a row is invalid, a
    checkpoint repeats or the file cannot be read as a part (it then goes row by row)."""
    import duckdb

    con = _scratch()
    try:
        row = con.execute(_PROFILE_SQL, {"path": path}).fetchone()
    except duckdb.Error:
        return None
    finally:
        con.close()
    n, bad, unclean, events, repeated, orphans, backwards, shared, sizes = row
    if bad or repeated:
        return None
    return PartProfile(rows=n, unclean=unclean, events=events, orphans=orphans, backwards=backwards,
                       shared_ids=shared,
                       run_sizes=[(int(s["n"]), float(s["median"]), int(s["biggest"])) for s in sizes or []])
