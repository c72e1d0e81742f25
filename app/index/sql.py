"""``lastgood sql``: read-only SQL over a store's rows in the index, through documented views.

A query runs in a sandbox built for it: a private in-memory DuckDB database holding only the
rows of the store it is scoped to (``store_id``; ``None``: every store of the index), under hidden
names, and the documented views over them (lastgood.index.sql_views: ``checkpoints``, ``runs``,
``findings``, ``events``, ``actions``, ``tensors``; columns in docs/sql.md), which show store text
redacted. Only the sources the query's views read are loaded. Two walls keep it read-only:

1. the query is checked on DuckDB's own parse first (lastgood.index.sql_guard): one query, reading
   only the views (or its own CTEs) — no write, ``COPY``, ``ATTACH``, ``INSTALL``, ``SET``, file,
   catalog function or hidden source;
2. the sandbox has no file, network or extension access (``enable_external_access`` off,
   extensions neither installed nor loaded automatically, no spill directory) and its
   configuration is locked. The index file is never opened by it: the rows arrive as Arrow
   tables read through the index's own connection. A compacted Parquet part the index reads in
   place (lastgood.index.attached) is read through a file system that opens that one file
   read-only and nothing else.

The views' redaction functions are first SQL stand-ins that stop the query at the first value a
redaction rule could act on (lastgood.index.sql_redact.install_stand_ins: the Python functions cost
a numpy import); only then does the query run again, the Python functions in their place. Of the
checkpoints' rows, only the columns a query names are read (lastgood.index.sql_guard.named_columns).

A statement running longer than ``timeout`` seconds is interrupted (QueryTimeout).
:func:`run_query` returns the first ``limit`` rows as an Arrow table with the true row count,
every column name and value redacted (lastgood.index.sql_redact).
"""

from __future__ import annotations

import io
import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TypeVar

import duckdb

from lastgood.errors import UsageError
from lastgood.index.catalog import Catalog, distinct_findings
from lastgood.index.sql_guard import CheckedQuery, QueryRefused, check_query
from lastgood.index.sql_redact import NEEDS_REDACTION
from lastgood.index.sql_views import (BY_NAME, EXAMPLES, RAW_CHECKPOINT_COLUMNS, STORE_COLUMN, VIEWS, part_branch,
                                      raw_columns, raw_select, view_sql)

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["DEFAULT_TIMEOUT", "EXAMPLES", "PAGE_ROWS", "QueryError", "QueryRefused", "QueryTimeout", "Rows", "VIEWS",
           "describe_views", "examples", "query_rows", "run_query"]

T = TypeVar("T")
DEFAULT_TIMEOUT = 30.0
PAGE_ROWS = 1000  # rows a page shows of a result (the count is always the true one)
BATCH_ROWS = 65_536
PART_PROTOCOL = "lastgoodpart"
SANDBOX_CONFIG = {"autoinstall_known_extensions": False, "autoload_known_extensions": False,
                  "allow_community_extensions": False, "allow_persistent_secrets": False}


class QueryError(UsageError):
    """The query failed in DuckDB (a binder, type or conversion error…): one line, exit 2."""


class QueryTimeout(QueryError):
    """The query ran longer than its time limit and was interrupted."""


class NeedsRedaction(QueryError):
    """A value reached a redaction function's stand-in: run the query again with the Python ones."""


# ---- the sources: the store's rows, read through the index's connection ------------------------

