"""What each command's ``--help`` says beyond its options: a description and examples."""

from __future__ import annotations

import argparse

DESCRIPTIONS = {
    "index": "Index a store into the local DuckDB index (incremental: only what changed is read) and check what is new.",
    "ls": "List checkpoints with their status; damaged ones say why. Tables fit the terminal (--wide: full cells).",
    "show": "One checkpoint in full: its fields, findings, decoded state (secrets redacted) and pending writes.",
    "ui": "Open the dashboard on 127.0.0.1 (read-only unless --allow-write).",
    "verify": "Check a store: structure (fast), or every byte with --read-data. Exit 1 when errors are found.",
    "runs": "Every run's health: checkpoints by status, its last good checkpoint and its head.",
    "restore": "Make a run resume from a checkpoint: a new head equal to it is added; nothing is deleted.",
    "rollback": "Restore a checkpoint and mark everything after it superseded (kept for audit, hidden from resume).",
    "quarantine": "Mark a checkpoint bad by hand (never offered as a restore target), or lift it with --release.",
    "undo": "Undo an earlier action (journaled too); its id is in `lastgood journal`.",
    "journal": "The store's hash-chained journal of actions; exit 1 if the chain is broken or an action was interrupted.",
    "diff": "What changed between two checkpoints (same run, another run, or --store-b another store).",
    "steps": "What each checkpoint of a run changed against its parent.",
    "track": "One value (a JSON Pointer path) at every checkpoint of a run; a list by its length.",
    "diverge": "The first step where two runs' states differ.",
    "bisect": "The first checkpoint of a run where a condition holds (--where 'len(/messages) > 30').",
}

EXAMPLES = {
    "index": ["lastgood index sample_data/agents", "lastgood index ./checkpoints.sqlite --check data"],
    "ls": ["lastgood ls sample_data/agents --status corrupt", "lastgood ls ./db.sqlite --run thread-7 --format json"],
    "show": ["lastgood show sample_data/agents 01a19902-b570", "lastgood show ./db.sqlite thread-7/1f0a2b"],
    "ui": ["lastgood ui sample_data/agents ./checkpoints.sqlite", "lastgood ui s3://bucket/agents --allow-write"],
    "verify": ["lastgood verify sample_data/agents", "lastgood verify big-store --read-data --workers 8"],
    "runs": ["lastgood runs sample_data/agents", "lastgood runs ./db.sqlite --format json"],
    "restore": ["lastgood restore ./db.sqlite 1f0a2b --dry-run",
                "lastgood restore ./db.sqlite --last-good thread-7 --reason 'bad tool output' --yes"],
    "rollback": ["lastgood rollback ./db.sqlite thread-7 --to 1f0a2b --reason 'bad tool output' --yes"],
    "quarantine": ["lastgood quarantine ./db.sqlite 1f0a2b --reason 'hallucinated order'",
                   "lastgood quarantine ./db.sqlite 1f0a2b --release --reason 'false alarm'"],
    "undo": ["lastgood undo ./db.sqlite act-3f2c --reason 'restored the wrong run' --yes"],
    "journal": ["lastgood journal ./db.sqlite", "lastgood journal ./db.sqlite --run thread-7 --format json"],
    "diff": ["lastgood diff sample_data/agents trading-003/01a198b7-35 trading-003/01a198b9-d9",
             "lastgood diff ./db.sqlite 1f0a2b 01a198b7-35 --store-b sample_data/agents"],
    "steps": ["lastgood steps sample_data/agents trading-003"],
    "track": ["lastgood track sample_data/agents trading-003 /llm/messages"],
    "diverge": ["lastgood diverge sample_data/agents trading-003 trading-004"],
    "bisect": ["lastgood bisect sample_data/agents trading-003 --where 'len(/llm/messages) >= 30'"],
}


def describe(parser: argparse.ArgumentParser) -> None:
    """Give every subcommand of ``parser`` its description and examples (shown by ``--help``)."""
    for action in parser._actions:  # noqa: SLF001 - where argparse keeps the subcommands
        if isinstance(action, argparse._SubParsersAction):  # noqa: SLF001
            for name, sub in action.choices.items():
                sub.description = sub.description or DESCRIPTIONS.get(name)
                if name in EXAMPLES and not sub.epilog:
                    sub.epilog = "examples:\n" + "\n".join(f"  {line}" for line in EXAMPLES[name])
                    sub.formatter_class = argparse.RawDescriptionHelpFormatter
