"""``lastgood prune`` of agent-framework session stores: whole stale sessions archived, deleted in one
transaction with the journal entry, undone byte for byte (docs/retention.md, "Agent session stores").

On the stores the frameworks' own persistence code wrote (sample_data/, tests/adk_stores.py,
tests/agno_stores.py): the planner keeps whole sessions (each checkpoint needs the one before it), a
stale session goes whole; the kept sessions read as before with the framework's own query; the undo
gives every table back as it was; a session written to during the prune stays; a kill at any point
leaves each session in the store or in the archive the journal names."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from lastgood.readers import journal as jr
from lastgood.readers.base import as_table
from lastgood.readers.native.archive import Archive
from tests import helpers
from tests.helpers import ROOT, lastgood_cli
from tests.test_reader_openai_agents import A_TURN, add_items

PLAIN = ROOT / "sample_data" / "openai_agents.sqlite"
ADVANCED = ROOT / "sample_data" / "openai_agents_advanced.sqlite"
ENV = {"LASTGOOD_OPERATOR": "tester"}
FORGET = ("run_id", "namespace", "checkpoint_id", "parent_id", "step", "created_at", "trigger", "agent", "metadata",
          "size_bytes")


def cli(*args: str, home: Path, rc: int = 0) -> Any:
    done = lastgood_cli(*args, "--format", "json", home=home, env=ENV)
    assert done.returncode == rc, done.stderr
    assert "Traceback" not in done.stderr
    return json.loads(done.stdout) if done.stdout.strip() else done.stderr


def dump(path: str) -> dict[str, list[tuple[Any, ...]]]:
    """Every table but Lastgood's journal (and its tables a write action creates empty), every row with
    its rowid, in rowid order."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        names = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT IN "
                                            "('lastgood_journal', 'sqlite_sequence') ORDER BY name")]
        tables = {n: conn.execute(f'SELECT rowid, * FROM "{n}" ORDER BY rowid').fetchall() for n in names}
        return {n: rows for n, rows in tables.items() if rows or not n.startswith("lastgood_")}
    finally:
        conn.close()


def age(path: str, sessions: list[str], days: int = 60) -> None:
    """The sessions' rows written ``days`` ago (as an agent that stopped then left them)."""
    with sqlite3.connect(path) as conn:
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        for table in tables:
            columns = {r[1] for r in conn.execute(f'PRAGMA table_info("{table}")')}
            for column in ({"created_at", "updated_at"} & columns) if "session_id" in columns else ():
                conn.executemany(f"UPDATE \"{table}\" SET {column} = datetime({column}, '-{days} days') "
                                 "WHERE session_id = ?", [(s,) for s in sessions])
    conn.close()


def sdk_items(path: str) -> dict[tuple[str, str], list[Any]]:
    """What the SDK's ``get_items()`` returns for every session (and branch): its own query."""
    from contextlib import closing

    from lastgood.readers.openai_agents import recovery

    with closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as conn:
        layout = recovery.layout_of(conn, path)
        if layout.advanced:
            keys = conn.execute("SELECT DISTINCT session_id, branch_id FROM message_structure").fetchall()
        else:
            keys = [(s, "main") for (s,) in conn.execute("SELECT DISTINCT session_id FROM agent_messages")]
        return {(s, b): recovery.sdk_items(conn, layout, s, "" if b == "main" else b) for s, b in keys}


def copy(source: Path, tmp: Path) -> str:
    tmp.mkdir(parents=True, exist_ok=True)
    target = tmp / source.name
    shutil.copyfile(source, target)
    return str(target)


class Core:
    """The core's prune and undo in this process (what the CLI runs), on a fresh index of ``url``."""

    def __init__(self, url: str, tmp: Path) -> None:
        from lastgood.index.catalog import Catalog
        from lastgood.stores import index_store

        self.catalog = Catalog(str(tmp / "index.duckdb"))
        self.store = index_store(self.catalog, url, check="none").store

    def plan(self, **policy: Any) -> Any:
        from lastgood.retention.plan import plan_prune
        from lastgood.retention.policy import Policy

        return plan_prune(self.catalog, self.store, Policy.from_dict(policy))

    def prune(self, plan: Any) -> Any:
        from lastgood.retention.apply import apply_prune

        return apply_prune(self.catalog, self.store, plan, reason="stale", operator="ana")

    def undo(self, action_id: str, force: bool = False) -> Any:
        from lastgood.retention import apply as ap

        plan = ap.plan_undo_prune(self.catalog, self.store, action_id, force=force)
        return plan, (None if plan.conflicts and not force else
                      ap.apply_undo_prune(self.catalog, self.store, plan, reason="back", operator="ana"))

    def journal_ok(self) -> bool:
        from lastgood.retention.plan import journal_entries

        return jr.verify_chain(journal_entries(self.store)).ok


# ---- OpenAI Agents SDK ---------------------------------------------------------------------------


