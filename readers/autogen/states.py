"""One saved AutoGen AgentChat state (``save_state()``): its conversation, lineage keys, events.

The conversation of a checkpoint is, for a team (``TeamState``), the group chat manager's
``message_thread`` — every message and event of every run, with ids, sources and times (the
clearest history: the participants' ``llm_context`` holds the same turns as each agent's model
saw them, without ids or times); for an agent (``AssistantAgentState``, ``SocietyOfMindAgentState``)
its ``llm_context.messages``. In a state the conversation is moved to the top-level key
``"messages"`` (the rest of the saved JSON is kept as it is), tool ``arguments`` and JSON results
shown parsed.

Nothing in a state names the state it continues: lineage is read from the content — a state
continues the latest earlier one whose conversation is a prefix of its own (thread messages by
id, LLM messages by value). A *half turn* (the README's failed run: the task is the last message,
no agent replied, because the run raised) is detected from that last message.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from lastgood.checks import Check

CHAT_TYPES = ("TextMessage", "MultiModalMessage", "StopMessage", "HandoffMessage", "ToolCallSummaryMessage",
              "StructuredMessage")
MANAGER_SUFFIXES = ("ManagerState", "OrchestratorState")
MESSAGE_LIMIT = 500


@dataclass
class Parsed:
    """What one state file holds."""

    value: dict[str, Any] | None = None
    problem: tuple[Check, str] | None = None
    messages: list[Any] = field(default_factory=list)
    source: str | None = None  # "message_thread" (a team's manager) or "llm_context"
    manager: str | None = None
    participants: list[str] = field(default_factory=list)

    @property
    def kind(self) -> str | None:
        return str(self.value.get("type")) if self.value else None

    @property
    def keys(self) -> tuple[str, ...]:
        return tuple(message_key(m) for m in self.messages)

    def newest_time(self) -> datetime | None:
        times = [t for t in (message_time(m) for m in self.messages) if t is not None]
        return max(times) if times else None


def parse_state(data: bytes) -> Parsed:
    """A state file's bytes, judged: unreadable JSON and other shapes become ``problem``."""
    try:
        value = json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        return Parsed(problem=(Check.UNDECODABLE, f"not valid JSON ({str(exc).splitlines()[0][:200]}): "
                                                  "a truncated or damaged save; AutoGen cannot load it"))
    if not (isinstance(value, dict) and isinstance(value.get("type"), str) and "version" in value):
        return Parsed(problem=(Check.ROW_INVALID, "valid JSON but not a saved AutoGen state "
                                                  '(no {"type": "…State", "version": …} object)'))
    parsed = Parsed(value=value)
    if value["type"] == "TeamState":
        _team(parsed, value)
    else:
        context = value.get("llm_context")
        messages = context.get("messages") if isinstance(context, dict) else None
        parsed.messages, parsed.source = (messages, "llm_context") if isinstance(messages, list) else ([], None)
    return parsed


def _team(parsed: Parsed, value: dict[str, Any]) -> None:
    agents = value.get("agent_states")
    if not isinstance(agents, dict):
        parsed.problem = (Check.ROW_INVALID, "TeamState without agent_states: AutoGen cannot load it")
        return
    managers = [k for k, v in agents.items() if isinstance(v, dict) and str(v.get("type", "")).endswith(MANAGER_SUFFIXES)]
    parsed.participants = [k for k in agents if k not in managers]
    if len(managers) != 1:
        parsed.problem = (Check.ROW_INVALID, f"TeamState with {len(managers)} group chat manager states "
                                             "(one expected)")
        return
    parsed.manager = managers[0]
    thread = agents[parsed.manager].get("message_thread")
    parsed.messages, parsed.source = (thread, "message_thread") if isinstance(thread, list) else ([], None)


def message_key(message: Any) -> str:
    """A message's identity for lineage: its id (thread messages), else its whole value."""
    if isinstance(message, dict) and isinstance(message.get("id"), str):
        return "id:" + message["id"]
    return "value:" + json.dumps(message, sort_keys=True, default=str)


def message_time(message: Any) -> datetime | None:
    raw = message.get("created_at") if isinstance(message, dict) else None
    if not isinstance(raw, str):
        return None
    try:
        found = datetime.fromisoformat(raw.replace("Z", "+00:00"))
    except ValueError:
        return None
    return found if found.tzinfo is not None else None


def continues(earlier: Sequence[str], later: Sequence[str]) -> bool:
    """``later``'s conversation starts with all of ``earlier``'s."""
    return len(earlier) <= len(later) and tuple(later[: len(earlier)]) == tuple(earlier)


def half_turn(parsed: Parsed) -> bool:
    """The run that saved this state raised before any agent replied to its task."""
    if not parsed.messages:
        return False
    last = parsed.messages[-1]
    if not isinstance(last, dict) or last.get("source") != "user":
        return False
    return last.get("type") in CHAT_TYPES if parsed.source == "message_thread" else last.get("type") == "UserMessage"


