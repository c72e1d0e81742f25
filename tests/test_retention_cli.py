"""``lastgood storage | prune | pin | unpin`` and ``lastgood undo`` of a prune, through the real
console script: JSON shapes (docs/cli.md), exit codes, confirmation."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

from tests.helpers import lastgood_cli, write_store

ENV = {"LASTGOOD_OPERATOR": "tester"}


def cli(*args: str, home: Path, rc: int = 0) -> Any:
    done = lastgood_cli(*args, "--format", "json", home=home, env=ENV)
    assert done.returncode == rc, done.stderr
    assert "Traceback" not in done.stderr
    return json.loads(done.stdout) if done.stdout.strip() else done.stderr


def test_dry_run_apply_journal_and_undo(tmp_path: Path) -> None:
    url, home = str(tmp_path / "store"), tmp_path / "home"
    write_store(url, runs=2, steps=8)
    plan = cli("prune", url, "--keep-last", "2", "--dry-run", home=home)
    assert plan["action"] == "prune" and plan["dry_run"] and plan["action_id"] is None
    assert plan["policy"] == {"last": 2} and plan["summary"]["checkpoints"] == 16
    assert len(plan["forget"]) == plan["summary"]["forget"] and len(plan["keep"]) == plan["summary"]["keep"]
    assert {"run_id", "namespace", "checkpoint_id", "created_at", "step", "size_bytes"} <= set(plan["forget"][0])
    assert all(k["reasons"] for k in plan["keep"]) and plan["archive"].endswith(".lastgood-archive")
    assert {"run_id", "checkpoints", "keep", "forget", "bytes_forget", "stale", "goes_whole"} <= set(plan["runs"][0])
    assert cli("prune", url, "--keep-last", "2", "--dry-run", "--summary", home=home).get("forget") is None
    assert "reason is required" in cli("prune", url, "--keep-last", "2", "--yes", home=home, rc=2)
    assert "not a terminal" in cli("prune", url, "--keep-last", "2", "--reason", "x", home=home, rc=2)
    done = cli("prune", url, "--keep-last", "2", "--reason", "tidy", "--yes", home=home)
    assert done["action"] == "prune" and done["action_id"].startswith("act-") and not done["dry_run"]
    assert done["checkpoints"] == plan["summary"]["forget"] and done["archive"] == plan["archive"]
    assert len(cli("ls", url, home=home)) == plan["summary"]["keep"]
    journal = cli("journal", url, home=home)
    assert journal["chain_ok"] and journal["actions"][0]["action"] == "prune"
    assert journal["actions"][0]["operator"] == "tester" and journal["actions"][0]["note"]["count"] == done["checkpoints"]
    preview = cli("undo", url, done["action_id"], "--dry-run", home=home)
    assert preview["dry_run"] and preview["undo_of"] == done["action_id"] and preview["conflicts"] == []
    back = cli("undo", url, done["action_id"][:12], "--reason", "back", "--yes", home=home)
    assert back["action"] == "undo" and back["undo_of"] == done["action_id"] and back["checkpoints"] == done["checkpoints"]
    assert len(cli("ls", url, home=home)) == 16
    assert "already undone" in cli("undo", url, done["action_id"], "--reason", "again", "--yes", home=home, rc=2)


def test_pins_saved_policy_and_storage(tmp_path: Path) -> None:
    url, home = str(tmp_path / "store"), tmp_path / "home"
    write_store(url, runs=2, steps=6)
    rows = cli("ls", url, home=home)
    oldest = rows[0]["checkpoint_id"]
    assert "reason is required" in cli("pin", url, oldest, home=home, rc=2)
    pinned = cli("pin", url, oldest[:-4], "--reason", "evidence", home=home)
    assert pinned["action"] == "pin" and pinned["target"] == oldest and pinned["action_id"].startswith("act-")
    assert cli("pin", url, home=home)["pins"][0]["checkpoint_id"] == oldest
    assert "no retention policy" in cli("prune", url, "--dry-run", home=home, rc=2)
    saved = cli("prune", url, "--keep-last", "1", "--save-policy", "--reason", "default", "--yes", home=home)
    assert saved["policy"] == {"last": 1}
    plan = cli("prune", url, "--dry-run", home=home)  # the saved policy
    assert plan["policy_source"] == "saved" and plan["summary"]["forget"] == 0
    storage = cli("storage", url, home=home)
    assert storage["policy"]["options"] == ["--keep-last 1"] and storage["pins"][0]["checkpoint_id"] == oldest
    assert {"store", "footprint", "tables", "channels", "agents", "runs", "growth", "rate", "projection",
            "largest_runs", "largest_checkpoints", "stale_runs", "stale_after"} <= set(storage)
    assert oldest in {r["checkpoint_id"] for r in cli("ls", url, home=home)}  # the pin kept it
    unpinned = cli("unpin", url, oldest, "--reason", "done", home=home)
    assert unpinned["action"] == "unpin" and cli("pin", url, home=home)["pins"] == []
    assert "not pinned" in cli("unpin", url, oldest, "--reason", "again", home=home, rc=2)


def test_bad_durations_and_counts_are_usage_errors(tmp_path: Path) -> None:
    url, home = str(tmp_path / "store"), tmp_path / "home"
    write_store(url, runs=1, steps=3)
    assert "duration" in cli("prune", url, "--keep-within", "2 weeks", "--dry-run", home=home, rc=2)
    assert "unlimited" in cli("prune", url, "--keep-daily", "many", "--dry-run", home=home, rc=2)


def test_sqlite_prune_with_vacuum_gives_the_space_back(tmp_path: Path) -> None:
    from langgraph.checkpoint.sqlite import SqliteSaver

    from tests.langgraph_graphs import build_tools

    path, home = tmp_path / "lg.sqlite", tmp_path / "home"
    with sqlite3.connect(str(path), check_same_thread=False) as conn:
        for n in range(10):
            build_tools(SqliteSaver(conn), thread_id=f"t-{n}")
    done = cli("prune", str(path), "--keep-last", "1", "--reason", "space", "--yes", "--vacuum", home=home)
    assert done["space"]["vacuumed"] and done["space"]["after_bytes"] < done["space"]["before_bytes"]
    assert done["space"]["auto_vacuum"] == "incremental"
    with sqlite3.connect(str(path)) as conn:
        assert conn.execute("PRAGMA auto_vacuum").fetchone()[0] == 2
    again = cli("prune", str(path), "--keep-last", "1", "--reason", "nothing", "--yes", home=home)
    assert again["action_id"] == "" and again["checkpoints"] == 0


def test_a_format_without_retention_says_it_cannot_prune(tmp_path: Path) -> None:
    import shutil

    from tests.helpers import ROOT

    folder, home = tmp_path / "model", tmp_path / "home"  # a save_pretrained folder: no resume pointer
    folder.mkdir()
    shutil.copyfile(ROOT / "sample_data" / "training" / "hf_trainer" / "checkpoint-16" / "model.safetensors",
                    folder / "model.safetensors")
    message = cli("prune", str(folder), "--keep-last", "1", "--dry-run", home=home, rc=2)
    assert "cannot prune" in message
    assert cli("storage", str(folder), home=home)["store"]["prunable"] is False