def test_openai_cli_plans_whole_stale_sessions_prunes_and_undoes(tmp_path: Path) -> None:
    url, home = copy(PLAIN, tmp_path / "store"), tmp_path / "home"
    age(url, ["support-7f3a", "trading-2b91"])
    before, items = dump(url), sdk_items(url)
    plan = cli("prune", url, "--keep-runs-within", "30d", "--dry-run", home=home)
    runs = {r["run_id"]: r for r in plan["runs"]}
    assert {r for r, v in runs.items() if v["goes_whole"]} == {"support-7f3a", "trading-2b91"}
    assert runs["ops-91d2"]["forget"] == 0 and plan["summary"]["runs_deleted_whole"] == 2
    assert plan["archive"] == url + ".lastgood-archive"

    done = cli("prune", url, "--keep-runs-within", "30d", "--reason", "stale sessions", "--yes", home=home)
    assert done["checkpoints"] == plan["summary"]["forget"] == 28 and done["skipped"] == []
    assert {r["run_id"] for r in cli("ls", url, home=home)} == {"ops-91d2", "research-c044"}
    kept = sdk_items(url)
    assert kept == {k: v for k, v in items.items() if k[0] in ("ops-91d2", "research-c044")}
    entry = cli("journal", url, home=home)["actions"][0]
    assert entry["action"] == "prune" and entry["note"]["sessions"] == ["support-7f3a", "trading-2b91"]
    assert entry["note"]["manifest_sha256"].startswith("sha256:") and entry["operator"] == "tester"

    preview = cli("undo", url, done["action_id"], "--dry-run", home=home)
    assert preview["conflicts"] == [] and preview["restores"] == 28
    back = cli("undo", url, done["action_id"], "--reason", "needed", "--yes", home=home)
    assert back["checkpoints"] == 28 and back["undo_of"] == done["action_id"]
    assert dump(url) == before and sdk_items(url) == items  # byte for byte, ids included


def test_openai_keep_rules_keep_whole_sessions(tmp_path: Path) -> None:
    core = Core(copy(PLAIN, tmp_path / "store"), tmp_path)
    plan = core.plan(last=2, daily=1)
    assert plan.summary["forget"] == 0  # every item needs the one before it: whole sessions stay
    assert plan.summary["kept_by"]["needed: session-history"] == plan.summary["checkpoints"] - 8
    assert any("nothing goes" in w and "--keep-runs-within" in w for w in plan.warnings), plan.warnings
    assert not [w for w in core.plan(last=2, runs_within="1d").warnings if "nothing goes" in w]


def test_openai_advanced_store_every_table_comes_back(tmp_path: Path) -> None:
    url = copy(ADVANCED, tmp_path / "store")
    age(url, ["analyst-b2"])
    before, items = dump(url), sdk_items(url)
    core = Core(url, tmp_path)
    plan = core.plan(runs_within="30d")
    assert {r["run_id"] for r in plan.per_run if r["goes_whole"]} == {"analyst-b2"}
    done = core.prune(plan)
    after = dump(url)
    for table in ("agent_sessions", "agent_messages", "message_structure", "turn_usage"):
        assert after[table] and all("analyst-b2" not in row for row in after[table]), table
    assert sdk_items(url) == {k: v for k, v in items.items() if k[0] != "analyst-b2"}
    core.undo(done.action_id)
    assert dump(url) == before and sdk_items(url) == items and core.journal_ok()


def _plan_forget(url: str, sessions: set[str]) -> Any:
    """journal.FORGET_COLUMNS of every checkpoint of ``sessions`` (the reader's own listing)."""
    import pyarrow as pa

    from lastgood.readers.registry import open_reader

    with open_reader(url) as reader:
        rows = [r for b in reader.scan().checkpoints for r in as_table(b).to_pylist() if r["run_id"] in sessions]
    return pa.Table.from_pylist([{k: (json.dumps(r.get(k)) if k == "metadata" else r.get(k)) for k in FORGET}
                                 for r in rows])


def _entry(action: str, **fields: Any) -> dict[str, Any]:
    return {"id": jr.new_action_id(), "time": jr.now_iso(), "operator": "t", "action": action, "reason": "r",
            "run_id": None, "namespace": "", "target": None, "previous_head": None, "superseded": [],
            "undo_of": None, "marks": jr.empty_marks(), "note": {}, **fields}


def test_a_session_written_to_during_the_prune_or_since_the_plan_is_kept(tmp_path: Path) -> None:
    from lastgood.readers.openai_agents.retention import SessionRetention

    url, archive = copy(PLAIN, tmp_path / "store"), str(tmp_path / "archive")
    forget = _plan_forget(url, {"support-7f3a", "trading-2b91", "ops-91d2"})
    add_items(url, "ops-91d2", A_TURN[:1])  # since the plan: the listing has an item the plan does not
    wrote = []

    def agent_writes(phase: str, done: int, total: int) -> None:
        if phase == "archive" and not wrote:  # after the rows were read, before the delete
            add_items(url, "trading-2b91", A_TURN[:2])
            wrote.append(phase)

    outcome = SessionRetention(url).prune(jr.PruneRequest(_entry("prune"), forget, archive, progress=agent_writes))
    reasons = {s["run_id"]: s["reason"] for s in outcome.skipped}
    assert "written to during the prune" in reasons["trading-2b91"]
    assert "not as planned" in reasons["ops-91d2"]
    assert outcome.entry["note"]["sessions"] == ["support-7f3a"] and outcome.checkpoints == 12
    left = {s for s, _ in sdk_items(url)}
    assert left == {"trading-2b91", "ops-91d2", "research-c044"}


