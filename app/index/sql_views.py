"""The documented views of ``lastgood sql`` (docs/sql.md): their columns, and the SQL that builds
each one inside the query sandbox (:mod:`lastgood.index.sql`) from the store's rows.

The sandbox holds only the rows of the store (or stores) being queried, under hidden names
(``lastgood_src_*``, ``lastgood_raw_*``) a query may not name; the documented views read them
and show every store-provided text redacted, as every page and command shows it
(``lastgood.redact``): free text through ``lastgood_text``, JSON through ``lastgood_json`` (the
decoded tree redacted, keys included), and an id that is shaped like a secret as its non-secret
handle (``key:`` + 24 hex digits, as the pages link it: ``lastgood show STORE key:…`` opens it).
A value no redaction rule could act on (none of ``lastgood.redact.REDACTION_ANCHORS`` in it) is
passed through by DuckDB without reaching Python.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from lastgood.readers.base import DAMAGED_STATUSES, Status, sql_status_counts, sql_statuses
from lastgood.redact import REDACTION_ANCHORS

HIDDEN_PREFIX = "lastgood_"  # every object of the sandbox that is not a documented view
# a value containing none of these cannot be changed by lastgood.redact (RE2, case-insensitive)
ANCHORS_RE = "(?i)" + "|".join(re.escape(a) for a in REDACTION_ANCHORS)


@dataclass(frozen=True)
class Column:
    name: str
    type: str
    doc: str


@dataclass(frozen=True)
class View:
    name: str
    doc: str
    columns: tuple[Column, ...]
    sources: tuple[str, ...]  # the hidden sources it reads (loaded only when a query names it)


def _cols(*spec: tuple[str, str, str]) -> tuple[Column, ...]:
    return tuple(Column(*c) for c in spec)


_RUN = ("run_id", "VARCHAR", "run (LangGraph: thread_id); a secret-shaped id shows as its handle `key:…`")
_NS = ("namespace", "VARCHAR", "LangGraph checkpoint_ns; '' for the root and for other formats")
_CKPT = ("checkpoint_id", "VARCHAR", "checkpoint id; a secret-shaped id shows as its handle `key:…`")

VIEWS: tuple[View, ...] = (
    View("checkpoints", "One row per checkpoint of the store (what `lastgood ls` lists, every field).", _cols(
        _RUN, _NS, _CKPT,
        ("parent_id", "VARCHAR", "the checkpoint it was saved after (NULL for a run's first)"),
        ("step", "BIGINT", "step number as the store records it"),
        ("created_at", "TIMESTAMP WITH TIME ZONE", "when it was saved (UTC)"),
        ("trigger", "VARCHAR", "why it was saved: periodic, event, manual, final, restore (LangGraph: metadata source)"),
        ("kind", "VARCHAR", "full or incremental (native), checkpoint (LangGraph), …"),
        ("status", "VARCHAR", "ok, corrupt, incomplete, quarantined or superseded"),
        ("status_reason", "VARCHAR", "why it is not ok (NULL when ok)"),
        ("size_bytes", "BIGINT", "stored size of its state"),
        ("agent", "VARCHAR", "agent that wrote it (NULL when the format has none)"),
        ("codec", "VARCHAR", "how its state is encoded (json, msgpack, …)"),
        ("checksum", "VARCHAR", "the store's checksum of its bytes (`sha256:…`)"),
        ("location", "VARCHAR", "where its state lives inside the store"),
        ("metadata", "JSON", "the metadata saved with it (redacted)"),
        ("verified", "VARCHAR", "deepest check so far: data, structure, catalog (blob files not looked at) or NULL"),
        ("data_checked", "BOOLEAN", "true once a data check decoded it (`ls`'s data_checked)"),
        ("data_checked_at", "TIMESTAMP WITH TIME ZONE", "when a data check last read it"),
    ), ("rows", "parts")),
    View("runs", "One row per run and namespace: health, counts and last good checkpoint (as `lastgood runs`).",
         _cols(
             _RUN, _NS,
             ("agent", "VARCHAR", "agent of its newest checkpoint"),
             ("checkpoints", "BIGINT", "checkpoints in the run"),
             ("first_at", "TIMESTAMP WITH TIME ZONE", "its first checkpoint's time"),
             ("last_at", "TIMESTAMP WITH TIME ZONE", "its newest checkpoint's time"),
             ("last_step", "BIGINT", "highest step"),
             ("size_bytes", "BIGINT", "stored bytes of all its checkpoints"),
             *((s.value, "BIGINT", f"checkpoints with status {s.value}") for s in Status),
             ("unverified", "BIGINT", "checkpoints with a state no data check has read yet"),
             ("errors", "BIGINT", "error findings on its checkpoints (one per checkpoint and check)"),
             ("warnings", "BIGINT", "warning findings on its checkpoints"),
             ("head", "VARCHAR", "the checkpoint the run resumes from (NULL when the store records none)"),
             ("last_good", "VARCHAR", "newest data-checked checkpoint not after the head, with no error (NULL: none yet)"),
             ("last_good_at", "TIMESTAMP WITH TIME ZONE", "when the last good checkpoint was saved"),
             ("health", "VARCHAR", "damaged, unverified, warnings or good (as `lastgood runs`)"),
         ), ("rows", "parts", "heads", "findings")),
    View("findings", "What the checks found: one per checkpoint and check, as `lastgood verify` lists them.", _cols(
        ("run_id", "VARCHAR", "run of the checkpoint (NULL for a finding about the store itself)"), _NS,
        ("checkpoint_id", "VARCHAR", "the checkpoint (NULL for a finding about the store itself)"),
        ("check_id", "VARCHAR", "what was checked (lastgood.checks.Check: blob-missing, sha256-mismatch, …)"),
        ("severity", "VARCHAR", "error, warning or info"),
        ("message", "VARCHAR", "what was found (redacted)"),
        ("depth", "VARCHAR", "catalog, structure, lineage, content or data: the shallowest check that found it"),
        ("found_at", "TIMESTAMP WITH TIME ZONE", "when it was found"),
    ), ("findings",)),
    View("events", "Events the store recorded with its checkpoints (errors, timeouts, interrupts, tool calls…).",
         _cols(
             _RUN, _NS, ("checkpoint_id", "VARCHAR", "the checkpoint it was recorded with"),
             ("created_at", "TIMESTAMP WITH TIME ZONE", "when it happened"),
             ("kind", "VARCHAR", "error, timeout, interrupt, restart, … (LangGraph: the write's kind)"),
             ("channel", "VARCHAR", "LangGraph channel of a pending write"),
             ("task_id", "VARCHAR", "LangGraph task of a pending write"),
             ("message", "VARCHAR", "what it says (redacted)"),
         ), ("events",)),
    View("actions", "The recovery journal: every restore, rollback, quarantine, undo, prune… (as `lastgood journal`).",
         _cols(
             ("action_id", "VARCHAR", "the action's id (`lastgood undo STORE ID`)"),
             ("seq", "BIGINT", "its position in the journal"),
             ("acted_at", "TIMESTAMP WITH TIME ZONE", "when it was applied"),
             ("operator", "VARCHAR", "who applied it"),
             ("action", "VARCHAR", "restore, rollback, quarantine, release, undo, check-failed, prune, pin, …"),
             _RUN, _NS,
             ("target", "VARCHAR", "the checkpoint it acted on"),
             ("previous_head", "VARCHAR", "the run's head before it"),
             ("new_head", "VARCHAR", "the run's head after it"),
             ("superseded", "JSON", "checkpoints it marked superseded"),
             ("reason", "VARCHAR", "the reason given (redacted)"),
             ("undoes", "VARCHAR", "the action it undid (undo only)"),
             ("hash", "VARCHAR", "sha256 of the entry (the hash chain)"),
             ("prev_hash", "VARCHAR", "the previous entry's hash"),
         ), ("journal",)),
    View("tensors", "Per-tensor statistics of training checkpoints, from their last full read (`verify --read-data`).",
         _cols(
             _RUN, _NS, _CKPT,
             ("name", "VARCHAR", "tensor name (e.g. model.layers.0.weight)"),
             ("dtype", "VARCHAR", "element type (float32, bfloat16, …)"),
             ("shape", "JSON", "dimensions, a JSON list"),
             ("numel", "BIGINT", "elements"),
             ("nan", "BIGINT", "NaN elements"), ("posinf", "BIGINT", "+Inf elements"),
             ("neginf", "BIGINT", "-Inf elements"), ("zeros", "BIGINT", "elements equal to zero"),
             ("min", "DOUBLE", "smallest finite value"), ("max", "DOUBLE", "largest finite value"),
             ("mean", "DOUBLE", "mean of finite values"), ("std", "DOUBLE", "standard deviation of finite values"),
             ("norm", "DOUBLE", "L2 norm of finite values"),
             ("sha256", "VARCHAR", "hash of the tensor's bytes"),
             ("checked_at", "TIMESTAMP WITH TIME ZONE", "when the read that measured it ran"),
         ), ("tensors",)),
)
BY_NAME = {v.name: v for v in VIEWS}
STORE_COLUMN = Column("store", "VARCHAR", "the store (its URL without credentials); with --all-stores only")

EXAMPLES: tuple[tuple[str, str], ...] = (
    ("Runs whose last good checkpoint is older than a day",
     "SELECT run_id, agent, health, last_good, last_good_at, last_at FROM runs\n"
     "WHERE last_good_at IS NULL OR last_good_at < now() - INTERVAL 1 DAY\nORDER BY last_good_at NULLS FIRST"),
    ("Biggest checkpoints",
     "SELECT run_id, checkpoint_id, step, created_at, status, size_bytes FROM checkpoints\n"
     "ORDER BY size_bytes DESC LIMIT 20"),
    ("Findings by check per agent",
     "SELECT c.agent, f.check_id, f.severity, count(*) AS findings FROM findings f\n"
     "LEFT JOIN checkpoints c USING (run_id, namespace, checkpoint_id)\n"
     "GROUP BY ALL ORDER BY findings DESC"),
    ("Checkpoints and bytes per run",
     "SELECT run_id, count(*) AS checkpoints, sum(size_bytes) AS bytes, max(created_at) AS last_at\n"
     "FROM checkpoints GROUP BY run_id ORDER BY bytes DESC"),
    ("Events per kind and day",
     "SELECT date_trunc('day', created_at) AS day, kind, count(*) AS events FROM events\n"
     "GROUP BY ALL ORDER BY day, events DESC"),
    ("Recovery actions with their reasons",
     "SELECT acted_at, operator, action, run_id, target, reason FROM actions ORDER BY seq"),
    ("Tensors with NaN or Inf values",
     "SELECT run_id, checkpoint_id, name, nan, posinf, neginf FROM tensors\n"
     "WHERE nan + posinf + neginf > 0 ORDER BY checkpoint_id, name"),
)


# ---- redacting expressions ------------------------------------------------------------------

def _guarded(column: str, call: str) -> str:
    """``column`` unchanged unless a redaction rule could act on it; then ``call``."""
    return f"CASE WHEN {column} IS NULL OR NOT regexp_matches({column}, '{ANCHORS_RE}') THEN {column} ELSE {call} END"


def text(column: str) -> str:
    return _guarded(column, f"lastgood_text({column})")


def ident(column: str) -> str:
    """A run id, namespace or action id: its handle when it is secret-shaped."""
    return _guarded(column, f"lastgood_id({column})")


def ckpt(column: str, run: str = "run_id", namespace: str = "namespace") -> str:
    """A checkpoint id (of run ``run``): the checkpoint's handle when it is secret-shaped."""
    return _guarded(column, f"lastgood_ckpt({run}, {namespace}, {column})")


