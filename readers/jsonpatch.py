"""RFC 6902 JSON Patch: make a patch between two plain-data states, apply one.

Incremental native checkpoints store a patch against the parent's state.
``apply_patch`` never mutates its input and raises PatchError with the failing
operation when a patch does not apply (a broken incremental chain).
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

Op = dict[str, Any]


class PatchError(ValueError):
    """A patch operation could not be applied."""


def escape(token: str) -> str:
    return token.replace("~", "~0").replace("/", "~1")


def unescape(token: str) -> str:
    return token.replace("~1", "/").replace("~0", "~")


def split_pointer(pointer: str) -> list[str]:
    if pointer == "":
        return []
    if not pointer.startswith("/"):
        raise PatchError(f"invalid JSON pointer {pointer!r}")
    return [unescape(t) for t in pointer[1:].split("/")]


def make_patch(old: Any, new: Any) -> list[Op]:
    """Operations turning ``old`` into ``new`` (both plain JSON-like data)."""
    return list(_diff(old, new, ""))


def _diff(old: Any, new: Any, path: str) -> Iterator[Op]:
    if type(old) is not type(new):
        yield {"op": "replace", "path": path, "value": new}
    elif isinstance(old, dict):
        yield from _diff_dict(old, new, path)
    elif isinstance(old, list):
        yield from _diff_list(old, new, path)
    elif old != new:
        yield {"op": "replace", "path": path, "value": new}


def _diff_dict(old: dict, new: dict, path: str) -> Iterator[Op]:
    for key in old:
        if key not in new:
            yield {"op": "remove", "path": f"{path}/{escape(str(key))}"}
    for key, value in new.items():
        child = f"{path}/{escape(str(key))}"
        if key in old:
            yield from _diff(old[key], value, child)
        else:
            yield {"op": "add", "path": child, "value": value}


def _diff_list(old: list, new: list, path: str) -> Iterator[Op]:
    common = min(len(old), len(new))
    for i in range(common):
        yield from _diff(old[i], new[i], f"{path}/{i}")
    for i in range(len(old) - 1, common - 1, -1):
        yield {"op": "remove", "path": f"{path}/{i}"}
    for i in range(common, len(new)):
        yield {"op": "add", "path": f"{path}/-", "value": new[i]}


def apply_patch(doc: Any, patch: list[Op]) -> Any:
    """A new document: ``doc`` with every operation of ``patch`` applied."""
    if not isinstance(patch, list):
        raise PatchError("a patch must be a list of operations")
    result = copy.deepcopy(doc)
    for index, op in enumerate(patch):
        try:
            result = _apply_one(result, op)
        except (KeyError, IndexError, TypeError, ValueError) as exc:
            raise PatchError(f"operation {index} {_describe(op)} does not apply: {exc}") from None
    return result


def _describe(op: Any) -> str:
    if isinstance(op, dict):
        return f"{op.get('op')} {op.get('path')!r}"
    return repr(op)[:60]


def _apply_one(doc: Any, op: Op) -> Any:
    kind = op["op"]
    if kind in ("add", "replace", "test"):
        value = op["value"]
    if kind == "add":
        return _add(doc, op["path"], copy.deepcopy(value))
    if kind == "remove":
        _remove(doc, op["path"])
        return doc
    if kind == "replace":
        _remove(doc, op["path"]) if op["path"] else None
        return _add(doc, op["path"], copy.deepcopy(value))
    if kind == "move":
        moved = _get(doc, op["from"])
        _remove(doc, op["from"])
        return _add(doc, op["path"], moved)
    if kind == "copy":
        return _add(doc, op["path"], copy.deepcopy(_get(doc, op["from"])))
    if kind == "test":
        if _get(doc, op["path"]) != value:
            raise ValueError(f"test failed at {op['path']!r}")
        return doc
    raise ValueError(f"unknown op {kind!r}")


def _get(doc: Any, pointer: str) -> Any:
    for token in split_pointer(pointer):
        doc = doc[_index(doc, token)] if isinstance(doc, list) else doc[token]
    return doc


def _parent(doc: Any, pointer: str) -> tuple[Any, str]:
    tokens = split_pointer(pointer)
    if not tokens:
        raise ValueError("the root has no parent")
    return _get(doc, "".join(f"/{escape(t)}" for t in tokens[:-1])), tokens[-1]


def _index(seq: list, token: str, allow_end: bool = False) -> int:
    if allow_end and token == "-":
        return len(seq)
    if not token.isdigit() or (len(token) > 1 and token.startswith("0")):
        raise ValueError(f"bad array index {token!r}")
    i = int(token)
    if i > len(seq) or (i == len(seq) and not allow_end):
        raise IndexError(f"index {i} out of range")
    return i


def _add(doc: Any, pointer: str, value: Any) -> Any:
    if pointer == "":
        return value
    parent, token = _parent(doc, pointer)
    if isinstance(parent, list):
        parent.insert(_index(parent, token, allow_end=True), value)
    elif isinstance(parent, dict):
        parent[token] = value
    else:
        raise TypeError(f"cannot add into a {type(parent).__name__}")
    return doc


def _remove(doc: Any, pointer: str) -> None:
    parent, token = _parent(doc, pointer)
    if isinstance(parent, list):
        del parent[_index(parent, token)]
    elif isinstance(parent, dict):
        del parent[token]
    else:
        raise TypeError(f"cannot remove from a {type(parent).__name__}")
