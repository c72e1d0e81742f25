"""The redacted part of a state that the first N characters of its text view need.

``lastgood show`` (text) prints the first :data:`lastgood.cli.output.STATE_PREVIEW_CHARS`
characters of the state's JSON; redacting, escaping and encoding a 10,000-message state to print
4,000 characters of it cost most of the command. :func:`redacted_prefix` redacts only the leading
members of each container (depth first), enough that the text view of what it keeps is longer
than those N characters: the text view of the copy then starts with exactly the N characters the
whole state's view starts with, and both go on beyond them.

Why that holds: the view (``json.dumps`` with an indent, of the escaped strings) lays members out
in order, so the copy's view and the whole view agree up to the end of the last member kept; each
kept member's view is at least a sixth of its compact orjson encoding (orjson writes at most six
bytes for one character of the view: ``\\u001b`` for a control character the view shows as at least
one character; a value JSON has no form for is measured as ``""``), so members whose encodings add up
to ``6 × (N + 1)`` make a common start longer than N. Redaction is per member (``redact`` of a
container is the redaction of each member at its depth, a secret-named key masking its whole value),
so the kept members are redacted exactly as in the whole state.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from typing import Any

from lastgood.limits import MAX_DEPTH
from lastgood.redact import is_secret_key, redact, redact_text

try:
    import orjson
except ImportError:  # pragma: no cover - orjson is a dependency
    orjson = None  # type: ignore[assignment]

RATIO = 6  # orjson bytes per character of the text view, at most
_CONTAINERS = (dict, list, tuple)
# dataclasses and times as values JSON has no form for (the view shows their text, maybe shorter)
_OPTIONS = orjson.OPT_PASSTHROUGH_DATACLASS | orjson.OPT_PASSTHROUGH_DATETIME if orjson is not None else 0


class _Unmeasurable(Exception):
    """orjson cannot encode a value (a key that is not text, an int beyond 64 bits…)."""


def redacted_prefix(value: Any, chars: int) -> Any:
    """``redact(value)``, or a redacted copy of its leading part whose text view starts with the same
    ``chars`` characters and is longer than ``chars`` as well (see the module docstring)."""
    need = RATIO * (chars + 1)
    if orjson is None:  # pragma: no cover - orjson is a dependency
        return redact(value)
    try:
        if _size(value) <= need:
            return redact(value)
        kept, _measured, _cut = _prefix(value, need, 0)
    except _Unmeasurable:
        return redact(value)
    return kept


def _prefix(value: Any, need: int, depth: int) -> tuple[Any, int, bool]:
    """(redacted leading part of ``value`` at ``depth``, measure of its complete members, cut?)."""
    if not isinstance(value, _CONTAINERS) or depth >= MAX_DEPTH - 2:
        out = redact(value, depth)
        return out, _size(out), False
    if isinstance(value, dict):
        return _dict_prefix(value, need, depth)
    kept: list[Any] = []
    total = 0
    for member in value:
        if total >= need:
            return kept, total, True
        part, measured, cut = _member(member, need - total, depth + 1)
        kept.append(part)
        total += measured
        if cut:
            return kept, total, True
    return kept, total, False


def _dict_prefix(value: dict[Any, Any], need: int, depth: int) -> tuple[Any, int, bool]:
    kept: dict[Any, Any] = {}
    sizes: dict[Any, int] = {}  # per key as shown: two keys redacted alike are one member, the later one
    total = 0
    for n, (key, member) in enumerate(value.items()):
        if total >= need:
            if _collides(kept, itertools.islice(value, n, None)):  # a later key replaces a kept one
                out = redact(value, depth)
                return out, _size(out), False
            return kept, total, True
        shown = redact_text(key) if isinstance(key, str) else key
        if isinstance(key, str) and is_secret_key(key):
            part = redact({key: member}, depth)[shown]
            measured, cut = _size(part), False
        else:
            part, measured, cut = _member(member, need - total, depth + 1)
        kept[shown] = part
        total += measured + _size(shown) - sizes.get(shown, 0)
        sizes[shown] = measured + _size(shown)
        if cut:
            if _collides(kept, itertools.islice(value, n + 1, None)):
                out = redact(value, depth)
                return out, _size(out), False
            return kept, total, True
    return kept, total, False


def _collides(kept: dict[Any, Any], later: Iterable[Any]) -> bool:
    """A later key is shown (redacted) as a key already kept."""
    return any((redact_text(key) if isinstance(key, str) else key) in kept for key in later)


def _member(value: Any, need: int, depth: int) -> tuple[Any, int, bool]:
    """A member at ``depth``: redacted whole when small, else its own leading part."""
    if isinstance(value, _CONTAINERS) and _size(value) > need:
        return _prefix(value, need, depth)
    out = redact(value, depth)
    return out, _size(out), False


def _size(value: Any) -> int:
    try:
        return len(orjson.dumps(value, default=_blank, option=_OPTIONS))
    except (TypeError, orjson.JSONEncodeError) as exc:
        raise _Unmeasurable(str(exc)) from None


def _blank(_value: Any) -> str:
    return ""
