"""Google ADK ``DatabaseSessionService`` stores for the tests: the sample (written by ADK itself,
sample_data/generators/adk), copied to SQLite files or into a PostgreSQL database with the column
types ADK's own ``create_all`` gives there, and events appended exactly as ``append_event`` writes
them (the row, ``sessions.state`` and ``sessions.update_time`` in one transaction)."""

from __future__ import annotations

import json
import shutil
import sqlite3
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "sample_data" / "adk.sqlite"
SECRET = "sk-proj-Lg7fQ2xVb9T3kP0sW4nZ8rYc1mD6hJ5e"
APP = "helpdesk"
ALICE_ORDERS = "af4b8529-69eb-4747-ab31-2859caf2cc06"
ALICE_REWIND = "d4745f58-d132-4354-90b2-3f04a77ef005"
BOB = "049f8805-b8d8-42fc-ad8c-3e96dfec8b84"
REWOUND_INVOCATION = "e-463b1090-daae-4bfa-851f-2003b236394c"

# what google-adk 2.13's DatabaseSessionService creates on PostgreSQL (schemas/v1.py compiled for the
# postgresql dialect; checked against a real server by sample_data/generators/adk/generate.py --postgres)
POSTGRES_DDL = """
CREATE TABLE adk_internal_metadata (key VARCHAR(128) NOT NULL, value VARCHAR(256) NOT NULL, PRIMARY KEY (key));
CREATE TABLE app_states (app_name VARCHAR(128) NOT NULL, state JSONB NOT NULL,
    update_time TIMESTAMP WITHOUT TIME ZONE NOT NULL, PRIMARY KEY (app_name));
CREATE TABLE sessions (app_name VARCHAR(128) NOT NULL, user_id VARCHAR(128) NOT NULL, id VARCHAR(128) NOT NULL,
    state JSONB NOT NULL, create_time TIMESTAMP WITHOUT TIME ZONE NOT NULL,
    update_time TIMESTAMP WITHOUT TIME ZONE NOT NULL, PRIMARY KEY (app_name, user_id, id));
CREATE TABLE user_states (app_name VARCHAR(128) NOT NULL, user_id VARCHAR(128) NOT NULL, state JSONB NOT NULL,
    update_time TIMESTAMP WITHOUT TIME ZONE NOT NULL, PRIMARY KEY (app_name, user_id));
CREATE TABLE events (id VARCHAR(128) NOT NULL, app_name VARCHAR(128) NOT NULL, user_id VARCHAR(128) NOT NULL,
    session_id VARCHAR(128) NOT NULL, invocation_id VARCHAR(256) NOT NULL,
    timestamp TIMESTAMP WITHOUT TIME ZONE NOT NULL, event_data JSONB,
    PRIMARY KEY (id, app_name, user_id, session_id),
    FOREIGN KEY(app_name, user_id, session_id) REFERENCES sessions (app_name, user_id, id) ON DELETE CASCADE);
CREATE INDEX idx_events_app_user_session_ts_id ON events (app_name, user_id, session_id, timestamp DESC, id DESC);
"""
TABLES = ("adk_internal_metadata", "app_states", "user_states", "sessions", "events")


def sqlite_store(tmp: Path, name: str = "adk.sqlite") -> str:
    tmp.mkdir(parents=True, exist_ok=True)
    path = tmp / name
    shutil.copyfile(SAMPLE, path)
    return str(path)


def sql(url: str, statement: str, params: tuple[Any, ...] = ()) -> None:
    """One statement on a copy (foreign keys off, as a damaged store would have been written)."""
    if url.startswith("postgresql://"):
        import psycopg

        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(statement.replace("?", "%s"), params)
        return
    with sqlite3.connect(url) as conn:
        conn.execute(statement, params)
    sqlite3.connect(url).close()