_WHERE = "{where}"
_COLUMNS = "{columns}"
SOURCE_SQL = {
    "rows": f"SELECT {_COLUMNS} FROM checkpoint_rows WHERE {_WHERE}",
    "heads": f"SELECT store_id, run_id, namespace, checkpoint_id FROM heads WHERE {_WHERE}",
    "findings": """SELECT store_id, run_id, coalesce(namespace, '') AS namespace, checkpoint_id, "check",
                   severity, message, depth, found_at FROM """ + distinct_findings(_WHERE),
    "events": f"""SELECT store_id, run_id, coalesce(namespace, '') AS namespace, checkpoint_id, created_at, kind,
                  channel, task_id, message FROM events WHERE {_WHERE}""",
    "journal": f"""SELECT store_id, action_id, seq, acted_at, operator, action, run_id,
                   coalesce(namespace, '') AS namespace, target, previous_head, new_head,
                   superseded::VARCHAR AS superseded, reason, undoes, hash, prev_hash
                   FROM journal WHERE {_WHERE}""",
    "tensors": f"""SELECT store_id, run_id, namespace, checkpoint_id, name, dtype, shape, numel, nan, posinf,
                   neginf, zeros, min, max, mean, std, norm, sha256, checked_at FROM tensor_stats WHERE {_WHERE}""",
    "stores": f"SELECT store_id, display_url FROM stores WHERE {_WHERE}",
}


@dataclass
class Part:
    store_id: int
    path: str
    verified: str | None
    data_checked_at: datetime | None


@dataclass
class Sources:
    tables: dict[str, pa.Table] = field(default_factory=dict)
    empty: dict[str, list[tuple[str, str]]] = field(default_factory=dict)  # name -> its columns and types
    parts: list[Part] = field(default_factory=list)
    columns: tuple[str, ...] = RAW_CHECKPOINT_COLUMNS  # the raw checkpoint columns loaded (others: NULL)
    types: dict[str, str] = field(default_factory=dict)  # every raw checkpoint column's type


def load_sources(catalog: Catalog, store_id: int | None, names: set[str],
                 columns: tuple[str, ...] = RAW_CHECKPOINT_COLUMNS) -> Sources:
    """The rows of ``names`` (SOURCE_SQL keys, and "parts"), of one store or of all: an Arrow table
    each, or only its columns when it has no row (no Arrow: a query over a store whose rows are all
    in an attached part needs no pyarrow). Of the checkpoints' rows only ``columns`` are read."""
    where = "true" if store_id is None else "store_id = $sid"
    params = {} if store_id is None else {"sid": int(store_id)}
    sources = Sources(columns=columns)
    with catalog.connect() as con:
        for name in sorted(names & SOURCE_SQL.keys()):
            sql = SOURCE_SQL[name].replace(_WHERE, where)
            if name == "rows":
                sources.types = _raw_types(con)
                sql = sql.replace(_COLUMNS, ", ".join(_RAW_AS.get(c, c) for c in columns))
            relation = con.sql(sql, params=params or None)
            if con.execute(f"SELECT EXISTS ({sql})", params).fetchall()[0][0]:
                sources.tables[name] = relation.to_arrow_table()
            else:
                sources.empty[name] = [(c, str(t)) for c, t in zip(relation.columns, relation.types)]
        if "parts" in names:
            rows = con.execute(f"""SELECT store_id, path, verified, data_checked_at FROM attached_parts
                                   WHERE {where} ORDER BY store_id""", params).fetchall()
            sources.parts = [Part(int(s), str(p), v, c) for s, p, v, c in rows]
    return sources


_RAW_AS = {"metadata": "metadata::VARCHAR AS metadata"}


def _raw_types(con: duckdb.DuckDBPyConnection) -> dict[str, str]:
    """The type of every raw checkpoint column as the sandbox holds it (the query is bound, not run)."""
    relation = con.sql(f"SELECT {', '.join(_RAW_AS.get(c, c) for c in RAW_CHECKPOINT_COLUMNS)} FROM checkpoint_rows")
    return {name: str(kind) for name, kind in zip(relation.columns, relation.types)}


def needed_sources(views: set[str], all_stores: bool) -> set[str]:
    names = {source for view in views for source in BY_NAME[view].sources}
    return names | ({"stores"} if all_stores and views else set())


# ---- the sandbox --------------------------------------------------------------------------------

