"""The shipped conformance kit (lastgood.readers.testing) run on every built-in reader.

Each reader's stores are written by its own writer (the native writer, real LangGraph graphs);
each kind of damage its format can have is applied to a fresh copy.
"""

from __future__ import annotations

import json
import sqlite3
from datetime import timedelta
from pathlib import Path

import pytest

from lastgood.checks import Check
from lastgood.readers.native import format as nf
from lastgood.readers.native.writer import NativeWriter
from lastgood.readers.testing import Damage, ReaderConformance
from tests.helpers import SECRET, T0, agent_state, write_store


def test_every_builtin_reader_runs_the_kit() -> None:
    """Every reader in the registry has a ReaderConformance subclass in the suite (here, or beside
    its own tests in tests/test_reader_*.py)."""
    import re

    from lastgood.readers.registry import BUILTIN

    kits = set()
    for path in Path(__file__).parent.glob("test_*.py"):
        text = path.read_text()
        for body in re.findall(r"^class \w+\(ReaderConformance\):\n((?:(?:    .*)?\n)+)", text, re.M):
            kits.update(re.findall(r'^    reader_name = "([^"]+)"', body, re.M))
    assert set(BUILTIN) <= kits, sorted(set(BUILTIN) - kits)


# ---- native -------------------------------------------------------------------------------


def _blobs(url: str) -> list[Path]:
    return sorted(p for p in (Path(url) / nf.BLOBS).rglob("*") if p.is_file())


