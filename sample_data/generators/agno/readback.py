"""Print, as JSON, what Agno would resume a session from.

    .venv-fixtures/agno/bin/python sample_data/generators/agno/readback.py sample_data/agno.sqlite cart-001
    ... readback.py sample_data/agno.sqlite cart-002 --full      # whole RunOutput dicts
    ... readback.py sample_data/agno.sqlite --list               # session ids (Agno's db.get_sessions)

Everything is read through Agno's public API on an ``Agent`` bound to the
store (``Agent(db=SqliteDb(db_file=...))``) -- the same calls a resumed app
makes:

- ``agent.get_session(session_id)`` -> ``AgentSession`` (row of
  ``agno_sessions`` + its runs from ``agno_runs`` ordered by ``run_index``);
- ``agent.get_session_state(session_id)`` -> the ``session_state`` a new run
  starts from (``session_data["session_state"]``);
- ``agent.get_session_messages(session_id, last_n_runs=N, skip_roles=["system"])``
  -> the history a new run replays with ``add_history_to_context=True`` and
  ``num_history_runs=N`` (default 3, as in the generator). Agno drops runs whose
  status is PAUSED / CANCELLED / ERROR / REGENERATED from history;
- ``agent.get_last_run_output(session_id)``; PAUSED runs are what
  ``agent.continue_run(run_id=..., requirements=...)`` would resume.

Output (stdout, one JSON document, keys sorted)::

    {"framework": "agno", "version": "...", "store": "...", "session_id": "...",
     "session": {"session_id", "agent_id", "user_id", "session_data", "metadata",
                 "summary", "created_at", "updated_at", "forked_from_session_id"},
     "session_state": {...},
     "runs": [{"run_index", "run_id", "status", "created_at", "input", "content",
               "forked_from_session_id", "tool_calls": [...], "paused_tools": [...]}, ...],
     "history": [Message.to_dict(), ...],   # what the next run replays
     "history_num_runs": N, "last_run_id": "...", "paused_run_ids": [...]}

With ``--full`` each ``runs[i]`` is the whole ``RunOutput.to_dict()``. Exit 2 if
the store or session does not exist. Agno's ``SqliteDb`` writes when it opens
a file (``PRAGMA journal_mode=WAL``, table/version checks), so the store is
copied to a temp folder and the copy is opened; the given file is untouched.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import sys
import tempfile
from importlib.metadata import version
from pathlib import Path
from typing import Any

os.environ["AGNO_TELEMETRY"] = "false"

from agno.agent import Agent  # noqa: E402
from agno.db.base import SessionType  # noqa: E402
from agno.db.sqlite import SqliteDb  # noqa: E402

logging.getLogger("agno").disabled = True


def _run_summary(run: Any, index: int) -> dict[str, Any]:
    tools = run.tools or []
    return {
        "run_index": index,
        "run_id": run.run_id,
        "status": getattr(run.status, "value", run.status),
        "created_at": run.created_at,
        "input": run.input.to_dict() if run.input is not None else None,
        "content": run.content,
        "forked_from_session_id": getattr(run, "forked_from_session_id", None),
        "session_state": run.session_state,
        "tool_calls": [
            {
                "tool_call_id": t.tool_call_id,
                "tool_name": t.tool_name,
                "tool_args": t.tool_args,
                "tool_call_error": t.tool_call_error,
                "result": t.result,
            }
            for t in tools
            if not t.is_paused
        ],
        "paused_tools": [
            {"tool_call_id": t.tool_call_id, "tool_name": t.tool_name, "tool_args": t.tool_args,
             "requires_confirmation": t.requires_confirmation, "requires_user_input": t.requires_user_input,
             "external_execution_required": t.external_execution_required}
            for t in tools
            if t.is_paused
        ],
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("store", help="SQLite file written by agno.db.sqlite.SqliteDb, or the postgresql:// DSN of a "
                                  "PostgresDb database (read in place; psycopg must be installed in the venv)")
    ap.add_argument("session", nargs="?", help="session_id")
    ap.add_argument("--num-history-runs", type=int, default=3, help="history window of the next run (default 3)")
    ap.add_argument("--full", action="store_true", help="print whole RunOutput dicts")
    ap.add_argument("--list", action="store_true", help="print the store's agent session ids and exit")
    args = ap.parse_args(argv)
    postgres = args.store.startswith(("postgresql://", "postgres://"))
    if not postgres and not Path(args.store).is_file():
        print(f"readback: no such store: {args.store}", file=sys.stderr)
        return 2
    args.store = args.store if postgres else Path(args.store)

    with tempfile.TemporaryDirectory(prefix="agno-readback-") as td:
        if postgres:
            from agno.db.postgres import PostgresDb

            db = PostgresDb(db_url="postgresql+psycopg://" + args.store.split("://", 1)[1])
        else:
            copy = Path(td) / args.store.name
            shutil.copy2(args.store, copy)
            wal = Path(str(args.store) + "-wal")
            if wal.exists():
                shutil.copy2(wal, Path(str(copy) + "-wal"))
            db = SqliteDb(db_file=str(copy))
        try:
            if args.list:
                sessions = db.get_sessions(session_type=SessionType.AGENT)
                print(json.dumps([s.session_id for s in sessions], indent=2))  # type: ignore[union-attr]
                return 0
            if not args.session:
                ap.error("give a session id (or --list)")
            probe = Agent(db=db, telemetry=False)
            found = probe.get_session(session_id=args.session)
            if found is None:
                print(f"readback: no session {args.session!r} in {args.store}", file=sys.stderr)
                return 2
            # Agno matches the last run by agent id, so act as the session's agent.
            agent = Agent(
                id=found.agent_id,
                db=db,
                telemetry=False,
                add_history_to_context=True,
                num_history_runs=args.num_history_runs,
            )
            session = agent.get_session(session_id=args.session)
            assert session is not None
            runs = list(session.runs or [])
            history = agent.get_session_messages(
                session_id=args.session, last_n_runs=args.num_history_runs, skip_roles=["system"]
            )
            last = agent.get_last_run_output(session_id=args.session)
            out = {
                "framework": "agno",
                "version": version("agno"),
                "store": str(args.store).rsplit("@", 1)[-1],
                "session_id": session.session_id,
                "session": {
                    "session_id": session.session_id,
                    "agent_id": session.agent_id,
                    "user_id": session.user_id,
                    "session_data": session.session_data,
                    "metadata": session.metadata,
                    "summary": session.summary.to_dict() if session.summary else None,
                    "created_at": session.created_at,
                    "updated_at": session.updated_at,
                    "forked_from_session_id": (session.session_data or {}).get("forked_from_session_id"),
                },
                "session_state": agent.get_session_state(session_id=args.session),
                "runs": [r.to_dict() if args.full else _run_summary(r, i) for i, r in enumerate(runs)],
                "history": [m.to_dict() for m in history],
                "history_num_runs": args.num_history_runs,
                "last_run_id": last.run_id if last else None,
                "paused_run_ids": [r.run_id for r in runs if getattr(r.status, "value", r.status) == "PAUSED"],
            }
        finally:
            db.db_engine.dispose()
    print(json.dumps(out, indent=2, sort_keys=True, ensure_ascii=False, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