# ---- events ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Event:
    kind: str
    message: str
    channel: str | None
    created_at: datetime | None


def events_of(messages: Sequence[Any]) -> list[Event]:
    """Tool calls and tool errors among ``messages`` (thread events or LLM messages)."""
    out: list[Event] = []
    for message in messages:
        if not isinstance(message, dict):
            continue
        when = message_time(message)
        kind, content = message.get("type"), message.get("content")
        if kind in ("ToolCallRequestEvent", "AssistantMessage") and isinstance(content, list):
            for call in content:
                if isinstance(call, dict) and "name" in call:
                    out.append(Event("tool_call", f"{call.get('name')} (call {call.get('id')})", call.get("name"), when))
        elif kind in ("ToolCallExecutionEvent", "FunctionExecutionResultMessage") and isinstance(content, list):
            for result in content:
                if isinstance(result, dict) and result.get("is_error"):
                    text = str(result.get("content"))[:MESSAGE_LIMIT]
                    out.append(Event("error", f"{result.get('name')} (call {result.get('call_id')}) failed: {text}",
                                     result.get("name"), when))
    return out


# ---- the state shown -----------------------------------------------------------------------------


def state_view(parsed: Parsed) -> dict[str, Any]:
    """The saved JSON with its conversation moved to ``"messages"`` (tool arguments/results parsed)."""
    value = parsed.value or {}
    messages = [clarify(m) for m in parsed.messages]
    if parsed.source == "message_thread" and parsed.manager is not None:
        agents = dict(value["agent_states"])
        agents[parsed.manager] = {k: v for k, v in agents[parsed.manager].items() if k != "message_thread"}
        rest = {**value, "agent_states": agents}
    elif parsed.source == "llm_context":
        rest = {**value, "llm_context": {k: v for k, v in value["llm_context"].items() if k != "messages"}}
    else:
        rest = dict(value)
    return {"messages": messages, **{k: v for k, v in rest.items() if k != "messages"}}


def clarify(message: Any) -> Any:
    """A message with JSON ``arguments`` (tool calls) and JSON tool results shown parsed."""
    if not isinstance(message, dict) or not isinstance(message.get("content"), list):
        return message
    parts = []
    for part in message["content"]:
        if isinstance(part, dict):
            key = "arguments" if "arguments" in part else "content" if "call_id" in part else None
            if key is not None:
                part = {**part, key: _parsed(part[key])}
        parts.append(part)
    return {**message, "content": parts}


def _parsed(text: Any) -> Any:
    if not isinstance(text, str) or text[:1] not in ("{", "["):
        return text
    try:
        value = json.loads(text)
    except ValueError:
        return text
    return value if isinstance(value, (dict, list)) else text


# ---- conversation messages -------------------------------------------------------------------


def normalize_message(value: Any) -> dict[str, Any] | None:
    """``{role, content, tool_calls?, name?, tool_call_id?, id?}`` for a thread message/event or an
    LLM message; None for other events (memory queries, streaming chunks…)."""
    if not isinstance(value, dict):
        return None
    kind, content, source = value.get("type"), value.get("content"), value.get("source")
    out: dict[str, Any] | None
    if kind in CHAT_TYPES or kind == "UserMessage":
        role = "user" if source == "user" or kind == "UserMessage" else "assistant"
        out = {"role": role, "content": _text(content), "name": source}
    elif kind == "SystemMessage":
        out = {"role": "system", "content": _text(content)}
    elif kind == "ThoughtEvent":
        out = {"role": "assistant", "content": _text(content), "name": "thought"}
    elif kind in ("ToolCallRequestEvent", "AssistantMessage"):
        out = _calls(content, source) if isinstance(content, list) else {
            "role": "assistant", "content": _text(content), "name": source}
    elif kind in ("ToolCallExecutionEvent", "FunctionExecutionResultMessage") and isinstance(content, list):
        out = _results(content)
    else:
        return None
    if isinstance(value.get("id"), str):
        out["id"] = value["id"]
    return {k: v for k, v in out.items() if v is not None}


def _calls(content: list[Any], source: Any) -> dict[str, Any]:
    calls = [{"id": c.get("id"), "name": c.get("name"), "args": _parsed(c.get("arguments"))}
             for c in content if isinstance(c, dict)]
    return {"role": "assistant", "content": "", "tool_calls": calls, "name": source}


def _results(content: list[Any]) -> dict[str, Any]:
    results = [r for r in content if isinstance(r, dict)]
    first = results[0] if results else {}
    return {"role": "tool", "content": "\n".join(str(r.get("content")) for r in results),
            "tool_call_id": first.get("call_id"), "name": first.get("name")}


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # a multimodal message: text parts and images
        return "\n".join(p if isinstance(p, str) else "[image]" for p in content)
    return json.dumps(content, default=str, ensure_ascii=False)
