"""The keep-set: for every checkpoint of a store, keep or forget, and the rules that keep it.

    plan = plan_prune(catalog, store, Policy(last=10))     # a dry run: nothing is written
    plan.summary, plan.per_run, plan.rows                  # plain data / Arrow for the Storage page

Computed in the index (DuckDB, window functions): the policy's rules (:mod:`lastgood.retention.policy`)
per run and namespace; then what is always kept, whatever the policy — each run's head and last good,
every pinned checkpoint, every checkpoint a journaled action not undone names — and, through the
reader's retention capability, everything a kept checkpoint needs to be read (incremental parents,
DeltaChannel ancestors, subgraph parents and interrupt chains, pending sends): the closure of its
dependency edges. A run ``--keep-runs-within`` finds stale goes whole (head and last good included)
unless something in it is pinned or journaled. Saves in progress (status incomplete) are never
touched. Bytes are the index's ``size_bytes`` (the checkpoint's stored payload).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from lastgood.errors import UsageError
from lastgood.index.catalog import Catalog, use_index
from lastgood.index.store import OpenStore
from lastgood.readers import journal as jr
from lastgood.readers.base import Prunable, Recoverable, Status, capability, sql_statuses
from lastgood.retention.policy import COUNT_RULES, UNLIMITED, Policy

BUCKETS = {  # restic's buckers, on the checkpoint's time in UTC
    "hourly": "year(t) * 1000000 + month(t) * 10000 + day(t) * 100 + hour(t)",
    "daily": "year(t) * 10000 + month(t) * 100 + day(t)",
    "weekly": "isoyear(t) * 100 + week(t)",
    "monthly": "year(t) * 100 + month(t)",
    "yearly": "year(t)",
}
# a reason's rule, for the counts per rule ("needed by <id> (delta-ancestor)" -> "needed: delta-ancestor")
RULE_OF = r"""CASE WHEN starts_with(r, 'needed by ') THEN 'needed: ' || regexp_extract(r, '\(([^()]*)\)$', 1)
    WHEN starts_with(r, 'pinned') THEN 'pinned'
    WHEN regexp_matches(r, ' of [a-z-]+ act-') THEN 'journaled action'
    ELSE split_part(r, ' (', 1) END"""
ROW_FIELDS = ("run_id", "namespace", "checkpoint_id", "created_at", "step", "size_bytes", "status", "keep", "reasons")
KEPT_FIELDS = ("run_id", "namespace", "checkpoint_id", "created_at", "step", "size_bytes", "status", "reasons")
FORGOTTEN_FIELDS = ("run_id", "namespace", "checkpoint_id", "created_at", "step", "size_bytes", "status", "stale")


@dataclass
class PrunePlan:
    """What a prune would do: ``kept`` (Arrow, KEPT_FIELDS: with the rules that keep each) and
    ``forgotten`` (FORGOTTEN_FIELDS; ``stale``: its run goes whole); ``rows`` both (ROW_FIELDS);
    ``summary``/``per_run`` plain data; ``to_dict()`` is the dry-run JSON."""

    store_url: str
    store_id: int
    reader: str
    policy: Policy
    now: datetime
    archive: str
    kept: Any  # pa.Table: KEPT_FIELDS
    forgotten: Any  # pa.Table: FORGOTTEN_FIELDS (None: planned without details, a summary)
    summary: dict[str, Any]
    per_run: list[dict[str, Any]]
    warnings: list[str] = field(default_factory=list)
    policy_source: str = "options"  # or "saved" (the store's saved policy)

    @property
    def digest(self) -> str:
        ids = self.kept.column("checkpoint_id").to_pylist()
        return "sha256:" + hashlib.sha256("\n".join(sorted(ids)).encode()).hexdigest()

    @property
    def rows(self) -> Any:
        """Every checkpoint (ROW_FIELDS), kept and forgotten."""
        return self._query(f"SELECT {', '.join(ROW_FIELDS)} FROM plan_rows").to_arrow_table()

    def _query(self, sql: str) -> Any:
        import duckdb

        con = duckdb.connect()
        con.register("lg_kept", self.kept)
        if self.forgotten is None:
            raise UsageError("this plan was made as a summary (details=False): it lists no forgotten checkpoints")
        con.register("lg_forgotten", self.forgotten)
        con.execute("""CREATE VIEW plan_rows AS SELECT * EXCLUDE (reasons), TRUE AS keep, reasons FROM lg_kept
            UNION ALL SELECT * EXCLUDE (stale), FALSE AS keep, []::VARCHAR[] AS reasons FROM lg_forgotten""")
        return con.sql(sql)

    def forget_table(self, catalog: Catalog) -> Any:
        """journal.FORGET_COLUMNS of the checkpoints that go (what the backend archives), from the index."""
        if self.forgotten is None:
            raise UsageError("this plan was made as a summary (details=False): plan again to apply it")
        with catalog.connect() as con:
            cur = use_index(con.cursor(), catalog.path)  # a cursor of its own (DuckDB 2.0: no result pending)
            try:
                cur.register("lg_plan_going", self.forgotten)
                columns = ", ".join(f"CAST(c.{n} AS VARCHAR) AS {n}" if n == "metadata" else f"c.{n}"
                                    for n in jr.FORGET_COLUMNS)
                return cur.sql(f"""SELECT {columns} FROM lg_plan_going p JOIN checkpoints c
                    ON c.store_id = {int(self.store_id)} AND c.run_id = p.run_id AND c.namespace = p.namespace
                    AND c.checkpoint_id = p.checkpoint_id ORDER BY c.run_id, c.namespace, c.checkpoint_id""").to_arrow_table()
            finally:
                cur.close()

    def checkpoints(self, keep: bool | None = None, time_text: bool = False,
                    fields: tuple[str, ...] = ROW_FIELDS) -> list[dict[str, Any]]:
        """The rows as dicts of ``fields`` (``keep``: only kept, or only forgotten; ``time_text``:
        ``created_at`` as ISO 8601 UTC text, made by DuckDB — a hundred thousand datetimes cost Python
        a second)."""
        exprs = {name: name for name in fields}
        if time_text and "created_at" in exprs:
            exprs["created_at"] = "strftime(make_timestamp(epoch_us(created_at)), '%Y-%m-%dT%H:%M:%S.%fZ')"
        where = "" if keep is None else ("WHERE keep" if keep else "WHERE NOT keep")
        rows = self._query(f"SELECT {', '.join(exprs.values())} FROM plan_rows {where}").fetchall()
        return [dict(zip(fields, row)) for row in rows]

    def to_dict(self, listing: bool = True) -> dict[str, Any]:
        out: dict[str, Any] = {
            "action_id": None, "action": "prune", "run_id": None, "target": None, "previous_head": None,
            "new_head": None, "superseded": [], "dry_run": True, "store": self.store_url, "reader": self.reader,
            "policy": self.policy.to_dict(), "policy_text": self.policy.describe(), "policy_source": self.policy_source,
            "now": self.now, "archive": self.archive, "summary": self.summary, "runs": self.per_run,
            "warnings": self.warnings, "plan_digest": self.digest}
        if listing:
            fields = ("run_id", "namespace", "checkpoint_id", "created_at", "step", "size_bytes")
            out["forget"] = self.checkpoints(keep=False, time_text=True, fields=fields)
            out["keep"] = self.checkpoints(keep=True, time_text=True, fields=(*fields, "reasons"))
        return out


# ---- the capability ---------------------------------------------------------------------------


def retention_backend(store: OpenStore) -> jr.RetentionBackend:
    """The reader's retention capability, or a UsageError saying why not."""
    offer = capability(store.reader, Prunable)
    if offer is None:
        reason = store.reader.read_only_reason or "retention (prune) is not available for this store format"
        raise UsageError(f"the {store.reader.name} reader cannot prune: {reason}")
    return offer.retention()


