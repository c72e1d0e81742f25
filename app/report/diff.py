"""A diff as the Diff page shows it, for a report: the two checkpoints, the counts, the
conversation's changed messages in B's order (added, removed, edited, moved — aligned on identity
by lastgood.investigate.diff), then every other change grouped by its top-level key.

The diff (lastgood.investigate.history.diff_records) and the states
(lastgood.investigate.show.load_state_safely) are redacted where they are made; here they are
only escaped. Long lists are cut (:data:`MAX_MESSAGES`, :data:`MAX_CHANGES`) with a note: the
whole diff is ``lastgood diff STORE A B --format json``. More than ``PAGE_ROWS`` changed messages
come in closed pages of that many (lastgood.report.html.paged), each summarised by the messages it
spans and its changes: every one is in the file, and the file opens fast.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lastgood.display.changes import other_change_groups
from lastgood.investigate.diff import preview
from lastgood.investigate.stateview import tool_call
from lastgood.report.html import PAGE_ROWS, cards, esc, note, paged, shown_checkpoint, shown_id, table

MAX_MESSAGES = 10_000
MESSAGE_CHARS = 200
MAX_CHANGES = 5_000
MARKS = {"add": "added", "remove": "removed", "edit": "edited", "move": "moved"}


@dataclass(frozen=True)
class DiffView:
    """One diff with what the section shows around it (all redacted)."""

    result: dict[str, Any]  # DiffResult.to_dict(label_a, label_b)
    state_b: Any
    messages_path: list[str]
    errors: tuple[str | None, str | None] = (None, None)


def message_changes(view: DiffView) -> list[dict[str, Any]]:
    """One row per changed chat message: {mark, index, message, fields} in B's order (as the Diff page)."""
    if not view.messages_path:
        return []
    prefix = "/" + "/".join(view.messages_path) + "/"
    edits: dict[int, list[str]] = {}
    rows: list[dict[str, Any]] = []
    for c in view.result["changes"]:
        if not c["path"].startswith(prefix):
            continue
        index, _, rest = c["path"][len(prefix):].partition("/")
        if not index.isdigit():
            continue
        if rest:
            edits.setdefault(int(index), []).append(rest)
        elif c["op"] in ("add", "remove", "move"):
            value = c["new"] if c["op"] == "add" else c["old"]
            if c["op"] == "move":
                value = _message_at(view.state_b, view.messages_path, int(index))
            rows.append({"mark": c["op"], "index": int(index), "message": value,
                         "fields": [f"from {c['from']}"] if c["op"] == "move" else []})
    for index, fields in edits.items():
        rows.append({"mark": "edit", "index": index, "fields": list(dict.fromkeys(fields)),
                     "message": _message_at(view.state_b, view.messages_path, index)})
    return sorted(rows, key=lambda r: (r["index"], r["mark"] != "remove"))


def _message_at(state: Any, path: list[str], index: int) -> Any:
    try:
        for key in path:
            state = state[key]
        return state[index]
    except (KeyError, IndexError, TypeError):
        return None


def diff_section(view: DiffView) -> str:
    a, b = view.result["a"], view.result["b"]
    s = view.result["summary"]
    parts = [table(["", "run", "checkpoint", "step", "saved (UTC)", "store"],
                   [[esc(side), shown_id(x.get("run_id")), f'<span class="id">{shown_checkpoint(x.get("run_id"), x.get("namespace"), x.get("checkpoint_id"))}</span>',
                     esc(x.get("step")), esc(x.get("created_at") or "-"), esc(x.get("store") or "-")]
                    for side, x in (("A", a), ("B", b))], scroll=False),
             cards([("added", f"{s.get('added', 0):,}"), ("removed", f"{s.get('removed', 0):,}"),
                    ("changed", f"{s.get('changed', 0):,}"), ("moved", f"{s.get('moved', 0):,}")])]
    parts += [note(f"The state of {side} cannot be shown: {esc(error)}", "bad")
              for side, error in zip("AB", view.errors) if error]
    if not view.result["changes"]:
        parts.append(note("No changes: A and B hold the same state.", "good"))
        return "".join(parts)
    parts.append(_conversation(view))
    parts.append(_other_changes(view))
    return "".join(parts)


def _conversation(view: DiffView) -> str:
    if not view.messages_path:
        return ""
    rows = message_changes(view)
    where = "/" + "/".join(view.messages_path)
    title = f"<h3>Conversation <code>{esc(where)}</code> · {len(rows):,} message(s) changed</h3>"
    if not rows:
        return title + note("No message was added, removed, edited or moved.")
    shown = rows[:MAX_MESSAGES]
    more = len(rows) - len(shown)
    tail = note(f"{more:,} more changed messages: `lastgood diff STORE A B --format json` has them all.") if more else ""
    return title + _message_table(shown) + tail


