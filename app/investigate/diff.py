"""What changed between two decoded states: changes with JSON Pointer paths.

``diff_states(a, b)`` walks both trees iteratively (no recursion: states nested
10,000 levels deep diff fine) and reports ``add``, ``remove``, ``change``,
``type_change`` and ``move`` changes. Lists are aligned on identity, not
position: an item's ``id`` when every dict item in the list carries a unique
one (LangGraph messages, tool calls), otherwise a fingerprint of its content,
with ``difflib.SequenceMatcher`` (longest common subsequence) over those keys.
So appending 4,000 messages is 4,000 adds, removing one in the middle is one
remove, editing one in place is a change below that message's path, and a
reordered item is one ``move``.

Path coordinates (documented because they differ from JSON Patch's
sequential semantics and from DeepDiff's positional lists):

- ``remove`` and the ``from`` of a ``move`` name the item's index in A;
- ``add``, the ``path`` of a ``move`` and every ``change`` name indexes in B;
- ancestors of any path are named in B's coordinates.

``lastgood.investigate.diff_apply.apply_changes(a, changes)`` rebuilds B from A with these rules (parents
first; within a list: removals and moves out, then insertions in ascending
B order, then changes). Numbers carry ``delta`` (new - old); bytes and the
readers' ``{"$bytes": n, "sha256": …}`` summaries compare as leaves by size and
hash. With ``redact`` (the default) every reported value is redacted
(lastgood.redact rules, applied iteratively) — a secret that changed shows as
a change whose old and new are both ``[redacted]``.
"""

from __future__ import annotations

import hashlib
import json
import math
import marshal
from bisect import bisect_left
from collections.abc import Iterator
from dataclasses import dataclass, field
from difflib import SequenceMatcher
from itertools import repeat
from operator import eq, is_, lt
from typing import Any

from lastgood.investigate.diff_values import bytes_summary, governing_key, is_plain_json, jsonable, redact_value
from lastgood.redact import is_secret_key, might_need_redaction, redact_text

OPS = ("add", "remove", "change", "type_change", "move")
VALUE_PREVIEW = 80
MESSAGE_KEYS = frozenset({"content"})


@dataclass(frozen=True)
class Change:
    """One change; ``from_path`` only for ``move``, ``delta`` only for numbers."""

    op: str
    path: str
    old: Any = None
    new: Any = None
    delta: int | float | None = None
    from_path: str | None = None

    def to_dict(self, plain: bool = False) -> dict[str, Any]:
        """As JSON data; ``plain`` (from :func:`is_plain_json`) says old and new are already."""
        old, new = (self.old, self.new) if plain else (jsonable(self.old), jsonable(self.new))
        out: dict[str, Any] = {"op": self.op, "path": self.path, "old": old, "new": new}
        if self.delta is not None:
            out["delta"] = self.delta
        if self.from_path is not None:
            out["from"] = self.from_path
        return out


@dataclass(frozen=True)
class DiffResult:
    changes: list[Change] = field(default_factory=list)
    summary: dict[str, int] = field(default_factory=dict)

    @property
    def identical(self) -> bool:
        return not self.changes

    def to_dict(self, a_label: Any = None, b_label: Any = None) -> dict[str, Any]:
        """The PRODUCT.md ``diff`` shape: ``{a, b, changes, summary}``."""
        plain = is_plain_json([v for c in self.changes for v in (c.old, c.new)])
        return {"a": a_label, "b": b_label, "changes": [c.to_dict(plain) for c in self.changes],
                "summary": dict(self.summary)}


# ---------------------------------------------------------------- the walk

@dataclass(frozen=True)
class _Path:
    """A path as a parent chain: deep trees never build O(depth²) strings."""

    parent: _Path | None
    token: str | int

    def pointer(self) -> str:
        tokens: list[str] = []
        node: _Path | None = self
        while node is not None and node.parent is not None:
            tokens.append(_escape(node.token))
            node = node.parent
        return "".join("/" + t for t in reversed(tokens))

    def child(self, token: str | int) -> _Path:
        return _Path(self, token)


ROOT = _Path(None, "")