def test_undo_refuses_a_session_written_again_and_force_leaves_it_archived(tmp_path: Path) -> None:
    from lastgood.errors import ConflictError
    from lastgood.retention import apply as ap

    url = copy(PLAIN, tmp_path / "store")
    age(url, ["support-7f3a", "trading-2b91"])
    before = dump(url)
    core = Core(url, tmp_path)
    done = core.prune(core.plan(runs_within="30d"))
    add_items(url, "support-7f3a", A_TURN[:1])  # the app starts the session again
    preview, _ = core.undo(done.action_id)
    assert len(preview.conflicts) == 1 and "support-7f3a" in preview.conflicts[0]
    with pytest.raises(ConflictError, match="exists again"):
        ap.apply_undo_prune(core.catalog, core.store, ap.UndoPrunePlan(preview.original, [], False),
                            reason="back", operator="ana")  # re-checked under the lock, whatever the plan said
    _, forced = core.undo(done.action_id, force=True)
    assert forced.checkpoints == 16 and forced.skipped[0]["run_id"] == "support-7f3a"
    now = dump(url)
    assert [r for r in now["agent_messages"] if r[2] == "trading-2b91"] == \
        [r for r in before["agent_messages"] if r[2] == "trading-2b91"]
    assert len([r for r in now["agent_messages"] if r[2] == "support-7f3a"]) == 1  # the new one only


def test_a_checkpoint_pinned_since_the_plan_refuses_the_prune_and_nothing_is_deleted(tmp_path: Path) -> None:
    from lastgood.errors import ConflictError
    from lastgood.retention.pins import pin

    url = copy(PLAIN, tmp_path / "store")
    age(url, ["support-7f3a"])
    before = dump(url)
    core = Core(url, tmp_path)
    plan = core.plan(runs_within="30d")
    pin(core.catalog, core.store, "support-7f3a/14", reason="evidence", operator="ana")  # meanwhile
    with pytest.raises(ConflictError, match="pinned"):
        core.prune(plan)
    assert dump(url) == before


def test_storage_breakdown_per_table_and_session(tmp_path: Path) -> None:
    from lastgood.readers.openai_agents.retention import SessionRetention

    url = copy(ADVANCED, tmp_path / "store")
    backend = SessionRetention(url)
    rows = backend.breakdown()
    totals = {r["table"]: r for r in rows if r["run_id"] is None}
    assert {"agent_sessions", "agent_messages", "message_structure", "turn_usage"} <= set(totals)
    assert totals["agent_messages"]["rows"] == 26 and totals["agent_messages"]["bytes"] > 0
    per_session = {(r["table"], r["run_id"]): r for r in rows if r["run_id"] is not None}
    assert per_session[("agent_messages", "planner-a1")]["rows"] == 20
    assert per_session[("agent_messages", "analyst-b2")]["rows"] == 6
    footprint = backend.footprint()
    assert footprint["bytes"] == os.path.getsize(url) + footprint["files"]["wal"] + footprint["files"]["shm"]
    assert backend.reclaim(vacuum=True)["vacuumed"] is True


# ---- crash safety ----------------------------------------------------------------------------------


def _open_prune(entries: list[dict[str, Any]]) -> dict[str, Any] | None:
    undone = jr.undone_ids(entries)
    prunes = [e for e in entries if e.get("action") == "prune" and e["id"] not in undone]
    return prunes[-1] if prunes else None


def _step(backend: Any, forget: Any, archive: str) -> None:
    backend.resume()  # an interrupted prune or undo is completed first (as every prune and undo does)
    last = _open_prune(backend.recovery().journal_entries())
    if last is None:
        backend.prune(jr.PruneRequest(_entry("prune"), forget, archive))
    else:
        backend.unprune(jr.UnpruneRequest(_entry("undo", undo_of=last["id"], note={"retention": jr.UNPRUNE}), last))


def kill_loop(make: Callable[[], Any], forget: Any, archive: str, check: Callable[[], int], seed: int,
              budget: float = 5.0, trials: int = 20, delay: float = 0.5) -> int:
    """Fork a child that prunes and undoes forever; SIGKILL it at a random moment; ``check`` the store
    before anything repairs it (1: the kill landed inside a prune, after its archive was written).
    How many kills landed inside a prune."""
    def prune_and_undo(backend: Any) -> None:
        while True:
            _step(backend, forget, archive)

    return helpers.kill_loop(prune_and_undo, check, seed, trials, delay, needed=1, budget=budget, prepare=make)


