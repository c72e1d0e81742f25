"""A diff as people read it (no streamlit): the kinds of change in words, changed messages as a
conversation with the unchanged ones between them collapsed, and both states as one tree whose
rows say what changed.

Input is ``lastgood.investigate.diff``'s dict shape (``{op, path, old, new, delta?, from?}``, paths as
JSON Pointers: removals and a move's ``from`` in A's list positions, everything else in B's).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from lastgood.investigate.diff import message_line, preview
from lastgood.investigate.stateview import conversation

# op -> (what the page calls it, what it means)
CHANGE_KINDS: dict[str, tuple[str, str]] = {
    "add": ("added", "only B has it"),
    "remove": ("removed", "only A has it"),
    "change": ("changed", "both have it, with another value (numbers show the difference B − A)"),
    "type_change": ("type changed", "both have it, as another kind of value (a number became text, a list a dict…)"),
    "move": ("moved", "the same item, unchanged, at another position in its list: from its index in A to its "
                      "index in B (items are matched by id or content, so an insertion above is not a move)"),
}
KIND_COLORS = {"add": "green", "remove": "red", "change": "orange", "type_change": "violet", "move": "blue",
               "edit": "orange"}
MAX_TREE_DEPTH = 6
INDENT = "\u2003\u2003"  # em spaces: a table cell keeps them (it trims plain ones)


def kinds_legend() -> str:
    """One line per kind of change, for a help text."""
    return "\n".join(f"- **{label}**: {meaning}" for label, meaning in CHANGE_KINDS.values())


def kind_label(op: str) -> str:
    return CHANGE_KINDS.get(op, (op, ""))[0]


def change_rows(changes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Table rows: the kind in words, the path, A's and B's values (short), the difference of numbers
    (empty when there is none: never ``None``), and where a moved item came from."""
    rows = []
    for c in changes:
        delta = c.get("delta")
        rows.append({"change": kind_label(c["op"]), "path": c["path"] or "/",
                     "A": "" if c["op"] == "add" else preview(c.get("old")),
                     "B": "" if c["op"] == "remove" else preview(c.get("new")),
                     "difference": "" if delta is None else (f"+{delta}" if delta >= 0 else str(delta)),
                     "moved from": c.get("from") or ""})
    return rows


# ---- the conversation -----------------------------------------------------------------------

Normalize = Callable[[Any], "dict[str, Any] | None"]


@dataclass
class Message:
    """One message of the conversation as the page draws it."""

    kind: str  # add | remove | edit | move | same
    index: int  # in B (in A for a removed one)
    role: str
    text: str
    tool_calls: list[Any] = field(default_factory=list)
    fields: list[str] = field(default_factory=list)  # what an edit changed
    was: str | None = None  # an edited message's text in A
    moved_from: str | None = None


@dataclass
class Unchanged:
    """Messages both states hold as they are, between two changes (drawn collapsed)."""

    first: int
    last: int
    messages: list[Message]


def plain_message(raw: Any, normalize: Normalize | None) -> tuple[str, str, list[Any]]:
    """(role, text, tool calls) of a stored message, through the reader's own normalizer when it has
    one (OpenAI items, ADK events, pydantic-ai parts…)."""
    found = conversation([raw], normalize) if isinstance(raw, dict) else []
    if found:
        m = found[0]
        text = m["content"] if isinstance(m["content"], str) else preview(m["content"])
        return str(m["role"]), text, list(m["tool_calls"] or [])
    line = message_line(raw)
    return ("assistant", line, []) if line else ("assistant", preview(raw), [])


def conversation_diff(messages_a: list[Any], messages_b: list[Any], changes: list[dict[str, Any]],
                      prefix: str, normalize: Normalize | None = None) -> list[Message | Unchanged]:
    """B's conversation in order with A's removed messages where they were: every changed message,
    and the unchanged ones between changes grouped (``prefix``: the list's JSON Pointer)."""
    marks: dict[int, dict[str, Any]] = {}
    removed: list[tuple[int, dict[str, Any]]] = []
    for c in changes:
        if not c["path"].startswith(prefix + "/"):
            continue
        index, _, rest = c["path"][len(prefix) + 1:].partition("/")
        if not index.isdigit():
            continue
        if c["op"] == "remove" and not rest:
            removed.append((int(index), c))
        elif rest:
            mark = marks.setdefault(int(index), {"kind": "edit", "fields": [], "was": None})
            if mark["kind"] == "edit":
                mark["fields"].append(rest)
                if rest in ("content", "text") or rest.startswith("content/"):
                    mark["was"] = preview(c.get("old"))
        else:
            marks[int(index)] = {"kind": c["op"], "fields": [], "from": c.get("from")}
    return _sequence(messages_a, messages_b, marks, sorted(removed, key=lambda r: r[0]), normalize)


