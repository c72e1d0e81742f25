"""Print, as JSON, what CrewAI would resume each flow run from.

    .venv-fixtures/crewai/bin/python sample_data/generators/crewai/readback.py \
        sample_data/crewai_flows.db FLOW_UUID [FLOW_UUID ...]
    .venv-fixtures/crewai/bin/python sample_data/generators/crewai/readback.py \
        sample_data/crewai_flows.db --all

Reads through CrewAI's own ``SQLiteFlowPersistence`` API only:

* ``load_state(flow_uuid)`` -- the state ``Flow.kickoff(inputs={"id": uuid})``
  restores before re-running the flow from its ``@start`` method(s) (the row
  with the highest ``flow_states.id`` for that uuid);
* ``load_pending_feedback(flow_uuid)`` -- the ``(state, PendingFeedbackContext)``
  that ``Flow.from_pending(uuid)`` + ``resume(feedback)`` continue from, or
  None when the run is not paused for human feedback.

Constructing ``SQLiteFlowPersistence(path)`` is not read-only: its
``init_db`` runs ``PRAGMA journal_mode=WAL`` and ``CREATE TABLE IF NOT
EXISTS`` on the file. So this script copies the store (and a ``-wal`` file if
one exists) into a temporary directory and points the API at the copy; the
store itself is never opened for writing.

``--all`` lists the uuids with ``SELECT DISTINCT flow_uuid`` on the copy (the
API has no "list runs" call); everything else goes through the API.

Output: ``{"store", "crewai_version", "runs": [{"flow_uuid", "found",
"resume_state", "pending_feedback": null | {"state", "context"}}]}``. A uuid
with no rows gets ``"found": false`` and the exit status is 1.
"""

from __future__ import annotations

import os
import tempfile

_SANDBOX_HOME = tempfile.mkdtemp(prefix="crewai-readback-home-")
os.environ["HOME"] = _SANDBOX_HOME  # CrewAI writes side files under ~/.local/share
os.environ["XDG_DATA_HOME"] = os.path.join(_SANDBOX_HOME, ".local", "share")
os.environ.setdefault("OTEL_SDK_DISABLED", "true")
os.environ.setdefault("CREWAI_DISABLE_TELEMETRY", "true")
os.environ.setdefault("CREWAI_DISABLE_TRACKING", "true")
os.environ.setdefault("CREWAI_TRACING_ENABLED", "false")

import argparse
import dataclasses
import json
import logging
import shutil
import sqlite3
import sys
import warnings
from datetime import datetime
from typing import Any


def _jsonable(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return value


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Read CrewAI flow runs back through SQLiteFlowPersistence.")
    ap.add_argument("store", help="path of the CrewAI flow_states SQLite database")
    ap.add_argument("flow_uuids", nargs="*", help="flow uuid(s) (state.id) to read")
    ap.add_argument("--all", action="store_true", help="every flow_uuid in the store")
    args = ap.parse_args(argv)
    if not args.flow_uuids and not args.all:
        ap.error("give at least one FLOW_UUID, or --all")
    logging.basicConfig(level=logging.CRITICAL)
    warnings.simplefilter("ignore")

    import crewai
    from crewai.flow.persistence import SQLiteFlowPersistence

    src = os.path.abspath(args.store)
    if not os.path.isfile(src):
        raise SystemExit(f"no such store: {src}")
    work = tempfile.mkdtemp(prefix="crewai-readback-")
    rc = 0
    try:
        copy = os.path.join(work, os.path.basename(src))
        shutil.copy2(src, copy)
        for suffix in ("-wal",):  # an un-checkpointed WAL holds committed rows
            if os.path.exists(src + suffix):
                shutil.copy2(src + suffix, copy + suffix)
        persistence = SQLiteFlowPersistence(copy)

        uuids = list(dict.fromkeys(args.flow_uuids))
        if args.all:
            con = sqlite3.connect(copy)
            try:
                rows = con.execute(
                    "SELECT flow_uuid FROM flow_states GROUP BY flow_uuid ORDER BY MIN(id)").fetchall()
            finally:
                con.close()
            uuids += [r[0] for r in rows if r[0] not in uuids]

        runs = []
        for flow_uuid in uuids:
            state = persistence.load_state(flow_uuid)
            pending = persistence.load_pending_feedback(flow_uuid)
            item: dict[str, Any] = {
                "flow_uuid": flow_uuid,
                "found": state is not None or pending is not None,
                "resume_state": state,
                "pending_feedback": None if pending is None else {
                    "state": pending[0],
                    "context": _jsonable(pending[1]),
                },
            }
            if not item["found"]:
                rc = 1
            runs.append(item)
        result = {"store": src, "crewai_version": crewai.__version__, "runs": runs}
    finally:
        shutil.rmtree(work, ignore_errors=True)
        shutil.rmtree(_SANDBOX_HOME, ignore_errors=True)
    json.dump(result, sys.stdout, indent=2, ensure_ascii=False)
    sys.stdout.write("\n")
    return rc


if __name__ == "__main__":
    sys.exit(main())
