"""Investigation on real stores: checkpoint refs, per-step changes, tracked fields, first
divergence, bisect (against a brute-force scan), diffs across stores, and the CLI."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lastgood.investigate import history as inv
from lastgood.index.catalog import Catalog
from lastgood.errors import AmbiguousCheckpoint, CheckpointNotFound, UsageError
from lastgood.investigate.history import _search
from lastgood.investigate.predicate import parse, resolve_pointer
from lastgood.readers.native.writer import NativeWriter
from lastgood.stores import index_store
from tests.helpers import SECRET, T0, lastgood_cli, write_store
from tests.langgraph_graphs import write_sqlite_store


@pytest.fixture
def store(tmp_path):
    states = write_store(str(tmp_path / "store"), runs=2, steps=12)
    catalog = Catalog(tmp_path / "home" / "index.duckdb")
    opened = index_store(catalog, str(tmp_path / "store")).store
    return catalog, opened, states


def _ids(catalog, store, run="run-0"):
    return [r.checkpoint_id for r in inv.run_checkpoints(catalog, store.store_id, run)]


def test_checkpoints_are_named_by_id_prefix_or_run_slash_id(store):
    catalog, opened, _ = store
    ids = _ids(catalog, opened)
    assert inv.resolve_ref(catalog, opened.store_id, ids[4]).checkpoint_id == ids[4]
    assert inv.resolve_ref(catalog, opened.store_id, f"run-0/{ids[4][:24]}").checkpoint_id == ids[4]
    with pytest.raises(AmbiguousCheckpoint):
        inv.resolve_ref(catalog, opened.store_id, "run-0/0")
    with pytest.raises(CheckpointNotFound):
        inv.resolve_ref(catalog, opened.store_id, "run-9/zzz")


def test_diff_between_two_checkpoints_of_a_run(store):
    catalog, opened, states = store
    ids = _ids(catalog, opened)
    result, a, b = inv.diff_checkpoints(catalog, opened, ids[3], ids[5])
    assert (a["step"], b["step"]) == (3, 5)
    assert result.summary == {"added": 4, "removed": 0, "changed": 2, "moved": 0}
    assert [c.path for c in result.changes if c.op == "add"] == [f"/llm/messages/{i}" for i in range(7, 11)]
    assert {c.path: c.delta for c in result.changes}["/runtime/turn"] == 2


def test_step_changes_are_stored_queryable_and_cached(store):
    catalog, opened, _ = store
    assert inv.record_step_changes(catalog, opened, run_id="run-0") == 12
    assert inv.record_step_changes(catalog, opened, run_id="run-0") == 0  # cached
    rows = inv.step_changes(catalog, opened.store_id, "run-0")
    assert [r["step"] for r in rows] == list(range(12))
    assert rows[0]["added"] == 3 and rows[0]["paths"] == ["/llm", "/runtime", "/tools"]
    assert (rows[4]["added"], rows[4]["changed"], rows[4]["paths"]) == (2, 2, ["/llm", "/runtime"])
    with catalog.connect() as con:  # plain SQL over the index
        touched = con.execute("""SELECT count(*) FROM step_changes WHERE run_id = 'run-0'
                                 AND list_contains(paths, '/tools')""").fetchone()[0]
    assert touched == 1
    assert inv.record_step_changes(catalog, opened) == 12  # the rest of the store: run-1


def test_a_field_over_time_is_stored_and_redacted(store):
    catalog, opened, _ = store
    lengths = inv.track_field(catalog, opened, "run-0", "len(/llm/messages)")
    assert [r["length"] for r in lengths] == [1 + 2 * i for i in range(12)]
    turns = inv.track_field(catalog, opened, "run-0", "/runtime/turn")
    assert [r["number"] for r in turns] == list(range(12))
    secrets = inv.track_field(catalog, opened, "run-0", "/tools/api_key")
    assert {r["value"] for r in secrets} == {"[redacted]"}
    missing = inv.track_field(catalog, opened, "run-0", "/nope")
    assert {r["kind"] for r in missing} == {"missing"}
    with catalog.connect() as con:
        stored = con.execute("SELECT count(*), count(DISTINCT path) FROM tracked_values").fetchone()
        dump = str(con.execute("SELECT * FROM tracked_values").fetchall())
    assert stored == (48, 4) and SECRET not in dump
    with pytest.raises(UsageError):
        inv.normalize_track_path("messages")


def _write_runs(url: str, balances: dict[str, list[int]]) -> None:
    writer = NativeWriter(url, codec="json", full_every=3)
    for run, values in balances.items():
        for step, balance in enumerate(values):
            writer.save(run, {"balance": balance, "log": [f"step {i}" for i in range(step + 1)]},
                        created_at=T0 + timedelta(minutes=step), step=step)


def test_first_divergence_of_two_runs(tmp_path):
    _write_runs(str(tmp_path / "s"), {"a": [5, 4, 3, 2, 1], "b": [5, 4, 3, 9, 9, 9]})
    catalog = Catalog(tmp_path / "home" / "index.duckdb")
    opened = index_store(catalog, str(tmp_path / "s")).store
    result = inv.diverge(catalog, opened, "a", "b")
    first = result["first_divergence"]
    assert first["step"] == 3
    assert first["changes"] == [{"op": "change", "path": "/balance", "old": 2, "new": 9, "delta": 7}]
    assert (result["common_steps"], result["only_in_a"], result["only_in_b"]) == (5, 0, 1)
    same = inv.diverge(catalog, opened, "a", "a")
    assert same["first_divergence"] is None and same["states_decoded"] == 0


@settings(max_examples=400, deadline=None)
@given(st.lists(st.booleans(), max_size=40), st.integers(0, 40))
def test_search_agrees_with_brute_force(values, cut):
    probe = values.__getitem__
    truth = next((i for i, v in enumerate(values) if v), None)
    assert _search(probe, len(values), "scan")[0] == truth
    monotonic = [i >= cut for i in range(len(values))]
    first_true = next((i for i, v in enumerate(monotonic) if v), None)
    for strategy in ("auto", "binary"):
        assert _search(monotonic.__getitem__, len(monotonic), strategy)[0] == first_true
    found, used = _search(probe, len(values), "auto")
    if not used.startswith("binary"):  # auto only binary-searches predicates that look monotonic
        assert found == truth


def test_bisect_on_a_real_run_against_a_brute_force_scan(tmp_path):
    balances = [100 - 7 * i for i in range(40)]  # crosses zero at step 15
    dips = [3, 1, -2, 4, 5, -1, 6]
    _write_runs(str(tmp_path / "s"), {"spend": balances, "dips": dips})
    catalog = Catalog(tmp_path / "home" / "index.duckdb")
    opened = index_store(catalog, str(tmp_path / "s")).store
    where = parse("/balance < 0")
    brute = next(i for i, b in enumerate(balances) if b < 0)
    binary = inv.bisect_run(catalog, opened, "spend", where)
    assert binary["found"]["step"] == brute and binary["strategy"] == "binary"
    assert binary["states_decoded"] < 16  # probes + a binary search, not 40 decodes
    scan = inv.bisect_run(catalog, opened, "spend", where, "scan")
    assert scan["found"]["step"] == brute and scan["states_decoded"] == brute + 1
    dipped = inv.bisect_run(catalog, opened, "dips", where)
    assert dipped["found"]["step"] == 2 and dipped["strategy"].startswith("scan")
    grown = inv.bisect_run(catalog, opened, "spend", parse("len(/log) > 30"))
    assert grown["found"]["step"] == 30
    never = inv.bisect_run(catalog, opened, "spend", parse("/balance > 1000"))
    assert never["found"] is None


def test_predicates_parse_without_eval():
    state = {"balance": -3, "messages": [1, 2, 3], "status": "failed", "ok": False, "a/b": {"~": 1}}
    assert parse("/balance < 0").evaluate(state)
    assert parse("len(/messages) >= 3 and not /ok").evaluate(state)
    assert parse("/status == 'failed' or /balance > 10").evaluate(state)
    assert parse('(/status != "ok") and /a~1b/~0 == 1').evaluate(state)
    assert not parse("/missing > 0").evaluate(state)
    assert not parse("/status > 1").evaluate(state)  # a string is not ordered against a number
    assert resolve_pointer([10, 20], "/1") == 20
    for bad in ("__import__('os')", "/balance <", "len(/x", "/x < 1 1", "/x === 2"):
        with pytest.raises(UsageError):
            parse(bad)
    for bad in ("/auth/password==@ssw0rd-plain2", "/token == 'a' 'sk-live-0123456789abcdef'"):
        with pytest.raises(UsageError) as caught:  # an error never quotes a piece of a compared secret
            parse(bad)
        assert "ssw0rd" not in str(caught.value) and "0123456789" not in str(caught.value)


def test_diff_across_stores_native_run_vs_langgraph_thread(tmp_path):
    written = write_sqlite_store(tmp_path / "lg.sqlite", extra=False)
    history = written.expected[("tools-1", "")]
    head = history[0]
    catalog = Catalog(tmp_path / "home" / "index.duckdb")
    lg = index_store(catalog, str(tmp_path / "lg.sqlite")).store
    lg_state = lg.reader.load_state(inv.resolve_ref(catalog, lg.store_id, head["checkpoint_id"]))
    edited = json.loads(json.dumps(lg_state))
    edited["messages"][1]["content"] = "a different answer"
    edited["messages"].append({"role": "human", "content": "and now?", "id": "h-new", "tool_calls": [],
                               "name": None, "tool_call_id": None})
    writer = NativeWriter(str(tmp_path / "native"), codec="json")
    same = writer.save("copy", lg_state).checkpoint_id
    changed = writer.save("copy", edited).checkpoint_id
    native = index_store(catalog, str(tmp_path / "native")).store
    result, a, b = inv.diff_checkpoints(catalog, lg, head["checkpoint_id"], same, native)
    assert result.changes == [] and a["store"] != b["store"]
    result, _, _ = inv.diff_checkpoints(catalog, lg, head["checkpoint_id"], changed, native)
    assert [(c.op, c.path) for c in result.changes] == [("change", "/messages/1/content"), ("add", "/messages/4")]
    catalog.close()
    done = lastgood_cli("diff", str(tmp_path / "lg.sqlite"), head["checkpoint_id"], f"copy/{changed}",
                        "--store-b", str(tmp_path / "native"), "--format", "json", home=tmp_path / "home")
    assert done.returncode == 0, done.stderr
    body = json.loads(done.stdout)
    assert body["summary"] == {"added": 1, "removed": 0, "changed": 1, "moved": 0}
    assert body["a"]["store"].endswith("lg.sqlite") and body["b"]["run_id"] == "copy"


# ---------------------------------------------------------------- CLI

def test_cli_diff_json_and_exit_codes(tmp_path, store):
    catalog, opened, _ = store
    ids = _ids(catalog, opened)
    catalog.close()  # the command opens the index itself
    home = tmp_path / "home"
    done = lastgood_cli("diff", opened.url, ids[0], f"run-0/{ids[2]}", "--format", "json", home=home)
    assert done.returncode == 0, done.stderr
    body = json.loads(done.stdout)
    assert set(body) == {"a", "b", "changes", "summary"}
    assert body["a"]["checkpoint_id"] == ids[0] and body["summary"]["added"] == 4
    assert SECRET not in done.stdout
    text = lastgood_cli("diff", opened.url, ids[0], ids[2], home=home)
    assert text.returncode == 0 and "+ /llm/messages/1: [user] question 0" in text.stdout
    missing = lastgood_cli("diff", opened.url, ids[0], "nope", home=home)
    assert missing.returncode == 2 and missing.stderr.startswith("lastgood: error:")
    assert "Traceback" not in missing.stderr and len(missing.stderr.strip().splitlines()) == 1


def test_cli_investigation_commands(tmp_path):
    _write_runs(str(tmp_path / "s"), {"a": [5, 4, -1, -2], "b": [5, 4, 3, 2]})
    home, url = tmp_path / "home", str(tmp_path / "s")
    bisect = json.loads(lastgood_cli("bisect", url, "a", "--where", "/balance < 0", "--format", "json",
                                     home=home, check_json=True).stdout)
    assert bisect["found"]["step"] == 2 and bisect["states_decoded"] >= 1
    bad = lastgood_cli("bisect", url, "a", "--where", "import os", home=home)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    track = json.loads(lastgood_cli("track", url, "a", "/balance", "--format", "json", home=home).stdout)
    assert [v["value"] for v in track["values"]] == [5, 4, -1, -2]
    steps = json.loads(lastgood_cli("steps", url, "a", "--format", "json", home=home).stdout)
    assert [s["paths"] for s in steps] == [["/balance", "/log"]] + [["/balance", "/log"]] * 3
    diverge = lastgood_cli("diverge", url, "a", "b", "--format", "json", home=home)
    assert diverge.returncode == 0 and json.loads(diverge.stdout)["first_divergence"]["step"] == 2
    unknown = lastgood_cli("steps", url, "zzz", home=home)
    assert unknown.returncode == 2 and "no run 'zzz'" in unknown.stderr


def test_the_data_check_can_record_step_changes_with_its_reader(store):
    catalog, opened, _ = store
    ids = _ids(catalog, opened, "run-1")[:3]
    assert inv.record_step_changes_with_reader(catalog, opened.store_id, opened.reader, ids) == 3
    rows = inv.step_changes(catalog, opened.store_id, "run-1")
    assert [r["checkpoint_id"] for r in rows] == ids and rows[2]["changed"] == 2


@pytest.mark.postgres
def test_postgres_threads_diverge_and_match_sqlite(tmp_path, pg_module_dsn):
    from langgraph.checkpoint.postgres import PostgresSaver

    from tests.langgraph_graphs import build_fork, build_tools

    with PostgresSaver.from_conn_string(pg_module_dsn) as saver:
        saver.setup()
        build_tools(saver)
        build_fork(saver)
    write_sqlite_store(tmp_path / "lg.sqlite", extra=False)
    home = tmp_path / "home"
    same = lastgood_cli("diverge", pg_module_dsn, "tools-1", "tools-1", "--store-b", str(tmp_path / "lg.sqlite"),
                        "--format", "json", home=home)
    assert same.returncode == 0, same.stderr
    body = json.loads(same.stdout)
    assert body["first_divergence"] is None and body["common_steps"] >= 4 and body["states_decoded"] >= 8
    forked = json.loads(lastgood_cli("diverge", pg_module_dsn, "tools-1", "fork-1", "--format", "json",
                                     home=home).stdout)
    first = forked["first_divergence"]
    paths = {c["path"] for c in first["changes"]}
    assert "/note" in paths and any(p.startswith("/messages/1/tool_calls/0") for p in paths)
    grown = json.loads(lastgood_cli("bisect", pg_module_dsn, "fork-1", "--where", "len(/messages) >= 3",
                                    "--strategy", "scan", "--format", "json", home=home).stdout)
    lengths = {v["checkpoint_id"]: v["length"] for v in json.loads(lastgood_cli(
        "track", pg_module_dsn, "fork-1", "/messages", "--format", "json", home=home).stdout)["values"]}
    parents = {r["checkpoint_id"]: r["parent_id"] for r in json.loads(lastgood_cli(
        "ls", pg_module_dsn, "--run", "fork-1", "--format", "json", home=home).stdout)}
    found = grown["found"]["checkpoint_id"]
    assert lengths[found] >= 3 and (lengths.get(parents[found]) or 0) < 3  # the first one along its history


# ---------------------------------------------------------------- RUN/ID@NS

def test_one_checkpoint_id_in_two_namespaces_of_a_thread_is_reported_and_addressable(tmp_path):
    """A real parent graph with a subgraph (its checkpoints in ``child:…``), plus one root checkpoint
    copied into the subgraph's namespace: same thread, same id, two namespaces."""
    import sqlite3

    from langgraph.checkpoint.sqlite import SqliteSaver

    from tests.langgraph_graphs import build_subgraph

    db = tmp_path / "sub.sqlite"
    conn = sqlite3.connect(str(db), check_same_thread=False)
    thread = build_subgraph(SqliteSaver(conn))
    child_ns = thread.namespaces[1]
    cid = conn.execute("""SELECT checkpoint_id FROM checkpoints WHERE thread_id = ? AND checkpoint_ns = ''
        ORDER BY checkpoint_id LIMIT 1""", [thread.thread_id]).fetchone()[0]
    conn.execute("""INSERT INTO checkpoints SELECT thread_id, ?, checkpoint_id, parent_checkpoint_id, type,
        checkpoint, metadata FROM checkpoints WHERE thread_id = ? AND checkpoint_ns = '' AND checkpoint_id = ?""",
                 [child_ns, thread.thread_id, cid])
    conn.commit()
    conn.close()
    home, url, run = tmp_path / "home", str(db), thread.thread_id
    rows = json.loads(lastgood_cli("ls", url, "--format", "json", home=home).stdout)
    assert sorted(r["namespace"] for r in rows if r["checkpoint_id"] == cid) == ["", child_ns]
    plain = lastgood_cli("show", url, cid, home=home)
    assert plain.returncode == 2 and len(plain.stderr.strip().splitlines()) == 1
    assert "RUN/ID@NS" in plain.stderr and f"{run}/{cid}@{child_ns}" in plain.stderr
    assert lastgood_cli("show", url, f"{run}/{cid}", home=home).returncode == 2  # still two namespaces
    for ref, namespace in [(f"{run}/{cid}@{child_ns}", child_ns), (f"{cid}@{child_ns}", child_ns),
                           (f"{run}/{cid[:20]}@{child_ns}", child_ns), (f"{run}/{cid}@", "")]:
        shown = lastgood_cli("show", url, ref, "--format", "json", home=home)
        assert shown.returncode == 0, (ref, shown.stderr)
        body = json.loads(shown.stdout)["checkpoint"]
        assert (body["run_id"], body["namespace"], body["checkpoint_id"]) == (run, namespace, cid)
    assert lastgood_cli("show", url, f"{cid}@no-such-ns", home=home).returncode == 2
    verify = json.loads(lastgood_cli("verify", url, "--format", "json", home=home).stdout)
    dupes = {f["namespace"]: f["message"] for f in verify["findings"] if f["check"] == "duplicate-id"}
    assert set(dupes) == {"", child_ns}
    assert f"address it as RUN/ID@NS ({run}/{cid}@{child_ns})" in dupes[child_ns]
    diff = lastgood_cli("diff", url, f"{run}/{cid}@", f"{cid}@{child_ns}", "--format", "json", home=home)
    assert diff.returncode == 0, diff.stderr
    body = json.loads(diff.stdout)
    assert body["changes"] == [] and (body["a"]["namespace"], body["b"]["namespace"]) == ("", child_ns)


