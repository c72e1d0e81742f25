"""Integrity verification: findings per checkpoint, never exceptions for damage.

Two depths, like restic: ``structure`` (blob present, sizes, paths, codecs,
parents) and ``data`` (re-hash and decode every blob, replay incremental
chains, and the content checks on each decoded state). Readers contribute
format checks through ``check_checkpoints``; lineage (parents missing,
cycles, chains built on damage) and size spikes are SQL over the index.

Findings are one set, kept in the index with the depth and time they were
found: ``catalog`` (listing), ``structure``, ``data`` (data and content
checks of one checkpoint), ``lineage`` and ``content`` (store-wide, replaced
on every verification). A re-check of a checkpoint replaces its findings at
that depth (a structure re-check leaves what a data check found; a data
re-check replaces both). :func:`store_findings` is what every surface shows.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from lastgood.index import attached
from lastgood.index.catalog import Catalog, distinct_findings
from lastgood.checks import Check
from lastgood.integrity.content import SPIKE_FACTOR, SPIKE_MIN_BYTES, SPIKE_MIN_CHECKPOINTS, Shape, drift_findings
from lastgood.errors import UsageError
from lastgood.integrity.parallel import CHUNK, CHUNK_BYTES, MIN_PARALLEL_RECORDS, ChunkResult, default_workers, run_chunks
from lastgood.integrity.parallel import reader_findings as reader_findings  # re-exported
from lastgood.index.tensors import record_tensors
from lastgood.readers.base import (DAMAGED_STATUSES, Capability, CheckpointRecord, Finding, ListsCatalogStructure,
                                   ListsStructure, Reader, TensorSummary, capabilities, capability, record_from_row,
                                   sql_statuses)
from lastgood.redact import redact_text

Progress = Callable[[int, int | None], None]
OnFindings = Callable[[list[Finding]], None]
BATCH = 2_000
FLUSH_SECONDS = 15.0  # a long check records what it has found at least this often
SHAPES_KEPT = 200_000  # state shapes kept across flushes for schema drift between neighbours
DEPTHS = ("structure", "data")
# the depths of findings a check at each depth may report (lineage and content are store-wide)
DEPTH_ORDER = {"catalog": 0, "structure": 1, "lineage": 1, "content": 1, "data": 2}


@dataclass(frozen=True)
class Subset:
    """A part of the store for ``--read-data-subset``: bucket ``n`` of ``m``, or ``percent``."""

    n: int = 0
    m: int = 0
    percent: float = 0.0

    @classmethod
    def parse(cls, text: str) -> Subset:
        text = text.strip()
        if match := re.fullmatch(r"(\d+)/(\d+)", text):
            n, m = int(match[1]), int(match[2])
            if not 1 <= n <= m:
                raise UsageError(f"--read-data-subset {text}: need 1 ≤ N ≤ M")
            return cls(n=n, m=m)
        if match := re.fullmatch(r"(\d+(?:\.\d+)?)%", text):
            percent = float(match[1])
            if not 0 < percent <= 100:
                raise UsageError(f"--read-data-subset {text}: the percentage must be in (0, 100]")
            return cls(percent=percent)
        raise UsageError(f"--read-data-subset {text!r}: expected N/M (e.g. 1/5) or P% (e.g. 10%)")

    def __str__(self) -> str:
        return f"{self.n}/{self.m}" if self.m else f"{self.percent:g}%"


@dataclass
class VerifyReport:
    checked: int = 0
    findings: list[Finding] = field(default_factory=list)
    depth: str = "structure"
    seconds: float = 0.0
    cancelled: bool = False
    workers: int = 1


def verify_store(catalog: Catalog, store_id: int, reader: Reader, *, read_data: bool = False,
                 only_unverified: bool = False, subset: Subset | None = None,
                 workers: int | None = None, scheduler: str | None = None,
                 progress: Progress | None = None, on_findings: OnFindings | None = None,
                 cancel: threading.Event | None = None, background: bool = False,
                 blob_walk: bool = True) -> VerifyReport:
    """Check the store's checkpoints and record findings and statuses in the index.

    Results are written in whole chunks: when ``cancel`` is set (or Ctrl-C
    arrives) the chunks already checked are recorded with all their findings
    and nothing else changes. ``on_findings`` sees findings as they arrive.
    Without ``blob_walk`` a reader that can (``listed_catalog_structure``) checks
    structure from its catalog alone, and the blob files stay pending
    (``verified = 'catalog'``) for ``lastgood verify`` or a data check.
    """
    started = time.perf_counter()
    depth = "data" if read_data or subset else "structure"
    selection = _Selection(depth, only_unverified, subset)
    total = count_to_check(catalog, store_id, depth, only_unverified, subset)
    report = VerifyReport(depth=depth, workers=_workers(workers, scheduler, depth, total))
    recorder = _Recorder(catalog, store_id, depth, on_findings)
    if _record_listed(catalog, store_id, reader, selection, total, report, blob_walk):
        recorder.recorded_any = True
        if on_findings and report.findings:
            on_findings(report.findings)
        if progress:
            progress(report.checked, total)
        _finish(catalog, store_id, recorder, report, reader)
        report.seconds = time.perf_counter() - started
        return report
    try:
        chunks = (_key_chunk(catalog, store_id, selection) if _set_based(reader, depth)
                  else _chunks(catalog, store_id, selection))
        for result in run_chunks(reader, chunks, depth == "data", workers=report.workers,
                                 scheduler=scheduler if depth == "data" else None, cancel=cancel,
                                 background=background):
            recorder.add(result)
            report.findings.extend(result.findings)
            report.checked += len(result.checkpoint_ids)
            if on_findings and result.findings:
                on_findings(result.findings)
            if progress:
                progress(report.checked, total)
    except KeyboardInterrupt:
        report.cancelled = True
        _finish(catalog, store_id, recorder, report, reader)
        raise
    report.cancelled = bool(cancel is not None and cancel.is_set())
    if report.checked or not only_unverified:  # nothing new and nothing re-checked: nothing to re-derive
        _finish(catalog, store_id, recorder, report, reader)
    report.seconds = time.perf_counter() - started
    return report


def _workers(workers: int | None, scheduler: str | None, depth: str, total: int) -> int:
    if workers is not None and workers < 1:
        raise UsageError("--workers must be at least 1")
    if depth != "data" or scheduler:
        return 1 if not scheduler else (workers or 1)
    if workers is None:
        return default_workers() if total >= MIN_PARALLEL_RECORDS else 1
    return workers


def _finish(catalog: Catalog, store_id: int, recorder: _Recorder, report: VerifyReport, reader: Reader) -> None:
    """Record the checked chunks, then the store-wide findings derived from them."""
    recorder.flush()
    if not recorder.recorded_any:
        return
    report.findings.extend(recorder.drift)
    lineage = parent_findings(catalog, store_id, shared_ids=not reader.ids_per_run)
    catalog.replace_lineage_findings(store_id, lineage)
    spikes = size_spike_findings(catalog, store_id)
    catalog.replace_content_findings(store_id, spikes)
    report.findings.extend(lineage + spikes)


class _Recorder:
    """Collects chunk results and writes them to the index in whole chunks."""

    def __init__(self, catalog: Catalog, store_id: int, depth: str,
                 on_findings: OnFindings | None = None) -> None:
        self.catalog, self.store_id, self.depth = catalog, store_id, depth
        self.on_findings = on_findings  # also sees the drift found at each flush
        self.ids: list[str] = []
        self.findings: list[Finding] = []
        self.tensors: list[TensorSummary] = []
        self.shapes: dict[str, Shape] = {}
        self.records: list[CheckpointRecord] = []
        self.drift: list[Finding] = []
        self.recorded_any = False
        self.last_flush = time.monotonic()

    def add(self, result: ChunkResult) -> None:
        self.ids.extend(result.checkpoint_ids)
        self.findings.extend(result.findings)
        self.tensors.extend(result.tensors)
        self.shapes.update(result.shapes)
        if time.monotonic() - self.last_flush > FLUSH_SECONDS:
            self.flush()

    def flush(self) -> None:
        if not self.ids:
            return
        drift = self._drift() if self.depth == "data" else []
        self.drift.extend(drift)
        if drift and self.on_findings:
            self.on_findings(drift)
        self.catalog.record_findings(self.store_id, self.ids, self.findings + drift, self.depth)
        record_tensors(self.catalog, self.store_id, self.tensors)
        self.recorded_any = True
        self.ids, self.findings, self.tensors = [], [], []
        if len(self.shapes) > SHAPES_KEPT:  # neighbours across flushes still compare, memory stays bounded
            self.shapes = {}
        self.last_flush = time.monotonic()

    def _drift(self) -> list[Finding]:
        """Schema drift between neighbours of the checked checkpoints, in each run's step order."""
        records = ordered_records(self.catalog, self.store_id, self.ids)
        now = set(self.ids)  # findings of checkpoints recorded by an earlier flush stay as they are
        return [f for f in drift_findings(records, self.shapes) if f.checkpoint_id in now]