def session_rows(path: str) -> dict[str, str]:
    """A digest of each session's rows (every table), by session id."""
    out: dict[str, list[Any]] = {}
    for table, rows in dump(path).items():
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        names = ["rowid"] + [r[1] for r in conn.execute(f'PRAGMA table_info("{table}")')]
        conn.close()
        if "session_id" in names:
            at = names.index("session_id")
            for row in rows:
                out.setdefault(row[at], []).append([table, *row])
    return {s: hashlib.sha256(repr(sorted(v, key=repr)).encode()).hexdigest() for s, v in out.items()}


def test_sigkill_during_session_prunes_and_undos_never_loses_a_session(tmp_path: Path) -> None:
    from lastgood.readers.openai_agents.retention import SessionRetention

    url, archive = copy(PLAIN, tmp_path / "store"), str(tmp_path / "archive")
    going = {"support-7f3a", "trading-2b91"}
    forget = _plan_forget(url, going)
    original = session_rows(url)

    def check() -> int:
        with sqlite3.connect(url) as conn:
            assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        conn.close()
        present = session_rows(url)
        entries = SessionRetention(url).recovery().journal_entries()
        assert jr.verify_chain(entries).ok
        pruned = _open_prune(entries)
        named: set[str] = set()
        if pruned is not None:  # the journal says the sessions are in this archive, and they are
            manifest = Archive(archive).manifest(pruned["id"], pruned["note"]["manifest_sha256"])
            named = set(pruned["note"]["sessions"])
            assert named <= set(manifest["sessions"])
        assert set(present) == set(original) - named  # each session in the store or in the archive, never both gone
        assert all(present[s] == original[s] for s in present)  # what is there is what was there
        assert {s for s, _ in sdk_items(url)} == set(present)
        manifests = len(list(Path(archive, "prunes").glob("*/manifest.json")))
        prunes = sum(e["action"] == "prune" for e in entries)
        return int(manifests > prunes + seen[0])  # an archive no journal entry names: killed before the commit

    seen = [0]

    def counted() -> int:
        landed = check()
        seen[0] += landed
        return landed

    landed = kill_loop(lambda: SessionRetention(url), forget, archive, counted, 20261128, trials=30)
    print(f"kills between the archive and the commit: {landed}")
    assert landed >= 1, "no kill landed inside a prune"
    backend = SessionRetention(url)
    assert backend.pending() == [] and backend.resume() == []
    while _open_prune(backend.recovery().journal_entries()):
        _step(backend, forget, archive)
    assert session_rows(url) == original


# ---- Google ADK (SQLite) ---------------------------------------------------------------------------


def age_adk(url: str, session: str, days: float) -> None:
    """Shift the session's times so its newest event is ``days`` old (the column and the event's own
    ``timestamp`` together, as ADK wrote them), the sessions row too."""
    from datetime import UTC, datetime, timedelta

    with sqlite3.connect(url) as conn:
        (newest,) = conn.execute("SELECT max(timestamp) FROM events WHERE session_id = ?", (session,)).fetchone()
        target = datetime.now(UTC).replace(tzinfo=None) - timedelta(days=days)
        shift = (target - datetime.fromisoformat(newest)).total_seconds()
        conn.execute("""UPDATE events SET timestamp = strftime('%Y-%m-%d %H:%M:%f', timestamp, ?) || '000',
            event_data = json_set(event_data, '$.timestamp', json_extract(event_data, '$.timestamp') + ?)
            WHERE session_id = ?""", (f"{shift:+.3f} seconds", shift, session))
        conn.execute("""UPDATE sessions SET create_time = strftime('%Y-%m-%d %H:%M:%f', create_time, ?) || '000',
            update_time = strftime('%Y-%m-%d %H:%M:%f', update_time, ?) || '000' WHERE id = ?""",
                     (f"{shift:+.3f} seconds", f"{shift:+.3f} seconds", session))
    conn.close()


def adk_sessions(url: str) -> dict[str, Any]:
    """Each session as ADK's ``get_session`` builds it, through the reader's replay of ADK (state merged
    with the app/user scopes, events in ADK's order)."""
    from contextlib import closing

    from lastgood.readers.adk.sqlite import read_session

    with closing(sqlite3.connect(f"file:{url}?mode=ro", uri=True)) as conn:
        keys = conn.execute("SELECT app_name, user_id, id FROM sessions ORDER BY 1, 2, 3").fetchall()
        return {k[2]: repr(read_session(conn, k)) for k in keys}