def test_steps_says_when_the_damage_is_the_parents(tmp_path):
    from tests.helpers import SAMPLE_STORE, load_manifest

    damaged = next(d for d in load_manifest()["damaged"] if d["damage"] == "sha256-mismatch")
    done = lastgood_cli("steps", str(SAMPLE_STORE), damaged["run_id"], "--format", "json", home=tmp_path / "h")
    rows = json.loads(done.stdout)
    rows = rows if isinstance(rows, list) else rows["steps"]
    own = next(r for r in rows if r["checkpoint_id"] == damaged["checkpoint_id"])
    child = next(r for r in rows if r["parent_id"] == damaged["checkpoint_id"])
    assert "sha256 mismatch" in own["error"] and not own["error"].startswith("its parent")
    assert child["error"].startswith(f"its parent {damaged['checkpoint_id']} does not load")


SECRET_STATE = {"config": {"api_key": "sk-live-abcdefghijklmnop1234", "region": "eu", "token": None},
                "note": "key sk-live-abcdefghijklmnop1234 pasted", "step": 3}


@pytest.mark.parametrize("where", [
    '/config/api_key == "sk-live-abcdefghijklmnop1234"',  # a guess confirmed
    '/config/api_key > "sk-live-a"', '/config/api_key < "sk-live-b"',  # its letters, one comparison at a time
    "len(/config/api_key) == 28",  # its length
    '/note == "key sk-live-abcdefghijklmnop1234 pasted"', '/note > "key sk-live-a"',  # one shaped like a key
    '/config/token == "x"',
])
def test_a_predicate_never_learns_a_secret(where: str) -> None:
    other = json.loads(json.dumps(SECRET_STATE).replace("abcdefghijklmnop1234", "zyxwvutsrqponm98"))
    other["config"]["token"] = "x"  # set, where the first state's is not: shown as set, not as what
    assert parse(where).evaluate(SECRET_STATE) is parse(where).evaluate(other)  # nothing tells them apart
    if "==" in where:
        assert parse(where).evaluate(SECRET_STATE) is False  # the right guess does not hold


