"""A training store's prune with ``--archive URL``: checkpoints copied to the archive, verified, then deleted.

The archive (any fsspec URL: another disk, ``s3://…``) is laid out as::

    <archive>/<store name>/<prune id>/<checkpoint path>     every file of each pruned checkpoint
    <archive>/<store name>/<prune id>/manifest.json         the prune's journal entry (self-describing)
    <archive>/<store name>/<prune id>/restored-<undo>.json  written by each undo (the copy stays)

Each item of the manifest names its files with their sizes and sha256 (hashed under the lock,
before the intent is written); the work is the intent's operations of
:mod:`lastgood.readers.common.exportops` (an ``export`` per checkpoint: copy, check, then delete
the source; an undo's ``import``: copy back into a staging folder, check, rename into place), so
a kill at any point is rolled forward by the next action, and a source is never deleted before its
copy is verified. The intent holds the archive's URL without credentials; a process rolling it
forward opens it with the storage options fsspec takes from the environment.
"""

from __future__ import annotations

import os
import posixpath
from collections.abc import Mapping
from typing import Any

from lastgood.errors import UsageError
from lastgood.readers import journal as jr
from lastgood.readers.common.exportops import sha256_of, tree, unreachable
from lastgood.readers.common.fsutil import is_local
from lastgood.readers.common.urls import display_url
from lastgood.readers.training_folders import LASTGOOD_DIR

INCOMING = f"{LASTGOOD_DIR}/incoming"  # an undo's copies, checked before they are renamed into place


def store_name(url: str) -> str:
    """The store's folder name in the archive (its last path part, made filename-safe)."""
    last = display_url(url).rstrip("/").rsplit("/", 1)[-1]
    return "".join(c if c.isalnum() or c in "-_." else "-" for c in last).strip(".") or "store"


def prepare(recovery: Any, url: str, options: Mapping[str, Any], store_root: str) -> str:
    """Register and reach the archive before anything is written (an unreachable one fails with
    nothing done); refuse one inside the store. Returns the URL the intent holds."""
    shown = recovery.use_archive(url, options)
    fs, root = recovery.archive_fs(shown)
    if is_local(fs):
        inside = os.path.realpath(root) + "/"
        if inside.startswith(os.path.realpath(store_root).rstrip("/") + "/"):
            raise UsageError(f"the archive {shown} is inside the store: give one outside it (without --archive, "
                             f"pruned checkpoints are renamed into {LASTGOOD_DIR}/archive/)")
        os.makedirs(root, exist_ok=True)
        return shown
    try:
        fs.exists(root)
    except Exception as exc:  # an object store's client error
        raise unreachable(shown, exc) from None
    return shown


def item(recovery: Any, piece: Any, prefix: str) -> dict[str, Any]:
    """A manifest item: where the checkpoint was and goes, its bytes, every file's size and sha256."""
    path = recovery._path(piece.rel)
    is_file = bool(recovery.fs.isfile(path))
    files = tree(recovery.fs, path)
    sha = {name: sha256_of(recovery.fs, path if is_file else f"{path}/{name}") for name in files}
    out = {"run_id": piece.run_id, "checkpoint_id": piece.checkpoint_id, "from": piece.rel,
           "to": f"{prefix}/{piece.rel}", "bytes": piece.size, "files": files, "sha256": sha}
    return {**out, "file": True} if is_file else out


def prune_ops(items: list[dict[str, Any]], shown: str, prefix: str) -> list[dict[str, Any]]:
    manifest = {"op": "archive-manifest", "archive": shown, "path": f"{prefix}/manifest.json"}
    return [manifest] + [{"op": "export", "archive": shown, "from": i["from"], "to": i["to"], "item": n}
                         for n, i in enumerate(items)]


def prefix_of(original: Mapping[str, Any]) -> str:
    note = original.get("note") if isinstance(original.get("note"), Mapping) else {}
    return posixpath.dirname(str(note.get("archive_manifest") or ""))


def state(recovery: Any, shown: str, entry: Mapping[str, Any]) -> str | None:
    """Why a manifest item cannot come back as it went (None: it can)."""
    if recovery.fs.exists(recovery._path(str(entry["from"]))):
        return f"{entry['from']} exists again (written since the prune)"
    fs, path = recovery.archive_path(shown, str(entry["to"]))
    try:
        found = tree(fs, path)
    except Exception as exc:  # an object store's client error
        raise unreachable(shown, exc) from None
    if not found:
        return f"{entry['to']} is not in the archive {shown} any more"
    if found != entry.get("files"):
        return f"{entry['to']} changed in the archive {shown} (its files differ from the manifest)"
    return None


def import_op(shown: str, entry: Mapping[str, Any], undo_id: str) -> dict[str, Any]:
    return {"op": "import", "archive": shown, "from": entry["to"], "to": entry["from"],
            "stage": f"{INCOMING}/{undo_id}/{entry['from']}", "files": entry["files"], "sha256": entry["sha256"],
            "file": bool(entry.get("file"))}


def marker_op(shown: str, original: Mapping[str, Any], undo: Mapping[str, Any],
              restored: list[str]) -> dict[str, Any]:
    """``restored-<undo>.json`` beside the manifest: the archive copy stays, and says it came back."""
    text = jr.canonical({"undo": undo["id"], "undo_of": original["id"], "time": undo.get("time"),
                         "operator": undo.get("operator"), "reason": undo.get("reason"), "restored": restored})
    return {"op": "archive-write", "archive": shown, "path": f"{prefix_of(original)}/restored-{undo['id']}.json",
            "text": text.decode()}


def space(noun: str, where: str, shown: str, prefix: str, items: list[dict[str, Any]]) -> dict[str, Any]:
    returned = sum(sum(int(s) for s in i["files"].values()) for i in items)
    return {"returned_bytes": returned, "free_bytes": 0, "vacuumed": False,
            "notes": [f"pruned {noun} were copied to {shown}/{prefix}/ (every file's sha256 checked), then deleted "
                      f"from the {where}: {returned} bytes are back on its disk (`lastgood undo` copies them back)"]}