# ---- what to check --------------------------------------------------------------------

@dataclass(frozen=True)
class _Selection:
    depth: str
    only_unverified: bool
    subset: Subset | None

    def where(self) -> tuple[str, dict[str, Any]]:
        clauses, params = ["store_id = $sid"], {}
        if self.only_unverified:
            clauses.append("verified IS NULL" if self.depth == "structure"
                           else "coalesce(verified, '') <> 'data'")
        if self.subset and self.subset.m:
            clauses.append("md5_number_lower(checkpoint_id) % $m = $bucket")
            params.update(m=self.subset.m, bucket=self.subset.n - 1)
        elif self.subset:
            clauses.append("""checkpoint_id IN (SELECT checkpoint_id FROM checkpoints WHERE store_id = $sid
                ORDER BY data_checked_at NULLS FIRST, md5_number_lower(checkpoint_id)
                LIMIT (SELECT ceil(count(*) * $pct / 100) FROM checkpoints WHERE store_id = $sid))""")
            params["pct"] = self.subset.percent
        return " AND ".join(clauses), params


def count_to_check(catalog: Catalog, store_id: int, depth: str, only_unverified: bool,
                   subset: Subset | None = None) -> int:
    """How many checkpoints a verification at ``depth`` would check."""
    where, params = _Selection(depth, only_unverified, subset).where()
    with catalog.connect() as con:
        return int(con.execute(f"SELECT count(*) FROM checkpoints WHERE {where}",
                               {"sid": store_id, **params}).fetchone()[0])


