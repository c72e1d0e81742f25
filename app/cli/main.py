"""The ``lastgood`` command: a thin layer over app.stores / app.queries / app.show.

Exit codes: 0 ok, 1 error-severity findings or a conflict, 2 usage or I/O error.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict
from functools import partial
import importlib
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

from lastgood.index.prefetch import prefetch_script

prefetch_script()  # `lastgood index DB`: a store's first listing starts before the imports below

from lastgood.cli import output  # noqa: E402
from lastgood.index import queries  # noqa: E402
from lastgood.index.catalog import Catalog, close_all  # noqa: E402
from lastgood.config import Settings, check_port, load_settings  # noqa: E402
from lastgood.errors import LastgoodError, as_fault  # noqa: E402
from lastgood.stores import CHECK_DEPTHS, blobs_pending, data_pending, index_store, open_catalog, open_store  # noqa: E402
from lastgood.integrity.verify import store_findings  # noqa: E402
from lastgood.readers.base import STATUSES  # noqa: E402


LISTED_STATUSES = STATUSES
Handler = Callable[[argparse.Namespace, Settings, str], int]
# Modules that add commands: each has ``register(sub, common) -> {name: handler}`` and keeps
# its heavy imports inside the handlers (start-up time is part of every command's time).
COMMAND_MODULES: tuple[str, ...] = ("lastgood.cli.integrity", "lastgood.cli.recovery", "lastgood.cli.diff", "lastgood.cli.retention", "lastgood.mcp.cli", "lastgood.cli.sql", "lastgood.cli.report")
EXTRA_COMMANDS: dict[str, Handler] = {}


class Parser(argparse.ArgumentParser):
    """Usage errors in one line, exit 2: ``lastgood ls: error: … (see lastgood ls --help)``; a
    mistyped command or option gets a "did you mean" from the ones that exist."""

    def error(self, message: str) -> NoReturn:
        hint = _suggestion(self, message)
        self.exit(2, f"{self.prog}: error: {message}{hint} (see {self.prog} --help)\n")


def _suggestion(parser: argparse.ArgumentParser, message: str) -> str:
    import difflib
    import re

    choice = re.search(r"invalid choice: '([^']*)'", message)
    if choice:
        words, wrong = _choices(parser), [choice.group(1)]
    else:
        unknown = re.search(r"unrecognized arguments: (.*)$", message)
        if not unknown:
            return ""
        words = _options(parser)
        wrong = [w.split("=", 1)[0] for w in unknown.group(1).split() if w.startswith("-")]
    for word in wrong:
        close = difflib.get_close_matches(word, words, n=1, cutoff=0.6)
        if close:
            return f"; did you mean {close[0]!r}?"
    return ""


def _options(parser: argparse.ArgumentParser) -> list[str]:
    """Every option of the parser and of its subcommands (argparse reports a subcommand's unknown
    option from the top-level parser)."""
    found = []
    for action in parser._actions:  # noqa: SLF001 - argparse keeps them there
        found += action.option_strings
        if isinstance(action, argparse._SubParsersAction):  # noqa: SLF001
            for sub in action.choices.values():
                found += _options(sub)
    return sorted(set(found))


def _choices(parser: argparse.ArgumentParser) -> list[str]:
    return [c for action in parser._actions for c in (action.choices or [])  # noqa: SLF001
            if isinstance(c, str)]


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False, argument_default=argparse.SUPPRESS)
    common.add_argument("--home", help="where the index lives (default: $LASTGOOD_HOME or the user cache dir)")
    common.add_argument("--format", choices=("table", "json"), help="output format (default: table)")
    common.add_argument("--reader", help="reader to use instead of picking one from the URL")
    common.add_argument("--wide", action="store_true",
                        help="never shorten table cells to fit the terminal (ids in full)")
    parser = Parser(prog="lastgood", parents=[common],
                                     description="Inspect, verify and recover checkpoints.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    p = sub.add_parser("index", parents=[common], help="index a store (incremental)")
    p.add_argument("store")
    p.add_argument("--full", action="store_true", help="rescan and re-check everything")
    p.add_argument("--check", choices=CHECK_DEPTHS, default="auto",
                   help="check new checkpoints: data (re-hash, decode), structure, none; "
                        "auto = structure, and data when the blobs not yet decoded add up to "
                        "at most 16 MiB (LASTGOOD_AUTO_DATA_BYTES)")
    p = sub.add_parser("ls", parents=[common], help="list checkpoints")
    p.add_argument("store")
    p.add_argument("--run", help="only this run")
    p.add_argument("--status", choices=LISTED_STATUSES, help="only this status")
    p = sub.add_parser("show", parents=[common], help="one checkpoint: metadata, state, writes")
    p.add_argument("store")
    p.add_argument("checkpoint", help="checkpoint id or unique prefix")
    p = sub.add_parser("ui", parents=[common], help="open the dashboard")
    p.add_argument("stores", nargs="*")
    p.add_argument("--port", type=int, default=8501)
    p.add_argument("--host", default="127.0.0.1",
                   help="address to listen on (default 127.0.0.1; see docs/security.md before exposing)")
    p.add_argument("--allow-write", action="store_true", help="enable write actions in the UI")
    for module in COMMAND_MODULES:
        EXTRA_COMMANDS.update(importlib.import_module(module).register(sub, common))
    if {"-h", "--help"} & set(sys.argv[1:]):  # descriptions and examples: only when help is shown
        from lastgood.cli.examples import describe

        describe(parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    for option in ("home", "format", "reader", "wide"):
        setattr(args, option, getattr(args, option, None))
    fmt = args.format or "table"
    output.WIDE = bool(args.wide)
    try:
        settings = load_settings(args.home)
        handler = COMMANDS.get(args.command) or EXTRA_COMMANDS[args.command]
        return handler(args, settings, fmt)
    except LastgoodError as exc:
        output.error(str(exc))
        return exc.exit_code
    except KeyboardInterrupt:
        output.error("interrupted")
        return 130
    except BrokenPipeError:
        return 0
    except Exception as exc:  # disk full, a home that is a file, a bug: one line, exit 2
        if os.environ.get("LASTGOOD_DEBUG"):
            raise
        fault = as_fault(exc)
        output.error(str(fault))
        return fault.exit_code


def _catalog(settings: Settings) -> Catalog:
    return open_catalog(settings)


def _progress(fmt: str, label: str) -> Callable[[int, int | None], None] | None:
    return output.progress_bar(label) if fmt != "json" else None


def _ensure(args: argparse.Namespace, settings: Settings, fmt: str):
    catalog = _catalog(settings)
    summary = index_store(catalog, args.store, reader_name=args.reader,
                          progress=_progress(fmt, "indexing"))
    return catalog, summary


def cmd_index(args: argparse.Namespace, settings: Settings, fmt: str) -> int:
    catalog = _catalog(settings)
    summary = index_store(catalog, args.store, reader_name=args.reader, full=args.full,
                          check=args.check, progress=_progress(fmt, "indexing"))
    store = summary.store
    found = store_findings(catalog, store.store_id)  # the one set verify, ls and the pages show
    report = {
        "store": store.display_url, "reader": store.reader.name, "full": summary.refresh.full,
        "changed": summary.refresh.changed, "checkpoints_read": summary.refresh.checkpoints,
        "events_read": summary.refresh.events,
        "checked": summary.verify.checked if summary.verify else 0,
        "check": summary.verify.depth if summary.verify else "none", "findings": found,
        "seconds": round(summary.refresh.seconds + (summary.verify.seconds if summary.verify else 0), 3),
        "overview": output.overview_dict(queries.overview(catalog, store.store_id)),
        "data_pending": asdict(data_pending(catalog, store.store_id)),  # blobs not decoded yet
        "blobs_pending": blobs_pending(catalog, store.store_id),  # blob files not looked at yet
    }
    output.emit(report, fmt, output.render_index)
    return 0


def cmd_ls(args: argparse.Namespace, settings: Settings, fmt: str) -> int:
    catalog, summary = _ensure(args, settings, fmt)
    queries.require_run(catalog, summary.store.store_id, args.run)
    fields = queries.LS_FIELDS + queries.LS_CHECK_FIELDS if fmt == "json" else None
    chunks = queries.iter_checkpoints(catalog, summary.store.store_id, run_id=args.run, status=args.status,
                                      fields=fields, time_text=fmt)
    output.emit_listing(chunks, fmt)
    return 0


def cmd_show(args: argparse.Namespace, settings: Settings, fmt: str) -> int:
    from lastgood.investigate.show import show_checkpoint  # state views: only this command needs them

    catalog, summary = _ensure(args, settings, fmt)
    # the table view prints the state's first STATE_PREVIEW_CHARS characters: only what they need
    preview = None if fmt == "json" else output.STATE_PREVIEW_CHARS
    result = show_checkpoint(catalog, summary.store, args.checkpoint, state_chars=preview)
    output.emit(result, fmt, output.render_show, redacted=True)  # show_checkpoint redacts every part
    return 0


def cmd_ui(args: argparse.Namespace, settings: Settings, fmt: str) -> int:
    check_port(args.host, args.port)  # a busy or invalid port: one line, exit 2, before any work
    from lastgood.serve import process as serve

    urls, had_secret = serve.public_urls(args.stores, settings.home)
    if had_secret:  # secrets stay in the home's private credentials file, never in argv
        _reexec_ui(args, settings, urls)
    catalog = _catalog(settings)
    indexed = queries.indexed_stores(catalog)
    known = [url for url in urls if url in indexed]
    for url in urls:
        if url not in known:  # a never-seen store: fail here, one line
            open_store(catalog, url, args.reader).reader.close()
    catalog.close()  # the start-up refresh and the pages open the index as they need it
    os.environ.update(LASTGOOD_HOME=str(settings.home), LASTGOOD_STORES=json.dumps(urls))
    os.environ.setdefault("LASTGOOD_BACKGROUND_CHECK", "1")  # never-read blobs: checked in the background
    if args.allow_write:
        os.environ["LASTGOOD_ALLOW_WRITE"] = "1"
    if args.host not in ("127.0.0.1", "localhost", "::1"):
        output.warn(f"serving on {args.host}: anyone who can reach it can read these stores; "
                    "put a login in front of it (docs/security.md)")
    # structure only, beside the server's start-up: data checks run in the dashboard's background
    # a read-only dashboard shows a known store as indexed and refreshes it after the first page;
    # with writes enabled the first page waits for the refresh (no action starts from a stale view)
    serve.refresh_in_background(str(settings.index_path), urls, reader_name=args.reader,
                                known=() if args.allow_write else known)
    # the first page shows the index as it is; no child process indexes a never-seen store meanwhile
    first = indexed[urls[0]] if urls and len(known) == len(urls) and not args.allow_write else None
    output.info(f"Lastgood dashboard on http://{args.host}:{args.port}  (Ctrl+C to stop)")
    from lastgood.display import plotly_theme as lazy_plotly_theme

    # Streamlit's import no longer imports plotly (whose narwhals peeks at a pandas the refresh
    # thread may be importing): no pandas before the first page, which needs none
    if not lazy_plotly_theme.install():
        serve.import_pandas_first()
    serve.quiet_cache_warning()
    from lastgood.ui import webserver

    # returns when SIGTERM/SIGINT stopped the server; the pages' code and the first page's
    # queries load once it listens, while the browser loads the dashboard
    webserver.run(args.host, args.port,
                  when_listening=partial(webserver.load_pages, str(settings.index_path), first))
    serve.shutdown()  # ends the process at once: daemon threads (a background check) stop with it
    return 0  # pragma: no cover - shutdown does not return


def _reexec_ui(args: argparse.Namespace, settings: Settings, urls: list[str]) -> None:
    """Start this command again with public URLs only (the typed secret leaves the command line)."""
    argv = [sys.executable, "-m", "lastgood", "ui", *urls, "--port", str(args.port), "--host", args.host,
            "--home", str(settings.home)]
    argv += ["--allow-write"] if args.allow_write else []
    argv += ["--reader", args.reader] if args.reader else []
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(sys.executable, argv)


COMMANDS: dict[str, Handler] = {
    "index": cmd_index, "ls": cmd_ls, "show": cmd_show, "ui": cmd_ui,
}


def entry() -> Any:  # pragma: no cover - console script shim
    code = main()
    if nothing_left_running():
        end_now(code)
    sys.exit(code)


def nothing_left_running() -> bool:
    """No thread that must finish and no child process: the command's work is all done."""
    import threading

    others = [t for t in threading.enumerate() if t is not threading.main_thread() and not t.daemon]
    multiprocessing = sys.modules.get("multiprocessing")  # not imported: no worker was started
    return not others and not (multiprocessing and multiprocessing.active_children())


def end_now(code: int) -> None:
    """End the process once the command is done, without the interpreter's teardown.

    The teardown frees every object a listing left (Arrow buffers, the reader's memo, modules)
    one by one: ~50 ms of a 1.1 s `lastgood index` of a 100k-checkpoint DB, after the output is
    complete. The index is closed first (its last changes reach the file), and the output streams
    are flushed; daemon threads (a SQLite connection closed in the background) simply stop."""
    close_all()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe: nothing more to say
            pass
    os._exit(code)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
