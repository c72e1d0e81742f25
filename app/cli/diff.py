"""Diff and investigation commands: ``diff``, ``steps``, ``track``, ``diverge``, ``bisect``.

All print JSON with ``--format json`` and exit 0 when they ran (a difference is
not an error), 2 on usage or I/O errors (one line on stderr, never a traceback).
"""

from __future__ import annotations

import argparse
from functools import partial
from collections.abc import Callable
from typing import Any

from lastgood.config import Settings
from lastgood.errors import UsageError
from lastgood.readers.common.gc_pause import gc_paused

Handler = Callable[[argparse.Namespace, Settings, str], int]
TEXT_LIMIT = 500  # changes printed in table mode; JSON has them all
COMPACT_ABOVE = 1000  # JSON with more changes is printed on one line (json's indenting encoder is pure Python)


def register(sub: Any, common: argparse.ArgumentParser) -> dict[str, Handler]:
    p = sub.add_parser("diff", parents=[common], help="what changed between two checkpoints")
    p.add_argument("store")
    p.add_argument("a", help="checkpoint id, unique prefix, or RUN/ID")
    p.add_argument("b", help="checkpoint id, unique prefix, or RUN/ID (in --store-b when given)")
    p.add_argument("--store-b", help="B lives in this store (a native run vs a LangGraph thread)")
    p.add_argument("--limit", type=int, default=TEXT_LIMIT, help="changes shown in table mode")
    p = sub.add_parser("steps", parents=[common], help="what each checkpoint of a run changed")
    p.add_argument("store")
    p.add_argument("run")
    p.add_argument("--namespace", default="")
    p = sub.add_parser("track", parents=[common], help="a field's value (or length) at every checkpoint")
    p.add_argument("store")
    p.add_argument("run")
    p.add_argument("path", help="JSON Pointer, e.g. /balance or /messages (lists by length)")
    p.add_argument("--namespace", default="")
    p = sub.add_parser("diverge", parents=[common], help="first step where two runs' states differ")
    p.add_argument("store")
    p.add_argument("run_a", help="run id, or a checkpoint (the history leading to it)")
    p.add_argument("run_b", help="run id, or a checkpoint (in --store-b when given)")
    p.add_argument("--store-b", help="run B lives in this store")
    p.add_argument("--namespace", default="")
    p = sub.add_parser("bisect", parents=[common], help="first checkpoint of a run where a predicate holds")
    p.add_argument("store")
    p.add_argument("run", help="run id, or a checkpoint (the history leading to it)")
    p.add_argument("--where", required=True, help="e.g. '/balance < 0', 'len(/messages) > 200', or SQL over "
                   "tracked fields: 'sql: balance < 0 and messages > 200'")
    p.add_argument("--strategy", choices=("auto", "binary", "scan"), default="auto",
                   help="binary assumes the predicate stays true once true; auto probes first")
    p.add_argument("--namespace", default="")
    return {"diff": cmd_diff, "steps": cmd_steps, "track": cmd_track, "diverge": cmd_diverge,
            "bisect": cmd_bisect}


def _open(args: argparse.Namespace, settings: Settings, fmt: str, url: str) -> tuple[Any, Any]:
    from lastgood.stores import open_catalog

    catalog = open_catalog(settings)
    return catalog, _refreshed(catalog, url, args.reader, fmt)


def _refreshed(catalog: Any, url: str, reader_name: str | None, fmt: str) -> Any:
    from lastgood.cli import output
    from lastgood.stores import index_store

    bar = output.progress_bar("indexing") if fmt != "json" else None
    return index_store(catalog, url, reader_name=reader_name, progress=bar).store


def _store_b(catalog: Any, args: argparse.Namespace, fmt: str) -> Any:
    return _refreshed(catalog, args.store_b, None, fmt) if args.store_b else None


