"""The progress rows of prunes and undos (table ``lastgood_retention``), read by both the retention
backend and the recovery backend's ``pending()`` (so ``lastgood journal`` shows an interrupted one)."""

from __future__ import annotations

import json
from typing import Any

from lastgood.readers.common.urls import display_url

PROGRESS = "lastgood_retention"
PARENTS = "lastgood_retention_parents"
PENDING_SQL = f"""SELECT action_id, kind, prune_id, archive, manifest_sha256, total, done, owner, updated
    FROM {PROGRESS} WHERE state = 'running' ORDER BY updated"""
PENDING_FIELDS = ("action_id", "kind", "prune_id", "archive", "manifest_sha256", "total", "done", "owner", "updated")


def read_pending(conn: Any) -> list[dict[str, Any]]:
    """Prunes and undos begun and not completed (the table exists: the caller checked)."""
    out = []
    for row in conn.execute(PENDING_SQL).fetchall():
        item = dict(zip(PENDING_FIELDS, row))
        item["archive"] = display_url(str(item["archive"]))
        item["owner"] = parse_owner(item["owner"])
        item["entry"] = {"action": item["kind"], "id": item["action_id"], "run_id": None,
                         "new_head": f"{item['done']}/{item['total']} checkpoints done"}
        out.append(item)
    return out


def parse_owner(text: Any) -> dict[str, Any]:
    try:
        value = json.loads(text) if text else {}
    except (TypeError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}
