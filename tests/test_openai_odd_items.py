"""An OpenAI Agents item holding an object where a role, type or tool name belongs is listed (with
the kind its type gives), never an exception that stops the listing of the whole store."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import pytest

from lastgood.readers.base import as_table
from lastgood.readers.openai_agents.reader import OpenAIAgentsReader
from tests.helpers import ROOT

ODD = [{"type": "function_call", "name": {"x": 1}, "call_id": "call_odd", "arguments": "{}"},
       {"role": ["user"], "type": {"t": 1}, "content": "x"}]


@pytest.mark.parametrize("sample", ["openai_agents.sqlite", "openai_agents_advanced.sqlite"])
def test_objects_in_name_fields_are_listed(tmp_path: Path, sample: str) -> None:
    path = tmp_path / sample
    shutil.copyfile(ROOT / "sample_data" / sample, path)
    with sqlite3.connect(path) as conn:
        ids = [conn.execute("INSERT INTO agent_messages (session_id, message_data) VALUES ('odd', ?)",
                            (json.dumps(item),)).lastrowid for item in ODD]
        if "advanced" in sample:
            for seq, mid in enumerate(ids):
                conn.execute("INSERT INTO message_structure (session_id, message_id, branch_id, message_type, "
                             "sequence_number, user_turn_number) VALUES ('odd', ?, 'main', ?, ?, NULL)",
                             (mid, ["function_call", "message"][seq], seq + 1))
    conn.close()
    reader = OpenAIAgentsReader(str(path))
    try:
        rows = [r for b in reader.scan().checkpoints for r in as_table(b).to_pylist() if r["run_id"] == "odd"]
    finally:
        reader.close()
    # a branch's rows take their kind from message_structure.message_type
    assert [r["trigger"] for r in rows] == ["tool_call", "assistant" if "advanced" in sample else "other"]
