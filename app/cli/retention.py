"""``lastgood storage | prune | pin | unpin`` (lastgood.retention); the undo of a prune through
``lastgood undo`` (lastgood.cli.recovery hands it here).

``prune`` plans first (``--dry-run`` stops there: exactly what goes, what is kept and why, bytes),
needs ``--reason``, asks for confirmation on a terminal unless ``--yes`` (and refuses without a
terminal), archives before it deletes, and exits 1 on a conflict with nothing deleted.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from lastgood.config import Settings
from lastgood.errors import UsageError

KEEP_COUNTS = ("last", "hourly", "daily", "weekly", "monthly", "yearly")
LISTED = 20


def register(sub: Any, common: argparse.ArgumentParser) -> dict[str, Any]:
    p = sub.add_parser("storage", parents=[common], help="what the store is costing: bytes per run, table, channel; growth")
    p.add_argument("store")
    p.add_argument("--stale-after", default="30d", metavar="DURATION",
                   help="runs with no checkpoint for this long are stale (restic durations: 30d, 12h, 1y2m)")
    p.add_argument("--top", type=int, default=20, help="how many of the largest runs and checkpoints")
    p.add_argument("--window", type=int, default=7, metavar="DAYS", help="days the growth rate is measured over")
    p.add_argument("--no-channels", action="store_true", help="skip the per-channel breakdown (samples blobs)")
    p = sub.add_parser("prune", parents=[common],
                       help="forget checkpoints by a restic-style policy (archived first; `lastgood undo` brings them back)")
    p.add_argument("store")
    for name in KEEP_COUNTS:
        p.add_argument(f"--keep-{name}", metavar="N", help=f"keep the newest {'N' if name == 'last' else f'of N {name} buckets'}"
                       " per run (a number or 'unlimited')")
    p.add_argument("--keep-within", metavar="DURATION", help="keep checkpoints within DURATION of a run's newest")
    p.add_argument("--keep-runs-within", metavar="DURATION",
                   help="delete whole runs with no checkpoint for longer than DURATION (head and last good too)")
    p.add_argument("--archive", metavar="URL", help="where pruned checkpoints go, any fsspec URL (a Lastgood archive store; "
                                                    "default: beside the store, <store>.lastgood-archive; a training "
                                                    "folder: its own .lastgood/archive/, by rename — give a URL to "
                                                    "move them off the disk)")
    p.add_argument("--reason", help="why (required to apply; recorded in the journal)")
    p.add_argument("--dry-run", action="store_true", help="show what would go and why, write nothing")
    p.add_argument("--yes", "-y", action="store_true", help="do not ask for confirmation")
    p.add_argument("--vacuum", action="store_true",
                   help="give the space back to the filesystem where that needs a lock (SQLite VACUUM, Postgres VACUUM)")
    p.add_argument("--save-policy", action="store_true", help="save these --keep-* options as the store's policy "
                                                               "(journaled; used when none are given)")
    p.add_argument("--summary", action="store_true", help="JSON: leave out the per-checkpoint lists")
    for name in ("pin", "unpin"):
        p = sub.add_parser(name, parents=[common], help=f"{name} a checkpoint: pinned ones are kept by every prune"
                           + (" (without CKPT: list the pins)" if name == "pin" else ""))
        p.add_argument("store")
        p.add_argument("checkpoint", nargs="?" if name == "pin" else None, help="checkpoint id or unique prefix")
        p.add_argument("--reason", help="why (required; recorded in the journal)")
    return {"storage": cmd_storage, "prune": cmd_prune, "pin": cmd_pin, "unpin": cmd_unpin}


def _open(args: argparse.Namespace, settings: Settings, check: str = "auto") -> tuple[Any, Any]:
    from lastgood.stores import index_store, open_catalog

    catalog = open_catalog(settings)
    return catalog, index_store(catalog, args.store, reader_name=args.reader, check=check).store


def cmd_storage(args: argparse.Namespace, settings: Settings, fmt: str) -> int:
    from lastgood.cli import output
    from lastgood import retention

    catalog, store = _open(args, settings, check="none")
    report = retention.storage_report(catalog, store, stale_after=args.stale_after, top=args.top,
                                      window_days=args.window, channels=not args.no_channels)
    output.emit(report.to_dict(), fmt, render_storage)
    return 0


def _policy(args: argparse.Namespace) -> Any:
    from lastgood import retention

    values = {name: getattr(args, f"keep_{name}") for name in KEEP_COUNTS}
    values.update(within=args.keep_within, runs_within=args.keep_runs_within)
    policy = retention.policy_from_options(**values)
    return None if policy.empty else policy


def cmd_prune(args: argparse.Namespace, settings: Settings, fmt: str) -> int:
    from lastgood.cli import output
    from lastgood import retention

    policy = _policy(args)
    if args.save_policy and policy is None:
        raise UsageError("--save-policy needs --keep-… options to save")
    catalog, store = _open(args, settings)
    if policy is None and args.vacuum and retention.saved_policy(store) is None:
        return _vacuum_only(args, catalog, store, fmt)
    listing = fmt == "json" and not args.summary
    plan = retention.plan_prune(catalog, store, policy, archive=args.archive, details=listing or not args.dry_run)
    if args.dry_run:
        data = plan.to_dict(listing=listing)
        data["save_policy"] = bool(args.save_policy)
        _emit(data, fmt, render_plan)
        return 0
    if not args.reason or not args.reason.strip():
        raise UsageError("a reason is required: --reason TEXT")
    if not args.yes:
        _confirm(render_plan(plan.to_dict(listing=False)))
    if args.save_policy:
        retention.save_policy(store, plan.policy, reason=args.reason, operator=settings.operator)
    result = retention.apply_prune(catalog, store, plan, reason=args.reason, operator=settings.operator,
                                   vacuum=args.vacuum, progress=_progress(fmt))
    output.emit(result.to_dict(), fmt, lambda r: render_result(r, store.display_url))
    return 0


def _vacuum_only(args: argparse.Namespace, catalog: Any, store: Any, fmt: str) -> int:
    from lastgood.cli import output
    from lastgood import retention

    if args.dry_run:
        output.emit({"action": "vacuum", "dry_run": True, "footprint": retention.storage.footprint(store)}, fmt,
                    lambda r: "vacuum (dry run): nothing is pruned; VACUUM would run")
        return 0
    space = retention.retention_backend(store).reclaim(True)
    output.emit({"action": "vacuum", "dry_run": False, "space": space}, fmt,
                lambda r: render_space(r["space"]))
    return 0


def cmd_pin(args: argparse.Namespace, settings: Settings, fmt: str) -> int:
    from lastgood.cli import output
    from lastgood import retention

    catalog, store = _open(args, settings, check="none")
    if not args.checkpoint:
        output.emit({"pins": retention.pins(store)}, fmt, render_pins)
        return 0
    result = retention.pin(catalog, store, args.checkpoint, reason=args.reason or "", operator=settings.operator)
    output.emit(result, fmt, render_pin)
    return 0


def cmd_unpin(args: argparse.Namespace, settings: Settings, fmt: str) -> int:
    from lastgood.cli import output
    from lastgood import retention

    catalog, store = _open(args, settings, check="none")
    result = retention.pin(catalog, store, args.checkpoint, reason=args.reason or "", operator=settings.operator,
                           unpin=True)
    output.emit(result, fmt, render_pin)
    return 0


def run_undo_prune(args: argparse.Namespace, settings: Settings, fmt: str, catalog: Any, store: Any) -> int:
    """``lastgood undo STORE ACTION`` when ACTION is a prune: bring its checkpoints back."""
    from lastgood.cli import output
    from lastgood import retention

    plan = retention.plan_undo_prune(catalog, store, args.action, force=getattr(args, "force", False))
    if args.dry_run:
        output.emit(plan.to_dict(), fmt, render_undo_plan)
        return 0
    if not args.reason or not args.reason.strip():
        raise UsageError("a reason is required: --reason TEXT")
    if not args.yes:
        _confirm(render_undo_plan(plan.to_dict()))
    result = retention.apply_undo_prune(catalog, store, plan, reason=args.reason, operator=settings.operator,
                                        progress=_progress(fmt))
    output.emit(result.to_dict(), fmt, lambda r: render_result(r, store.display_url))
    return 0


def _emit(value: Any, fmt: str, render: Any) -> None:
    """``output.emit``, except that JSON is written compact (one line): a dry run lists every
    checkpoint, and indented JSON of a hundred thousand rows takes Python's slow encoder seconds."""
    from lastgood.cli import output

    if fmt != "json":
        output.emit(value, fmt, render)
        return
    from lastgood.readers.common.gc_pause import gc_paused
    from lastgood.redact import redact

    with gc_paused():
        text = output.json_safe(output.dumps(redact(value), indent=None))
    sys.stdout.write(text + "\n")


