"""A session's state and conversation at one event, replayed as ADK builds them (dialect-neutral).

State: ADK keeps three scopes. Session-scoped keys (no prefix) live in ``sessions.state`` and each
event's ``actions.state_delta`` changes them (``append_event`` applies every event's delta, a null
value included: ADK cannot delete a key through an event, its rewind writes null for a key to
remove and its own rewind replay treats null as removed). ``app:``/``user:`` keys live, without
the prefix, in ``app_states``/``user_states``: one row per app / per app and user, shared by every
session and never rewound; ``get_session`` merges their *current* values into every state.
``temp:`` keys are never stored.

So the state at event E is:

- session keys: the keys the session was created with (``create_session(state=…)`` writes them
  straight into ``sessions.state``, in no event: known for the keys no event ever wrote, from
  their current value) then every event's delta up to E, in ADK's order; keys whose value is
  null are left out (removed, as ADK's rewind sees them);
- ``app:``/``user:`` keys: the current rows, as ``get_session`` merges them (ADK keeps no history of
  them, and neither its rewind nor a Lastgood restore changes them);

and the conversation at E is the events that are *live* at E: ADK's ``_apply_rewinds`` (a rewind
event drops itself and every event back to the first event of the invocation it names), each as
``{author, content, error_code?, error_message?, branch?}`` — what ADK builds the next prompt from.

:func:`plan_rewind` computes what to append so a session resumes from an earlier event (recovery).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from lastgood.errors import CheckpointNotFound, DecodeError

APP, USER, TEMP = "app:", "user:", "temp:"
SCOPED = (APP, USER, TEMP)
INVALID = object()  # a state_delta that is not an object (replay skips it)
NOT_UTF8_EVENT = ("text in this event's row is not UTF-8 (its id, keys, invocation_id or event_data): ADK cannot "
                  "load this session (its database driver fails reading it)")

try:
    import orjson

    _loads: Any = orjson.loads
except ImportError:  # pragma: no cover - orjson is a dependency
    _loads = json.loads


@dataclass(frozen=True, slots=True)
class Ev:
    """One event as replay needs it."""

    id: str
    invocation_id: str
    delta: Any = None  # dict (non-empty), None (no change) or INVALID
    rewind: str | None = None  # actions.rewind_before_invocation_id
    message: dict[str, Any] | None = None
    valid: bool = True
    delta_kind: str | None = None  # the JSON type of an INVALID delta
    not_utf8: bool = False  # event_data is TEXT that is not UTF-8 (ADK's driver fails to read the session)


@dataclass
class SessionData:
    """What the replay of one session reads: its rows and every event, in ADK's order."""

    state: dict[str, Any]  # sessions.state (session-scoped keys, as stored)
    app_state: dict[str, Any]
    user_state: dict[str, Any]
    delta_keys: set[str]  # every key any event's state_delta of the session names
    events: list[Ev]
    index: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.index = {e.id: i for i, e in enumerate(self.events)}

    @property
    def seed(self) -> dict[str, Any]:
        """The keys the session was created with that no event ever wrote (their current value)."""
        return {k: v for k, v in self.state.items() if not k.startswith(SCOPED) and k not in self.delta_keys}


def json_object_or_empty(text: Any) -> dict[str, Any]:
    """A JSON state column as a dict ({} when NULL, malformed or not an object)."""
    if isinstance(text, (bytes, bytearray)):
        text = bytes(text).decode("utf-8", "replace")
    if isinstance(text, dict):
        return text
    try:
        value = json.loads(text) if isinstance(text, str) else None
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def session_data(key: tuple[str, str, str], rows: Sequence[Sequence[Any]], states: Sequence[Any],
                 not_utf8: Iterable[str] = ()) -> SessionData:
    """One session from a dialect's rows: its events in ADK's order (REPLAY_SQL) and its
    (session, app, user) state columns (STATE_SQL); ``not_utf8``: the ids of events whose
    event_data or invocation id is not UTF-8 text. CheckpointNotFound when it has neither rows nor events."""
    session, app, user = states
    if session is None and not rows:
        raise CheckpointNotFound(f"no ADK session {key[2]!r} (app {key[0]!r}, user {key[1]!r})")
    events = [event_from_row(r) for r in rows]
    bad = set(not_utf8)
    if bad:
        events = [replace(e, not_utf8=True) if e.id in bad else e for e in events]
    keys = {k for e in events if isinstance(e.delta, dict) for k in e.delta}
    return SessionData(json_object_or_empty(session), json_object_or_empty(app), json_object_or_empty(user),
                       keys, events)


