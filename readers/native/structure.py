"""Set-based structure check of a native store (docs/format.md, "Integrity checks").

The catalog's entries (the compacted Parquet parts read by DuckDB itself, the
tail and pending tables) and one walk of the blob tree (names and sizes of the
regular files under ``blobs/``; nothing is opened) meet in an in-memory DuckDB:
an entry whose blob is a regular file at exactly its location, with the listed
size, a known codec and a committed save is clean. Only the rest (damage, odd
paths, links, special files, blobs outside ``blobs/``) come back as records and
go through the reader's per-checkpoint check, so the findings are the same as
checking every checkpoint one by one.
"""

from __future__ import annotations

import os
import posixpath
import shutil
import stat
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from lastgood.readers.native import format as nf
from lastgood.readers.base import CheckpointRecord, ParquetSource, Status, sql_statuses

if TYPE_CHECKING:
    import pyarrow as pa

# a refresh walks the blob files of stores of at most this many checkpoints; beyond, the catalog-level
# checks only (blob checks pending until `lastgood verify STORE`): lastgood.limits.auto_walk_entries
WALK_AHEAD_ROWS = 50_000  # a listing this big starts the blob walk right away (WalkAhead)
WALK_AHEAD_SECONDS = 120.0  # a walk older than this is not used
WALK_DEPTH = 32  # folder levels under blobs/ walked; deeper blobs are checked one by one
MEMORY_LIMIT = "256MB"  # DuckDB spills beyond this: the check stays well inside the RSS target
_OK, _INCOMPLETE = sql_statuses(Status.OK), sql_statuses(Status.INCOMPLETE)
ENTRY_COLUMNS = ("run_id", "namespace", "checkpoint_id", "step", "kind", "status", "status_reason",
                 "size_bytes", "codec", "location")
Key = tuple[str, str, str]
# a location the catalog-level check clears without the reader (it cannot leave the store):
# under blobs/, no segment starting with '.' (so no '.' or '..'), no empty segment, no
# backslash, no ':' (no URL); anything else goes through the reader's own path check
PLAIN_LOCATION_SQL = """starts_with(location, 'blobs/') AND NOT contains(location, '/.')
    AND NOT contains(location, '//') AND NOT contains(location, chr(92)) AND NOT contains(location, ':')"""


@dataclass
class Blobs:
    """Regular files under ``blobs/``, a folder at a time: each folder's names and sizes
    joined by "/" (which no file name contains), so a million of them reach DuckDB as a
    few thousand strings (no Python object per blob on the way in)."""

    folders: list[str] = field(default_factory=list)
    names: list[str] = field(default_factory=list)
    sizes: list[str] = field(default_factory=list)

    def add(self, folder: str, names: list[str], sizes: list[int]) -> None:
        if names:
            self.folders.append(folder)
            self.names.append("/".join(names))
            self.sizes.append("/".join(map(str, sizes)))


def walk_local(root: str) -> Blobs:
    """Names and sizes of the regular files under ``root/blobs``.

    Folders are entered without following links (a linked folder or file, a FIFO
    or a device is left out, so its checkpoints get the per-checkpoint check, which
    refuses what leaves the store); sizes come from the directory entries (lstat)."""
    blobs = Blobs()
    base = f"{root}/{nf.BLOBS}"
    try:
        if not stat.S_ISDIR(os.lstat(base).st_mode):
            return blobs
    except OSError:
        return blobs
    folders = [(base, nf.BLOBS, 0)]
    while folders:
        path, relative, depth = folders.pop()
        names: list[str] = []
        sizes: list[int] = []
        try:
            entries = os.scandir(path)
        except OSError:
            continue
        with entries:
            for e in entries:
                if not e.name.isascii() and not _encodable(e.name):
                    continue
                if e.is_file(follow_symlinks=False):
                    try:
                        sizes.append(e.stat(follow_symlinks=False).st_size)
                    except OSError:
                        continue  # removed meanwhile: checked one by one
                    names.append(e.name)
                elif depth < WALK_DEPTH and e.is_dir(follow_symlinks=False):
                    folders.append((e.path, f"{relative}/{e.name}", depth + 1))
        blobs.add(relative, names, sizes)
    return blobs


