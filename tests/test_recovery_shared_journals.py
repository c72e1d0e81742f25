"""The hardening of the native store's journal, now shared by every file journal
(``lastgood.readers.common.filejournal``) and every SQLite journal (``common.sqljournal``): each case
is one a format's own copy lacked before (AutoGen, a training folder, CrewAI, OpenAI Agents)."""

from __future__ import annotations

import os
import shutil
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from lastgood.errors import ReaderError
from lastgood.readers import journal as jr
from tests.helpers import ROOT
from tests.test_reader_autogen import T, copy_store
from tests.test_reader_hf_trainer import make_outputs


@contextmanager
def answers_within(seconds: int) -> Iterator[None]:
    """Fail (instead of hanging the suite) when the body waits on a FIFO."""
    def timeout(_signum: int, _frame: Any) -> None:
        raise AssertionError(f"no answer within {seconds} s: waiting on a FIFO?")

    previous = signal.signal(signal.SIGALRM, timeout)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def _entry(run: str, action: str, target: str | None = None, head: str | None = None) -> dict[str, Any]:
    return {"id": jr.new_action_id(), "time": jr.now_iso(), "operator": "t", "action": action, "reason": "r",
            "run_id": run, "namespace": "", "target": target, "previous_head": head, "superseded": [],
            "undo_of": None, "plan_digest": None, "marks": jr.empty_marks(), "note": {}}


def _autogen(tmp_path: Path) -> tuple[str, Any]:
    from lastgood.readers.autogen.recovery import StateFileRecovery

    url = copy_store(tmp_path)
    return url, StateFileRecovery(url)


def _trainer(tmp_path: Path) -> tuple[str, Any]:
    from lastgood.readers.hf_trainer.recovery import TrainerRecovery

    url = str(make_outputs(tmp_path))
    return url, TrainerRecovery(url)


def _deny_entries(monkeypatch: pytest.MonkeyPatch, cls: type, folder: str) -> None:
    real = cls._create

    def denied(self: Any, path: str, data: bytes) -> bool:
        if f"/{folder}/" in path and path.endswith(".json") and "lock" not in path:
            raise PermissionError(13, "Permission denied")
        return real(self, path, data)
    monkeypatch.setattr(cls, "_create", denied)


# ---- a FIFO where a control file was: refused, never waited on --------------------------------


def test_autogen_a_fifo_lock_is_refused_not_waited_on(tmp_path: Path) -> None:
    url, backend = _autogen(tmp_path)
    lock = Path(url) / ".lastgood" / "lock.json"
    lock.parent.mkdir(parents=True, exist_ok=True)
    os.mkfifo(lock)
    with answers_within(20):
        with pytest.raises(ReaderError, match="lock cannot be read"):
            backend.pending()
        with pytest.raises(ReaderError, match="lock cannot be read"):
            backend.append(_entry("trip-team", "check-failed"))
    assert list((Path(url) / ".lastgood").iterdir()) == [lock]  # nothing written


def test_training_folder_a_fifo_journal_entry_is_reported_unreadable(tmp_path: Path) -> None:
    url, backend = _trainer(tmp_path)
    backend.append(_entry("run-a", "check-failed"))
    first = Path(url) / ".lastgood" / "journal" / "entries" / "0000000001.json"
    first.unlink()
    os.mkfifo(first)
    with answers_within(20):
        entries = backend.journal_entries()
    assert entries[0]["id"] is None and entries[0]["unreadable"] == first.name
    assert not jr.verify_chain(entries).ok


# ---- the work took effect, its journal entry could not be written: an interrupted intent ----------


def test_autogen_an_unwritable_journal_leaves_an_interrupted_intent_the_next_action_completes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from lastgood.readers.autogen.recovery import StateFileRecovery

    url, backend = _autogen(tmp_path)
    _deny_entries(monkeypatch, StateFileRecovery, ".lastgood/journal")
    change = jr.Change("trip-team", "", T(5), T(2), _entry("trip-team", "restore", T(2), T(5)))
    with pytest.raises(ReaderError, match="interrupted intent"):
        backend.commit(change)
    assert backend.head("trip-team") == T(6)  # the new newest file is there…
    pending = backend.pending()
    assert pending[0]["interrupted"] and pending[0]["entry"]["new_head"] == T(6)  # …and the intent says so
    assert backend.journal_entries() == []

    monkeypatch.undo()  # the journal is writable again: the next action completes the restore first
    backend.append(_entry("trip-team", "check-failed"))
    entries = backend.journal_entries()
    assert [e["action"] for e in entries] == ["restore", "check-failed"] and jr.verify_chain(entries).ok
    assert backend.pending() == []


def test_training_folder_an_unwritable_journal_leaves_an_interrupted_intent_the_next_action_completes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from lastgood.readers.hf_trainer.recovery import TrainerRecovery

    url, backend = _trainer(tmp_path)
    _deny_entries(monkeypatch, TrainerRecovery, "entries")
    change = jr.Change("run-a", "", "checkpoint-40", "checkpoint-24",
                       _entry("run-a", "rollback", "checkpoint-24", "checkpoint-40"))
    with pytest.raises(ReaderError, match="interrupted intent"):
        backend.commit(change)
    assert backend.head("run-a") == "checkpoint-24"
    assert backend.pending()[0]["interrupted"] and backend.journal_entries() == []

    monkeypatch.undo()
    backend.append(_entry("run-a", "check-failed"))
    assert [e["action"] for e in backend.journal_entries()] == ["rollback", "check-failed"]
    assert backend.pending() == [] and backend.head("run-a") == "checkpoint-24"


# ---- temp files a killed writer left -------------------------------------------------------------


def test_training_folder_temp_files_a_killed_writer_left_are_swept(tmp_path: Path) -> None:
    url, backend = _trainer(tmp_path)
    journal = Path(url) / ".lastgood" / "journal"
    dead, live = journal / "entries" / ".tmp-dead", journal / ".tmp-live-lock.json"
    for path in (dead, live):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("{}")
    old = time.time() - 3600
    os.utime(dead, (old, old))
    backend.append(_entry("run-a", "check-failed"))
    assert not dead.exists() and live.exists()  # a live writer's is left alone


# ---- SQLite journals: a read-only database is refused before it is opened ------------------------


@pytest.mark.parametrize("name", ["crewai_flows.db", "openai_agents.sqlite"])
def test_a_read_only_database_is_refused_and_left_without_new_files(tmp_path: Path, name: str) -> None:
    from lastgood.readers.crewai.recovery import CrewAIRecovery
    from lastgood.readers.openai_agents.recovery import SessionRecovery

    db = tmp_path / "ro" / name
    db.parent.mkdir()
    shutil.copyfile(ROOT / "sample_data" / name, db)
    db.chmod(0o444)
    backend = (CrewAIRecovery if name.startswith("crewai") else SessionRecovery)(str(db))
    with pytest.raises(ReaderError, match="read-only"):
        backend.append(_entry("any", "check-failed"))
    assert [p.name for p in db.parent.iterdir()] == [name]  # no -wal, no -shm, no journal