def _message_table(rows: list[dict[str, Any]]) -> str:
    """The changed messages' table; beyond PAGE_ROWS, in closed pages summarised by what they hold."""
    fields = any(r["fields"] for r in rows)
    head = "".join(f"<th>{h}</th>" for h in ("change", "#", "role", "message", *(("fields",) if fields else ())))
    cols = '<col style="width:84px"><col style="width:70px"><col style="width:96px"><col>' \
        + ('<col style="width:180px">' if fields else "")
    opening = f'<table class="fixed"><colgroup>{cols}</colgroup><thead><tr>{head}</tr></thead><tbody>'
    body = _message_rows(rows, fields)
    if len(body) <= PAGE_ROWS:
        return f'<div class="scroll">{opening}{"".join(body)}</tbody></table></div>'
    return note(f"{len(body):,} changed messages in pages of {PAGE_ROWS:,}: open a page to see its messages (the "
                "browser's find opens the page holding a match).") \
        + paged(opening, body, lambda first, last: _page_summary(rows[first:last]))


def _message_rows(rows: list[dict[str, Any]], fields: bool) -> list[str]:
    """One ``<tr>`` per changed message: its mark, index, role, text (and changed fields)."""
    roles: dict[str, str] = {}
    return [f'<tr><td class="mark m-{MARKS[r["mark"]]}">{MARKS[r["mark"]]}</td><td class="num">{r["index"]}</td>'
            f'<td>{roles.get(role := _role(r["message"])) or roles.setdefault(role, esc(role))}</td>'
            f'<td class="text">{esc(_message_text(r["message"]))}</td>'
            + (f'<td>{esc(", ".join(r["fields"][:10]))}</td>' if fields else "") + "</tr>"
            for r in rows]


def _page_summary(rows: list[dict[str, Any]]) -> str:
    """A page's summary: the messages it spans in B's order and its changes by kind."""
    counts: dict[str, int] = {}
    for r in rows:
        counts[MARKS[r["mark"]]] = counts.get(MARKS[r["mark"]], 0) + 1
    kinds = ", ".join(f"{n:,} {mark}" for mark, n in counts.items())
    return f"messages #{rows[0]['index']}–#{rows[-1]['index']} · {kinds}"


def _role(message: Any) -> str:
    if not isinstance(message, dict):
        return "-"
    return str(message.get("role") or message.get("type") or "message")


def _message_text(message: Any) -> str:
    """The message's text (content blocks joined; tool calls after it), cut to MESSAGE_CHARS."""
    if not isinstance(message, dict):
        return _cut(preview(message))
    content = message.get("content")
    if isinstance(content, list):
        content = " ".join(str(p.get("text", "")) if isinstance(p, dict) else str(p) for p in content)
    text = str(content if content is not None else "")
    calls = message.get("tool_calls")
    if isinstance(calls, list) and calls:
        text = (text + " " if text else "") + " ".join(tool_call(c) for c in calls[:5])
    return _cut(text)


def _cut(text: str) -> str:
    return text if len(text) <= MESSAGE_CHARS else text[:MESSAGE_CHARS - 1] + "…"


def _other_changes(view: DiffView) -> str:
    groups = other_change_groups(view.result["changes"], view.messages_path)  # messages: shown above
    if not groups:
        return ""
    out, budget = ["<h3>Other changes</h3>"], MAX_CHANGES
    for top, changes in sorted(groups.items()):
        shown = changes[:max(budget, 0)]
        budget -= len(shown)
        rows = [[esc(c["op"]), f"<code>{esc(c['path'] or '/')}</code>", esc(preview(c.get("old"))),
                 esc(preview(c.get("new"))), esc(c.get("delta") if c.get("delta") is not None else "")]
                for c in shown]
        more = len(changes) - len(shown)
        summary = f"<code>{esc(top)}</code> · {len(changes):,} change(s)"
        body = table(["op", "path", "old", "new", "delta"], rows, numeric=(4,), text=(2, 3),
                     label="changes") if rows else ""
        tail = note(f"{more:,} more: `lastgood diff STORE A B --format json` has them all.") if more else ""
        out.append(f"<details{' open' if len(groups) <= 3 else ''}><summary>{summary}</summary>{body}{tail}</details>")
    return "".join(out)
