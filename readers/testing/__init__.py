"""The conformance kit every reader passes (shipped in the package, like ``fsspec/tests/abstract``).

A reader's test module subclasses :class:`ReaderConformance`, says which reader it tests and how to
make a store, and pytest collects the cases::

    from lastgood.readers.testing import Damage, ReaderConformance

    class TestMyFormat(ReaderConformance):
        reader_name = "my-format"            # its name in the registry (or its entry point)
        secret = "sk-live-…"                 # a secret-shaped value the store holds (redaction)

        def make_store(self, tmp: Path) -> str:
            ...                               # write a fresh store under tmp; return its URL

        def append(self, url: str) -> int:
            ...                               # add checkpoints as the format's writer would; how many

        def damages(self) -> list[Damage]:
            return [Damage("truncated blob", truncate_one, {Check.SIZE_MISMATCH})]

The cases: the store is recognised from its URL and contents; the listing has the common record
schema and types; a rescan finds nothing new; an append is found incrementally and nothing else is
re-read; every state decodes to plain data and redaction hides the store's secret; every damage the
format can have becomes the expected findings, never an exception; reading (listing, checking every
byte, decoding every state) leaves the store byte-identical; and where the reader can write
(capability ``recovery``), restore, rollback, quarantine and undo round trip through Lastgood's own
planner with an intact journal chain; where it can prune (capability ``retention``), a keep-last-1 prune
keeps every kept checkpoint readable as before and its undo brings every checkpoint back. ``docs/readers.md`` walks through writing a reader with it.

The kit drives a reader the way Lastgood does (the index, verification, the recovery planner): it
is the one module of ``lastgood.readers`` that imports the core.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from lastgood.checks import Check
from lastgood.errors import DecodeError
from lastgood.readers.base import (CHECKPOINT_NAMES, Capability, CheckpointRecord, Status, as_table, capabilities,
                                   lazy_schema, record_from_row)

MAX_STATES = 200  # states decoded by the decode case (the first ones listed)


@dataclass(frozen=True)
class Damage:
    """One kind of damage: ``apply(url)`` damages a fresh store; indexing it at ``depth``
    ("structure" or "data") must report every check in ``checks``."""

    name: str
    apply: Callable[[str], None]
    checks: frozenset[Check] | set[Check]
    depth: str = "data"


@dataclass
class Listed:
    records: list[CheckpointRecord]
    token: str
    heads: list[Any] = field(default_factory=list)
    findings: list[Any] = field(default_factory=list)


class ReaderConformance:
    """Subclass it (see the module docstring); every ``test_*`` method is a case."""

    reader_name: ClassVar[str]
    secret: ClassVar[str | None] = None

    # ---- what a subclass provides -------------------------------------------------------

    def make_store(self, tmp: Path) -> str:
        """A fresh store under ``tmp`` (at least two runs, one of them with three or more
        checkpoints); its URL."""
        raise NotImplementedError

    def append(self, url: str) -> int:
        """Add checkpoints to the store at ``url`` as the format's own writer would; how many."""
        raise NotImplementedError

    def damages(self) -> list[Damage]:
        """Every kind of damage the format can have, with the findings each must give."""
        return []

    # ---- helpers --------------------------------------------------------------------------

    def open(self, url: str) -> Any:
        from lastgood.readers.registry import open_reader

        return open_reader(url, self.reader_name)

    def list_all(self, url: str) -> Listed:
        with self.open(url) as reader:
            scan = reader.scan()
            tables = [as_table(batch) for batch in scan.checkpoints]
            list(scan.events)
            rows = [row for table in tables for row in table.to_pylist()]
            return Listed([record_from_row(r) for r in rows], scan.token, list(scan.heads or []),
                          list(scan.findings))

    def index(self, url: str, tmp: Path, check: str = "data") -> Any:
        from lastgood.index.catalog import Catalog
        from lastgood.stores import index_store

        catalog = Catalog(str(tmp / f"index-{os.getpid()}-{len(os.listdir(tmp))}.duckdb"))
        return catalog, index_store(catalog, url, reader_name=self.reader_name, check=check)

    # ---- the cases --------------------------------------------------------------------------

    def test_the_store_is_recognised_from_its_url(self, tmp_path: Path) -> None:
        from lastgood.readers.registry import load_reader_class, pick_reader

        url = self.make_store(tmp_path)
        assert pick_reader(url) == self.reader_name
        cls = load_reader_class(self.reader_name)
        assert cls.name == self.reader_name and cls.description
        assert capabilities(cls) <= set(Capability)

    def test_records_have_the_common_schema(self, tmp_path: Path) -> None:
        url = self.make_store(tmp_path)
        with self.open(url) as reader:
            scan = reader.scan()
            assert scan.full and scan.token
            tables = [as_table(batch) for batch in scan.checkpoints]
            for table in tables:
                assert table.schema.equals(lazy_schema("CHECKPOINT_SCHEMA"), check_metadata=False)
            for table in scan.events:
                assert table.schema.equals(lazy_schema("EVENT_SCHEMA"), check_metadata=False)
        rows = [row for table in tables for row in table.to_pylist()]
        assert len({r["run_id"] for r in rows}) >= 2, "the kit's store needs at least two runs"
        keys = [(r["run_id"], r["namespace"], r["checkpoint_id"]) for r in rows]
        assert len(keys) == len(set(keys)), "a checkpoint is listed once"
        for row in rows:
            assert set(row) >= set(CHECKPOINT_NAMES)
            assert isinstance(row["run_id"], str) and row["run_id"]
            assert isinstance(row["checkpoint_id"], str) and row["checkpoint_id"]
            assert row["created_at"] is not None and row["created_at"].tzinfo is not None
            assert row["status"] in set(Status)
            assert row["size_bytes"] is None or row["size_bytes"] >= 0
            json.loads(row["metadata"] or "{}")
        ids = {(r["run_id"], r["namespace"], r["checkpoint_id"]) for r in rows}
        for head in scan.heads or []:
            assert (head.run_id, head.namespace, head.checkpoint_id) in ids, f"head {head} is not listed"

    def test_a_healthy_store_indexes_without_errors(self, tmp_path: Path) -> None:
        from lastgood.index import queries

        url = self.make_store(tmp_path / "store")
        scratch = tmp_path / "scratch"
        scratch.mkdir()
        catalog, summary = self.index(url, scratch, check="structure")
        rows = queries.list_checkpoints(catalog, summary.store.store_id)
        assert rows and len(rows) == summary.refresh.checkpoints
        errors = [f for f in summary.verify.findings if f.severity == "error"] if summary.verify else []
        assert errors == [], errors

    def test_a_rescan_finds_nothing_new(self, tmp_path: Path) -> None:
        url = self.make_store(tmp_path)
        first = self.list_all(url)
        with self.open(url) as reader:
            again = reader.scan(first.token)
            rows = sum(as_table(b).num_rows for b in again.checkpoints)
        assert rows == 0 and not again.full

    def test_an_append_is_found_incrementally(self, tmp_path: Path) -> None:
        url = self.make_store(tmp_path)
        first = self.list_all(url)
        added = self.append(url)
        assert added > 0
        with self.open(url) as reader:
            scan = reader.scan(first.token)
            assert not scan.full, "an append is read incrementally, not as a full rescan"
            rows = [r for b in scan.checkpoints for r in as_table(b).to_pylist()]
        before = {(r.run_id, r.namespace, r.checkpoint_id) for r in first.records}
        new = [r for r in rows if (r["run_id"], r["namespace"], r["checkpoint_id"]) not in before]
        assert len(new) == added, f"{added} checkpoints appended, {len(new)} new ones listed"
        touched = {r["run_id"] for r in new}
        assert {r["run_id"] for r in rows} <= touched, "runs the append did not touch were read again"
        assert len(self.list_all(url).records) == len(first.records) + added

    def test_states_decode_to_plain_data_and_redaction_hides_secrets(self, tmp_path: Path) -> None:
        from lastgood.redact import redact

        url = self.make_store(tmp_path)
        listed = self.list_all(url)
        seen_secret = False
        with self.open(url) as reader:
            for record in [r for r in listed.records if r.status == Status.OK][:MAX_STATES]:
                try:
                    state = reader.load_state(record)
                except DecodeError as exc:
                    assert str(exc), "a state that does not decode says why"
                    continue
                text = json.dumps(state, allow_nan=True, default=_refuse)
                seen_secret = seen_secret or bool(self.secret and self.secret in text)
                if self.secret:
                    assert self.secret not in json.dumps(redact(state), allow_nan=True, default=str)
                assert isinstance(reader.read_blob(record), bytes)
                reader.pending_writes(record)
        if self.secret:
            assert seen_secret, "the store's secret was in no state: the redaction case tested nothing"

    def test_every_damage_becomes_findings_never_exceptions(self, tmp_path: Path) -> None:
        missed = []
        for number, damage in enumerate(self.damages()):
            where = tmp_path / f"damage-{number}"
            where.mkdir()
            url = self.make_store(where)
            damage.apply(url)
            _catalog, summary = self.index(url, where, check=damage.depth)
            found = {f.check for f in [*summary.refresh.findings, *(summary.verify.findings if summary.verify else [])]}
            found |= _stored_checks(_catalog, summary.store.store_id)
            if not set(damage.checks) <= found:
                missed.append(f"{damage.name}: expected {sorted(damage.checks)}, found {sorted(found)}")
        assert missed == []

    def test_reading_leaves_the_store_byte_identical(self, tmp_path: Path) -> None:
        url = self.make_store(tmp_path / "store")
        before = _snapshot(url)
        scratch = tmp_path / "scratch"
        scratch.mkdir()
        catalog, summary = self.index(url, scratch, check="data")
        with self.open(url) as reader:
            for record in self.list_all(url).records[:MAX_STATES]:
                for read in (reader.load_state, reader.read_blob, reader.pending_writes):
                    try:
                        read(record)
                    except DecodeError:
                        pass
        assert _snapshot(url) == before, "reading changed the store"

    def test_recovery_round_trips_where_the_reader_can_write(self, tmp_path: Path) -> None:
        from lastgood.index import queries
        from lastgood.readers import journal as jr
        from lastgood import recovery

        url = self.make_store(tmp_path / "store")
        scratch = tmp_path / "scratch"
        scratch.mkdir()
        catalog, summary = self.index(url, scratch, check="structure")
        store = summary.store
        if Capability.RECOVERY not in capabilities(store.reader):
            assert recovery.read_only_reason(store), "a read-only format says why"
            return
        run, target, head = _restorable(queries.list_checkpoints(catalog, store.store_id))
        writer = recovery.backend(store)
        assert writer.head(run["run_id"], run["namespace"]) == head

        def state_of(checkpoint_id: str) -> str:
            record = queries.resolve_checkpoint(catalog, store.store_id,
                                                f"{run['run_id']}/{checkpoint_id}@{run['namespace']}")
            return _plain(store.reader.load_state(record))

        def ref(checkpoint_id: str) -> str:  # ids may be unique within a run only (step folders)
            return f"{run['run_id']}/{checkpoint_id}@{run['namespace']}"

        head_state, target_state = state_of(head), state_of(target)
        restored = recovery.apply_plan(catalog, store, recovery.plan_restore(catalog, store, ref(target)),
                                       reason="kit: restore", operator="kit")
        assert restored.check is None or restored.check["ok"], restored.check
        assert writer.head(run["run_id"], run["namespace"]) == restored.new_head != head
        assert state_of(restored.new_head) == target_state, "the new head's state is the target's"

        quarantined = recovery.apply_plan(catalog, store, recovery.plan_quarantine(catalog, store, ref(target)),
                                          reason="kit: quarantine", operator="kit")
        for action in (quarantined, restored):  # undo both, newest first
            recovery.apply_plan(catalog, store, recovery.plan_undo(catalog, store, action.action_id),
                                reason="kit: undo", operator="kit")
        back = writer.head(run["run_id"], run["namespace"])
        assert state_of(back) == head_state, "undoing the restore gives the run its old state back"

        rolled = recovery.apply_plan(catalog, store,
                                     recovery.plan_rollback(catalog, store, run["run_id"], ref(target)),
                                     reason="kit: rollback", operator="kit")
        assert rolled.check is None or rolled.check["ok"], rolled.check
        assert state_of(writer.head(run["run_id"], run["namespace"])) == target_state
        entries = writer.journal_entries()
        assert jr.verify_chain(entries).ok and len(entries) >= 5


    def test_prune_and_undo_round_trip_where_the_reader_can_prune(self, tmp_path: Path) -> None:
        from lastgood import retention
        from lastgood.index import queries
        from lastgood.readers import journal as jr
        from lastgood.stores import index_store

        url = self.make_store(tmp_path / "store")
        scratch = tmp_path / "scratch"
        scratch.mkdir()
        catalog, summary = self.index(url, scratch, check="structure")
        store = summary.store
        if Capability.RETENTION not in capabilities(store.reader):
            return

        def listing() -> dict[tuple[str, str, str], str]:
            rows = queries.list_checkpoints(catalog, store.store_id)
            out = {}
            for row in rows[:MAX_STATES]:
                record = queries.resolve_checkpoint(
                    catalog, store.store_id, f"{row['run_id']}/{row['checkpoint_id']}@{row['namespace']}")
                try:
                    out[(row["run_id"], row["namespace"], row["checkpoint_id"])] = _plain(store.reader.load_state(record))
                except DecodeError as exc:
                    out[(row["run_id"], row["namespace"], row["checkpoint_id"])] = f"undecodable: {exc}"
            return out

        before = listing()
        plan = retention.plan_prune(catalog, store, retention.Policy(last=1), archive=str(tmp_path / "archive"))
        if not plan.summary["forget"]:  # a session store keeps whole sessions: its runs go whole when stale
            from datetime import UTC, datetime, timedelta

            plan = retention.plan_prune(catalog, store, retention.Policy.from_dict({"runs_within": "1d"}),
                                        now=datetime.now(UTC) + timedelta(days=3650), archive=str(tmp_path / "archive"))
        kept = {(r["run_id"], r["namespace"], r["checkpoint_id"]) for r in plan.checkpoints(keep=True)}
        result = retention.apply_prune(catalog, store, plan, reason="kit: prune", operator="kit")
        store = index_store(catalog, url, reader_name=self.reader_name, check="none").store
        after = listing()
        assert set(after) <= kept and all(after[k] == before[k] for k in after if k in before), \
            "every kept checkpoint reads as before"
        undo = retention.plan_undo_prune(catalog, store, result.action_id)
        retention.apply_undo_prune(catalog, store, undo, reason="kit: undo", operator="kit")
        store = index_store(catalog, url, reader_name=self.reader_name, check="none").store
        assert listing() == before, "the undo brings every checkpoint back"
        assert jr.verify_chain(store.reader.recovery().journal_entries()).ok


