"""One pass over ``flow_states`` rows: checkpoint columns, events, findings and heads.

The SQL reads ids, uuids, method names, timestamps and sizes, and judges each state's shape
cheaply: a state CrewAI wrote starts ``{"id": "<flow_uuid>"`` and ends ``}``; only a row that
does not is parsed (by SQLite, then by Python's ``json`` — what CrewAI's ``load_state`` uses —
to confirm), so the listing never parses every state.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from lastgood import limits
from lastgood.checks import Check
from lastgood.readers.base import EPOCH, EventRecord, Finding, HeadRecord, Status
from lastgood.readers.crewai import shape as sh
from lastgood.redact import redact_text

SHAPE_OK, SHAPE_BAD_JSON, SHAPE_NOT_OBJECT, SHAPE_ID = 0, 1, 2, 3
# the fast test is one GLOB (a uuid holds none of its wildcards; one that does takes the slow way)
_SHAPE_SQL = """CASE
  WHEN typeof(state_json) = 'text' AND instr(flow_uuid, '*') + instr(flow_uuid, '?') + instr(flow_uuid, '[') = 0
       AND state_json GLOB ('{"id": "' || flow_uuid || '"*}') THEN 0
  WHEN NOT json_valid(state_json) THEN 1
  WHEN json_type(state_json) <> 'object' THEN 2
  WHEN json_extract(state_json, '$.id') IS NOT flow_uuid THEN 3
  ELSE 0 END"""
LIST_SQL = f"""SELECT id, flow_uuid, method_name, timestamp, length(CAST(state_json AS BLOB)), {_SHAPE_SQL}
FROM flow_states WHERE id > ? ORDER BY id"""
STATE_SQL = "SELECT flow_uuid, CAST(state_json AS BLOB) FROM flow_states WHERE id = ?"
ONE_MICRO = timedelta(microseconds=1)
Row = tuple[Any, ...]  # id, flow_uuid, method_name, timestamp, size, shape code
MESSAGE_LIMIT = 2000


@dataclass(frozen=True, slots=True)
class Tail:
    """The last listed row of a run: where a later listing continues it."""

    count: int
    last_id: int
    method: str
    micros: int | None


@dataclass
class Batch:
    """What a listing found: the checkpoint columns and the rest."""

    columns: dict[str, list[Any]] = field(default_factory=lambda: {k: [] for k in COLUMNS})
    events: list[EventRecord] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    tails: dict[str, Tail] = field(default_factory=dict)


COLUMNS = ("run_id", "checkpoint_id", "parent_id", "step", "micros", "trigger", "status",
           "status_reason", "size_bytes", "location", "metadata")


# ---- judging one state ------------------------------------------------------------------


def parse_state(data: bytes | str) -> Any:
    """``state_json`` as CrewAI reads it (``json.loads``: NaN and Infinity included)."""
    try:
        import orjson

        return orjson.loads(data)
    except (ImportError, ValueError):  # orjson refuses NaN/Infinity, which json.dumps writes
        return json.loads(data)


def judge_state(data: Any, flow_uuid: str) -> tuple[Check, str] | None:
    """Why the row's state would not resume its run, or None."""
    if isinstance(data, memoryview):
        data = bytes(data)
    if not isinstance(data, (bytes, str)):
        return Check.UNDECODABLE, f"state_json is {type(data).__name__}, not JSON text"
    if len(data) > limits.MAX_BLOB_BYTES:
        return Check.TOO_LARGE, f"state_json is {len(data)} bytes (limit {limits.MAX_BLOB_BYTES})"
    try:
        value = parse_state(data)
    except (ValueError, UnicodeDecodeError) as exc:
        return Check.UNDECODABLE, f"state_json is not valid JSON ({_short(exc)})"
    except RecursionError:
        return Check.TOO_DEEP, "state_json is nested too deeply"
    return judge_value(value, flow_uuid)


