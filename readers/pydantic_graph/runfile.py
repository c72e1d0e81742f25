"""One ``FileStatePersistence`` run file, parsed and judged (no pydantic-graph needed).

The file is a JSON array of snapshots (``TypeAdapter(list[Snapshot]).dump_json(indent=2)``). It is
parsed element by element (``json.JSONDecoder.raw_decode``), so each snapshot's exact bytes are
known (``read_blob``), and a file cut short still gives the snapshots before the cut — the damage
is a finding and the rest loads. Each snapshot is checked against what pydantic-graph 1.107's
``TypeAdapter`` accepts (``kind``, ``status``, ``node.node_id``, ``state``): anything it would
refuse makes the whole file unloadable by the framework, so it is an error here.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from lastgood import limits
from lastgood.checks import Check
from lastgood.readers.base import EPOCH, EventRecord, Finding, Status

STATUSES = ("created", "pending", "running", "success", "error")  # pydantic_graph.persistence.SnapshotStatus
KINDS = ("node", "end")
NODE_KEYS = ("state", "node", "start_ts", "duration", "status", "kind", "id")  # NodeSnapshot, in field order
_WS = re.compile(r"[ \t\n\r]*")
ONE_MICRO = timedelta(microseconds=1)
Problem = tuple[Check, str, str]  # check, severity, message


@dataclass(slots=True)
class Snapshot:
    """One element of the array, as listed."""

    index: int
    cid: str
    value: Any
    span: tuple[int, int]
    kind: str | None = None
    status: str | None = None
    node_id: str | None = None
    when: datetime | None = None  # start_ts (node) or ts (end)
    duration: float | None = None
    problems: list[Problem] = field(default_factory=list)

    @property
    def broken(self) -> str | None:
        """Why pydantic-graph cannot load it (an error-severity problem), or None."""
        return next((p[2] for p in self.problems if p[1] == "error"), None)


@dataclass
class RunFile:
    name: str
    run_id: str
    data: bytes
    snapshots: list[Snapshot]
    damage: str | None = None  # the file does not parse whole: why

    def blob(self, snapshot: Snapshot) -> bytes:
        """The snapshot's bytes in the file (``span``: byte offsets)."""
        return self.data[snapshot.span[0]:snapshot.span[1]]

    def by_id(self, cid: str) -> Snapshot | None:
        return next((s for s in self.snapshots if s.cid == cid), None)


def run_id_of(name: str) -> str:
    return name[: -len(".json")] if name.endswith(".json") else name


# ---- parsing ----------------------------------------------------------------------------


def parse_elements(text: str) -> tuple[list[tuple[Any, int, int]], str | None]:
    """The array's elements with their character spans, and why parsing stopped early (None:
    the whole text is one JSON array)."""
    decoder = json.JSONDecoder()
    pos = _WS.match(text, 0).end()  # type: ignore[union-attr]
    if text[pos:pos + 1] != "[":
        return [], "the file is not a JSON array"
    pos = _WS.match(text, pos + 1).end()  # type: ignore[union-attr]
    out: list[tuple[Any, int, int]] = []
    if text[pos:pos + 1] == "]":
        return out, _trailing(text, pos + 1)
    while True:
        try:
            value, end = decoder.raw_decode(text, pos)
        except json.JSONDecodeError as exc:
            where = "the file ends" if exc.pos >= len(text) else f"invalid JSON at character {exc.pos}"
            return out, f"{where} inside snapshot {len(out) + 1} ({exc.msg})"
        except RecursionError:
            return out, f"snapshot {len(out) + 1} is nested too deeply"
        out.append((value, pos, end))
        pos = _WS.match(text, end).end()  # type: ignore[union-attr]
        char = text[pos:pos + 1]
        if char == ",":
            pos = _WS.match(text, pos + 1).end()  # type: ignore[union-attr]
        elif char == "]":
            return out, _trailing(text, pos + 1)
        else:
            return out, (f"the file ends after snapshot {len(out)} (no closing bracket)" if not char
                         else f"unexpected {char!r} after snapshot {len(out)}")


def _trailing(text: str, pos: int) -> str | None:
    return None if not text[pos:].strip() else f"data after the array at character {pos}"


