"""What a LangGraph database holds (per table, run and channel) and giving freed space back.

SQLite: table and run totals are exact (``length()`` of each value, read from the record headers
without the values); a checkpoint blob holds every channel inline, so its split by channel is
estimated from a sample of blobs spread over the file. Freed pages stay inside the file: SQLite reuses
them; ``PRAGMA incremental_vacuum`` gives them back when the database was created with
``auto_vacuum = INCREMENTAL``, else only ``VACUUM`` shrinks the file (it needs the database to itself
for a moment, and rewrites it whole). ``--vacuum`` runs it after switching the database to incremental
auto-vacuum, so later prunes give space back on their own.

Postgres: exact per channel (``checkpoint_blobs`` is keyed by channel; inline values are measured
with ``pg_column_size``). A DELETE leaves dead rows: (auto)VACUUM makes their space reusable inside the
tables, and the files on disk shrink only with VACUUM FULL, which locks the tables (never run here).
"""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

import msgpack

from lastgood.readers.langgraph.recovery import TABLE as JOURNAL_TABLE
from lastgood.readers.journal import breakdown_row

AUTO_VACUUM = {0: "none", 1: "full", 2: "incremental"}
VACUUM_TIMEOUT_MS = 5000


# ---- SQLite -----------------------------------------------------------------------------------


def sqlite_breakdown(backend: Any, channels: bool, sample: int) -> list[dict[str, Any]]:
    with backend._reading() as conn:
        out = [breakdown_row("checkpoints", *conn.execute("""SELECT count(*), coalesce(sum(length(checkpoint)), 0)
            + coalesce(sum(length(metadata)), 0) FROM checkpoints""").fetchone())]
        out += [breakdown_row("checkpoints", n, b, run_id=t) for t, n, b in conn.execute("""SELECT thread_id, count(*),
            coalesce(sum(length(checkpoint)), 0) + coalesce(sum(length(metadata)), 0) FROM checkpoints
            GROUP BY thread_id""")]
        if backend._has_writes(conn):
            out.append(breakdown_row("writes", *conn.execute(
                "SELECT count(*), coalesce(sum(length(value)), 0) FROM writes").fetchone()))
            out += [breakdown_row("writes", n, b, run_id=t) for t, n, b in conn.execute(
                "SELECT thread_id, count(*), coalesce(sum(length(value)), 0) FROM writes GROUP BY thread_id")]
            out += [breakdown_row("writes", n, b, channel=c) for c, n, b in conn.execute(
                "SELECT channel, count(*), coalesce(sum(length(value)), 0) FROM writes GROUP BY channel")]
        if backend._journal_exists(conn):
            out.append(breakdown_row("journal", *conn.execute(
                f"SELECT count(*), coalesce(sum(length(entry)), 0) FROM {JOURNAL_TABLE}").fetchone()))
        if channels:
            out += _sampled_channels(conn, out[0]["bytes"], sample)
    return out