def _escape(token: str | int) -> str:
    return str(token).replace("~", "~0").replace("/", "~1")


def diff_states(a: Any, b: Any, *, redact: bool = True) -> DiffResult:
    """Every change that turns state ``a`` into state ``b``."""
    walker = _Walker()
    walker.run(a, b)
    changes = sorted(walker.changes, key=_document_order)
    if redact:
        changes = _redact_all(changes)
    return DiffResult(changes=changes, summary=summarize(changes))


def _document_order(change: Change) -> list[tuple[int, Any]]:
    """Sort key: paths in document order (list indexes as numbers)."""
    return [(0, int(t)) if t.isdigit() else (1, t) for t in change.path.split("/")]


def summarize(changes: list[Change]) -> dict[str, int]:
    counts = {"added": 0, "removed": 0, "changed": 0, "moved": 0}
    for c in changes:
        key = {"add": "added", "remove": "removed", "move": "moved"}.get(c.op, "changed")
        counts[key] += 1
    return counts


class _Walker:
    def __init__(self) -> None:
        self.changes: list[Change] = []
        self.fingerprints = _Fingerprints()

    def run(self, a: Any, b: Any) -> None:
        stack: list[tuple[_Path, Any, Any]] = [(ROOT, a, b)]
        while stack:
            path, x, y = stack.pop()
            children = self._compare(path, x, y)
            stack.extend(reversed(children))

    def _compare(self, path: _Path, x: Any, y: Any) -> list[tuple[_Path, Any, Any]]:
        if x is y:
            return []
        kind_x, kind_y = _kind(x), _kind(y)
        if kind_x != kind_y:
            self.changes.append(Change("type_change", path.pointer(), x, y))
            return []
        if kind_x == "dict":
            return self._dict(path, x, y)
        if kind_x == "list":
            return self._list(path, x, y)
        if not _leaf_equal(x, y):
            self.changes.append(Change("change", path.pointer(), x, y, delta=_delta(x, y)))
        return []

    def _dict(self, path: _Path, x: dict, y: dict) -> list[tuple[_Path, Any, Any]]:
        children = []
        for key, value in x.items():
            if key not in y:
                self.changes.append(Change("remove", path.child(key).pointer(), old=value))
            elif value is not y[key]:
                children.append((path.child(key), value, y[key]))
        for key, value in y.items():
            if key not in x:
                self.changes.append(Change("add", path.child(key).pointer(), new=value))
        return children

    def _list(self, path: _Path, x: list, y: list) -> list[tuple[_Path, Any, Any]]:
        if len(x) == len(y) and all(self.fingerprints.equal_each(x, y)):
            return []
        keys_x, keys_y, unique = _alignment_keys(x, y, self.fingerprints)
        plan = _align(keys_x, keys_y, unique)
        children: list[tuple[_Path, Any, Any]] = []
        same = self.fingerprints.equal_each([x[i] for i, _ in plan.pairs], [y[j] for _, j in plan.pairs])
        for (i, j), equal in zip(plan.pairs, same):
            if not equal:
                children.append((path.child(j), x[i], y[j]))
        for i, j in plan.moves:
            self.changes.append(Change("move", path.child(j).pointer(), from_path=path.child(i).pointer()))
            if not self.fingerprints.equal(x[i], y[j]):
                children.append((path.child(j), x[i], y[j]))
        for i in plan.removed:
            self.changes.append(Change("remove", path.child(i).pointer(), old=x[i]))
        for j in plan.added:
            self.changes.append(Change("add", path.child(j).pointer(), new=y[j]))
        return sorted(children, key=lambda c: c[0].token)


def _kind(value: Any) -> str:
    if isinstance(value, dict):
        return "bytes" if _isbytes_summary(value) else "dict"
    if isinstance(value, (list, tuple)):
        return "list"
    if isinstance(value, (bytes, bytearray)):
        return "bytes"
    if isinstance(value, bool) or value is None:
        return type(value).__name__
    if isinstance(value, (int, float)):
        return "number"
    return type(value).__name__


def _isbytes_summary(value: dict) -> bool:
    return "$bytes" in value and "sha256" in value and len(value) <= 3


