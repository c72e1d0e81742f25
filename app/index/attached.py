"""Compacted Parquet parts the index reads in place instead of copying their rows.

A cold index of a big native store used to insert every row of its compacted part into
DuckDB (~1 s per million rows, half of the whole command). When a full refresh lists one
clean local part and nothing else, the reader hands the index a private copy of that part
(taken before it was validated, so what was checked is what is read), the index keeps the
file in ``$LASTGOOD_HOME/parts/`` and ``checkpoints`` becomes a view: the rows of the table
``checkpoint_rows`` plus one branch per attached part. A part's rows share their
bookkeeping columns (status ok, as listed; ``verified``; ``data_checked_at``), which are
constants of the attachment.

Writes keep that true. A write that touches none of the part's rows changes nothing; one
that gives every row the same value changes the constant; anything else (a finding on one
checkpoint, a quarantine mark, a data check of some rows, an incremental refresh) first
copies the part's rows into ``checkpoint_rows`` (:func:`materialize`), after which the store
is an ordinary table store again.
"""

from __future__ import annotations

import json
import os
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import duckdb

from lastgood.readers.base import Status, sql_statuses

# checkpoint_rows' columns in the table's order (tests keep this equal to the schema)
ROW_COLUMNS = ("store_id", "run_id", "namespace", "checkpoint_id", "parent_id", "step", "created_at",
               "trigger", "kind", "status", "status_reason", "size_bytes", "checksum", "agent", "codec",
               "location", "metadata", "listed_status", "listed_reason", "verified", "data_checked_at")
PARTS_DIR = "parts"
DEFAULT_MIN_BYTES = 4 << 20
# an unreferenced copy is removed once this old (another process may still be reading it,
# or be about to commit the attachment that references it)
STALE_SECONDS = 600.0


def min_bytes() -> int:
    """Parts of at least this size are attached (``LASTGOOD_ATTACH_BYTES`` overrides it; below
    it, ~50,000 rows, copying the rows into the index costs less than keeping a file)."""
    raw = os.environ.get("LASTGOOD_ATTACH_BYTES", "").strip()
    try:
        return max(0, int(raw)) if raw else DEFAULT_MIN_BYTES
    except ValueError:
        return DEFAULT_MIN_BYTES


def parts_dir(index_path: str) -> str | None:
    """Where the index keeps attached parts (none for an in-memory index)."""
    return None if index_path == ":memory:" else str(Path(index_path).parent / PARTS_DIR)


def is_attached(con: duckdb.DuckDBPyConnection, store_id: int) -> bool:
    return con.execute("SELECT count(*) FROM attached_parts WHERE store_id = ?", [store_id]).fetchone()[0] > 0


def attach(con: duckdb.DuckDBPyConnection, store_id: int, copy: str, rows: int,
           facts: dict[str, Any] | None = None) -> None:
    """Make the private copy ``copy`` (in :func:`parts_dir`) the store's rows, in the caller's
    transaction; ``facts``: what the reader's one pass over it found (see :func:`facts`).
    A rollback leaves the file unreferenced (removed later by :func:`collect`)."""
    con.execute("DELETE FROM attached_parts WHERE store_id = ?", [store_id])
    con.execute("INSERT INTO attached_parts VALUES (?, ?, ?, NULL, NULL, ?)",
                [store_id, copy, rows, None if facts is None else json.dumps(facts)])
    define_view(con)


def facts(con: duckdb.DuckDBPyConnection, store_id: int) -> dict[str, Any] | None:
    """What the reader's one pass over the store's attached part found (readers.native_profile:
    parents missing, edges that may go back, ids in several places, sizes per run), valid
    while the part is attached (its rows unchanged); None for any other store."""
    row = con.execute("SELECT facts FROM attached_parts WHERE store_id = ?", [store_id]).fetchone()
    return json.loads(row[0]) if row and row[0] else None


def detach(con: duckdb.DuckDBPyConnection, store_id: int) -> None:
    """Forget the store's attached part (its rows go with it)."""
    paths = _paths(con, store_id)
    if not paths:
        return
    con.execute("DELETE FROM attached_parts WHERE store_id = ?", [store_id])
    define_view(con)
    _mark_unreferenced(paths)


