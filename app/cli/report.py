"""``lastgood report STORE [--run R] [--diff A B] [--no-findings] -o FILE.html`` (lastgood.report).

One self-contained HTML file for an incident ticket: the store's summary, the run's timeline with
its checkpoints and events, the findings, a diff as the Diff page shows it, the journal of actions.
It loads nothing from anywhere (no script, no CDN) and shows secrets redacted, as the pages do.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

from lastgood.config import Settings
from lastgood.errors import UsageError


def register(sub: Any, common: argparse.ArgumentParser) -> dict[str, Any]:
    p = sub.add_parser("report", parents=[common], help="one self-contained HTML file for an incident ticket")
    p.add_argument("store")
    p.add_argument("--run", help="the run to report on: its timeline, checkpoints, events, findings and actions "
                                 "(default: B's run with --diff; without either, every run's health)")
    p.add_argument("--diff", nargs=2, metavar=("A", "B"), help="add the diff from checkpoint A to checkpoint B")
    p.add_argument("--findings", action=argparse.BooleanOptionalAction, default=True,
                   help="include the findings (of the run, or of the store; default: yes)")
    p.add_argument("-o", "--output", required=True, metavar="FILE.html", help="where to write it ('-': stdout)")
    return {"report": cmd_report}


def cmd_report(args: argparse.Namespace, settings: Settings, fmt: str) -> int:
    from lastgood.cli import output
    from lastgood.report import build_report
    from lastgood.stores import index_store, open_catalog

    started = time.perf_counter()
    catalog = open_catalog(settings)
    store = index_store(catalog, args.store, reader_name=args.reader,
                        progress=output.progress_bar("indexing") if fmt != "json" else None).store
    html = build_report(catalog, store, run=args.run, diff=tuple(args.diff) if args.diff else None,
                        findings=args.findings)
    data = html.encode("utf-8")
    if args.output == "-":
        sys.stdout.write(html)
        return 0
    _write(Path(args.output), data)
    result = {"output": args.output, "bytes": len(data), "run": args.run, "diff": args.diff,
              "findings": args.findings, "seconds": round(time.perf_counter() - started, 3)}
    output.emit(result, fmt, lambda r: f"wrote {r['output']} ({output.human_bytes(r['bytes'])}); open it in any "
                                       "browser, offline")
    return 0


def _write(path: Path, data: bytes) -> None:
    """Written beside ``path``, then moved into place (never half a file)."""
    if path.is_dir():
        raise UsageError(f"-o {path}: a folder; name the file to write (e.g. {path / 'report.html'})")
    tmp = path.with_name(f".{path.name}.lastgood-tmp")
    try:
        tmp.write_bytes(data)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
