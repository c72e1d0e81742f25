"""Reader for folders of AutoGen AgentChat state files (``team.save_state()`` / ``agent.save_state()``).

Run = a series of files (:mod:`lastgood.readers.autogen.layout`); checkpoint = one file, in the
series' number order, id ``<name>~<folder>`` (``state-0003~trip-team``: unique in the store, and
``trip-team/state-0003`` finds it); ``parent_id`` = the latest earlier file whose conversation
this one continues (a rollback shows as a parent further back, with a ``rewind`` event);
``step`` = position;
``created_at`` = the newest message time in the file (a restore's copy: the journal's time; no
times in it: the file's modification time), never before the previous file's; ``trigger`` =
``save_state`` (``restore`` for a file a Lastgood restore wrote); metadata: state type,
participants, manager, message count, ``next_speaker_index``, tokens the new messages used.
The state is the saved JSON with the conversation under ``"messages"`` (see ``states``).

Events: ``tool_call`` per tool call, ``error`` per tool result with ``is_error``, ``ended_early``
on a half turn (the run raised before any agent answered its task), ``rewind`` where a state
continues an older one than the file before it. Findings (per file): unreadable or truncated JSON
(``undecodable``), JSON that is not a saved state (``row-invalid``).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Iterator, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any, ClassVar

from lastgood.checks import Check
from lastgood.errors import DecodeError
from lastgood.readers.base import (EPOCH, CheckpointRecord, EventRecord, Finding, HeadRecord, Reader, Scan,
                                   backend_named, checkpoints_table, events_table)
from lastgood.readers.autogen.layout import SNIFF_BYTES, SNIFF_FILES, Series, StateFile, looks_like_state, walk
from lastgood.readers.autogen.states import (Parsed, continues, events_of, half_turn, normalize_message, parse_state,
                                             state_view)
from lastgood.readers.autogen.store import StateStore
from lastgood.readers.common.fsutil import open_fs, read_bounded, real_root
from lastgood.readers.journal import RecoveryBackend, RetentionBackend

TOKEN_VERSION = 1
TICK = timedelta(microseconds=1)
MOVES = ("restore", "rollback", "undo")


class AutoGenReader(Reader):
    """A folder of AutoGen AgentChat ``save_state()`` JSON files, read-only."""

    name = "autogen"
    description = "AutoGen AgentChat state files (save_state() JSON of teams and agents, one file per save)"
    recovery_class: ClassVar[str] = "lastgood.readers.autogen.recovery:StateFileRecovery"

    def __init__(self, url: str, storage_options: Mapping[str, Any] | None = None) -> None:
        super().__init__(url, storage_options)
        self.store = StateStore(url, storage_options)

    @classmethod
    def sniff(cls, url: str, storage_options: Mapping[str, Any] | None = None) -> bool:
        """A folder where one of the first JSON files found has the shape of a saved state."""
        try:
            fs, root = open_fs(url, storage_options)
            if not fs.isdir(root):
                return False
            root_real = real_root(fs, root)
            for number, found in enumerate(walk(fs, root)):
                if number >= SNIFF_FILES:
                    return False
                whole = found.size <= SNIFF_BYTES
                path = f"{root}/{found.path}"
                head = read_bounded(fs, path, SNIFF_BYTES, root_real) if whole else _head(fs, path)
                if looks_like_state(head, whole):
                    return True
        except Exception:  # noqa: BLE001 - not ours, whatever went wrong looking
            return False
        return False

    # ---- listing ------------------------------------------------------------------------------

    def scan(self, since: str | None = None) -> Scan:
        self.store.parsed.clear()  # files may have changed since the last look
        files = self.store.files()
        groups = _groups(files)
        journal = self.store.journal_entries()
        base = {"v": TOKEN_VERSION, "groups": {k: _digest(v) for k, v in groups.items()},
                "journal": _entries_digest(journal)}
        previous = _load(since)
        if previous is not None and all(previous.get(k) == v for k, v in base.items()):
            return Scan(token=since or "", full=False, checkpoints=iter(()), heads=None)
        changed = _changed_groups(previous, base)
        runs_before = set((previous or {}).get("runs") or [])
        if changed is not None:
            series = self.store.series([f for k in changed for f in groups[k]])
            if not {s.run_id for s in series} <= runs_before:
                changed = None  # a new run (or runs named anew): list everything
        if changed is None:
            series = self.store.series(files)
            runs = sorted(s.run_id for s in series)
        else:
            runs = sorted(runs_before)
        records, events, heads = self._list(series, journal)
        return Scan(token=json.dumps({**base, "runs": runs}, sort_keys=True), full=changed is None,
                    checkpoints=iter([checkpoints_table(records)]),
                    events=iter([events_table(events)] if events else []), heads=heads)

    def _list(self, series: list[Series], journal: list[dict[str, Any]]
              ) -> tuple[list[CheckpointRecord], list[EventRecord], list[HeadRecord]]:
        restores = _restores(journal)
        records: list[CheckpointRecord] = []
        events: list[EventRecord] = []
        heads: list[HeadRecord] = []
        for one in series:
            listed, found = self._list_series(one, restores)
            records += listed
            events += found
            if listed:
                heads.append(HeadRecord(one.run_id, listed[-1].checkpoint_id))
        return records, events, heads

    def _list_series(self, series: Series, restores: Mapping[tuple[str, str], dict[str, Any]]
                     ) -> tuple[list[CheckpointRecord], list[EventRecord]]:
        records: list[CheckpointRecord] = []
        events: list[EventRecord] = []
        seen: list[tuple[StateFile, Parsed]] = []
        previous_time: datetime | None = None
        for step, f in enumerate(series.files):
            parsed = self.store.parse(f)
            parent, parent_parsed = _parent(seen, parsed, series.files[step - 1] if step else None)
            restored = restores.get((series.run_id, f.checkpoint_id))
            when = _time(parsed, f, restored, previous_time)
            previous_time = when
            meta = _metadata(parsed, f, parent_parsed, restored)
            if parent is not None and step and parent.path != series.files[step - 1].path and parsed.value:
                meta["continues"] = parent.checkpoint_id
            records.append(CheckpointRecord(
                run_id=series.run_id, checkpoint_id=f.checkpoint_id, parent_id=parent.checkpoint_id if parent else None,
                step=step, created_at=when, trigger="restore" if restored else "save_state", size_bytes=f.size,
                agent=parsed.manager, codec="json", location=f.path, metadata=meta))
            events += _events(series.run_id, f, parsed, parent, parent_parsed, when, step, series)
            if parsed.value is not None:
                seen.append((f, parsed))
        return records, events

    # ---- one checkpoint -------------------------------------------------------------------------

    def _parsed(self, record: CheckpointRecord) -> Parsed:
        location = record.location or self._locate(record)
        try:
            return parse_state(self.store.read(location))
        except FileNotFoundError:
            raise DecodeError(f"{location}: the state file is gone") from None
        except OSError as exc:
            raise DecodeError(f"{location}: cannot be read ({exc})") from None

    def _locate(self, record: CheckpointRecord) -> str:
        series = self.store.run(record.run_id)
        found = next((f for f in (series.files if series else []) if f.checkpoint_id == record.checkpoint_id), None)
        if found is None:
            raise DecodeError(f"no state file {record.checkpoint_id} in run {record.run_id!r}")
        return found.path

    def load_state(self, record: CheckpointRecord) -> Any:
        parsed = self._parsed(record)
        if parsed.problem is not None:
            raise DecodeError(f"{record.location or record.checkpoint_id}: {parsed.problem[1]}")
        return state_view(parsed)

    def read_blob(self, record: CheckpointRecord) -> bytes:
        try:
            return self.store.read(record.location or self._locate(record))
        except FileNotFoundError:
            raise DecodeError(f"{record.checkpoint_id}: the state file is gone") from None

    def check_checkpoints(self, records: Iterable[CheckpointRecord], read_data: bool = False) -> Iterator[Finding]:
        """Every file read and parsed (it is one JSON document: both depths read it whole)."""
        for record in records:
            try:
                parsed = self._parsed(record)
            except DecodeError as exc:
                yield Finding(Check.MISSING, "error", str(exc), record.run_id, record.namespace, record.checkpoint_id)
                continue
            if parsed.problem is not None:
                check, message = parsed.problem
                yield Finding(check, "error", f"{record.location}: {message}", record.run_id, record.namespace,
                              record.checkpoint_id)

    # ---- capabilities ---------------------------------------------------------------------------

    def recovery(self) -> RecoveryBackend:
        return backend_named(self.recovery_class, self)

    def retention(self) -> RetentionBackend:
        """Prune: whole stale state series, archived, then removed (:mod:`.retention`)."""
        return backend_named("lastgood.readers.autogen.retention:StateSeriesRetention", self)  # type: ignore[return-value]

    def normalize_message(self, value: Any) -> dict[str, Any] | None:
        return normalize_message(value)


# ---- helpers --------------------------------------------------------------------------------------


def _head(fs: Any, path: str) -> bytes:
    with fs.open(path, "rb") as handle:
        return handle.read(SNIFF_BYTES)


def _groups(files: list[StateFile]) -> dict[str, list[StateFile]]:
    out: dict[str, list[StateFile]] = {}
    for f in files:
        out.setdefault(f"{f.folder}\0{f.prefix}", []).append(f)
    return out


def _digest(files: list[StateFile]) -> str:
    text = json.dumps(sorted((f.path, f.size, f.mtime) for f in files))
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def _entries_digest(entries: list[dict[str, Any]]) -> str:
    return hashlib.sha256(json.dumps([e.get("hash") for e in entries]).encode()).hexdigest()[:24]


def _load(token: str | None) -> dict[str, Any] | None:
    try:
        value = json.loads(token) if token else None
    except ValueError:
        return None
    return value if isinstance(value, dict) and value.get("v") == TOKEN_VERSION else None


def _changed_groups(previous: dict[str, Any] | None, now: dict[str, Any]) -> list[str] | None:
    """Groups of files changed since the ``previous`` token when files were only added to or rewritten
    in existing groups (None: list everything — files or groups gone or new, a restore journaled)."""
    if previous is None or previous.get("journal") != now["journal"]:
        return None
    before, groups = previous.get("groups") or {}, now["groups"]
    if set(before) != set(groups):
        return None
    return sorted(k for k in groups if before[k] != groups[k])


def _restores(entries: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    """(run, file id) -> the journal entry of the restore that wrote that file."""
    out = {}
    for entry in entries:
        if entry.get("action") in MOVES and entry.get("new_head") and entry.get("new_head") != entry.get("previous_head"):
            out[(str(entry.get("run_id")), str(entry["new_head"]))] = entry
    return out


def _parent(seen: list[tuple[StateFile, Parsed]], parsed: Parsed, previous: StateFile | None
            ) -> tuple[StateFile | None, Parsed | None]:
    """The latest earlier state this one continues (a damaged file: the file before it)."""
    if parsed.value is None:
        return previous, None
    keys = parsed.keys
    for f, earlier in reversed(seen):
        if continues(earlier.keys, keys):
            return f, earlier
    return None, None


def _time(parsed: Parsed, f: StateFile, restored: Mapping[str, Any] | None, previous: datetime | None) -> datetime:
    when = _journal_time(restored) or parsed.newest_time()
    if when is None:
        when = datetime.fromtimestamp(f.mtime, UTC) if f.mtime is not None else EPOCH
    return max(when, previous + TICK) if previous is not None else when


def _journal_time(entry: Mapping[str, Any] | None) -> datetime | None:
    raw = entry.get("time") if entry else None
    try:
        return datetime.fromisoformat(str(raw).replace("Z", "+00:00")) if raw else None
    except ValueError:
        return None


def _metadata(parsed: Parsed, f: StateFile, parent: Parsed | None, restored: Mapping[str, Any] | None
              ) -> dict[str, Any]:
    if parsed.value is None:
        return {"file": f.path}
    meta: dict[str, Any] = {"type": parsed.kind, "messages": len(parsed.messages), "file": f.path}
    if parsed.participants:
        meta.update(participants=parsed.participants, manager=parsed.manager)
        manager = parsed.value["agent_states"].get(parsed.manager) if parsed.manager else None
        if isinstance(manager, dict) and "next_speaker_index" in manager:
            meta["next_speaker_index"] = manager["next_speaker_index"]
    new = parsed.messages[len(parent.messages):] if parent is not None else parsed.messages
    usage = _usage(new)
    if usage:
        meta["usage"] = usage
    if half_turn(parsed):
        meta["half_turn"] = True
    if restored:
        meta.update(restored_by=restored.get("id"), copy_of=(restored.get("note") or {}).get("restored_from"))
    return meta


def _usage(messages: list[Any]) -> dict[str, int]:
    total: dict[str, int] = {}
    for message in messages:
        usage = message.get("models_usage") if isinstance(message, dict) else None
        if isinstance(usage, dict):
            for key in ("prompt_tokens", "completion_tokens"):
                if isinstance(usage.get(key), int):
                    total[key] = total.get(key, 0) + usage[key]
    return total


def _events(run: str, f: StateFile, parsed: Parsed, parent: StateFile | None, parent_parsed: Parsed | None,
            when: datetime, step: int, series: Series) -> list[EventRecord]:
    if parsed.value is None:
        return []
    new = parsed.messages[len(parent_parsed.messages):] if parent_parsed is not None else parsed.messages
    out = [EventRecord(run_id=run, kind=e.kind, checkpoint_id=f.checkpoint_id, created_at=e.created_at or when,
                       channel=e.channel, message=e.message) for e in events_of(new)]
    if half_turn(parsed):
        task = str(parsed.messages[-1].get("content"))[:200]
        out.append(EventRecord(run_id=run, kind="ended_early", checkpoint_id=f.checkpoint_id, created_at=when,
                               message=f"the run ended before any agent answered the task {task!r} (it raised): "
                                       "resuming this state starts mid-turn"))
    previous = series.files[step - 1] if step else None
    if previous is not None and (parent is None or parent.path != previous.path):
        what = f"continues {parent.checkpoint_id}, not {previous.checkpoint_id}" if parent else \
            "starts a conversation of its own (no earlier state's is a prefix of it)"
        out.append(EventRecord(run_id=run, kind="rewind", checkpoint_id=f.checkpoint_id, created_at=when,
                               message=f"{f.checkpoint_id} {what}: an earlier state was loaded again (or reset)"))
    return out

