"""ADK conversation entries as Lastgood's plain messages (the MESSAGES capability).

An entry is ``{author, content: {role, parts: [...]}, error_code?, error_message?}`` (what
:mod:`lastgood.readers.adk.replay` puts in a state's ``messages``), or a whole stored event
(``Event.model_dump``), which has the same fields. Parts are google.genai ``Part`` dumps:
``text``, ``function_call {id, name, args}``, ``function_response {id, name, response}`` (others —
inline data, code execution… — are shown by their kind).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any


def normalize_message(value: Any) -> dict[str, Any] | None:
    """``{role, content, tool_calls?, name?, tool_call_id?}``, or None when ``value`` is no ADK entry."""
    if not isinstance(value, Mapping) or "author" not in value or not ({"content", "error_code"} & set(value)):
        return None
    content = value.get("content") if isinstance(value.get("content"), Mapping) else {}
    parts = [p for p in content.get("parts") or () if isinstance(p, Mapping)]
    calls = [p["function_call"] for p in parts if isinstance(p.get("function_call"), Mapping)]
    results = [p["function_response"] for p in parts if isinstance(p.get("function_response"), Mapping)]
    texts = [str(p["text"]) for p in parts if isinstance(p.get("text"), str) and not p.get("thought")]
    texts += [f"[{_kind(p)}]" for p in parts if not _known(p)]
    author = value.get("author")
    if results:
        first = results[0]
        body = [r.get("response") for r in results]
        return _clean({"role": "tool", "content": _text(body[0] if len(body) == 1 else body),
                       "name": first.get("name"), "tool_call_id": first.get("id")})
    role = "user" if content.get("role") == "user" or (not content and author == "user") else "assistant"
    text = "\n".join(texts)
    if value.get("error_code"):
        text = f"{text}\n[{value['error_code']}] {value.get('error_message') or ''}".strip()
    message: dict[str, Any] = {"role": role, "content": text}
    if role == "assistant" and isinstance(author, str):
        message["name"] = author
    if calls:
        message["tool_calls"] = [_clean({"id": c.get("id"), "name": c.get("name"), "args": c.get("args")})
                                 for c in calls]
    return message


def _known(part: Mapping[str, Any]) -> bool:
    return any(isinstance(part.get(k), (str, Mapping)) for k in ("text", "function_call", "function_response")) \
        or bool(part.get("thought"))


def _kind(part: Mapping[str, Any]) -> str:
    keys = [k for k, v in part.items() if v is not None]
    return keys[0] if keys else "empty part"


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str, sort_keys=True)


def _clean(message: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in message.items() if v is not None}