def _sampled_channels(conn: sqlite3.Connection, total: int, sample: int) -> list[dict[str, Any]]:
    """Each channel's share of the checkpoint blobs, measured on ``sample`` blobs spread over the
    table (re-encoded value sizes; extension types kept as they are) and scaled to ``total``."""
    low, high, count = conn.execute("SELECT min(rowid), max(rowid), count(*) FROM checkpoints").fetchone()
    if not count or sample <= 0:
        return []
    step = max(1, (high - low + 1) // sample)
    rows = conn.execute("SELECT type, checkpoint FROM checkpoints WHERE rowid >= ? AND (rowid - ?) % ? = 0 LIMIT ?",
                        (low, low, step, sample)).fetchall()
    sizes: dict[str, int] = {}
    seen: dict[str, int] = {}
    measured = 0
    for type_, blob in rows:
        values = _channel_values(type_, blob)
        if values is None:
            continue
        measured += len(blob)
        for channel, value in values.items():
            sizes[channel] = sizes.get(channel, 0) + len(msgpack.packb(value, use_bin_type=True))
            seen[channel] = seen.get(channel, 0) + 1
    if not measured:
        return []
    return [breakdown_row("checkpoints", round(count * seen[ch] / len(rows)), round(total * size / measured), channel=ch,
                 estimated=True) for ch, size in sorted(sizes.items(), key=lambda kv: -kv[1])]


def _channel_values(type_: Any, blob: Any) -> dict[str, Any] | None:
    if type_ != "msgpack" or not isinstance(blob, (bytes, memoryview)):
        return None
    try:
        value = msgpack.unpackb(bytes(blob), raw=False, strict_map_key=False, ext_hook=msgpack.ExtType)
    except (ValueError, TypeError, msgpack.UnpackException):
        return None
    values = value.get("channel_values") if isinstance(value, dict) else None
    return {str(k): v for k, v in values.items()} if isinstance(values, dict) else None


def sqlite_footprint(path: Path) -> dict[str, Any]:
    files = {"database": _size(path), "wal": _size(Path(f"{path}-wal")), "shm": _size(Path(f"{path}-shm"))}
    uri = path.resolve().as_uri() + "?mode=ro"
    with closing(sqlite3.connect(uri, uri=True, timeout=10)) as conn:
        page = conn.execute("PRAGMA page_size").fetchone()[0]
        free = conn.execute("PRAGMA freelist_count").fetchone()[0]
        pages = conn.execute("PRAGMA page_count").fetchone()[0]
        auto = AUTO_VACUUM.get(conn.execute("PRAGMA auto_vacuum").fetchone()[0], "unknown")
    notes = []
    if free:
        notes.append(f"{free * page:,} bytes are free pages inside the file: SQLite reuses them for new checkpoints"
                     + ("; `PRAGMA incremental_vacuum` gives them back" if auto == "incremental" else
                        "; the file shrinks only with VACUUM (`lastgood prune STORE --vacuum`)"))
    return {"files": files, "bytes": sum(files.values()), "used_bytes": (pages - free) * page,
            "free_bytes": free * page, "auto_vacuum": auto, "notes": notes}


def sqlite_reclaim(backend: Any, vacuum: bool) -> dict[str, Any]:
    """Give free pages back (incremental vacuum; VACUUM when asked), checkpoint the WAL, and report."""
    before = sqlite_footprint(backend.path)
    notes: list[str] = []
    vacuumed = False
    with closing(backend._connect(read_only=False)) as conn:
        auto = conn.execute("PRAGMA auto_vacuum").fetchone()[0]
        if auto == 2 and before["free_bytes"]:
            conn.execute("PRAGMA incremental_vacuum")
        if vacuum:
            vacuumed = _vacuum(conn, auto, notes)
        if str(conn.execute("PRAGMA journal_mode").fetchone()[0]).lower() == "wal":
            busy = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0]
            if busy:
                notes.append("the WAL file could not be truncated (a reader was active); SQLite does it later")
    after = sqlite_footprint(backend.path)
    if not vacuumed and after["free_bytes"]:
        notes += after["notes"]
    return {"before_bytes": before["bytes"], "after_bytes": after["bytes"],
            "returned_bytes": max(0, before["bytes"] - after["bytes"]), "free_bytes": after["free_bytes"],
            "auto_vacuum": after["auto_vacuum"], "vacuumed": vacuumed, "notes": notes}


def _vacuum(conn: sqlite3.Connection, auto: int, notes: list[str]) -> bool:
    conn.execute(f"PRAGMA busy_timeout = {VACUUM_TIMEOUT_MS}")
    try:
        if auto != 2:
            conn.execute("PRAGMA auto_vacuum = INCREMENTAL")  # takes effect with this VACUUM
        conn.execute("VACUUM")
    except sqlite3.OperationalError as exc:
        notes.append(f"VACUUM could not have the database to itself ({exc}): an agent is using it; the free pages "
                     "are reused by new checkpoints — run `lastgood prune STORE --vacuum` again when it is idle")
        return False
    notes.append("VACUUM rewrote the database" + ("" if auto == 2 else
                 "; it now has incremental auto-vacuum, so later prunes give space back on their own"))
    return True


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


