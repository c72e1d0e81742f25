"""Agno ``SqliteDb``/``PostgresDb`` stores for the tests: the sample (written by Agno itself,
sample_data/generators/agno), copied to SQLite files or into PostgreSQL with the column types
Agno's own table creation gives there (schema ``ai``), and runs appended as Agno writes them
(``upsert_run`` with the next ``run_index``, then ``upsert_session`` of the whole row)."""

from __future__ import annotations

import json
import shutil
import sqlite3
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "sample_data" / "agno.sqlite"
SECRET = "sk-proj-Pq7Wm3Xk9Lt2Rv5Bn8Yc4Hd1Js6Fg0Ea3Ku7Mz2Qx9Vb5Nc"
CART1, CART2, FORK = "cart-001", "cart-002", "cde7ab22-ef5a-42ec-a5e6-9bd0f9daa0a4"

# what agno 3.1.10's PostgresDb creates (agno/db/postgres/schemas.py, default schema "ai"; checked
# against a real server by sample_data/generators/agno/generate.py --postgres)
POSTGRES_DDL = """
CREATE SCHEMA IF NOT EXISTS ai;
CREATE TABLE ai.agno_sessions (session_id VARCHAR NOT NULL, session_type VARCHAR NOT NULL, agent_id VARCHAR,
    team_id VARCHAR, workflow_id VARCHAR, user_id VARCHAR, session_data JSONB, agent_data JSONB, team_data JSONB,
    workflow_data JSONB, metadata JSONB, summary JSONB, created_at BIGINT NOT NULL, updated_at BIGINT,
    PRIMARY KEY (session_id));
CREATE TABLE ai.agno_schema_versions (table_name VARCHAR NOT NULL, version VARCHAR NOT NULL,
    created_at VARCHAR NOT NULL, updated_at VARCHAR, PRIMARY KEY (table_name));
CREATE TABLE ai.agno_runs (run_id VARCHAR NOT NULL, session_id VARCHAR NOT NULL, run_type VARCHAR NOT NULL,
    agent_id VARCHAR, team_id VARCHAR, workflow_id VARCHAR, user_id VARCHAR, parent_run_id VARCHAR, status VARCHAR,
    run_index BIGINT, run_data JSONB NOT NULL, created_at BIGINT NOT NULL, updated_at BIGINT, PRIMARY KEY (run_id),
    FOREIGN KEY(session_id) REFERENCES ai.agno_sessions (session_id) ON DELETE CASCADE);
CREATE INDEX idx_agno_runs_session_id_run_index ON ai.agno_runs (session_id, run_index);
"""
JSON_COLUMNS = {"session_data", "agent_data", "team_data", "workflow_data", "metadata", "summary", "run_data"}


def sqlite_store(tmp: Path, name: str = "agno.sqlite") -> str:
    tmp.mkdir(parents=True, exist_ok=True)
    path = tmp / name
    shutil.copyfile(SAMPLE, path)
    return str(path)


def is_pg(url: str) -> bool:
    return url.startswith("postgresql://")


def sql(url: str, statement: str, params: tuple[Any, ...] = ()) -> None:
    if is_pg(url):
        import psycopg

        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("SET search_path TO ai, public")
            conn.execute(statement.replace("?", "%s"), params)
        return
    with sqlite3.connect(url) as conn:
        conn.execute(statement, params)
    sqlite3.connect(url).close()


def rows(url: str, statement: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    if is_pg(url):
        import psycopg

        with psycopg.connect(url) as conn:
            conn.execute("SET search_path TO ai, public")
            return conn.execute(statement.replace("?", "%s"), params).fetchall()
    with sqlite3.connect(url) as conn:
        return conn.execute(statement, params).fetchall()


def postgres_store(dsn: str) -> str:
    """The sample's rows in Agno's PostgreSQL tables (JSONB, BIGINT), schema ``ai``."""
    import psycopg
    from psycopg.types.json import Jsonb

    with sqlite3.connect(SAMPLE) as src:
        tables = {}
        for table in ("agno_sessions", "agno_schema_versions", "agno_runs"):
            cur = src.execute(f"SELECT * FROM {table}")
            tables[table] = ([d[0] for d in cur.description], cur.fetchall())
    with psycopg.connect(dsn) as conn:
        conn.execute(POSTGRES_DDL)
        for table, (names, data) in tables.items():
            values = [[Jsonb(json.loads(v)) if n in JSON_COLUMNS and v is not None else v
                       for n, v in zip(names, row)] for row in data]
            conn.cursor().executemany(f"INSERT INTO ai.{table} ({', '.join(names)}) VALUES "
                                      f"({', '.join(['%s'] * len(names))})", values)
    return dsn


def append_run(url: str, session: str, text: str, state_patch: dict[str, Any]) -> str:
    """One more COMPLETED run of ``session`` as Agno writes it: a run row with the next run_index
    (its run_data a RunOutput dict), then the session row with the new session_state."""
    ((index, created, state_text),) = rows(
        url, "SELECT max(r.run_index), max(r.created_at), s.session_data FROM agno_runs r JOIN agno_sessions s "
             "ON s.session_id = r.session_id WHERE r.session_id = ? GROUP BY s.session_data", (session,))
    data = json.loads(state_text) if isinstance(state_text, str) else state_text
    state = {**data["session_state"], **state_patch}
    run_id, now = str(uuid.uuid4()), int(created) + 600
    messages = [{"id": str(uuid.uuid4()), "content": "Help the user shop. Be brief.", "from_history": False,
                 "stop_after_tool_call": False, "role": "system", "created_at": now},
                {"id": str(uuid.uuid4()), "content": text, "from_history": False, "stop_after_tool_call": False,
                 "role": "user", "created_at": now},
                {"id": str(uuid.uuid4()), "content": "Done.", "from_history": False, "stop_after_tool_call": False,
                 "role": "assistant", "created_at": now}]
    run = {"run_id": run_id, "agent_id": "shop-assistant", "agent_name": "Shop assistant", "session_id": session,
           "user_id": "u-dana", "content": "Done.", "content_type": "str", "model": "scripted-shop-1",
           "model_provider": "lastgood-fixture", "session_state": state, "created_at": now, "status": "COMPLETED",
           "messages": messages, "input": {"input_content": text}}
    values = (run_id, session, "agent", "shop-assistant", None, None, "u-dana", None, "COMPLETED", int(index) + 1,
              run, now, now)
    data["session_state"] = state
    if is_pg(url):
        import psycopg
        from psycopg.types.json import Jsonb

        with psycopg.connect(url) as conn:
            conn.execute("INSERT INTO ai.agno_runs VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
                         (*values[:10], Jsonb(run), *values[11:]))
            conn.execute("UPDATE ai.agno_sessions SET session_data = %s, updated_at = %s WHERE session_id = %s",
                         (Jsonb(data), now, session))
        return run_id
    with sqlite3.connect(url) as conn:
        conn.execute("INSERT INTO agno_runs VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                     (*values[:10], json.dumps(run), *values[11:]))
        conn.execute("UPDATE agno_sessions SET session_data = ?, updated_at = ? WHERE session_id = ?",
                     (json.dumps(data), now, session))
    sqlite3.connect(url).close()
    return run_id
