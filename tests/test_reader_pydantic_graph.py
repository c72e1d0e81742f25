"""The pydantic-graph reader on ``sample_data/pydantic_graph`` (run files written by pydantic-graph
1.107's own ``FileStatePersistence``; see ``sample_data/generators/pydantic_graph/README.md``): the
conformance kit, events, damaged files, refreshes, recovery read back, the CLI, and SIGKILL at random
moments of a restore."""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from lastgood.checks import Check
from lastgood.errors import ConflictError, UsageError
from lastgood.readers import journal as jr
from lastgood.readers.base import CheckpointRecord, as_table
from lastgood.readers.registry import open_reader
from lastgood.readers.testing import Damage, ReaderConformance
from tests.helpers import ROOT, lastgood_cli

SAMPLE = ROOT / "sample_data" / "pydantic_graph"
SECRET = "sk-proj-Hx2Wn7Rb5Kc9Vt1Pd4Ls8Gq3Zm6Yj0Ae"
ENDED, LOOPED, FAILED, RESUMED, PAUSED = ("run_5c1e2a7f", "run_9b04d3e6", "run_2f8a61c0", "run_d7e3b918",
                                           "run_64af0c25")


def copy_store(tmp: Path) -> str:
    tmp.mkdir(parents=True, exist_ok=True)
    folder = tmp / "pydantic_graph"
    shutil.copytree(SAMPLE, folder)
    return str(folder)


def snapshots(url: str, run: str) -> list[dict[str, Any]]:
    return json.loads((Path(url) / f"{run}.json").read_text())


def write_run(url: str, run: str, items: list[dict[str, Any]]) -> None:
    """As ``FileStatePersistence._save_sync`` writes (``dump_json(indent=2)``: same bytes)."""
    (Path(url) / f"{run}.json").write_bytes(json.dumps(items, indent=2, ensure_ascii=False).encode())


