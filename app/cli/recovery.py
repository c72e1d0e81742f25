"""``lastgood restore | rollback | quarantine | undo | journal`` (lastgood.recovery).

Every write action plans first (``--dry-run`` stops there), needs ``--reason``,
asks for confirmation on a terminal unless ``--yes`` (and refuses without a
terminal), names the head it expects (``--expect-head``, default: the head at
planning time) and exits 1 on a conflict with nothing written.
"""

from __future__ import annotations

import argparse
from functools import partial
import sys
from typing import Any

from lastgood.config import Settings
from lastgood.errors import NothingToDo, UsageError

# lastgood.readers.journal.ACTIONS (a test keeps them equal; that module is not imported to parse: ~3 ms)
JOURNAL_ACTIONS = ("restore", "rollback", "quarantine", "release", "undo", "check-failed", "prune", "pin", "unpin",
                   "policy")
ACTION_FIELDS = ("action_id", "action", "run_id", "target", "previous_head", "new_head",
                 "superseded", "dry_run")


def register(sub: Any, common: argparse.ArgumentParser) -> dict[str, Any]:
    p = sub.add_parser("restore", parents=[common],
                       help="make a run resume from a checkpoint (adds a new head; deletes nothing)")
    p.add_argument("store")
    p.add_argument("checkpoint", nargs="?", help="checkpoint id or unique prefix")
    p.add_argument("--last-good", metavar="RUN", help="restore RUN's last good checkpoint instead")
    _write_options(p, force=True)
    p = sub.add_parser("rollback", parents=[common],
                       help="restore a checkpoint and mark everything after it superseded")
    p.add_argument("store")
    p.add_argument("run")
    p.add_argument("--to", required=True, metavar="CKPT", help="checkpoint id or unique prefix")
    _write_options(p, force=True)
    p = sub.add_parser("quarantine", parents=[common], help="mark a checkpoint bad by hand (or --release)")
    p.add_argument("store")
    p.add_argument("checkpoint")
    p.add_argument("--release", action="store_true", help="lift an earlier quarantine")
    _write_options(p, force=False)
    p = sub.add_parser("undo", parents=[common], help="undo an earlier action (journaled too)")
    p.add_argument("store")
    p.add_argument("action", help="action id (or unique prefix) from `lastgood journal`")
    _write_options(p, force=True)
    p = sub.add_parser("journal", parents=[common], help="the store's recovery journal; exit 1 if the chain is broken")
    p.add_argument("store")
    p.add_argument("--run", help="only this run")
    p.add_argument("--action", choices=JOURNAL_ACTIONS, help="only this action")
    return {"restore": cmd_restore, "rollback": cmd_rollback, "quarantine": cmd_quarantine,
            "undo": cmd_undo, "journal": cmd_journal}


def _write_options(p: argparse.ArgumentParser, force: bool) -> None:
    p.add_argument("--reason", help="why (required to apply; recorded in the journal)")
    p.add_argument("--dry-run", action="store_true", help="show the plan, write nothing")
    p.add_argument("--yes", "-y", action="store_true", help="do not ask for confirmation")
    p.add_argument("--expect-head", metavar="CKPT",
                   help="fail with a conflict unless the run's head is this checkpoint")
    if force:
        p.add_argument("--force", action="store_true", help="allow a quarantined or corrupt target")


def cmd_restore(args: argparse.Namespace, settings: Settings, fmt: str) -> int:
    from lastgood import recovery

    if bool(args.checkpoint) == bool(args.last_good):
        raise UsageError("name a checkpoint, or --last-good RUN (not both)")

    def plan(catalog: Any, store: Any) -> Any:
        if args.last_good:
            return recovery.plan_restore_last_good(catalog, store, args.last_good)
        return recovery.plan_restore(catalog, store, args.checkpoint, force=args.force)
    return _run(args, settings, fmt, plan)


def cmd_rollback(args: argparse.Namespace, settings: Settings, fmt: str) -> int:
    from lastgood import recovery

    return _run(args, settings, fmt,
                lambda c, s: recovery.plan_rollback(c, s, args.run, args.to, force=args.force))


def cmd_quarantine(args: argparse.Namespace, settings: Settings, fmt: str) -> int:
    from lastgood import recovery

    return _run(args, settings, fmt,
                lambda c, s: recovery.plan_quarantine(c, s, args.checkpoint, release=args.release))


