"""The read tools: one function per CLI read verb, over the core calls its handler makes.

Each takes the call (``lastgood.mcp.session.Call``) and the CLI's arguments, refreshes the store's
index as the command does first, and returns the command's ``--format json`` shape (docs/cli.md)
as an ``Answer``; lists that can be long are paged (``offset``/``limit``; the page says where it
sits). The parameters' annotations are the tools' JSON schemas (``lastgood.mcp.server``).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field

from lastgood.errors import UsageError
from lastgood.mcp.session import Answer, Call, json_text, one_line, page_info, paged
from lastgood.readers.base import STATUSES

# pages sized for an assistant's context: 100 `ls` rows are ~35 KB of JSON (a client reading a
# 100,000-row answer as one JSON-RPC line spends tens of seconds on it: the SDK joins its chunks)
ROWS_SHOWN, MAX_ROWS = 100, 10_000
STATE_CHARS = 20_000  # a state's JSON text shown at once (show's state_limit default)
CHANGES_SHOWN = 200  # diff changes per page

Store = Annotated[str, Field(description="the store: its URL as served, or its handle `store:N` from list_stores")]
Ref = Annotated[str, Field(description="a checkpoint: id, unique id prefix, RUN/ID, RUN/ID@NS or key:HANDLE")]
Run = Annotated[str, Field(description="run id (LangGraph: thread_id)")]
RunFilter = Annotated[str | None, Field(description="only this run")]
Namespace = Annotated[str, Field(description="LangGraph checkpoint_ns ('' is the root graph)")]
StoreB = Annotated[str | None, Field(description="B lives in this other served store")]
Offset = Annotated[int, Field(ge=0, description="first item of the page (a page after the first reads the "
                                                "index as the first left it: no refresh)")]
Limit = Annotated[int, Field(ge=1, le=MAX_ROWS, description=f"items per page (at most {MAX_ROWS:,})")]
Status = Literal[STATUSES]  # type: ignore[valid-type]


def list_stores(call: Call) -> Answer:
    """The stores this server serves: URL, handle (`store:N`), reader, size, when last indexed."""
    rows = [{"store": r["display_url"], "handle": None if r["store_id"] is None else f"store:{r['store_id']}",
             "reader": r["reader"], "indexed_at": r["indexed_at"], "checkpoints": r["checkpoints"],
             "runs": r["runs"], "size_bytes": r["size_bytes"]} for r in call.served(sizes=True)]
    return Answer(rows)


def runs(call: Call, store: Store, run: RunFilter = None) -> Answer:
    """Every run (and LangGraph namespace) with its health and last good checkpoint (`lastgood runs`)."""
    from lastgood.index import queries
    from lastgood.integrity.health import run_health

    opened = call.store(store)
    queries.require_run(call.catalog, opened.store_id, run)
    return Answer(run_health(call.catalog, opened.store_id, run_id=run))


def list_checkpoints(call: Call, store: Store, run: RunFilter = None,
                     status: Annotated[Status | None, Field(description="only this status")] = None,
                     offset: Offset = 0, limit: Limit = ROWS_SHOWN) -> Answer:
    """Checkpoints by run then time, as `lastgood ls --format json` lists them, a page at a time
    (the second text block says where the page sits: {"page": {offset, limit, returned, total,
    next_offset}})."""
    from lastgood.index import queries

    store_id = call.store_id(store, refresh=offset == 0)
    queries.require_run(call.catalog, store_id, run)
    fields = queries.LS_FIELDS + queries.LS_CHECK_FIELDS
    # the one SQL `ls` lists with (ordered by run, namespace, time), a page of it; times stay values
    # (the JSON writes them as `ls` does): DuckDB would format every row's before picking the page
    sql, params = queries.listing_sql(call.catalog, store_id, run, status, None, fields, None)
    where, counted = queries.where_clause(store_id, run_id=run, status=status)  # the listing's filter
    with call.catalog.connect() as con:
        total = int(con.execute(f"SELECT count(*) FROM checkpoints c WHERE {where}", counted).fetchone()[0])
        cur = con.execute(f"{sql} LIMIT {int(limit)} OFFSET {int(offset)}", params)
        names = [d[0] for d in cur.description]
        rows = [dict(zip(names, row)) for row in cur.fetchall()]
    return Answer(rows, page_info(offset, limit, len(rows), total))


def show(call: Call, store: Store, checkpoint: Ref,
         state_path: Annotated[str | None, Field(description="JSON Pointer into the state: show only "
                                                 "that value, e.g. /messages/3")] = None,
         state_offset: Annotated[int, Field(ge=0, description="first character of the state's JSON "
                                            "text to show")] = 0,
         state_limit: Annotated[int, Field(ge=1, le=1_000_000, description="characters of the state's "
                                           "JSON text per page")] = STATE_CHARS) -> Answer:
    """One checkpoint (`lastgood show`): fields, state (redacted), pending writes, findings, events, head.
    A state longer than `state_limit` characters of JSON comes as `state_page` (its text, a page at a
    time) with `state` null; `state_path` narrows it to one value first."""
    from lastgood.investigate.show import show_checkpoint

    result = show_checkpoint(call.catalog, call.store(store), checkpoint)
    if result.get("state_error") is not None:
        return Answer(result)
    if state_path:
        result["state"], result["state_path"] = _pointed(result["state"], state_path), state_path
    text = json_text(result["state"])
    if len(text) > state_limit or state_offset:
        result["state"] = None
        result["state_page"] = {"path": state_path or "/", "text": text[state_offset:state_offset + state_limit],
                                **page_info(state_offset, state_limit,
                                            max(0, min(state_limit, len(text) - state_offset)), len(text))}
    return Answer(result)


def _pointed(state: Any, path: str) -> Any:
    from lastgood.investigate.predicate import MISSING, resolve_pointer

    if not path.startswith("/"):
        raise UsageError(f"state_path is a JSON Pointer starting with '/', like /messages/0, not {path!r}")
    found = resolve_pointer(state, path)
    if found is MISSING:
        raise UsageError(f"{path} is not in this checkpoint's state")
    return found


def diff(call: Call, store: Store, a: Ref, b: Ref, store_b: StoreB = None, offset: Offset = 0,
         limit: Limit = CHANGES_SHOWN) -> Answer:
    """What changed from checkpoint A to B (`lastgood diff --format json`): {a, b, changes, summary};
    messages aligned by identity; `summary` counts every change, `changes` is paged."""
    from lastgood.investigate.history import diff_checkpoints
    from lastgood.readers.common.gc_pause import gc_paused

    opened = call.store(store)
    other = call.store(store_b) if store_b else None
    with gc_paused():
        result, label_a, label_b = diff_checkpoints(call.catalog, opened, a, b, other)
        value = result.to_dict(label_a, label_b)
    value["changes"], page = paged(value["changes"], offset, limit)
    return Answer(value, page)


def steps(call: Call, store: Store, run: Run, namespace: Namespace = "") -> Answer:
    """What each checkpoint of the run changed against its parent (`lastgood steps`)."""
    from lastgood.investigate.history import record_step_changes, run_checkpoints, step_changes

    opened = call.store(store)
    run_checkpoints(call.catalog, opened.store_id, run, namespace)  # a clear error for an unknown run
    record_step_changes(call.catalog, opened, run_id=run)
    return Answer(step_changes(call.catalog, opened.store_id, run, namespace))


def track(call: Call, store: Store, run: Run,
          path: Annotated[str, Field(description="JSON Pointer, e.g. /balance or /messages (lists by length)")],
          namespace: Namespace = "") -> Answer:
    """A value (a list or dict by its length) at every checkpoint of the run (`lastgood track`)."""
    from lastgood.investigate.history import normalize_track_path, track_field

    rows = track_field(call.catalog, call.store(store), run, path, namespace)
    pointer = normalize_track_path(path)
    readable = [r for r in rows if not r["error"]]
    if readable and all(r["kind"] == "missing" for r in readable):
        raise UsageError(f"{pointer} exists in no checkpoint of run {run!r} ({len(readable)} read); "
                         "check the path with the show tool")
    return Answer({"run_id": run, "namespace": namespace, "path": pointer, "values": rows})


def diverge(call: Call, store: Store,
            run_a: Annotated[str, Field(description="run id, or a checkpoint (the history leading to it)")],
            run_b: Annotated[str, Field(description="run id, or a checkpoint (in store_b when given)")],
            store_b: StoreB = None, namespace: Namespace = "") -> Answer:
    """The first step where two runs' states differ, with that diff (`lastgood diverge`)."""
    from lastgood.investigate.history import diverge as first_divergence

    opened = call.store(store)
    other = call.store(store_b) if store_b else None
    return Answer(first_divergence(call.catalog, opened, run_a, run_b, other, namespace))