def _leaf_equal(x: Any, y: Any) -> bool:
    kind = _kind(x)
    if kind != _kind(y):
        return False
    if kind == "bytes":
        return _bytes_key(x) == _bytes_key(y)
    if type(x) is not type(y):
        return False
    if kind == "number":
        return x == y or (x != x and y != y)  # an unchanged NaN is not a change
    return bool(x == y)


def _bytes_key(value: Any) -> tuple[Any, Any]:
    if isinstance(value, dict):
        return value.get("$bytes"), value.get("sha256")
    return len(value), hashlib.sha256(value).hexdigest()


def _delta(x: Any, y: Any) -> int | float | None:
    if _kind(x) == "number" and _kind(y) == "number":
        try:
            delta = y - x
        except OverflowError:
            return None
        # 0.87 - 0.91 is -0.040000000000000036 in binary floating point: 12 significant digits
        return float(f"{delta:.12g}") if isinstance(delta, float) and math.isfinite(delta) else delta
    if _kind(x) == "bytes" and _kind(y) == "bytes":
        sizes = _bytes_key(x)[0], _bytes_key(y)[0]
        if all(isinstance(s, int) for s in sizes):
            return sizes[1] - sizes[0]
    return None


# ---------------------------------------------------------------- fingerprints

# marshal format 2: bytes that depend on content only. From format 3 on, marshal writes a
# back-reference for an object it meets twice (any object referenced elsewhere too), so
# equal values shared differently (two decodes of one message) would marshal differently.
MARSHAL_VERSION = 2


class _Fingerprints:
    """Content fingerprints, cached by id(): ``marshal`` bytes (C speed; equal bytes mean equal
    content, types included) or, when marshal cannot (nesting beyond its depth limit, types it
    does not know), an iterative hash over the tree. Two equal dicts whose keys were inserted in
    another order may fingerprint differently: the walk then descends and finds no change."""

    def __init__(self) -> None:
        self._cache: dict[int, tuple[Any, Any]] = {}

    def of(self, value: Any) -> Any:
        hit = self._cache.get(id(value))
        if hit is not None and hit[0] is value:
            return hit[1]
        try:
            key: Any = marshal.dumps(value, MARSHAL_VERSION)
        except (ValueError, RecursionError):
            key = self._slow(value)
        if isinstance(value, (dict, list, tuple)):
            self._cache[id(value)] = (value, key)
        return key

    def equal(self, x: Any, y: Any) -> bool:
        return x is y or (_kind(x) == _kind(y) and self.of(x) == self.of(y))

    def same_items(self, x: list, y: list) -> bool:
        return all(self.equal_each(x, y))

    def equal_each(self, xs: list, ys: list) -> list[bool]:
        """``equal`` for each pair of ``xs`` and ``ys``: marshal bytes compared in C for
        the whole batch (uncached); per pair through ``equal`` when marshal cannot."""
        same = list(map(is_, xs, ys))
        if all(same):
            return same
        rest = [k for k, s in enumerate(same) if not s]  # one object on both sides is equal
        xs, ys = [xs[k] for k in rest], [ys[k] for k in rest]
        try:
            version = repeat(MARSHAL_VERSION)
            found = map(eq, map(marshal.dumps, xs, version), map(marshal.dumps, ys, version))
            for k, equal in zip(rest, found):
                same[k] = equal
        except (ValueError, RecursionError):
            for k, p, q in zip(rest, xs, ys):
                same[k] = self.equal(p, q)
        return same

    def _slow(self, value: Any) -> str:
        """Post-order hash of every container below ``value``, without recursion."""
        stack: list[tuple[Any, bool]] = [(value, False)]
        while stack:
            node, ready = stack.pop()
            if not isinstance(node, (dict, list, tuple)) or id(node) in self._cache:
                continue
            items = list(node.values()) if isinstance(node, dict) else list(node)
            if not ready:
                stack.append((node, True))
                stack.extend((v, False) for v in items if isinstance(v, (dict, list, tuple)))
                continue
            self._cache[id(node)] = (node, self._hash_node(node))
        return self._cache[id(value)][1] if isinstance(value, (dict, list, tuple)) else self.of(value)

    def _hash_node(self, node: Any) -> str:
        h = hashlib.blake2b(digest_size=20)
        if isinstance(node, dict):
            h.update(b"d")
            for key in sorted(node, key=lambda k: (type(k).__name__, str(k))):
                h.update(repr((type(key).__name__, str(key))).encode() + b"\0")
                h.update(self._child(node[key]).encode() + b"\0")
        else:
            h.update(b"l")
            for item in node:
                h.update(self._child(item).encode() + b"\0")
        return "\x01" + h.hexdigest()  # str: never equal to marshal's bytes

    def _child(self, value: Any) -> str:
        if isinstance(value, (dict, list, tuple)):
            return str(self._cache[id(value)][1])
        try:
            return marshal.dumps(value, MARSHAL_VERSION).hex()
        except ValueError:
            return f"{type(value).__name__}:{value!r}"