def can_prune(store: OpenStore) -> bool:
    return capability(store.reader, Prunable) is not None


def journal_entries(store: OpenStore) -> list[dict[str, Any]]:
    writer = capability(store.reader, Recoverable)
    return writer.recovery().journal_entries() if writer is not None else []


def default_archive(catalog: Catalog, store: OpenStore, backend: jr.RetentionBackend) -> str:
    """Beside the store; for a store with no "beside" (a database server), under the index's home."""
    beside = backend.default_archive()
    if beside:
        return beside
    from lastgood.readers.common.urls import display_url

    public = display_url(store.url)
    name = "".join(c if c.isalnum() or c in "-_." else "-" for c in public.rsplit("/", 1)[-1]) or "store"
    digest = hashlib.sha256(public.encode()).hexdigest()[:12]
    home = Path(catalog.path).parent if catalog.path != ":memory:" else Path.cwd()
    return str(home / "archives" / f"{name}-{digest}.lastgood-archive")


# ---- planning -----------------------------------------------------------------------------------


def plan_prune(catalog: Catalog, store: OpenStore, policy: Policy | None = None, *, now: datetime | None = None,
               archive: str | None = None, details: bool = True) -> PrunePlan:
    """Keep or forget every checkpoint of ``store`` (the store's saved policy when ``policy`` is None).
    ``details`` False: the forgotten checkpoints are counted, not listed (a summary; it cannot be applied)."""
    backend = retention_backend(store)
    entries = journal_entries(store)
    source = "options"
    if policy is None or policy.empty:
        saved, _ = jr.saved_policy(entries)
        if policy is None and saved:
            policy, source = Policy.from_dict(saved), "saved"
    if policy is None or policy.empty:
        raise UsageError("no retention policy: give --keep-last/--keep-within/--keep-daily/… or "
                         "--keep-runs-within, or save one for this store with --save-policy")
    now = (now or datetime.now(UTC)).astimezone(UTC)
    with catalog.connect() as con:
        kept, forgotten, summary, per_run = _evaluate(con, catalog, store, backend, policy, now, entries, details)
        summary["incomplete"] = int(con.execute(f"""SELECT count(*) FROM checkpoints WHERE store_id = ?
            AND status = {sql_statuses(Status.INCOMPLETE)}""", [store.store_id]).fetchone()[0])
    plan = PrunePlan(store.display_url, store.store_id, store.reader.name, policy, now, archive or default_archive(catalog, store, backend),
                     kept, forgotten, summary, per_run, policy_source=source)
    if summary["incomplete"]:
        plan.warnings.append(f"{summary['incomplete']} save(s) in progress (incomplete) are never touched")
    plan.warnings.extend(_nothing_goes_hint(summary, policy))
    return plan