def judge_value(value: Any, flow_uuid: str) -> tuple[Check, str] | None:
    if not isinstance(value, dict):
        return (Check.UNDECODABLE, f"state_json is a JSON {type(value).__name__}, not an object: "
                "SQLiteFlowPersistence.load_state returns None for it")
    state_id = value.get("id")
    if state_id is None:
        return Check.ID_MISMATCH, f"the state has no id (the flow's uuid is {flow_uuid})"
    if state_id != flow_uuid:
        return (Check.ID_MISMATCH, f"the state's id {_short(state_id)} is not the flow's uuid "
                f"{flow_uuid}: a kickoff resumed from it would save under another run")
    return None


def _short(value: Any, width: int = 120) -> str:
    text = str(value)
    return text if len(text) <= width else text[: width - 1] + "…"


# ---- rows -> columns ----------------------------------------------------------------------


def micros_of(text: Any) -> int | None:
    """``timestamp`` (``datetime.now(timezone.utc).isoformat()``) as epoch microseconds."""
    if not isinstance(text, str) or len(text) > 64:
        return None
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        return None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    try:
        micros = (parsed - EPOCH) // ONE_MICRO
    except OverflowError:
        return None
    return micros if micros >= 0 else None


def _valid_uuid(uuid: Any) -> bool:
    return type(uuid) is str and 0 < len(uuid) <= limits.MAX_ID_CHARS and "\x00" not in uuid


@dataclass(slots=True)
class _Run:
    """A run as the pass has seen it so far: its last row."""

    count: int
    cid: str | None
    method: str | None
    micros: int | None
    rid: int | None
    continued: bool = False  # listed before this listing (its first new row is noted)