def test_adk_prunes_a_stale_session_and_undo_restores_it(tmp_path: Path) -> None:
    from tests import adk_stores as adk

    url = adk.sqlite_store(tmp_path / "store")
    age_adk(url, adk.ALICE_ORDERS, 60)
    for fresh in (adk.ALICE_REWIND, adk.BOB):
        age_adk(url, fresh, 1)
    before, sessions = dump(url), adk_sessions(url)
    core = Core(url, tmp_path)
    assert core.plan(last=1).summary["forget"] == 0
    plan = core.plan(runs_within="30d")
    assert [r["run_id"] for r in plan.per_run if r["goes_whole"]] == [adk.ALICE_ORDERS]
    done = core.prune(plan)
    assert done.checkpoints == plan.summary["forget"] > 0 and done.skipped == []
    assert adk_sessions(url) == {k: v for k, v in sessions.items() if k != adk.ALICE_ORDERS}
    after = dump(url)
    assert after["user_states"] == before["user_states"] and after["app_states"] == before["app_states"]
    tables = {r["table"] for r in core.store.reader.retention().breakdown() if r["run_id"] == adk.BOB}
    assert tables == {"sessions", "events"}
    core.undo(done.action_id)
    assert dump(url) == before and adk_sessions(url) == sessions and core.journal_ok()


# ---- Agno (SqliteDb) --------------------------------------------------------------------------------


def age_agno(url: str, session: str, days: float) -> None:
    """Shift the session's times (epoch seconds, as Agno writes them) so its newest run is ``days`` old."""
    with sqlite3.connect(url) as conn:
        (newest,) = conn.execute("SELECT max(created_at) FROM agno_runs WHERE session_id = ?", (session,)).fetchone()
        shift = int(time.time() - days * 86400) - int(newest)
        for table in ("agno_runs", "agno_sessions"):
            conn.execute(f"UPDATE {table} SET created_at = created_at + ?, updated_at = updated_at + ? "
                         "WHERE session_id = ?", (shift, shift, session))
    conn.close()


def listed(url: str) -> dict[str, list[dict[str, Any]]]:
    """The reader's checkpoints (their fields as listed), by session."""
    from lastgood.readers.registry import open_reader

    with open_reader(url) as reader:
        rows = [r for b in reader.scan().checkpoints for r in as_table(b).to_pylist()]
    out: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        out.setdefault(r["run_id"], []).append(r)
    return out


def test_agno_prunes_a_stale_session_and_undo_restores_it(tmp_path: Path) -> None:
    from tests import agno_stores as agno

    url = agno.sqlite_store(tmp_path / "store")
    age_agno(url, agno.CART1, 60)
    for fresh in (agno.CART2, agno.FORK):
        age_agno(url, fresh, 1)
    before, runs = dump(url), listed(url)
    core = Core(url, tmp_path)
    assert core.plan(last=1).summary["forget"] == 0
    plan = core.plan(runs_within="30d")
    assert [r["run_id"] for r in plan.per_run if r["goes_whole"]] == [agno.CART1]
    done = core.prune(plan)
    assert done.checkpoints == plan.summary["forget"] == 5 and done.skipped == []
    assert listed(url) == {k: v for k, v in runs.items() if k != agno.CART1}
    assert agno.rows(url, "SELECT count(*) FROM agno_runs WHERE session_id = ?", (agno.CART1,)) == [(0,)]
    core.undo(done.action_id)
    assert dump(url) == before and listed(url) == runs and core.journal_ok()


# ---- Google ADK on PostgreSQL ---------------------------------------------------------------------


def pg_dump(dsn: str) -> dict[str, list[str]]:
    import psycopg

    with psycopg.connect(dsn) as conn:
        return {t: [r[0] for r in conn.execute(f"SELECT x::text FROM {t} x ORDER BY 1")]
                for t in ("sessions", "events", "app_states", "user_states")}


def pg_age(dsn: str, session: str, days: float) -> None:
    import psycopg

    with psycopg.connect(dsn) as conn:
        (shift,) = conn.execute("""SELECT extract(epoch FROM (now() AT TIME ZONE 'UTC' - %s * interval '1 day')
            - max(timestamp)) FROM events WHERE session_id = %s""", (days, session)).fetchone()
        conn.execute("""UPDATE events SET timestamp = timestamp + %s * interval '1 second', event_data =
            jsonb_set(event_data, '{timestamp}', to_jsonb((event_data ->> 'timestamp')::float8 + %s))
            WHERE session_id = %s""", (shift, shift, session))
        conn.execute("""UPDATE sessions SET create_time = create_time + %s * interval '1 second',
            update_time = update_time + %s * interval '1 second' WHERE id = %s""", (shift, shift, session))