# a file dumped with indent=2: each element of the top-level array opens on a line "  {" and closes
# on a line "  }" (anything nested is indented deeper, and JSON strings hold no raw newline)
_OPEN, _CLOSE = re.compile(rb"\n  \{"), re.compile(rb"\n  \}")


def fast_elements(data: bytes) -> list[tuple[Any, int, int]] | None:
    """The elements of a file as pydantic-graph writes it, parsed at once (orjson) with their byte
    spans found from the layout; None when the file is anything else (the careful parse then)."""
    try:
        import orjson

        values = orjson.loads(data)
    except (ImportError, ValueError):  # NaN, damage, or no orjson: element by element
        return None
    if not isinstance(values, list):
        return None
    starts = [m.start() + 3 for m in _OPEN.finditer(data)]
    ends = [m.end() for m in _CLOSE.finditer(data)]
    if not (len(starts) == len(ends) == len(values)) or any(
            not s < e for s, e in zip(starts, ends)) or any(e > s for e, s in zip(ends, starts[1:])):
        return None
    return list(zip(values, starts, ends))


def careful_elements(data: bytes) -> tuple[list[tuple[Any, int, int]], str | None]:
    """:func:`parse_elements` on the decoded text, spans turned into byte offsets."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        return [], f"the file is not UTF-8 ({exc.reason} at byte {exc.start})"
    elements, damage = parse_elements(text)
    if len(text) == len(data):
        return elements, damage
    out, chars, offset = [], 0, 0
    for value, start, end in elements:  # non-ASCII text: character offsets -> byte offsets
        offset += len(text[chars:start].encode())
        length = len(text[start:end].encode())
        out.append((value, offset, offset + length))
        chars, offset = end, offset + length
    return out, damage


def read_run(name: str, data: bytes) -> RunFile:
    """A run file's snapshots (those before any damage), each judged."""
    fast = fast_elements(data)
    elements, damage = (fast, None) if fast is not None else careful_elements(data)
    run = RunFile(name, run_id_of(name), data, [], damage)
    seen: set[str] = set()
    for index, (value, start, end) in enumerate(elements):
        snap = judge(index, value, (start, end))
        if snap.cid in seen:
            snap.problems.append((Check.DUPLICATE_ID, "error", f"snapshot id {snap.cid} appears earlier in "
                                  "the file: pydantic-graph acts on the first one only"))
            snap.cid = f"{snap.cid}#{index}"
        seen.add(snap.cid)
        run.snapshots.append(snap)
    _order(run.snapshots)
    return run


def judge(index: int, value: Any, span: tuple[int, int]) -> Snapshot:
    snap = Snapshot(index, f"#{index}", value, span)
    if not isinstance(value, dict):
        snap.problems.append((Check.ROW_INVALID, "error", f"snapshot {index + 1} is a JSON "
                              f"{type(value).__name__}, not an object"))
        return snap
    sid = value.get("id")
    if isinstance(sid, str) and 0 < len(sid) <= limits.MAX_ID_CHARS and "\x00" not in sid:
        snap.cid = sid
    else:
        snap.problems.append((Check.ROW_INVALID, "warning", f"snapshot {index + 1} has no usable id; "
                              f"listed as {snap.cid}"))
    snap.kind = value.get("kind") if value.get("kind") in KINDS else None
    if snap.kind is None:
        snap.problems.append((Check.ROW_INVALID, "error", f"kind {_short(value.get('kind'))} is not "
                              "'node' or 'end': FileStatePersistence cannot load this file"))
    if "state" not in value:
        snap.problems.append((Check.ROW_INVALID, "error", "the snapshot has no state"))
    if snap.kind == "end":
        _judge_end(snap, value)
    elif snap.kind == "node":
        _judge_node(snap, value)
    return snap


