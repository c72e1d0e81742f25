"""Print, as JSON, what Google ADK itself would resume an ADK session from.

    .venv-fixtures/adk/bin/python sample_data/generators/adk/readback.py \
        sample_data/adk.sqlite SESSION_ID [SESSION_ID ...] [--app helpdesk] [--user alice]
    .venv-fixtures/adk/bin/python sample_data/generators/adk/readback.py sample_data/adk.sqlite --all

Everything is read through ADK's public ``DatabaseSessionService`` API
(``list_sessions`` to find a session's user when ``--user`` is not given,
``get_session`` for state and events). That is exactly what ``Runner.run_async``
loads before the next invocation of a session, so this is the ground truth a
Lastgood restore/rollback of an ADK store has to reproduce.

The store is opened read-only (``file:...?mode=ro&uri=true``), so this script
never writes to it; pass ``--writable`` to open it normally (only needed if the
file lacks ADK's tables and you want ADK to create them).

Output: ``{"store": ..., "adk_version": ..., "sessions": [ ... ]}`` where each
session is::

    {
      "app_name", "user_id", "session_id",
      "last_update_time": float epoch seconds (sessions.update_time),
      "state": merged state exactly as get_session returns it
               (session keys + "app:<k>" + "user:<k>"; temp: keys are never stored),
      "state_by_scope": {"app": {...}, "user": {...}, "session": {...}},
      "event_count": N,
      "events": [Event.model_dump(mode="json", exclude_none=True), ...]  # chronological
      "invocations": [{"invocation_id", "first_event_id", "last_event_id",
                       "event_count", "authors", "is_rewind", "error_codes",
                       "ended_with_final_response"}],
      "rewinds": [{"event_id", "rewind_before_invocation_id", "state_delta"}],
      "live_event_ids": ids that survive rewinds -- what ADK puts in the next
                        LLM prompt (computed with ADK's own helper
                        google.adk.events._rewind_events._apply_rewinds, which
                        is private; null if that helper is missing),
      "last_event": {"id", "invocation_id", "author", "is_final_response",
                     "error_code"}
    }

Unknown session ids produce ``{"session_id": ..., "error": "not found"}`` and
exit status 1 (after printing everything else).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sys
import warnings
from typing import Any


def _scopes(state: dict[str, Any]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {"app": {}, "user": {}, "session": {}}
    for k, v in state.items():
        if k.startswith("app:"):
            out["app"][k[4:]] = v
        elif k.startswith("user:"):
            out["user"][k[5:]] = v
        else:
            out["session"][k] = v
    return out


def _invocations(events: list) -> list[dict[str, Any]]:
    order: list[str] = []
    groups: dict[str, list] = {}
    for ev in events:
        if ev.invocation_id not in groups:
            order.append(ev.invocation_id)
            groups[ev.invocation_id] = []
        groups[ev.invocation_id].append(ev)
    out = []
    for inv in order:
        evs = groups[inv]
        out.append({
            "invocation_id": inv,
            "first_event_id": evs[0].id,
            "last_event_id": evs[-1].id,
            "first_timestamp": evs[0].timestamp,
            "last_timestamp": evs[-1].timestamp,
            "event_count": len(evs),
            "authors": sorted({e.author for e in evs}),
            "is_rewind": any(e.actions and e.actions.rewind_before_invocation_id for e in evs),
            "error_codes": [e.error_code for e in evs if e.error_code],
            "ended_with_final_response": bool(evs[-1].author != "user" and evs[-1].is_final_response()
                                             and not evs[-1].error_code),
        })
    return out


async def _read(args: argparse.Namespace) -> tuple[dict[str, Any], int]:
    from google.adk.sessions import DatabaseSessionService
    from google.adk import version as adk_version

    if args.store.startswith(("postgresql://", "postgres://")):  # needs psycopg in the venv
        path = args.store.split("@")[-1]
        url = "postgresql+psycopg://" + args.store.split("://", 1)[1]
    else:
        path = os.path.abspath(args.store)
        if not os.path.exists(path):
            raise SystemExit(f"no such store: {path}")
        if args.writable:
            url = f"sqlite+aiosqlite:///{path}"
        else:
            url = f"sqlite+aiosqlite:///file:{path}?mode=ro&uri=true"
    try:
        from google.adk.events._rewind_events import _apply_rewinds  # private, may move
    except Exception:  # pragma: no cover - depends on ADK release
        _apply_rewinds = None

    service = DatabaseSessionService(db_url=url)
    rc = 0
    result: dict[str, Any] = {"store": path, "adk_version": adk_version.__version__,
                              "app_name": args.app, "sessions": []}
    try:
        listed = (await service.list_sessions(app_name=args.app, user_id=args.user)).sessions
        by_id: dict[str, list[str]] = {}
        for s in listed:
            by_id.setdefault(s.id, []).append(s.user_id)
        wanted = [s.id for s in listed] if args.all else args.session_ids
        seen = set()
        for sid in wanted:
            if sid in seen:
                continue
            seen.add(sid)
            users = [args.user] if args.user else by_id.get(sid, [])
            if not users:
                result["sessions"].append({"session_id": sid, "error": "not found"})
                rc = 1
                continue
            for user in users:
                sess = await service.get_session(app_name=args.app, user_id=user, session_id=sid)
                if sess is None:
                    result["sessions"].append({"session_id": sid, "user_id": user, "error": "not found"})
                    rc = 1
                    continue
                events = list(sess.events)
                state = dict(sess.state)
                last = events[-1] if events else None
                item: dict[str, Any] = {
                    "app_name": sess.app_name,
                    "user_id": sess.user_id,
                    "session_id": sess.id,
                    "last_update_time": sess.last_update_time,
                    "state": state,
                    "state_by_scope": _scopes(state),
                    "event_count": len(events),
                    "invocations": _invocations(events),
                    "rewinds": [
                        {"event_id": e.id, "invocation_id": e.invocation_id,
                         "rewind_before_invocation_id": e.actions.rewind_before_invocation_id,
                         "state_delta": e.actions.state_delta}
                        for e in events if e.actions and e.actions.rewind_before_invocation_id
                    ],
                    "live_event_ids": ([e.id for e in _apply_rewinds(events)]
                                       if _apply_rewinds is not None else None),
                    "last_event": None if last is None else {
                        "id": last.id, "invocation_id": last.invocation_id,
                        "author": last.author, "timestamp": last.timestamp,
                        "is_final_response": last.is_final_response(),
                        "error_code": last.error_code, "error_message": last.error_message,
                    },
                }
                if not args.no_events:
                    item["events"] = [e.model_dump(mode="json", exclude_none=True) for e in events]
                result["sessions"].append(item)
    finally:
        await service.close()
    return result, rc


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Read ADK sessions back through DatabaseSessionService.")
    ap.add_argument("store", help="path of the ADK SQLite database, or a postgresql:// DSN "
                                   "(then psycopg must be installed in the venv)")
    ap.add_argument("session_ids", nargs="*", help="session id(s) to read")
    ap.add_argument("--app", default="helpdesk", help="app_name (default: helpdesk)")
    ap.add_argument("--user", default=None, help="user_id (default: found with list_sessions)")
    ap.add_argument("--all", action="store_true", help="every session of --app (and --user)")
    ap.add_argument("--no-events", action="store_true", help="omit the full event list")
    ap.add_argument("--writable", action="store_true", help="open the database read-write")
    args = ap.parse_args(argv)
    if not args.session_ids and not args.all:
        ap.error("give at least one SESSION_ID, or --all")
    logging.basicConfig(level=logging.CRITICAL)
    warnings.simplefilter("ignore")
    result, rc = asyncio.run(_read(args))
    json.dump(result, sys.stdout, indent=2, ensure_ascii=False, sort_keys=False)
    sys.stdout.write("\n")
    return rc


if __name__ == "__main__":
    sys.exit(main())