@pytest.mark.postgres
def test_adk_postgres_prune_undo_and_a_session_written_meanwhile(pg_create_database: Callable[[str], str],
                                                                 tmp_path: Path) -> None:
    from lastgood.readers.adk.retention import AdkPostgresRetention
    from tests import adk_stores as adk

    dsn = adk.postgres_store(pg_create_database("adk_prune"))
    for stale in (adk.ALICE_ORDERS, adk.BOB):
        pg_age(dsn, stale, 60)
    pg_age(dsn, adk.ALICE_REWIND, 1)
    before = pg_dump(dsn)
    core = Core(dsn, tmp_path)
    plan = core.plan(runs_within="30d")
    assert sorted(r["run_id"] for r in plan.per_run if r["goes_whole"]) == sorted([adk.ALICE_ORDERS, adk.BOB])
    assert plan.archive.startswith(str(tmp_path / "archives"))  # a server has no "beside"
    forget = plan.forget_table(core.catalog)
    wrote = []

    def agent_writes(phase: str, done: int, total: int) -> None:
        if phase == "archive" and not wrote:  # bob comes back while the rows are archived
            wrote.append(adk.append_invocation(dsn, "bob", adk.BOB, "still there?", "yes"))

    entry = {"id": jr.new_action_id(), "time": jr.now_iso(), "operator": "ana", "action": "prune", "reason": "stale",
             "run_id": None, "namespace": "", "target": None, "previous_head": None, "superseded": [],
             "undo_of": None, "plan_digest": plan.digest, "marks": jr.empty_marks(), "note": {}}
    backend = AdkPostgresRetention(dsn)
    outcome = backend.prune(jr.PruneRequest(entry, forget, plan.archive, progress=agent_writes))
    assert outcome.entry["note"]["sessions"] == [adk.ALICE_ORDERS]
    assert {s["run_id"] for s in outcome.skipped} == {adk.BOB}
    assert "autovacuum" in outcome.space["notes"][-1]
    after = pg_dump(dsn)
    assert not [r for r in after["events"] if adk.ALICE_ORDERS in r] and after["user_states"] == before["user_states"]
    rows = backend.breakdown()
    assert {r["table"] for r in rows if r["run_id"] is None} == {"sessions", "events"}
    undo = {**entry, "id": jr.new_action_id(), "action": "undo", "undo_of": entry["id"], "note": {"retention": jr.UNPRUNE}}
    backend.unprune(jr.UnpruneRequest(undo, outcome.entry))
    restored = pg_dump(dsn)
    for table in ("sessions", "events"):  # as they were (bob: his new invocation too)
        assert [r for r in restored[table] if adk.BOB not in r] == [r for r in before[table] if adk.BOB not in r]
    assert len([r for r in restored["events"] if adk.BOB in r]) == len([r for r in before["events"] if adk.BOB in r]) + 2


# ---- Agno on PostgreSQL: killed mid-prune ------------------------------------------------------------


def agno_pg_sessions(dsn: str) -> dict[str, str]:
    """Each session's rows (every Agno table and Lastgood's archive of it), as the server prints them."""
    import psycopg

    out: dict[str, list[str]] = {}
    with psycopg.connect(dsn) as conn:
        for table in ("agno_sessions", "agno_runs"):
            for session, text in conn.execute(f"SELECT session_id, x::text FROM ai.{table} x ORDER BY 2"):
                out.setdefault(session, []).append(text)
    return {s: hashlib.sha256("\n".join(v).encode()).hexdigest() for s, v in out.items()}


@pytest.mark.postgres
def test_sigkill_during_agno_postgres_prunes_and_undos_never_loses_a_session(
        pg_create_database: Callable[[str], str], tmp_path: Path) -> None:
    from lastgood.readers.agno.retention import AgnoPostgresRetention
    from tests import agno_stores as agno

    dsn = agno.postgres_store(pg_create_database("agno_prune"))
    archive = str(tmp_path / "archive")
    original, runs = agno_pg_sessions(dsn), listed(dsn)
    forget = _plan_forget(dsn, {agno.CART1, agno.CART2})
    assert AgnoPostgresRetention(dsn).default_archive() is None

    def check() -> int:
        present = agno_pg_sessions(dsn)
        entries = AgnoPostgresRetention(dsn).recovery().journal_entries()
        assert jr.verify_chain(entries).ok
        pruned = _open_prune(entries)
        named = set(pruned["note"]["sessions"]) if pruned else set()
        if pruned:
            assert named <= set(Archive(archive).manifest(pruned["id"], pruned["note"]["manifest_sha256"])["sessions"])
        assert set(present) == set(original) - named and all(present[s] == original[s] for s in present)
        assert listed(dsn) == {s: v for s, v in runs.items() if s in present}  # the kept sessions read as before
        manifests = len(list(Path(archive, "prunes").glob("*/manifest.json")))
        landed = int(manifests > sum(e["action"] == "prune" for e in entries) + seen[0])
        seen[0] += landed
        return landed

    started = time.monotonic()  # one prune and its undo, to time the kills over
    _step(AgnoPostgresRetention(dsn), forget, archive)
    _step(AgnoPostgresRetention(dsn), forget, archive)
    cycle = time.monotonic() - started
    seen = [0]
    # the window between the archive and the commit is a small share of a 0.2 s cycle on PostgreSQL: up to 90
    # kills (the loop stops at the first that lands, once 6 were tried and 4 s passed)
    landed = kill_loop(lambda: AgnoPostgresRetention(dsn), forget, archive, check, 33, budget=4.0, trials=90,
                       delay=max(0.3, 2 * cycle))
    print(f"one prune and undo: {cycle:.2f} s; kills between the archive and the commit: {landed}")
    assert landed >= 1, "no kill landed inside a prune"
    backend = AgnoPostgresRetention(dsn)
    while _open_prune(backend.recovery().journal_entries()):
        _step(backend, forget, archive)
    assert agno_pg_sessions(dsn) == original and listed(dsn) == runs