class WalkAhead:
    """A walk of a local blob tree started in a thread when a big catalog is listed, so it
    overlaps the index's ingest (DuckDB releases the GIL; so do the lstat calls). Used at
    most once, and only while fresh: a later check walks again."""

    def __init__(self, root: str) -> None:
        self.started = time.monotonic()
        self.blobs: Blobs | None = None
        self.thread = threading.Thread(target=self._run, args=(root,), name="lastgood-walk", daemon=True)
        self.thread.start()

    def _run(self, root: str) -> None:
        try:
            self.blobs = walk_local(root)
        except Exception:  # noqa: BLE001 - the check walks again itself and reports what it meets
            self.blobs = None

    def take(self) -> Blobs | None:
        if time.monotonic() - self.started > WALK_AHEAD_SECONDS:
            return None
        self.thread.join()
        return self.blobs


def walk_remote(fs: Any, root: str) -> Blobs:
    """The same from one recursive listing (``find(detail=True)``) of an object store."""
    try:
        found = fs.find(f"{root}/{nf.BLOBS}", detail=True)
    except (FileNotFoundError, NotADirectoryError):
        return Blobs()
    grouped: dict[str, tuple[list[str], list[int]]] = {}
    for name, info in found.items():
        size = info.get("size")
        if info.get("type", "file") == "file" and isinstance(size, int):
            folder, base = posixpath.split(posixpath.normpath(name[len(root):].lstrip("/")))
            names, sizes = grouped.setdefault(folder, ([], []))
            names.append(base)
            sizes.append(size)
    blobs = Blobs()
    for folder, (names, sizes) in grouped.items():
        blobs.add(folder, names, sizes)
    return blobs


def vanished(exc: BaseException) -> bool:
    """A listed file was gone when read: FileNotFoundError, or DuckDB's 'No files found'."""
    return isinstance(exc, FileNotFoundError) or (
        type(exc).__module__.startswith(("duckdb", "_duckdb"))
        and ("No files found" in str(exc) or "No such file or directory" in str(exc)))


def _encodable(name: str) -> bool:
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


