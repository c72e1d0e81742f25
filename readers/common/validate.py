"""The validation boundary: everything a reader parses from a store is checked here, once.

Catalog entries, head pointers, pending markers, store markers and LangGraph rows
arrive as untrusted JSON or database values. Each ``valid_*`` function returns a
clean value (right types, ranges and encodings) or raises ``Invalid`` saying what
is wrong; the reader turns that into a finding naming the file, line or row, and
everything valid still loads. Past this boundary the rest of Lastgood may trust
types: ids are short valid UTF-8 strings, steps fit in 64 bits, times are real
times, metadata is a JSON object.

Also here: iterative measures of decoded data (``depth_exceeds``, ``cost``) so a
state nested 10,000 deep or a patch bomb becomes a finding, not a RecursionError.
"""

from __future__ import annotations

import json
import math
import threading
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from itertools import chain, compress, repeat
from operator import floordiv, is_
from typing import Any

from lastgood import limits
from lastgood.checks import Check
from lastgood.errors import ReaderError


class Invalid(ValueError):
    """A parsed value is not acceptable; the message says which field and why."""

    def __init__(self, message: str, check: Check = Check.ROW_INVALID) -> None:
        super().__init__(message)
        self.check = check


# ---- scalars -------------------------------------------------------------------------

def text(value: Any, field: str, *, required: bool = False,
         max_chars: int = limits.MAX_ID_CHARS) -> str | None:
    """A string field: valid UTF-8 (no lone surrogates), no NUL, bounded length."""
    if value is None or value == "":
        if required:
            raise Invalid(f"{field} is missing")
        return None if value is None else ""
    if not isinstance(value, str):
        raise Invalid(f"{field} must be a string, not {type(value).__name__}")
    if len(value) > max_chars:
        raise Invalid(f"{field} is {len(value)} characters long (limit {max_chars})")
    if "\x00" in value:
        raise Invalid(f"{field} contains a NUL character")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise Invalid(f"{field} is not valid Unicode (lone surrogate)") from None
    return value


