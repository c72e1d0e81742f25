"""Values in a diff's output: redaction without recursion, JSON-safe copies, and the screen
that says when a value needs neither (so 4,000 added messages are not copied twice).

``redact_value`` gives exactly ``lastgood.redact.redact``'s result for a value found under a key;
``jsonable`` replaces bytes with ``{"$bytes": n, "sha256": …}`` and caps depth; ``is_plain_json``
tells, in one C-speed walk, that ``jsonable`` would change nothing. Split from lastgood.investigate.diff.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from itertools import chain, compress, repeat
from operator import is_
from typing import Any

from lastgood.redact import MASK, is_secret_key, might_need_redaction, redact_text

MAX_JSON_DEPTH = 200  # values nested deeper are summarised in to_dict (JSON encoders recurse)


def last_token(pointer: str) -> str:
    return pointer.rsplit("/", 1)[-1].replace("~1", "/").replace("~0", "~") if pointer else ""


def governing_key(pointer: str) -> str:
    """The key whose redaction rule covers the value at ``pointer``: the first secret-named
    segment (everything below it is secret), else the last one."""
    tokens = [t.replace("~1", "/").replace("~0", "~") for t in pointer.split("/")[1:]]
    return next((t for t in tokens if is_secret_key(t)), tokens[-1] if tokens else "")


def redact_value(key: Any, value: Any) -> Any:
    """``lastgood.redact.redact``'s result for ``value`` found under ``key``, without recursion
    (any depth), and without copying a value that holds nothing to redact."""
    secret = isinstance(key, str) and is_secret_key(key)
    if secret and not isinstance(value, (dict, list, tuple)):
        return MASK if value not in (None, "") else value
    if isinstance(value, str):
        return _redact_str(value)
    if not isinstance(value, (dict, list, tuple)) or (not secret and _nothing_to_redact(value)):
        return value
    return map_tree(value, _redact_leaf, key_of=_redact_key, inherits=_is_secret,
                    inherited=key if secret else None)


def _is_secret(key: Any) -> bool:
    return isinstance(key, str) and is_secret_key(key)


def _redact_leaf(key: Any, value: Any) -> Any:
    if isinstance(key, str) and is_secret_key(key) and value not in (None, ""):
        return MASK
    return _redact_str(value) if isinstance(value, str) else value


def _redact_key(key: Any) -> Any:
    return _redact_str(key) if isinstance(key, str) else key


def _redact_str(text: str) -> str:
    """redact_text, skipped for text with nothing it could act on (most message text)."""
    return redact_text(text) if might_need_redaction(text) else text


def _nothing_to_redact(value: Any) -> bool:
    """True when the JSON text of ``value`` (one C call) shows nothing redaction could change.
    Only text without escapes counts: then every key and string appears in it verbatim."""
    try:
        text = json.dumps(value, ensure_ascii=False, check_circular=False)
    except (TypeError, ValueError, RecursionError):  # bytes, NaN-free types, deep values: walk them
        return False
    return "\\" not in text and not might_need_redaction(text)


_PENDING = object()


def map_tree(value: Any, leaf: Callable[[Any, Any], Any], max_depth: int | None = None,
              key_of: Callable[[Any], Any] | None = None, inherits: Callable[[Any], bool] | None = None,
              inherited: Any = None) -> Any:
    """A copy of ``value`` with ``leaf(key, v)`` applied to every leaf (and ``key_of`` to every
    dict key), iteratively. A key for which ``inherits(key)`` holds is passed to ``leaf`` for every
    leaf below it instead of the leaf's own key (``inherited``: such a key above ``value``)."""
    if not isinstance(value, (dict, list, tuple)):
        return leaf(inherited, value)
    root: list[Any] = [_PENDING]
    stack: list[tuple[Any, Any, Any, int, object, Any]] = [(value, root, 0, 0, _PENDING, inherited)]
    while stack:
        node, holder, slot, depth, placeholder, above = stack.pop()
        if holder[slot] is not placeholder:  # a later equal key (after key_of) won, as in a dict display
            continue
        if max_depth is not None and depth >= max_depth:
            holder[slot] = {"$nested": f"deeper than {max_depth} levels"}
            continue
        holder[slot] = copy = {} if isinstance(node, dict) else [None] * len(node)
        items = ((key_of(k) if key_of else k, k, v) for k, v in node.items()) if isinstance(node, dict) \
            else ((i, None, v) for i, v in enumerate(node))
        for new_key, key, v in items:
            passed = key if above is None else above
            if isinstance(v, (dict, list, tuple)):
                copy[new_key] = marker = object()
                below = above if above is not None or inherits is None or not inherits(key) else key
                stack.append((v, copy, new_key, depth + 1, marker, below))
            else:
                copy[new_key] = leaf(passed, v)
    return root[0]


def jsonable(value: Any) -> Any:
    """``value`` safe for JSON: bytes as ``{"$bytes": n, "sha256": …}``, depth capped."""
    if isinstance(value, (bytes, bytearray)):
        return bytes_summary(value)
    if not isinstance(value, (dict, list, tuple)):
        return value
    return map_tree(value, lambda _k, v: bytes_summary(v) if isinstance(v, (bytes, bytearray)) else v,
                     max_depth=MAX_JSON_DEPTH)


_JSON_TYPES = frozenset((dict, list, str, int, float, bool, type(None)))  # a tuple: jsonable makes a list


def is_plain_json(values: list[Any]) -> bool:
    """True when ``jsonable`` would return each of ``values`` unchanged: only JSON types
    (exactly), no bytes, nested at most MAX_JSON_DEPTH levels. One level-by-level walk
    whose per-value work runs in C, instead of a copy of every value."""
    level, depth = list(values), 0
    while level:
        types = list(map(type, level))
        kinds = set(types)
        if not kinds <= _JSON_TYPES:
            return False
        if list not in kinds and dict not in kinds:
            return True
        if depth >= MAX_JSON_DEPTH:
            return False
        dicts = compress(level, map(is_, types, repeat(dict)))
        lists = compress(level, map(is_, types, repeat(list)))
        level = list(chain(chain.from_iterable(map(dict.values, dicts)), chain.from_iterable(lists)))
        depth += 1
    return True


def bytes_summary(value: bytes | bytearray) -> dict[str, Any]:
    return {"$bytes": len(value), "sha256": hashlib.sha256(value).hexdigest()}
