"""Shaping a decoded state for display: conversations, channel order, truncation (no streamlit)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from lastgood.cli.output import dumps

MAX_LIST_ITEMS = 200


def order_channels(state: dict[str, Any]) -> dict[str, Any]:
    """User channels first; internal ones (``__x__``, ``_x``, ``branch:…``) last."""
    def internal(key: Any) -> bool:
        return isinstance(key, str) and (key.startswith("_") or ":" in key)
    return {k: state[k] for k in sorted(state, key=lambda k: (internal(k), str(k)))}


ROLES = {"human": "user", "user": "user", "ai": "assistant", "assistant": "assistant",
         "system": "system", "tool": "tool", "function": "tool"}


Normalize = Callable[[Any], "dict[str, Any] | None"]


def find_conversation(state: Any, depth: int = 3, normalize: Normalize | None = None
                      ) -> tuple[list[str], list[dict[str, Any]]]:
    """(path, messages) of the first ``messages`` list of chat messages within ``depth`` levels.
    ``normalize``: the store's reader's own message shape made plain (capability ``messages``:
    Responses-API items, ADK events…); without it, ``{role, content}`` dicts are messages."""
    if not isinstance(state, dict) or depth == 0:
        return [], []
    found = conversation(state.get("messages"), normalize)
    if found:
        return ["messages"], found
    for key, value in state.items():
        path, found = find_conversation(value, depth - 1, normalize)
        if found:
            return [key, *path], found
    return [], []


def conversation(messages: Any, normalize: Normalize | None = None) -> list[dict[str, Any]]:
    """[{role, content, tool_calls}] when ``messages`` is a list of chat messages, else []."""
    if not isinstance(messages, list) or not messages:
        return []
    out = []
    for m in messages:
        plain = normalize(m) if normalize is not None and isinstance(m, dict) else None
        m = plain if plain is not None else m
        if not isinstance(m, dict) or "content" not in m:
            return []
        role = m.get("role") or m.get("type") or "assistant"
        out.append({"role": ROLES.get(str(role).lower(), str(role)), "content": m["content"],
                    "tool_calls": m.get("tool_calls") or []})
    return out


def message_normalizer(reader: Any) -> Normalize | None:
    """The reader's ``normalize_message`` when it offers the capability, else None."""
    from lastgood.readers.base import NormalizesMessages, capability

    messages = capability(reader, NormalizesMessages)
    return messages.normalize_message if messages is not None else None


def get_path(state: Any, path: list[str]) -> Any:
    for key in path:
        state = state[key]
    return state


def without_path(state: dict[str, Any], path: list[str]) -> dict[str, Any]:
    """A copy of ``state`` without the value at ``path`` (copies only along the path)."""
    head, *rest = path
    copy = dict(state)
    if rest:
        copy[head] = without_path(state[head], rest)
    else:
        copy.pop(head, None)
    return copy


def tool_call(call: Any) -> str:
    """``name(args)`` for an OpenAI/LangChain-style tool call."""
    if not isinstance(call, dict):
        return dumps(call, indent=None)
    function = call.get("function") if isinstance(call.get("function"), dict) else {}
    name = call.get("name") or function.get("name") or "tool"
    args = call.get("args", call.get("arguments", function.get("arguments", {})))
    return f"→ {name}({args if isinstance(args, str) else dumps(truncate(args), indent=None)})"


def truncate(value: Any) -> Any:
    """Long lists cut to MAX_LIST_ITEMS so a huge state never floods the browser."""
    if isinstance(value, list):
        head = [truncate(v) for v in value[:MAX_LIST_ITEMS]]
        more = len(value) - MAX_LIST_ITEMS
        return head + ([f"… {more} more item(s)"] if more > 0 else [])
    if isinstance(value, dict):
        return {k: truncate(v) for k, v in value.items()}
    return value