# ---------------------------------------------------------------- list alignment

@dataclass
class _Plan:
    pairs: list[tuple[int, int]] = field(default_factory=list)
    moves: list[tuple[int, int]] = field(default_factory=list)
    removed: list[int] = field(default_factory=list)
    added: list[int] = field(default_factory=list)


def _alignment_keys(x: list, y: list, fps: _Fingerprints) -> tuple[list[Any], list[Any], bool]:
    """Item ids when the lists' dict items carry unique ones, else content fingerprints;
    and whether every item of both lists has an id (the keys are then the ids themselves)."""
    ids_x, ids_y = _item_ids(x), _item_ids(y)
    if ids_x is not None and ids_y is not None:
        if None not in ids_x and None not in ids_y:
            return ids_x, ids_y, True
        return ([("id", i) if i is not None else ("fp", fps.of(v)) for i, v in zip(ids_x, x)],
                [("id", i) if i is not None else ("fp", fps.of(v)) for i, v in zip(ids_y, y)], False)
    return [("fp", fps.of(v)) for v in x], [("fp", fps.of(v)) for v in y], False


def _item_ids(items: list) -> list[Any] | None:
    if items and set(map(type, items)) == {dict}:  # the common case, at C speed
        ids = list(map(dict.get, items, repeat("id")))
        if set(map(type, ids)) <= {str, int}:
            return ids if len(set(ids)) == len(ids) else None
    ids: list[Any] = []
    for item in items:
        ident = item.get("id") if isinstance(item, dict) else None
        ids.append(ident if isinstance(ident, (str, int)) and not isinstance(ident, bool) else None)
    present = [i for i in ids if i is not None]
    if not present or len(set(present)) != len(present):
        return None
    return ids


def _align(kx: list[Any], ky: list[Any], unique: bool = False) -> _Plan:
    """Pairs, moves, removals and additions turning keys ``kx`` into ``ky``. ``unique``
    (every key an id, none repeated on either side): the longest common subsequence is
    the longest increasing run of B positions (patience, O(n log n)); otherwise
    ``difflib.SequenceMatcher``."""
    plan = _Plan()
    lo = 0
    while lo < len(kx) and lo < len(ky) and kx[lo] == ky[lo]:
        lo += 1
    hi = 0
    while hi < len(kx) - lo and hi < len(ky) - lo and kx[-1 - hi] == ky[-1 - hi]:
        hi += 1
    plan.pairs.extend((i, i) for i in range(lo))
    deleted: list[int] = []
    inserted: list[int] = []
    replaced: list[tuple[list[int], list[int]]] = []
    if unique:
        _align_unique(plan, kx, ky, lo, hi, deleted, inserted)
    opcodes = [] if unique else \
        SequenceMatcher(None, kx[lo:len(kx) - hi], ky[lo:len(ky) - hi], autojunk=False).get_opcodes()
    for tag, i1, i2, j1, j2 in opcodes:
        a_range, b_range = range(lo + i1, lo + i2), range(lo + j1, lo + j2)
        if tag == "equal":
            plan.pairs.extend(zip(a_range, b_range))
        elif tag == "replace":
            replaced.append((list(a_range), list(b_range)))
        else:
            deleted.extend(a_range)
            inserted.extend(b_range)
    for a_block, b_block in replaced:
        deleted.extend(a_block)
        inserted.extend(b_block)
    plan.pairs.extend((len(kx) - hi + k, len(ky) - hi + k) for k in range(hi))
    _find_moves(plan, kx, ky, deleted, inserted)
    _pair_replacements(plan, kx, ky, replaced)
    plan.pairs.sort()
    return plan


