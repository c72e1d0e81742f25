"""``bisect --where "sql: EXPR"``: a SQL expression over a run's tracked fields.

The expression is a DuckDB boolean expression whose column names are tracked fields
(``lastgood track``): the column ``balance`` is the value at ``/balance``, a nested
path is a quoted identifier (``"plan/step"`` is ``/plan/step``); lists and dicts are
their length. It is evaluated as the WHERE clause of one fixed statement,

    SELECT __position FROM run WHERE (EXPR)

over a private in-memory DuckDB database that holds only the run's projection (one
row per checkpoint, one column per field) and cannot touch files or settings
(``enable_external_access`` off, configuration locked). Before it runs, DuckDB's own
parser serializes that exact statement and it must have exactly that shape: one
statement, no subquery, no other table, no CTE, no set operation; a ``;`` is refused.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from lastgood.errors import UsageError
from lastgood.index.sql_guard import walk_parse_tree

PREFIX = "sql:"
TABLE = "run"
POSITION = "__position"
STATEMENT = f"SELECT {POSITION} FROM {TABLE} WHERE ({{}})"
SANDBOX = {"enable_external_access": False, "lock_configuration": True, "threads": 1,
           "memory_limit": "256MB"}
EMPTY_CLAUSES = ("having", "sample", "qualify")
EMPTY_LISTS = ("modifiers", "group_expressions", "group_sets")
SQL_TYPES = {"number": "DOUBLE", "boolean": "BOOLEAN", "text": "VARCHAR"}


@dataclass(frozen=True)
class SqlPredicate:
    """A validated SQL predicate: its text, the expression, the columns it reads."""

    text: str
    expression: str
    columns: tuple[str, ...]


def is_sql(text: str) -> bool:
    return text.strip().lower().startswith(PREFIX)


def parse_sql(text: str) -> SqlPredicate:
    """The predicate in ``sql: EXPR``; UsageError (one line) when it is not one safe expression."""
    expression = text.strip()[len(PREFIX):].strip()
    if not expression:
        raise UsageError(f"--where {text!r}: give an expression after 'sql:', like 'sql: balance < 0'")
    if ";" in expression:
        raise UsageError(f"--where {text!r}: ';' is not allowed (one expression, not statements)")
    tree = _serialize(STATEMENT.format(expression), text)
    where = _checked_where(tree, text)
    columns = {ref.lower(): ref for ref in _column_refs(where, text) if ref.lower() != POSITION}
    return SqlPredicate(text, expression, tuple(sorted(columns.values())))


def _serialize(statement: str, text: str) -> dict[str, Any]:
    import duckdb

    with duckdb.connect(":memory:", config=SANDBOX) as con:
        raw = con.execute("SELECT json_serialize_sql(?)", [statement]).fetchone()
    tree = json.loads(raw[0]) if raw else {"error": True, "error_message": "no parse"}
    if tree.get("error"):
        message = str(tree.get("error_message", "not an expression")).splitlines()[0]
        raise UsageError(f"--where {text!r} is not one SQL expression: {message}")
    return tree


def _checked_where(tree: dict[str, Any], text: str) -> dict[str, Any]:
    """The WHERE clause, after checking the statement is exactly ``STATEMENT``'s shape."""
    statements = tree.get("statements") or []
    node = statements[0].get("node", {}) if len(statements) == 1 else {}
    source = node.get("from_table") or {}
    select = node.get("select_list") or []
    shaped = (node.get("type") == "SELECT_NODE" and source.get("type") == "BASE_TABLE"
              and source.get("table_name") == TABLE and not source.get("schema_name")
              and not source.get("catalog_name") and len(select) == 1
              and select[0].get("column_names") == [POSITION] and not (node.get("cte_map") or {}).get("map")
              and all(not node.get(k) for k in EMPTY_CLAUSES + EMPTY_LISTS) and node.get("where_clause"))
    if not shaped:
        raise UsageError(f"--where {text!r} must be one expression over the run's tracked fields")
    return node["where_clause"]


def _column_refs(where: dict[str, Any], text: str) -> Iterator[str]:
    """Column names the expression reads; UsageError on a subquery or another table's column."""
    for node in walk_parse_tree(where):
        if node.get("class") == "SUBQUERY" or "subquery" in node or "from_table" in node:
            raise UsageError(f"--where {text!r}: subqueries are not allowed (only this run's tracked fields)")
        if node.get("class") == "COLUMN_REF":
            names = node.get("column_names") or []
            if len(names) > 2 or (len(names) == 2 and names[0].lower() != TABLE):
                raise UsageError(f"--where {text!r}: {'.'.join(names)!r} is not a field of this run")
            yield names[-1]


# ---------------------------------------------------------------- the projection

def column_type(values: list[dict[str, Any] | None]) -> str:
    """``number`` when every present value has a number (lists and dicts: their length),
    ``boolean`` when all are booleans, else ``text``."""
    present = [v for v in values if v is not None and v["kind"] not in ("missing", "error")]
    if all(v["number"] is not None for v in present):
        return "number"
    if all(v["kind"] == "bool" for v in present):
        return "boolean"
    return "text"


def column_values(values: list[dict[str, Any] | None], kind: str) -> list[Any]:
    """One SQL value per checkpoint (NULL when missing, unreadable or not tracked)."""
    out: list[Any] = []
    for v in values:
        if v is None or v["kind"] in ("missing", "error"):
            out.append(None)
        elif kind == "number":
            out.append(v["number"])
        elif kind == "boolean":
            out.append(bool(v["value"]))
        else:
            out.append(v["value"] if isinstance(v["value"], str) else json.dumps(v["value"]))
    return out


def evaluate(predicate: SqlPredicate, columns: dict[str, list[dict[str, Any] | None]], rows: int) -> list[int]:
    """Positions (0-based, in order) of the rows where the expression is true."""
    import duckdb

    names = list(columns)
    kinds = [column_type(columns[n]) for n in names]
    select = [f"unnest(?::BIGINT[]) AS {POSITION}"] + [
        f"unnest(?::{SQL_TYPES[k]}[]) AS {_quote(n)}" for n, k in zip(names, kinds)]
    params: list[Any] = [list(range(rows))] + [column_values(columns[n], k) for n, k in zip(names, kinds)]
    with duckdb.connect(":memory:", config=SANDBOX) as con:
        con.execute(f"CREATE TABLE {TABLE} AS SELECT {', '.join(select)}", params)
        try:
            found = con.execute(STATEMENT.format(predicate.expression)).fetchall()
        except duckdb.Error as exc:
            message = str(exc).splitlines()[0]
            raise UsageError(f"--where {predicate.text!r} cannot be evaluated: {message}") from None
    return sorted(int(r[0]) for r in found)


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'