def _nothing_goes_hint(summary: dict[str, Any], policy: Policy) -> list[str]:
    """Why nothing goes when every checkpoint a rule let go is needed by a kept one (a session
    store: each state is the one before plus one item), and what does take something."""
    needed = {rule: n for rule, n in (summary.get("kept_by") or {}).items() if rule.startswith("needed")}
    if summary.get("forget") or not needed or (policy.runs_within is not None and not policy.runs_within.zero):
        return []
    rules = ", ".join(f"{rule} ({n:,})" for rule, n in needed.items())
    return [f"nothing goes: every checkpoint the rules let go is needed by a kept one — {rules}; whole runs can "
            "go: --keep-runs-within DURATION (the Storage page's \"Delete runs untouched for\")"]


def policy_keeps(times: list[tuple[str, datetime | None]], policy: Policy, now: datetime | None = None
                 ) -> list[list[str]]:
    """The policy's rules alone (nothing always kept, no dependencies) over ``(run, time)`` pairs:
    each one's reasons (empty: it would go), in the order given. The same SQL as :func:`plan_prune`
    (tests compare it with restic's own algorithm; the Storage page can preview a policy with it)."""
    import duckdb

    now = (now or datetime.now(UTC)).astimezone(UTC)
    con = duckdb.connect()
    try:
        _temp_table(con, "lg_input", {"run_id": ("VARCHAR", [r for r, _ in times]),
                                      "created_at": ("TIMESTAMPTZ", [t for _, t in times]),
                                      "position": ("BIGINT", list(range(len(times))))})
        con.execute(f"""CREATE TEMP TABLE lg_plan_base AS SELECT run_id, '' AS namespace,
            printf('%012d', position) AS checkpoint_id, created_at, 0::BIGINT AS step, 0::BIGINT AS size_bytes,
            {sql_statuses(Status.OK)} AS status, coalesce(make_timestamp(epoch_us(created_at)), TIMESTAMP '1970-01-01') AS t,
            row_number() OVER (PARTITION BY run_id ORDER BY created_at DESC NULLS LAST, position DESC) - 1 AS nr,
            count(*) OVER (PARTITION BY run_id) AS n, NULL::VARCHAR AS incr_parent FROM lg_input""")
        _temp_table(con, "lg_protected", {"run_id": ("VARCHAR", []), "namespace": ("VARCHAR", []),
                                          "checkpoint_id": ("VARCHAR", []), "reason": ("VARCHAR", []),
                                          "holds_run": ("BOOLEAN", [])})
        _empty_edges(con)
        _register_cutoffs(con, policy, now)
        _keep(con, policy, now)
        rows = con.execute("SELECT checkpoint_id, reasons FROM lg_plan_result").fetchall()
    finally:
        con.close()
    found = {cid: reasons for cid, reasons in rows}
    return [list(found[f"{i:012d}"]) for i in range(len(times))]