class Lister:
    """One pass over rows in id order (the whole store, or the rows after a token's).

    ``learn_starts`` then ``build`` (columns, row events, the flow shape's edges), then
    ``finish`` decides "ended early" once every run has taught the shape what is final.
    ``before``: the runs' last rows listed earlier, which the new ones continue."""

    def __init__(self, shape: sh.FlowShape, pauses: Mapping[str, tuple[int, sh.Pending]],
                 journal: Mapping[int, Mapping[str, Any]], confirm: Callable[[Row], tuple[Check, str] | None],
                 before: Mapping[str, Tail] | None = None) -> None:
        self.shape = shape
        self.pauses, self.journal, self.confirm = pauses, journal, confirm
        self.paused = {rid: uuid for uuid, (rid, _p) in pauses.items()}
        self.before = before or {}
        self.batch = Batch()
        self.runs: dict[str, _Run] = {}
        self.first_kinds: dict[str, str] = {}  # a continued run -> how its first new row came to be
        self._stops: list[tuple[str, str, str, int | None, int | None, str | None]] = []
        self._meta_cache: dict[str, str] = {}

    def learn_starts(self, rows: Sequence[Row]) -> None:
        """Start methods: the first method of each run this listing begins."""
        first: dict[Any, Any] = {}
        for row in rows:
            if row[1] not in first:
                first[row[1]] = row[2]
        self.shape.starts.update(m for u, m in first.items() if u not in self.before and type(m) is str
                                 and not m.startswith(sh.MARK))

    def build(self, rows: Sequence[Row]) -> None:  # the per-row loop, kept flat for speed
        cols = self.batch.columns
        (run_ids, cids, parents, steps, times, triggers, statuses, reasons, sizes, locations,
         metas) = (cols[name] for name in COLUMNS)
        starts, followed, methods = self.shape.starts, self.shape.followed, self.shape.methods
        runs, paused, plain, ok = self.runs, self.paused, self._meta_cache, Status.OK.value
        fromiso, kind_of = datetime.fromisoformat, sh.kind_of
        for row in rows:
            rid, uuid, method, stamp, size, code = row
            run = runs.get(uuid)
            if run is None:
                if not _valid_uuid(uuid):
                    self._bad_uuid(row)
                    continue
                run = self._start(uuid)
            if type(method) is not str or len(method) > limits.MAX_ID_CHARS:
                method = _short(method, limits.MAX_ID_CHARS)
            previous = run.method
            kind = kind_of(method, previous, starts)
            if kind == sh.STEP:
                followed.add(previous)  # type: ignore[arg-type]
            if kind != sh.RESTORE:
                methods.add(method)
            if run.continued and uuid not in self.first_kinds:
                self.first_kinds[uuid] = kind
            if kind == sh.RESTART or kind == sh.RESTORE:
                self._stops.append((uuid, run.cid, previous, run.micros, run.rid, kind))  # type: ignore[arg-type]
            cid = str(rid)
            try:
                micros = (fromiso(stamp) - EPOCH) // ONE_MICRO
            except (TypeError, ValueError, OverflowError):  # not text, not ISO, or naive
                micros = micros_of(stamp)
            if micros is None or micros < 0 or (run.micros is not None and micros < run.micros):
                micros = self._bad_time(uuid, cid, stamp, micros if micros is None or micros >= 0 else None, run)
            run_ids.append(uuid)
            cids.append(cid)
            parents.append(run.cid)
            steps.append(run.count)
            times.append(micros)
            triggers.append("restore" if kind == sh.RESTORE else "method")
            if code == SHAPE_OK:
                statuses.append(ok)
                reasons.append(None)
            else:
                self._judge(row, uuid, cid)
            sizes.append(size)
            locations.append("flow_states:" + cid)
            if (kind == sh.STEP or kind == sh.FIRST) and rid not in paused:
                text = plain.get(method)
                metas.append(text if text is not None else self._plain_metadata(method))
            else:
                metas.append(self._metadata(rid, method, kind))
                self._row_events(uuid, rid, cid, method, kind, micros, run.cid)
            run.count, run.cid, run.method, run.micros, run.rid = run.count + 1, cid, method, micros, rid

    def _judge(self, row: Row, uuid: str, cid: str) -> None:
        """A state the SQL's quick look doubts: parsed as CrewAI parses it."""
        problem = self.confirm(row)
        if problem is not None:
            self._finding(problem[0], "error", problem[1], uuid, cid)
        self.batch.columns["status"].append(Status.CORRUPT.value if problem else Status.OK.value)
        self.batch.columns["status_reason"].append(problem[1] if problem else None)

    def _plain_metadata(self, method: str) -> str:
        text = self._meta_cache[method] = json.dumps({"method": method}, ensure_ascii=False)
        return text

    def _start(self, uuid: str) -> _Run:
        tail = self.before.get(uuid)
        run = (_Run(tail.count, str(tail.last_id), tail.method, tail.micros, tail.last_id, True) if tail
               else _Run(0, None, None, None, None))
        self.runs[uuid] = run
        return run

    def finish(self) -> None:
        """"Ended early" of the rows a restart or a restore follows and of each run's last row."""
        finals = self.shape.finals
        stops = self._stops + [(u, r.cid, r.method, r.micros, r.rid, None) for u, r in self.runs.items()]
        for uuid, cid, method, micros, rid, next_kind in stops:
            if method is None or cid is None:
                continue
            if sh.stopped_here(method, next_kind, finals, rid in self.paused):
                self._event(uuid, cid, "ended_early", micros, f"the flow stopped after {method}, which is "
                            f"not a final method ({sh.finals_text(finals)})")
        self.batch.tails = {u: Tail(r.count, r.rid, r.method, r.micros) for u, r in self.runs.items()
                            if r.rid is not None and r.method is not None}

    def _metadata(self, rid: int, method: str, kind: str) -> str:
        meta: dict[str, Any] = {"method": method}
        if kind == sh.RESTART:
            meta["restart"] = True
        elif kind == sh.RESUMED:
            meta["resumed_after_restore"] = True
        elif kind == sh.RESTORE:
            meta["lastgood"] = _mark_note(method, self.journal.get(rid))
        if rid in self.paused:
            meta["pending_feedback"] = True
        return json.dumps(meta, ensure_ascii=False, sort_keys=True)

    def _row_events(self, uuid: str, rid: int, cid: str, method: str, kind: str, micros: int,
                    parent: str | None) -> None:
        """A pause, a restart, a restore: what one row says by itself."""
        if rid in self.paused:
            pending = self.pauses[uuid][1]
            self._event(uuid, cid, "interrupt", micros, sh.pending_text(pending), bool(pending.message))
        if kind == sh.RESTART:
            self._event(uuid, cid, "restart", micros, f"kicked off again: {method} re-ran from the "
                        f"flow's start on the state of checkpoint {parent}")
        elif kind == sh.RESUMED:
            self._event(uuid, cid, "restart", micros, f"resumed from the state Lastgood restored "
                        f"(checkpoint {parent}): {method} ran")
        elif kind == sh.RESTORE:
            note = _mark_note(method, self.journal.get(rid))
            source = f" the state of checkpoint {note['restored_from']}" if note.get("restored_from") else ""
            self._event(uuid, cid, "rewind", micros, f"Lastgood {note.get('action')}:{source} "
                        f"(action {note.get('action_id') or 'not journaled'})")

    def _bad_time(self, uuid: str, cid: str, stamp: Any, micros: int | None, run: _Run) -> int:
        """A timestamp that does not parse (listed at the time of the row before it), or one
        earlier than the row before it."""
        if micros is None:
            self._finding(Check.ROW_INVALID, "warning", f"timestamp {_short(repr(stamp), 80)} is not an "
                          "ISO 8601 time; listed at the time of the row before it", uuid, cid)
            return run.micros or 0
        self._finding(Check.OUT_OF_ORDER, "warning", f"timestamp {stamp} is earlier than the run's row "
                      f"before it ({run.cid}), which has a smaller id", uuid, cid)
        return micros

    def _bad_uuid(self, row: Row) -> None:
        self.batch.findings.append(Finding(Check.ROW_INVALID, "error", f"flow_states row {row[0]}: flow_uuid "
                                           f"{_short(repr(row[1]), 80)} cannot name a run; the row is not listed"))

    def _event(self, uuid: str, cid: str, kind: str, micros: int | None, message: str,
               free_text: bool = False) -> None:
        """``free_text``: the message quotes what the flow stored (a question), so it is redacted."""
        text = redact_text(message) if free_text else message
        text = text if len(text) <= MESSAGE_LIMIT else text[:MESSAGE_LIMIT] + "…"
        self.batch.events.append(EventRecord(run_id=uuid, kind=kind, checkpoint_id=cid, created_at=_time(micros),
                                             message=text))

    def _finding(self, check: Check, severity: str, message: str, uuid: str, cid: str) -> None:
        self.batch.findings.append(Finding(check, severity, message, uuid, "", cid))  # type: ignore[arg-type]


def _time(micros: int | None) -> datetime | None:
    return None if micros is None else EPOCH + timedelta(microseconds=micros)


def _mark_note(method: str, entry: Mapping[str, Any] | None) -> dict[str, Any]:
    """What a Lastgood row is: its action (from ``method_name``) and the journal's record of it."""
    note: dict[str, Any] = {"action": method[len(sh.MARK):] or "restore"}
    if entry:
        restored = entry.get("note") if isinstance(entry.get("note"), dict) else {}
        note.update(action_id=entry.get("id"), action=entry.get("action") or note["action"],
                    restored_from=restored.get("restored_from") or entry.get("target"),
                    operator=entry.get("operator"))
    return note


def heads_of(tails: Mapping[str, Tail]) -> list[HeadRecord]:
    return [HeadRecord(run_id=uuid, checkpoint_id=str(tail.last_id)) for uuid, tail in tails.items()]
