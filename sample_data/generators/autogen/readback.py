"""Load an AutoGen AgentChat state file into a fresh team/agent and print what it resumes from.

    .venv-fixtures/autogen/bin/python sample_data/generators/autogen/readback.py sample_data/autogen trip-team
    ... readback.py sample_data/autogen trip-team --state state-0002.json
    ... readback.py sample_data/autogen support-agent
    ... readback.py sample_data/autogen/trip-team/state-0003.json      # one file directly
    ... readback.py sample_data/autogen --list                          # folders and their state files

STORE is the folder the app writes (one sub-folder per team/agent, files
``state-NNNN.json``); SESSION is the sub-folder. Without ``--state`` the
latest file (highest name) is used -- what the app resumes from.

Only AutoGen's API is used to restore: the file is parsed with ``json``, then

- ``"type": "TeamState"``: a fresh ``RoundRobinGroupChat`` is built with one
  ``AssistantAgent`` per participant named in ``agent_states`` (same names,
  same order; the manager entry is the one whose state type ends in
  ``ManagerState``; only ``RoundRobinManagerState`` is supported), then
  ``await team.load_state(state)`` and ``await team.save_state()``;
- ``"type": "AssistantAgentState"``: a fresh ``AssistantAgent``, then
  ``await agent.load_state(state)`` and ``await agent.save_state()``.

Model clients are empty ``ReplayChatCompletionClient``s and no tools are
attached: neither is part of the saved state, and nothing is run.

Output (stdout, one JSON document, keys sorted)::

    {"framework": "autogen-agentchat", "version": "0.7.5", "store": "...", "session": "trip-team",
     "state_file": ".../state-0005.json", "state_files": ["state-0001.json", ...],
     "kind": "team"|"agent", "participants": ["planner", "critic"], "manager": "RoundRobinGroupChatManager",
     "roundtrip_identical": true,      # re-saved state == file content
     "state": { ...what save_state() returns after load_state()... }}

Exit 2 (message on stderr) for a missing store/session/file, no state files,
invalid JSON or an unsupported state type; load_state's own errors too.
Nothing is written.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import re
import sys
from importlib.metadata import version
from pathlib import Path
from typing import Any, Mapping

from autogen_agentchat.agents import AssistantAgent
from autogen_agentchat.teams import RoundRobinGroupChat
from autogen_core.models import ModelFamily, ModelInfo
from autogen_ext.models.replay import ReplayChatCompletionClient

for _name in ("autogen_core", "autogen_agentchat", "autogen_ext"):
    logging.getLogger(_name).setLevel(logging.ERROR)

STATE_FILE = re.compile(r"^state-(\d+)\.json$")
MODEL_INFO = ModelInfo(
    vision=False, function_calling=True, json_output=False, family=ModelFamily.UNKNOWN, structured_output=False
)


class ReadbackError(Exception):
    pass


def _client() -> ReplayChatCompletionClient:
    return ReplayChatCompletionClient([], model_info=MODEL_INFO)


def state_files(folder: Path) -> list[Path]:
    """``state-NNNN.json`` files of a folder, in sequence order."""
    found = [(int(m.group(1)), p) for p in folder.iterdir() if (m := STATE_FILE.match(p.name))]
    return [p for _, p in sorted(found)]


def split_team_state(state: Mapping[str, Any]) -> tuple[list[str], str]:
    agent_states = state.get("agent_states")
    if not isinstance(agent_states, Mapping):
        raise ReadbackError("TeamState without agent_states")
    managers = [k for k, v in agent_states.items() if str((v or {}).get("type", "")).endswith("ManagerState")]
    if len(managers) != 1:
        raise ReadbackError(f"expected one group chat manager state, found {managers}")
    manager = managers[0]
    if agent_states[manager].get("type") != "RoundRobinManagerState":
        raise ReadbackError(f"unsupported manager state {agent_states[manager].get('type')!r} (RoundRobin only)")
    participants = [k for k in agent_states if k != manager]
    for name in participants:
        inner = (agent_states[name] or {}).get("agent_state", {})
        if inner.get("type") != "AssistantAgentState":
            raise ReadbackError(f"participant {name!r} holds {inner.get('type')!r}; only AssistantAgent is supported")
    return participants, manager


async def restore(state: Mapping[str, Any]) -> dict[str, Any]:
    kind = state.get("type")
    if kind == "TeamState":
        participants, manager = split_team_state(state)
        team = RoundRobinGroupChat([AssistantAgent(n, model_client=_client()) for n in participants])
        await team.load_state(state)
        resaved = await team.save_state()
        return {"kind": "team", "participants": participants, "manager": manager, "state": resaved}
    if kind == "AssistantAgentState":
        agent = AssistantAgent("readback_agent", model_client=_client())
        await agent.load_state(state)
        resaved = await agent.save_state()
        return {"kind": "agent", "participants": None, "manager": None, "state": resaved}
    raise ReadbackError(f"unsupported state type {kind!r}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("store", type=Path, help="state folder (or one state JSON file)")
    ap.add_argument("session", nargs="?", help="sub-folder of STORE (team or agent)")
    ap.add_argument("--state", help="file name inside the session folder (default: the latest)")
    ap.add_argument("--list", action="store_true", help="list session folders and their state files")
    args = ap.parse_args(argv)

    try:
        store = args.store
        if not store.exists():
            raise ReadbackError(f"no such store: {store}")
        if args.list:
            if not store.is_dir():
                raise ReadbackError("--list needs a folder")
            listing = {d.name: [p.name for p in state_files(d)] for d in sorted(store.iterdir()) if d.is_dir()}
            print(json.dumps(listing, indent=2))
            return 0
        if store.is_file():
            path, files = store, [store]
        else:
            if not args.session:
                raise ReadbackError("give a session folder (or --list)")
            folder = store / args.session
            if not folder.is_dir():
                raise ReadbackError(f"no session folder {folder}")
            files = state_files(folder)
            if not files:
                raise ReadbackError(f"no state-NNNN.json files in {folder}")
            path = folder / args.state if args.state else files[-1]
            if not path.is_file():
                raise ReadbackError(f"no such state file {path}")
        try:
            state = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise ReadbackError(f"{path}: invalid JSON: {exc}") from exc
        try:
            out = asyncio.run(restore(state))
        except (ValueError, TypeError, KeyError) as exc:
            raise ReadbackError(f"{path}: load_state failed: {exc}") from exc
    except ReadbackError as exc:
        print(f"readback: {exc}", file=sys.stderr)
        return 2

    out.update(
        framework="autogen-agentchat",
        version=version("autogen-agentchat"),
        store=str(args.store),
        session=args.session,
        state_file=str(path),
        state_files=[p.name for p in files],
        roundtrip_identical=json.dumps(out["state"], sort_keys=True) == json.dumps(state, sort_keys=True),
    )
    print(json.dumps(out, indent=2, sort_keys=True, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