def rows(url: str, statement: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    if url.startswith("postgresql://"):
        import psycopg

        with psycopg.connect(url) as conn:
            return conn.execute(statement.replace("?", "%s"), params).fetchall()
    with sqlite3.connect(url) as conn:
        return conn.execute(statement, params).fetchall()


# ---- PostgreSQL -------------------------------------------------------------------------------


def _naive(text: str) -> datetime:
    return datetime.fromisoformat(text)


def postgres_store(dsn: str) -> str:
    """The sample's rows in ADK's PostgreSQL tables (JSONB, TIMESTAMP WITHOUT TIME ZONE)."""
    import psycopg
    from psycopg.types.json import Jsonb

    with sqlite3.connect(SAMPLE) as src:
        data = {t: src.execute(f"SELECT * FROM {t}").fetchall() for t in TABLES}
    with psycopg.connect(dsn, autocommit=False) as conn:
        conn.execute(POSTGRES_DDL)
        conn.cursor().executemany("INSERT INTO adk_internal_metadata VALUES (%s, %s)", data["adk_internal_metadata"])
        conn.cursor().executemany("INSERT INTO app_states VALUES (%s, %s, %s)",
                                  [(a, Jsonb(json.loads(s)), _naive(t)) for a, s, t in data["app_states"]])
        conn.cursor().executemany("INSERT INTO user_states VALUES (%s, %s, %s, %s)",
                                  [(a, u, Jsonb(json.loads(s)), _naive(t)) for a, u, s, t in data["user_states"]])
        conn.cursor().executemany("INSERT INTO sessions VALUES (%s, %s, %s, %s, %s, %s)",
                                  [(a, u, i, Jsonb(json.loads(s)), _naive(c), _naive(m))
                                   for a, u, i, s, c, m in data["sessions"]])
        conn.cursor().executemany("INSERT INTO events VALUES (%s, %s, %s, %s, %s, %s, %s)",
                                  [(i, a, u, s, inv, _naive(t), Jsonb(json.loads(d)))
                                   for i, a, u, s, inv, t, d in data["events"]])
        conn.commit()
    return dsn


# ---- appending as ADK does ----------------------------------------------------------------------


def _event(author: str, role: str, text: str, invocation: str, micros: int, path: str) -> dict[str, Any]:
    """``Event.model_dump(mode="json", exclude_none=True)`` of a plain text event."""
    event: dict[str, Any] = {"content": {"parts": [{"text": text}], "role": role}, "invocation_id": invocation,
                             "author": author, "actions": {"state_delta": {}, "artifact_delta": {},
                                                           "requested_auth_configs": {},
                                                           "requested_tool_confirmations": {}},
                             "node_info": {"path": path}, "id": str(uuid.uuid4()), "timestamp": micros / 1e6}
    if author != "user":
        event = {"model_version": "scripted-helpdesk-1", **event}
    return event


def append_invocation(url: str, user: str, session: str, question: str, answer: str,
                      state_delta: dict[str, Any] | None = None) -> list[str]:
    """One more invocation on a session (a user message, then the agent's answer carrying
    ``state_delta``), appended as ``DatabaseSessionService.append_event`` writes it."""
    ((last,),) = rows(url, "SELECT max(timestamp) FROM events")  # now: after every event of the store
    start = (last if isinstance(last, datetime) else datetime.fromisoformat(last)).replace(tzinfo=UTC)
    micros = int((start - datetime(1970, 1, 1, tzinfo=UTC)) / timedelta(microseconds=1)) + 60_000_000
    invocation = f"e-{uuid.uuid4()}"
    events = [_event("user", "user", question, invocation, micros, ""),
              _event("helpdesk_agent", "model", answer, invocation, micros + 250_000, "helpdesk_agent@1")]
    events[-1]["actions"]["state_delta"] = dict(state_delta or {})
    for event in events:
        _append(url, user, session, event)
    return [e["id"] for e in events]


def _append(url: str, user: str, session: str, event: dict[str, Any]) -> None:
    when = datetime.fromtimestamp(event["timestamp"], UTC).replace(tzinfo=None)
    delta = {k: v for k, v in event["actions"]["state_delta"].items() if not k.startswith(("app:", "user:", "temp:"))}
    if url.startswith("postgresql://"):
        import psycopg
        from psycopg.types.json import Jsonb

        with psycopg.connect(url) as conn:
            conn.execute("INSERT INTO events VALUES (%s, %s, %s, %s, %s, %s, %s)",
                         (event["id"], APP, user, session, event["invocation_id"], when, Jsonb(event)))
            conn.execute("UPDATE sessions SET state = state || %s, update_time = %s WHERE app_name = %s "
                         "AND user_id = %s AND id = %s", (Jsonb(delta), when, APP, user, session))
        return
    text = when.strftime("%Y-%m-%d %H:%M:%S.%f")
    with sqlite3.connect(url) as conn:
        conn.execute("INSERT INTO events VALUES (?, ?, ?, ?, ?, ?, ?)",
                     (event["id"], APP, user, session, event["invocation_id"], text, json.dumps(event)))
        (state,) = conn.execute("SELECT state FROM sessions WHERE app_name = ? AND user_id = ? AND id = ?",
                                (APP, user, session)).fetchone()
        conn.execute("UPDATE sessions SET state = ?, update_time = ? WHERE app_name = ? AND user_id = ? AND id = ?",
                     (json.dumps({**json.loads(state), **delta}), text, APP, user, session))
    sqlite3.connect(url).close()