def _evaluate(con: Any, catalog: Catalog, store: OpenStore, backend: jr.RetentionBackend, policy: Policy,
              now: datetime, entries: list[dict[str, Any]], details: bool = True) -> Any:
    sid = store.store_id
    con.execute(f"""CREATE OR REPLACE TEMP TABLE lg_plan_base AS
        SELECT run_id, namespace, checkpoint_id, created_at, step, size_bytes, status,
               coalesce(make_timestamp(epoch_us(created_at)), TIMESTAMP '1970-01-01') AS t,
               row_number() OVER (PARTITION BY run_id, namespace ORDER BY created_at DESC NULLS LAST,
                                  step DESC NULLS LAST, checkpoint_id DESC) - 1 AS nr,
               count(*) OVER (PARTITION BY run_id, namespace ORDER BY created_at DESC NULLS LAST,
                                  step DESC NULLS LAST, checkpoint_id DESC
                              ROWS BETWEEN UNBOUNDED PRECEDING AND UNBOUNDED FOLLOWING) AS n,
               CASE WHEN kind = 'incremental' THEN parent_id END AS incr_parent
        FROM checkpoints WHERE store_id = $sid AND status <> {sql_statuses(Status.INCOMPLETE)}""", {"sid": sid})
    try:
        _register_protected(con, catalog, store, entries)
        _register_cutoffs(con, policy, now)
        _register_edges(con, backend, sid)
        _keep(con, policy, now)
        summary, per_run = _summaries(con)
        kept = con.sql(f"SELECT {', '.join(KEPT_FIELDS)} FROM lg_plan_result WHERE keep").to_arrow_table()
        forgotten = (con.sql(f"SELECT {', '.join(FORGOTTEN_FIELDS)} FROM lg_plan_result WHERE NOT keep").to_arrow_table()
                     if details else None)
        return kept, forgotten, summary, per_run
    finally:
        for name in ("lg_plan_base", "lg_plan_edges", "lg_protected", "lg_cutoffs", "lg_plan_result", "lg_plan_fresh"):
            con.execute(f"DROP TABLE IF EXISTS {name}")


