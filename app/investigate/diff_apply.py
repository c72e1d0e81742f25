"""Apply a diff's changes to A to get B (the coordinates are described in lastgood.investigate.diff).

Parents first; within a list: removals and moves out (A's indexes), then insertions
in ascending B order, then changes (B's indexes). Used by the tests' property
"applying the reported changes to A gives B", and by anyone replaying a diff.
"""

from __future__ import annotations

from typing import Any

from lastgood.investigate.diff import Change
from lastgood.investigate.diff_values import map_tree


def apply_changes(a: Any, changes: list[Change]) -> Any:
    """B, rebuilt from a deep copy of ``a`` and the changes (see the module docstring)."""
    doc: list[Any] = [map_tree(a, lambda _k, v: v)]
    by_parent: dict[tuple[str, ...], list[Change]] = {}
    for change in changes:
        by_parent.setdefault(_parent_tokens(change.path), []).append(change)
    for parent in sorted(by_parent, key=lambda p: -1 if p == _ROOT_PARENT else len(p)):
        _apply_at(doc, parent, by_parent[parent])
    return doc[0]


_ROOT_PARENT: tuple[str, ...] = ("\x00root",)


def _parent_tokens(pointer: str) -> tuple[str, ...]:
    return tuple(_split(pointer)[:-1]) if pointer else _ROOT_PARENT


def _split(pointer: str) -> list[str]:
    return [t.replace("~1", "/").replace("~0", "~") for t in pointer.split("/")[1:]]


def _apply_at(doc: list[Any], parent: tuple[str, ...], changes: list[Change]) -> None:
    if parent == _ROOT_PARENT:  # the root itself changed type or value
        doc[0] = changes[-1].new
        return
    container = _resolve(doc[0], parent)
    if isinstance(container, list):
        _apply_list(container, changes)
        return
    for change in changes:
        key = _dict_key(container, _split(change.path)[-1])
        if change.op == "remove":
            del container[key]
        else:
            container[key] = change.new


def _dict_key(container: dict, token: str) -> Any:
    if token in container:
        return token
    for key in container:  # non-string keys (msgpack ints) are named by their text
        if str(key) == token:
            return key
    return token


def _resolve(root: Any, tokens: tuple[str, ...]) -> Any:
    node = root
    for token in tokens:
        node = node[int(token)] if isinstance(node, list) else node[_dict_key(node, token)]
    return node


def _apply_list(items: list, changes: list[Change]) -> None:
    gone = {int(_split(c.path)[-1]) for c in changes if c.op == "remove"}
    moved = {int(_split(c.from_path or "")[-1]): c for c in changes if c.op == "move"}
    moved_values = {int(_split(c.path)[-1]): items[i] for i, c in moved.items()}
    kept = [v for i, v in enumerate(items) if i not in gone and i not in moved]
    inserts = {int(_split(c.path)[-1]): c.new for c in changes if c.op == "add"}
    inserts.update(moved_values)
    for j in sorted(inserts):
        kept.insert(j, inserts[j])
    for change in changes:
        if change.op in ("change", "type_change"):
            kept[int(_split(change.path)[-1])] = change.new
    items[:] = kept