class CatalogEntries:
    """The catalog's entries, one row per checkpoint as the index keeps them (a later
    batch replaces an earlier one; a pending marker never replaces a listed entry)."""

    def __init__(self, batches: Sequence[pa.Table | ParquetSource]) -> None:
        import duckdb

        self.spill = tempfile.mkdtemp(prefix="lastgood-check-")  # private; DuckDB's default is ./.tmp
        self.con = duckdb.connect()
        self.con.execute(f"SET memory_limit = '{MEMORY_LIMIT}'")
        try:
            self.con.execute("SET temp_directory = $dir", {"dir": self.spill})
            self.con.execute("SET preserve_insertion_order = false")
            self.count = self._load(batches)
        except BaseException:
            self.close()
            raise

    def _load(self, batches: Sequence[pa.Table | ParquetSource]) -> int:
        if len(batches) == 1 and isinstance(batches[0], ParquetSource):  # one compacted part: read in place
            paths = ", ".join("'" + path.replace("'", "''") + "'" for path in batches[0].paths)
            self.con.execute(f"""CREATE VIEW entries AS SELECT {', '.join(ENTRY_COLUMNS)} FROM (
                SELECT * REPLACE (coalesce(namespace, '') AS namespace), {_OK} AS status,
                       NULL::VARCHAR AS status_reason FROM read_parquet([{paths}]))""")
            return int(self.con.execute("SELECT count(*) FROM entries").fetchall()[0][0])
        selects, params = [], {}
        for number, batch in enumerate(batches):
            if isinstance(batch, ParquetSource):
                params[f"p{number}"] = list(batch.paths)
                source = f"(SELECT *, {_OK} AS status, NULL::VARCHAR AS status_reason FROM read_parquet($p{number}))"
            else:
                self.con.register(f"batch{number}", batch.select(list(ENTRY_COLUMNS)))
                source = f"batch{number}"
            selects.append(f"SELECT {', '.join(ENTRY_COLUMNS)}, {number} AS ord FROM {source}")
        columns = ", ".join(ENTRY_COLUMNS)
        union = " UNION ALL ".join(selects) or f"SELECT {', '.join('NULL' for _ in ENTRY_COLUMNS)}, 0 WHERE false"
        # one batch is one file (a part keeps its rows as the index does): no duplicates to drop
        once = "" if len(selects) < 2 else f"""QUALIFY row_number() OVER (PARTITION BY run_id, namespace,
            checkpoint_id ORDER BY status = {_INCOMPLETE}, ord DESC) = 1"""
        self.con.execute(f"""CREATE TABLE entries AS
            SELECT {columns} FROM (SELECT * REPLACE (coalesce(namespace, '') AS namespace) FROM ({union}))
            {once}""", params)
        for number, batch in enumerate(batches):
            if not isinstance(batch, ParquetSource):
                self.con.unregister(f"batch{number}")
        return int(self.con.execute("SELECT count(*) FROM entries").fetchall()[0][0])

    def close(self) -> None:
        self.con.close()
        shutil.rmtree(self.spill, ignore_errors=True)

    def unclean(self, blobs: Blobs | None, keys: Sequence[Key] | None) -> list[CheckpointRecord]:
        """Entries (of ``keys``, or all) that are not clean against the walked ``blobs``;
        without ``blobs`` every entry of ``keys`` (to be checked one by one)."""
        where, params = [], {}
        if keys is not None:
            self.con.execute("""CREATE OR REPLACE TEMP TABLE wanted AS SELECT unnest($r::VARCHAR[]) AS run_id,
                unnest($n::VARCHAR[]) AS namespace, unnest($c::VARCHAR[]) AS checkpoint_id""",
                             {"r": [k[0] for k in keys], "n": [k[1] or "" for k in keys],
                              "c": [k[2] for k in keys]})
            where.append("(e.run_id, e.namespace, e.checkpoint_id) IN "
                         "(SELECT (run_id, namespace, checkpoint_id) FROM wanted)")
        join = ""
        if blobs is not None:
            self.con.execute("""CREATE OR REPLACE TEMP TABLE blobs AS
                SELECT folder || '/' || unnest(string_split(names, '/')) AS path,
                       unnest(string_split(sizes, '/'))::BIGINT AS size
                FROM (SELECT unnest($f::VARCHAR[]) AS folder, unnest($n::VARCHAR[]) AS names,
                             unnest($s::VARCHAR[]) AS sizes)""",
                             {"f": blobs.folders, "n": blobs.names, "s": blobs.sizes})
            join = "LEFT JOIN blobs b ON b.path = e.location"
            where.append(f"""NOT coalesce(e.status <> {_INCOMPLETE} AND e.codec IN (SELECT unnest($codecs))
                AND b.path IS NOT NULL AND strpos(e.location, '\\') = 0
                AND (e.size_bytes IS NULL OR e.size_bytes = b.size), false)""")
            params["codecs"] = list(nf.CODECS)
        sql = f"""SELECT {', '.join('e.' + c for c in ENTRY_COLUMNS)} FROM entries e {join}
                  {'WHERE ' + ' AND '.join(where) if where else ''}
                  ORDER BY e.run_id, e.namespace, e.step, e.checkpoint_id"""
        try:
            return [_record(row) for row in self.con.execute(sql, params).fetchall()]
        finally:
            self.con.execute("DROP TABLE IF EXISTS wanted")
            self.con.execute("DROP TABLE IF EXISTS blobs")

    def catalog_unclean(self) -> list[CheckpointRecord]:
        """Entries the catalog alone finds fault with, or cannot clear (the blob files are
        not looked at): a save never committed, an unknown codec, no location, or one that
        is not a plain relative path under ``blobs/`` (the reader judges those one by one)."""
        sql = f"""SELECT {', '.join(ENTRY_COLUMNS)} FROM entries
                  WHERE NOT coalesce(status <> {_INCOMPLETE} AND codec IN (SELECT unnest($codecs))
                        AND {PLAIN_LOCATION_SQL}, false)
                  ORDER BY run_id, namespace, step, checkpoint_id"""
        rows = self.con.execute(sql, {"codecs": list(nf.CODECS)}).fetchall()
        return [_record(row) for row in rows]


def _record(row: tuple[Any, ...]) -> CheckpointRecord:
    run_id, namespace, cid, step, kind, status, reason, size, codec, location = row
    return CheckpointRecord(run_id=run_id, checkpoint_id=cid, namespace=namespace or "", step=step,
                            kind=kind or "full", status=status or Status.OK, status_reason=reason,
                            size_bytes=size, codec=codec, location=location)