# ---- helpers --------------------------------------------------------------------------------


def _refuse(value: Any) -> Any:
    raise TypeError(f"a state holds {type(value).__name__}: states are plain JSON-like data")


def _plain(state: Any) -> str:
    return json.dumps(state, sort_keys=True, default=str, allow_nan=True)


def _restorable(rows: list[dict[str, Any]]) -> tuple[dict[str, Any], str, str]:
    """A run with at least three checkpoints: its head and an older healthy target."""
    by_run: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for row in rows:
        by_run.setdefault((row["run_id"], row["namespace"]), []).append(row)
    for (_run, _ns), listed in sorted(by_run.items(), key=lambda kv: -len(kv[1])):
        listed.sort(key=lambda r: (r["created_at"], r.get("step") or 0, r["checkpoint_id"]))
        healthy = [r for r in listed[:-1] if r["status"] == Status.OK]
        if len(listed) >= 3 and healthy and listed[-1]["status"] == Status.OK:
            return listed[-1], healthy[len(healthy) // 2]["checkpoint_id"], listed[-1]["checkpoint_id"]
    raise AssertionError("the kit's store needs a run with three or more healthy checkpoints")


def _stored_checks(catalog: Any, store_id: int) -> set[Check]:
    with catalog.connect() as con:
        rows = con.execute('SELECT DISTINCT "check" FROM findings WHERE store_id = ?', [store_id]).fetchall()
    return {Check(r[0]) for r in rows if r[0] in {c.value for c in Check}}


def _snapshot(url: str) -> dict[str, str]:
    """sha256 of every file of a local store (a folder, or a database file and its siblings);
    for other URLs, what fsspec lists under them."""
    from lastgood.readers.common.sqlite import sqlite_path

    if url.startswith(("postgresql://", "postgres://")):
        return _postgres_snapshot(url)
    if "://" in url and not url.startswith(("file://", "sqlite://")):
        return _fsspec_snapshot(url)
    path = sqlite_path(url)
    files = sorted(path.rglob("*")) if path.is_dir() else sorted(path.parent.glob(path.name + "*"))
    return {str(p): _digest(p) for p in files if p.is_file() or p.is_symlink()}


def _digest(path: Path) -> str:
    if path.is_symlink():
        return "link:" + os.readlink(path)
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _fsspec_snapshot(url: str) -> dict[str, str]:
    import fsspec

    fs, root = fsspec.core.url_to_fs(url)
    return {p: hashlib.sha256(fs.cat_file(p)).hexdigest() for p in sorted(fs.find(root))}


def _postgres_snapshot(url: str) -> dict[str, str]:
    import psycopg

    out = {}
    with psycopg.connect(url) as conn:
        tables = [r[0] for r in conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = ANY(current_schemas(false))")]
        for table in sorted(tables):
            rows = conn.execute(f'SELECT * FROM "{table}"').fetchall()
            out[table] = hashlib.sha256(repr(sorted(map(repr, rows))).encode()).hexdigest()
    return out


def iter_files(root: Path) -> Iterator[Path]:
    """Every file under ``root`` (for a subclass's damage functions)."""
    return (p for p in sorted(root.rglob("*")) if p.is_file())