def _temp_table(con: Any, name: str, columns: dict[str, tuple[str, list[Any]]]) -> None:
    """A temporary table from Python lists (DuckDB's unnest: no pyarrow conversion, which would
    import pandas, half a second of every dry run)."""
    select = ", ".join(f"unnest(${col}::{kind}[]) AS {col}" for col, (kind, _) in columns.items())
    con.execute(f"CREATE OR REPLACE TEMP TABLE {name} AS SELECT {select}",
                {col: values for col, (_, values) in columns.items()})


def _register_protected(con: Any, catalog: Catalog, store: OpenStore, entries: list[dict[str, Any]]) -> None:
    """Heads, last good, pins and journaled targets: (run, namespace, id, reason, run-protecting)."""
    from lastgood.integrity.health import last_good_by_run

    rows: list[tuple[str, str, str, str, bool]] = []
    for run, ns, cid in con.execute("SELECT run_id, namespace, checkpoint_id FROM heads WHERE store_id = ?",
                                    [store.store_id]).fetchall():
        rows.append((run, ns or "", cid, "head", False))
    for (run, ns), cid in last_good_by_run(catalog, store.store_id).items():
        rows.append((run, ns or "", cid, "last good", False))
    for (run, ns, cid), pin in jr.fold_pins(entries).items():
        rows.append((run, ns, cid, f"pinned ({pin.action_id}: {pin.reason})", True))
    for (run, ns, cid), why in jr.journal_targets(entries).items():
        rows.append((run, ns, cid, why, True))
    columns = [list(c) for c in zip(*rows)] if rows else [[], [], [], [], []]
    _temp_table(con, "lg_protected", {"run_id": ("VARCHAR", columns[0]), "namespace": ("VARCHAR", columns[1]),
                                      "checkpoint_id": ("VARCHAR", columns[2]), "reason": ("VARCHAR", columns[3]),
                                      "holds_run": ("BOOLEAN", columns[4])})


def _register_cutoffs(con: Any, policy: Policy, now: datetime) -> None:
    """Per run and namespace: --keep-within's cutoff (restic: relative to the newest checkpoint that
    is not in the future; none: every checkpoint is within)."""
    runs, namespaces, cutoffs = [], [], []
    if policy.within is not None and not policy.within.zero:
        naive_now = now.replace(tzinfo=None)
        latest = con.execute("""SELECT run_id, namespace, max(t) FILTER (WHERE t < $now) FROM lg_plan_base
            GROUP BY ALL""", {"now": naive_now}).fetchall()
        for run, ns, newest in latest:
            runs.append(run)
            namespaces.append(ns)
            cutoffs.append(policy.within.before(newest) if newest is not None else None)
    _temp_table(con, "lg_cutoffs", {"run_id": ("VARCHAR", runs), "namespace": ("VARCHAR", namespaces),
                                    "cutoff": ("TIMESTAMP", cutoffs)})


def _empty_edges(con: Any) -> None:
    con.execute(f"""CREATE OR REPLACE TEMP TABLE lg_plan_edges AS SELECT * FROM
        (SELECT {', '.join(f'NULL::VARCHAR AS {c}' for c in jr.EDGE_COLUMNS)}) WHERE false""")


def _register_edges(con: Any, backend: jr.RetentionBackend, store_id: int) -> None:
    """The reader's dependency edges (``lg_plan_edges``), for the rows it asks for (``dependency_rows``:
    ``{column: values}``, a row matching any; ``dependency_metadata`` the same for which rows carry
    their metadata). The common model's (an incremental checkpoint is a patch against its parent)
    are ``lg_plan_base.incr_parent``, read in the same scan as the rest."""
    where = f"store_id = {int(store_id)} AND status <> {sql_statuses(Status.INCOMPLETE)}"
    _empty_edges(con)
    rows_filter = _matching(con, getattr(backend, "dependency_rows", None), "lg_rows")
    meta_filter = _matching(con, getattr(backend, "dependency_metadata", None), "lg_meta")
    meta = "CAST(metadata AS VARCHAR)" if meta_filter == "TRUE" else f"CASE WHEN {meta_filter} THEN CAST(metadata AS VARCHAR) END"
    columns = ", ".join(f"{meta} AS metadata" if c == "metadata" else c for c in jr.DEPENDENCY_COLUMNS)
    rows = con.sql(f"SELECT {columns} FROM checkpoints WHERE {where} AND {rows_filter}").to_arrow_table()
    if rows.num_rows == 0:
        return
    edges = backend.dependencies(rows)
    con.register("lg_plan_edges_in", edges)
    try:
        con.execute(f"INSERT INTO lg_plan_edges SELECT {', '.join(jr.EDGE_COLUMNS)} FROM lg_plan_edges_in")
    finally:
        con.unregister("lg_plan_edges_in")


