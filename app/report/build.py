"""``build_report``: one self-contained HTML file for an incident ticket.

What it holds: the store's summary; for a run, its timeline (inline SVG: checkpoints by status on a
time axis, events marked, head and last good), its health, checkpoints and events; the findings;
a diff as the Diff page shows it; the journal of actions taken (lastgood.recovery.journal_report).
Everything is redacted as the pages redact it and escaped (lastgood.report.html); the file loads
nothing (no script, no font, no CDN: its Content Security Policy allows nothing but inline styles).
A table of more than 1,000 rows comes in closed pages (lastgood.report.html.paged): the file opens fast.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from lastgood.errors import CheckpointNotFound, LastgoodError, UsageError
from lastgood.index import queries
from lastgood.index.catalog import Catalog
from lastgood.index.store import OpenStore
from lastgood.integrity.health import run_health
from lastgood.integrity.verify import store_findings
from lastgood.report import html as h
from lastgood.report.diff import DiffView, diff_section
from lastgood.report.timeline import timeline_svg

MAX_CHECKPOINT_ROWS = 500
MAX_EVENTS = 5_000
MAX_FINDINGS = 2_000
MAX_RUNS = 500
HEALTH_FIELDS = ("run_id", "namespace", "agent", "checkpoints", "ok", "corrupt", "incomplete", "quarantined",
                 "superseded", "unverified", "errors", "warnings", "last_good", "head", "health")


def build_report(catalog: Catalog, store: OpenStore, run: str | None = None,
                 diff: tuple[str, str] | None = None, findings: bool = True) -> str:
    """The report of ``store`` as one HTML document: its summary; ``run``'s timeline, checkpoints
    and events (default: B's run when ``diff`` is given; without either, every run's health);
    the findings (``findings``: of the run, or of the store); the diff from checkpoint ``diff[0]``
    to ``diff[1]``; the journal of actions (of the run, or of the store). CheckpointNotFound for
    an unknown run or checkpoint."""
    view = _diff_view(catalog, store, diff) if diff else None
    run_id = _resolve_run(catalog, store.store_id, run) if run else None
    if run_id is None and view is not None:
        run_id = _record_run(catalog, store, diff[1])
    sections = [("summary", "Summary", _summary(catalog, store, run_id))]
    if run_id is not None:
        sections.append(("timeline", "Timeline", _timeline(catalog, store, run_id)))
    if findings:
        sections.append(("findings", "Findings", _findings(catalog, store, run_id)))
    if view is not None:
        sections.append(("diff", "Diff", diff_section(view)))
    sections.append(("journal", "Actions taken", _journal(catalog, store, run_id)))
    title = "Lastgood report" + (f" — run {_plain_id(run_id)}" if run_id else "")
    return h.page(title, _meta(store), sections, _footer())


# ---- what is reported on ----------------------------------------------------------------------

def _resolve_run(catalog: Catalog, store_id: int, run: str) -> str:
    """The run named ``run`` (an id, or the ``key:…`` handle the pages show for a secret-shaped one)."""
    with catalog.connect() as con:
        rows = con.execute(f"""SELECT DISTINCT run_id FROM checkpoints WHERE store_id = ?
            AND (run_id = ? OR {_RUN_HANDLE} = ?) LIMIT 2""",
                           [store_id, run, run[len(queries.HANDLE_PREFIX):] if queries.is_handle(run) else None]
                           ).fetchall()
    if not rows:
        raise CheckpointNotFound(f"no run {run!r} in this store (`lastgood runs STORE` lists them)")
    return str(rows[0][0])


_RUN_HANDLE = f"substr(sha256(run_id), 1, {queries.HANDLE_LENGTH})"


def _record_run(catalog: Catalog, store: OpenStore, ref: str) -> str:
    from lastgood.investigate.history import resolve_ref

    return resolve_ref(catalog, store.store_id, ref).run_id


def _plain_id(run_id: str) -> str:
    from lastgood.redact import redact_text

    return run_id if redact_text(run_id) == run_id else queries.run_handle(run_id)


def _meta(store: OpenStore) -> str:
    now = datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S")
    return (f"store <code>{h.shown(store.display_url)}</code> ({h.esc(store.reader.name)}) · "
            f"generated {now} UTC by Lastgood {h.esc(_version())}")


def _version() -> str:
    from importlib import metadata

    try:
        return metadata.version("lastgood")
    except metadata.PackageNotFoundError:
        return "(development)"


def _footer() -> str:
    return ("Made by <code>lastgood report</code>. Self-contained: no script, nothing loaded from the network. "
            "Secrets are redacted as on the dashboard; a secret-shaped id is shown as its handle "
            "(<code>key:…</code>), which <code>lastgood show STORE key:…</code> opens.")


# ---- sections ------------------------------------------------------------------------------------

def _summary(catalog: Catalog, store: OpenStore, run_id: str | None) -> str:
    o = queries.overview(catalog, store.store_id)
    statuses = ", ".join(f"{k} {v:,}" for k, v in o.by_status.items()) or "none"
    parts = [h.cards([("checkpoints", f"{o.checkpoints:,}"), ("runs", f"{o.runs:,}"), ("agents", f"{o.agents:,}"),
                      ("errors", f"{o.findings.get('error', 0):,}"), ("warnings", f"{o.findings.get('warning', 0):,}")]),
             f"<p>Statuses: {h.esc(statuses)}. Checkpoints from {h.utc(o.first_at)} to {h.utc(o.last_at)} UTC.</p>"]
    rows = run_health(catalog, store.store_id, run_id=run_id)
    heading = "The run" if run_id else "Runs"
    shown = rows[:MAX_RUNS]
    parts.append(f"<h3>{heading}</h3>" + h.table(
        ["run", "namespace", "agent", "checkpoints", "ok", "corrupt", "incomplete", "quarantined", "superseded",
         "unverified", "errors", "warnings", "last good", "head", "health"],
        [_health_row(r) for r in shown], numeric=tuple(range(3, 12)), label="runs"))
    if len(rows) > len(shown):
        parts.append(h.note(f"{len(rows) - len(shown):,} more runs: `lastgood runs STORE` lists them all."))
    return "".join(parts)


def _health_row(r: dict[str, Any]) -> list[str]:
    ckpt = lambda cid: f'<span class="id">{h.shown_checkpoint(r["run_id"], r["namespace"], cid)}</span>'  # noqa: E731
    return [h.shown_id(r["run_id"]), h.shown_id(r["namespace"]), h.shown(r["agent"]),
            *(f"{int(r[k] or 0):,}" for k in HEALTH_FIELDS[3:12]),
            ckpt(r["last_good"]) if r["last_good"] else "(none yet)", ckpt(r["head"]) if r["head"] else "-",
            h.badge(str(r["health"]), h.HEALTH_COLORS.get(str(r["health"])))]


def _timeline(catalog: Catalog, store: OpenStore, run_id: str) -> str:
    checkpoints = _run_rows(catalog, store.store_id, run_id)
    events = _run_events(catalog, store.store_id, run_id)
    health = run_health(catalog, store.store_id, run_id=run_id)
    root = next((r for r in health if not r["namespace"]), health[0] if health else {})
    svg, drawn = timeline_svg(checkpoints, events, root.get("head"), root.get("last_good"))
    caption = (f"{len(checkpoints):,} checkpoint(s), {len(events):,} event(s)"
               + (f"; {drawn:,} checkpoints drawn (every one not ok, the head and the last good one)"
                  if drawn < len(checkpoints) else "") + ". Hover a mark for its details.")
    return (svg + f'<p class="muted">{h.esc(caption)}</p>' + _checkpoint_table(checkpoints)
            + _event_table(events))


def _run_rows(catalog: Catalog, store_id: int, run_id: str) -> list[dict[str, Any]]:
    return _rows(catalog, """SELECT run_id, namespace, checkpoint_id, parent_id, step, created_at, trigger, kind,
        status, status_reason, size_bytes, agent, verified FROM checkpoints WHERE store_id = ? AND run_id = ?
        ORDER BY created_at NULLS FIRST, step, checkpoint_id""", [store_id, run_id])


def _run_events(catalog: Catalog, store_id: int, run_id: str) -> list[dict[str, Any]]:
    return _rows(catalog, f"""SELECT created_at, namespace, checkpoint_id, kind, channel, task_id, message
        FROM events WHERE store_id = ? AND run_id = ? ORDER BY created_at NULLS LAST LIMIT {MAX_EVENTS}""",
                 [store_id, run_id])


def _rows(catalog: Catalog, sql: str, params: list[Any]) -> list[dict[str, Any]]:
    with catalog.connect() as con:
        cur = con.execute(sql, params)
        names = [d[0] for d in cur.description]
        return [dict(zip(names, row)) for row in cur.fetchall()]


def _checkpoint_table(rows: list[dict[str, Any]]) -> str:
    from lastgood.cli.output import human_bytes
    from lastgood.readers.base import Status

    shown = rows
    if len(rows) > MAX_CHECKPOINT_ROWS:  # every one that is not ok, then the newest
        bad = [r for r in rows if r["status"] != Status.OK]
        newest = [r for r in rows[-MAX_CHECKPOINT_ROWS:] if r["status"] == Status.OK]
        shown = sorted(bad + newest, key=rows.index)[-MAX_CHECKPOINT_ROWS:] if len(bad) < MAX_CHECKPOINT_ROWS \
            else bad[:MAX_CHECKPOINT_ROWS]
    body = h.table(["step", "saved (UTC)", "trigger", "kind", "status", "reason", "size", "checkpoint"],
                   [[h.esc(r["step"]), h.utc(r["created_at"]), h.shown(r["trigger"]), h.shown(r["kind"]),
                     h.status_badge(r["status"]), h.shown(r["status_reason"]) if r["status_reason"] else "",
                     h.esc(human_bytes(r["size_bytes"])),
                     f'<span class="id">{h.shown_checkpoint(r["run_id"], r["namespace"], r["checkpoint_id"])}</span>']
                    for r in shown], numeric=(0, 6), text=(5,))
    more = f" ({len(shown):,} of {len(rows):,} shown: every one not ok, then the newest)" if len(shown) < len(rows) else ""
    return f"<details><summary>Checkpoints{h.esc(more)}</summary>{body}</details>"


def _event_table(events: list[dict[str, Any]]) -> str:
    if not events:
        return '<p class="muted">No events recorded for this run.</p>'
    body = h.table(["time (UTC)", "kind", "channel", "checkpoint", "message"],
                   [[h.utc(e["created_at"]), h.shown(e["kind"]), h.shown(e["channel"]),
                     f'<span class="id">{h.shown(e["checkpoint_id"])}</span>', h.shown(e["message"])]
                    for e in events], text=(4,), label="events")
    return f"<details open><summary>Events ({len(events):,})</summary>{body}</details>"


def _findings(catalog: Catalog, store: OpenStore, run_id: str | None) -> str:
    found = store_findings(catalog, store.store_id)
    if run_id is not None:
        found = [f for f in found if f["run_id"] == run_id]
    if not found:
        return h.note("No findings" + (" for this run." if run_id else "."), "good")
    errors = sum(1 for f in found if f["severity"] == "error")
    shown = found[:MAX_FINDINGS]
    body = h.table(["severity", "check", "run", "checkpoint", "message", "depth"],
                   [[h.badge(f["severity"], h.SEVERITY_COLORS.get(f["severity"])), h.esc(f["check"]),
                     h.shown_id(f["run_id"]),
                     f'<span class="id">{h.shown_checkpoint(f["run_id"], f["namespace"], f["checkpoint_id"])}</span>',
                     h.shown(f["message"]), h.esc(f["depth"])] for f in shown], text=(4,), label="findings")
    more = h.note(f"{len(found) - len(shown):,} more: `lastgood verify STORE --format json`.") \
        if len(found) > len(shown) else ""
    return f"<p>{len(found):,} finding(s), {errors:,} error(s).</p>{body}{more}"


def _journal(catalog: Catalog, store: OpenStore, run_id: str | None) -> str:
    from lastgood.recovery import journal_report

    try:
        report = journal_report(store, run_id=run_id, catalog=catalog)
    except UsageError as exc:  # a format without write actions keeps no journal
        return h.note(f"No journal: {h.shown(str(exc))}")
    except LastgoodError as exc:
        return h.note(f"The journal cannot be read: {h.shown(str(exc))}", "bad")
    chain = (h.note("The journal's hash chain holds.", "good") if report["chain_ok"]
             else h.note("The journal's hash chain is broken: " + "; ".join(h.shown(p) for p in report["problems"]),
                         "bad"))
    actions = report["actions"]
    if not actions:
        return chain + '<p class="muted">No action was taken' + (" on this run." if run_id else ".") + "</p>"
    body = h.table(["time (UTC)", "operator", "action", "run", "target", "head before → after", "reason", "id"],
                   [[h.shown(a.get("time")), h.shown(a.get("operator")), h.esc(a.get("action") or "-"),
                     h.shown_id(a.get("run_id")), f'<span class="id">{h.shown(a.get("target"))}</span>',
                     f'<span class="id">{h.shown(a.get("previous_head"))} → {h.shown(a.get("new_head"))}</span>',
                     h.shown(a.get("reason")), f'<span class="id">{h.shown(a.get("id"))}</span>'] for a in actions],
                   text=(6,), label="actions")
    pending = (h.note(f"{len(report['pending'])} action(s) were interrupted before they completed: the next action "
                      "resolves them.", "bad") if report.get("pending") else "")
    return chain + body + pending


def _diff_view(catalog: Catalog, store: OpenStore, refs: tuple[str, str]) -> DiffView:
    """The diff of two checkpoints (``diff_records``: redacted), and where its conversation is.

    The conversation's path comes from the diff's own message changes; state B is decoded again
    only when the diff alone cannot say it or a message was edited or moved (the row then shows
    B's message, redacted on its own: the whole state never is, ~1 s for 10,000 messages)."""
    from lastgood.investigate.history import diff_records, resolve_ref

    record_a = resolve_ref(catalog, store.store_id, refs[0])
    record_b = resolve_ref(catalog, store.store_id, refs[1])
    result, label_a, label_b = diff_records(store, record_a, store, record_b)
    path = _messages_path(result)
    prefix = "/" + "/".join(_pointer_token(t) for t in path) + "/" if path else None
    needs_b = path is None or any(c.op == "move" or (c.path.startswith(prefix) and "/" in c.path[len(prefix):])
                                  for c in result.changes)
    state_b, errors = None, (None, None)
    if needs_b and result.changes:
        state_b, error, path = _state_b(store, record_b, path)
        errors = (None, error)
    return DiffView(result.to_dict(label_a, label_b), state_b, path or [], errors)


def _messages_path(result: Any) -> list[str] | None:
    """The path of the list whose items the diff adds or removes as chat messages (the most common)."""
    from collections import Counter

    from lastgood.investigate.diff import iter_message_changes

    parents = Counter(c.path.rsplit("/", 1)[0] for c in iter_message_changes(result))
    if not parents:
        return None
    pointer = parents.most_common(1)[0][0]
    return [t.replace("~1", "/").replace("~0", "~") for t in pointer.split("/")[1:]]


def _pointer_token(token: str) -> str:
    return token.replace("~", "~0").replace("/", "~1")


def _state_b(store: OpenStore, record: Any, path: list[str] | None) -> tuple[Any, str | None, list[str] | None]:
    """(B's conversation as a state holding only it, redacted message by message; an error; its path)."""
    from lastgood.errors import DecodeError, ReaderError
    from lastgood.investigate.history import load_state
    from lastgood.investigate.stateview import find_conversation, get_path, message_normalizer
    from lastgood.redact import redact_text

    try:
        state = load_state(store, record)
    except (DecodeError, ReaderError) as exc:
        return None, redact_text(str(exc)), path
    if path is None:
        path, _ = find_conversation(state, normalize=message_normalizer(store.reader))
        path = path or None
    try:
        messages = get_path(state, path) if path else None
    except (KeyError, IndexError, TypeError):
        messages = None
    if not isinstance(messages, list):
        return None, None, path
    holder: Any = _LazyRedacted(messages)
    for key in reversed(path):
        holder = {key: holder}
    return holder, None, path


class _LazyRedacted(list):  # type: ignore[type-arg]
    """A list whose items are redacted when read (only the messages a report shows)."""

    def __getitem__(self, index: Any) -> Any:
        from lastgood.redact import redact

        return redact(super().__getitem__(index))