def cmd_diff(args: argparse.Namespace, settings: Settings, fmt: str) -> int:
    from lastgood.investigate.diff import render_text
    from lastgood.investigate.history import diff_checkpoints
    from lastgood.stores import open_catalog

    catalog = open_catalog(settings)
    if _tensor_stores(catalog, args):
        return _tensor_diff(catalog, args, fmt)
    with gc_paused():  # ~300,000 fresh objects, no cycles: a third of the decode was GC rescans
        found = _diff_as_indexed(catalog, args)
        if found is None:
            store = _refreshed(catalog, args.store, args.reader, fmt)
            found = diff_checkpoints(catalog, store, args.a, args.b, _store_b(catalog, args, fmt))
        result, label_a, label_b = found
        if fmt == "json":
            _write_json(result.to_dict(label_a, label_b))
        else:
            text = f"A {_describe(label_a)}\nB {_describe(label_b)}\n" + render_text(result, limit=args.limit)
            _write_text(text)
    return 0


def _tensor_stores(catalog: Any, args: argparse.Namespace) -> bool:
    """Both stores are training checkpoints (their readers list tensors): a tensor diff."""
    from lastgood.errors import LastgoodError
    from lastgood.readers.base import Capability, capabilities
    from lastgood.stores import open_store

    try:
        stores = [open_store(catalog, args.store, args.reader)]
        stores += [open_store(catalog, args.store_b)] if args.store_b else []
    except LastgoodError:
        return False  # the state diff's path says why
    return all(Capability.TENSORS in capabilities(s.reader) for s in stores)


def _tensor_diff(catalog: Any, args: argparse.Namespace, fmt: str) -> int:
    """``diff`` of two training checkpoints: per tensor, how much it changed (lastgood.investigate.tensordiff).
    The JSON keeps ``diff``'s shape (``changes`` for tensors added, removed or reshaped; ``summary``)
    and adds ``tensors`` and ``layers``."""
    from lastgood.cli import output
    from lastgood.investigate.history import resolve_ref
    from lastgood.investigate.tensordiff import tensor_diff

    store = _refreshed(catalog, args.store, args.reader, fmt)
    store_b = _store_b(catalog, args, fmt) or store
    record_a = resolve_ref(catalog, store.store_id, args.a)
    record_b = resolve_ref(catalog, store_b.store_id, args.b)
    result = tensor_diff(store, record_a, store_b, record_b)
    result["changes"] = ([{"op": "add", "path": f"/tensors/{t['name']}", "old": None, "new": t} for t in result["added"]]
                         + [{"op": "remove", "path": f"/tensors/{t['name']}", "old": t, "new": None}
                            for t in result["removed"]]
                         + [{"op": "type_change", "path": f"/tensors/{t['name']}", "old": t["a"], "new": t["b"]}
                            for t in result["changed_shape"]]
                         + [{"op": "change", "path": f"/tensors/{t['name']}", "old": t.get("norm_a"),
                             "new": t.get("norm_b")} for t in result["tensors"] if (t.get("relative_change") or 0) > 0])
    output.emit(result, fmt, partial(render_tensor_diff, limit=args.limit))
    return 1 if result["summary"]["errors"] else 0


def render_tensor_diff(result: dict[str, Any], limit: int | None = None) -> str:
    s = result["summary"]
    lines = [f"A {_describe(result['a'])}", f"B {_describe(result['b'])}",
             f"{s['compared']} tensors compared: {s['changed']} changed, {s['unchanged']} unchanged; "
             f"{s['added']} added, {s['removed']} removed, {s['changed_shape']} reshaped"
             + (f"; NaN appeared in {s['nan_appeared']}" if s["nan_appeared"] else "")]
    shown = result["tensors"][: limit or 30]
    for t in shown:
        if t.get("error"):
            lines.append(f"  ! {t['name']}: {t['error']}")
            continue
        nan = "  NaN appeared" if t.get("nan_appeared") else ""
        cosine = "-" if t.get("cosine") is None else f"{t['cosine']:.6f}"
        lines.append(f"  {t['relative_change'] or 0:10.3e}  max|Δ| {t.get('max_abs_diff') or 0:.3e}  cos {cosine}  "
                     f"{t['name']} {t['dtype']}{t['shape']}{nan}")
    if len(result["tensors"]) > len(shown):
        lines.append(f"  …and {len(result['tensors']) - len(shown)} more (--limit N, or --format json)")
    for kind in ("added", "removed"):
        if result[kind]:
            lines.append(f"{kind}: " + ", ".join(t["name"] for t in result[kind][:10])
                         + (f" …and {len(result[kind]) - 10} more" if len(result[kind]) > 10 else ""))
    return "\n".join(lines)