def _matching(con: Any, spec: Any, name: str) -> str:
    """SQL for "a row matches the reader's ``{column: values}``" (TRUE when it gives none)."""
    if not spec:
        return "TRUE"
    parts = []
    for i, (column, values) in enumerate(dict(spec).items()):
        con.execute(f"SET VARIABLE {name}_{i} = ?::VARCHAR[]", [[str(v) for v in values]])
        parts.append(f"list_contains(getvariable('{name}_{i}'), {_column(column)})")
    return "(" + " OR ".join(parts) + ")"


def _column(name: str) -> str:
    if name not in jr.DEPENDENCY_COLUMNS:
        raise ValueError(f"not a dependency column: {name!r}")
    return name


def _rule_columns(policy: Policy) -> tuple[list[str], list[str], list[str]]:
    """SQL for each count rule: the first-of-bucket flags, their running ranks, and the reasons."""
    firsts, ranks, reasons = [], [], []
    if policy.last:
        keep = "TRUE" if policy.last == UNLIMITED else f"nr < {policy.last}"
        reasons.append(f"CASE WHEN {keep} THEN 'last {_count(policy.last)}' END")
    for name in COUNT_RULES[1:]:
        count = getattr(policy, name)
        if not count:
            continue
        bucket = BUCKETS[name]
        firsts.append(f"(lag({bucket}) OVER w IS DISTINCT FROM {bucket}) AS first_{name}")
        ranks.append(f"sum(first_{name}::INTEGER) OVER (w ROWS UNBOUNDED PRECEDING) AS rank_{name}")
        within = "TRUE" if count == UNLIMITED else f"rank_{name} <= {count}"
        left = "TRUE" if count == UNLIMITED else f"rank_{name} < {count}"
        reasons.append(f"CASE WHEN first_{name} AND {within} THEN '{name} ({_count(count)})' "
                       f"WHEN nr = n - 1 AND NOT first_{name} AND {left} THEN 'oldest {name}' END")
    if policy.within is not None and not policy.within.zero:
        reasons.append(f"CASE WHEN c.run_id IS NULL OR c.cutoff IS NULL OR t > c.cutoff "
                       f"THEN 'within {policy.within} of the newest' END")
    return firsts, ranks, reasons


def _count(n: int) -> str:
    return "all" if n == UNLIMITED else str(n)


def _keep(con: Any, policy: Policy, now: datetime) -> None:
    """``lg_plan_result``: every row of ``lg_plan_base``, kept or not and why. The rules and what is
    always kept in one pass; then what kept checkpoints need (:data:`_FRESH_SQL`), walked only when
    some of it is not kept already, and marked kept with the least id that needs it."""
    con.execute(f"CREATE OR REPLACE TEMP TABLE lg_plan_result AS {_keep_sql(policy, now)}")
    con.execute(f"CREATE OR REPLACE TEMP TABLE lg_plan_fresh AS {_KEPT_KEYS} {_FRESH_SQL}")
    if con.execute("SELECT count(*) FROM lg_plan_fresh").fetchone()[0]:
        con.execute(f"""UPDATE lg_plan_result r
            SET keep = TRUE, reasons = ['needed by ' || n.by_id || ' (' || n.rule || ')']
            FROM ({_KEPT_KEYS} {_WALK_SQL}) n
            WHERE r.run_id = n.run_id AND r.namespace = n.namespace AND r.checkpoint_id = n.checkpoint_id""")