def _part_files() -> type:
    from fsspec import AbstractFileSystem

    class PartFiles(AbstractFileSystem):  # type: ignore[misc,valid-type]
        """``lastgoodpart://N.parquet``: the index's private copy of store N's part, opened read-only;
        nothing else exists on it, and nothing can be written."""

        protocol = PART_PROTOCOL
        cachable = False

        def __init__(self, files: dict[str, str]) -> None:
            super().__init__()
            self.files = dict(files)

        @classmethod
        def _strip_protocol(cls, path: Any) -> str:
            text = str(path)
            return text.split("://", 1)[1] if "://" in text else text

        def _real(self, path: Any) -> str:
            name = self._strip_protocol(path).lstrip("/")
            if name not in self.files:
                raise FileNotFoundError(path)
            return self.files[name]

        def _open(self, path: Any, mode: str = "rb", **kwargs: Any) -> Any:
            if mode != "rb":
                raise PermissionError(f"{path}: read-only")
            return ReadOnlyFile(self._real(path))

        def info(self, path: Any, **kwargs: Any) -> dict[str, Any]:
            stat = os.stat(self._real(path))
            return {"name": self._strip_protocol(path).lstrip("/"), "size": stat.st_size, "type": "file",
                    "mtime": stat.st_mtime}

        def ls(self, path: Any, detail: bool = True, **kwargs: Any) -> list[Any]:
            entry = self.info(path)
            return [entry] if detail else [entry["name"]]

        def modified(self, path: Any) -> datetime:
            return datetime.fromtimestamp(os.stat(self._real(path)).st_mtime, UTC)

    return PartFiles


class ReadOnlyFile(io.RawIOBase):
    """A file opened read-only whose position is each thread's own: DuckDB's scan threads seek and
    read one handle at once (a shared position would hand one thread another's bytes)."""

    def __init__(self, path: str) -> None:
        super().__init__()
        self._fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
        self._size = os.fstat(self._fd).st_size
        self._local = threading.local()

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return getattr(self._local, "pos", 0)

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self.tell(), io.SEEK_END: self._size}[whence]
        self._local.pos = max(0, base + offset)
        return self._local.pos

    def read(self, size: int = -1) -> bytes:
        pos = self.tell()
        wanted = self._size - pos if size is None or size < 0 else size
        chunks, got = [], 0
        while got < wanted:
            chunk = os.pread(self._fd, wanted - got, pos + got)
            if not chunk:
                break
            chunks.append(chunk)
            got += len(chunk)
        self._local.pos = pos + got
        return b"".join(chunks)

    def readinto(self, buffer: Any) -> int:
        data = self.read(len(buffer))
        buffer[:len(data)] = data
        return len(data)

    def close(self) -> None:
        if not self.closed:
            os.close(self._fd)
        super().close()


def build_sandbox(con: duckdb.DuckDBPyConnection, sources: Sources, views: set[str], all_stores: bool,
                  python_redaction: bool = True) -> None:
    """Load ``sources`` into ``con`` under hidden names, create ``views``, then lock it down. The
    views redact through the Python functions, or (``python_redaction`` false) their stand-ins."""
    from lastgood.index.sql_redact import install_functions, install_stand_ins

    con.execute("SET TimeZone = 'UTC'")
    con.execute("SET temp_directory = ''")  # nothing spills to disk: a query beyond memory fails
    urls = _register_parts(con, sources.parts)
    for name, table in sources.tables.items():
        con.register(f"lastgood_src_{name}", table)
    for name, columns in sources.empty.items():
        listed = ", ".join(f'"{column}" {kind}' for column, kind in columns)
        con.execute(f"CREATE TEMP TABLE lastgood_src_{name} ({listed})")
    if "rows" in sources.tables or "rows" in sources.empty:
        columns, types = sources.columns, sources.types
        branches = [f"SELECT {raw_select(columns, types)} FROM lastgood_src_rows"]
        branches += [part_branch(p.store_id, url, p.verified, _iso(p.data_checked_at), columns, types)
                     for p, url in zip(sources.parts, urls)]
        con.execute("CREATE TEMP VIEW lastgood_raw_checkpoints AS " + " UNION ALL ".join(branches))
    (install_functions if python_redaction else install_stand_ins)(con)
    for view in VIEWS:
        if view.name in views:
            con.execute(view_sql(view.name, all_stores))
    con.execute("SET enable_external_access = false")
    con.execute("SET lock_configuration = true")