def _sequence(messages_a: list[Any], messages_b: list[Any], marks: dict[int, dict[str, Any]],
              removed: list[tuple[int, dict[str, Any]]], normalize: Normalize | None) -> list[Message | Unchanged]:
    """B's messages in order; A's removed ones where A had them: B's unchanged and edited messages
    pair with A's in order (skipping what A lost or moved), so a removal is drawn between the two
    messages it sat between."""
    out: list[Message | Unchanged] = []
    same: list[Message] = []

    def flush() -> None:
        if same:
            out.append(Unchanged(same[0].index, same[-1].index, list(same)))
            same.clear()

    gone = {j for j, _ in removed}
    moved_out = {int(m["from"].rsplit("/", 1)[-1]) for m in marks.values()
                 if m["kind"] == "move" and isinstance(m.get("from"), str) and m["from"].rsplit("/", 1)[-1].isdigit()}
    at_a = 0  # the next message of A that B still holds in place

    def drop_until_kept() -> None:
        nonlocal at_a
        while at_a in gone or at_a in moved_out:
            if at_a in gone:
                flush()
                out.append(_message("remove", at_a, messages_a[at_a] if at_a < len(messages_a) else None, normalize))
            at_a += 1

    for i, raw in enumerate(messages_b):
        mark = marks.get(i)
        if mark is None or mark["kind"] == "edit":  # a message A had at ``at_a``
            drop_until_kept()
            at_a += 1
        if mark is None:
            same.append(_message("same", i, raw, normalize))
            continue
        flush()
        message = _message(mark["kind"], i, raw, normalize)
        message.fields = list(dict.fromkeys(mark.get("fields") or []))
        message.was, message.moved_from = mark.get("was"), mark.get("from")
        out.append(message)
    flush()
    for j in sorted(j for j in gone if j >= at_a):
        out.append(_message("remove", j, messages_a[j] if j < len(messages_a) else None, normalize))
    return out


def _message(kind: str, index: int, raw: Any, normalize: Normalize | None) -> Message:
    role, text, calls = plain_message(raw, normalize)
    return Message(kind, index, role, text, calls)


# ---- both states as one tree -----------------------------------------------------------------


def other_change_groups(changes: list[dict[str, Any]],
                        messages_path: list[str] | None) -> dict[str, list[dict[str, Any]]]:
    """The changes not shown message by message (those under ``messages_path``), grouped by their
    top-level key ("/llm", "(root)"), in the diff's order: the Diff page's and the report's
    "Other changes"."""
    prefix = "/" + "/".join(messages_path) + "/" if messages_path else None
    groups: dict[str, list[dict[str, Any]]] = {}
    for c in changes:
        if prefix and c["path"].startswith(prefix):
            continue
        top = "/" + c["path"].split("/")[1] if c["path"] else "(root)"
        groups.setdefault(top, []).append(c)
    return groups


def tree_rows(state_a: Any, state_b: Any, changes: list[dict[str, Any]], limit: int,
              folded: tuple[str, ...] = ()) -> tuple[list[dict[str, Any]], bool]:
    """Both states as one indented tree: a row per key or list item (containers as ``{…} 3 keys`` /
    ``[…] 12 items``), A's and B's values side by side, and the change at that path — or below it
    (``changes below``); the paths in ``folded`` (the conversation, shown message by message) are not
    opened. Returns the rows (at most ``limit``) and whether more were left out."""
    at = {c["path"]: c for c in changes}
    below = {p[:i] for p in at for i in range(len(p)) if p[i] == "/"}
    rows: list[dict[str, Any]] = []
    stack: list[tuple[str, str, int, Any, Any]] = [("", "/", 0, state_a, state_b)]
    missing = object()
    while stack:
        if len(rows) >= limit:
            return rows, True
        path, name, depth, a, b = stack.pop()
        change = at.get(path)
        kind = kind_label(change["op"]) if change else ("changes below" if path in below else "")
        rows.append({"field": INDENT * max(depth - 1, 0) + ("└ " if depth else "") + name, "A": _cell(a, missing),
                     "B": _cell(b, missing), "change": kind, "path": path or "/"})
        if depth >= MAX_TREE_DEPTH or path in folded:
            continue
        children = _children(a, b, missing)
        for key, child_a, child_b in reversed(children):
            stack.append((f"{path}/{_escape(key)}", str(key), depth + 1, child_a, child_b))
    return rows, False


def _children(a: Any, b: Any, missing: object) -> list[tuple[Any, Any, Any]]:
    if isinstance(a, dict) or isinstance(b, dict):
        da, db = (a if isinstance(a, dict) else {}), (b if isinstance(b, dict) else {})
        keys = list(dict.fromkeys([*db, *da]))
        return [(k, da.get(k, missing), db.get(k, missing)) for k in keys]
    if isinstance(a, list) or isinstance(b, list):
        la, lb = (a if isinstance(a, list) else []), (b if isinstance(b, list) else [])
        return [(i, la[i] if i < len(la) else missing, lb[i] if i < len(lb) else missing)
                for i in range(max(len(la), len(lb)))]
    return []


def _cell(value: Any, missing: object) -> str:
    if value is missing:
        return "—"
    if isinstance(value, dict):
        return f"{{…}} {len(value)} key{'s' if len(value) != 1 else ''}"
    if isinstance(value, list):
        return f"[…] {len(value)} item{'s' if len(value) != 1 else ''}"
    line = message_line(value)
    return line if line is not None else preview(value)


def _escape(key: Any) -> str:
    return str(key).replace("~", "~0").replace("/", "~1")