def json_text(column: str) -> str:
    return f"({_guarded(column, f'lastgood_json({column})')})::JSON"


# ---- the hidden sources ----------------------------------------------------------------------

RAW_CHECKPOINT_COLUMNS = ("store_id", "run_id", "namespace", "checkpoint_id", "parent_id", "step", "created_at",
                          "trigger", "kind", "status", "status_reason", "size_bytes", "checksum", "agent",
                          "codec", "location", "metadata", "verified", "data_checked_at")
# the raw columns a view column is made of (by default: the one of its name), and what `runs` reads
_MADE_OF = {"checkpoint_id": ("checkpoint_id", "run_id", "namespace"),
            "parent_id": ("parent_id", "run_id", "namespace"), "data_checked": ("verified",)}
RUNS_RAW_COLUMNS = ("run_id", "namespace", "checkpoint_id", "created_at", "step", "status", "verified", "agent",
                    "size_bytes")


def raw_columns(views: set[str], named: frozenset[str] | None) -> tuple[str, ...]:
    """The raw checkpoint columns a query over ``views`` needs when it names the view columns
    ``named`` (None: it may read any), in RAW_CHECKPOINT_COLUMNS' order; ``store_id`` always."""
    if named is None:
        return RAW_CHECKPOINT_COLUMNS
    needed = {"store_id"} | (set(RUNS_RAW_COLUMNS) if "runs" in views else set())
    if "checkpoints" in views:
        needed |= {raw for name in named for raw in _MADE_OF.get(name, (name,))}
    return tuple(c for c in RAW_CHECKPOINT_COLUMNS if c in needed)


