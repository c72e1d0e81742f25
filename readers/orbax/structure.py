"""What an Orbax step folder holds, read from its small JSON files, and its structure checks.

A step folder (``<step>/``, written by ``CheckpointManager``): ``_CHECKPOINT_METADATA`` (JSON:
``item_handlers``, ``metrics``, ``init_timestamp_nsecs``, ``commit_timestamp_nsecs``,
``custom_metadata``), ``commit_success.txt`` (the commit marker), and one folder per item:

- JSON items (``JsonCheckpointHandler``): ``<item>/<item>``, a JSON document;
- array trees (``StandardCheckpointHandler``, ``PyTreeCheckpointHandler``): ``_METADATA`` (JSON
  ``tree_metadata``: per leaf its key path and ``value_metadata`` — type and ``write_shape``),
  ``array_metadatas/process_N``, ``_sharding``, and the values in a tensorstore OCDBT database:
  ``manifest.ocdbt`` (magic ``0c db 3a 2a``) + ``d/<hex>`` data files, per process
  ``ocdbt.process_N/{manifest.ocdbt, d/…}``. The values are zstd-compressed B-tree and zarr chunks:
  **not decoded without tensorstore**; their structure is checked (manifests present, with the
  magic, data files present and non-empty).
"""

from __future__ import annotations

import json
import posixpath
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from lastgood.checks import Check
from lastgood.errors import ReaderError
from lastgood.readers.training_folders.folder import Entry, Folder

CHECKPOINT_METADATA = "_CHECKPOINT_METADATA"
COMMIT = "commit_success.txt"
TREE_METADATA = "_METADATA"
MANIFEST = "manifest.ocdbt"
OCDBT_MAGIC = bytes.fromhex("0cdb3a2a")
TMP_MARK = ".orbax-checkpoint-tmp"
NOT_DECODED = "array values are stored by tensorstore (OCDBT): not decoded without tensorstore"


@dataclass
class Problem:
    check: Check
    severity: str
    message: str


@dataclass
class Item:
    """One item folder of a step."""

    name: str
    files: list[Entry] = field(default_factory=list)  # relative to the item folder

    def has(self, rel: str) -> bool:
        return any(e.rel == rel for e in self.files)


def items_of(files: list[Entry], step_rel: str) -> tuple[list[Entry], dict[str, Item]]:
    """The step's own files, and its items with their files (paths relative to the item)."""
    own, items = [], {}
    cut = len(step_rel) + 1
    for entry in files:
        rel = entry.rel[cut:]
        head, _, rest = rel.partition("/")
        if not rest:
            if entry.kind != "dir":
                own.append(Entry(rel, entry.kind, entry.size, entry.mtime))
            continue
        item = items.setdefault(head, Item(head))
        item.files.append(Entry(rest, entry.kind, entry.size, entry.mtime))
    return own, items


def read_json(folder: Folder, rel: str) -> tuple[Any, Problem | None]:
    try:
        return json.loads(folder.read_small(rel)), None
    except FileNotFoundError:
        return None, Problem(Check.BLOB_MISSING, "error", f"{rel} is missing")
    except (OSError, ReaderError) as exc:
        return None, Problem(Check.METADATA_INVALID, "error", f"{rel}: {exc}")
    except ValueError as exc:
        return None, Problem(Check.METADATA_INVALID, "error", f"{rel} is not JSON: {exc}")


def tree_leaves(metadata: Any) -> list[tuple[list[str], dict[str, Any]]]:
    """``(key path, value_metadata)`` of every leaf an array tree's ``_METADATA`` names."""
    tree = metadata.get("tree_metadata") if isinstance(metadata, dict) else None
    out = []
    for name, leaf in (tree or {}).items() if isinstance(tree, dict) else []:
        if not isinstance(leaf, dict):
            continue
        keys = [str(k.get("key")) for k in leaf.get("key_metadata") or [] if isinstance(k, dict)] or [str(name)]
        value = leaf.get("value_metadata") if isinstance(leaf.get("value_metadata"), dict) else {}
        out.append((keys, value))
    return out


