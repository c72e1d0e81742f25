"""Integrity commands: ``verify`` (findings, exit 1 on errors) and ``runs`` (health and last good per run).

Both report the one set of findings the index holds (``lastgood.integrity.verify.store_findings``),
so they agree with ``ls`` statuses, ``show`` and the pages.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from lastgood.config import Settings
from lastgood.errors import UsageError

Handler = Callable[[argparse.Namespace, Settings, str], int]


def register(sub: Any, common: argparse.ArgumentParser) -> dict[str, Handler]:
    p = sub.add_parser("verify", parents=[common], help="check integrity; exit 1 on errors")
    p.add_argument("store")
    p.add_argument("--read-data", action="store_true", help="re-hash and decode every blob")
    p.add_argument("--read-data-subset", metavar="N/M|P%",
                   help="read the data of a part of the store: bucket N of M, or the P%% least "
                        "recently read (repeated runs cover the whole store)")
    p.add_argument("--workers", type=int, help="processes hashing and decoding blobs (default: CPU count)")
    p.add_argument("--scheduler", metavar="tcp://HOST:PORT", help="fan the blob work out on a Dask cluster")
    p = sub.add_parser("runs", parents=[common], help="runs with their health and last good checkpoint")
    p.add_argument("store")
    p.add_argument("--run", help="only this run")
    return {"verify": cmd_verify, "runs": cmd_runs}


def cmd_verify(args: argparse.Namespace, settings: Settings, fmt: str) -> int:
    from lastgood.cli import output
    from lastgood.stores import index_store, open_catalog
    from lastgood.integrity.verify import Subset, store_findings, verify_store

    subset = Subset.parse(args.read_data_subset) if args.read_data_subset else None
    if args.scheduler and not (args.read_data or subset):
        raise UsageError("--scheduler fans out the data check: add --read-data or --read-data-subset "
                         "(a structure check runs here)")
    catalog = open_catalog(settings)
    summary = index_store(catalog, args.store, reader_name=args.reader, progress=_bar(fmt, "indexing"))
    report = verify_store(catalog, summary.store.store_id, summary.store.reader,
                          read_data=args.read_data, subset=subset, workers=args.workers,
                          scheduler=args.scheduler, progress=_bar(fmt, "verifying"))
    found = store_findings(catalog, summary.store.store_id)
    result = {"checked": report.checked, "depth": report.depth, "findings": found,
              "seconds": round(report.seconds, 3), "workers": report.workers, "scheduler": args.scheduler,
              "subset": str(subset) if subset else None}
    output.emit(result, fmt, output.render_verify)
    return 1 if any(f["severity"] == "error" for f in found) else 0


def cmd_runs(args: argparse.Namespace, settings: Settings, fmt: str) -> int:
    from lastgood.cli import output
    from lastgood.index import queries
    from lastgood.integrity.health import run_health
    from lastgood.stores import index_store, open_catalog

    catalog = open_catalog(settings)
    summary = index_store(catalog, args.store, reader_name=args.reader, progress=_bar(fmt, "indexing"))
    queries.require_run(catalog, summary.store.store_id, args.run)
    rows = run_health(catalog, summary.store.store_id, run_id=args.run)
    output.emit(rows, fmt, render_runs)
    return 0


RUN_COLUMNS = ("run_id", "agent", "checkpoints", "ok", "corrupt", "incomplete", "quarantined",
               "superseded", "unverified", "last_good", "head")


def render_runs(rows: list[dict[str, Any]]) -> str:
    """One line per run: its health, the statuses that are not ok (counts; the JSON has every
    column), its last good checkpoint and head; fitted to the terminal (ids as short prefixes)."""
    from lastgood.cli.output import table

    body = [[(r["run_id"] + (f" [{r['namespace']}]" if r["namespace"] else "")), r["agent"] or "-",
             str(r["checkpoints"]), r.get("health") or "-", _issues(r), r["last_good"] or "(none yet)",
             r["head"] or "-"] for r in rows]
    header = ["RUN", "AGENT", "CKPTS", "HEALTH", "NOT OK", "LAST GOOD", "HEAD"]
    shrink = ((4, 16), (5, 13), (6, 13), (0, 24), (1, 10), (4, 8))
    return table(body, header, shrink=shrink, colour=3, prefixes=(5, 6)) + f"\n{len(rows)} run(s)"


def _issues(row: dict[str, Any]) -> str:
    counts = [f"{row[c]} {c}" for c in RUN_COLUMNS[4:9] if row.get(c)]
    return ", ".join(counts) or "-"


def _bar(fmt: str, label: str) -> Callable[[int, int | None], None] | None:
    from lastgood.cli import output

    return output.progress_bar(label) if fmt != "json" else None