def _judge_node(snap: Snapshot, value: Mapping[str, Any]) -> None:
    status = value.get("status", "created")
    if status in STATUSES:
        snap.status = status
    else:
        snap.problems.append((Check.ROW_INVALID, "error", f"status {_short(status)} is not one pydantic-graph "
                              f"knows ({', '.join(STATUSES)}): FileStatePersistence cannot load this file"))
    node = value.get("node")
    node_id = node.get("node_id") if isinstance(node, dict) else None
    if isinstance(node_id, str) and node_id and len(node_id) <= limits.MAX_ID_CHARS:
        snap.node_id = node_id
    else:
        snap.problems.append((Check.ROW_INVALID, "error", "the node has no node_id: pydantic-graph cannot "
                              "tell which node class it is"))
    snap.when = _time(snap, value.get("start_ts"), "start_ts")
    duration = value.get("duration")
    if isinstance(duration, (int, float)) and not isinstance(duration, bool) and 0 <= duration < 1e12:
        snap.duration = float(duration)


def _judge_end(snap: Snapshot, value: Mapping[str, Any]) -> None:
    snap.node_id = "end"
    if not isinstance(value.get("result"), dict):
        snap.problems.append((Check.ROW_INVALID, "error", "the end snapshot has no result"))
    snap.when = _time(snap, value.get("ts"), "ts")


def _time(snap: Snapshot, raw: Any, name: str) -> datetime | None:
    if raw is None:
        return None
    if type(raw) is str and len(raw) < 64:
        try:
            parsed = datetime.fromisoformat(raw)  # Python 3.11 reads the "Z" pydantic writes
        except ValueError:
            pass
        else:
            return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)
    snap.problems.append((Check.ROW_INVALID, "warning", f"{name} {_short(raw)} is not an ISO 8601 time"))
    return None


def _order(snaps: list[Snapshot]) -> None:
    """Snapshots are appended in execution order: a time earlier than one before it is a finding."""
    latest: Snapshot | None = None
    for snap in snaps:
        if snap.when is None:
            continue
        if latest is not None and latest.when is not None and snap.when < latest.when:
            snap.problems.append((Check.OUT_OF_ORDER, "warning", f"{snap.kind} snapshot time "
                                  f"{snap.when.isoformat()} is earlier than snapshot {latest.cid}'s, which "
                                  "comes before it in the file"))
        else:
            latest = snap


