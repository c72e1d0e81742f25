"""``lastgood sql STORE "QUERY"``: read-only SQL over the index (lastgood.index.sql).

The query reads the documented views (docs/sql.md) of that one store — no store id needed, no
other store's rows visible (``--all-stores``: every store the index holds, each row with its
``store``) — in a read-only sandbox, interrupted after ``--timeout`` seconds. Output: a table
fitted to the terminal, JSON, CSV, JSON lines or Parquet (``-o FILE``: the format from its suffix
unless ``--format``), every value redacted. Without a query it lists the views and their columns.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from lastgood.config import Settings
from lastgood.errors import UsageError

FORMATS = ("table", "json", "jsonl", "csv", "parquet")
SUFFIXES = {".csv": "csv", ".parquet": "parquet", ".pq": "parquet", ".json": "json", ".jsonl": "jsonl",
            ".ndjson": "jsonl", ".txt": "table"}
DEFAULT_TIMEOUT = 30.0  # lastgood.index.sql.DEFAULT_TIMEOUT (that module is not imported to parse)
NARROWEST = 8  # a column shortened to fit the terminal keeps at least this many characters

Handler = Callable[[argparse.Namespace, Settings, str], int]


def register(sub: Any, common: argparse.ArgumentParser) -> dict[str, Handler]:
    p = sub.add_parser("sql", help="read-only SQL over a store's checkpoints, runs, findings, events, actions, tensors")
    for action in common._actions:  # noqa: SLF001 - the common options, but --format with more choices
        if action.dest not in ("format", "help"):
            p._add_action(action)  # noqa: SLF001
    p.add_argument("--format", choices=FORMATS, default=argparse.SUPPRESS,
                   help="output format (default: table, or the -o file's suffix)")
    p.add_argument("store", nargs="?", help="the store whose rows the views show")
    p.add_argument("query", nargs="?", help="one SELECT over the views (none: list the views and their columns)")
    p.add_argument("--all-stores", action="store_true",
                   help="every store the index holds (each view gets a leading `store` column; not refreshed)")
    p.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT, metavar="SECONDS",
                   help=f"interrupt the query after this long (default {DEFAULT_TIMEOUT:g}; 0: no limit)")
    p.add_argument("--limit", type=int, metavar="N", help="output at most N rows (the count stays the true one)")
    p.add_argument("-o", "--output", metavar="FILE", help="write the result to FILE (.csv, .parquet, .json, .jsonl)")
    intermixed(p)
    return {"sql": cmd_sql}


def intermixed(parser: argparse.ArgumentParser) -> None:
    """Let options stand between the two optional positionals (``sql STORE --home H "QUERY"``):
    plain argparse takes the first chunk of positionals for both and calls the query extra."""
    base = type(parser)

    class Intermixed(base):  # type: ignore[misc,valid-type]
        _inside = False

        def parse_known_args(self, args: Any = None, namespace: Any = None) -> Any:
            if self._inside:  # parse_known_intermixed_args calls this twice
                return super().parse_known_args(args, namespace)
            self._inside = True
            try:
                return self.parse_known_intermixed_args(args, namespace)
            finally:
                self._inside = False

    parser.__class__ = Intermixed


def cmd_sql(args: argparse.Namespace, settings: Settings, fmt: str) -> int:
    store, query = _positionals(args)
    fmt = _output_format(args)
    if args.limit is not None and args.limit < 0:
        raise UsageError("--limit must be 0 or more")
    if args.timeout < 0:
        raise UsageError("--timeout must be 0 (no limit) or more seconds")
    if query is None:
        return _schema(args, fmt)
    from lastgood.stores import index_store, open_catalog

    catalog = open_catalog(settings)
    store_id = None
    if store is not None:
        progress = _bar(fmt if not args.output else "json")
        store_id = index_store(catalog, store, reader_name=args.reader, progress=progress).store.store_id
    scope = None if args.all_stores else store_id
    started = time.perf_counter()
    if fmt == "parquet":  # the one format written from Arrow
        return _parquet(catalog, scope, query, args)
    from lastgood.index.sql import query_rows

    result = query_rows(catalog, scope, query, limit=args.limit, timeout=args.timeout or None)
    seconds = time.perf_counter() - started
    if args.output:
        _write_file(Path(args.output), render(result, fmt, seconds, to_file=True).encode("utf-8"))
        _note(_written(args.output, fmt, len(result.rows), result.total, result.truncated))
        return 0
    sys.stdout.write(render(result, fmt, seconds).rstrip("\n") + "\n")
    return 0


def _parquet(catalog: Any, scope: int | None, query: str, args: argparse.Namespace) -> int:
    import pyarrow.parquet as pq

    from lastgood.index.sql import run_query

    table, total, truncated = run_query(catalog, scope, query, limit=args.limit, timeout=args.timeout or None)
    path = Path(args.output)
    _replace(path, lambda tmp: pq.write_table(table, tmp))
    _note(_written(args.output, "parquet", table.num_rows, total, truncated))
    return 0


def _written(path: str, fmt: str, rows: int, total: int, truncated: bool) -> str:
    return f"wrote {rows:,} row(s) to {path} ({fmt})" + (f"; the query returned {total:,} (--limit)" if truncated
                                                          else "")


def _positionals(args: argparse.Namespace) -> tuple[str | None, str | None]:
    """(store, query): with --all-stores a single argument is the query."""
    store, query = args.store, args.query
    if args.all_stores and query is None and store is not None and not _looks_like_store(store):
        store, query = None, store
    if store is None and not args.all_stores:
        raise UsageError("name a store (or --all-stores): lastgood sql STORE \"SELECT …\"")
    return store, query


def _looks_like_store(text: str) -> bool:
    return "://" in text or os.path.exists(text)


def _output_format(args: argparse.Namespace) -> str:
    chosen = getattr(args, "format", None)
    if args.output and not chosen:
        chosen = SUFFIXES.get(Path(args.output).suffix.lower())
        if chosen is None:
            raise UsageError(f"-o {args.output}: say the format with --format ({', '.join(FORMATS)}) or use a "
                             f"suffix ({', '.join(sorted(SUFFIXES))})")
    chosen = chosen or "table"
    if chosen == "parquet" and not args.output:
        raise UsageError("Parquet is written to a file: add -o FILE.parquet")
    return chosen


def _bar(fmt: str) -> Callable[[int, int | None], None] | None:
    from lastgood.cli import output

    return output.progress_bar("indexing") if fmt == "table" else None


def _note(message: str) -> None:
    from lastgood.cli import output

    output.info(message)


# ---- output ------------------------------------------------------------------------------------

def render(result: Any, fmt: str, seconds: float, to_file: bool = False) -> str:
    """The result as text in ``fmt`` (table, json, jsonl, csv); a JSON file holds the rows alone."""
    from lastgood.cli import output
    from lastgood.readers.common.gc_pause import gc_paused

    with gc_paused():
        if fmt == "json":
            rows = json_rows(result)
            body: Any = rows if to_file else {
                "columns": [{"name": n, "type": t} for n, t in zip(result.columns, result.types)], "rows": rows,
                "total_rows": result.total, "truncated": result.truncated, "seconds": round(seconds, 3)}
            return output.json_safe(output.dumps(body)) + "\n"
        if fmt == "jsonl":
            return "".join(output.json_safe(output.dumps(row, indent=None)) + "\n" for row in json_rows(result))
        if fmt == "csv":
            return csv_text(result)
        return render_table(result) + "\n"


def json_rows(result: Any) -> list[dict[str, Any]]:
    """The rows as JSON data: JSON columns decoded, whole decimals as integers."""
    import json

    decoded = {n for n, t in zip(result.columns, result.types) if t == "JSON"}
    if not decoded and not _has_decimals(result):
        return result.rows
    return [{k: _loads(json, v) if k in decoded else _plain_number(v) for k, v in row.items()}
            for row in result.rows]


def _has_decimals(result: Any) -> bool:
    return any(t.startswith("DECIMAL") for t in result.types)


def _loads(json: Any, text: Any) -> Any:
    if not isinstance(text, str):
        return text
    try:
        return json.loads(text)
    except ValueError:
        return text


def _plain_number(value: Any) -> Any:
    from decimal import Decimal

    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    return value


def csv_text(result: Any) -> str:
    """A header and the rows; nested values as JSON text, times in ISO 8601 (UTC, ``Z``)."""
    import csv
    import io

    sink = io.StringIO()
    writer = csv.writer(sink, lineterminator="\n")
    writer.writerow(result.columns)
    writer.writerows([_csv_cell(row[c]) for c in result.columns] for row in result.rows)
    return sink.getvalue()


def _csv_cell(value: Any) -> Any:
    from lastgood.cli import output

    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (dict, list, tuple)):
        return output.dumps(value, indent=None)
    if isinstance(value, (bytes, bytearray)):
        return f"<{len(value)} bytes>"
    if isinstance(value, (int, float, str)):
        return _plain_number(value)
    return output.to_jsonable(_plain_number(value))


def _write_file(path: Path, data: bytes) -> None:
    _replace(path, lambda tmp: tmp.write_bytes(data))


def _replace(path: Path, write: Callable[[Path], Any]) -> None:
    """``write`` a file beside ``path``, then move it into place (never half a file)."""
    if path.is_dir():
        raise UsageError(f"-o {path}: a folder; name the file to write")
    tmp = path.with_name(f".{path.name}.lastgood-tmp")
    try:
        write(tmp)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


# names ending so (or these) hold ids: shortened to a plain prefix (like git's), not with "…"
ID_COLUMNS = ("checkpoint_id", "parent_id", "head", "last_good", "target", "previous_head", "new_head",
              "action_id", "undoes", "hash", "prev_hash")


def render_table(result: Any) -> str:
    """Columns fitted to the terminal (the widest give way first; ids cut to a prefix, other cells
    shortened with "…"), control characters escaped; the row count under it."""
    from lastgood.cli import output

    header = [output.escape_controls(name) for name in result.columns]
    columns = [[output.escape_controls(_cell(row[name])) for row in result.rows] for name in result.columns]
    widths = [max([len(h), *map(len, col)]) for h, col in zip(header, columns)]
    ids = tuple(i for i, name in enumerate(result.columns) if name in ID_COLUMNS)
    shrink = [(i, 13 if i in ids else max(NARROWEST, min(len(header[i]), widths[i])))
              for i in sorted(range(len(widths)), key=lambda i: -widths[i])]
    text = output.column_table(columns, header, shrink=shrink, prefixes=ids)
    shown = len(result.rows)
    footer = (f"{result.total:,} row(s)" if not result.truncated
              else f"{shown:,} of {result.total:,} row(s) shown (--limit)")
    return f"{text}\n{footer}"


def _cell(value: Any) -> str:
    from datetime import datetime

    from lastgood.cli import output

    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, datetime):
        return value.strftime("%Y-%m-%d %H:%M:%S") + (f".{value.microsecond:06d}" if value.microsecond else "")
    if isinstance(value, (dict, list, tuple)):
        return output.dumps(value, indent=None)
    if isinstance(value, (bytes, bytearray)):
        return f"<{len(value)} bytes>"
    return str(_plain_number(value))


# ---- no query: the views ------------------------------------------------------------------------

def _schema(args: argparse.Namespace, fmt: str) -> int:
    from lastgood.cli import output
    from lastgood.index.sql import describe_views, examples

    result = {"views": describe_views(all_stores=args.all_stores), "examples": examples()}
    output.emit(result, "json" if fmt == "json" else "table", render_schema)
    return 0


def render_schema(result: dict[str, Any]) -> str:
    lines = []
    for view in result["views"]:
        lines.append(f"{view['name']} — {view['description']}")
        width = max(len(c["name"]) for c in view["columns"])
        kinds = max(len(c["type"]) for c in view["columns"])
        lines += [f"  {c['name']:<{width}}  {c['type']:<{kinds}}  {c['description']}" for c in view["columns"]]
        lines.append("")
    lines.append("examples:")
    for example in result["examples"]:
        lines.append(f"  -- {example['title']}")
        lines += [f"  {line}" for line in example["sql"].splitlines()]
    return "\n".join(lines)