def _diff_as_indexed(catalog: Any, args: argparse.Namespace) -> Any:
    """The diff without refreshing the index first, when it already names A and B by the full
    ids given: the diff reads those two rows from the stores themselves, and a refresh would
    list every checkpoint of the store to learn nothing it needs. None when a ref is a prefix
    or not indexed (yet), or anything fails: the refreshed path then answers, errors included."""
    from lastgood.errors import LastgoodError
    from lastgood.investigate.history import diff_records, resolve_ref
    from lastgood.stores import open_store

    try:
        store = open_store(catalog, args.store, args.reader)
        store_b = open_store(catalog, args.store_b) if args.store_b else store
        record_a, record_b = (resolve_ref(catalog, opened.store_id, ref)
                              for opened, ref in ((store, args.a), (store_b, args.b)))
        if record_a.checkpoint_id not in args.a or record_b.checkpoint_id not in args.b:
            return None
        return diff_records(store, record_a, store_b, record_b)
    except LastgoodError:
        return None




def _write_json(value: Any) -> None:
    """Like output.emit, without its second redaction pass: diff_states already redacted every value
    (and the labels are redacted by checkpoint_label); on 4,000 changed messages that pass costs
    a quarter of a second."""
    import sys

    from lastgood.cli import output

    indent = 2 if len(value["changes"]) <= COMPACT_ABOVE else None  # the C encoder: 10× faster
    sys.stdout.write(output.json_safe(output.dumps(value, indent=indent)) + "\n")


def _write_text(text: str) -> None:
    import sys

    from lastgood.cli import output

    sys.stdout.write("\n".join(output.escape_controls(line) for line in text.splitlines()) + "\n")


def _describe(label: dict[str, Any]) -> str:
    step = f" step {label['step']}" if label.get("step") is not None else ""
    return f"{label['run_id']}/{label['checkpoint_id']}{step}  ({label['store']})"


def cmd_steps(args: argparse.Namespace, settings: Settings, fmt: str) -> int:
    from lastgood.cli import output
    from lastgood.investigate.history import record_step_changes, run_checkpoints, step_changes

    catalog, store = _open(args, settings, fmt, args.store)
    run_checkpoints(catalog, store.store_id, args.run, args.namespace)  # a clear error for an unknown run
    record_step_changes(catalog, store, run_id=args.run)
    rows = step_changes(catalog, store.store_id, args.run, args.namespace)
    output.emit(rows, fmt, render_steps)
    return 0


def render_steps(rows: list[dict[str, Any]]) -> str:
    lines = [f"{'step':>5}  {'checkpoint':<38} {'+':>5} {'-':>5} {'~':>5}  paths"]
    for r in rows:
        counts = (f"{r['added']:>5} {r['removed']:>5} {r['changed']:>5}" if r["error"] is None
                  else f"{'?':>5} {'?':>5} {'?':>5}")
        what = ", ".join(r["paths"] or []) if r["error"] is None else f"error: {r['error']}"
        step = "" if r["step"] is None else r["step"]
        lines.append(f"{step:>5}  {r['checkpoint_id']:<38} {counts}  {what}")
    return "\n".join(lines)


