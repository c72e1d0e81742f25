"""Integrity verification: findings per checkpoint, never exceptions for damage.

Two depths, like restic: ``structure`` (blob present, sizes, paths, codecs,
parents) and ``data`` (re-hash and decode every blob, replay incremental
chains). Readers contribute format checks through ``check_checkpoints``;
the parent checks are generic SQL over the index.
"""

from __future__ import annotations

from lastgood.checks import Check
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

from lastgood.catalog import Catalog
from lastgood.errors import DecodeError
from lastgood.readers.base import CheckpointRecord, Finding, Reader, record_from_row

Progress = Callable[[int, int | None], None]
BATCH = 2_000


@dataclass
class VerifyReport:
    checked: int = 0
    findings: list[Finding] = field(default_factory=list)
    depth: str = "structure"
    seconds: float = 0.0


def verify_store(catalog: Catalog, store_id: int, reader: Reader, *, read_data: bool = False,
                 only_unverified: bool = False, progress: Progress | None = None) -> VerifyReport:
    """Check the store's checkpoints and record findings and statuses in the index."""
    started = time.perf_counter()
    depth = "data" if read_data else "structure"
    report = VerifyReport(depth=depth)
    total = count_to_check(catalog, store_id, depth, only_unverified)
    checked: list[str] = []
    for chunk in _chunks(catalog, store_id, depth, only_unverified):
        report.findings.extend(reader_findings(reader, chunk, read_data))
        checked.extend(r.checkpoint_id for r in chunk)
        report.checked += len(chunk)
        if progress:
            progress(report.checked, total)
    if checked:
        catalog.record_findings(store_id, checked, report.findings, depth)
    if checked or not only_unverified:
        lineage = parent_findings(catalog, store_id)
        catalog.replace_lineage_findings(store_id, lineage)
        report.findings.extend(lineage)
    report.seconds = time.perf_counter() - started
    return report


def reader_findings(reader: Reader, records: list[CheckpointRecord],
                    read_data: bool) -> Iterator[Finding]:
    """The reader's own checks, or (without them) a decode of each state."""
    check = getattr(reader, "check_checkpoints", None)
    if check is not None:
        yield from check(records, read_data)
        return
    if read_data:
        for record in records:
            yield from _decode_finding(reader, record)


def _decode_finding(reader: Reader, record: CheckpointRecord) -> Iterable[Finding]:
    try:
        reader.load_state(record)
    except DecodeError as exc:
        yield Finding(exc.check, "error", str(exc), record.run_id, record.namespace,
                      record.checkpoint_id)
    return ()


def parent_findings(catalog: Catalog, store_id: int) -> list[Finding]:
    """Parents missing from the store, and incremental checkpoints built on damage."""
    with catalog.connect() as con:
        params = {"sid": store_id, "parent_missing": str(Check.PARENT_MISSING)}
        rows = con.execute(_LINEAGE_SQL, params).fetchall()
    findings = []
    for run_id, namespace, cid, parent, kind, parent_state in rows:
        if parent_state is None:
            severity = "error" if kind == "incremental" else "warning"
            message = f"parent {parent} is not in the store" + (
                " (incremental chain broken)" if kind == "incremental" else " (orphan)")
            findings.append(Finding(Check.PARENT_MISSING, severity, message, run_id, namespace, cid))
        else:
            message = f"incremental chain broken: parent {parent} is damaged"
            findings.append(Finding(Check.CHAIN_BROKEN, "error", message, run_id, namespace, cid))
    return findings


_LINEAGE_SQL = """
WITH RECURSIVE damaged AS (
    SELECT DISTINCT checkpoint_id FROM findings
    WHERE store_id = $sid AND severity = 'error' AND depth <> 'lineage' AND checkpoint_id IS NOT NULL
    UNION SELECT checkpoint_id FROM checkpoints
    WHERE store_id = $sid AND listed_status IN ('corrupt', 'incomplete')
),
bad(run_id, namespace, checkpoint_id, parent_id, kind, parent_state) AS (
    SELECT c.run_id, c.namespace, c.checkpoint_id, c.parent_id, c.kind,
           CASE WHEN p.checkpoint_id IS NULL THEN NULL ELSE 'damaged' END
    FROM checkpoints c
    LEFT JOIN checkpoints p ON p.store_id = c.store_id AND p.checkpoint_id = c.parent_id
         AND p.run_id = c.run_id AND p.namespace = c.namespace
    WHERE c.store_id = $sid AND c.parent_id IS NOT NULL
      AND (p.checkpoint_id IS NULL
           OR (c.kind = 'incremental' AND p.checkpoint_id IN (SELECT checkpoint_id FROM damaged)))
      AND NOT EXISTS (SELECT 1 FROM findings f WHERE f.store_id = $sid AND f.depth = 'catalog'
                      AND f.checkpoint_id = c.checkpoint_id AND f."check" = $parent_missing)
    UNION
    SELECT c.run_id, c.namespace, c.checkpoint_id, c.parent_id, c.kind, 'damaged'
    FROM checkpoints c JOIN bad b ON c.parent_id = b.checkpoint_id AND c.run_id = b.run_id
         AND c.namespace = b.namespace
    WHERE c.store_id = $sid AND c.kind = 'incremental'
)
SELECT DISTINCT * FROM bad
WHERE checkpoint_id NOT IN (SELECT checkpoint_id FROM damaged) OR parent_state IS NULL
ORDER BY run_id, checkpoint_id
"""


def count_to_check(catalog: Catalog, store_id: int, depth: str, only_unverified: bool) -> int:
    """How many checkpoints a verification at ``depth`` would check."""
    with catalog.connect() as con:
        sql = f"SELECT count(*) FROM checkpoints WHERE store_id = ? {_pending_clause(depth, only_unverified)}"
        return int(con.execute(sql, [store_id]).fetchone()[0])


def _pending_clause(depth: str, only_unverified: bool) -> str:
    if not only_unverified:
        return ""
    return "AND verified IS NULL" if depth == "structure" else "AND coalesce(verified, '') <> 'data'"


VERIFY_COLUMNS = ("run_id", "namespace", "checkpoint_id", "parent_id", "step", "kind", "status",
                  "status_reason", "size_bytes", "checksum", "codec", "location", "metadata")


def _chunks(catalog: Catalog, store_id: int, depth: str,
            only_unverified: bool) -> Iterator[list[CheckpointRecord]]:
    """Checkpoints to check, a run at a time in step order (so chains reuse cached states).

    Only the columns checks need are fetched (no timestamps: converting a
    million of them to Python costs more than the checks)."""
    sql = f"""SELECT {', '.join(VERIFY_COLUMNS)}, listed_status FROM checkpoints
              WHERE store_id = ? {_pending_clause(depth, only_unverified)}
              ORDER BY run_id, namespace, step, checkpoint_id"""
    with catalog.connect() as con:
        cur = con.execute(sql, [store_id])
        names = [d[0] for d in cur.description]
        while rows := cur.fetchmany(BATCH):
            yield [_record(dict(zip(names, row))) for row in rows]


def _record(row: dict) -> CheckpointRecord:
    """The record as listed: verification judges the listing, not an earlier verdict."""
    row["status"] = row.pop("listed_status") or row["status"]
    return record_from_row(row)