def cmd_undo(args: argparse.Namespace, settings: Settings, fmt: str) -> int:
    from lastgood import recovery, retention
    from lastgood.stores import index_store, open_catalog

    catalog = open_catalog(settings)
    store = index_store(catalog, args.store, reader_name=args.reader).store
    if retention.can_prune(store) and retention.is_prune(store, args.action):  # a prune: its archive comes back
        from lastgood.cli.retention import run_undo_prune

        return run_undo_prune(args, settings, fmt, catalog, store)
    return _run(args, settings, fmt, lambda c, s: recovery.plan_undo(c, s, args.action, force=args.force),
                opened=(catalog, store))


def cmd_journal(args: argparse.Namespace, settings: Settings, fmt: str) -> int:
    from lastgood.cli import output
    from lastgood.index import queries
    from lastgood import recovery
    from lastgood.stores import index_store, open_catalog

    catalog = open_catalog(settings)
    store = index_store(catalog, args.store, reader_name=args.reader, check="none").store
    queries.require_run(catalog, store.store_id, args.run)
    report = recovery.journal_report(store, run_id=args.run, action=args.action, catalog=catalog)
    output.emit(report, fmt, render_journal)
    return 0 if report["chain_ok"] and not report["pending"] else 1


def _run(args: argparse.Namespace, settings: Settings, fmt: str, make_plan: Any,
         opened: tuple[Any, Any] | None = None) -> int:
    from lastgood.cli import output
    from lastgood import recovery
    from lastgood.stores import index_store, open_catalog

    if opened is None:
        catalog = open_catalog(settings)
        store = index_store(catalog, args.store, reader_name=args.reader).store
    else:
        catalog, store = opened
    try:
        plan = make_plan(catalog, store)
    except NothingToDo as done:  # idempotent: the run is already where it was asked to be
        output.emit(_unchanged(args, done), fmt, render_unchanged)
        return 0
    expected = _full_id(catalog, store, args.expect_head)
    if args.dry_run:
        if expected is not None and expected != plan.expected_head:
            plan.warnings.append(f"--expect-head {args.expect_head} is not the run's head "
                                 f"({plan.expected_head}): applying would fail with a conflict")
        output.emit(plan.to_dict(), fmt, render_plan)
        return 0
    if not args.reason or not args.reason.strip():
        raise UsageError("a reason is required: --reason TEXT")
    if not args.yes:
        _confirm(plan, fmt)
    result = recovery.apply_plan(catalog, store, plan, reason=args.reason,
                                 operator=settings.operator, expected_head=expected)
    output.emit(result.to_dict(), fmt, partial(render_result, store=_shell_word(store.display_url)))
    return 0 if not result.check or result.check["ok"] else 1


def _full_id(catalog: Any, store: Any, ref: str | None) -> str | None:
    """--expect-head as a full id (a unique prefix works, like git)."""
    from lastgood.index import queries
    from lastgood.errors import CheckpointNotFound

    if not ref:
        return None
    try:
        return queries.resolve_checkpoint(catalog, store.store_id, ref).checkpoint_id
    except CheckpointNotFound:
        return ref


def _confirm(plan: Any, fmt: str) -> None:
    if not sys.stdin.isatty():
        raise UsageError("not a terminal: pass --yes to apply without confirmation "
                         "(or --dry-run to preview)")
    sys.stderr.write(render_plan(plan.to_dict()) + "\n")
    sys.stderr.write("Apply? [y/N] ")
    sys.stderr.flush()
    if sys.stdin.readline().strip().lower() not in ("y", "yes"):
        raise UsageError("cancelled: nothing was written")


# ---- rendering ----------------------------------------------------------------------


def render_plan(plan: dict[str, Any]) -> str:
    lines = [f"{plan['action']} on run {plan['run_id']}"
             + (f" [{plan['namespace']}]" if plan.get("namespace") else "") + " (dry run)",
             f"  current head:  {plan['previous_head']}",
             f"  resumes from:  {plan['resumes_from']}"]
    if plan.get("undo_of"):
        lines.append(f"  undoes:        {plan['undo_of']}")
    marks = {k: v for k, v in (plan.get("marks") or {}).items() if v}
    for kind, ids in marks.items():
        lines.append(f"  {kind + ':':14} {len(ids)} checkpoint(s): {', '.join(ids[:5])}"
                     + (f" …and {len(ids) - 5} more" if len(ids) > 5 else ""))
    diff = plan.get("diff")
    if diff:
        s = diff.get("summary") or {}
        lines.append(f"  state change:  +{s.get('added', 0)} -{s.get('removed', 0)} ~{s.get('changed', 0)}")
        changes = diff.get("changes") or []
        for change in changes[:10]:
            lines.append(f"    {change.get('op'):6} {change.get('path')}")
        listed = sum(int(s.get(k, 0) or 0) for k in ("added", "removed", "changed")) or len(changes)
        if listed > min(len(changes), 10):
            lines.append(f"    …and {listed - min(len(changes), 10)} more (--format json lists them)")
    operations = plan.get("operations") or []
    if operations:
        lines.append(f"  files:         {len(operations)} operation(s), each undone by `lastgood undo`")
        lines.extend(f"    {op}" for op in operations[:15])
        if len(operations) > 15:
            lines.append(f"    …and {len(operations) - 15} more (--format json lists them)")
    effects = plan.get("side_effects") or []
    if effects:
        lines.append(f"  side effects after the target (NOT undone by a restore): {len(effects)}")
        for effect in effects[:15]:
            tool = f" {effect['tool']}" if effect.get("tool") else ""
            lines.append(f"    {effect['kind']}{tool} @ {str(effect['checkpoint_id'])[:13]}: "
                         f"{str(effect.get('detail') or '')[:80]}")
        if len(effects) > 15:
            lines.append(f"    …and {len(effects) - 15} more (--format json lists them)")
    for warning in plan.get("warnings") or []:
        lines.append(f"  warning: {warning}")
    return "\n".join(lines)