@pytest.mark.parametrize("where", [
    '/config/api_key == "[redacted]"', "/config/api_key", '/config/region == "eu"', "not /config/token",
    "len(/config) == 3", "/step >= 3", 'len(/note) == len(/note)',
])
def test_a_predicate_still_reads_what_is_shown(where: str) -> None:
    assert parse(where).evaluate(SECRET_STATE) is True


def test_bisect_cannot_confirm_a_guessed_secret(tmp_path) -> None:
    store = str(tmp_path / "store")
    writer = NativeWriter(store)
    for step in range(6):
        key = "sk-live-abcdefghijklmnop1234" if step >= 3 else None
        writer.save("run-1", {"step": step, "config": {"api_key": key}}, created_at=T0 + timedelta(minutes=step))
    home = tmp_path / "home"
    for guess in ("sk-live-abcdefghijklmnop1234", "sk-live-wrongwrongwrong0000"):
        done = lastgood_cli("bisect", store, "run-1", "--where", f'/config/api_key == "{guess}"',
                            "--format", "json", home=home)
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["found"] is None  # the right guess and a wrong one look alike
        assert "abcdefghijklmnop" not in done.stdout + done.stderr
    done = lastgood_cli("bisect", store, "run-1", "--where", "/config/api_key", "--format", "json", home=home)
    assert json.loads(done.stdout)["found"]["step"] == 3  # a key being set is still found