def _register_parts(con: duckdb.DuckDBPyConnection, parts: list[Part]) -> list[str]:
    if not parts:
        return []
    files = {f"{p.store_id}.parquet": p.path for p in parts}
    con.register_filesystem(_part_files()(files))
    urls = [f"{PART_PROTOCOL}://{p.store_id}.parquet" for p in parts]
    con.execute(f"SET allowed_paths = [{', '.join(_quoted(u) for u in urls)}]")
    return urls


def _quoted(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


# ---- running a query ------------------------------------------------------------------------------

def run_query(catalog: Catalog, store_id: int | None, sql: str, limit: int | None = PAGE_ROWS,
              timeout: float | None = DEFAULT_TIMEOUT) -> tuple[pa.Table, int, bool]:
    """Run ``sql`` over the documented views of store ``store_id`` (``None``: every store, each
    view with a leading ``store`` column). Returns the first ``limit`` rows (``None``: all) as an
    Arrow table, redacted, the query's true row count, and whether rows were left out.

    QueryRefused (not a query these views answer), QueryError (DuckDB failed), QueryTimeout
    (ran longer than ``timeout`` seconds; ``None`` or 0: no limit) — all UsageErrors, one line."""
    from lastgood.index.sql_redact import redact_table

    table, total = _answer(catalog, store_id, sql, lambda con, checked: _execute(con, checked, limit, timeout))
    return redact_table(_normalized(table)), total, limit is not None and total > table.num_rows


@dataclass
class Rows:
    """A result as Python rows (what the command prints): the column names (redacted, unique), their
    DuckDB types, the rows as records (redacted), the query's true row count, whether rows were left out."""

    columns: list[str]
    types: list[str]
    rows: list[dict[str, Any]]
    total: int
    truncated: bool


def query_rows(catalog: Catalog, store_id: int | None, sql: str, limit: int | None = None,
               timeout: float | None = DEFAULT_TIMEOUT) -> Rows:
    """:func:`run_query` as Python rows, without Arrow (``lastgood sql``'s table, JSON and CSV)."""
    from lastgood.index.sql_redact import redact_rows

    names, types, rows, total = _answer(catalog, store_id, sql,
                                        lambda con, checked: _fetch_rows(con, checked, limit, timeout))
    columns, records = redact_rows(names, rows)
    return Rows(columns, types, records, total, limit is not None and total > len(rows))


def _answer(catalog: Catalog, store_id: int | None, sql: str,
            work: Callable[[duckdb.DuckDBPyConnection, CheckedQuery], T]) -> T:
    """``work`` in the sandbox for ``sql`` with the redaction functions' stand-ins, and again with
    the Python functions in their place when a value needed one (a store with secret-shaped text)."""
    from lastgood.index.sql_redact import replace_stand_ins

    with _prepared(catalog, store_id, sql, python_redaction=False) as (con, checked):
        try:
            return work(con, checked)
        except NeedsRedaction:
            replace_stand_ins(con)
            return work(con, checked)


@contextmanager
def _prepared(catalog: Catalog, store_id: int | None, sql: str, python_redaction: bool = True
              ) -> Iterator[tuple[duckdb.DuckDBPyConnection, CheckedQuery]]:
    """The sandbox for ``sql`` over store ``store_id`` (None: all), the query checked."""
    all_stores = store_id is None
    with _connection() as con:
        checked = check_query(con, sql)
        views = set(checked.views)
        sources = load_sources(catalog, store_id, needed_sources(views, all_stores),
                               raw_columns(views, checked.columns))
        build_sandbox(con, sources, views, all_stores, python_redaction)
        yield con, checked


def _fetch_rows(con: duckdb.DuckDBPyConnection, checked: CheckedQuery, limit: int | None,
                timeout: float | None) -> tuple[list[str], list[str], list[tuple[Any, ...]], int]:
    with _stopping(con, timeout):
        relation = con.sql(checked.sql)
        names, types = list(relation.columns), [str(t) for t in relation.types]
        cursor = con.execute(checked.sql)
        kept: list[tuple[Any, ...]] = []
        total = 0
        while batch := cursor.fetchmany(BATCH_ROWS):
            if limit is None or total < limit:
                kept += batch if limit is None else batch[:limit - total]
            total += len(batch)
    return names, types, kept, total


@contextmanager
def _stopping(con: duckdb.DuckDBPyConnection, timeout: float | None) -> Iterator[None]:
    """DuckDB's errors as one-line UsageErrors; the statement interrupted after ``timeout`` seconds."""
    with _time_limit(con, timeout):
        try:
            yield
        except duckdb.InterruptException:
            raise QueryTimeout(f"the query ran longer than {timeout:g} s and was stopped "
                               "(--timeout SECONDS: a longer limit, 0: none)") from None
        except duckdb.Error as exc:
            error = NeedsRedaction if NEEDS_REDACTION in str(exc) else QueryError
            raise error(f"the query failed: {_first_line(exc)}") from None


@contextmanager
def _connection() -> Iterator[duckdb.DuckDBPyConnection]:
    con = duckdb.connect(":memory:", config=dict(SANDBOX_CONFIG))
    try:
        yield con
    finally:
        con.close()


def _execute(con: duckdb.DuckDBPyConnection, checked: CheckedQuery, limit: int | None,
             timeout: float | None) -> tuple[pa.Table, int]:
    import pyarrow as pa

    with _stopping(con, timeout):
        relation = con.sql(checked.sql)
        json_columns = {name for name, kind in zip(relation.columns, relation.types) if str(kind) == "JSON"}
        reader = relation.to_arrow_reader(BATCH_ROWS)
        kept, total = [], 0
        for batch in reader:
            if limit is None or total < limit:
                kept.append(batch if limit is None else batch.slice(0, limit - total))
            total += batch.num_rows
    table = pa.Table.from_batches(kept, schema=reader.schema)
    return _mark_json(table, json_columns), total


@contextmanager
def _time_limit(con: duckdb.DuckDBPyConnection, seconds: float | None) -> Iterator[None]:
    if not seconds:
        yield
        return
    timer = threading.Timer(seconds, con.interrupt)
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()


def _mark_json(table: pa.Table, json_columns: set[str]) -> pa.Table:
    """JSON columns say so in their field metadata (DuckDB hands them over as strings)."""
    if not json_columns:
        return table
    import pyarrow as pa

    from lastgood.index.sql_redact import JSON_TYPE, TYPE_KEY

    fields = [f.with_metadata({TYPE_KEY: JSON_TYPE}) if f.name in json_columns else f for f in table.schema]
    return pa.Table.from_arrays(table.columns, schema=pa.schema(fields))


def _normalized(table: pa.Table) -> pa.Table:
    """Whole-number decimals DuckDB makes of integer sums (HUGEINT) as int64 when they fit."""
    import pyarrow as pa

    columns, fields = [], []
    for f, column in zip(table.schema, table.columns):
        if pa.types.is_decimal(f.type) and f.type.scale == 0:
            try:
                column = column.cast(pa.int64())
                f = pa.field(f.name, pa.int64(), metadata=f.metadata)
            except (pa.ArrowInvalid, OverflowError):
                pass
        columns.append(column)
        fields.append(f)
    return pa.Table.from_arrays(columns, schema=pa.schema(fields))


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


# ---- what the views are ---------------------------------------------------------------------------

def describe_views(all_stores: bool = False) -> list[dict[str, Any]]:
    """The documented views: ``[{name, description, columns: [{name, type, description}]}]``."""
    lead = [STORE_COLUMN] if all_stores else []
    return [{"name": v.name, "description": v.doc,
             "columns": [{"name": c.name, "type": c.type, "description": c.doc} for c in (*lead, *v.columns)]}
            for v in VIEWS]


def examples() -> list[dict[str, str]]:
    """Example queries for the SQL page (EXAMPLES as ``{title, sql}``)."""
    return [{"title": title, "sql": sql} for title, sql in EXAMPLES]
