"""Hostile LangGraph stores: payloads that run code when LangGraph itself loads them.

Each payload would create a canary file if anything imported and called the
class it names (as LangGraph's JsonPlusSerializer does) or unpickled it.
Scanning, loading and checking must run nothing and report every one.
"""

from __future__ import annotations

import json
import os
import pickle
import sqlite3
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgpack
import pytest
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.checkpoint.sqlite import SqliteSaver

from lastgood.readers.base import CheckpointRecord, record_from_row
from lastgood.readers.langgraph.common import new_uuid6
from lastgood.readers.langgraph.serde import decode_typed, suspicious_types
from lastgood.readers.langgraph.sqlite import LangGraphSqliteReader


_REAL_SYSTEM = os.system  # captured before any test replaces it with a spy
NAMES = {"ext0", "ext1", "ext2", "ext3", "ext4", "nested", "pickle", "json"}


class _Boom:
    """Unpickling this runs ``touch <canary>``."""

    def __init__(self, canary: Path) -> None:
        self.canary = canary

    def __reduce__(self) -> tuple[Any, ...]:
        return (_REAL_SYSTEM, (f"touch {self.canary}",))


def _ext(code: int, *parts: Any) -> msgpack.ExtType:
    return msgpack.ExtType(code, msgpack.packb(list(parts)))


def _checkpoint(cid: str, values: dict[str, Any], type_: str = "msgpack") -> bytes:
    checkpoint = {
        "v": 4, "id": cid, "ts": "2026-01-01T00:00:00+00:00", "channel_values": values,
        "channel_versions": {k: "1" for k in values}, "versions_seen": {}, "updated_channels": None,
    }
    return json.dumps(checkpoint).encode() if type_ == "json" else msgpack.packb(checkpoint)


def _payloads(canary: Path) -> dict[str, tuple[str, bytes]]:
    touch = f"touch {canary}"
    message = {"content": "hi", "additional_kwargs": {"x": _ext(0, "os", "system", touch)}, "type": "ai"}
    return {
        "ext0": ("msgpack", {"p": _ext(0, "os", "system", touch)}),
        "ext1": ("msgpack", {"p": _ext(1, "subprocess", "call", [["touch", str(canary)]])}),
        "ext2": ("msgpack", {"p": _ext(2, "subprocess", "Popen", {"args": ["touch", str(canary)]})}),
        "ext3": ("msgpack", {"p": _ext(3, "os", "system", touch, "__call__")}),
        "ext4": ("msgpack", {"p": _ext(4, "subprocess", "run", {"args": ["touch", str(canary)]})}),
        "nested": ("msgpack", {"messages": [_ext(5, "langchain_core.messages.ai", "AIMessage", message)]}),
        "pickle": ("pickle", pickle.dumps(_Boom(canary))),
        "json": ("json", {"p": {"lc": 2, "type": "constructor", "id": ["os", "system"], "args": [touch]}}),
    }


@dataclass
class HostileStore:
    path: Path
    canary: Path
    ids: dict[str, str]
    error_checkpoint: str


@pytest.fixture(scope="session")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> HostileStore:
    directory = tmp_path_factory.mktemp("hostile")
    canary, path = directory / "canary", directory / "hostile.sqlite"
    conn = sqlite3.connect(path)
    SqliteSaver(conn).setup()
    ids = {}
    for name, (type_, payload) in _payloads(canary).items():
        ids[name] = cid = new_uuid6()
        blob = payload if type_ == "pickle" else _checkpoint(cid, payload, type_)
        meta = json.dumps({"source": "loop", "step": 0, "parents": {}}).encode()
        conn.execute("INSERT INTO checkpoints VALUES (?, '', ?, NULL, ?, ?, ?)", (name, cid, type_, blob, meta))
    error_write = msgpack.packb(_ext(0, "os", "system", f"touch {canary}"))
    conn.execute("INSERT INTO writes VALUES ('ext0', '', ?, 'task-1', '', -1, '__error__', 'msgpack', ?)",
                 (ids["ext0"], error_write))
    conn.commit()
    conn.close()
    return HostileStore(path, canary, ids, ids["ext0"])


