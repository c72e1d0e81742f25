"""Print, as JSON, what the OpenAI Agents SDK would resume a session from.

    .venv-fixtures/openai_agents/bin/python sample_data/generators/openai_agents/readback.py \
        sample_data/openai_agents.sqlite ops-91d2
    .venv-fixtures/openai_agents/bin/python sample_data/generators/openai_agents/readback.py \
        sample_data/openai_agents_advanced.sqlite planner-a1 --branch retry-from-turn-2
    ... readback.py STORE --list          # session ids in the store (plain SQL, see below)

The history is read ONLY through the SDK's public session API, exactly as
``Runner.run(agent, input, session=...)`` reads it before calling the model:

- plain store: ``SQLiteSession(session_id, db_path).get_items()`` (rows of
  ``agent_messages`` for the session, ``ORDER BY id``);
- advanced store (it has a ``message_structure`` table, or ``--advanced``):
  ``AdvancedSQLiteSession(session_id=..., db_path=..., create_tables=False)``,
  then ``switch_to_branch(B)`` when ``--branch B`` is given, then
  ``get_items()`` (the branch's rows ``ORDER BY message_structure.sequence_number``).
  A new session object starts on ``main``: the SDK keeps the current branch in
  memory only, so the store does not say which branch an app was on.

Output (stdout, one JSON document, keys sorted)::

    {"framework": "openai-agents", "version": "...", "store": "...", "kind": "plain"|"advanced",
     "session_id": "...", "branch": null|"main"|"...", "item_count": N,
     "items": [ ...Responses-API input items, exactly as get_items() returns them... ],
     # advanced only, also through the SDK:
     "branches": list_branches(), "turns": get_conversation_turns(),
     "turn_usage": get_turn_usage(), "session_usage_all_branches": get_session_usage()}

``--items-only`` prints just the ``items`` list. Exit 0 on success; exit 2
(message on stderr) if the store is missing or the session/branch is unknown
(an unknown session id is not an error for the SDK -- it just has no items --
so readback reports it as such).

The SDK *writes* when it opens a store (``PRAGMA journal_mode=WAL``, CREATE
TABLE IF NOT EXISTS, ``session_clear_generations`` rows for the advanced
session), so the store is first copied into a temporary folder and the copy is
opened: the file given is never modified.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import sqlite3
import sys
import tempfile
from importlib.metadata import version
from pathlib import Path
from typing import Any

os.environ.setdefault("OPENAI_AGENTS_DISABLE_TRACING", "1")

from agents import SQLiteSession  # noqa: E402
from agents.extensions.memory import AdvancedSQLiteSession  # noqa: E402


def _copy_store(src: Path, dst_dir: Path) -> Path:
    """Copy the DB (and any -wal beside it, so committed WAL frames are seen)."""
    dst = dst_dir / src.name
    shutil.copy2(src, dst)
    for suffix in ("-wal",):
        side = Path(str(src) + suffix)
        if side.exists():
            shutil.copy2(side, Path(str(dst) + suffix))
    return dst


def _table_names(db: Path) -> set[str]:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    finally:
        conn.close()


def _session_ids(db: Path) -> list[str]:
    """Session ids (NOT an SDK API: the SDK has none for listing sessions)."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return [r[0] for r in conn.execute("SELECT session_id FROM agent_sessions ORDER BY rowid")]
    finally:
        conn.close()


async def _read(db: Path, session_id: str, branch: str | None, advanced: bool) -> dict[str, Any]:
    out: dict[str, Any] = {"session_id": session_id, "kind": "advanced" if advanced else "plain"}
    if not advanced:
        if branch is not None:
            raise ValueError("--branch needs an AdvancedSQLiteSession store")
        s = SQLiteSession(session_id, db)
        try:
            out["branch"] = None
            out["items"] = await s.get_items()
        finally:
            s.close()
        return out
    s = AdvancedSQLiteSession(session_id=session_id, db_path=db, create_tables=False)
    try:
        if branch is not None:
            await s.switch_to_branch(branch)  # ValueError if the branch has no rows
        out["branch"] = branch or "main"
        out["items"] = await s.get_items()
        out["branches"] = await s.list_branches()
        out["turns"] = await s.get_conversation_turns()
        out["turn_usage"] = await s.get_turn_usage()
        out["session_usage_all_branches"] = await s.get_session_usage()
    finally:
        s.close()
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("store", type=Path, help="SQLite file written by SQLiteSession / AdvancedSQLiteSession")
    ap.add_argument("session", nargs="?", help="session_id")
    ap.add_argument("--branch", help="AdvancedSQLiteSession branch (default: main)")
    kind = ap.add_mutually_exclusive_group()
    kind.add_argument("--advanced", action="store_true", help="open with AdvancedSQLiteSession")
    kind.add_argument("--plain", action="store_true", help="open with SQLiteSession even if message_structure exists")
    ap.add_argument("--items-only", action="store_true", help="print only the items list")
    ap.add_argument("--list", action="store_true", help="print the store's session ids and exit")
    args = ap.parse_args(argv)

    if not args.store.is_file():
        print(f"readback: no such store: {args.store}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="oa-readback-") as td:
        db = _copy_store(args.store.resolve(), Path(td))
        tables = _table_names(db)
        if args.list:
            print(json.dumps(_session_ids(db), indent=2))
            return 0
        if not args.session:
            ap.error("give a session id (or --list)")
        if args.session not in _session_ids(db):
            print(f"readback: no session {args.session!r} in {args.store}", file=sys.stderr)
            return 2
        advanced = args.advanced or (not args.plain and ("message_structure" in tables or args.branch is not None))
        try:
            out = asyncio.run(_read(db, args.session, args.branch, advanced))
        except ValueError as exc:
            print(f"readback: {exc}", file=sys.stderr)
            return 2
    out.update(
        framework="openai-agents",
        version=version("openai-agents"),
        store=str(args.store),
        item_count=len(out["items"]),
    )
    print(json.dumps(out["items"] if args.items_only else out, indent=2, sort_keys=True, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