def integer(value: Any, field: str, *, minimum: int = -limits.MAX_INT64,
            maximum: int = limits.MAX_INT64) -> int | None:
    """An integer field (integral finite floats accepted), within 64 bits and the range."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise Invalid(f"{field} must be an integer, not {type(value).__name__}")
    if isinstance(value, float):
        if not math.isfinite(value) or not value.is_integer():
            raise Invalid(f"{field} must be an integer, not {value!r}")
        value = int(value)
    if not minimum <= value <= maximum:
        raise Invalid(f"{field} {value} is out of range ({minimum}..{maximum})")
    return value


MAX_EPOCH = datetime(limits.MAX_YEAR, 12, 31, tzinfo=UTC).timestamp()
MIN_EPOCH = datetime(limits.MIN_YEAR, 1, 1, tzinfo=UTC).timestamp()


def timestamp(value: Any, field: str) -> datetime | None:
    """A time: ISO 8601 text or epoch seconds, between MIN_YEAR and MAX_YEAR (UTC if naive)."""
    if value is None or value == "":
        return None
    if isinstance(value, bool):
        raise Invalid(f"{field} must be a time, not a boolean")
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    if isinstance(value, (int, float)):
        if not (isinstance(value, int) or math.isfinite(value)) or not MIN_EPOCH <= value <= MAX_EPOCH:
            raise Invalid(f"{field} {value!r} is not a time between {limits.MIN_YEAR} and {limits.MAX_YEAR}")
        return datetime.fromtimestamp(value, UTC)
    raw = text(value, field, max_chars=64)
    try:
        parsed = datetime.fromisoformat(str(raw).replace("Z", "+00:00"))
    except ValueError:
        raise Invalid(f"{field} {raw!r} is not an ISO 8601 time") from None
    parsed = parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)
    try:
        parsed.astimezone(UTC)
    except (OverflowError, ValueError):
        raise Invalid(f"{field} {raw!r} is out of range") from None
    if not limits.MIN_YEAR <= parsed.astimezone(UTC).year <= limits.MAX_YEAR:
        raise Invalid(f"{field} {raw!r} is not between {limits.MIN_YEAR} and {limits.MAX_YEAR}")
    return parsed


def choice(value: Any, field: str, allowed: tuple[str, ...], default: str) -> str:
    if value is None or value == "":
        return default
    if value not in allowed:
        raise Invalid(f"{field} {_short(value)} is not one of {', '.join(allowed)}")
    return str(value)


def metadata_text(value: Any, field: str = "metadata") -> str:
    """Metadata as JSON text of an object: a dict, or text holding one."""
    if value is None or value == "":
        return "{}"
    if isinstance(value, str):
        text(value, field, max_chars=limits.MAX_METADATA_CHARS)
        value = loads(value.encode("utf-8"), field)
    if not isinstance(value, dict):
        raise Invalid(f"{field} must be a JSON object, not {type(value).__name__}", Check.METADATA_INVALID)
    if depth_exceeds(value, limits.MAX_DEPTH):
        raise Invalid(f"{field} is nested deeper than {limits.MAX_DEPTH}", Check.METADATA_INVALID)
    try:
        out = json.dumps(value, sort_keys=True, ensure_ascii=False, allow_nan=False)
        out.encode("utf-8")
    except (ValueError, TypeError, UnicodeEncodeError) as exc:
        raise Invalid(f"{field} is not plain JSON ({exc})", Check.METADATA_INVALID) from None
    if len(out) > limits.MAX_METADATA_CHARS:
        raise Invalid(f"{field} is larger than {limits.MAX_METADATA_CHARS} characters",
                      Check.METADATA_INVALID)
    return out


def loads(data: bytes, what: str) -> Any:
    """JSON from bytes; every failure (bad UTF-8, syntax, nesting) is Invalid."""
    try:
        return json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise Invalid(f"{what} is not valid JSON ({exc})") from None
    except RecursionError:
        raise Invalid(f"{what} is nested too deeply", Check.TOO_DEEP) from None


def json_object(data: bytes, what: str, max_bytes: int = limits.MAX_SMALL_FILE_BYTES) -> dict[str, Any]:
    if len(data) > max_bytes:
        raise Invalid(f"{what} is larger than {max_bytes} bytes", Check.TOO_LARGE)
    value = loads(data, what)
    if not isinstance(value, dict):
        raise Invalid(f"{what} is not a JSON object")
    return value


def _short(value: Any, width: int = 40) -> str:
    shown = repr(value)
    return shown if len(shown) <= width else shown[: width - 1] + "…"


# ---- native records --------------------------------------------------------------------

ENTRY_KINDS = ("full", "incremental")


def native_entry(row: Any) -> tuple[dict[str, Any], str | None]:
    """(a clean catalog entry, a metadata problem or None); Invalid when the entry is unusable.

    Bad metadata alone does not drop a checkpoint: it is listed with ``{}`` and
    the problem is reported."""
    if not isinstance(row, dict):
        raise Invalid(f"a catalog entry must be a JSON object, not {type(row).__name__}")
    out = {
        "run_id": text(row.get("run_id"), "run_id", required=True),
        "checkpoint_id": text(row.get("checkpoint_id"), "checkpoint_id", required=True),
        "namespace": text(row.get("namespace"), "namespace") or "",
        "parent_id": text(row.get("parent_id"), "parent_id"),
        "step": integer(row.get("step"), "step"),
        "created_at": timestamp(row.get("created_at"), "created_at"),
        "trigger": text(row.get("trigger"), "trigger", max_chars=limits.MAX_TEXT_CHARS),
        "kind": choice(row.get("kind"), "kind", ENTRY_KINDS, "full"),
        "size_bytes": integer(row.get("size_bytes"), "size_bytes", minimum=0),
        "checksum": text(row.get("checksum"), "checksum", max_chars=128),
        "agent": text(row.get("agent"), "agent"),
        "codec": text(row.get("codec"), "codec", required=True, max_chars=64),
        "location": text(row.get("location"), "location", required=True),
    }
    try:
        out["metadata"] = metadata_text(row.get("metadata"))
        return out, None
    except Invalid as exc:
        out["metadata"] = "{}"
        return out, str(exc)


def native_head(value: Mapping[str, Any]) -> tuple[str, str, str]:
    """(run_id, checkpoint_id, namespace) of a head pointer."""
    return (str(text(value.get("run_id"), "run_id", required=True)),
            str(text(value.get("checkpoint_id"), "checkpoint_id", required=True)),
            text(value.get("namespace"), "namespace") or "")


def native_pending(value: Mapping[str, Any]) -> dict[str, Any]:
    """The fields of a pending marker (a save in progress), validated."""
    return {
        "run_id": text(value.get("run_id"), "run_id", required=True),
        "checkpoint_id": text(value.get("checkpoint_id"), "checkpoint_id", required=True),
        "namespace": text(value.get("namespace"), "namespace") or "",
        "parent_id": text(value.get("parent_id"), "parent_id"),
        "step": integer(value.get("step"), "step"),
        "started_at": timestamp(value.get("started_at"), "started_at"),
        "trigger": text(value.get("trigger"), "trigger", max_chars=limits.MAX_TEXT_CHARS),
        "kind": choice(value.get("kind"), "kind", ENTRY_KINDS, "full"),
        "agent": text(value.get("agent"), "agent"),
        "codec": text(value.get("codec"), "codec", max_chars=64),
        "location": text(value.get("location"), "location"),
    }


def store_marker(value: Any, url: str, name: str, version: int) -> None:
    """Refuse a store whose marker names another format or a version this code does not know."""
    if not isinstance(value, dict) or value.get("format") != name:
        raise ReaderError(f"{url} is not a {name} store (its marker names format "
                          f"{_short(value.get('format') if isinstance(value, dict) else value)})")
    found = value.get("version")
    if isinstance(found, bool) or not isinstance(found, int) or found != version:
        raise ReaderError(f"{url} uses {name} format version {_short(found)}; this Lastgood reads "
                          f"version {version} only — upgrade Lastgood to read it")


# ---- LangGraph rows ------------------------------------------------------------------------

# columns of a listed LangGraph checkpoint row: (name, None allowed)
LANGGRAPH_TEXT_COLUMNS = (("thread_id", False), ("checkpoint_ns", True), ("checkpoint_id", False),
                          ("parent_checkpoint_id", True), ("type", True))


def langgraph_rows(rows: list[tuple[Any, ...]], findings: list[Any], table: str = "checkpoints"
                   ) -> list[tuple[Any, ...]]:
    """The listed rows whose key and type columns are text (a NULL only where
    LangGraph writes one); each other row becomes a finding naming it. Rows are
    tuples starting with LANGGRAPH_TEXT_COLUMNS, then ``length(checkpoint)``.
    A fast type scan per column; rows are looked at one by one only when it fails."""
    if not rows or _langgraph_types_ok(rows):
        return rows
    from lastgood.readers.base import Finding

    good = []
    for row in rows:
        try:
            key = _langgraph_key(row)
        except Invalid as exc:
            findings.append(Finding(Check.ROW_INVALID, "error", f"{table} row {_short(row[:3], 120)}: {exc}"))
            continue
        good.append((*key, *row[len(key):]))
    return good


def _langgraph_types_ok(rows: list[tuple[Any, ...]]) -> bool:
    columns = list(zip(*rows))
    for index, (_name, nullable) in enumerate(LANGGRAPH_TEXT_COLUMNS):
        kinds = set(map(type, columns[index]))
        if not kinds <= ({str, type(None)} if nullable else {str}):
            return False
        present = [v for v in columns[index] if v]  # C-speed checks: 100k ids per listing batch
        if max(map(len, present), default=0) > limits.MAX_ID_CHARS or "\x00" in "".join(present):
            return False
    return True


def _langgraph_key(row: tuple[Any, ...]) -> tuple[Any, ...]:
    out = []
    for (name, nullable), value in zip(LANGGRAPH_TEXT_COLUMNS, row):
        if value is None and not nullable:
            raise Invalid(f"{name} is NULL")
        out.append(text(value, name, required=not nullable) if value is not None else None)
    return tuple(out)


# ---- compacted parts ------------------------------------------------------------------

_PART_PROBLEMS = """
SELECT count(*) FILTER (WHERE {bad}) AS bad, count(*) AS n,
       count(DISTINCT (run_id, coalesce(namespace, ''), checkpoint_id)) AS distinct_ids
