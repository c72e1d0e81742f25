"""The journal's marks in the index: statuses set by actions (quarantined, superseded) are
derived from the store's journal and copied into the index on every refresh; the index mirrors
the journal (for SQL and pages) and remembers the furthest entry it read, so a journal whose
newest entries were removed is reported (its hash chain cannot show that)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from lastgood.errors import DecodeError
from lastgood.index import attached
from lastgood.index.catalog import Catalog, _apply_error_statuses
from lastgood.index.store import OpenStore
from lastgood.readers import journal as jr
from lastgood.readers.base import MARKED_STATUSES, Recoverable, capability, sql_statuses


def sync_marks(catalog: Catalog, store: OpenStore) -> int:
    """Copy the journal's marks into the index statuses; returns how many are marked."""
    writer = capability(store.reader, Recoverable)
    if writer is None:
        return 0
    try:
        entries = writer.recovery().journal_entries()
    except (OSError, DecodeError):
        return 0
    marks = jr.fold_marks(entries)
    with catalog.connect() as con:
        _remember_tip(con, store.store_id, entries)
        had = con.execute(f"""SELECT count(*) FROM checkpoints WHERE store_id = ?
            AND status IN {sql_statuses(*MARKED_STATUSES)}""", [store.store_id]).fetchone()[0]
        if not marks and not had and not entries:
            return 0
        con.execute("BEGIN TRANSACTION")
        try:
            if marks:  # marks are per checkpoint: an attached part's rows become the table's
                attached.materialize(con, store.store_id)
            con.execute(f"""UPDATE checkpoint_rows SET status = listed_status, status_reason = listed_reason
                WHERE store_id = ? AND status IN {sql_statuses(*MARKED_STATUSES)}""", [store.store_id])
            _write_marks(con, store.store_id, marks)
            _apply_error_statuses(con, store.store_id)
            _mirror_journal(con, store.store_id, entries)
            con.execute("COMMIT")
        except BaseException:
            con.execute("ROLLBACK")
            raise
    return len(marks)


def _write_marks(con: Any, store_id: int, marks: Mapping[jr.MarkKey, jr.Mark]) -> None:
    if not marks:
        return
    import pyarrow as pa

    keys = list(marks)
    table = pa.table({"run_id": [k[0] for k in keys], "namespace": [k[1] for k in keys],
                      "checkpoint_id": [k[2] for k in keys],
                      "status": [marks[k].status for k in keys],
                      "reason": [marks[k].reason for k in keys]})
    con.register("lastgood_marks", table)
    try:
        con.execute("""UPDATE checkpoint_rows c SET status = m.status, status_reason = m.reason
            FROM lastgood_marks m WHERE c.store_id = ? AND c.run_id = m.run_id
            AND c.namespace = m.namespace AND c.checkpoint_id = m.checkpoint_id""", [store_id])
    finally:
        con.unregister("lastgood_marks")


def _remember_tip(con: Any, store_id: int, entries: list[dict[str, Any]]) -> None:
    """Keep the furthest journal entry this index has read; a journal that lost it keeps the old
    one (the loss stays reported: :func:`lost_entries`). A reopen writes nothing."""
    last = entries[-1] if entries else None
    seen = _seen_tip(con, store_id)
    if last is None or not last.get("hash") or _lost(entries, seen):
        return
    tip = (int(last.get("seq") or len(entries)), str(last["hash"]))
    if seen is None or tuple(seen[:2]) != tip:
        con.execute("INSERT OR REPLACE INTO journal_tips VALUES (?, ?, ?, ?, now())",
                    [store_id, *tip, last.get("id")])


def lost_entries(con: Any, store_id: int, entries: list[dict[str, Any]]) -> list[str]:
    """A problem when the journal no longer holds the furthest entry this index read from it:
    entries were removed from its end (or the end rewritten). Its hash chain cannot show that:
    what is left still links. Empty when it holds it, or nothing was read before."""
    return _lost(entries, _seen_tip(con, store_id))


def _seen_tip(con: Any, store_id: int) -> tuple[Any, ...] | None:
    return con.execute("SELECT seq, hash, action_id, seen_at FROM journal_tips WHERE store_id = ?",
                       [store_id]).fetchone()


def _lost(entries: list[dict[str, Any]], seen: tuple[Any, ...] | None) -> list[str]:
    if seen is None:
        return []
    seq, digest, action_id, seen_at = seen
    kept = entries[seq - 1] if 0 < seq <= len(entries) else None
    if kept is not None and kept.get("hash") == digest:
        return []
    ends = f"ends at entry {len(entries)}" if entries else "is empty"
    return [f"the journal {ends}, but entry {seq} (action {action_id}), read by this index on "
            f"{seen_at:%Y-%m-%d %H:%M} UTC, is {'gone' if kept is None else 'rewritten'}: entries were "
            "removed from its end"]


def _mirror_journal(con: Any, store_id: int, entries: list[dict[str, Any]]) -> None:
    """The index's ``journal`` table mirrors the store's journal (for SQL and pages); an entry
    that cannot be read (no id: the chain check reports it) is left out."""
    entries = [e for e in entries if e.get("id")]
    tip = entries[-1].get("hash") if entries else None
    row = con.execute("SELECT count(*), max_by(hash, seq) FROM journal WHERE store_id = ?",
                      [store_id]).fetchone()
    if row[0] == len(entries) and row[1] == tip:
        return
    import pyarrow as pa

    con.execute("DELETE FROM journal WHERE store_id = ?", [store_id])
    if not entries:
        return
    columns = {"action_id": "id", "seq": "seq", "acted_at": "time", "operator": "operator",
               "action": "action", "run_id": "run_id", "namespace": "namespace", "target": "target",
               "previous_head": "previous_head", "new_head": "new_head", "reason": "reason",
               "undoes": "undo_of", "hash": "hash", "prev_hash": "prev_hash"}
    data = {col: [None if e.get(key) is None else str(e.get(key)) for e in entries]
            for col, key in columns.items()}
    data["superseded"] = [jr.canonical(e.get("superseded") or []).decode() for e in entries]
    con.register("lastgood_journal_rows", pa.table(data))
    try:
        con.execute("""INSERT INTO journal SELECT ?, action_id, TRY_CAST(seq AS BIGINT),
            TRY_CAST(acted_at AS TIMESTAMPTZ), operator, action, run_id, namespace, target, previous_head,
            new_head, CAST(superseded AS JSON), reason, undoes, hash, prev_hash
            FROM lastgood_journal_rows""", [store_id])
    finally:
        con.unregister("lastgood_journal_rows")