def raw_select(columns: tuple[str, ...], types: dict[str, str], source: dict[str, str] | None = None) -> str:
    """Every raw checkpoint column, in order: those in ``columns`` as ``source`` makes them (default:
    the column itself), the others NULL of their type (``types``): a query never reads them."""
    made = source or {}
    return ", ".join(f"{made.get(c, c)} AS {c}" if c in columns else f"NULL::{types[c]} AS {c}"
                     for c in RAW_CHECKPOINT_COLUMNS)


def part_branch(store_id: int, url: str, verified: str | None, checked_at: str | None,
                columns: tuple[str, ...] = RAW_CHECKPOINT_COLUMNS, types: dict[str, str] | None = None) -> str:
    """An attached part's rows as the index's ``checkpoints`` view shows them (lastgood.index.attached:
    status ok as listed, the attachment's constants), read through the sandbox's read-only files;
    only ``columns`` are read from it (the others NULL of their ``types``)."""
    made = {"store_id": f"{int(store_id)}::INTEGER", "namespace": "coalesce(namespace, '')",
            "status": sql_statuses(Status.OK), "status_reason": "NULL::VARCHAR", "metadata": "nullif(metadata, '')",
            "verified": f"{literal(verified)}::VARCHAR", "data_checked_at": f"{literal(checked_at)}::TIMESTAMPTZ"}
    return f"SELECT {raw_select(columns, types or {}, made)} FROM read_parquet({literal(url)})"