def fresh_ids(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = json.loads(json.dumps(items))
    for item in out:
        item["id"] = f"{item['id'].split(':')[0]}:{uuid.uuid4().hex}"  # generate_snapshot_id
    return out


def listing(url: str, since: str | None = None) -> tuple[list[dict[str, Any]], list[dict[str, Any]], Any]:
    with open_reader(url, "pydantic-graph") as reader:
        scan = reader.scan(since)
        rows = [r for b in scan.checkpoints for r in as_table(b).to_pylist()]
        events = [e for t in scan.events for e in t.to_pylist()]
    return rows, events, scan


# ---- the kit ----------------------------------------------------------------------------


def _truncate(url: str) -> None:
    path = Path(url) / f"{LOOPED}.json"
    path.write_bytes(path.read_bytes()[:3000])


def _unknown_status(url: str) -> None:
    items = snapshots(url, ENDED)
    items[1]["status"] = "paused"
    write_run(url, ENDED, items)


def _out_of_order(url: str) -> None:
    items = snapshots(url, RESUMED)
    items[3]["start_ts"] = "2026-11-03T15:00:00.000000Z"
    write_run(url, RESUMED, items)


def _duplicate_id(url: str) -> None:
    items = snapshots(url, PAUSED)
    items[2]["id"] = items[1]["id"]
    write_run(url, PAUSED, items)


def _not_an_array(url: str) -> None:
    (Path(url) / f"{FAILED}.json").write_text(json.dumps({"state": {}, "kind": "node", "id": "x"}))


def _linked(url: str) -> None:
    os.symlink("/etc/hostname", Path(url) / "run_linked.json")


class TestPydanticGraphKit(ReaderConformance):
    reader_name = "pydantic-graph"
    secret = SECRET

    def make_store(self, tmp: Path) -> str:
        return copy_store(tmp)

    def append(self, url: str) -> int:
        """A new run, as a graph run with FileStatePersistence(Path(folder) / 'run_<id>.json') writes it."""
        write_run(url, "run_kit0a1b", fresh_ids(snapshots(url, ENDED)))
        return 5

    def damages(self) -> list[Damage]:
        return [
            Damage("a run file cut short", _truncate, {Check.UNDECODABLE}, "none"),
            Damage("a status pydantic-graph does not know", _unknown_status, {Check.ROW_INVALID}, "none"),
            Damage("snapshots out of order", _out_of_order, {Check.OUT_OF_ORDER}, "none"),
            Damage("a snapshot id twice", _duplicate_id, {Check.DUPLICATE_ID}, "none"),
            Damage("a run file that is not an array", _not_an_array, {Check.UNDECODABLE}, "none"),
            Damage("a run file that is a link", _linked, {Check.NOT_A_FILE}, "none"),
        ]


# ---- what is listed -----------------------------------------------------------------------


def test_runs_are_files_checkpoints_are_snapshots_in_file_order(tmp_path: Path) -> None:
    url = copy_store(tmp_path)
    rows, _events, scan = listing(url)
    by_run: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        by_run.setdefault(row["run_id"], []).append(row)
    assert {k: len(v) for k, v in by_run.items()} == {ENDED: 5, LOOPED: 7, FAILED: 2, RESUMED: 7, PAUSED: 4}
    looped = by_run[LOOPED]
    assert [r["checkpoint_id"] for r in looped] == [s["id"] for s in snapshots(url, LOOPED)]
    assert [r["step"] for r in looped] == list(range(7))
    assert [r["parent_id"] for r in looped] == [None, *[r["checkpoint_id"] for r in looped[:-1]]]
    assert [r["trigger"] for r in looped] == ["Classify", "LookupAccount", "DraftReply", "Review", "DraftReply",
                                              "Review", "end"]
    times = [r["created_at"] for r in looped]
    assert times == sorted(times)
    assert str(looped[1]["created_at"]) == "2026-11-03 16:15:14.423001+00:00"  # Classify's start + duration
    assert str(looped[-1]["created_at"]) == "2026-11-03 16:15:35.046824+00:00"  # the end snapshot's ts
    meta = json.loads(by_run[PAUSED][-1]["metadata"])
    assert meta == {"kind": "node", "node_id": "Review", "status": "created", "duration": None, "start_ts": None}
    heads = {h.run_id: h.checkpoint_id for h in scan.heads}
    assert heads[PAUSED] == by_run[PAUSED][-1]["checkpoint_id"] and heads[LOOPED].startswith("end:")
    assert scan.findings == []


def test_events_the_failed_node_and_the_resumable_run(tmp_path: Path) -> None:
    url = copy_store(tmp_path)
    _rows, events, _scan = listing(url)
    found = {(e["run_id"], e["checkpoint_id"].split(":")[0], e["kind"]) for e in events}
    assert found == {(FAILED, "LookupAccount", "error"), (PAUSED, "Review", "interrupt")}
    message = {e["kind"]: e["message"] for e in events}
    assert message["interrupt"] == "resumable at Review: iter_from_persistence starts here"
    assert "LookupAccount raised after 3.4 s" in message["error"]


def test_a_pending_or_running_last_snapshot_says_where_the_run_stopped(tmp_path: Path) -> None:
    url = copy_store(tmp_path)
    items = snapshots(url, PAUSED)
    items[-1]["status"] = "pending"  # load_next claimed it, the process died
    write_run(url, PAUSED, items)
    items = snapshots(url, ENDED)[:-1]
    items[-1].update(status="running", duration=None)  # killed mid-node
    write_run(url, ENDED, items)
    _rows, events, _scan = listing(url)
    kinds = {(e["run_id"], e["kind"]): e["message"] for e in events}
    assert "claimed by load_next (pending) but never run" in kinds[(PAUSED, "interrupt")]
    assert kinds[(ENDED, "ended_early")] == "Review was running when the run stopped"


def test_state_is_the_graph_state_plus_the_node_and_blobs_are_the_files_bytes(tmp_path: Path) -> None:
    url = copy_store(tmp_path)
    rows, _events, _scan = listing(url)
    first, end = [r for r in rows if r["run_id"] == ENDED][1], [r for r in rows if r["run_id"] == ENDED][-1]
    items = snapshots(url, ENDED)
    with open_reader(url) as reader:
        state = reader.load_state(CheckpointRecord(run_id=ENDED, checkpoint_id=first["checkpoint_id"],
                                                   location=first["location"]))
        assert state == {**items[1]["state"], "__node__": {"account_id": "acct-alice", "node_id": "LookupAccount"}}
        final = reader.load_state(CheckpointRecord(run_id=ENDED, checkpoint_id=end["checkpoint_id"]))
        assert final == {**items[-1]["state"], "__end__": items[-1]["result"]}
        blob = reader.read_blob(CheckpointRecord(run_id=ENDED, checkpoint_id=first["checkpoint_id"]))
    assert json.loads(blob) == items[1] and blob in (Path(url) / f"{ENDED}.json").read_bytes()
    assert first["size_bytes"] == len(blob)


def test_redaction_hides_the_key_and_secrets_inside_json_strings(tmp_path: Path) -> None:
    from lastgood.redact import redact

    url = copy_store(tmp_path)
    items = fresh_ids(snapshots(url, PAUSED))
    tool = json.dumps({"crm": {"api_key": "sk-live-9fQ2xV7mK3pL8nR4tW6yZ1bC"}, "status": 200})
    items[-1]["state"]["messages"].append(f"tool said {tool}")
    items[-1]["state"]["review_notes"].append("retried with sk-proj-Ab3Cd5Ef7Gh9Ij1Kl3Mn5Op7")
    write_run(url, "run_secrets", items)
    with open_reader(url) as reader:
        state = reader.load_state(CheckpointRecord(run_id="run_secrets", checkpoint_id=items[-1]["id"]))
    shown = json.dumps(redact(state))
    for secret in (SECRET, "sk-live-9fQ2xV7mK3pL8nR4tW6yZ1bC", "sk-proj-Ab3Cd5Ef7Gh9Ij1Kl3Mn5Op7"):
        assert secret in json.dumps(state) and secret not in shown


def test_pydantic_ai_messages_in_a_state_read_as_a_conversation(tmp_path: Path) -> None:
    from lastgood.investigate.stateview import find_conversation, message_normalizer

    url = copy_store(tmp_path)
    history = [
        {"parts": [{"content": "Be brief.", "part_kind": "system-prompt"},
                   {"content": "Refund order 7?", "timestamp": "2026-11-03T16:00:00Z", "part_kind": "user-prompt"}],
         "instructions": None, "kind": "request"},
        {"parts": [{"tool_name": "lookup_order", "args": {"order": 7}, "tool_call_id": "call_1",
                    "part_kind": "tool-call"}], "model_name": "test", "kind": "response"},
        {"parts": [{"tool_name": "lookup_order", "content": {"paid": True}, "tool_call_id": "call_1",
                    "part_kind": "tool-return"}], "kind": "request"},
        {"parts": [{"content": "Refunded.", "part_kind": "text"}], "kind": "response"},
    ]
    items = fresh_ids(snapshots(url, PAUSED))
    items[-1]["state"]["messages"] = history
    write_run(url, "run_agent", items)
    with open_reader(url) as reader:
        state = reader.load_state(CheckpointRecord(run_id="run_agent", checkpoint_id=items[-1]["id"]))
        path, found = find_conversation(state, normalize=message_normalizer(reader))
    assert path == ["messages"]
    assert [(m["role"], m["content"]) for m in found] == [
        ("user", "Be brief.\nRefund order 7?"), ("assistant", ""), ("tool", {"paid": True}), ("assistant", "Refunded.")]
    assert found[1]["tool_calls"] == [{"id": "call_1", "name": "lookup_order", "args": {"order": 7}}]


def test_the_sniff_goes_by_content_not_by_file_names(tmp_path: Path) -> None:
    from lastgood.readers.registry import pick_reader

    folder = tmp_path / "renamed"
    folder.mkdir()
    shutil.copy(SAMPLE / f"{ENDED}.json", folder / "ticket-42.json")
    (folder / "notes.txt").write_text("not a run")
    assert pick_reader(str(folder)) == "pydantic-graph"
    other = tmp_path / "other"
    other.mkdir()
    (other / "run_1.json").write_text(json.dumps([{"role": "user", "content": "hi"}]))
    from lastgood.readers.pydantic_graph.reader import PydanticGraphReader

    assert not PydanticGraphReader.sniff(str(other)) and not PydanticGraphReader.sniff(str(SAMPLE / f"{ENDED}.json"))


def test_a_file_cut_short_lists_the_snapshots_before_the_cut_and_the_other_runs(tmp_path: Path) -> None:
    url = copy_store(tmp_path)
    _truncate(url)
    rows, _events, scan = listing(url)
    looped = [r for r in rows if r["run_id"] == LOOPED]
    assert len(looped) == 4 and {r["status"] for r in rows} == {"ok"}
    assert len({r["run_id"] for r in rows}) == 5
    (finding,) = scan.findings
    assert finding.check == Check.UNDECODABLE and finding.run_id == LOOPED and finding.checkpoint_id is None
    assert "the file ends inside snapshot 5" in finding.message and "the 4 snapshots before it" in finding.message


def test_an_unknown_status_makes_the_snapshot_corrupt_but_it_still_decodes(tmp_path: Path) -> None:
    url = copy_store(tmp_path)
    _unknown_status(url)
    rows, _events, scan = listing(url)
    bad = next(r for r in rows if r["run_id"] == ENDED and r["step"] == 1)
    assert bad["status"] == "corrupt" and "'paused' is not one pydantic-graph knows" in bad["status_reason"]
    assert [(f.check, f.checkpoint_id) for f in scan.findings] == [(Check.ROW_INVALID, bad["checkpoint_id"])]


# ---- refreshes ------------------------------------------------------------------------------


def test_a_run_that_goes_on_is_read_alone_and_a_resumed_pause_lists_everything_again(tmp_path: Path) -> None:
    url = copy_store(tmp_path)
    _rows, _events, first = listing(url)
    items = snapshots(url, FAILED)  # a graph run appending to its own file (as _append_save does)
    items.append({**items[0], "id": f"Classify:{uuid.uuid4().hex}", "status": "created", "start_ts": None,
                  "duration": None})
    write_run(url, FAILED, items)
    rows, _events, again = listing(url, first.token)
    assert not again.full and {r["run_id"] for r in rows} == {FAILED} and len(rows) == 3
    items = snapshots(url, PAUSED)
    items[-1].update(status="success", start_ts="2026-11-04T09:00:00.000000Z", duration=2.1)
    write_run(url, PAUSED, items)  # Review ran, the process died before the end: the event moves to... Review
    rows, events, third = listing(url, again.token)
    assert not third.full and [(e["kind"], e["checkpoint_id"]) for e in events] == [("ended_early", items[-1]["id"])]
    items.append({"state": items[-1]["state"], "result": {"data": "done"}, "ts": "2026-11-04T09:00:02.100000Z",
                  "kind": "end", "id": f"end:{uuid.uuid4().hex}"})
    write_run(url, PAUSED, items)  # ...and then the run ended: Review's event must go
    _rows, events, fourth = listing(url, third.token)
    assert fourth.full and not [e for e in events if e["run_id"] == PAUSED]
    assert listing(url, fourth.token)[2].token == fourth.token


# ---- recovery -------------------------------------------------------------------------------


def _backend(url: str) -> Any:
    from lastgood.readers.pydantic_graph.recovery import PydanticGraphRecovery

    return PydanticGraphRecovery(url)


def _change(url: str, run: str, target: str | None, action: str = "restore", expected: str | None = "head",
            **entry: Any) -> jr.Change:
    head = _backend(url).head(run) if expected == "head" else expected
    body = {"id": jr.new_action_id(), "time": jr.now_iso(), "operator": "test", "action": action,
            "reason": "test", "run_id": run, "namespace": "", "target": target, "previous_head": head,
            "marks": jr.empty_marks(), "note": {"restored_from": target}, **entry}
    return jr.Change(run, "", head, target, body)


def test_restore_appends_what_snapshot_node_would_and_supersedes_the_old_resume_point(tmp_path: Path) -> None:
    url = copy_store(tmp_path)
    before = (Path(url) / f"{PAUSED}.json").read_bytes()
    items = snapshots(url, PAUSED)
    sealed = _backend(url).commit(_change(url, PAUSED, items[1]["id"]))
    after = snapshots(url, PAUSED)
    assert after[:3] == items[:3] and after[3] == {**items[3], "status": "pending"}
    new = after[4]
    assert list(new) == ["state", "node", "start_ts", "duration", "status", "kind", "id"]
    assert (new["state"], new["node"], new["status"], new["start_ts"], new["duration"]) == (
        items[1]["state"], items[1]["node"], "created", None, None)
    assert new["id"].startswith("LookupAccount:") and len(new["id"].split(":")[1]) == 32
    assert sealed["new_head"] == new["id"] == _backend(url).head(PAUSED)
    note = sealed["note"]
    assert note["appended"] == new["id"] and note["set_pending"] == [items[3]["id"]]
    assert (Path(url) / note["archive"]).read_bytes() == before
    rows, events, _ = listing(url)
    added = next(r for r in rows if r["checkpoint_id"] == new["id"])
    assert added["trigger"] == "restore" and added["created_at"] > max(r["created_at"] for r in rows
                                                                         if r["checkpoint_id"] != new["id"])
    assert {(e["checkpoint_id"], e["kind"]) for e in events if e["run_id"] == PAUSED} == {
        (new["id"], "rewind"), (new["id"], "interrupt")}
    assert _backend(url).check_head(PAUSED, "", items[1]["id"], None).ok


def test_undo_gives_the_file_back_byte_for_byte_unless_it_changed_since(tmp_path: Path) -> None:
    url = copy_store(tmp_path)
    path = Path(url) / f"{LOOPED}.json"
    original = path.read_bytes()
    items = snapshots(url, LOOPED)
    restored = _backend(url).commit(_change(url, LOOPED, items[2]["id"]))
    undo = _backend(url).commit(_change(url, LOOPED, items[-1]["id"], action="undo", undo_of=restored["id"]))
    assert path.read_bytes() == original and undo["new_head"] == items[-1]["id"]
    again = _backend(url).commit(_change(url, LOOPED, items[2]["id"]))
    write_run(url, LOOPED, [*snapshots(url, LOOPED)[:-1], {**snapshots(url, LOOPED)[-1], "status": "pending"}])
    changed = path.read_bytes()
    with pytest.raises(ConflictError):
        _backend(url).commit(_change(url, LOOPED, items[-1]["id"], action="undo", undo_of=again["id"],
                                     expected=again["new_head"]))
    assert path.read_bytes() == changed
    assert jr.verify_chain(_backend(url).journal_entries()).ok


def test_refusals_write_nothing(tmp_path: Path) -> None:
    url = copy_store(tmp_path)
    items = snapshots(url, LOOPED)
    _backend(url).commit(_change(url, LOOPED, items[2]["id"]))
    state = {p: p.read_bytes() for p in Path(url).rglob("*") if p.is_file()}
    with pytest.raises(UsageError, match="end snapshot"):
        _backend(url).commit(_change(url, LOOPED, items[-1]["id"]))
    with pytest.raises(ConflictError, match="moved"):
        _backend(url).commit(_change(url, LOOPED, items[1]["id"], expected=items[-1]["id"]))
    lock = Path(url) / f"{LOOPED}.json.pydantic-graph-persistence-lock"
    lock.write_text("held by a running graph\n")
    with pytest.raises(ConflictError, match="pydantic-graph is writing"):
        _backend(url).commit(_change(url, LOOPED, items[1]["id"]))
    lock.unlink()
    assert {p: p.read_bytes() for p in Path(url).rglob("*") if p.is_file()} == state


def test_reading_never_writes_into_the_folder(tmp_path: Path) -> None:
    url = copy_store(tmp_path)
    listing(url)
    assert _backend(url).journal_entries() == [] and not (Path(url) / ".lastgood").exists()


# ---- crash safety ---------------------------------------------------------------------------

TRIALS = 50


def _one_action(url: str, targets: list[str], i: int) -> dict[str, Any]:
    backend = _backend(url)
    entries = backend.journal_entries()
    last = entries[-1] if entries else None
    undoable = (last is not None and last.get("action") == "restore" and not last.get("undone")
                and last["note"].get("sha256_after") == _sha(url))
    if i % 4 == 3 and undoable:
        return backend.commit(_change(url, LOOPED, last["previous_head"], action="undo", undo_of=last["id"]))
    head = backend.head(LOOPED)
    target = targets[i % len(targets)] if targets[i % len(targets)] != head else targets[(i + 1) % len(targets)]
    if i % 3 == 2:
        change = _change(url, LOOPED, None, action="quarantine")
        body = {**change.entry, "marks": {**jr.empty_marks(), "quarantine": [target]}}
        return backend.commit(jr.Change(LOOPED, "", change.expected_head, None, body))
    return backend.commit(_change(url, LOOPED, target))


def _sha(url: str) -> str:
    from lastgood.readers.pydantic_graph import layout

    return layout.sha256((Path(url) / f"{LOOPED}.json").read_bytes())


def _check_after_kill(url: str, original: str) -> int:
    """The run file is the old one or the new one, whole; returns 1 when a kill left an action's lock."""
    from lastgood.readers.pydantic_graph import layout, runfile

    run = runfile.read_run(f"{LOOPED}.json", (Path(url) / f"{LOOPED}.json").read_bytes())
    assert run.damage is None and not [s for s in run.snapshots if s.broken], "the run file is broken"
    backend = _backend(url)
    entries = backend.journal_entries()
    assert jr.verify_chain(entries).ok
    files = [e["note"]["sha256_after"] for e in entries if e.get("note", {}).get("sha256_after")]
    committed = files[-1] if files else original
    pending = backend.pending()
    intent = pending[0].get("entry") if pending else None
    current = layout.sha256((Path(url) / f"{LOOPED}.json").read_bytes())
    assert current == committed or (intent and current == intent["note"].get("sha256_after")), \
        "the run file is neither the last committed one nor the interrupted action's"
    pg_lock = Path(url) / f"{LOOPED}.json{layout.PG_LOCK_SUFFIX}"
    assert not pg_lock.exists() or pending, "pydantic-graph's lock is only ever held under Lastgood's"
    for entry in entries:
        archive = entry.get("note", {}).get("archive")
        if archive:
            assert layout.sha256((Path(url) / archive).read_bytes()) == entry["note"]["sha256_before"]
    return 1 if pending else 0


def test_sigkill_at_random_moments_of_restores_leaves_the_old_or_the_new_file(tmp_path: Path) -> None:
    url = copy_store(tmp_path)
    original = _sha(url)
    targets = [s["id"] for s in snapshots(url, LOOPED)[:-1]]
    rng = random.Random(20261127)
    interrupted = 0
    started = time.monotonic()
    for trial in range(TRIALS):
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child is killed
            try:
                i = trial * 1000
                while True:
                    _one_action(url, targets, i)
                    i += 1
            finally:
                os._exit(3)
        time.sleep(rng.uniform(0.0, 0.04))
        os.kill(pid, signal.SIGKILL)
        _, status = os.waitpid(pid, 0)
        assert os.WIFSIGNALED(status), f"trial {trial}: the child ended on its own ({status})"
        interrupted += _check_after_kill(url, original)
        _one_action(url, targets, trial)  # the next action resolves a stale lock
        assert not (Path(url) / ".lastgood" / "journal" / "lock.json").exists()
        assert not list(Path(url).glob("*.pydantic-graph-persistence-lock"))
    print(f"interrupted mid-action: {interrupted}/{TRIALS}")
    assert interrupted >= 3, "no kill landed inside an action"
    assert time.monotonic() - started < 90
    assert len(_backend(url).journal_entries()) >= TRIALS
    rows, _events, scan = listing(url)
    assert not scan.findings and {r["status"] for r in rows} == {"ok"}


def test_sigkill_of_the_lastgood_restore_command_leaves_the_old_or_the_new_file(tmp_path: Path) -> None:
    """The real ``lastgood restore`` process, killed at a random moment of its action: once its lock
    appears (the action has begun), within the milliseconds the commit takes."""
    from lastgood.readers.pydantic_graph import layout

    url = copy_store(tmp_path)
    path, lock = Path(url) / f"{LOOPED}.json", Path(url) / layout.LOCK
    items = snapshots(url, LOOPED)
    exe = Path(sys.executable).with_name("lastgood")
    env = {**os.environ, "LASTGOOD_HOME": str(tmp_path / "home"), "LASTGOOD_ALLOW_WRITE": "1",
           "LASTGOOD_OPERATOR": "crash"}
    rng = random.Random(7)
    outcomes = []
    for trial in range(4):
        before = path.read_bytes()
        proc = subprocess.Popen([str(exe), "restore", url, items[1 + trial % 4]["id"], "--yes", "--reason", "crash"],
                                env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 60
        while proc.poll() is None and not lock.exists() and time.monotonic() < deadline:
            time.sleep(0.0002)
        time.sleep(rng.uniform(0.0, 0.04))
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
        after = path.read_bytes()
        entries, pending = _backend(url).journal_entries(), _backend(url).pending()
        new = entries[-1]["note"].get("sha256_after") if entries else None
        intent = pending[0].get("entry", {}).get("note", {}).get("sha256_after") if pending else None
        assert after == before or layout.sha256(after) in (new, intent), f"trial {trial}: a broken file"
        outcomes.append(("old" if after == before else "new") + ("+lock" if pending else ""))
        _one_action(url, [s["id"] for s in items[:-1]], trial)  # resolves a lock a kill left
        assert not lock.exists() and not list(Path(url).glob("*.pydantic-graph-persistence-lock"))
    print(f"lastgood restore killed mid-action {len(outcomes)} times: {outcomes}")
    assert jr.verify_chain(_backend(url).journal_entries()).ok


# ---- the CLI --------------------------------------------------------------------------------


def test_cli_ls_show_verify_as_json(tmp_path: Path) -> None:
    url = copy_store(tmp_path / "store")
    home = tmp_path / "home"
    listed = json.loads(lastgood_cli("ls", url, "--run", PAUSED, "--format", "json", home=home).stdout)
    assert [r["checkpoint_id"] for r in listed] == [s["id"] for s in snapshots(url, PAUSED)]
    shown = lastgood_cli("show", url, snapshots(url, PAUSED)[-1]["id"], "--format", "json", home=home)
    assert shown.returncode == 0 and SECRET not in shown.stdout
    data = json.loads(shown.stdout)
    assert data["state"]["crm_api_key"] == "[redacted]" and data["state"]["__node__"] == {"node_id": "Review"}
    assert data["checkpoint"]["trigger"] == "Review" and "interrupt" in {e["kind"] for e in data["events"]}
    _unknown_status(url)
    done = lastgood_cli("verify", url, "--format", "json", home=home)
    report = json.loads(done.stdout)
    assert done.returncode == 1
    assert "row-invalid" in {f["check"] for f in report["findings"] if f["severity"] == "error"}