# ---- CrewAI Flows ----------------------------------------------------------------------------------


def age_flow(url: str, flow: str, days: float) -> None:
    """Shift the flow's row times (ISO 8601 with offset, as CrewAI writes them) so its newest is ``days`` old."""
    from datetime import UTC, datetime, timedelta

    with sqlite3.connect(url) as conn:
        rows = conn.execute("SELECT id, timestamp FROM flow_states WHERE flow_uuid = ?", (flow,)).fetchall()
        shift = datetime.now(UTC) - timedelta(days=days) - max(datetime.fromisoformat(t) for _, t in rows)
        conn.executemany("UPDATE flow_states SET timestamp = ? WHERE id = ?",
                         [((datetime.fromisoformat(t) + shift).isoformat(), i) for i, t in rows])
        for i, t in conn.execute("SELECT id, created_at FROM pending_feedback WHERE flow_uuid = ?", (flow,)).fetchall():
            conn.execute("UPDATE pending_feedback SET created_at = ? WHERE id = ?",
                         ((datetime.fromisoformat(t) + shift).isoformat(), i))
    conn.close()


def crewai_states(url: str) -> dict[str, Any]:
    """What ``SQLiteFlowPersistence.load_state(uuid)`` and ``load_pending_feedback`` read, per flow."""
    conn = sqlite3.connect(f"file:{url}?mode=ro", uri=True)
    try:
        flows = [r[0] for r in conn.execute("SELECT DISTINCT flow_uuid FROM flow_states")]
        return {f: (conn.execute("SELECT state_json FROM flow_states WHERE flow_uuid = ? ORDER BY id DESC LIMIT 1",
                                 (f,)).fetchone(),
                    conn.execute("SELECT context_json, state_json FROM pending_feedback WHERE flow_uuid = ?",
                                 (f,)).fetchone()) for f in flows}
    finally:
        conn.close()


def test_crewai_prunes_stale_flows_with_their_pending_feedback_and_undo_restores_them(tmp_path: Path) -> None:
    url = copy(ROOT / "sample_data" / "crewai_flows.db", tmp_path / "store")
    paused, stale = "0dc2f2e7-9f87-464c-891f-7e20424e811b", "5720b304-8763-40ac-b351-45b483d0efc7"
    flows = list(crewai_states(url))
    for flow in flows:
        age_flow(url, flow, 60 if flow in (paused, stale) else 1)
    before, states = dump(url), crewai_states(url)
    core = Core(url, tmp_path)
    assert core.plan(last=1).summary["forget"] == 0
    plan = core.plan(runs_within="30d")
    assert sorted(r["run_id"] for r in plan.per_run if r["goes_whole"]) == sorted([paused, stale])
    done = core.prune(plan)
    assert done.checkpoints == plan.summary["forget"] == 10 and done.skipped == []
    after = dump(url)
    assert after["pending_feedback"] == [] and crewai_states(url) == {f: s for f, s in states.items()
                                                                      if f not in (paused, stale)}
    core.undo(done.action_id)
    assert dump(url) == before and crewai_states(url) == states and core.journal_ok()


# ---- stores kept as files: pydantic-graph run files, AutoGen state series ------------------------------


