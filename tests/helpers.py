"""Small builders shared by the tests (real stores written with the real writer)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from lastgood.readers.native.writer import NativeWriter

ROOT = Path(__file__).resolve().parent.parent
SAMPLE_STORE = ROOT / "sample_data" / "agents"
SAMPLE_MANIFEST = ROOT / "sample_data" / "manifest.json"
SECRET = "sk-test-SECRET-0123456789abcdef"
T0 = datetime(2026, 11, 2, 9, 0, tzinfo=UTC)


def agent_state(turn: int) -> dict[str, Any]:
    messages = [{"role": "system", "content": "be brief"}]
    for i in range(turn):
        messages += [{"role": "user", "content": f"question {i}"},
                     {"role": "assistant", "content": f"answer {i}"}]
    return {"llm": {"messages": messages, "params": {"temperature": 0.2}},
            "tools": {"api_key": SECRET, "connections": {"search": "ok"}},
            "runtime": {"turn": turn, "pending_actions": [f"act-{turn}"]}}


def write_store(url: str, runs: int = 3, steps: int = 12, codec: str = "json",
                storage_options: dict[str, Any] | None = None) -> dict[str, list[dict[str, Any]]]:
    """A store with ``runs`` runs of ``steps`` checkpoints; returns each run's states in order."""
    writer = NativeWriter(url, storage_options, codec=codec, full_every=4)
    states: dict[str, list[dict[str, Any]]] = {}
    for r in range(runs):
        run = f"run-{r}"
        for step in range(steps):
            state = agent_state(step)
            event = {"kind": "timeout", "message": "tool timed out"} if step == 5 else None
            writer.save(run, state, trigger="final" if step == steps - 1 else "periodic",
                        agent=f"agent-{r % 2}", created_at=T0 + timedelta(minutes=10 * r + step),
                        event=event)
            states.setdefault(run, []).append(state)
    return states


def lastgood_cli(*args: str, home: Path, env: dict[str, str] | None = None,
               check_json: bool = False) -> subprocess.CompletedProcess[str]:
    """Run the real ``lastgood`` console script."""
    exe = Path(sys.executable).with_name("lastgood")
    full_env = dict(os.environ, LASTGOOD_HOME=str(home), **(env or {}))
    done = subprocess.run([str(exe), *args], capture_output=True, text=True, env=full_env, timeout=300)
    if check_json:
        json.loads(done.stdout)
    return done


def load_manifest() -> dict[str, Any]:
    return json.loads(SAMPLE_MANIFEST.read_text())


def tree_digest(root: Path) -> dict[str, str]:
    """Every entry under ``root`` (or ``root`` itself when it is a file): file hashes, link targets,
    special-file kinds — special files are never opened. Compared before/after to prove a read-only run."""
    import hashlib

    if root.is_file():
        return {root.name: hashlib.sha256(root.read_bytes()).hexdigest()}
    out = {}
    for path in sorted(root.rglob("*")):
        rel = str(path.relative_to(root))
        if path.is_symlink():
            out[rel] = "link:" + os.readlink(path)
        elif path.is_file():
            out[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
        else:
            out[rel] = "dir" if path.is_dir() else "special"
    return out


def rows_and_findings(catalog: Any) -> tuple[list[tuple], list[tuple]]:
    """Every checkpoint's status and every finding in an index, in a fixed order: two refreshes
    that must agree compare these."""
    with catalog.connect() as con:
        rows = con.execute("""SELECT checkpoint_id, status, status_reason, verified FROM checkpoints
                              ORDER BY checkpoint_id""").fetchall()
        found = con.execute("""SELECT checkpoint_id, "check", severity, message, depth FROM findings
                               ORDER BY ALL""").fetchall()
    return rows, found


def langgraph_db(request: Any, tmp_path: Path, name: str) -> tuple[str, Any]:
    """(store URL, a context manager giving a fresh LangGraph saver on it) for a ``db`` fixture
    parametrized ``sqlite``/``postgres``: a SQLite file in ``tmp_path``, or a new PostgreSQL database."""
    import sqlite3
    from contextlib import contextmanager

    if request.param == "sqlite":
        path = tmp_path / "lg.sqlite"

        @contextmanager
        def sqlite_saver() -> Any:
            from langgraph.checkpoint.sqlite import SqliteSaver

            conn = sqlite3.connect(str(path), check_same_thread=False)
            try:
                yield SqliteSaver(conn)
            finally:
                conn.close()
        return str(path), sqlite_saver
    dsn = request.getfixturevalue("pg_create_database")(name)

    @contextmanager
    def pg_saver() -> Any:
        from langgraph.checkpoint.postgres import PostgresSaver

        with PostgresSaver.from_conn_string(dsn) as saver:
            saver.setup()
            yield saver
    return dsn, pg_saver


def kill_loop(run_child: Any, check: Any, seed: int, trials: int, delay: float, *, needed: int = 2,
              min_trials: int = 6, budget: float = 6.0, settle: Any = None, prepare: Any = None) -> int:
    """Fork a child that runs ``run_child(prepare())`` (``run_child()`` without ``prepare``: made in the
    child before it says it runs) until it is SIGKILLed at a random moment within ``delay`` seconds;
    ``check()`` the store before anything repairs it (1: the kill landed inside an action), then
    ``settle()``. Stops after ``min_trials`` once ``needed`` kills landed and ``budget`` seconds passed.
    How many kills landed inside an action."""
    import random
    import signal
    import time

    rng = random.Random(seed)
    landed, started = 0, time.monotonic()
    for trial in range(trials):
        if trial >= min_trials and landed >= needed and time.monotonic() - started > budget:
            break  # enough: more kills only when none has landed inside an action yet
        ready, ready_w = os.pipe()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child is killed
            try:
                os.close(ready)
                made = prepare() if prepare is not None else None
                os.write(ready_w, b".")  # running: the kill's delay starts now, not at a busy machine's fork
                run_child(made) if prepare is not None else run_child()
            finally:
                os._exit(3)
        os.close(ready_w)
        os.read(ready, 1)
        os.close(ready)
        time.sleep(rng.uniform(0.0, delay))
        os.kill(pid, signal.SIGKILL)
        _, status = os.waitpid(pid, 0)
        assert os.WIFSIGNALED(status), f"trial {trial}: the child ended on its own ({status})"
        landed += check()  # before any repair
        if settle is not None:
            settle()  # the next action completes what was interrupted
    return landed
