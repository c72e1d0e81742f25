"""What a ``lastgood sql`` query may be, checked on DuckDB's own parse before anything runs.

Exactly one statement, a query (``SELECT``, ``WITH``, ``VALUES``, set operations, ``DESCRIBE`` /
``SUMMARIZE`` of a view); every table it reads is one of the documented views or a CTE of the
query itself; the only table functions are the generating ones (``range``, ``generate_series``,
``unnest``). Anything else — a write, ``COPY``, ``ATTACH``, ``INSTALL``, ``SET``, ``PRAGMA``, a
file read (``read_csv``, ``'file.parquet'``), a catalog function (``duckdb_tables()``), another
database's table, a hidden source of the sandbox — is refused with one line naming it.

This is the first of two walls: the sandbox itself (lastgood.index.sql) has no file, network,
extension or configuration access, so a query this check let through still could not write or
read outside the store's rows. What this check adds is that the rows are only ever seen through
the documented views, redacted.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from lastgood.errors import UsageError
from lastgood.index.sql_views import BY_NAME, HIDDEN_PREFIX

TABLE_FUNCTIONS = frozenset({"range", "generate_series", "unnest"})
# table references the check understands; any other kind of reference is refused
PLAIN_REFS = frozenset({"JOIN", "SUBQUERY", "EXPRESSION_LIST", "EMPTY", "PIVOT"})
MAX_QUERY_CHARS = 100_000


class QueryRefused(UsageError):
    """The query is not one this command runs (a write, a file, another table…)."""


@dataclass(frozen=True)
class CheckedQuery:
    sql: str  # as given, without a trailing ';'
    views: frozenset[str]  # the documented views it reads
    columns: frozenset[str] | None = None  # the view columns it names (None: it may read any)


def check_query(con: Any, sql: str) -> CheckedQuery:
    """The query, checked (see the module's doc); QueryRefused (one line) otherwise. ``con`` is any
    DuckDB connection (only its parser is used)."""
    text = _trimmed(sql)
    statements = _statements(con, text)
    if len(statements) != 1:
        raise QueryRefused(f"one query at a time: this text holds {len(statements)} statements")
    kind = str(statements[0].type).rsplit(".", 1)[-1]
    if kind != "SELECT":
        raise QueryRefused(f"only queries run here (SELECT, WITH, VALUES, DESCRIBE view…), not {kind}: "
                           "the index is read-only")
    tree = _serialized(con, text)
    views = set(_table_names(tree, _existing_names(con)))
    return CheckedQuery(text, frozenset(views), named_columns(tree))


def _trimmed(sql: str) -> str:
    text = (sql or "").strip()
    while text.endswith(";"):
        text = text[:-1].rstrip()
    if not text:
        raise QueryRefused("an empty query: give one, e.g. 'SELECT count(*) FROM checkpoints'")
    if len(text) > MAX_QUERY_CHARS:
        raise QueryRefused(f"the query is longer than {MAX_QUERY_CHARS:,} characters")
    return text


def _statements(con: Any, text: str) -> list[Any]:
    import duckdb

    try:
        return list(con.extract_statements(text))
    except duckdb.Error as exc:
        raise QueryRefused(f"the query cannot be parsed: {_first_line(exc)}") from None


def _serialized(con: Any, text: str) -> dict[str, Any]:
    raw = con.execute("SELECT json_serialize_sql(?)", [text]).fetchall()[0][0]
    tree = json.loads(raw)
    if tree.get("error"):
        raise QueryRefused(f"only plain queries run here: {tree.get('error_message', 'not a query')}")
    if len(tree.get("statements") or []) != 1:
        raise QueryRefused("one query at a time")
    return tree


_SYSTEM_NAMES: list[frozenset[str]] = []  # read once per process (the same in every fresh connection)


def _existing_names(con: Any) -> frozenset[str]:
    """Every relation a bare name could reach besides a CTE: DuckDB's system views (``duckdb_tables``,
    ``pg_tables``…; Lastgood's own objects all start with HIDDEN_PREFIX). ``con``: a fresh connection."""
    if not _SYSTEM_NAMES:
        rows = con.execute("""SELECT lower(view_name) FROM duckdb_views()
                              UNION SELECT lower(table_name) FROM duckdb_tables()""").fetchall()
        _SYSTEM_NAMES.append(frozenset(name for (name,) in rows))
    return _SYSTEM_NAMES[0]


def _table_names(tree: dict[str, Any], existing: frozenset[str]) -> Iterator[str]:
    """The documented views the query reads; QueryRefused on anything else it reads.

    A CTE may not take the name of anything else the sandbox holds: where the CTE is out of scope
    (defined in one subquery, named in another) the name would reach that relation instead."""
    ctes = {name.lower() for name in _cte_names(tree)}
    for name in sorted(ctes):
        if name.startswith(HIDDEN_PREFIX) or (name in existing and name not in BY_NAME):
            raise QueryRefused(f"a CTE may not be named {name!r} (a name DuckDB or Lastgood uses)")
    for node in walk_parse_tree(tree):
        if not ("sample" in node and "alias" in node and "type" in node) or "class" in node:
            continue  # not a table reference (query nodes have no alias, expressions a class)
        kind = node["type"]
        if kind == "BASE_TABLE":
            name = _base_table(node, ctes)
            if name in BY_NAME:
                yield name
        elif kind == "TABLE_FUNCTION":
            _table_function(node)
        elif kind == "SHOW_REF":
            if node.get("query") is None:  # SHOW TABLES, SHOW ALL TABLES, SHOW name…
                raise QueryRefused(f"SHOW is not available: the views are {view_list()} "
                                   "(`DESCRIBE view` lists a view's columns)")
        elif kind not in PLAIN_REFS:
            raise QueryRefused(f"this kind of table reference ({kind}) is not allowed")


def _base_table(node: dict[str, Any], ctes: set[str]) -> str:
    name = str(node.get("table_name") or "")
    qualified = node.get("catalog_name") or node.get("schema_name")
    shown = ".".join(str(p) for p in (node.get("qualified_name") or {}).get("path") or [name])
    if qualified:
        raise QueryRefused(f"{shown!r}: name the views without a database or schema ({view_list()})")
    lowered = name.lower()
    if lowered in ctes and not lowered.startswith(HIDDEN_PREFIX):
        return lowered
    if lowered in BY_NAME:
        return lowered
    raise QueryRefused(f"no view {name!r}: the views are {view_list()} (see docs/sql.md)")


def _table_function(node: dict[str, Any]) -> None:
    function = node.get("function") or {}
    name = str(function.get("function_name") or "").lower()
    if name not in TABLE_FUNCTIONS or function.get("catalog") or function.get("schema"):
        raise QueryRefused(f"table function {name}() is not available here (files, other databases and "
                           f"catalog functions are not reachable); allowed: {', '.join(sorted(TABLE_FUNCTIONS))}")


# a star (``*``, ``COLUMNS(…)``, ``ORDER BY ALL``), ``#1``, a NATURAL join, a column list on a table
# (``checkpoints AS c(a, b)``: names by position), PIVOT, DESCRIBE: columns reached without their names
_UNNAMED_CLASSES = frozenset({"STAR", "POSITIONAL_REFERENCE"})
_UNNAMED_REFS = frozenset({"PIVOT", "SHOW_REF"})


def named_columns(tree: dict[str, Any]) -> frozenset[str] | None:
    """The documented views' columns the query names anywhere (lower case), or None when it may
    reach a column without naming it: a star, a positional reference, a NATURAL join, a table's
    column list, PIVOT, DESCRIBE, or a whole row (``SELECT c FROM checkpoints c``). Other names
    (aliases, a CTE's columns, a lambda's parameters) only stand for what was named where they
    were made. A superset is always safe: the sandbox loads what is named, None loads everything."""
    known = {c.name for view in BY_NAME.values() for c in view.columns} | {"store"}
    relations = set(BY_NAME) | {name.lower() for name in _cte_names(tree)}
    refs: list[list[str]] = []
    for node in walk_parse_tree(tree):
        if node.get("class") in _UNNAMED_CLASSES or node.get("type") in _UNNAMED_REFS \
                or node.get("ref_type") == "NATURAL" or node.get("column_name_alias"):
            return None
        if "sample" in node and "alias" in node and "type" in node and "class" not in node:  # a table
            relations |= {str(node.get(k) or "").lower() for k in ("alias", "table_name")} - {""}
        refs += [[str(p).lower() for p in node.get("column_names") or ()]]
        refs += [[str(p).lower()] for p in node.get("using_columns") or ()]
    named: set[str] = set()
    for parts in refs:
        if (len(parts) == 1 and parts[0] in relations) or (len(parts) > 1 and not set(parts) & known):
            return None  # a whole row, or a field of one
        named |= set(parts) & known
    return frozenset(named)


def _cte_names(tree: dict[str, Any]) -> Iterator[str]:
    for node in walk_parse_tree(tree):
        for entry in (node.get("cte_map") or {}).get("map") or []:
            if isinstance(entry, dict) and entry.get("key"):
                yield str(entry["key"])
        if node.get("type") == "RECURSIVE_CTE_NODE" and node.get("ctename"):
            yield str(node["ctename"])


def walk_parse_tree(root: Any) -> Iterator[dict[str, Any]]:
    """Every node (dict) of a ``json_serialize_sql`` tree, depth first (order not guaranteed)."""
    stack = [root]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            yield node
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)


def view_list() -> str:
    return ", ".join(BY_NAME)


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]
