"""pydantic-ai messages in a graph state, made plain for the conversation view.

A pydantic-graph state that holds a conversation usually holds pydantic-ai ``ModelMessage``
objects (``list[ModelMessage]`` fields, as in pydantic-graph's own examples), which serialize as
``{"kind": "request" | "response", "parts": [{"part_kind": …}, …], …}``. A request is the user's
prompt, the system prompt, or tool results (``tool-return``/``retry-prompt`` parts: role
``tool``); a response is the model's text (``text`` parts) and its ``tool-call`` parts.
"""

from __future__ import annotations

from typing import Any

REQUEST_ROLES = (("tool-return", "tool"), ("retry-prompt", "tool"), ("user-prompt", "user"),
                 ("system-prompt", "system"))


def normalize_message(value: Any) -> dict[str, Any] | None:
    """``{role, content, tool_calls?, name?, tool_call_id?}`` for a ModelMessage dict, else None."""
    if not isinstance(value, dict) or value.get("kind") not in ("request", "response"):
        return None
    parts = [p for p in value.get("parts") or [] if isinstance(p, dict)] if isinstance(value.get("parts"), list) \
        else None
    if parts is None:
        return None
    if value["kind"] == "response":
        return _response(parts)
    return _request(parts)


def _request(parts: list[dict[str, Any]]) -> dict[str, Any]:
    kinds = {p.get("part_kind") for p in parts}
    role = next((r for kind, r in REQUEST_ROLES if kind in kinds), "user")
    message: dict[str, Any] = {"role": role, "content": _text(parts)}
    tool = next((p for p in parts if p.get("part_kind") in ("tool-return", "retry-prompt")), None)
    if role == "tool" and tool is not None:
        message.update(name=tool.get("tool_name"), tool_call_id=tool.get("tool_call_id"))
    return message


def _response(parts: list[dict[str, Any]]) -> dict[str, Any]:
    calls = [{"id": p.get("tool_call_id"), "name": p.get("tool_name"), "args": p.get("args")}
             for p in parts if p.get("part_kind") == "tool-call"]
    message: dict[str, Any] = {"role": "assistant", "content": _text([p for p in parts if p.get("part_kind") == "text"])}
    if calls:
        message["tool_calls"] = calls
    return message


def _text(parts: list[dict[str, Any]]) -> Any:
    """The parts' content: one part's as it is, several joined as text."""
    contents = [p.get("content") for p in parts if p.get("content") is not None]
    if len(contents) == 1:
        return contents[0]
    return "\n".join(c if isinstance(c, str) else str(c) for c in contents)
