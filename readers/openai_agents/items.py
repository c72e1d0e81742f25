"""Responses-API input items as the OpenAI Agents SDK stores them (one JSON object per row).

- the *trigger* of a checkpoint is the item's kind: ``user``, ``assistant``, ``system``,
  ``tool_call`` (``function_call`` and the other ``*_call`` items), ``tool_output``
  (``function_call_output``, ``*_call_output``), ``reasoning``, else the item's own ``type``;
  the same rule is written once in SQL (:data:`TRIGGER_SQL`, for listings) and once in Python;
- a tool that raised still yields a normal ``function_call_output``: its ``output`` is the text of
  the tool's ``failure_error_function``, which by default (and in every variant the SDK ships)
  starts with :data:`ERROR_PREFIX`;
- in a state, ``arguments`` and ``output`` strings holding a JSON object or array are shown parsed
  (:func:`clarify`); :func:`normalize_message` turns any item into the chat-message shape.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

try:  # orjson is optional (several times faster on a 10,000-item session); json is the fallback
    import orjson

    _fast_loads: Callable[[Any], Any] | None = orjson.loads
except ImportError:  # pragma: no cover - depends on the environment
    _fast_loads = None

ERROR_PREFIX = "An error occurred while running the tool"
ROLES = ("user", "assistant", "system", "developer")


def loads(text: str | bytes) -> Any:
    """JSON as the SDK reads it (``json.loads``: NaN and Infinity accepted); ValueError otherwise."""
    if _fast_loads is not None:
        try:
            return _fast_loads(text)
        except ValueError:
            pass  # orjson refuses NaN/Infinity, which json.loads accepts: let json decide
    if isinstance(text, bytes):
        text = text.decode("utf-8")
    return json.loads(text)


def trigger(role: Any, type_: Any) -> str:
    """An item's kind from its ``role`` and ``type`` (see the module docstring)."""
    if role in ("system", "developer"):
        return "system"
    if role in ("user", "assistant"):
        return str(role)
    return trigger_of_type(type_)


def trigger_of_type(type_: Any) -> str:
    """The kind from a type alone (``message_structure.message_type`` is the role or the type)."""
    if not isinstance(type_, str) or not type_:
        return "other"
    if type_ in ("user", "assistant"):
        return type_
    if type_ in ("system", "developer"):
        return "system"
    if type_.endswith("_output"):
        return "tool_output"
    if type_.endswith("_call"):
        return "tool_call"
    return "assistant" if type_ == "message" else type_


def trigger_sql(role: str, type_: str) -> str:
    """:func:`trigger` as a SQL expression over two column expressions."""
    return f"""CASE WHEN {role} IN ('system', 'developer') THEN 'system'
        WHEN {role} IN ('user', 'assistant') THEN {role}
        WHEN {type_} IN ('user', 'assistant') THEN {type_}
        WHEN {type_} IN ('system', 'developer') THEN 'system'
        WHEN {type_} LIKE '%\\_output' ESCAPE '\\' THEN 'tool_output'
        WHEN {type_} LIKE '%\\_call' ESCAPE '\\' THEN 'tool_call'
        WHEN {type_} = 'message' THEN 'assistant'
        WHEN {type_} IS NULL OR {type_} = '' THEN 'other'
        ELSE {type_} END"""


def is_error_output(item: Any) -> bool:
    """A tool output that carries an error (or an item whose status says it failed)."""
    if not isinstance(item, dict):
        return False
    if item.get("status") == "failed":
        return True
    output = item.get("output")
    return isinstance(output, str) and output.startswith(ERROR_PREFIX)


def error_text(item: dict[str, Any]) -> str:
    """The error a failed tool output carries, without the SDK's fixed prefix."""
    output = item.get("output")
    text = output if isinstance(output, str) else f"status {item.get('status')}"
    return text.removeprefix(ERROR_PREFIX).lstrip(". ") or text


# ---- states ---------------------------------------------------------------------------------


def clarify(item: Any) -> Any:
    """``item`` with its ``arguments``/``output`` JSON text parsed when it holds an object or array."""
    if not isinstance(item, dict):
        return item
    changed = None
    for key in ("arguments", "output"):
        value = item.get(key)
        if isinstance(value, str) and value[:1] in ("{", "["):
            try:
                parsed = loads(value)
            except ValueError:
                continue
            if isinstance(parsed, (dict, list)):
                changed = changed or dict(item)
                changed[key] = parsed
    return changed or item


# ---- conversation messages ----------------------------------------------------------------


def text_of(content: Any) -> str:
    """The text of a message's content: a string, or its parts (text, refusal, image, file…)."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return "" if content is None else json.dumps(content, default=str)
    return "\n".join(filter(None, (_part_text(part) for part in content)))


def _part_text(part: Any) -> str:
    if isinstance(part, str):
        return part
    if not isinstance(part, dict):
        return ""
    kind = part.get("type")
    if isinstance(part.get("text"), str):
        return part["text"]
    if kind == "refusal":
        return f"[refusal] {part.get('refusal') or ''}".strip()
    if kind in ("input_image", "output_image", "image"):
        return "[image]"
    if kind in ("input_file", "file"):
        return f"[file {part.get('filename') or part.get('file_id') or ''}]".replace(" ]", "]")
    if kind in ("input_audio", "audio"):
        return "[audio]"
    return f"[{kind}]" if kind else ""


def normalize_message(item: Any) -> dict[str, Any] | None:
    """``{role, content, tool_calls?, name?, tool_call_id?, id?}`` for a Responses-API item."""
    if not isinstance(item, dict):
        return None
    role, kind = item.get("role"), item.get("type")
    if role in ROLES and kind in (None, "message"):
        out: dict[str, Any] = {"role": "system" if role == "developer" else role,
                               "content": text_of(item.get("content"))}
        return _with_id(out, item)
    if not isinstance(kind, str):
        return None
    if kind == "reasoning":
        summary = item.get("summary") or item.get("content")
        return _with_id({"role": "assistant", "content": text_of(summary), "name": "reasoning"}, item)
    if kind.endswith("_output"):
        return _tool_result(item)
    if kind.endswith("_call"):
        return _tool_call(item, kind)
    return None


def _tool_call(item: dict[str, Any], kind: str) -> dict[str, Any]:
    args = item.get("arguments", item.get("action", item.get("input")))
    if isinstance(args, str) and args[:1] in ("{", "["):
        try:
            args = loads(args)
        except ValueError:
            pass
    name = item.get("name") or kind
    call = {"id": item.get("call_id") or item.get("id"), "name": name, "args": args}
    return _with_id({"role": "assistant", "content": "", "tool_calls": [call]}, item)


def _tool_result(item: dict[str, Any]) -> dict[str, Any]:
    output = item.get("output")
    if isinstance(output, str):
        content = output
    elif isinstance(output, list) and all(isinstance(p, dict) and "type" in p for p in output):
        content = text_of(output)  # content parts (text, image, file)
    else:
        content = json.dumps(output, default=str, ensure_ascii=False)
    return {"role": "tool", "content": content, "tool_call_id": item.get("call_id")}


def _with_id(out: dict[str, Any], item: dict[str, Any]) -> dict[str, Any]:
    if isinstance(item.get("id"), str):
        out["id"] = item["id"]
    return out