def bisect(call: Call, store: Store,
           run: Annotated[str, Field(description="run id, or a checkpoint (the history leading to it)")],
           where: Annotated[str, Field(description="a predicate, e.g. '/balance < 0', 'len(/messages) > 200', "
                                       "or SQL over tracked fields: 'sql: balance < 0'")],
           strategy: Literal["auto", "binary", "scan"] = "auto", namespace: Namespace = "") -> Answer:
    """The first checkpoint along the run's history where `where` holds (`lastgood bisect`); the
    predicate is parsed, never run as code."""
    from lastgood.investigate.history import bisect_run, bisect_run_sql
    from lastgood.investigate.predicate import parse
    from lastgood.investigate.predicate_sql import is_sql, parse_sql

    sql = is_sql(where)
    predicate = parse_sql(where) if sql else parse(where)  # a usage error before the store is read
    opened = call.store(store)
    if sql:
        return Answer(bisect_run_sql(call.catalog, opened, run, predicate, namespace))
    return Answer(bisect_run(call.catalog, opened, run, predicate, strategy, namespace))


def verify(call: Call, store: Store,
           read_data: Annotated[bool, Field(description="re-hash and decode every blob (a long task: "
                                            "progress is reported)")] = False,
           subset: Annotated[str | None, Field(description="read the data of a part: bucket N/M, or the "
                                               "P% least recently read")] = None,
           workers: Annotated[int | None, Field(ge=1, le=256, description="processes hashing and decoding "
                                                "(default: the CPU count for big reads)")] = None) -> Answer:
    """Check integrity (`lastgood verify`): structure by default, or a full read with `read_data`;
    reports every finding the index holds. Cancelling stops after the chunk in progress."""
    from lastgood.integrity.verify import Subset, store_findings, verify_store

    chosen = Subset.parse(subset) if subset else None
    opened = call.store(store)
    report = verify_store(call.catalog, opened.store_id, opened.reader, read_data=read_data, subset=chosen,
                          workers=workers, progress=call.reporter("verifying"), cancel=call.cancel)
    found = store_findings(call.catalog, opened.store_id)
    return Answer({"checked": report.checked, "depth": report.depth, "findings": found,
                   "seconds": round(report.seconds, 3), "workers": report.workers, "scheduler": None,
                   "subset": str(chosen) if chosen else None, "cancelled": report.cancelled})


