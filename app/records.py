"""Column-wise passes over a list of flat records (what ``ls``/``verify`` print and export).

``redact`` and the terminal's control-character escaping walk every value of what a command
prints. For a list of a million rows of the same keys that walk took minutes (a regular
expression per value, a dict comprehension per row). Here the same rule runs once per column:
a column whose joined text the rule's pre-check does not match is returned as it is, and only a
column where it matches is mapped value by value, exactly as before. The result is what the
value-by-value walk gives; only the work differs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

COLUMNAR_MIN_ROWS = 64  # below this the value-by-value walk is as fast
CONTAINERS = (dict, list, tuple)


def columns_of(rows: Sequence[Any]) -> tuple[list[Any], list[list[Any]]] | None:
    """(keys, one list of values per key) when ``rows`` are at least COLUMNAR_MIN_ROWS dicts
    with the same keys in the same order; None otherwise (the caller walks value by value)."""
    if len(rows) < COLUMNAR_MIN_ROWS or type(rows[0]) is not dict:
        return None
    keys = list(rows[0])
    shape = tuple(keys)
    if any(type(r) is not dict or tuple(r) != shape for r in rows):
        return None
    return keys, [[r[k] for r in rows] for k in keys]


def flat_records(value: Any) -> bool:
    """True when ``value`` is a list of dicts whose values are all leaves (no containers, and no
    bytes: JSON output shows those as a dict)."""
    if type(value) is not list:
        return False
    kinds: set[type] = set()
    for row in value:
        if type(row) is not dict:
            return False
        kinds.update(map(type, row.values()))
    return not any(issubclass(k, (*CONTAINERS, bytes, bytearray)) for k in kinds)


def rows_of(keys: Sequence[Any], columns: Sequence[list[Any]]) -> list[dict[str, Any]]:
    """The records again (later keys win when two keys became equal, as in a dict display)."""
    return [dict(zip(keys, values)) for values in zip(*columns)]


def map_records(rows: Sequence[dict[str, Any]], table: tuple[list[Any], list[list[Any]]],
                key_fn: Callable[[Any], Any], column_fn: Callable[[Any, list[Any]], list[Any]]
                ) -> list[dict[str, Any]]:
    """New records from ``rows`` (``table``: their :func:`columns_of`) with every key passed
    through ``key_fn`` and every column through ``column_fn(key, values)``; copies of the rows
    when nothing changed (a column function returns its input list when it changes no value)."""
    keys, columns = table
    new_keys = [key_fn(k) for k in keys]
    new_columns = [column_fn(k, c) for k, c in zip(keys, columns)]
    if new_keys == keys and all(new is old for new, old in zip(new_columns, columns)):
        return [r.copy() for r in rows]
    return rows_of(new_keys, new_columns)


def plain_text(values: list[Any], separator: str) -> str | None:
    """The column's strings joined by ``separator`` when every value is a ``str`` or a leaf
    that is not text (None, numbers, times); None when a value is a container or a ``str``
    subclass (those go value by value)."""
    kinds = set(map(type, values))
    if any(issubclass(k, CONTAINERS) or (issubclass(k, str) and k is not str) for k in kinds):
        return None
    if str not in kinds:
        return ""
    texts = values if kinds == {str} else [v for v in values if type(v) is str]
    return separator.join(texts)


def map_column(values: list[Any], may_change: Callable[[str], bool], per_value: Callable[[Any], Any],
               separator: str = "\n") -> list[Any]:
    """``[per_value(v) for v in values]``, skipped when the column is plain text (and leaves
    ``per_value`` returns unchanged) on which ``may_change`` says no value can change. The
    check runs on the strings joined by ``separator``: it must find whatever it would find in
    one of them (a match across a separator only costs the value-by-value pass)."""
    joined = plain_text(values, separator)
    if joined is not None and not may_change(joined):
        return values
    return [per_value(v) for v in values]