def _confirm(text: str) -> None:
    if not sys.stdin.isatty():
        raise UsageError("not a terminal: pass --yes to apply without confirmation (or --dry-run to preview)")
    sys.stderr.write(text + "\nApply? [y/N] ")
    sys.stderr.flush()
    if sys.stdin.readline().strip().lower() not in ("y", "yes"):
        raise UsageError("cancelled: nothing was written")


def _progress(fmt: str) -> Any:
    """A progress bar per phase (archive, delete, restore) on a terminal; nothing in JSON mode."""
    from lastgood.cli import output

    if fmt == "json":
        return None
    bars: dict[str, Any] = {}

    def update(phase: str, done: int, total: int) -> None:
        if phase not in bars:
            bars[phase] = output.progress_bar(phase)
        if bars[phase] is not None:
            bars[phase](done, total)
    return update


# ---- rendering ----------------------------------------------------------------------------


def _bytes(n: Any) -> str:
    from lastgood.cli.output import human_bytes

    return human_bytes(n) if n is not None else "—"


def render_plan(plan: dict[str, Any]) -> str:
    s = plan["summary"]
    lines = [f"prune {plan['store']} (dry run): {plan['policy_text']}"
             + (" [the store's saved policy]" if plan.get("policy_source") == "saved" else ""),
             f"  forget: {s['forget']:,} of {s['checkpoints']:,} checkpoints ({_bytes(s['bytes_forget'])} of "
             f"{_bytes(s['bytes'])}) in {s['runs_pruned']:,} of {s['runs']:,} runs"
             + (f"; {s['runs_deleted_whole']:,} run(s) go whole" if s.get("runs_deleted_whole") else ""),
             f"  keep:   {s['keep']:,} checkpoints — " + ", ".join(f"{k}: {v:,}" for k, v in s["kept_by"].items()),
             f"  archive: {plan['archive']} (undo with `lastgood undo STORE ACTION`)"]
    runs = [r for r in plan["runs"] if r["forget"]]
    for r in runs[:LISTED]:
        lines.append(f"    {r['run_id']}" + (f" [{r['namespace']}]" if r.get("namespace") else "")
                     + f": forget {r['forget']:,}/{r['checkpoints']:,} ({_bytes(r['bytes_forget'])})"
                     + (" — stale: goes whole" if r.get("goes_whole") and r.get("stale") else ""))
    if len(runs) > LISTED:
        lines.append(f"    …and {len(runs) - LISTED:,} more runs (--format json lists every checkpoint and why)")
    if plan.get("save_policy"):
        lines.append("  the policy would be saved for this store (--save-policy)")
    lines += [f"  warning: {w}" for w in plan.get("warnings") or []]
    return "\n".join(lines)