def findings(call: Call, store: Store, run: RunFilter = None,
             checkpoint: Annotated[str | None, Field(description="only this checkpoint (id, prefix, RUN/ID…)")] = None,
             severity: Literal["error", "warning", "info"] | None = None,
             check: Annotated[str | None, Field(description="only this check, e.g. sha256-mismatch")] = None,
             offset: Offset = 0, limit: Limit = ROWS_SHOWN) -> Answer:
    """The findings the index holds (as `verify` lists them, errors first) without running a check."""
    from lastgood.index import queries
    from lastgood.integrity.verify import store_findings

    store_id = call.store_id(store, refresh=offset == 0)
    queries.require_run(call.catalog, store_id, run)
    cid = queries.resolve_checkpoint(call.catalog, store_id, checkpoint).checkpoint_id if checkpoint else None
    rows = [f for f in store_findings(call.catalog, store_id, checkpoint_id=cid)
            if (run is None or f["run_id"] == run) and (severity is None or f["severity"] == severity)
            and (check is None or f["check"] == check)]
    shown, page = paged(rows, offset, limit)
    return Answer(shown, page)


def journal(call: Call, store: Store, run: RunFilter = None,
            action: Annotated[str | None, Field(description="only this action: restore, rollback, quarantine, "
                                                "release, undo, check-failed, prune, pin, unpin, policy")] = None
            ) -> Answer:
    """The store's hash-chained recovery journal (`lastgood journal`): {chain_ok, entries, problems,
    actions, pending}."""
    from lastgood.cli.recovery import JOURNAL_ACTIONS
    from lastgood.index import queries
    from lastgood.recovery import journal_report

    if action is not None and action not in JOURNAL_ACTIONS:
        raise UsageError(f"action must be one of {', '.join(JOURNAL_ACTIONS)}, not {action!r}")
    opened = call.store(store, check="none")
    queries.require_run(call.catalog, opened.store_id, run)
    return Answer(journal_report(opened, run_id=run, action=action, catalog=call.catalog))


def sql(call: Call, store: Store,
        sql: Annotated[str | None, Field(description="one read-only SELECT over the views checkpoints, runs, "
                                         "findings, events, actions, tensors (none: the views, their columns "
                                         "and examples)")] = None,
        limit: Annotated[int, Field(ge=1, le=MAX_ROWS, description="rows at most (total_rows stays the true "
                                    "count)")] = ROWS_SHOWN,
        timeout: Annotated[float, Field(gt=0, le=300, description="interrupt the query after this many "
                                        "seconds")] = 30.0) -> Answer:
    """Read-only SQL over this store's rows in the index (`lastgood sql STORE QUERY --format json`):
    {columns, rows, total_rows, truncated, seconds}, every value redacted; the query runs in a sandbox
    that sees only this store's views (docs/sql.md)."""
    import json
    import time

    describe_views, examples, query_rows, render = _sql_core()
    if sql is None or not sql.strip():
        return Answer({"views": describe_views(), "examples": examples()})
    store_id = call.store(store).store_id
    started = time.perf_counter()
    result = query_rows(call.catalog, store_id, sql, limit=limit, timeout=timeout)
    return Answer(json.loads(render(result, "json", time.perf_counter() - started)))  # the command's JSON


def _sql_core() -> tuple[Any, Any, Any, Any]:
    """The SQL core's public calls, or a one-line error when this build has no usable SQL core."""
    try:
        from lastgood.cli.sql import render
        from lastgood.index.sql import describe_views, examples, query_rows
    except ImportError as exc:  # the SQL core is missing or broken: the tool says so, the server keeps serving
        raise UsageError(f"the sql tool is not available in this build of Lastgood ({one_line(exc)}); "
                         "the other tools work") from None
    return describe_views, examples, query_rows, render


READ_TOOLS = (list_stores, runs, list_checkpoints, show, diff, steps, track, diverge, bisect, verify, findings,
              journal, sql)
