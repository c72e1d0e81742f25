"""Redaction for ``lastgood sql``: the sandbox's functions the views call on store text, and the
redaction of a query's result (what an expression computed is redacted like every output).

Both are ``lastgood.redact``: free text through ``redact_text``; JSON decoded and redacted as a
tree (keys naming secrets mask everything below them, as on the pages); an id shaped like a
secret becomes its handle (``key:`` + 24 hex digits: ``lastgood.index.queries.run_handle`` /
``checkpoint_handle``), so ids stay distinct, joinable and openable without showing the secret.
"""

from __future__ import annotations

import json
import re
from array import array
from collections.abc import Sequence
from itertools import accumulate
from typing import TYPE_CHECKING, Any

from lastgood.index.queries import checkpoint_handle, run_handle
from lastgood.redact import MASK, REDACTION_ANCHORS, is_secret_key, redact, redact_text

if TYPE_CHECKING:  # a query printed as a table or JSON never needs Arrow (pyarrow: ~0.13 s to import)
    import pyarrow as pa

_ANCHORS = "|".join(re.escape(a) for a in REDACTION_ANCHORS)
JSON_TYPE = b"JSON"  # field metadata ``lastgood.type`` of a result column DuckDB typed JSON
TYPE_KEY = b"lastgood.type"