def render_space(space: dict[str, Any]) -> str:
    lines = []
    if space.get("returned_bytes"):
        lines.append(f"  space given back: {_bytes(space['returned_bytes'])}")
    lines += [f"  space: {note}" for note in space.get("notes") or []]
    return "\n".join(lines)


def render_result(result: dict[str, Any], store: str) -> str:
    import shlex

    if not result["action_id"]:
        return "prune: nothing to forget (nothing written)" + ("\n" + render_space(result["space"]) if result.get("space") else "")
    verb = "restored" if result["action"] == "undo" else "archived and removed from the store"
    lines = [f"{result['action']} {result['action_id']}: {verb} {result['checkpoints']:,} checkpoint(s) "
             f"({_bytes(result['bytes'])} archived) — archive {result['archive']}"]
    if result.get("reparented"):
        lines.append(f"  {result['reparented']:,} kept checkpoint(s) " + ("got their parent back" if result["action"] == "undo"
                     else "lost their parent (it went): as LangGraph's own prune does"))
    for skip in (result.get("skipped") or [])[:10]:
        lines.append(f"  skipped {skip['checkpoint_id']} of {skip['run_id']}: {skip['reason']}")
    if len(result.get("skipped") or []) > 10:
        lines.append(f"  …and {len(result['skipped']) - 10} more skipped (--format json lists them)")
    if result.get("space"):
        lines.append(render_space(result["space"]))
    if result["action"] == "prune":
        lines.append(f"  undo with: lastgood undo {shlex.quote(store)} {result['action_id']} --reason TEXT")
    return "\n".join(line for line in lines if line)