def matching_sessions(found: Iterable[Sequence[Any]], run_id: str) -> list[tuple[str, str, str]]:
    """Of the (app, user, session id) keys a dialect's FIND_SQL returned, those whose run id is
    ``run_id``: the session id itself when one matches, else the ``app:user:id`` forms."""
    keys = {tuple(r) for r in found}
    exact = [k for k in keys if k[2] == run_id]
    return sorted(exact if exact else keys)  # type: ignore[arg-type]


def keys_by_run_id(keys: Iterable[Sequence[Any]]) -> dict[str, set[tuple[str, str, str]]]:
    """Each run id these (app, user, session id) keys answer to (the session id, and its
    ``app:user:id`` form) -> the keys: what a dialect's FIND_SQL finds for each, from one read."""
    found: dict[str, set[tuple[str, str, str]]] = {}
    for app, user, session in keys:
        key = (app, user, session)
        found.setdefault(session, set()).add(key)
        found.setdefault(f"{app}:{user}:{session}", set()).add(key)
    return found


def is_session_key(key: str) -> bool:
    return not key.startswith(SCOPED)


# ---- rows -> events ----------------------------------------------------------------------


def event_from_row(row: Sequence[Any]) -> Ev:
    """A replay row ``(id, invocation id, valid, delta JSON | '!type' | None, rewind id, message
    JSON array [author, content, error_code, error_message, branch] | None)`` as an Ev."""
    event_id, invocation_id, valid, delta, rewind, message = row
    kind = None
    if isinstance(delta, str) and delta.startswith("!"):
        parsed, kind = INVALID, delta[1:]
    else:
        parsed = _json(delta)
        if parsed is not None and not isinstance(parsed, dict):
            parsed, kind = INVALID, type(parsed).__name__
    return Ev(event_id, invocation_id or "", INVALID if parsed is INVALID else (parsed or None),
              rewind if isinstance(rewind, str) and rewind else None, message_of(_json(message)),
              valid != 0, kind)


def _json(value: Any) -> Any:
    if value is None or not isinstance(value, (str, bytes)):
        return value
    try:
        return _loads(value)
    except ValueError:
        return None


def message_of(fields: Any) -> dict[str, Any] | None:
    """The conversation entry of an event (None: no content and no error)."""
    if not isinstance(fields, list) or len(fields) != 5:
        return None
    author, content, code, text, branch = fields
    if content is None and code is None:
        return None
    message: dict[str, Any] = {"author": author}
    if content is not None:
        message["content"] = content
    if code is not None:
        message["error_code"] = code
        message["error_message"] = text
    if branch:
        message["branch"] = branch
    return message


# ---- replay -------------------------------------------------------------------------------


def session_state(events: Sequence[Ev], seed: Mapping[str, Any]) -> dict[str, Any]:
    """Session-scoped keys after ``events`` (null values kept, as ``sessions.state`` has them)."""
    state = dict(seed)
    for event in events:
        if isinstance(event.delta, dict):
            for key, value in event.delta.items():
                if is_session_key(key):
                    state[key] = value
    return state


def visible(state: Mapping[str, Any]) -> dict[str, Any]:
    """A state without its null-valued keys (removed, as ADK's rewind sees them)."""
    return {k: v for k, v in state.items() if v is not None}


def merged(session: Mapping[str, Any], app: Mapping[str, Any], user: Mapping[str, Any]) -> dict[str, Any]:
    """The state as ``get_session`` merges it (``app:``/``user:`` keys prefixed), nulls left out."""
    out = visible(session)
    out.update((APP + k, v) for k, v in app.items() if v is not None)
    out.update((USER + k, v) for k, v in user.items() if v is not None)
    return out


def live(rewinds: Sequence[str | None], invocations: Sequence[str]) -> list[int]:
    """Indices of the events that survive rewinds (a port of ADK's ``_apply_rewinds``): walking
    back, a rewind event drops itself and every event back to the first event of the invocation
    it names."""
    first: dict[str, int] = {}
    for i, inv in enumerate(invocations):
        if inv and inv not in first:
            first[inv] = i
    kept: list[int] = []
    i = len(invocations) - 1
    while i >= 0:
        target = rewinds[i]
        if target:
            back = first.get(target)
            if back is not None and back < i:
                i = back
        else:
            kept.append(i)
        i -= 1
    kept.reverse()
    return kept


def check_event(data: SessionData, position: int) -> None:
    """DecodeError when the event at ``position`` does not load or its state does not replay."""
    event = data.events[position]
    if event.not_utf8:
        raise DecodeError(NOT_UTF8_EVENT)
    if not event.valid:
        raise DecodeError("event_data is not a JSON object: ADK cannot load this event")
    if event.delta is INVALID:
        from lastgood.checks import Check

        kind = JSON_KINDS.get(str(event.delta_kind), str(event.delta_kind))
        raise DecodeError(f"actions.state_delta is {'an' if kind[:1] in 'aeiou' else 'a'} {kind}, not an object: "
                          "the session state does not replay at this event", Check.STATE_REPLAY)


