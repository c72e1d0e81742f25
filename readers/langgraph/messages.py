"""Decoded LangChain messages and LangGraph states as Lastgood shows them (split from
lastgood.readers.langgraph.serde, which re-exports these names): a message's role, the
normalized ``{role, content, tool_calls, id, name, tool_call_id}`` form, and a state with
user channels first and its message lists normalized.

``SHARED`` holds, per thread, the memos of ``langgraph_serde.shared_decoding()``: within that
block a decoded message object normalizes to one object, wherever it appears.
"""

from __future__ import annotations

import json
import threading
from typing import Any

DELTA_SNAPSHOT_TYPE = "langgraph.checkpoint.serde.types._DeltaSnapshot"


class _Shared(threading.local):
    ext: dict[Any, Any] | None = None  # (depth, code, payload) -> decoded extension value
    messages: dict[int, Any] | None = None  # id(message) -> (message, its normalized form)


SHARED = _Shared()

# message class name -> role ("" = take it from the message's own role field)
MESSAGE_ROLES: dict[str, str] = {
    "HumanMessage": "human", "AIMessage": "ai", "SystemMessage": "system",
    "ToolMessage": "tool", "FunctionMessage": "function", "ChatMessage": "",
    "RemoveMessage": "remove", "BaseMessage": "",
}
_TYPE_ROLES = {"human": "human", "ai": "ai", "system": "system", "tool": "tool",
               "function": "function", "remove": "remove", "user": "human",
               "assistant": "ai", "developer": "system"}
_LANGCHAIN_PREFIXES = ("langchain.", "langchain_core.", "langchain_community.")


# --- messages and state -------------------------------------------------------


def message_role(value: Any) -> str | None:
    """The role of a decoded LangChain message (tagged or plain dict), else None."""
    if not isinstance(value, dict):
        return None
    type_name = value.get("$type")
    if isinstance(type_name, str):
        role = _TAGGED_ROLES.get(type_name, _UNKNOWN)
        if role is _UNKNOWN:
            role = _tagged_role(type_name)
        return role if role != "" else (_plain_role(value) or str(value.get("role") or "chat"))
    if "content" in value:
        return _plain_role(value)
    return None


_UNKNOWN = object()
_TAGGED_ROLES: dict[str, str | None] = {}  # class path -> role, "" (from the message) or None
_TAGGED_ROLES_MAX = 1024  # class paths come from the data: remember a bounded number


def _tagged_role(type_name: str) -> str | None:
    last = type_name.rsplit(".", 1)[-1].removesuffix("Chunk")
    role = MESSAGE_ROLES[last] if last in MESSAGE_ROLES and type_name.startswith(_LANGCHAIN_PREFIXES) else None
    if len(_TAGGED_ROLES) < _TAGGED_ROLES_MAX:
        _TAGGED_ROLES[type_name] = role
    return role


def _plain_role(value: dict[str, Any]) -> str | None:
    for key in ("type", "role"):
        role = value.get(key)
        if isinstance(role, str) and role.removesuffix("Chunk").lower() in _TYPE_ROLES:
            return _TYPE_ROLES[role.removesuffix("Chunk").lower()]
    return None


def normalize_message(value: Any) -> dict[str, Any] | None:
    """``{"role", "content", "tool_calls", "id", "name", "tool_call_id"}`` or None."""
    role = message_role(value)
    if role is None:
        return None
    return {
        "role": role,
        "content": value.get("content"),
        "tool_calls": _tool_calls(value),
        "id": value.get("id"),
        "name": value.get("name"),
        "tool_call_id": value.get("tool_call_id"),
    }


def _tool_calls(message: dict[str, Any]) -> list[dict[str, Any]]:
    calls = message.get("tool_calls")
    if isinstance(calls, list) and calls:
        return [_tool_call(call) for call in calls if isinstance(call, dict)]
    extra = message.get("additional_kwargs")
    legacy = extra.get("tool_calls") if isinstance(extra, dict) else None
    if isinstance(legacy, list):
        return [_tool_call(call) for call in legacy if isinstance(call, dict)]
    return []


def _tool_call(call: dict[str, Any]) -> dict[str, Any]:
    function = call.get("function")
    if isinstance(function, dict):  # OpenAI format: arguments is JSON text
        args: Any = function.get("arguments")
        try:
            args = json.loads(args) if isinstance(args, str) else args
        except ValueError:
            pass
        return {"name": function.get("name"), "args": args, "id": call.get("id")}
    return {"name": call.get("name"), "args": call.get("args"), "id": call.get("id")}


def is_internal_channel(name: str) -> bool:
    """LangGraph's bookkeeping channels (``__start__``, ``branch:to:x``, ``__pregel_tasks``…)."""
    return name.startswith(("__", "branch:", "start:", "join:"))


def normalize_state(channel_values: dict[str, Any]) -> dict[str, Any]:
    """User channels first, then internal ones; message lists normalized."""
    if not isinstance(channel_values, dict) or is_marker(channel_values):
        return channel_values
    user = {k: normalize_value(v) for k, v in channel_values.items() if not is_internal_channel(str(k))}
    internal = {k: normalize_value(v) for k, v in channel_values.items() if is_internal_channel(str(k))}
    return {**user, **internal}


def is_marker(value: dict[str, Any]) -> bool:
    """A stand-in for a value not decoded (encrypted without a key, not loaded, raw bytes)."""
    return any(key in value for key in ("$encrypted", "$unloaded", "$bytes"))


def _normalized_message(value: dict[str, Any]) -> dict[str, Any] | None:
    """normalize_message, one result per decoded message object within shared_decoding()."""
    memo = SHARED.messages
    if memo is None or "$type" not in value:  # only tagged messages (extension payloads) are shared
        return normalize_message(value)
    hit = memo.get(id(value))
    if hit is not None and hit[0] is value:
        return hit[1]
    message = normalize_message(value)
    memo[id(value)] = (value, message)  # holds value: its id is not reused within the block
    return message


def normalize_value(value: Any, depth: int = 0) -> Any:
    """``value`` with delta snapshots unwrapped and message lists normalized.

    Plain dicts and lists are walked (up to 32 levels) so messages nested in
    an input or a sub-state are normalized too; other tagged objects are kept.
    """
    if depth > 32:
        return value
    if isinstance(value, dict):
        if value.get("$type") == DELTA_SNAPSHOT_TYPE:
            return normalize_value(value.get("value"), depth + 1)
        message = _normalized_message(value)
        if message is not None:
            return message
        if "$type" in value:
            return value
        return {k: normalize_value(v, depth + 1) for k, v in value.items()}
    if isinstance(value, list):
        return [normalize_value(v, depth + 1) for v in value]
    return value