VERIFY_COLUMNS = ("run_id", "namespace", "checkpoint_id", "parent_id", "step", "kind", "status",
                  "status_reason", "size_bytes", "checksum", "codec", "location", "metadata")


def _chunks(catalog: Catalog, store_id: int, selection: _Selection) -> Iterator[list[CheckpointRecord]]:
    """Checkpoints to check, a run at a time in step order (so chains reuse cached states).

    Only the columns checks need are fetched (no timestamps: converting a
    million of them to Python costs more than the checks)."""
    where, params = selection.where()
    # structure checks never read metadata: skip parsing one JSON value per checkpoint
    columns = [c if c != "metadata" or selection.depth == "data" else "NULL AS metadata" for c in VERIFY_COLUMNS]
    select = f"SELECT {', '.join(columns)}, listed_status FROM checkpoints WHERE {where}"
    size = CHUNK if selection.depth == "data" else BATCH
    # a catalog shared with other processes (the dashboard's background check) holds the index
    # only while it reads a page; a set defined by a share of the store (a subset) is read at once
    shared = not catalog.keep_open and selection.subset is None
    rows = _pages(catalog, select, {"sid": store_id, **params}) if shared else \
        _streamed(catalog, select, {"sid": store_id, **params}, size)
    yield from _bounded_chunks((_record(row) for row in rows), size,
                               CHUNK_BYTES if selection.depth == "data" else None)