# a JSON value's kind as SQLite (json_type), PostgreSQL (jsonb_typeof) or Python (type name) names it -> one word
JSON_KINDS = {"text": "string", "str": "string", "integer": "number", "real": "number", "int": "number",
              "float": "number", "true": "boolean", "false": "boolean", "bool": "boolean", "list": "array"}


def state_at(data: SessionData, position: int) -> dict[str, Any]:
    """``{"state": …, "messages": […]}`` at the event at ``position``."""
    check_event(data, position)
    events = data.events[: position + 1]
    state = merged(session_state(events, data.seed), data.app_state, data.user_state)
    alive = live([e.rewind for e in events], [e.invocation_id for e in events])
    messages = [events[i].message for i in alive if events[i].message is not None]
    return {"state": state, "messages": messages}


# ---- rewinding (recovery) ---------------------------------------------------------------------


@dataclass(frozen=True)
class RewindPlan:
    """What to append so a session resumes from an earlier event: one rewind event (as
    ``Runner.rewind_async`` writes it) naming ``rewind_before``, then copies of ``copies`` (indices of
    the target's own invocation, when the target is not the last event of its invocation) with
    their session-scoped ``copy_deltas``."""

    rewind_before: str
    state_delta: dict[str, Any]
    copies: list[int]
    copy_deltas: list[dict[str, Any]]


def rewind_delta(target: Mapping[str, Any], current: Mapping[str, Any]) -> dict[str, Any]:
    """ADK's ``compute_state_delta_for_rewind`` between the state to go back to and the stored one
    (session keys only): keys that differ get the old value, keys added since get null."""
    delta = {k: v for k, v in target.items() if k not in current or current[k] != v}
    delta.update((k, None) for k in current if is_session_key(k) and k not in target)
    return delta


def plan_rewind(data: SessionData, position: int) -> RewindPlan:
    """Rewind events that make the live conversation and the session state those at ``position``.

    The target is the last event of its invocation and the next event starts an invocation:
    rewind before that invocation, as ADK's rewind does. Otherwise ADK cannot cut an invocation
    in two: rewind before the target's own invocation, then append copies of its live events up
    to the target. Raises ValueError when no such rewind gives the target's conversation back."""
    events = data.events
    rewinds, invocations = [e.rewind for e in events], [e.invocation_id for e in events]
    first = {}
    for i, inv in enumerate(invocations):
        first.setdefault(inv, i)
    alive = live(rewinds[: position + 1], invocations[: position + 1])
    after = position + 1
    if after < len(events) and first.get(invocations[after]) == after:
        before, copies, keep, start = invocations[after], [], alive, after
    else:
        start = first[invocations[position]]
        before, copies = invocations[position], [i for i in alive if i >= start]
        keep = [i for i in alive if i < start]
    _check_live(rewinds, invocations, before, keep, len(copies))
    seed = data.seed
    delta = rewind_delta(visible(session_state(events[:start], seed)), data.state)
    deltas = [_session_part(events[i].delta) for i in copies]
    _fix_up(delta, deltas, data.state, visible(session_state(events[: position + 1], seed)))
    return RewindPlan(before, delta, copies, deltas)


def _check_live(rewinds: list[str | None], invocations: list[str], before: str, keep: list[int],
                copies: int) -> None:
    """The live events after appending the rewind and the copies must be ``keep`` + the copies."""
    n = len(invocations)
    new_rewinds = [*rewinds, before, *[None] * copies]
    new_invocations = [*invocations, "\x00rewind", *["\x00copies"] * copies]
    expected = [*keep, *range(n + 1, n + 1 + copies)]
    if live(new_rewinds, new_invocations) != expected:
        raise ValueError("no ADK rewind gives this event's conversation back (its invocation is "
                         "interleaved with others)")


def _session_part(delta: Any) -> dict[str, Any]:
    return {k: v for k, v in delta.items() if is_session_key(k)} if isinstance(delta, dict) else {}


def _fix_up(delta: dict[str, Any], deltas: list[dict[str, Any]], current: Mapping[str, Any],
            target: Mapping[str, Any]) -> None:
    """Make the state after the rewind and the copies equal ``target`` (an event of the target's
    invocation that was rewound away may have changed it): the difference goes in the last delta."""
    state = dict(current)
    for d in (delta, *deltas):
        state.update(d)
    rest = rewind_delta(target, state)
    rest = {k: v for k, v in rest.items() if not (v is None and state.get(k) is None)}
    if rest:
        (deltas[-1] if deltas else delta).update(rest)
