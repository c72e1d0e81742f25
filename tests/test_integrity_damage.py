"""Random damage (hypothesis) on stores written by the real writer and by real LangGraph graphs:
every damaged checkpoint and everything built on it is flagged, nothing crashes, and every
healthy checkpoint stays ok."""

from __future__ import annotations

import hashlib
import json
import shutil
import sqlite3
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from lastgood.index import queries
from lastgood.index.catalog import Catalog
from lastgood.stores import index_store
from lastgood.integrity.verify import store_findings, verify_store
from tests.helpers import write_store
from tests.langgraph_graphs import write_sqlite_store

SETTINGS = settings(max_examples=30, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


def _check(url: str, tmp: Path) -> tuple[Catalog, int]:
    catalog = Catalog(":memory:")
    summary = index_store(catalog, url, check="none")
    verify_store(catalog, summary.store.store_id, summary.store.reader, read_data=True)
    return catalog, summary.store.store_id


def _verdicts(catalog: Catalog, sid: int) -> tuple[dict[str, str], dict[str, set[str]]]:
    statuses = {r["checkpoint_id"]: r["status"] for r in queries.list_checkpoints(catalog, sid)}
    found: dict[str, set[str]] = {}
    for f in store_findings(catalog, sid):
        if f["checkpoint_id"]:
            found.setdefault(f["checkpoint_id"], set()).add(f["severity"])
    return statuses, found


# ---- native store --------------------------------------------------------------------

@pytest.fixture(scope="module")
def native_base(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict[str, Any]]]:
    root = tmp_path_factory.mktemp("native") / "store"
    write_store(str(root), runs=2, steps=8)  # full every 4th, incremental in between
    entries = [json.loads(p.read_text()) for p in sorted((root / "catalog" / "tail").glob("*.jsonl"))]
    return root, entries


NATIVE_DAMAGE = st.lists(st.tuples(st.sampled_from(["flip", "truncate", "delete-blob", "delete-entry",
                                                    "duplicate-entry"]),
                                   st.integers(0, 15), st.integers(0, 10_000)), min_size=1, max_size=3)


def _built_on(entries: list[dict[str, Any]], roots: set[str]) -> set[str]:
    """Incremental checkpoints whose chain reaches ``roots``."""
    children: dict[str, list[dict[str, Any]]] = {}
    for e in entries:
        children.setdefault(e["parent_id"], []).append(e)
    found, todo = set(), list(roots)
    while todo:
        for child in children.get(todo.pop(), []):
            if child["kind"] == "incremental" and child["checkpoint_id"] not in found:
                found.add(child["checkpoint_id"])
                todo.append(child["checkpoint_id"])
    return found


def _damage_native(root: Path, entries: list[dict[str, Any]], damage: list[tuple[str, int, int]]
                   ) -> tuple[set[str], set[str]]:
    """Apply the damage; returns (damaged checkpoint ids, ids whose catalog entry is gone)."""
    damaged, deleted = set(), set()
    for kind, index, where in damage:
        entry = entries[index % len(entries)]
        cid, blob = entry["checkpoint_id"], root / entry["location"]
        tail = root / "catalog" / "tail" / f"{cid}-1.jsonl"
        if kind == "delete-entry":
            for line_file in tail.parent.glob(f"{cid}-*.jsonl"):
                line_file.unlink()
            deleted.add(cid)
        elif kind == "duplicate-entry" and tail.exists():
            shutil.copy(tail, tail.with_name(f"{cid}-2.jsonl"))
        elif kind == "delete-blob":
            blob.unlink(missing_ok=True)
            damaged.add(cid)
        elif blob.exists() and kind == "flip":
            data = bytearray(blob.read_bytes())
            data[where % len(data)] ^= 1 << (where % 8)
            blob.write_bytes(bytes(data))
            damaged.add(cid)
        elif blob.exists() and kind == "truncate":
            data = blob.read_bytes()
            blob.write_bytes(data[: where % len(data)])
            damaged.add(cid)
    changed = {e["checkpoint_id"] for e in entries if e["checkpoint_id"] in damaged
               and _blob_changed(root, entries, e)}
    return changed - deleted, deleted


def _blob_changed(root: Path, entries: list[dict[str, Any]], entry: dict[str, Any]) -> bool:
    """Whether the blob differs from what was written (two flips of one bit undo each other)."""
    blob = root / entry["location"]
    return not blob.exists() or blob.stat().st_size != entry["size_bytes"] or \
        hashlib.sha256(blob.read_bytes()).hexdigest() != entry["checksum"].removeprefix("sha256:")