@pytest.fixture(autouse=True)
def _no_process_spawned(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    calls: list[Any] = []
    monkeypatch.setattr(os, "system", lambda *a, **k: calls.append(("os.system", a)) or 0)
    monkeypatch.setattr(subprocess, "Popen", lambda *a, **k: calls.append(("Popen", a)))
    yield calls
    assert calls == []


def _records(path: Path) -> list[CheckpointRecord]:
    with LangGraphSqliteReader(str(path)) as reader:
        return [record_from_row(r) for t in reader.scan().checkpoints for r in t.to_pylist()]


def test_the_payloads_are_live(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Control: LangGraph's own deserializer runs the msgpack payload."""
    monkeypatch.undo()
    canary = tmp_path / "control-canary"
    _, payload = _payloads(canary)["ext0"]
    JsonPlusSerializer().loads_typed(("msgpack", _checkpoint("x", payload)))
    assert canary.exists()


def test_scan_runs_nothing(hostile: HostileStore) -> None:
    with LangGraphSqliteReader(str(hostile.path)) as reader:
        scan = reader.scan()
        rows = [r for t in scan.checkpoints for r in t.to_pylist()]
        events = [r for t in scan.events for r in t.to_pylist()]
    assert {r["run_id"] for r in rows} == NAMES
    assert [e["kind"] for e in events] == ["error"]
    assert "os.system" in events[0]["message"]
    assert not hostile.canary.exists()


def test_load_state_runs_nothing(hostile: HostileStore) -> None:
    with LangGraphSqliteReader(str(hostile.path)) as reader:
        states = {r.run_id: reader.load_state(r) for r in _records(hostile.path)}
        writes = [reader.pending_writes(r) for r in _records(hostile.path)]
    assert not hostile.canary.exists()
    assert states["ext0"]["p"] == {"$type": "os.system", "value": f"touch {hostile.canary}"}
    assert states["ext3"]["p"]["$method"] == "__call__"
    assert states["pickle"]["$unloaded"] == "pickle"
    assert "posix.system" in states["pickle"]["globals"] or "os.system" in states["pickle"]["globals"]
    assert states["nested"]["messages"][0]["content"] == "hi"  # the hidden ext is reported by the check
    assert suspicious_types(states["json"]) == ["os.system"]
    assert any(w and w[0].value == {"$type": "os.system", "value": f"touch {hostile.canary}"} for w in writes)


def test_check_checkpoints_reports_every_payload(hostile: HostileStore) -> None:
    with LangGraphSqliteReader(str(hostile.path)) as reader:
        findings = list(reader.check_checkpoints(_records(hostile.path), read_data=True))
    assert not hostile.canary.exists()
    by_run: dict[str, list[Any]] = {}
    for f in findings:
        by_run.setdefault(f.run_id, []).append(f)
    assert set(by_run) == NAMES
    for name in ("ext0", "ext1", "ext2", "ext3", "ext4", "nested", "json"):
        suspicious = [f for f in by_run[name] if f.check == "suspicious-type"]
        assert suspicious and suspicious[0].severity == "error", name
    assert "subprocess.Popen" in str(by_run["ext2"])
    assert "os.system.__call__" in str(by_run["ext3"])
    pickled = [f for f in by_run["pickle"] if f.check == "pickle-payload"]
    assert pickled and pickled[0].severity == "error" and "system" in pickled[0].message
    write_findings = [f for f in by_run["ext0"] if "pending write" in f.message]
    assert {f.check for f in write_findings} == {"suspicious-type", "pending-error"}


def test_decode_typed_never_unpickles(tmp_path: Path) -> None:
    canary = tmp_path / "canary"
    for protocol in range(0, pickle.HIGHEST_PROTOCOL + 1):
        marker = decode_typed("pickle", pickle.dumps(_Boom(canary), protocol=protocol))
        assert marker["$unloaded"] == "pickle" and marker["size"] > 0
        assert any(g.endswith(".system") for g in marker["globals"]), (protocol, marker)
    assert not canary.exists()