def cmd_track(args: argparse.Namespace, settings: Settings, fmt: str) -> int:
    from lastgood.cli import output
    from lastgood.investigate.history import normalize_track_path, track_field

    catalog, store = _open(args, settings, fmt, args.store)
    rows = track_field(catalog, store, args.run, args.path, args.namespace)
    path = normalize_track_path(args.path)
    readable = [r for r in rows if not r["error"]]
    if readable and all(r["kind"] == "missing" for r in readable):
        raise UsageError(f"{path} exists in no checkpoint of run {args.run!r} ({len(readable)} read); "
                         f"check the path with `lastgood show {args.store} CKPT`")
    result = {"run_id": args.run, "namespace": args.namespace, "path": path, "values": rows}
    output.emit(result, fmt, render_track)
    return 0


def render_track(result: dict[str, Any]) -> str:
    lines = [f"{result['path']} in run {result['run_id']}"]
    for r in result["values"]:
        shown = r["error"] and f"error: {r['error']}"
        if not shown:
            shown = f"len {r['length']}" if r["kind"] in ("list", "dict") else _short(r["value"])
            shown = "(missing)" if r["kind"] == "missing" else shown
        step = "" if r["step"] is None else r["step"]
        lines.append(f"{step:>5}  {r['checkpoint_id']:<38} {shown}")
    return "\n".join(lines)


def _short(value: Any) -> str:
    from lastgood.investigate.diff import preview

    return preview(value)


def cmd_diverge(args: argparse.Namespace, settings: Settings, fmt: str) -> int:
    from lastgood.cli import output
    from lastgood.investigate.history import diverge

    catalog, store = _open(args, settings, fmt, args.store)
    result = diverge(catalog, store, args.run_a, args.run_b, _store_b(catalog, args, fmt), args.namespace)
    output.emit(result, fmt, render_diverge)
    return 0


def render_diverge(result: dict[str, Any]) -> str:
    from lastgood.investigate.diff import Change, DiffResult, render_text

    a, b = result["a"], result["b"]
    head = (f"A {a['run_id']} ({a['checkpoints']} checkpoints)  B {b['run_id']} ({b['checkpoints']} checkpoints); "
            f"{result['common_steps']} steps in common, {result['states_decoded']} states decoded")
    first = result["first_divergence"]
    if first is None:
        return head + "\nno divergence: every common step has the same state"
    changes = [Change(c["op"], c["path"], c.get("old"), c.get("new"), c.get("delta"), c.get("from"))
               for c in first["changes"]]
    body = render_text(DiffResult(changes, first["summary"]), limit=TEXT_LIMIT)
    return (f"{head}\nfirst divergence at step {first['step']}: "
            f"A {first['a']['checkpoint_id']}  B {first['b']['checkpoint_id']}\n{body}")


def cmd_bisect(args: argparse.Namespace, settings: Settings, fmt: str) -> int:
    from lastgood.cli import output
    from lastgood.investigate.history import bisect_run, bisect_run_sql
    from lastgood.investigate.predicate import parse
    from lastgood.investigate.predicate_sql import is_sql, parse_sql

    sql = is_sql(args.where)
    predicate = parse_sql(args.where) if sql else parse(args.where)  # a usage error before any store is opened
    catalog, store = _open(args, settings, fmt, args.store)
    if sql:
        result = bisect_run_sql(catalog, store, args.run, predicate, args.namespace)
    else:
        result = bisect_run(catalog, store, args.run, predicate, args.strategy, args.namespace)
    output.emit(result, fmt, render_bisect)
    return 0


def render_bisect(result: dict[str, Any]) -> str:
    found = result["found"]
    where = f"{result['where']!s}"
    cost = (f"{result['strategy']}; {result['states_decoded']} of {result['checkpoints']} states decoded")
    if found is None:
        return f"{where} never holds along run {result['run_id']} ({cost})"
    step = f" (step {found['step']})" if found.get("step") is not None else ""
    return f"first checkpoint where {where}: {found['checkpoint_id']}{step}\n{cost}"