STEP_ORDER = "run_id, namespace, step, checkpoint_id"
NO_STEP = 2**63 - 1  # a checkpoint without a step sorts after every step of its run (NULLS LAST)
KEY_ORDER = f"run_id, namespace, coalesce(step, {NO_STEP}), checkpoint_id"  # the same order, as a key
PAGE_ROWS = 20_000  # rows read per open of a shared index


def _streamed(catalog: Catalog, select: str, params: dict[str, Any], size: int) -> Iterator[dict[str, Any]]:
    """The rows in step order from one cursor, the index open until the last is read."""
    with catalog.connect() as con:
        cur = con.execute(f"{select} ORDER BY {STEP_ORDER}", params)
        names = [d[0] for d in cur.description]
        for rows in iter(lambda: cur.fetchmany(size), []):
            yield from (dict(zip(names, row)) for row in rows)


def _pages(catalog: Catalog, select: str, params: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The rows in step order, a page at a time, the index closed between pages (a data check
    takes minutes: another process, such as a CLI command, opens it meanwhile). Each page starts
    after the last key read, so rows recorded meanwhile are neither missed nor read twice."""
    after: dict[str, Any] = {}
    while True:
        keyset = f" AND ({KEY_ORDER}) > ($k_run, $k_ns, $k_step, $k_id)" if after else ""
        with catalog.connect() as con:
            cur = con.execute(f"{select}{keyset} ORDER BY {KEY_ORDER} LIMIT {PAGE_ROWS}", {**params, **after})
            names = [d[0] for d in cur.description]
            rows = [dict(zip(names, row)) for row in cur.fetchall()]
        if rows:  # the key read before the rows are handed out (a reader may change them)
            last = rows[-1]
            after = {"k_run": last["run_id"], "k_ns": last["namespace"],
                     "k_step": NO_STEP if last["step"] is None else last["step"], "k_id": last["checkpoint_id"]}
        yield from rows
        if len(rows) < PAGE_ROWS:
            return


def _bounded_chunks(records: Iterator[CheckpointRecord], size: int, max_bytes: int | None
                    ) -> Iterator[list[CheckpointRecord]]:
    """``records`` in chunks of at most ``size``, and (data depth) cut once a chunk's blobs reach
    ``max_bytes``: big blobs make more, smaller chunks, so workers share the bytes evenly."""
    chunk: list[CheckpointRecord] = []
    total = 0
    for record in records:
        chunk.append(record)
        total += record.size_bytes or 0
        if len(chunk) >= size or (max_bytes is not None and total >= max_bytes):
            yield chunk
            chunk, total = [], 0
    if chunk:
        yield chunk


def _record_listed(catalog: Catalog, store_id: int, reader: Reader, selection: _Selection, total: int,
                   report: VerifyReport, blob_walk: bool = True) -> bool:
    """A structure check answered by the reader's own listing: when its last full scan is
    what the index holds (same scan token) and listed exactly the checkpoints to check,
    ``listed_structure`` gives their findings, recorded by one SQL predicate (no keys
    fetched from the index or sent back). Without ``blob_walk``, ``listed_catalog_structure``
    (catalog-level checks only) when the reader has it: recorded as ``verified = 'catalog'``."""
    catalog_reader = capability(reader, ListsCatalogStructure) if not blob_walk else None
    catalog_only = catalog_reader.listed_catalog_structure if catalog_reader else None
    full_reader = capability(reader, ListsStructure)
    listed = catalog_only or (full_reader.listed_structure if full_reader else None)
    if selection.depth != "structure" or selection.subset or not total or listed is None:
        return False
    answer = listed(catalog.scan_token(store_id))
    if answer is None or answer[0] != total:
        return False
    where, params = selection.where()
    catalog.record_findings_where(store_id, where, params, answer[1], selection.depth,
                                  level="catalog" if catalog_only else None)
    report.checked, report.findings = total, list(answer[1])
    return True


def _set_based(reader: Reader, depth: str) -> bool:
    """Readers with ``check_structure(keys)`` check structure in a few set-based queries."""
    return depth == "structure" and Capability.SET_STRUCTURE in capabilities(reader)


def _key_chunk(catalog: Catalog, store_id: int, selection: _Selection) -> Iterator[list[CheckpointRecord]]:
    """Every checkpoint to check as one chunk of bare keys (no metadata parsed): a
    set-based structure check is a few queries for any number of checkpoints."""
    where, params = selection.where()
    with catalog.connect() as con:
        rows = con.execute(f"SELECT run_id, namespace, checkpoint_id FROM checkpoints WHERE {where}",
                           {"sid": store_id, **params}).fetchall()
    if rows:
        yield [CheckpointRecord(run_id=r, namespace=ns, checkpoint_id=c) for r, ns, c in rows]


def _record(row: dict) -> CheckpointRecord:
    """The record as listed: verification judges the listing, not an earlier verdict."""
    row["status"] = row.pop("listed_status") or row["status"]
    return record_from_row(row)


def ordered_records(catalog: Catalog, store_id: int, checkpoint_ids: list[str]) -> list[CheckpointRecord]:
    """The runs of these checkpoints, every checkpoint in step order with its parent (for drift)."""
    if not checkpoint_ids:
        return []
    with catalog.connect() as con:
        cur = con.execute("""SELECT run_id, namespace, checkpoint_id, parent_id FROM checkpoints
            WHERE store_id = $sid AND (run_id, namespace) IN (SELECT (run_id, namespace) FROM checkpoints
                  WHERE store_id = $sid AND checkpoint_id IN (SELECT unnest($ids::VARCHAR[])))
            ORDER BY run_id, namespace, step, created_at, checkpoint_id""",
                          {"sid": store_id, "ids": checkpoint_ids})
        return [CheckpointRecord(run_id=r, namespace=ns, checkpoint_id=c, parent_id=p)
                for r, ns, c, p in cur.fetchall()]


# ---- store-wide findings --------------------------------------------------------------

def parent_findings(catalog: Catalog, store_id: int, shared_ids: bool = True) -> list[Finding]:
    """Parent cycles, parents missing from the store, and incremental checkpoints built on damage;
    with ``shared_ids``, a warning on ids used in several runs (not for formats whose ids are only
    unique within a run: ``Reader.ids_per_run``).

    One join of every edge first: a store with no parent missing, no edge that goes back in
    time and nothing damaged (the usual case) needs neither the cycle walk nor the lineage query."""
    from lastgood.index.queries import duplicate_id_findings  # same id in several runs (RUN/ID)

    missing, backwards, damaged = _edge_counts(catalog, store_id)
    duplicates = duplicate_id_findings(catalog, store_id) if shared_ids else []
    if not (missing or backwards or damaged):
        return duplicates
    cycles = _cycle_findings(catalog, store_id) if backwards else []
    with catalog.connect() as con:
        params = {"sid": store_id, "parent_missing": str(Check.PARENT_MISSING),
                  "cycle_ids": [f.checkpoint_id for f in cycles]}
        rows = con.execute(_LINEAGE_SQL, params).fetchall()
    findings = list(cycles)
    for run_id, namespace, cid, parent, kind, parent_state in rows:
        if parent_state is None:
            severity = "error" if kind == "incremental" else "warning"
            message = f"parent {parent} is not in the store" + (
                " (incremental chain broken)" if kind == "incremental" else " (orphan)")
            findings.append(Finding(Check.PARENT_MISSING, severity, message, run_id, namespace, cid))
        else:
            message = f"incremental chain broken: parent {parent} is damaged"
            findings.append(Finding(Check.CHAIN_BROKEN, "error", message, run_id, namespace, cid))
    return findings + duplicates


# parents missing, edges whose parent is not strictly earlier (a cycle needs one), and whether
# anything is damaged (a finding at error, or a listed status) — the inputs of the lineage query
_DAMAGED_SQL = f"""(SELECT EXISTS (SELECT 1 FROM findings WHERE store_id = $sid AND severity = 'error'
                       AND depth <> 'lineage' AND checkpoint_id IS NOT NULL)
            OR EXISTS (SELECT 1 FROM checkpoints WHERE store_id = $sid
                       AND listed_status IN {sql_statuses(*DAMAGED_STATUSES)}))"""
_EDGE_COUNTS_SQL = f"""
SELECT count(*) FILTER (WHERE p.checkpoint_id IS NULL),
       count(*) FILTER (WHERE p.checkpoint_id IS NOT NULL AND NOT coalesce(p.step < c.step, false)
                        AND NOT coalesce(p.created_at < c.created_at, false)),
       {_DAMAGED_SQL}
FROM checkpoints c
LEFT JOIN checkpoints p ON p.store_id = c.store_id AND p.checkpoint_id = c.parent_id
     AND p.run_id = c.run_id AND p.namespace = c.namespace
WHERE c.store_id = $sid AND c.parent_id IS NOT NULL
"""


def _edge_counts(catalog: Catalog, store_id: int) -> tuple[int, int, bool]:
    with catalog.connect() as con:
        known = attached.facts(con, store_id)  # an attached part's one pass found no parent missing
        if known is not None and not known["orphans"] and not known["backwards"]:  # nor going back
            return 0, 0, bool(con.execute(f"SELECT {_DAMAGED_SQL}", {"sid": store_id}).fetchone()[0])
        missing, backwards, damaged = con.execute(_EDGE_COUNTS_SQL, {"sid": store_id}).fetchone()
    return int(missing or 0), int(backwards or 0), bool(damaged)


_LINEAGE_SQL = f"""
WITH RECURSIVE damaged AS (
    SELECT DISTINCT checkpoint_id FROM findings
    WHERE store_id = $sid AND severity = 'error' AND depth <> 'lineage' AND checkpoint_id IS NOT NULL
    UNION SELECT checkpoint_id FROM checkpoints
    WHERE store_id = $sid AND listed_status IN {sql_statuses(*DAMAGED_STATUSES)}
    UNION SELECT unnest($cycle_ids::VARCHAR[])
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

# A cycle needs an edge whose parent is not strictly earlier: only runs with such an edge are walked.
_CYCLE_CANDIDATES_SQL = """
WITH suspect AS (
    SELECT DISTINCT c.run_id, c.namespace FROM checkpoints c
    JOIN checkpoints p ON p.store_id = c.store_id AND p.checkpoint_id = c.parent_id
         AND p.run_id = c.run_id AND p.namespace = c.namespace
    WHERE c.store_id = $sid AND NOT coalesce(p.step < c.step, false)
      AND NOT coalesce(p.created_at < c.created_at, false))
SELECT c.run_id, c.namespace, c.checkpoint_id, c.parent_id FROM checkpoints c JOIN suspect USING (run_id, namespace)
WHERE c.store_id = $sid AND c.parent_id IS NOT NULL
"""


def _cycle_findings(catalog: Catalog, store_id: int) -> list[Finding]:
    with catalog.connect() as con:
        rows = con.execute(_CYCLE_CANDIDATES_SQL, {"sid": store_id}).fetchall()
    parents: dict[tuple[str, str], dict[str, str]] = {}
    for run_id, namespace, cid, parent in rows:
        parents.setdefault((run_id, namespace), {})[cid] = parent
    findings = []
    for (run_id, namespace), edges in sorted(parents.items()):
        for cid in sorted(cycle_members(edges)):
            findings.append(Finding(Check.PARENT_CYCLE, "error", "parent chain loops back to this checkpoint",
                                    run_id, namespace, cid))
    return findings


def cycle_members(parent_of: dict[str, str]) -> set[str]:
    """Nodes that lie on a cycle of the ``child -> parent`` map."""
    state: dict[str, int] = {}  # 1 on the current path, 2 finished
    members: set[str] = set()
    for start in parent_of:
        path: list[str] = []
        node: str | None = start
        while node is not None and node in parent_of and node not in state:
            state[node] = 1
            path.append(node)
            node = parent_of[node]
        if node is not None and state.get(node) == 1:
            members.update(path[path.index(node):])
        for visited in path:
            state[visited] = 2
    return members


_SPIKES_SQL = """
WITH sized AS (
    SELECT run_id, namespace, checkpoint_id, size_bytes,
           median(size_bytes) OVER (PARTITION BY run_id, namespace) AS median_bytes,
           count(*) OVER (PARTITION BY run_id, namespace) AS n
    FROM checkpoints WHERE store_id = $sid AND size_bytes IS NOT NULL)
SELECT run_id, namespace, checkpoint_id, size_bytes, median_bytes FROM sized
WHERE n >= $min_n AND size_bytes >= $min_bytes AND size_bytes >= $factor * greatest(median_bytes, 1)
ORDER BY run_id, checkpoint_id
"""


def _may_spike(count: int, median: float, biggest: int) -> bool:
    """Whether a run (its checkpoints with a size, their median, the largest) holds a spike."""
    return (count >= SPIKE_MIN_CHECKPOINTS and biggest >= SPIKE_MIN_BYTES
            and biggest >= SPIKE_FACTOR * max(median, 1))


def size_spike_findings(catalog: Catalog, store_id: int) -> list[Finding]:
    """Checkpoints far bigger than their run's median (metadata only)."""
    params = {"sid": store_id, "min_n": SPIKE_MIN_CHECKPOINTS, "min_bytes": SPIKE_MIN_BYTES,
              "factor": SPIKE_FACTOR}
    with catalog.connect() as con:
        known = attached.facts(con, store_id)
        if known is not None and not any(_may_spike(*run) for run in known["run_sizes"]):
            return []  # no run of the attached part has a checkpoint big enough
        rows = con.execute(_SPIKES_SQL, params).fetchall()
    return [Finding(Check.SIZE_SPIKE, "warning",
                    f"{size:,} bytes, {size / max(median, 1):.0f}× the run's median of {int(median):,}",
                    run_id, namespace, cid) for run_id, namespace, cid, size, median in rows]


# ---- the one set of findings ----------------------------------------------------------

FINDING_FIELDS = ("run_id", "namespace", "checkpoint_id", "check", "severity", "message", "depth", "found_at")


def store_findings(catalog: Catalog, store_id: int, depth: str = "data",
                   checkpoint_id: str | None = None) -> list[dict[str, Any]]:
    """Every finding the index holds for the store at ``depth`` and below (errors first).

    One finding per checkpoint and check (the same damage seen while listing,
    at structure depth and at data depth is one finding, shown with the
    shallowest depth that found it). This is what ``verify``, ``runs``, ``ls``
    statuses and the pages agree on."""
    depths = [d for d, rank in DEPTH_ORDER.items() if rank <= DEPTH_ORDER.get(depth, 2)]
    extra, params = "", {"sid": store_id, "depths": depths}
    if checkpoint_id is not None:
        extra, params["cid"] = "AND checkpoint_id = $cid", checkpoint_id
    with catalog.connect() as con:
        cur = con.execute(_FINDINGS_SQL.format(extra=extra), params)
        rows = [dict(zip(FINDING_FIELDS, row)) for row in cur.fetchall()]
    for row in rows:  # messages quote store contents (error text, paths): never show a secret
        row["message"] = redact_text(row["message"]) if isinstance(row["message"], str) else row["message"]
    return rows


_FINDINGS_SQL = ("""
SELECT run_id, namespace, checkpoint_id, "check", severity, message, depth, found_at FROM """
                 + distinct_findings("store_id = $sid AND depth IN (SELECT unnest($depths::VARCHAR[])) {extra}")
                 + """
ORDER BY CASE severity WHEN 'error' THEN 0 WHEN 'warning' THEN 1 ELSE 2 END,
         run_id NULLS FIRST, namespace, checkpoint_id, "check", message
""")


def deepest_check(catalog: Catalog, store_id: int) -> str:
    """'data' when any checkpoint of the store was data-checked, else 'structure'."""
    with catalog.connect() as con:
        row = con.execute("SELECT count(*) FROM checkpoints WHERE store_id = ? AND verified = 'data'",
                          [store_id]).fetchone()
    return "data" if row and row[0] else "structure"