# ---- Postgres ---------------------------------------------------------------------------------

SIZES_SQL = """SELECT relname, pg_total_relation_size(relid), n_live_tup, n_dead_tup FROM pg_stat_user_tables
WHERE relname IN ('checkpoints', 'checkpoint_blobs', 'checkpoint_writes', 'lastgood_journal')"""


def postgres_breakdown(backend: Any, channels: bool) -> list[dict[str, Any]]:
    with backend._reading() as conn:
        out = [breakdown_row("checkpoints", *conn.execute("""SELECT count(*), coalesce(sum(pg_column_size(checkpoint)
            + coalesce(pg_column_size(metadata), 0)), 0) FROM checkpoints""").fetchone())]
        out += [breakdown_row("checkpoints", n, b, run_id=t) for t, n, b in conn.execute("""SELECT thread_id, count(*),
            sum(pg_column_size(checkpoint) + coalesce(pg_column_size(metadata), 0)) FROM checkpoints GROUP BY 1""")]
        for table, column in (("checkpoint_blobs", "blob"), ("checkpoint_writes", "blob")):
            out.append(breakdown_row(table, *conn.execute(
                f"SELECT count(*), coalesce(sum(pg_column_size({column})), 0) FROM {table}").fetchone()))
            out += [breakdown_row(table, n, b, run_id=t) for t, n, b in conn.execute(
                f"SELECT thread_id, count(*), coalesce(sum(pg_column_size({column})), 0) FROM {table} GROUP BY 1")]
            out += [breakdown_row(table, n, b, channel=c) for c, n, b in conn.execute(
                f"SELECT channel, count(*), coalesce(sum(pg_column_size({column})), 0) FROM {table} GROUP BY 1")]
        if channels:
            out += [breakdown_row("checkpoints", n, b, channel=c) for c, n, b in conn.execute("""SELECT v.key, count(*),
                sum(pg_column_size(v.value)) FROM checkpoints c CROSS JOIN LATERAL jsonb_each(
                CASE jsonb_typeof(c.checkpoint -> 'channel_values') WHEN 'object' THEN c.checkpoint -> 'channel_values'
                ELSE '{}' END) AS v GROUP BY 1""")]
    return out


def postgres_footprint(backend: Any) -> dict[str, Any]:
    with backend._reading() as conn:
        rows = conn.execute(SIZES_SQL).fetchall()
    files = {name: int(size) for name, size, _live, _dead in rows}
    dead = {name: int(d or 0) for name, _s, _l, d in rows}
    notes = []
    if any(dead.values()):
        notes.append(f"{sum(dead.values()):,} dead rows wait for (auto)VACUUM, which makes their space reusable "
                     "inside the tables; the files shrink only with VACUUM FULL, which locks the tables")
    return {"files": files, "bytes": sum(files.values()), "dead_rows": dead, "free_bytes": None, "notes": notes}


def postgres_reclaim(backend: Any, vacuum: bool) -> dict[str, Any]:
    before = postgres_footprint(backend)
    notes = ["DELETE leaves the rows' space to autovacuum, which makes it reusable inside the tables (new "
             "checkpoints fill it); the files on disk shrink only with VACUUM FULL, which locks the tables "
             "(Lastgood never runs it)"]
    if vacuum:
        import psycopg

        with psycopg.connect(backend.url, autocommit=True) as conn:
            conn.execute("VACUUM (ANALYZE) checkpoints, checkpoint_blobs, checkpoint_writes")
        notes.insert(0, "VACUUM (ANALYZE) ran: the deleted rows' space is reusable now")
    after = postgres_footprint(backend)
    return {"before_bytes": before["bytes"], "after_bytes": after["bytes"],
            "returned_bytes": max(0, before["bytes"] - after["bytes"]), "free_bytes": None,
            "vacuumed": vacuum, "dead_rows": after["dead_rows"], "notes": notes}