def literal(value: object) -> str:
    return "NULL" if value is None else "'" + str(value).replace("'", "''") + "'"


def _store(all_stores: bool) -> str:
    """The leading ``store`` column with --all-stores (nothing otherwise)."""
    return f"{text('s.display_url')} AS store, " if all_stores else ""


def _join_store(all_stores: bool, alias: str) -> str:
    return f" LEFT JOIN lastgood_src_stores s ON s.store_id = {alias}.store_id" if all_stores else ""


def view_sql(name: str, all_stores: bool) -> str:
    """``CREATE VIEW name AS …`` over the hidden sources."""
    body = {"checkpoints": _checkpoints, "runs": _runs, "findings": _findings, "events": _events,
            "actions": _actions, "tensors": _tensors}[name](all_stores)
    return f"CREATE OR REPLACE TEMP VIEW {name} AS {body}"


def _checkpoints(all_stores: bool) -> str:
    return f"""SELECT {_store(all_stores)}{ident('c.run_id')} AS run_id, {ident('c.namespace')} AS namespace,
        {ckpt('c.checkpoint_id', 'c.run_id', 'c.namespace')} AS checkpoint_id,
        {ckpt('c.parent_id', 'c.run_id', 'c.namespace')} AS parent_id, c.step, c.created_at,
        {text('c.trigger')} AS trigger, {text('c.kind')} AS kind, c.status, {text('c.status_reason')} AS status_reason,
        c.size_bytes, {text('c.agent')} AS agent, {text('c.codec')} AS codec, {text('c.checksum')} AS checksum,
        {text('c.location')} AS location, {json_text('c.metadata')} AS metadata, c.verified,
        coalesce(c.verified = 'data', false) AS data_checked, c.data_checked_at
        FROM lastgood_raw_checkpoints c{_join_store(all_stores, 'c')}"""


_KEY = "store_id, run_id, namespace"
_ORDER = "(c.created_at, c.step, c.checkpoint_id)"