def materialize(con: duckdb.DuckDBPyConnection, store_id: int) -> None:
    """Copy the attached part's rows into ``checkpoint_rows`` (before a write that gives
    some of them values of their own). No-op for a store without one."""
    rows = con.execute("SELECT path, verified, data_checked_at FROM attached_parts WHERE store_id = ?",
                       [store_id]).fetchall()
    if not rows:
        return
    path, verified, checked = rows[0]
    con.execute(f"INSERT INTO checkpoint_rows ({', '.join(ROW_COLUMNS)}) "
                f"{_branch(store_id, path, verified, checked)}")
    detach(con, store_id)


def set_constants(con: duckdb.DuckDBPyConnection, store_id: int, verified: str | None,
                  data_checked_at: datetime | None) -> None:
    con.execute("UPDATE attached_parts SET verified = ?, data_checked_at = ? WHERE store_id = ?",
                [verified, data_checked_at, store_id])
    define_view(con)


def constants(con: duckdb.DuckDBPyConnection, store_id: int) -> tuple[str | None, datetime | None, int]:
    row = con.execute("SELECT verified, data_checked_at, rows FROM attached_parts WHERE store_id = ?",
                      [store_id]).fetchone()
    return (row[0], row[1], int(row[2])) if row else (None, None, 0)


def define_view(con: duckdb.DuckDBPyConnection) -> None:
    """``checkpoints``: the table's rows and every attached part's."""
    branches = [f"SELECT {', '.join(ROW_COLUMNS)} FROM checkpoint_rows"]
    for store_id, path, verified, checked in con.execute(
            "SELECT store_id, path, verified, data_checked_at FROM attached_parts ORDER BY store_id").fetchall():
        branches.append(_branch(store_id, path, verified, checked))
    con.execute("CREATE OR REPLACE VIEW checkpoints AS " + " UNION ALL ".join(branches))


def repair(con: duckdb.DuckDBPyConnection) -> None:
    """Detach parts whose file is gone (removed by hand, a disk restored without it): their
    stores are listed again in full on the next refresh instead of every query failing."""
    gone = [sid for sid, path in con.execute("SELECT store_id, path FROM attached_parts").fetchall()
            if not os.path.isfile(path)]
    if not gone:
        return
    con.execute("BEGIN TRANSACTION")
    try:
        for store_id in gone:
            con.execute("DELETE FROM attached_parts WHERE store_id = ?", [store_id])
            con.execute("UPDATE stores SET scan_token = NULL WHERE store_id = ?", [store_id])
        define_view(con)
        con.execute("COMMIT")
    except BaseException:
        con.execute("ROLLBACK")
        raise


def collect(con: duckdb.DuckDBPyConnection, folder: str | None) -> None:
    """Remove copies no attachment references, once :data:`STALE_SECONDS` old."""
    if folder is None or not os.path.isdir(folder):
        return
    kept = {path for (path,) in con.execute("SELECT path FROM attached_parts").fetchall()}
    cutoff = time.time() - STALE_SECONDS
    for entry in os.scandir(folder):
        try:
            if entry.path not in kept and entry.name.endswith(".parquet") and entry.stat().st_mtime < cutoff:
                os.unlink(entry.path)
        except OSError:
            continue


def _paths(con: duckdb.DuckDBPyConnection, store_id: int) -> list[str]:
    return [p for (p,) in con.execute("SELECT path FROM attached_parts WHERE store_id = ?",
                                       [store_id]).fetchall()]


def _mark_unreferenced(paths: list[str]) -> None:
    """Stamp the time a copy stopped being referenced (collect's clock starts there)."""
    for path in paths:
        try:
            os.utime(path)
        except OSError:
            pass


_OK = sql_statuses(Status.OK)


def _branch(store_id: int, path: str, verified: str | None, checked: datetime | None) -> str:
    """The part's rows in checkpoint_rows' columns, as the table would hold them."""
    return f"""SELECT {int(store_id)}::INTEGER AS store_id, run_id, coalesce(namespace, '') AS namespace,
        checkpoint_id, parent_id, step, created_at, trigger, kind, {_OK} AS status,
        NULL::VARCHAR AS status_reason, size_bytes, checksum, agent, codec, location,
        nullif(metadata, '')::JSON AS metadata, {_OK} AS listed_status, NULL::VARCHAR AS listed_reason,
        {_literal(verified)}::VARCHAR AS verified, {_literal(checked)}::TIMESTAMPTZ AS data_checked_at
        FROM read_parquet({_literal(path)})"""


def _literal(value: Any) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, datetime):
        value = value.isoformat()
    return "'" + str(value).replace("'", "''") + "'"