def render_undo_plan(plan: dict[str, Any]) -> str:
    lines = [f"undo of prune {plan['undo_of']} (dry run): restores {plan.get('restores')} checkpoint(s) from "
             f"{plan.get('archive')}"]
    lines += [f"  conflict: {c}" for c in plan.get("conflicts") or []]
    return "\n".join(lines)


def render_pin(result: dict[str, Any]) -> str:
    return (f"{result['action']} {result['action_id']}: {result['target']} of run {result['run_id']}"
            + (f" [{result['namespace']}]" if result.get("namespace") else "")
            + f" — {result.get('reason')}" + ("\n  unpin with: lastgood unpin STORE CKPT --reason TEXT"
                                             if result["action"] == "pin" else ""))


def render_pins(data: dict[str, Any]) -> str:
    pins = data["pins"]
    if not pins:
        return "no pinned checkpoints"
    return "\n".join(f"  {p['checkpoint_id']} of {p['run_id']}" + (f" [{p['namespace']}]" if p["namespace"] else "")
                     + f" — pinned by {p['operator']} ({p['action_id']}): {p['reason']}" for p in pins)


def render_storage(report: dict[str, Any]) -> str:
    store = report["store"]
    lines = [f"storage of {store['url']} ({store['reader']}): {_bytes(store['size_bytes'])} in "
             f"{store['checkpoints']:,} checkpoints, {store['runs']:,} runs, {store['agents']:,} agents"]
    foot = report.get("footprint") or {}
    if foot:
        lines.append("  on disk: " + ", ".join(f"{k} {_bytes(v)}" for k, v in (foot.get("files") or {}).items()))
        lines += [f"    {note}" for note in foot.get("notes") or []]
    if report.get("tables"):
        lines.append("  by table: " + ", ".join(f"{t['table']} {_bytes(t['bytes'])} ({t['rows']:,} rows)"
                                                for t in report["tables"]))
    channels = report.get("channels") or []
    if channels:
        lines.append("  by channel (largest first" + (", estimated from a sample" if any(c["estimated"] for c in channels)
                                                       else "") + "):")
        lines += [f"    {c['table']}.{c['channel']}: {_bytes(c['bytes'])}" for c in channels[:10]]
    rate = report["rate"]
    lines.append(f"  growth: {_bytes(rate['bytes_per_day'])}/day over the last {rate['window_days']} days; "
                 + ", ".join(f"in {p['days']} days {_bytes(p['bytes'])}" for p in report["projection"]))
    lines.append("  largest runs: " + ", ".join(f"{r['run_id']} {_bytes(r['size_bytes'])}"
                                               for r in report["largest_runs"][:5]))
    stale = report["stale_runs"]
    lines.append(f"  stale runs (nothing for {report['stale_after']}): {len(stale)}"
                 + (f", {_bytes(sum(r['size_bytes'] for r in stale))}" if stale else ""))
    policy = report.get("policy")
    lines.append(f"  saved policy: {policy['text']} ({' '.join(policy['options'])})" if policy else
                 "  saved policy: none (`lastgood prune STORE --keep-… --save-policy`)")
    if report.get("pins"):
        lines.append(f"  pinned: {len(report['pins'])} checkpoint(s)")
    return "\n".join(lines)