FROM {source}"""
# microseconds since the epoch of the first and last instants of the years a time may have (UTC)
_FIRST_US = (datetime(limits.MIN_YEAR, 1, 1, tzinfo=UTC) - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(microseconds=1)
_LAST_US = (datetime(limits.MAX_YEAR, 12, 31, tzinfo=UTC) - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(
    microseconds=1) + 86_400_000_000 - 1
# a part's row the index would refuse, or one to look at row by row (shared with native_profile):
# lengths in bytes (quick; never fewer than characters), years by the instant (not by a calendar
# in the session's time zone)
BAD_ROW_SQL = " OR ".join([
    *[f"coalesce({c}, '') = '' OR strlen({c}) > {limits.MAX_ID_CHARS} OR contains({c}, chr(0))"
      for c in ("run_id", "checkpoint_id", "location", "codec")],
    *[f"strlen({c}) > {limits.MAX_ID_CHARS} OR contains({c}, chr(0))"
      for c in ("namespace", "parent_id", "agent")],
    "coalesce(kind, 'full') NOT IN ('full', 'incremental')",
    "size_bytes < 0",
    f"epoch_us(created_at) NOT BETWEEN {_FIRST_US} AND {_LAST_US}",
    "(coalesce(metadata, '') <> '' AND (NOT coalesce(json_valid(metadata), false) "
    "OR json_type(metadata) <> 'OBJECT'))",
])


def part_is_clean(source: Any, rows: int) -> bool:
    """True when every row of a compacted part (a local Parquet path or an Arrow
    table) is valid and no (run, namespace, checkpoint) repeats — checked in DuckDB
    without turning rows into Python. False sends the part down ``part_entries``."""
    import duckdb

    con = duckdb.connect()
    try:
        if isinstance(source, str):
            sql, params = _PART_PROBLEMS.format(bad=BAD_ROW_SQL, source="read_parquet($path)"), {"path": source}
        else:
            con.register("part", source)
            sql, params = _PART_PROBLEMS.format(bad=BAD_ROW_SQL, source="part"), {}
        bad, n, distinct = con.execute(sql, params).fetchone()
    except duckdb.Error:
        return False
    finally:
        con.close()
    return bad == 0 and n == distinct == rows


def part_entries(table: Any, name: str, findings: list[Any]) -> list[dict[str, Any]]:
    """The valid rows of a part that failed ``part_is_clean``; a finding per bad row.

    Rows are validated one by one (like tail lines); a repeated checkpoint keeps
    its last row. A column that cannot be read at all fails the whole part."""
    from lastgood.readers.base import Finding

    try:
        rows = table.to_pylist()
    except (UnicodeDecodeError, ValueError) as exc:
        raise Invalid(f"rows cannot be read ({exc})", Check.CATALOG_UNREADABLE) from None
    entries: dict[tuple[str, str, str], dict[str, Any]] = {}
    for number, row in enumerate(rows):
        try:
            entry, problem = native_entry(row)
        except Invalid as exc:
            findings.append(Finding(Check.ROW_INVALID, "error", f"{name} row {number}: {exc}"))
            continue
        if problem:
            findings.append(Finding(Check.METADATA_INVALID, "warning", f"{name} row {number}: {problem}",
                                    entry["run_id"], entry["namespace"], entry["checkpoint_id"]))
        entries[(entry["run_id"], entry["namespace"], entry["checkpoint_id"])] = entry
    return list(entries.values())


# ---- decoded data ------------------------------------------------------------------------
#
# One walk measures a decoded value: its cost (``cost``) and whether it nests deeper than a
# limit (``depth_exceeds``). It goes level by level, and the work per value runs in C
# (``map``/``compress``/``chain`` over exact types), not a Python loop per node: ~4× faster than
# the two stack walks it replaces, and iterative, so 10,000 levels are a finding, not a
# RecursionError.

_TEXT_TYPES = frozenset((str, bytes))
_SEQUENCE_TYPES = frozenset((list, tuple))
_PLAIN_TYPES = frozenset((dict, list, tuple, str, bytes, int, float, bool, type(None)))
_KINDS = (dict, list, tuple, str, bytes)
_CONTAINER_TYPES = frozenset((dict, list, tuple))
_FLOAT_BOUND = float(2**63)


def measure(value: Any, budget: int = limits.MAX_STATE_COST, depth_limit: int | None = None,
            key_types: set[type] | None = None) -> tuple[int, bool]:
    """(``value``'s cost, whether containers nest deeper than ``depth_limit``).

    The cost is exact up to ``budget``; past it the walk stops (the result is then
    only known to be over the budget, and levels below are not looked at: shared
    sub-objects cannot make it walk without end). ``key_types`` collects the types
    of the dict keys walked (a decoder checks its keys on the same walk)."""
    total, depth, level = 0, 0, [value]
    while level:
        total += len(level)
        types = _exact_kinds(level)
        kinds = set(types)
        if kinds & _TEXT_TYPES:
            texts = compress(level, map(_TEXT_TYPES.__contains__, types))
            total += sum(map(floordiv, map(len, texts), repeat(256)))
        has_dict, has_sequence = dict in kinds, not kinds.isdisjoint(_SEQUENCE_TYPES)
        if not (has_dict or has_sequence):
            break
        if depth_limit is not None and depth >= depth_limit:
            return total, True
        dicts = list(compress(level, map(is_, types, repeat(dict)))) if has_dict else []
        total += sum(map(len, dicts))
        if key_types is not None and dicts:
            key_types.update(map(type, chain.from_iterable(dicts)))
        if total > budget:
            break
        children: Iterable[Any] = chain.from_iterable(map(dict.values, dicts))
        if has_sequence:
            sequences = compress(level, map(_SEQUENCE_TYPES.__contains__, types))
            children = chain(children, chain.from_iterable(sequences))
        level = list(children)
        depth += 1
    return total, False


def nests_deeper(value: Any, limit: int, key_types: set[type] | None = None,
                 floats: list[bool] | None = None) -> bool:
    """Whether containers in ``value`` nest deeper than ``limit``: ``measure``'s answer
    without the cost (fewer passes per level), for a value whose cost is known to be
    within budget.

    ``key_types``: as ``measure``. ``floats`` gets one ``False`` when a float is not
    *plain* (NaN, ±Inf, or of magnitude ≥ 2**63) or a value of another than the plain
    types is met (its floats are not looked at)."""
    depth, values = 0, [value]
    while values:
        types = list(map(type, values))
        kinds = set(types)
        if not kinds <= _PLAIN_TYPES:  # subclasses (an OrderedDict) are walked as their base, as measure does
            if floats is not None:
                floats.append(False)
                floats = None
            types = _exact_kinds(values)
            kinds = set(types)
        if floats is not None and float in kinds and not _plain_floats(values, types):
            floats.append(False)
            floats = None
        containers = kinds & _CONTAINER_TYPES
        if not containers:
            return False
        if depth >= limit:
            return True
        children: Iterable[Any] = ()
        for kind in containers:
            same = values if len(kinds) == 1 else compress(values, map(is_, types, repeat(kind)))
            if kind is dict:
                dicts = list(same)
                if key_types is not None:
                    key_types.update(map(type, chain.from_iterable(dicts)))
                children = chain(children, chain.from_iterable(map(dict.values, dicts)))
            else:
                children = chain(children, chain.from_iterable(same))
        values = list(children)
        depth += 1
    return False


def _plain_floats(values: list[Any], types: list[type]) -> bool:
    """True when every float in ``values`` is finite and of magnitude < 2**63 (a sum that
    is not finite means a NaN, an infinity, or huge values: all answered False)."""
    floats = list(compress(values, map(is_, types, repeat(float))))
    return math.isfinite(sum(floats)) and -_FLOAT_BOUND < min(floats) and max(floats) < _FLOAT_BOUND


def _exact_kinds(level: list[Any]) -> list[type]:
    """The type of each value, with subclasses (an OrderedDict, a str enum) as their base."""
    types = list(map(type, level))
    if set(types) <= _PLAIN_TYPES:
        return types
    return [next((kind for kind in _KINDS if isinstance(node, kind)), object) for node in level]


def depth_exceeds(value: Any, limit: int = limits.MAX_DEPTH) -> bool:
    """True when containers in ``value`` nest deeper than ``limit`` (iterative)."""
    return measure(value, _NO_BUDGET, limit)[1]


_NO_BUDGET = 2**62


def cost(value: Any, budget: int = limits.MAX_STATE_COST) -> int:
    """Nodes in ``value`` plus one per dict key and per 256 characters of text (str or
    bytes); stops counting past ``budget``.

    Shared sub-objects count every time they appear: that is what rendering them costs.
    The value ``check_state`` measured last is answered from that measurement, once (a
    reader asks for the cost of the state it just checked; asked again, the value may
    have been patched in place since, so it is measured)."""
    global _last_checked
    checked = _last_checked
    if checked is not None and checked[0] is value:
        _last_checked = None
        return checked[1]
    return measure(value, budget)[0]


# (value, its exact cost): the last state check_state passed (one reference held until the next)
_last_checked: tuple[Any, int] | None = None


def check_state(value: Any, what: str = "state", encoded_bytes: int | None = None,
                key_types: set[type] | None = None, floats: list[bool] | None = None,
                cost_per_byte: int | None = None) -> None:
    """Invalid (TOO_DEEP / TOO_LARGE) when a decoded state is beyond the bounds.

    ``encoded_bytes`` (the payload's size) says what can fail: a decoded value costs
    at most ``cost_per_byte`` (default ``COST_PER_BYTE``; JSON: 1) per encoded byte,
    and every level of nesting takes at least one byte. When the cost cannot pass
    the budget only the depth is walked (``nests_deeper``; the cost stays unknown,
    ``known_cost`` says None); when neither can fail and nothing is asked of the walk,
    nothing is walked; otherwise one walk (``measure``) answers both.
    ``key_types`` and ``floats``: as ``nests_deeper`` (always walked then)."""
    global _last_checked
    per_byte = COST_PER_BYTE if cost_per_byte is None else cost_per_byte
    if encoded_bytes is not None and encoded_bytes * per_byte <= limits.MAX_STATE_COST:
        if encoded_bytes <= limits.MAX_DEPTH and key_types is None and floats is None:
            return
        if nests_deeper(value, limits.MAX_DEPTH, key_types, floats):
            raise Invalid(f"{what} is nested deeper than {limits.MAX_DEPTH} levels", Check.TOO_DEEP)
        return
    total, too_deep = measure(value, limits.MAX_STATE_COST, limits.MAX_DEPTH, key_types)
    if too_deep:
        raise Invalid(f"{what} is nested deeper than {limits.MAX_DEPTH} levels", Check.TOO_DEEP)
    if total > limits.MAX_STATE_COST:
        raise Invalid(f"{what} is larger than {limits.MAX_STATE_COST:,} values", Check.TOO_LARGE)
    if floats is not None:
        nests_deeper(value, limits.MAX_DEPTH, None, floats)  # within bounds: only the floats are asked
    _last_checked = (value, total)


def known_cost(value: Any) -> int | None:
    """``value``'s cost when ``check_state`` measured it last (answered once), else None."""
    global _last_checked
    checked = _last_checked
    if checked is not None and checked[0] is value:
        _last_checked = None
        return checked[1]
    return None


# Values a decoder proved free of NaN/±Inf (JSON that orjson accepted: it refuses those
# tokens; msgpack whose floats the bounds walk saw all finite), by identity, holding a
# reference so the id is not reused; each answered once (``proven_finite``). Kept only
# inside ``finite_marks()`` (a verification chunk: its states are checked, then their
# content), per thread, and dropped on leaving it: nothing is held after.
_marks = threading.local()


@contextmanager
def finite_marks() -> Iterator[None]:
    """Within this block (this thread), decoders' ``mark_finite`` calls are remembered."""
    outer = getattr(_marks, "values", None)
    _marks.values = {}
    try:
        yield
    finally:
        _marks.values = outer


def mark_finite(value: Any) -> None:
    marks = getattr(_marks, "values", None)
    if marks is not None:
        marks[id(value)] = value


def proven_finite(value: Any) -> bool:
    """True (once) when ``value`` was marked by ``mark_finite`` in this ``finite_marks`` block."""
    marks = getattr(_marks, "values", None)
    if marks is not None and marks.get(id(value)) is value:
        del marks[id(value)]
        return True
    return False


# A JSON value costs at most one per encoded byte (``[]`` is 2 bytes for 1, ``"":0,`` 4 bytes
# for 2); msgpack at most 7/3 (an ext of 3 bytes decodes to a 3-key dict costing 7).
COST_PER_BYTE = 3