def _keep_sql(policy: Policy, now: datetime) -> str:
    firsts, ranks, reasons = _rule_columns(policy)
    if not policy.checkpoint_rules:
        reasons = [f"CASE WHEN stale THEN 'stale run held whole: something in it is pinned or journaled' "
                   f"ELSE 'run touched within {policy.runs_within}' END"]
    return f"""
WITH firsts AS (SELECT *{''.join(', ' + f for f in firsts)} FROM lg_plan_base
                WINDOW w AS (PARTITION BY run_id, namespace ORDER BY nr)),
ranked AS (SELECT *{''.join(', ' + r for r in ranks)} FROM firsts
           WINDOW w AS (PARTITION BY run_id, namespace ORDER BY nr)),
{_stale_sql(policy, now)},
ruled AS (SELECT x.*, list_filter([{', '.join(reasons)}], lambda v: v IS NOT NULL) AS policy_reasons
          FROM staled x{_cutoffs_join(policy)}),
prot AS (SELECT run_id, namespace, checkpoint_id, list(reason ORDER BY reason) AS always FROM lg_protected GROUP BY ALL),
kept0 AS (SELECT u.run_id, u.namespace, u.checkpoint_id, u.created_at, u.step, u.size_bytes, u.status, u.incr_parent,
                 u.stale AND NOT u.held AS stale,
                 CASE WHEN u.stale AND NOT u.held THEN []
                      ELSE list_concat(coalesce(p.always, []), u.policy_reasons) END AS reasons
          FROM ruled u LEFT JOIN prot p USING (run_id, namespace, checkpoint_id))
SELECT *, len(reasons) > 0 AS keep FROM kept0
"""


def _stale_sql(policy: Policy, now: datetime) -> str:
    """``staled``: each row with ``stale`` (its run goes whole under --keep-runs-within) and ``held``
    (something in its run is pinned or journaled); without that rule neither (no pass over the runs)."""
    if policy.runs_within is None or policy.runs_within.zero:
        return "staled AS (SELECT x.*, FALSE AS held, FALSE AS stale FROM ranked x)"
    cutoff = policy.runs_within.before(now)
    stale = "TRUE" if cutoff is None else f"NOT (r.last_t > TIMESTAMP '{cutoff.replace(tzinfo=None).isoformat()}')"
    return f"""runs AS (SELECT b.run_id, max(b.t) AS last_t,
                bool_or(p.holds_run) FILTER (WHERE p.holds_run) AS held
         FROM lg_plan_base b LEFT JOIN lg_protected p USING (run_id, namespace, checkpoint_id) GROUP BY 1),
staled AS (SELECT x.*, coalesce(r.held, FALSE) AS held, ({stale}) AS stale
           FROM ranked x JOIN runs r USING (run_id))"""


def _cutoffs_join(policy: Policy) -> str:
    """--keep-within's per-run cutoffs (``c``), joined only when the rule is given."""
    if policy.within is None or policy.within.zero:
        return ""
    return " LEFT JOIN lg_cutoffs c USING (run_id, namespace)"


# What kept checkpoints need, transitively: the incremental parent of each (``incr_parent``) and the
# reader's edges. The walk goes on only from checkpoints no rule keeps (a kept one's own needs are
# walked from it anyway), so it is skipped when every needed checkpoint is kept already; a needed
# checkpoint's reason names the least id that needs it, as a walk from every kept one would.
_KEPT_KEYS = "WITH kept_keys AS (SELECT run_id, namespace, checkpoint_id, incr_parent FROM lg_plan_result WHERE keep)"
_FRESH_SQL = """, seeds AS (SELECT run_id, namespace AS needs_namespace, incr_parent AS needs_id,
                        checkpoint_id AS by_id, 'incremental' AS rule FROM kept_keys WHERE incr_parent IS NOT NULL
                 UNION ALL
                 SELECT e.run_id, e.needs_namespace, e.needs_id, e.checkpoint_id, e.rule
                 FROM kept_keys k JOIN lg_plan_edges e ON e.run_id = k.run_id AND e.namespace = k.namespace
                      AND e.checkpoint_id = k.checkpoint_id)
SELECT s.* FROM seeds s ANTI JOIN kept_keys k ON k.run_id = s.run_id AND k.namespace = s.needs_namespace
     AND k.checkpoint_id = s.needs_id"""