def _truncate_blob(url: str) -> None:
    blob = _blobs(url)[3]
    blob.write_bytes(blob.read_bytes()[: blob.stat().st_size // 2])


def _flip_byte(url: str) -> None:
    blob = _blobs(url)[4]
    data = bytearray(blob.read_bytes())
    data[len(data) // 2] ^= 0x01
    blob.write_bytes(bytes(data))


def _remove_blob(url: str) -> None:
    _blobs(url)[5].unlink()


def _bad_catalog_line(url: str) -> None:
    tail = next((Path(url) / nf.TAIL).glob("*.jsonl"))
    with tail.open("a") as handle:
        handle.write('{"this is": "not a catalog entry"\n')


class TestNativeKit(ReaderConformance):
    reader_name = "native"
    secret = SECRET

    def make_store(self, tmp: Path) -> str:
        url = str(tmp / "native")
        write_store(url, runs=2, steps=6)
        return url

    def append(self, url: str) -> int:
        writer = NativeWriter(url, codec="json")
        for step in range(6, 9):
            writer.save("run-0", agent_state(step), created_at=T0 + timedelta(hours=1, minutes=step))
        return 3

    def damages(self) -> list[Damage]:
        return [
            Damage("truncated blob", _truncate_blob, {Check.SIZE_MISMATCH}, "structure"),
            Damage("a flipped byte", _flip_byte, {Check.SHA256_MISMATCH}),
            Damage("missing blob", _remove_blob, {Check.BLOB_MISSING}, "structure"),
            Damage("a malformed catalog line", _bad_catalog_line, {Check.CATALOG_LINE}, "structure"),
        ]


class TestNativeOnObjectStorageKit(TestNativeKit):
    """The same store on fsspec's ``memory://`` filesystem (what s3://, gs://… look like to the reader)."""

    def make_store(self, tmp: Path) -> str:
        import uuid

        url = f"memory://kit-{uuid.uuid4().hex}"
        write_store(url, runs=2, steps=6)
        return url

    def damages(self) -> list[Damage]:
        return []  # the local variant damages files on disk


# ---- LangGraph SQLite -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def langgraph_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tests.langgraph_graphs import write_sqlite_store

    path = tmp_path_factory.mktemp("kit-langgraph") / "graph.sqlite"
    write_sqlite_store(path)
    return path


def _sql(url: str, statement: str) -> None:
    conn = sqlite3.connect(url)
    try:
        conn.execute(statement)
        conn.commit()
    finally:
        conn.close()


def _a_checkpoint(url: str, offset: int = 3) -> tuple[str, str]:
    with sqlite3.connect(url) as conn:
        return conn.execute("SELECT thread_id, checkpoint_id FROM checkpoints WHERE checkpoint_ns = '' "
                            "ORDER BY thread_id, checkpoint_id LIMIT 1 OFFSET ?", (offset,)).fetchone()


class TestLangGraphSqliteKit(ReaderConformance):
    reader_name = "langgraph-sqlite"

    @pytest.fixture(autouse=True)
    def _source(self, langgraph_db: Path) -> None:
        self.source = langgraph_db

    def make_store(self, tmp: Path) -> str:
        tmp.mkdir(parents=True, exist_ok=True)
        path = tmp / "graph.sqlite"
        path.write_bytes(self.source.read_bytes())
        return str(path)

    def append(self, url: str) -> int:
        from langgraph.checkpoint.sqlite import SqliteSaver

        from tests.langgraph_graphs import build_tools

        conn = sqlite3.connect(url, check_same_thread=False)
        try:
            before = conn.execute("SELECT count(*) FROM checkpoints").fetchone()[0]
            build_tools(SqliteSaver(conn), "kit-appended")
            added = conn.execute("SELECT count(*) FROM checkpoints").fetchone()[0] - before
            conn.execute("PRAGMA journal_mode=DELETE")  # as the agent left it: no -wal beside it
        finally:
            conn.close()
        return added

    def damages(self) -> list[Damage]:
        def truncated(url: str) -> None:
            thread, cid = _a_checkpoint(url)
            _sql(url, f"UPDATE checkpoints SET checkpoint = substr(checkpoint, 1, 10) "
                      f"WHERE thread_id = '{thread}' AND checkpoint_id = '{cid}'")

        def unknown_codec(url: str) -> None:
            thread, cid = _a_checkpoint(url, 4)
            _sql(url, f"UPDATE checkpoints SET type = 'foo' WHERE thread_id = '{thread}' AND checkpoint_id = '{cid}'")

        def orphan(url: str) -> None:
            thread, cid = _a_checkpoint(url, 2)
            _sql(url, f"UPDATE checkpoints SET parent_checkpoint_id = 'gone-0000' "
                      f"WHERE thread_id = '{thread}' AND checkpoint_id = '{cid}'")

        def pickled(url: str) -> None:
            import pickle

            thread, cid = _a_checkpoint(url, 5)
            payload = pickle.dumps({"x": 1}).hex()
            _sql(url, f"UPDATE checkpoints SET type = 'pickle', checkpoint = X'{payload}' "
                      f"WHERE thread_id = '{thread}' AND checkpoint_id = '{cid}'")

        return [
            Damage("a truncated checkpoint blob", truncated, {Check.UNDECODABLE}),
            Damage("an unknown serializer type", unknown_codec, {Check.UNKNOWN_CODEC}, "structure"),
            Damage("a parent that is gone", orphan, {Check.PARENT_MISSING}, "structure"),
            Damage("a pickled checkpoint", pickled, {Check.PICKLE_PAYLOAD}),
        ]


# ---- LangGraph Postgres -----------------------------------------------------------------------


@pytest.mark.postgres
class TestLangGraphPostgresKit(ReaderConformance):
    reader_name = "langgraph-postgres"

    @pytest.fixture(autouse=True)
    def _server(self, pg_create_database) -> None:
        self.create_database = pg_create_database

    def make_store(self, tmp: Path) -> str:
        from langgraph.checkpoint.postgres import PostgresSaver

        from tests.langgraph_graphs import build_all

        dsn = self.create_database("kit")
        with PostgresSaver.from_conn_string(dsn) as saver:
            saver.setup()
            build_all(saver)
        return dsn

    def append(self, url: str) -> int:
        import psycopg
        from langgraph.checkpoint.postgres import PostgresSaver

        from tests.langgraph_graphs import build_tools

        with psycopg.connect(url) as conn:
            before = conn.execute("SELECT count(*) FROM checkpoints").fetchone()[0]
        with PostgresSaver.from_conn_string(url) as saver:
            build_tools(saver, "kit-appended")
        with psycopg.connect(url) as conn:
            return conn.execute("SELECT count(*) FROM checkpoints").fetchone()[0] - before

    def damages(self) -> list[Damage]:
        def pg(url: str, statement: str) -> None:
            import psycopg

            with psycopg.connect(url, autocommit=True) as conn:
                conn.execute(statement)

        pick = ("(SELECT checkpoint_id FROM checkpoints WHERE checkpoint_ns = '' "
                "ORDER BY thread_id, checkpoint_id LIMIT 1 OFFSET {})")

        def orphan(url: str) -> None:
            pg(url, f"UPDATE checkpoints SET parent_checkpoint_id = 'gone-0000' WHERE checkpoint_id = {pick.format(2)}")

        def bad_blob(url: str) -> None:
            pg(url, "UPDATE checkpoint_blobs SET blob = '\\xc1c1ffff00'::bytea "
                    "WHERE type = 'msgpack' AND channel = 'messages' "
                    "AND ctid = (SELECT ctid FROM checkpoint_blobs WHERE type = 'msgpack' AND channel = 'messages' LIMIT 1)")

        def unknown_codec(url: str) -> None:
            pg(url, "UPDATE checkpoint_blobs SET type = 'foo' WHERE ctid = "
                    "(SELECT ctid FROM checkpoint_blobs WHERE type = 'msgpack' LIMIT 1 OFFSET 3)")

        return [
            Damage("a parent that is gone", orphan, {Check.PARENT_MISSING}, "structure"),
            Damage("an undecodable channel blob", bad_blob, {Check.UNDECODABLE}),
            Damage("an unknown serializer type", unknown_codec, {Check.UNKNOWN_CODEC}, "structure"),
        ]