@SETTINGS
@given(damage=NATIVE_DAMAGE)
@example(damage=[("delete-entry", 2, 0), ("duplicate-entry", 9, 0), ("flip", 13, 77)])
@example(damage=[("truncate", 1, 5), ("delete-blob", 4, 0)])
def test_random_damage_on_native_stores(native_base: tuple[Path, list[dict[str, Any]]], tmp_path: Path,
                                        damage: list[tuple[str, int, int]]) -> None:
    base, entries = native_base
    root = tmp_path / uuid.uuid4().hex
    shutil.copytree(base, root)
    damaged, deleted = _damage_native(root, entries, damage)
    catalog, sid = _check(str(root), tmp_path)
    statuses, found = _verdicts(catalog, sid)
    listed = [e for e in entries if e["checkpoint_id"] not in deleted]
    assert set(statuses) == {e["checkpoint_id"] for e in listed}
    broken = (damaged | _built_on(entries, damaged | deleted)) - deleted
    for cid in broken:
        assert statuses[cid] != "ok" and "error" in found[cid], (cid, damage)
    orphans = {e["checkpoint_id"] for e in listed if e["parent_id"] in deleted}
    for cid in orphans:
        assert found.get(cid), (cid, damage)  # a full orphan is a warning; an incremental one an error
    for cid, status in statuses.items():
        if cid not in broken:
            assert status == "ok" and "error" not in found.get(cid, set()), (cid, damage)


# ---- LangGraph SQLite ------------------------------------------------------------------

@pytest.fixture(scope="module")
def sqlite_base(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[tuple[str, str, str, str | None]]]:
    path = tmp_path_factory.mktemp("lg") / "base.sqlite"
    write_sqlite_store(path, extra=False)
    with sqlite3.connect(path) as conn:
        rows = conn.execute("SELECT thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id "
                            "FROM checkpoints ORDER BY thread_id, checkpoint_ns, checkpoint_id").fetchall()
    return path, rows


SQLITE_DAMAGE = st.lists(st.tuples(st.sampled_from(["truncate", "garbage", "garbage-text", "unknown-type", "delete-row",
                                                    "delete-parent"]),
                                   st.integers(0, 200), st.integers(1, 10_000)), min_size=1, max_size=3)


def _damage_sqlite(path: Path, rows: list[tuple[str, str, str, str | None]],
                   damage: list[tuple[str, int, int]]) -> tuple[set[str], set[str]]:
    damaged, deleted = set(), set()
    conn = sqlite3.connect(path)
    by_id = {r[2]: r for r in rows}
    for kind, index, where in damage:
        thread, ns, cid, parent = rows[index % len(rows)]
        if kind == "delete-parent":
            if parent is None:
                continue
            thread, ns, cid, parent = by_id[parent]
            kind = "delete-row"
        key = (thread, ns, cid)
        if kind == "delete-row":
            conn.execute("DELETE FROM checkpoints WHERE thread_id = ? AND checkpoint_ns = ? AND checkpoint_id = ?", key)
            deleted.add(cid)
            continue
        change = {"truncate": f"checkpoint = substr(checkpoint, 1, {where} % length(checkpoint))",
                  "garbage": "checkpoint = CAST(X'C1' || randomblob(7) AS BLOB)",
                  # || makes TEXT: a column holding invalid UTF-8 (the reader must not crash)
                  "garbage-text": "checkpoint = X'C1' || randomblob(7)",
                  "unknown-type": "type = 'pickle-ish'"}[kind]
        conn.execute(f"UPDATE checkpoints SET {change} WHERE thread_id = ? AND checkpoint_ns = ? "
                     "AND checkpoint_id = ?", key)
        damaged.add(cid)
    conn.commit()
    conn.close()
    return damaged - deleted, deleted


@SETTINGS
@given(damage=SQLITE_DAMAGE)
@example(damage=[("delete-parent", 3, 1), ("garbage-text", 20, 1), ("unknown-type", 30, 1)])
@example(damage=[("delete-row", 7, 1), ("truncate", 12, 40), ("garbage", 25, 1)])
def test_random_damage_on_langgraph_sqlite(sqlite_base: tuple[Path, list[Any]], tmp_path: Path,
                                          damage: list[tuple[str, int, int]]) -> None:
    base, rows = sqlite_base
    path = tmp_path / f"{uuid.uuid4().hex}.sqlite"
    shutil.copy(base, path)
    damaged, deleted = _damage_sqlite(path, rows, damage)
    catalog, sid = _check(str(path), tmp_path)
    statuses, found = _verdicts(catalog, sid)
    assert set(statuses) == {r[2] for r in rows} - deleted
    orphans = {r[2] for r in rows if r[3] in deleted and r[2] not in deleted}
    for cid in damaged | orphans:
        assert statuses[cid] != "ok" and "error" in found[cid], (cid, damage)
    touched = {r[0] for r in rows if r[2] in damaged | deleted}
    for thread, _ns, cid, _parent in rows:
        # a DeltaChannel thread rebuilds values from its ancestors: damage spreads there by design
        if cid in statuses and cid not in damaged | orphans and (thread not in touched or "delta" not in thread):
            assert statuses[cid] == "ok" and "error" not in found.get(cid, set()), (cid, damage)