_WALK_SQL = """, walk(run_id, namespace, checkpoint_id, by_id, rule) AS MATERIALIZED (
    WITH RECURSIVE walk(run_id, namespace, checkpoint_id, by_id, rule) AS (
        SELECT run_id, needs_namespace, needs_id, by_id, rule FROM lg_plan_fresh
        UNION
        SELECT x.run_id, x.needs_namespace, x.needs_id, x.checkpoint_id, x.rule
        FROM (SELECT b.run_id, b.namespace, b.checkpoint_id, b.namespace AS needs_namespace,
                     b.incr_parent AS needs_id, 'incremental' AS rule
              FROM walk w JOIN lg_plan_base b ON b.run_id = w.run_id AND b.namespace = w.namespace
                   AND b.checkpoint_id = w.checkpoint_id
              WHERE b.incr_parent IS NOT NULL
              UNION ALL
              SELECT e.run_id, e.namespace, e.checkpoint_id, e.needs_namespace, e.needs_id, e.rule
              FROM walk w JOIN lg_plan_edges e ON e.run_id = w.run_id AND e.namespace = w.namespace
                   AND e.checkpoint_id = w.checkpoint_id) x
        ANTI JOIN kept_keys k ON k.run_id = x.run_id AND k.namespace = x.needs_namespace
             AND k.checkpoint_id = x.needs_id)
    SELECT * FROM walk)
SELECT run_id, namespace, checkpoint_id, min(by_id) AS by_id, min(rule) AS rule FROM walk GROUP BY ALL"""


def _summaries(con: Any) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Counts per run (one pass over ``lg_plan_result``), totals from them, and counts per rule."""
    cur = con.execute("""SELECT run_id, namespace, count(*) AS checkpoints,
        count(*) FILTER (WHERE keep) AS keep, count(*) FILTER (WHERE NOT keep) AS forget,
        coalesce(sum(size_bytes), 0) AS bytes, coalesce(sum(size_bytes) FILTER (WHERE NOT keep), 0) AS bytes_forget,
        bool_or(stale) AS stale, bool_and(NOT keep) AS goes_whole, max(created_at) AS last_at
        FROM lg_plan_result GROUP BY 1, 2 ORDER BY bytes_forget DESC, run_id, namespace""")
    names = [d[0] for d in cur.description]
    per_run = [dict(zip(names, r)) for r in cur.fetchall()]
    by_rule = dict(con.execute(f"""SELECT {RULE_OF}, count(*) FROM
        (SELECT unnest(reasons) AS r FROM lg_plan_result WHERE keep) GROUP BY 1 ORDER BY 2 DESC""").fetchall())
    runs: dict[str, list[bool]] = {}
    for r in per_run:
        runs.setdefault(r["run_id"], []).append(bool(r["goes_whole"]))
    total_bytes = sum(int(r["bytes"]) for r in per_run)
    forget_bytes = sum(int(r["bytes_forget"]) for r in per_run)
    summary = {"checkpoints": sum(r["checkpoints"] for r in per_run), "keep": sum(r["keep"] for r in per_run),
               "forget": sum(r["forget"] for r in per_run), "bytes": total_bytes, "bytes_forget": forget_bytes,
               "bytes_keep": total_bytes - forget_bytes, "runs": len(runs),
               "runs_pruned": len({r["run_id"] for r in per_run if r["forget"]}),
               "runs_deleted_whole": sum(all(v) for v in runs.values()), "kept_by": by_rule, "incomplete": 0}
    return summary, per_run
