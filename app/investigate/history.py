"""Investigation over a run's history: diff any two checkpoints, per-step changes, a field
over time, the first divergence of two runs, and bisect for the first bad checkpoint.

States are decoded lazily, one checkpoint at a time, through the store's reader;
what is kept in the index (``step_changes``, ``tracked_values``) is redacted.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from lastgood.index.catalog import Catalog
from lastgood.investigate.diff import DiffResult, diff_states, jsonable
from lastgood.investigate.diff_values import governing_key
from lastgood.errors import (AmbiguousCheckpoint, CheckpointNotFound, DecodeError, LastgoodError, ReaderError,
                             UsageError)
from lastgood.investigate.predicate import MISSING, Predicate, resolve_pointer
from lastgood.investigate.predicate_sql import SqlPredicate
from lastgood.investigate.predicate_sql import evaluate as evaluate_sql
from lastgood.index.queries import resolve_checkpoint
from lastgood.readers.base import CheckpointRecord, Status, record_from_row
from lastgood.redact import MASK, is_secret_key, redact, redact_text
from lastgood.index.store import OpenStore

STATE_CACHE_SIZE = 8
BISECT_PROBES = 8
STRATEGIES = ("auto", "binary", "scan")


# ---------------------------------------------------------------- loading

class StateLoader:
    """Decoded states by checkpoint, with a small cache and a count of decodes."""

    def __init__(self, store: OpenStore, size: int = STATE_CACHE_SIZE) -> None:
        self.store, self.size, self.decoded = store, size, 0
        self._cache: OrderedDict[str, Any] = OrderedDict()

    def load(self, record: CheckpointRecord) -> Any:
        if record.checkpoint_id in self._cache:
            self._cache.move_to_end(record.checkpoint_id)
            return self._cache[record.checkpoint_id]
        state = load_state(self.store, record)
        self.decoded += 1
        self._cache[record.checkpoint_id] = state
        if len(self._cache) > self.size:
            self._cache.popitem(last=False)
        return state


def load_state(store: OpenStore, record: CheckpointRecord) -> Any:
    """The decoded (not yet redacted) state; ReaderError when it has none."""
    if record.status == Status.INCOMPLETE:
        reason = record.status_reason or "the save never completed"
        raise ReaderError(f"checkpoint {record.checkpoint_id} has no state: {reason}")
    return store.reader.load_state(record)


def resolve_ref(catalog: Catalog, store_id: int, ref: str) -> CheckpointRecord:
    """A checkpoint named by id, unique id prefix, or ``RUN/ID`` (id or prefix within the run)."""
    try:
        return resolve_checkpoint(catalog, store_id, ref)
    except CheckpointNotFound:
        if "/" not in ref:
            raise
    run_id, _, prefix = ref.rpartition("/")
    rows = _rows(catalog, """SELECT * FROM checkpoints WHERE store_id = ? AND run_id = ?
        AND starts_with(checkpoint_id, ?) ORDER BY checkpoint_id LIMIT 6""", [store_id, run_id, prefix])
    if not rows:
        raise CheckpointNotFound(f"no checkpoint matches {ref!r}")
    if len({r["checkpoint_id"] for r in rows}) > 1:
        raise AmbiguousCheckpoint(f"{ref!r} matches several checkpoints of run {run_id!r}: give more characters")
    return record_from_row(rows[0])


def checkpoint_label(store: OpenStore, record: CheckpointRecord) -> dict[str, Any]:
    """How a diff names one side: store, run, checkpoint, step, time."""
    return redact({"store": store.display_url, "run_id": record.run_id, "namespace": record.namespace,
                   "checkpoint_id": record.checkpoint_id, "step": record.step,
                   "created_at": jsonable_time(record.created_at)})


def jsonable_time(value: Any) -> Any:
    return value.isoformat().replace("+00:00", "Z") if isinstance(value, datetime) else value


def diff_checkpoints(catalog: Catalog, store_a: OpenStore, ref_a: str, ref_b: str,
                     store_b: OpenStore | None = None) -> tuple[DiffResult, dict[str, Any], dict[str, Any]]:
    """The diff from checkpoint ``ref_a`` to ``ref_b`` (in ``store_b`` when given), with labels."""
    store_b = store_b or store_a
    record_a = resolve_ref(catalog, store_a.store_id, ref_a)
    record_b = resolve_ref(catalog, store_b.store_id, ref_b)
    return diff_records(store_a, record_a, store_b, record_b)


def diff_records(store_a: OpenStore, record_a: CheckpointRecord, store_b: OpenStore,
                 record_b: CheckpointRecord) -> tuple[DiffResult, dict[str, Any], dict[str, Any]]:
    """:func:`diff_checkpoints` of two checkpoints already resolved."""
    # what both states hold decodes once, as one object the diff skips (a reader that can share)
    with store_a.reader.decoding_together(), store_b.reader.decoding_together():
        state_a, state_b = load_state(store_a, record_a), load_state(store_b, record_b)
    result = diff_states(state_a, state_b)
    return result, checkpoint_label(store_a, record_a), checkpoint_label(store_b, record_b)


def parent_of(catalog: Catalog, store_id: int, record: CheckpointRecord) -> CheckpointRecord | None:
    if not record.parent_id:
        return None
    rows = _rows(catalog, """SELECT * FROM checkpoints WHERE store_id = ? AND run_id = ?
        AND namespace = ? AND checkpoint_id = ? LIMIT 1""",
                 [store_id, record.run_id, record.namespace, record.parent_id])
    return record_from_row(rows[0]) if rows else None


# ---------------------------------------------------------------- runs

def run_checkpoints(catalog: Catalog, store_id: int, run_id: str, namespace: str = "") -> list[CheckpointRecord]:
    """Every checkpoint of a run, oldest first."""
    rows = _rows(catalog, """SELECT * FROM checkpoints WHERE store_id = ? AND run_id = ? AND namespace = ?
        ORDER BY step NULLS FIRST, created_at, checkpoint_id""", [store_id, run_id, namespace])
    if not rows:
        raise CheckpointNotFound(f"no run {run_id!r}" + (f" (namespace {namespace!r})" if namespace else ""))
    return [record_from_row(r) for r in rows]


def run_lineage(catalog: Catalog, store_id: int, run_id: str, namespace: str = "",
                tip: CheckpointRecord | None = None) -> list[CheckpointRecord]:
    """The run's history as it leads to ``tip`` (default: the run's head), oldest first:
    parent links followed back, so abandoned branches of a forked thread are left out."""
    records = run_checkpoints(catalog, store_id, run_id, namespace)
    by_id = {r.checkpoint_id: r for r in records}
    node: CheckpointRecord | None = tip or by_id.get(_head(catalog, store_id, run_id, namespace) or "") \
        or records[-1]
    chain: list[CheckpointRecord] = []
    seen: set[str] = set()
    while node is not None and node.checkpoint_id not in seen:
        chain.append(node)
        seen.add(node.checkpoint_id)
        node = by_id.get(node.parent_id or "")
    return chain[::-1]


def _head(catalog: Catalog, store_id: int, run_id: str, namespace: str) -> str | None:
    rows = _rows(catalog, "SELECT checkpoint_id FROM heads WHERE store_id = ? AND run_id = ? AND namespace = ?",
                 [store_id, run_id, namespace])
    return rows[0]["checkpoint_id"] if rows else None


def lineage_for(catalog: Catalog, store_id: int, ref: str, namespace: str = "") -> list[CheckpointRecord]:
    """A run id (its head's history) or a checkpoint ref (the history leading to it)."""
    try:
        return run_lineage(catalog, store_id, ref, namespace)
    except CheckpointNotFound:
        try:
            tip = resolve_ref(catalog, store_id, ref)
        except CheckpointNotFound:
            raise CheckpointNotFound(f"no run or checkpoint matches {ref!r}") from None
        return run_lineage(catalog, store_id, tip.run_id, tip.namespace, tip=tip)


# ---------------------------------------------------------------- per-step changes

@dataclass(frozen=True)
class StepChange:
    checkpoint_id: str
    parent_id: str | None
    added: int | None = None
    removed: int | None = None
    changed: int | None = None
    moved: int | None = None
    paths: list[str] = field(default_factory=list)
    error: str | None = None


def step_change(loader: StateLoader, record: CheckpointRecord, parent: CheckpointRecord | None) -> StepChange:
    """What ``record`` changed against its parent (everything is added for a first checkpoint)."""
    if record.parent_id and parent is None:
        return StepChange(record.checkpoint_id, record.parent_id, error="the parent is not in the index")
    try:
        before = loader.load(parent) if parent is not None else {}
    except LastgoodError as exc:  # the parent's damage, said as such (this checkpoint may be fine)
        return StepChange(record.checkpoint_id, record.parent_id,
                          error=redact_text(f"its parent {record.parent_id} does not load: {exc}"))
    try:
        result = diff_states(before, loader.load(record), redact=False)
    except LastgoodError as exc:
        return StepChange(record.checkpoint_id, record.parent_id, error=redact_text(str(exc)))
    return StepChange(record.checkpoint_id, record.parent_id, paths=top_level_paths(result),
                      **{k: result.summary[k] for k in ("added", "removed", "changed", "moved")})


def top_level_paths(result: DiffResult) -> list[str]:
    """The first token of every changed path (``/messages``, ``/balance``; ``""`` for the root)."""
    tops = {("/" + c.path.split("/")[1]) if c.path else "" for c in result.changes}
    return sorted(redact_text(t) for t in tops)


def record_step_changes(catalog: Catalog, store: OpenStore, checkpoint_ids: Iterable[str] | None = None,
                        *, run_id: str | None = None, refresh: bool = False) -> int:
    """Compute and store per-step changes (table ``step_changes``) for the given checkpoints,
    a run's, or every checkpoint of the store; cached rows are kept unless ``refresh``.
    Returns how many were computed."""
    records = _step_targets(catalog, store.store_id, checkpoint_ids, run_id, refresh)
    if not records:
        return 0
    loader = StateLoader(store)
    parents = _records_by_id(catalog, store.store_id, {r.parent_id for r in records if r.parent_id})
    rows = []
    for record in records:
        parent = parents.get((record.run_id, record.namespace, record.parent_id or ""))
        rows.append((record, step_change(loader, record, parent)))
    _store_step_changes(catalog, store.store_id, rows)
    return len(rows)


def record_step_changes_with_reader(catalog: Catalog, store_id: int, reader: Any,
                                    checkpoint_ids: Iterable[str] | None = None) -> int:
    """``record_step_changes`` for callers holding a reader rather than an OpenStore (the data check)."""
    return record_step_changes(catalog, OpenStore("", store_id, reader), checkpoint_ids)


_NO_STEP_CHANGE = """NOT EXISTS (SELECT 1 FROM step_changes s WHERE s.store_id = c.store_id
    AND s.run_id = c.run_id AND s.namespace = c.namespace AND s.checkpoint_id = c.checkpoint_id)"""


def count_without_step_changes(catalog: Catalog, store_id: int) -> int:
    """How many of the store's checkpoints have no recorded per-step change yet."""
    rows = _rows(catalog, f"SELECT count(*) AS n FROM checkpoints c WHERE c.store_id = ? AND {_NO_STEP_CHANGE}",
                 [store_id])
    return int(rows[0]["n"])


def _step_targets(catalog: Catalog, store_id: int, ids: Iterable[str] | None, run_id: str | None,
                  refresh: bool) -> list[CheckpointRecord]:
    clauses, params = ["c.store_id = ?"], [store_id]
    if ids is not None:
        clauses.append("list_contains(?, c.checkpoint_id)")
        params.append(list(ids))
    if run_id is not None:
        clauses.append("c.run_id = ?")
        params.append(run_id)
    if not refresh:
        clauses.append(_NO_STEP_CHANGE)
    rows = _rows(catalog, f"""SELECT c.* FROM checkpoints c WHERE {' AND '.join(clauses)}
        ORDER BY c.run_id, c.namespace, c.step NULLS FIRST, c.created_at""", params)
    return [record_from_row(r) for r in rows]


def _records_by_id(catalog: Catalog, store_id: int, ids: set[str]) -> dict[tuple[str, str, str], CheckpointRecord]:
    if not ids:
        return {}
    rows = _rows(catalog, "SELECT * FROM checkpoints WHERE store_id = ? AND list_contains(?, checkpoint_id)",
                 [store_id, sorted(ids)])
    return {(r["run_id"], r["namespace"], r["checkpoint_id"]): record_from_row(r) for r in rows}


def _store_step_changes(catalog: Catalog, store_id: int, rows: list[tuple[CheckpointRecord, StepChange]]) -> None:
    now = datetime.now(UTC)
    values = [(store_id, r.run_id, r.namespace, s.checkpoint_id, s.parent_id, s.added, s.removed, s.changed,
               s.moved, s.paths, s.error, now) for r, s in rows]
    with catalog.connect() as con:
        con.execute("BEGIN TRANSACTION")
        con.execute("""DELETE FROM step_changes WHERE store_id = ?
            AND list_contains(?, run_id || chr(0) || namespace || chr(0) || checkpoint_id)""",
                    [store_id, [f"{r.run_id}\0{r.namespace}\0{r.checkpoint_id}" for r, _ in rows]])
        con.executemany("INSERT INTO step_changes VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", values)
        con.execute("COMMIT")


def step_changes(catalog: Catalog, store_id: int, run_id: str, namespace: str = "") -> list[dict[str, Any]]:
    """Stored per-step changes of a run, with each checkpoint's step and time, oldest first."""
    return _rows(catalog, """SELECT c.run_id, c.namespace, c.checkpoint_id, c.parent_id, c.step, c.created_at,
            s.added, s.removed, s.changed, s.moved, s.paths, s.error
        FROM checkpoints c JOIN step_changes s ON s.store_id = c.store_id AND s.run_id = c.run_id
            AND s.namespace = c.namespace AND s.checkpoint_id = c.checkpoint_id
        WHERE c.store_id = ? AND c.run_id = ? AND c.namespace = ?
        ORDER BY c.step NULLS FIRST, c.created_at""", [store_id, run_id, namespace])


# ---------------------------------------------------------------- a field over time

def normalize_track_path(path: str) -> str:
    """``/messages`` or ``len(/messages)`` → ``/messages`` (lists are tracked by length anyway)."""
    text = path.strip()
    if text.startswith("len(") and text.endswith(")"):
        text = text[4:-1].strip()
    if text and not text.startswith("/"):
        raise UsageError(f"a path is a JSON Pointer starting with '/', like /messages, not {path!r}")
    return text or "/"


def tracked_value(state: Any, path: str) -> dict[str, Any]:
    """{kind, value, number, length} of the value at ``path`` (redacted; containers by length)."""
    found = resolve_pointer(state, path)
    if found is MISSING:
        return {"kind": "missing", "value": None, "number": None, "length": None}
    if isinstance(found, (dict, list, tuple)):
        kind = "dict" if isinstance(found, dict) else "list"
        return {"kind": kind, "value": None, "number": float(len(found)), "length": len(found)}
    if is_secret_key(governing_key(path)):  # /client_secret/value: everything below a secret-named key
        value = MASK if found not in (None, "") else found
        return {"kind": type(found).__name__, "value": value, "number": None, "length": None}  # nor its length
    value = jsonable(redact(found))
    number = float(found) if isinstance(found, (int, float)) and not isinstance(found, bool) else None
    length = len(found) if isinstance(found, str) else None
    return {"kind": type(found).__name__, "value": value, "number": number, "length": length}


def track_missing(catalog: Catalog, store: OpenStore, run_id: str, paths: list[str],
                  namespace: str = "") -> int:
    """Track ``paths`` at the run's checkpoints that have no value for them yet, decoding each such
    state once for all of them; returns how many states were decoded."""
    records = run_checkpoints(catalog, store.store_id, run_id, namespace)
    known = {(r["path"], r["checkpoint_id"]) for r in _rows(catalog, """SELECT path, checkpoint_id
        FROM tracked_values WHERE store_id = ? AND run_id = ? AND namespace = ? AND list_contains(?, path)""",
        [store.store_id, run_id, namespace, list(paths)])}
    loader = StateLoader(store, size=1)
    fresh: dict[str, list[tuple[CheckpointRecord, dict[str, Any]]]] = {path: [] for path in paths}
    for record in records:
        for path in paths:
            if (path, record.checkpoint_id) not in known:
                fresh[path].append((record, _track_one(loader, record, path)))
    for path, rows in fresh.items():
        _store_tracked(catalog, store.store_id, path, rows)
    return loader.decoded


def track_field(catalog: Catalog, store: OpenStore, run_id: str, path: str,
                namespace: str = "") -> list[dict[str, Any]]:
    """The value at ``path`` for every checkpoint of the run (decoded once, then from the index)."""
    path = normalize_track_path(path)
    track_missing(catalog, store, run_id, [path], namespace)
    return tracked_values(catalog, store.store_id, run_id, path, namespace)


def _track_one(loader: StateLoader, record: CheckpointRecord, path: str) -> dict[str, Any]:
    try:
        return {**tracked_value(loader.load(record), path), "error": None}
    except LastgoodError as exc:
        return {"kind": "error", "value": None, "number": None, "length": None, "error": redact_text(str(exc))}


def _store_tracked(catalog: Catalog, store_id: int, path: str, rows: list[tuple[CheckpointRecord, dict]]) -> None:
    if not rows:
        return
    now = datetime.now(UTC)
    values = [(store_id, r.run_id, r.namespace, r.checkpoint_id, path, v["kind"], json.dumps(v["value"]),
               v["number"], v["length"], v["error"], now) for r, v in rows]
    with catalog.connect() as con:
        con.executemany("INSERT INTO tracked_values VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", values)


def tracked_values(catalog: Catalog, store_id: int, run_id: str, path: str,
                   namespace: str = "") -> list[dict[str, Any]]:
    rows = _rows(catalog, """SELECT c.checkpoint_id, c.step, c.created_at, t.kind, t.value, t.number,
            t.length, t.error
        FROM tracked_values t JOIN checkpoints c ON c.store_id = t.store_id AND c.run_id = t.run_id
            AND c.namespace = t.namespace AND c.checkpoint_id = t.checkpoint_id
        WHERE t.store_id = ? AND t.run_id = ? AND t.namespace = ? AND t.path = ?
        ORDER BY c.step NULLS FIRST, c.created_at""", [store_id, run_id, namespace, path])
    for row in rows:
        row["value"] = json.loads(row["value"]) if isinstance(row["value"], str) else row["value"]
    return rows


# ---------------------------------------------------------------- first divergence

def diverge(catalog: Catalog, store_a: OpenStore, ref_a: str, ref_b: str, store_b: OpenStore | None = None,
            namespace: str = "") -> dict[str, Any]:
    """Align two runs by step and find the first step whose states differ."""
    store_b = store_b or store_a
    line_a = lineage_for(catalog, store_a.store_id, ref_a, namespace)
    line_b = lineage_for(catalog, store_b.store_id, ref_b, namespace)
    steps_a, steps_b = _by_step(line_a), _by_step(line_b)
    common = sorted(set(steps_a) & set(steps_b))
    loader_a, loader_b = StateLoader(store_a, 2), StateLoader(store_b, 2)
    out: dict[str, Any] = {"a": _run_label(store_a, line_a), "b": _run_label(store_b, line_b),
                           "common_steps": len(common), "first_divergence": None}
    for step in common:
        rec_a, rec_b = steps_a[step], steps_b[step]
        if _same_checkpoint(store_a, rec_a, store_b, rec_b):
            continue
        result = diff_states(loader_a.load(rec_a), loader_b.load(rec_b))
        if result.changes:
            out["first_divergence"] = {"step": step, **result.to_dict(checkpoint_label(store_a, rec_a),
                                                                        checkpoint_label(store_b, rec_b))}
            break
    out["states_decoded"] = loader_a.decoded + loader_b.decoded
    out["only_in_a"] = len(steps_a) - len(common)
    out["only_in_b"] = len(steps_b) - len(common)
    return out


def _by_step(line: list[CheckpointRecord]) -> dict[int, CheckpointRecord]:
    """Step → checkpoint (position when the store records no steps; the last one wins)."""
    if any(r.step is None for r in line):
        return dict(enumerate(line))
    return {int(r.step): r for r in line}  # type: ignore[arg-type]


def _same_checkpoint(store_a: OpenStore, a: CheckpointRecord, store_b: OpenStore, b: CheckpointRecord) -> bool:
    if store_a.store_id == store_b.store_id and a.checkpoint_id == b.checkpoint_id:
        return True
    return bool(a.checksum) and a.checksum == b.checksum and a.kind == b.kind == "full"


def _run_label(store: OpenStore, line: list[CheckpointRecord]) -> dict[str, Any]:
    tip = line[-1]
    return {"store": store.display_url, "run_id": tip.run_id, "namespace": tip.namespace,
            "tip": tip.checkpoint_id, "checkpoints": len(line)}


# ---------------------------------------------------------------- bisect

@dataclass
class _Probe:
    records: list[CheckpointRecord]
    predicate: Predicate
    loader: StateLoader
    results: dict[int, bool] = field(default_factory=dict)
    errors: dict[int, str] = field(default_factory=dict)

    def __call__(self, i: int) -> bool:
        if i not in self.results:
            try:
                self.results[i] = self.predicate.evaluate(self.loader.load(self.records[i]))
            except (DecodeError, ReaderError) as exc:  # an unreadable state cannot satisfy it
                self.errors[i] = redact_text(str(exc))
                self.results[i] = False
        return self.results[i]


def bisect_run(catalog: Catalog, store: OpenStore, ref: str, predicate: Predicate,
               strategy: str = "auto", namespace: str = "") -> dict[str, Any]:
    """The first checkpoint along the run's history where ``predicate`` holds.

    ``binary`` assumes the predicate is monotonic (false, then true for good);
    ``scan`` tests every checkpoint in order; ``auto`` probes a few evenly spaced
    checkpoints first: if they are monotonic it binary-searches the bracket where
    the predicate turns true, otherwise it scans up to the first true probe."""
    if strategy not in STRATEGIES:
        raise UsageError(f"--strategy must be one of {', '.join(STRATEGIES)}")
    line = lineage_for(catalog, store.store_id, ref, namespace)
    probe = _Probe(line, predicate, StateLoader(store, size=1))
    index, used = _search(probe, len(line), strategy)
    found = line[index] if index is not None else None
    return {"run_id": line[-1].run_id, "namespace": line[-1].namespace, "where": predicate.text,
            "strategy": used, "checkpoints": len(line), "states_decoded": probe.loader.decoded,
            "found": checkpoint_label(store, found) if found else None,
            "unreadable": [{"checkpoint_id": line[i].checkpoint_id, "error": e}
                           for i, e in sorted(probe.errors.items())]}


def bisect_run_sql(catalog: Catalog, store: OpenStore, ref: str, predicate: SqlPredicate,
                   namespace: str = "") -> dict[str, Any]:
    """``bisect_run`` for ``sql: EXPR``: every field the expression names is tracked first (states are
    decoded only for values not yet in ``tracked_values``), then DuckDB scans the run's projection
    in one query. No monotonicity is needed, so the strategy is always a scan (in SQL)."""
    line = lineage_for(catalog, store.store_id, ref, namespace)
    run_id, ns = line[-1].run_id, line[-1].namespace
    fields = _sql_fields(catalog, store.store_id, run_id, ns, predicate.columns)
    decoded = track_missing(catalog, store, run_id, sorted(set(fields.values())), ns)
    by_path = {path: {r["checkpoint_id"]: r for r in tracked_values(catalog, store.store_id, run_id, path, ns)}
               for path in fields.values()}
    columns = {name: [by_path[path].get(r.checkpoint_id) for r in line] for name, path in fields.items()}
    hits = evaluate_sql(predicate, columns, len(line))
    found = line[hits[0]] if hits else None
    unreadable = sorted({(r.checkpoint_id, v["error"]) for values in columns.values()
                         for r, v in zip(line, values) if v is not None and v["kind"] == "error"})
    return {"run_id": run_id, "namespace": ns, "where": predicate.text, "strategy": "sql scan",
            "checkpoints": len(line), "states_decoded": decoded, "fields": fields, "matches": len(hits),
            "found": checkpoint_label(store, found) if found else None,
            "unreadable": [{"checkpoint_id": c, "error": e} for c, e in unreadable]}


def _sql_fields(catalog: Catalog, store_id: int, run_id: str, namespace: str,
                columns: tuple[str, ...]) -> dict[str, str]:
    """Column name -> tracked path: ``balance`` is ``/balance`` (an already tracked path that
    differs only in case is reused), ``"plan/step"`` is ``/plan/step``."""
    known = {r["path"].lower(): r["path"] for r in _rows(catalog, """SELECT DISTINCT path FROM tracked_values
        WHERE store_id = ? AND run_id = ? AND namespace = ? ORDER BY path""", [store_id, run_id, namespace])}
    return {name: known.get("/" + name.lower(), "/" + name) for name in columns}


def _search(probe: Callable[[int], bool], n: int, strategy: str) -> tuple[int | None, str]:
    if n == 0:
        return None, strategy
    if strategy == "scan":
        return _scan(probe, 0, n), "scan"
    if strategy == "binary":
        return _binary(probe, 0, n), "binary"
    points = sorted({round(k * (n - 1) / (BISECT_PROBES - 1)) for k in range(BISECT_PROBES)})
    values = [probe(i) for i in points]
    first_true = next((k for k, v in enumerate(values) if v), None)
    monotonic = first_true is None or all(values[first_true:])
    if first_true is None:  # a predicate true only between probes is still found
        return _scan(probe, 0, n), "scan (no probe was true)"
    lo = points[first_true - 1] + 1 if first_true > 0 else 0
    hi = points[first_true]
    if monotonic:
        return _binary(probe, lo, hi + 1), "binary"
    return _scan(probe, 0, hi + 1), "scan (not monotonic)"


def _scan(probe: Callable[[int], bool], lo: int, hi: int) -> int | None:
    return next((i for i in range(lo, hi) if probe(i)), None)


def _binary(probe: Callable[[int], bool], lo: int, hi: int) -> int | None:
    """The first i in [lo, hi) with probe(i), assuming false…false true…true."""
    if hi <= lo or not probe(hi - 1):
        return None
    hi -= 1
    while lo < hi:
        mid = (lo + hi) // 2
        if probe(mid):
            hi = mid
        else:
            lo = mid + 1
    return lo


# ---------------------------------------------------------------- SQL

def _rows(catalog: Catalog, sql: str, params: Any = None) -> list[dict[str, Any]]:
    with catalog.connect() as con:
        cur = con.execute(sql, params or [])
        names = [d[0] for d in cur.description]
        return [dict(zip(names, row)) for row in cur.fetchall()]