def _short(value: Any, width: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= width else text[: width - 1] + "…"


# ---- what a run resumes from -------------------------------------------------------------


def resume_index(snaps: list[Snapshot]) -> int | None:
    """The snapshot ``load_next`` hands out: the first node snapshot with status ``created``."""
    return next((s.index for s in snaps if s.kind == "node" and s.status == "created"), None)


def head_index(snaps: list[Snapshot]) -> int | None:
    """What the run resumes from: the ``load_next`` snapshot, else the last one."""
    found = resume_index(snaps)
    return found if found is not None else (snaps[-1].index if snaps else None)


NODE_KEY, END_KEY = "__node__", "__end__"


def state_of(snap: Snapshot) -> dict[str, Any]:
    """The checkpoint's state: the graph state's fields (before the node ran), plus the node to run
    under ``__node__`` (an end snapshot: the run's result under ``__end__``). A state that is not
    an object (pydantic-graph allows any type) is kept whole under ``state``. The ``__`` keys are
    the framework's, so the node changing at every step is not taken for the state's schema
    changing (lastgood.integrity.content)."""
    value = snap.value
    state = value.get("state")
    extra = {END_KEY: value.get("result")} if snap.kind == "end" else {NODE_KEY: value.get("node")}
    if isinstance(state, dict) and NODE_KEY not in state and END_KEY not in state:
        return {**state, **extra}
    return {"state": state, **extra}


# ---- listing ------------------------------------------------------------------------------


def created_micros(run: RunFile, restored: Mapping[str, datetime], fallback: datetime) -> list[int]:
    """When each snapshot was made (see the package docstring)."""
    out: list[int] = []
    previous: Snapshot | None = None
    for snap in run.snapshots:
        at = restored.get(snap.cid)
        if at is None and snap.kind == "end":
            at = snap.when
        if at is None and previous is not None and previous.when is not None and previous.duration is not None:
            at = previous.when + timedelta(seconds=previous.duration)
        at = at or snap.when
        micros = (at - EPOCH) // ONE_MICRO if at is not None else (out[-1] if out else (fallback - EPOCH) // ONE_MICRO)
        out.append(max(micros, 0))
        previous = snap
    return out


def findings_of(run: RunFile) -> list[Finding]:
    found = [Finding(c, sev, msg, run.run_id, "", s.cid)  # type: ignore[arg-type]
             for s in run.snapshots for c, sev, msg in s.problems]
    if run.damage:
        listed = f"; the {len(run.snapshots)} snapshots before it are listed" if run.snapshots else ""
        found.append(Finding(Check.UNDECODABLE, "error", f"run file {run.name}: {run.damage}: "
                             f"FileStatePersistence cannot load it{listed}", run.run_id))
    return found


def status_of(snap: Snapshot) -> tuple[str, str | None]:
    reason = snap.broken
    return (Status.CORRUPT.value, reason) if reason else (Status.OK.value, None)


def metadata_of(snap: Snapshot, note: Mapping[str, Any] | None) -> dict[str, Any]:
    meta: dict[str, Any] = {"kind": snap.kind, "node_id": snap.node_id}
    if snap.kind == "node":
        meta.update(status=snap.status, duration=snap.duration, start_ts=_start_text(snap))
    if note:
        meta["lastgood"] = dict(note)
    return meta


def _start_text(snap: Snapshot) -> str | None:
    """``start_ts`` as the file has it (once it parsed as a time)."""
    return snap.value.get("start_ts") if snap.when is not None and snap.kind == "node" else None


_QUOTED: dict[str, str] = {}


def metadata_text(snap: Snapshot, note: Mapping[str, Any] | None) -> str:
    """:func:`metadata_of` as JSON (sorted keys); a plain node snapshot's without ``json.dumps``
    (its values are a known status, a finite float, a parsed time and a quoted node id)."""
    if note or snap.kind != "node" or snap.node_id is None or snap.status is None:
        return json.dumps(metadata_of(snap, note), sort_keys=True)
    node = _QUOTED.get(snap.node_id)
    if node is None:
        node = _QUOTED[snap.node_id] = json.dumps(snap.node_id)
    start = _start_text(snap)
    return (f'{{"duration": {"null" if snap.duration is None else repr(snap.duration)}, "kind": "node", '
            f'"node_id": {node}, "start_ts": {"null" if start is None else json.dumps(start)}, '
            f'"status": "{snap.status}"}}')


def events_of(run: RunFile, micros: list[int], restored: Mapping[str, Mapping[str, Any]]) -> list[EventRecord]:
    """Errors, the resume point or where the run stopped, and Lastgood's restores."""
    events = []
    snaps = run.snapshots

    def event(i: int, kind: str, message: str) -> None:
        events.append(EventRecord(run_id=run.run_id, kind=kind, checkpoint_id=snaps[i].cid,
                                  created_at=EPOCH + timedelta(microseconds=micros[i]), message=message))
    for snap in snaps:
        if snap.status == "error":
            took = f" after {snap.duration:.3g} s" if snap.duration is not None else ""
            event(snap.index, "error", f"{snap.node_id} raised{took}; pydantic-graph keeps no exception or "
                  "message, and the state changes it made are lost")
        note = restored.get(snap.cid)
        if note is not None:
            source = f" the state of {note.get('restored_from')}" if note.get("restored_from") else ""
            event(snap.index, "rewind", f"Lastgood {note.get('action')}:{source} (action {note.get('action_id')})")
    resume = resume_index(snaps)
    last = snaps[-1] if snaps else None
    if resume is not None:
        event(resume, "interrupt", f"resumable at {snaps[resume].node_id}: iter_from_persistence starts here")
    elif last is not None and last.kind == "node" and last.status == "pending":
        event(last.index, "interrupt", f"stopped at {last.node_id}: claimed by load_next (pending) but never "
              "run; iter_from_persistence resumes only a created snapshot")
    elif last is not None and last.kind == "node" and last.status in ("running", "success"):
        how = "was running when the run stopped" if last.status == "running" else \
            "succeeded but no next snapshot or end was written"
        event(last.index, "ended_early", f"{last.node_id} {how}")
    return events