# ---- LangGraph Postgres ------------------------------------------------------------------

@pytest.fixture(scope="module")
def pg_base(pg_dsn: str, pg_create_database: Callable[[str], str]) -> tuple[str, list[Any]]:
    import psycopg
    from langgraph.checkpoint.postgres import PostgresSaver

    from tests.langgraph_graphs import build_all

    dsn = pg_create_database("integrity_base")
    with PostgresSaver.from_conn_string(dsn) as saver:
        saver.setup()
        build_all(saver)
    with psycopg.connect(dsn) as conn:
        rows = conn.execute("""SELECT thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id
            FROM checkpoints ORDER BY 1, 2, 3""").fetchall()
    return dsn.rpartition("/")[2], rows


PG_DAMAGE = st.lists(st.tuples(st.sampled_from(["truncate-blob", "garbage-blob", "delete-parent"]),
                               st.integers(0, 200), st.integers(1, 10_000)), min_size=1, max_size=2)


def _damage_pg(dsn: str, rows: list[Any], damage: list[tuple[str, int, int]]) -> tuple[set[str], set[str]]:
    """Blob damage hits every checkpoint that uses that channel version (everything built on it)."""
    import psycopg

    damaged, deleted = set(), set()
    by_id = {r[2]: r for r in rows}
    with psycopg.connect(dsn, autocommit=True) as conn:
        for kind, index, where in damage:
            thread, ns, cid, parent = rows[index % len(rows)]
            if kind == "delete-parent":
                if parent is not None:
                    conn.execute("DELETE FROM checkpoints WHERE thread_id = %s AND checkpoint_ns = %s "
                                 "AND checkpoint_id = %s", by_id[parent][:3])
                    deleted.add(parent)
                continue
            blob = conn.execute("""SELECT b.channel, b.version FROM checkpoint_blobs b JOIN checkpoints c
                ON c.thread_id = b.thread_id AND c.checkpoint_ns = b.checkpoint_ns
                AND c.checkpoint -> 'channel_versions' ->> b.channel = b.version
                WHERE c.thread_id = %s AND c.checkpoint_ns = %s AND c.checkpoint_id = %s
                AND b.type NOT IN ('empty') AND b.blob IS NOT NULL ORDER BY 1 LIMIT 1""",
                                (thread, ns, cid)).fetchone()
            if blob is None:
                continue
            change = ("blob = substring(blob from 1 for (%s %% greatest(length(blob), 1)))"
                      if kind == "truncate-blob" else "blob = '\\xc1c1ffff'::bytea || blob")
            params = [where] if kind == "truncate-blob" else []
            conn.execute(f"UPDATE checkpoint_blobs SET {change} WHERE thread_id = %s AND checkpoint_ns = %s "
                         "AND channel = %s AND version = %s", [*params, thread, ns, *blob])
            users = conn.execute("""SELECT checkpoint_id FROM checkpoints WHERE thread_id = %s
                AND checkpoint_ns = %s AND checkpoint -> 'channel_versions' ->> %s = %s""",
                                 (thread, ns, *blob)).fetchall()
            damaged.update(u[0] for u in users)
    return damaged - deleted, deleted


@pytest.mark.postgres
@settings(max_examples=10, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(damage=PG_DAMAGE)
@example(damage=[("delete-parent", 5, 1), ("truncate-blob", 20, 3)])
def test_random_damage_on_langgraph_postgres(pg_dsn: str, pg_base: tuple[str, list[Any]], tmp_path: Path,
                                             damage: list[tuple[str, int, int]]) -> None:
    import psycopg

    from tests.fixtures_pg import dsn_for_database

    template, rows = pg_base
    name = f"integrity_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template}"')
    dsn = dsn_for_database(pg_dsn, name)
    damaged, deleted = _damage_pg(dsn, rows, damage)
    catalog, sid = _check(dsn, tmp_path)
    statuses, found = _verdicts(catalog, sid)
    assert set(statuses) == {r[2] for r in rows} - deleted
    orphans = {r[2] for r in rows if r[3] in deleted and r[2] not in deleted}
    for cid in damaged | orphans:
        assert statuses[cid] != "ok" and "error" in found[cid], (cid, damage)
    touched = {r[0] for r in rows if r[2] in damaged | deleted}
    for thread, _ns, cid, _parent in rows:
        if cid in statuses and cid not in damaged | orphans and (thread not in touched or "delta" not in thread):
            assert statuses[cid] == "ok" and "error" not in found.get(cid, set()), (cid, damage)