def leaf_value(value: dict[str, Any]) -> dict[str, Any]:
    """A leaf as the state shows it: its type and shape (values not decoded)."""
    shape = value.get("write_shape")
    out: dict[str, Any] = {"type": value.get("value_type")}
    if isinstance(shape, list):
        out["shape"] = shape
    if value.get("dtype") is not None:
        out["dtype"] = value.get("dtype")
    return out


def nest(leaves: list[tuple[list[str], dict[str, Any]]]) -> dict[str, Any]:
    """The leaves as a nested dict by key path."""
    root: dict[str, Any] = {}
    for keys, value in leaves:
        node = root
        for key in keys[:-1]:
            child = node.setdefault(key, {})
            node = child if isinstance(child, dict) else {}
        node[keys[-1]] = leaf_value(value)
    return root


# ---- structure checks -------------------------------------------------------------------------


def step_problems(folder: Folder, step_rel: str, own: list[Entry], items: dict[str, Item],
                  data: bool) -> Iterator[Problem]:
    names = {e.rel for e in own}
    if posixpath.basename(step_rel).find(TMP_MARK) >= 0:
        yield Problem(Check.INCOMPLETE, "error", "an unfinished save (an .orbax-checkpoint-tmp folder): "
                      "Orbax never finalized it")
    elif COMMIT not in names:
        yield Problem(Check.INCOMPLETE, "error", f"no {COMMIT}: the commit was never confirmed, yet "
                      "Orbax's latest_step() would pick this step")
    if CHECKPOINT_METADATA in names:
        _, problem = read_json(folder, f"{step_rel}/{CHECKPOINT_METADATA}")
        if problem:
            yield problem
    for item in items.values():
        if COMMIT in names and not item.has(COMMIT):
            yield Problem(Check.INCOMPLETE, "warning", f"{item.name}: the step is committed, its item has no {COMMIT}")
        yield from item_problems(folder, f"{step_rel}/{item.name}", item, data)


def item_problems(folder: Folder, item_rel: str, item: Item, data: bool) -> Iterator[Problem]:
    if item.has(TREE_METADATA):
        metadata, problem = read_json(folder, f"{item_rel}/{TREE_METADATA}")
        if problem:
            yield problem
            return
        if isinstance(metadata, dict) and metadata.get("use_ocdbt"):
            yield from ocdbt_problems(folder, item_rel, item)
            if data:
                yield Problem(Check.UNDECODABLE, "info", f"{item.name}: {NOT_DECODED}")
    elif item.has(item.name):
        _, problem = read_json(folder, f"{item_rel}/{item.name}")
        if problem:
            yield problem


def ocdbt_problems(folder: Folder, item_rel: str, item: Item) -> Iterator[Problem]:
    """Manifests present (with the OCDBT magic) and data files present and non-empty, for the
    item's database and each process's."""
    roots = [""] + sorted({e.rel.split("/", 1)[0] for e in item.files if e.rel.startswith("ocdbt.process_")})
    for root in roots:
        where = f"{root}/" if root else ""
        manifest = f"{where}{MANIFEST}"
        if not item.has(manifest):
            yield Problem(Check.BLOB_MISSING, "error", f"{item.name}/{manifest} is missing (OCDBT database "
                          "without its manifest)")
        else:
            try:
                head = folder.read_range(f"{item_rel}/{manifest}", 0, 4)
            except (OSError, ReaderError) as exc:
                yield Problem(Check.METADATA_INVALID, "error", f"{item.name}/{manifest}: {exc}")
                continue
            if head != OCDBT_MAGIC:
                yield Problem(Check.METADATA_INVALID, "error", f"{item.name}/{manifest}: not an OCDBT manifest "
                              f"(starts {head.hex()})")
        data = [e for e in item.files if e.rel.startswith(f"{where}d/") and e.kind != "dir"]
        empty = [e for e in data if not e.size]
        if empty:
            yield Problem(Check.SIZE_MISMATCH, "error", f"{item.name}: {len(empty)} empty OCDBT data file(s): "
                          + ", ".join(e.rel for e in empty[:3]))