def string_array(values: Sequence[str | None]) -> pa.Array:
    """A string array of ``values`` built from its buffers (``pa.array`` of a Python list imports
    pandas to ask whether the list is a pandas object: ~0.3 s a command)."""
    import pyarrow as pa

    encoded = [b"" if v is None else v.encode("utf-8", "replace") for v in values]
    offsets = array("i", [0, *accumulate(map(len, encoded))])
    nulls = sum(v is None for v in values)
    bitmap = None
    if nulls:
        bits = bytearray((len(values) + 7) // 8)
        for i, v in enumerate(values):
            if v is not None:
                bits[i >> 3] |= 1 << (i & 7)
        bitmap = pa.py_buffer(bytes(bits))
    return pa.StringArray.from_buffers(len(values), pa.py_buffer(offsets.tobytes()), pa.py_buffer(b"".join(encoded)),
                                       bitmap, nulls)


# ---- the sandbox's functions ----------------------------------------------------------------

def _text(value: str | None) -> str | None:
    return None if value is None else redact_text(value)


def _ident(value: str | None) -> str | None:
    if value is None:
        return None
    return value if redact_text(value) == value else run_handle(value)


def _json(value: str | None) -> str | None:
    if value is None:
        return None
    try:
        tree = json.loads(value)
    except ValueError:
        return redact_text(value)
    return json.dumps(redact(tree), ensure_ascii=False, default=str)


def _checkpoint(run: str | None, namespace: str | None, cid: str | None) -> str | None:
    if cid is None or redact_text(cid) == cid:
        return cid
    return checkpoint_handle(run or "", namespace or "", cid)


NEEDS_REDACTION = "lastgood: a value needs redaction"  # the stand-ins' error (see install_stand_ins)
_FUNCTIONS = {"lastgood_text": "v", "lastgood_id": "v", "lastgood_json": "v", "lastgood_ckpt": "r, n, v"}


def install_stand_ins(con: Any) -> None:
    """The four functions as SQL macros that stop the query (an error holding NEEDS_REDACTION) at
    the first value that reaches them, i.e. the first a redaction rule could act on. Registering
    the Python functions makes DuckDB import numpy (~0.2 s of every command); a query that meets no
    such value never calls them; one that does runs again after :func:`replace_stand_ins`.
    The error is a failing cast, not ``error()``: that one is volatile, and DuckDB would then
    compute every row's redacted value before an ``ORDER BY … LIMIT`` instead of the few it keeps."""
    for name, args in _FUNCTIONS.items():
        con.execute(f"CREATE TEMP MACRO {name}({args}) AS "
                    f"CAST(CAST(concat('{NEEDS_REDACTION}', left(v, 0)) AS INTEGER) AS VARCHAR)")  # no value shown


def replace_stand_ins(con: Any) -> None:
    """The Python functions in the stand-ins' place (the views bind them when next queried)."""
    for name in _FUNCTIONS:
        con.execute(f"DROP MACRO {name}")
    install_functions(con)


def install_functions(con: Any) -> None:
    """``lastgood_text``, ``lastgood_id``, ``lastgood_json`` (one VARCHAR) and ``lastgood_ckpt``
    (run, namespace, id) on ``con``. Plain Python functions, called value by value: the views call
    them only on values a rule could act on (no Arrow round trip, no pyarrow to import)."""
    varchar = "VARCHAR"
    for name, fn in (("lastgood_text", _text), ("lastgood_id", _ident), ("lastgood_json", _json)):
        con.create_function(name, fn, [varchar], varchar, null_handling="special", side_effects=False)
    con.create_function("lastgood_ckpt", _checkpoint, [varchar] * 3, varchar, null_handling="special",
                        side_effects=False)


def redact_rows(names: Sequence[str], rows: Sequence[tuple[Any, ...]]) -> tuple[list[str], list[dict[str, Any]]]:
    """A result's rows as records, redacted as every output is (``lastgood.redact``, a column at a
    time; a column under a secret-named name masked): the names (redacted, made unique) and rows."""
    unique: list[str] = []
    for name in names:
        shown, n = redact_text(name), 2
        candidate = shown
        while candidate in unique:
            candidate, n = f"{shown}_{n}", n + 1
        unique.append(candidate)
    records = [dict(zip(unique, row)) for row in rows]
    return unique, redact(records)


# ---- a result ---------------------------------------------------------------------------------

def redact_table(table: pa.Table) -> pa.Table:
    """``table`` with its column names and every value redacted (a column under a secret-named
    name masked whole, as ``redact`` masks a dict's secret keys); columns no rule could change are
    kept as they are, without a copy."""
    import pyarrow as pa

    fields, columns = [], []
    for field, column in zip(table.schema, table.columns):
        name = redact_text(field.name)
        column = _redacted_column(field.name, column)
        fields.append(pa.field(name, column.type, metadata=field.metadata))
        columns.append(column)
    return pa.Table.from_arrays(columns, schema=pa.schema(fields))


def _redacted_column(name: str, column: pa.ChunkedArray) -> pa.ChunkedArray:
    import pyarrow as pa

    kind = column.type
    if is_secret_key(name):
        return pa.chunked_array([string_array([None if v is None else MASK for v in column.to_pylist()])])
    if pa.types.is_dictionary(kind):
        column = column.cast(kind.value_type)
        kind = column.type
    if pa.types.is_string(kind) or pa.types.is_large_string(kind) or _is_string_view(kind):
        return _redacted_strings(column)
    if pa.types.is_nested(kind):
        return _redacted_nested(column)
    return column


def _is_string_view(kind: pa.DataType) -> bool:
    import pyarrow as pa

    check = getattr(pa.types, "is_string_view", None)
    return bool(check and check(kind))


def _redacted_strings(column: pa.ChunkedArray) -> pa.ChunkedArray:
    """Each distinct value a rule could act on is redacted once; nothing is copied when none changes."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if not len(column):
        return column
    distinct = pc.unique(column)
    candidates = distinct.filter(pc.match_substring_regex(distinct, _ANCHORS, ignore_case=True))  # nulls dropped
    changed = {v: r for v in candidates.to_pylist() if v is not None and (r := redact_text(v)) != v}
    if not changed:
        return column
    return pa.chunked_array([string_array([changed.get(v, v) if v is not None else None
                                           for v in column.to_pylist()])])


def _redacted_nested(column: pa.ChunkedArray) -> pa.ChunkedArray:
    import pyarrow as pa

    values = [redact(v) for v in column.to_pylist()]
    try:
        return pa.chunked_array([pa.array(values, column.type)])
    except (pa.ArrowInvalid, pa.ArrowTypeError):  # a masked number inside: the values as JSON text
        return pa.chunked_array([string_array([None if v is None else json.dumps(v, default=str)
                                               for v in values])])