def _unchanged(args: argparse.Namespace, done: NothingToDo) -> dict[str, Any]:
    return {"action": args.command, "run_id": done.run_id, "namespace": done.namespace,
            "target": done.checkpoint_id, "changed": False, "dry_run": bool(args.dry_run),
            "message": str(done)}


def render_unchanged(result: dict[str, Any]) -> str:
    return (f"{result['action']} on run {result['run_id']}"
            + (f" [{result['namespace']}]" if result.get("namespace") else "")
            + f": nothing to do — {result['target']} is already its head (nothing written)")


def _shell_word(text: str) -> str:
    import shlex

    return shlex.quote(text)


def render_result(result: dict[str, Any], store: str = "STORE") -> str:
    lines = [f"{result['action']} {result['action_id']}: run {result['run_id']} "
             f"head {result['previous_head']} → {result['new_head']}"]
    if result.get("superseded"):
        lines.append(f"  superseded: {len(result['superseded'])} checkpoint(s)")
    check = result.get("check")
    if check:
        lines.append(f"  check: {'ok' if check['ok'] else 'FAILED'} — {check['message']}")
    lines.append(f"  undo with: lastgood undo {store} {result['action_id']} --reason TEXT")
    return "\n".join(lines)


def render_journal(report: dict[str, Any]) -> str:
    lines = [f"journal: {report['entries']} entries, chain "
             + ("ok" if report["chain_ok"] else "BROKEN")]
    lines += [f"  ! {p}" for p in report.get("problems") or []]
    for e in report["actions"]:
        if not e.get("id"):
            lines.append("     ? an entry that cannot be read (see the problems above)")
            continue
        undo = f" (undoes {e['undo_of']})" if e.get("undo_of") else ""
        lines.append(f"  {str(e.get('seq')):>4} {e.get('time')} {e.get('id')} {str(e.get('action')):10} "
                     f"{_what(e)} by {e.get('operator')}: {e.get('reason')}{undo}")
    for p in report.get("pending") or []:
        lines.append("  " + _pending_line(p))
    return "\n".join(lines)


def _what(entry: dict[str, Any]) -> str:
    """What an entry changed, in a few words (retention's entries name no head)."""
    note = entry.get("note") if isinstance(entry.get("note"), dict) else {}
    if entry.get("action") == "prune":
        return f"{note.get('count')} checkpoint(s) archived to {note.get('archive')}"
    if note.get("retention"):
        return f"pruned checkpoints restored from {note.get('archive')}"
    if entry.get("action") in ("pin", "unpin"):
        return f"{entry.get('target')} of {entry.get('run_id')}"
    if entry.get("action") == "policy":
        return f"retention policy {note.get('policy') or 'cleared'}"
    return f"{entry.get('run_id')} {entry.get('previous_head')} → {entry.get('new_head')}"


def _pending_line(lock: dict[str, Any]) -> str:
    """An action begun and not completed (its intent is still in the store)."""
    entry = lock.get("entry") if isinstance(lock.get("entry"), dict) else {}
    what = f"{entry.get('action')} of run {entry.get('run_id')} to {entry.get('new_head')}" if entry else "an action"
    if lock.get("interrupted"):
        return (f"! interrupted: {lock.get('action_id')} ({what}) moved the head but its journal entry could not be "
                f"written ({lock.get('cause')}); the next action on this store completes it")
    return f"! in progress or interrupted: {lock.get('action_id')} ({what}); the next action completes or drops it"