def _align_unique(plan: _Plan, kx: list[Any], ky: list[Any], lo: int, hi: int,
                  deleted: list[int], inserted: list[int]) -> None:
    """The middle (``lo`` .. ``-hi``) of unique keys: pairs in order, the rest deleted/inserted."""
    b_range = range(lo, len(ky) - hi)
    where = dict(zip(ky[lo:len(ky) - hi], b_range))
    common = [(i, where[k]) for i, k in zip(range(lo, len(kx) - hi), kx[lo:len(kx) - hi]) if k in where]
    kept = _increasing_run(common)
    plan.pairs.extend(kept)
    paired_a, paired_b = {i for i, _ in kept}, {j for _, j in kept}
    deleted.extend(i for i in range(lo, len(kx) - hi) if i not in paired_a)
    inserted.extend(j for j in b_range if j not in paired_b)


def _increasing_run(pairs: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The longest subsequence of ``pairs`` (increasing first items) whose second items
    increase; of several, the one keeping the earliest items of A (as SequenceMatcher does)."""
    js = [j for _, j in pairs]
    if all(map(lt, js, js[1:])):
        return pairs
    tails: list[int] = []  # over the reversed pairs: runs of decreasing B positions, by length
    longest_from = [0] * len(pairs)  # length of the longest increasing run starting at n
    for n in range(len(pairs) - 1, -1, -1):
        length = bisect_left(tails, -js[n])
        if length == len(tails):
            tails.append(-js[n])
        else:
            tails[length] = -js[n]
        longest_from[n] = length + 1
    run: list[tuple[int, int]] = []
    need, last = len(tails), -1
    for n, j in enumerate(js):
        if need and longest_from[n] == need and j > last:
            run.append(pairs[n])
            need, last = need - 1, j
    return run


def _find_moves(plan: _Plan, kx: list[Any], ky: list[Any], deleted: list[int], inserted: list[int]) -> None:
    waiting: dict[Any, list[int]] = {}
    for i in sorted(deleted):
        waiting.setdefault(kx[i], []).append(i)
    for j in sorted(inserted):
        queue = waiting.get(ky[j])
        if queue:
            plan.moves.append((queue.pop(0), j))
    moved_a = {i for i, _ in plan.moves}
    moved_b = {j for _, j in plan.moves}
    plan.removed = [i for i in sorted(deleted) if i not in moved_a]
    plan.added = [j for j in sorted(inserted) if j not in moved_b]


def _pair_replacements(plan: _Plan, kx: list[Any], ky: list[Any],
                       replaced: list[tuple[list[int], list[int]]]) -> None:
    """Items replaced in place without ids are edits of the item at that position."""
    removed, added = set(plan.removed), set(plan.added)
    for a_block, b_block in replaced:
        a_left = [i for i in a_block if i in removed and kx[i][0] == "fp"]
        b_left = [j for j in b_block if j in added and ky[j][0] == "fp"]
        for i, j in zip(a_left, b_left):
            plan.pairs.append((i, j))
            removed.discard(i)
            added.discard(j)
    plan.removed = sorted(removed)
    plan.added = sorted(added)


# ---------------------------------------------------------------- redaction and JSON

REDACT_BATCH = 256  # changes whose JSON text is screened for redaction anchors at once


def _redact_all(changes: list[Change]) -> list[Change]:
    """Every change redacted; a batch whose JSON text shows nothing redaction could act on
    (one ``json.dumps`` and one anchor scan, both C-fast) is kept as it is."""
    out: list[Change] = []
    for start in range(0, len(changes), REDACT_BATCH):
        batch = changes[start:start + REDACT_BATCH]
        out.extend(batch if _clean_batch(batch) else map(_redacted, batch))
    return out


def _clean_batch(batch: list[Change]) -> bool:
    """True when no key, path or text in ``batch`` holds a redaction anchor. JSON text shows
    every string verbatim apart from escaped quotes, backslashes and control characters,
    which no anchor contains; values JSON cannot show (bytes, other types) fail the screen."""
    try:
        text = json.dumps([(c.path, c.from_path, c.old, c.new) for c in batch],
                          ensure_ascii=False, check_circular=False)
    except (TypeError, ValueError, RecursionError):
        return False
    return not might_need_redaction(text)


def _redacted(change: Change) -> Change:
    key = governing_key(change.path)
    secret = is_secret_key(key)  # a secret's delta would tell how it changed
    return Change(change.op, redact_text(change.path), redact_value(key, change.old),
                  redact_value(key, change.new), None if secret else change.delta,
                  redact_text(change.from_path) if change.from_path else None)


# ---------------------------------------------------------------- text rendering

def render_text(result: DiffResult, limit: int | None = None) -> str:
    """The diff for a terminal: messages as ``+ [role] first line``, the rest as ``path: old → new``."""
    lines = [_render_change(c) for c in result.changes[:limit]]
    hidden = len(result.changes) - len(lines)
    if hidden > 0:
        lines.append(f"… {hidden} more changes (use --format json for all)")
    s = result.summary
    tail = (f"{s.get('added', 0)} added, {s.get('removed', 0)} removed, {s.get('changed', 0)} changed"
            + (f", {s['moved']} moved" if s.get("moved") else ""))
    lines.append("no changes" if result.identical else tail)
    return "\n".join(lines)


def _render_change(change: Change) -> str:
    value = change.new if change.op == "add" else change.old
    message = message_line(value) if change.op in ("add", "remove") else None
    if change.op == "add":
        return f"+ {change.path}: {message or preview(change.new)}"
    if change.op == "remove":
        return f"- {change.path}: {message or preview(change.old)}"
    if change.op == "move":
        return f"↷ {change.from_path} → {change.path}"
    delta = f" ({_signed(change.delta)})" if change.delta is not None else ""
    mark = "~" if change.op == "change" else "!"
    return f"{mark} {change.path}: {preview(change.old)} → {preview(change.new)}{delta}"


def _signed(delta: int | float) -> str:
    return f"+{delta}" if delta >= 0 else str(delta)


def message_line(value: Any) -> str | None:
    """``[role] first line`` when ``value`` is a chat message, else None."""
    if not isinstance(value, dict) or not MESSAGE_KEYS <= value.keys():
        return None
    role = value.get("role") or value.get("type") or _role_from_type(value.get("$type"))
    content = value.get("content")
    if isinstance(content, list):  # content blocks
        content = " ".join(str(p.get("text", "")) if isinstance(p, dict) else str(p) for p in content)
    first = str(content).strip().splitlines()[0] if str(content).strip() else ""
    calls = value.get("tool_calls")
    if not first and isinstance(calls, list) and calls:
        first = "calls " + ", ".join(str(c.get("name")) for c in calls if isinstance(c, dict))
    return f"[{role or 'message'}] {_cut(first)}"


def _role_from_type(type_name: Any) -> str | None:
    if not isinstance(type_name, str):
        return None
    short = type_name.rsplit(".", 1)[-1]
    return {"HumanMessage": "user", "AIMessage": "assistant", "SystemMessage": "system",
            "ToolMessage": "tool"}.get(short, short)


def preview(value: Any) -> str:
    """A short one-line JSON rendering of a value."""
    if isinstance(value, (bytes, bytearray)):
        value = bytes_summary(value)
    try:
        text = json.dumps(jsonable(value), ensure_ascii=False, default=str)
    except (TypeError, ValueError, RecursionError):
        text = repr(value)
    return _cut(text)


def _cut(text: str) -> str:
    text = text.replace("\n", "⏎")
    return text if len(text) <= VALUE_PREVIEW else text[:VALUE_PREVIEW - 1] + "…"


def iter_message_changes(result: DiffResult) -> Iterator[Change]:
    """Changes whose value is a whole chat message (added or removed ones)."""
    return (c for c in result.changes if c.op in ("add", "remove")
            and message_line(c.new if c.op == "add" else c.old) is not None)