def tree(folder: Path) -> dict[str, bytes]:
    """Every file of the folder but Lastgood's own (``.lastgood/``, and the ``.tmp-*`` file a killed write
    leaves, which readers skip and the next action sweeps), with its bytes."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file() and ".lastgood" not in p.parts and not p.name.startswith(".tmp-")}


def test_pydantic_graph_prunes_stale_run_files_and_undo_writes_them_back(tmp_path: Path) -> None:
    folder = tmp_path / "runs"
    shutil.copytree(ROOT / "sample_data" / "pydantic_graph", folder)
    before = tree(folder)
    core = Core(str(folder), tmp_path)
    assert core.plan(last=1).summary["forget"] == 0
    plan = core.plan(runs_within="10d")  # the sample's runs are from 2026-11-03
    assert plan.summary["runs_deleted_whole"] == 5 and plan.archive == str(folder) + ".lastgood-archive"
    done = core.prune(plan)
    assert done.checkpoints == plan.summary["forget"] and tree(folder) == {}
    assert done.space["returned_bytes"] == sum(len(v) for v in before.values())
    core.undo(done.action_id)
    assert tree(folder) == before and core.journal_ok()


def test_autogen_prunes_a_stale_series_and_a_series_written_meanwhile_stays(tmp_path: Path) -> None:
    from lastgood.readers.autogen.retention import StateSeriesRetention

    folder = tmp_path / "states"
    shutil.copytree(ROOT / "sample_data" / "autogen", folder)
    for path in (folder / "support-agent").iterdir():  # saved just now (trip-team's states carry their 2026-11-03 times)
        os.utime(path)
    before = tree(folder)
    core = Core(str(folder), tmp_path)
    assert core.plan(last=1).summary["forget"] == 0  # a restore's file names its target, the series stays whole
    plan = core.plan(runs_within="10d")
    assert [r["run_id"] for r in plan.per_run if r["goes_whole"]] == ["trip-team"]
    done = core.prune(plan)
    assert done.checkpoints == 5 and sorted(tree(folder)) == sorted(p for p in before if p.startswith("support-agent"))
    core.undo(done.action_id)
    assert tree(folder) == before

    forget = _plan_forget(str(folder), {"trip-team", "support-agent"})

    def app_saves(phase: str, done: int, total: int) -> None:
        if phase == "archive" and not (folder / "support-agent" / "state-0004.json").exists():
            (folder / "support-agent" / "state-0004.json").write_bytes(before["support-agent/state-0003.json"])

    outcome = StateSeriesRetention(str(folder)).prune(jr.PruneRequest(_entry("prune"), forget,
                                                                      str(tmp_path / "archive"), progress=app_saves))
    assert outcome.entry["note"]["sessions"] == ["trip-team"]
    assert {s["reason"] for s in outcome.skipped} == {"written to during the prune: kept whole"}
    assert (folder / "support-agent" / "state-0001.json").exists()


def test_sigkill_during_run_file_prunes_and_undos_never_loses_a_run(tmp_path: Path) -> None:
    from lastgood.readers.pydantic_graph.retention import RunFileRetention

    folder, archive = tmp_path / "runs", str(tmp_path / "archive")
    shutil.copytree(ROOT / "sample_data" / "pydantic_graph", folder)
    original = tree(folder)
    forget = _plan_forget(str(folder), {"run_2f8a61c0", "run_5c1e2a7f", "run_9b04d3e6"})

    def check() -> int:
        present = tree(folder)
        backend = RunFileRetention(str(folder))
        interrupted = backend.pending()
        entries = backend.recovery().journal_entries()
        assert jr.verify_chain(entries).ok
        named: set[str] = set()
        for entry in [*entries, *[p["entry"] for p in interrupted]]:
            if entry.get("action") == "prune":
                named |= {f"{s}.json" for s in entry["note"]["sessions"]}
                manifest = Archive(archive).manifest(entry["id"], entry["note"]["manifest_sha256"])
                assert {f"{s}.json" for s in entry["note"]["sessions"]} <= {f for s in manifest["sessions"].values()
                                                                          for f in s["files"]}
        assert set(original) - set(present) <= named  # each run file in the folder or in a named archive
        assert all(present[f] == original[f] for f in present)  # what is there is what was there
        manifests = len(list(Path(archive, "prunes").glob("*/manifest.json")))
        orphan = manifests > sum(e.get("action") == "prune" for e in entries) + len(interrupted) + seen[0]
        seen[0] += orphan
        return int(bool(interrupted) or orphan)  # killed after the archive, before the entry

    seen = [0]

    started = time.monotonic()  # one prune and its undo, to time the kills over
    _step(RunFileRetention(str(folder)), forget, archive)
    _step(RunFileRetention(str(folder)), forget, archive)
    cycle = time.monotonic() - started
    landed = kill_loop(lambda: RunFileRetention(str(folder)), forget, archive, check, 5, budget=4.0, trials=30,
                       delay=max(0.3, 3 * cycle))  # many actions per kill: it lands anywhere in one
    print(f"one prune and undo: {cycle:.2f} s; kills inside a prune or undo: {landed}")
    assert landed >= 1, "no kill landed inside a prune or an undo"
    backend = RunFileRetention(str(folder))
    backend.resume()
    assert backend.pending() == []
    while _open_prune(backend.recovery().journal_entries()):
        _step(backend, forget, archive)
    assert tree(folder) == original


def test_a_folder_emptied_by_a_prune_is_still_undone_as_printed(tmp_path: Path) -> None:
    """Every run file of a pydantic-graph folder pruned: nothing left to recognise, yet the undo the
    prune printed works (the index remembers which reader indexed the folder)."""
    import shutil

    folder, home = tmp_path / "runs", tmp_path / "home"
    shutil.copytree(ROOT / "sample_data" / "pydantic_graph", folder)
    before = sorted(p.name for p in folder.iterdir())
    done = lastgood_cli("prune", str(folder), "--keep-runs-within", "1d", "--reason", "old", "--yes",
                        "--format", "json", home=home)
    assert done.returncode == 0, done.stderr
    action = json.loads(done.stdout)["action_id"]
    assert [p.name for p in folder.iterdir() if not p.name.startswith(".")] == []
    undo = lastgood_cli("undo", str(folder), action, "--reason", "back", "--yes", home=home)
    assert undo.returncode == 0, undo.stderr
    assert sorted(p.name for p in folder.iterdir() if not p.name.startswith(".")) == before
    fresh = lastgood_cli("journal", str(folder), home=tmp_path / "other-home")
    assert fresh.returncode == 0, fresh.stderr  # the folder is recognised again once it holds its runs