def _runs(all_stores: bool) -> str:
    # last good: as lastgood.integrity.health (data-checked, ok, no error finding, not after the head)
    return f"""WITH head_at AS (
            SELECT h.store_id, h.run_id, h.namespace, h.checkpoint_id, hc.created_at, hc.step
            FROM lastgood_src_heads h JOIN lastgood_raw_checkpoints hc USING ({_KEY}, checkpoint_id)),
        good AS (
            SELECT c.store_id, c.run_id, c.namespace, arg_max(c.checkpoint_id, {_ORDER}) AS last_good,
                   arg_max(c.created_at, {_ORDER}) AS last_good_at
            FROM lastgood_raw_checkpoints c LEFT JOIN head_at ha ON ha.store_id = c.store_id
                AND ha.run_id = c.run_id AND ha.namespace = c.namespace
            WHERE c.status = {sql_statuses(Status.OK)} AND c.verified = 'data'
              AND (ha.run_id IS NULL OR {_ORDER} <= (ha.created_at, ha.step, ha.checkpoint_id))
              AND NOT EXISTS (SELECT 1 FROM lastgood_src_findings f WHERE f.severity = 'error'
                              AND f.store_id = c.store_id AND f.run_id = c.run_id AND f.namespace = c.namespace
                              AND f.checkpoint_id = c.checkpoint_id)
            GROUP BY ALL),
        counts AS (
            SELECT {_KEY}, count(*) FILTER (WHERE severity = 'error') AS errors,
                   count(*) FILTER (WHERE severity = 'warning') AS warnings
            FROM lastgood_src_findings WHERE checkpoint_id IS NOT NULL GROUP BY ALL),
        agg AS (
            SELECT {_KEY}, arg_max(agent, created_at) AS agent, count(*) AS checkpoints,
                   min(created_at) AS first_at, max(created_at) AS last_at, max(step) AS last_step,
                   coalesce(sum(size_bytes), 0)::BIGINT AS size_bytes, {sql_status_counts("status")},
                   count(*) FILTER (WHERE coalesce(verified, '') <> 'data'
                                    AND status NOT IN {sql_statuses(*DAMAGED_STATUSES)}) AS unverified
            FROM lastgood_raw_checkpoints GROUP BY ALL),
        r AS (
            SELECT a.*, coalesce(n.errors, 0) AS errors, coalesce(n.warnings, 0) AS warnings,
                   h.checkpoint_id AS head, g.last_good, g.last_good_at
            FROM agg a LEFT JOIN counts n USING ({_KEY}) LEFT JOIN lastgood_src_heads h USING ({_KEY})
            LEFT JOIN good g USING ({_KEY}))
        SELECT {_store(all_stores)}{ident('r.run_id')} AS run_id, {ident('r.namespace')} AS namespace,
            {text('r.agent')} AS agent, r.checkpoints, r.first_at, r.last_at, r.last_step, r.size_bytes,
            {', '.join(f'r.{s.value}' for s in Status)}, r.unverified, r.errors, r.warnings,
            {ckpt('r.head', 'r.run_id', 'r.namespace')} AS head,
            {ckpt('r.last_good', 'r.run_id', 'r.namespace')} AS last_good, r.last_good_at,
            CASE WHEN r.errors > 0 OR r.{Status.CORRUPT.value} > 0 OR r.{Status.INCOMPLETE.value} > 0 THEN 'damaged'
                 WHEN r.last_good IS NULL THEN 'unverified' WHEN r.warnings > 0 THEN 'warnings'
                 ELSE 'good' END AS health
        FROM r{_join_store(all_stores, 'r')}"""


def _findings(all_stores: bool) -> str:
    return f"""SELECT {_store(all_stores)}{ident('f.run_id')} AS run_id, {ident('f.namespace')} AS namespace,
        {ckpt('f.checkpoint_id', 'f.run_id', 'f.namespace')} AS checkpoint_id, f."check" AS check_id, f.severity,
        {text('f.message')} AS message, f.depth, f.found_at
        FROM lastgood_src_findings f{_join_store(all_stores, 'f')}"""


def _events(all_stores: bool) -> str:
    return f"""SELECT {_store(all_stores)}{ident('e.run_id')} AS run_id, {ident('e.namespace')} AS namespace,
        {ckpt('e.checkpoint_id', 'e.run_id', 'e.namespace')} AS checkpoint_id, e.created_at,
        {text('e.kind')} AS kind, {text('e.channel')} AS channel, {text('e.task_id')} AS task_id,
        {text('e.message')} AS message
        FROM lastgood_src_events e{_join_store(all_stores, 'e')}"""


def _actions(all_stores: bool) -> str:
    ids = ", ".join(f"{ckpt('j.' + c, 'j.run_id', 'j.namespace')} AS {c}"
                    for c in ("target", "previous_head", "new_head"))
    return f"""SELECT {_store(all_stores)}{ident('j.action_id')} AS action_id, j.seq, j.acted_at,
        {text('j.operator')} AS operator, {text('j.action')} AS action, {ident('j.run_id')} AS run_id,
        {ident('j.namespace')} AS namespace, {ids}, {json_text('j.superseded')} AS superseded,
        {text('j.reason')} AS reason, {ident('j.undoes')} AS undoes, {text('j.hash')} AS hash,
        {text('j.prev_hash')} AS prev_hash
        FROM lastgood_src_journal j{_join_store(all_stores, 'j')}"""


def _tensors(all_stores: bool) -> str:
    stats = ", ".join(f"t.{c}" for c in ("numel", "nan", "posinf", "neginf", "zeros", "min", "max", "mean", "std",
                                         "norm"))
    return f"""SELECT {_store(all_stores)}{ident('t.run_id')} AS run_id, {ident('t.namespace')} AS namespace,
        {ckpt('t.checkpoint_id', 't.run_id', 't.namespace')} AS checkpoint_id, {text('t.name')} AS name,
        {text('t.dtype')} AS dtype, {json_text('t.shape')} AS shape, {stats}, {text('t.sha256')} AS sha256,
        t.checked_at
        FROM lastgood_src_tensors t{_join_store(all_stores, 't')}"""
