"""RFC 6902 JSON Patch: make a patch between two plain-data states, apply one.

Incremental native checkpoints store a patch against the parent's state.
``apply_patch`` never mutates its input and raises PatchError with the failing
operation when a patch does not apply (a broken incremental chain).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from lastgood import limits

Op = dict[str, Any]


class PatchError(ValueError):
    """A patch operation could not be applied. ``too_large``: it would pass the budget."""

    def __init__(self, message: str, too_large: bool = False) -> None:
        super().__init__(message)
        self.too_large = too_large


def measure(value: Any, limit: int = limits.MAX_STATE_COST) -> tuple[int, int]:
    """(cost, depth) of ``value``, iteratively; counting stops once cost passes ``limit``.

    Cost is one per value plus one per dict key and per 256 characters of text:
    roughly what rendering the value costs (shared sub-objects count each time)."""
    cost, deepest = 0, 0
    stack = [(value, 1)]
    while stack and cost <= limit:
        node, depth = stack.pop()
        cost += 1
        if isinstance(node, dict):
            cost += len(node)
            deepest = max(deepest, depth)
            stack.extend((child, depth + 1) for child in node.values())
        elif isinstance(node, list):
            deepest = max(deepest, depth)
            stack.extend((child, depth + 1) for child in node)
        elif isinstance(node, str):
            cost += len(node) // 256
    return cost, deepest


class _Meter:
    """The size of the document being patched and the work left for measuring."""

    def __init__(self, size: int, budget: int) -> None:
        self.size = size
        self.budget = budget
        self.work = 4 * budget

    def _measure(self, value: Any) -> tuple[int, int]:
        cost, depth = measure(value, min(self.budget, self.work))
        self.work -= cost
        if self.work < 0:
            raise PatchError("patch needs more work than the budget allows", too_large=True)
        return cost, depth

    def place(self, value: Any, at_depth: int) -> int:
        """Check ``value`` may go ``at_depth`` levels down; returns its cost."""
        cost, depth = self._measure(value)
        if at_depth + depth > limits.MAX_DEPTH:
            raise PatchError(f"result would nest deeper than {limits.MAX_DEPTH} levels", too_large=True)
        return cost

    def add(self, value: Any, at_depth: int) -> None:
        self.size += self.place(value, at_depth)
        if self.size > self.budget:
            raise PatchError(f"result would be larger than {self.budget:,} values", too_large=True)

    def remove(self, value: Any) -> None:
        self.size = max(0, self.size - self._measure(value)[0])


def escape(token: str) -> str:
    return token.replace("~", "~0").replace("/", "~1")


def unescape(token: str) -> str:
    if "~" not in token:
        return token
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


MAX_SHIFT = 64


def _diff_list(old: list, new: list, path: str) -> Iterator[Op]:
    prefix = 0
    while prefix < min(len(old), len(new)) and old[prefix] == new[prefix]:
        prefix += 1
    shift = _window_shift(old, new, prefix)
    if shift:
        # a sliding window: items dropped at ``prefix``, the rest kept, new ones appended
        for _ in range(shift):
            yield {"op": "remove", "path": f"{path}/{prefix}"}
        for item in new[len(old) - shift:]:
            yield {"op": "add", "path": f"{path}/-", "value": item}
        return
    common = min(len(old), len(new))
    for i in range(prefix, common):
        yield from _diff(old[i], new[i], f"{path}/{i}")
    for i in range(len(old) - 1, common - 1, -1):
        yield {"op": "remove", "path": f"{path}/{i}"}
    for i in range(common, len(new)):
        yield {"op": "add", "path": f"{path}/-", "value": new[i]}


def _window_shift(old: list, new: list, prefix: int) -> int:
    """k > 0 when ``new`` is ``old`` with k items removed at ``prefix`` plus appended items."""
    rest = len(old) - prefix
    for k in range(1, min(rest, MAX_SHIFT) + 1):
        kept = rest - k
        if kept and len(new) >= prefix + kept and old[prefix + k:] == new[prefix:prefix + kept]:
            return k
    return 0


def apply_patch(doc: Any, patch: list[Op]) -> Any:
    """A new document: ``doc`` with every operation of ``patch`` applied.

    Copy-on-write: only the containers on each operation's path are copied,
    so ``doc`` is never modified and unchanged parts are shared with it.
    """
    return apply_patch_sized(doc, patch)[0]


def apply_patch_sized(doc: Any, patch: Any, size: int | None = None,
                      budget: int = limits.MAX_STATE_COST) -> tuple[Any, int]:
    """(``apply_patch``'s result, its cost) with an output budget: a patch whose
    result would cost more than ``budget`` (60 doubling ``copy`` ops) or nest
    deeper than limits.MAX_DEPTH raises PatchError(too_large=True) early.
    ``size`` is ``doc``'s cost when known (measured otherwise)."""
    if not isinstance(patch, list):
        raise PatchError("a patch must be a list of operations")
    if len(patch) > limits.MAX_PATCH_OPS:
        raise PatchError(f"a patch of {len(patch)} operations is beyond the limit", too_large=True)
    meter = _Meter(measure(doc, budget)[0] if size is None else size, budget)
    result = doc
    for index, op in enumerate(patch):
        try:
            result = _apply_one(result, op, meter)
        except PatchError as exc:
            raise PatchError(f"operation {index} {_describe(op)}: {exc}", exc.too_large) from None
        except (KeyError, IndexError, TypeError, ValueError, AttributeError) as exc:
            raise PatchError(f"operation {index} {_describe(op)} does not apply: {exc}") from None
    return result, meter.size


def _describe(op: Any) -> str:
    if isinstance(op, dict):
        return f"{str(op.get('op'))[:20]} {str(op.get('path'))[:60]!r}"
    return repr(op)[:60]


def _apply_one(doc: Any, op: Op, meter: _Meter) -> Any:
    kind = op["op"]
    if kind == "add":
        meter.add(op["value"], _depth(op["path"]))
        return _add(doc, op["path"], op["value"], meter)
    if kind == "remove":
        meter.remove(_get(doc, op["path"]))
        return _remove(doc, op["path"])
    if kind == "replace":
        meter.remove(_get(doc, op["path"]))
        meter.add(op["value"], _depth(op["path"]))
        return _replace(doc, op["path"], op["value"])
    if kind == "move":
        moved = _get(doc, op["from"])
        meter.place(moved, _depth(op["path"]))
        return _add(_remove(doc, op["from"]), op["path"], moved, meter)
    if kind == "copy":
        copied = _get(doc, op["from"])
        meter.add(copied, _depth(op["path"]))
        return _add(doc, op["path"], copied, meter)
    if kind == "test":
        if _get(doc, op["path"]) != op["value"]:
            raise ValueError(f"test failed at {str(op['path'])[:60]!r}")
        return doc
    raise ValueError(f"unknown op {str(kind)[:20]!r}")


def _depth(pointer: Any) -> int:
    if not isinstance(pointer, str):
        raise TypeError("a JSON pointer must be a string")
    return pointer.count("/")


def _get(doc: Any, pointer: str) -> Any:
    for token in split_pointer(pointer):
        doc = doc[_index(doc, token)] if isinstance(doc, list) else doc[token]
    return doc


def _shallow(node: Any) -> Any:
    if isinstance(node, dict):
        return dict(node)
    if isinstance(node, list):
        return list(node)
    raise TypeError(f"cannot descend into a {type(node).__name__}")


def _copy_to_parent(doc: Any, pointer: str) -> tuple[Any, Any, str]:
    """(new root, the copied parent container, last token) for ``pointer``."""
    tokens = split_pointer(pointer)
    if not tokens:
        raise ValueError("the root has no parent")
    root = node = _shallow(doc)
    for token in tokens[:-1]:
        key = _index(node, token) if isinstance(node, list) else token
        child = _shallow(node[key])
        node[key] = child
        node = child
    return root, node, tokens[-1]


def _index(seq: list, token: str, allow_end: bool = False) -> int:
    if allow_end and token == "-":
        return len(seq)
    if not token.isdigit() or (len(token) > 1 and token.startswith("0")):
        raise ValueError(f"bad array index {token!r}")
    i = int(token)
    if i > len(seq) or (i == len(seq) and not allow_end):
        raise IndexError(f"index {i} out of range")
    return i


def _add(doc: Any, pointer: str, value: Any, meter: _Meter | None = None) -> Any:
    if pointer == "":
        return value
    root, parent, token = _copy_to_parent(doc, pointer)
    if isinstance(parent, list):
        parent.insert(_index(parent, token, allow_end=True), value)
    else:
        if meter is not None and token in parent:
            meter.remove(parent[token])
        parent[token] = value
    return root


def _replace(doc: Any, pointer: str, value: Any) -> Any:
    if pointer == "":
        return value
    root, parent, token = _copy_to_parent(doc, pointer)
    if isinstance(parent, list):
        parent[_index(parent, token)] = value
    elif token in parent:
        parent[token] = value
    else:
        raise KeyError(token)
    return root


def _remove(doc: Any, pointer: str) -> Any:
    root, parent, token = _copy_to_parent(doc, pointer)
    if isinstance(parent, list):
        del parent[_index(parent, token)]
    else:
        del parent[token]
    return root
