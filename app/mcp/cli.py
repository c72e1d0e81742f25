"""``lastgood mcp [STORE…] [--allow-write] [--http] [--port N]``: serve stores to MCP clients.

Registered in ``lastgood.cli.main.COMMAND_MODULES``; the SDK is imported only when the command runs
(``pip install 'lastgood[mcp]'``), so every other command starts as fast as before.
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Callable
from typing import Any

from lastgood.config import Settings
from lastgood.errors import MissingDependency, UsageError

Handler = Callable[[argparse.Namespace, Settings, str], int]
HOST = "127.0.0.1"  # the HTTP transport listens on loopback only
DEFAULT_PORT = 8765
EXAMPLES = """examples:
  lastgood mcp sample_data/agents ./checkpoints.sqlite
  lastgood mcp ./checkpoints.sqlite --http --port 8765
  lastgood mcp ./checkpoints.sqlite --allow-write"""


def register(sub: Any, common: argparse.ArgumentParser) -> dict[str, Handler]:
    p = sub.add_parser("mcp", parents=[common],
                       help="serve the read verbs (and recovery dry runs) as MCP tools, over stdio",
                       description="Serve stores to an AI assistant over the Model Context Protocol: the CLI's\n"
                                   "read verbs as tools with the same JSON, recovery as dry-run plans (docs/mcp.md).",
                       epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("stores", nargs="*",
                   help="stores to serve (default: $LASTGOOD_STORES, else every store the index holds)")
    p.add_argument("--allow-write", action="store_true",
                   help="also serve apply_restore/rollback/quarantine/undo (a reason is required; the "
                        "operator is recorded as mcp:<client>); stdio only")
    p.add_argument("--http", action="store_true", help=f"streamable HTTP on {HOST} instead of stdio")
    p.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"port of --http (default {DEFAULT_PORT})")
    return {"mcp": cmd_mcp}


def cmd_mcp(args: argparse.Namespace, settings: Settings, fmt: str) -> int:
    from lastgood.config import check_port

    if args.allow_write and args.http:
        raise UsageError("--allow-write is served over stdio only: any local user can reach a loopback port, "
                         "and the HTTP transport has no login")
    if args.http:
        check_port(HOST, args.port)  # a busy or invalid port: one line, exit 2, before any work
    build_server, ServerConfig, public_urls = _sdk()
    urls = public_urls(args.stores or stores_from_environment(), settings.home)
    check_stores(settings, urls, args.reader)
    server = build_server(ServerConfig(settings, urls, allow_write=args.allow_write, reader_name=args.reader))
    if args.http:
        from lastgood.cli import output

        output.info(f"Lastgood MCP server on http://{HOST}:{args.port}/mcp  (Ctrl+C to stop)")
        server.run("streamable-http", host=HOST, port=args.port)
    else:
        server.run("stdio")
    return 0


def _sdk() -> tuple[Any, Any, Any]:
    """The server's modules, or a one-line error naming the extra when the SDK is not installed."""
    try:
        from lastgood.mcp.server import build_server
        from lastgood.mcp.session import ServerConfig, public_urls
    except ImportError as exc:
        if (exc.name or "").split(".")[0] in ("mcp", "mcp_types"):
            raise MissingDependency("mcp", "mcp", "lastgood mcp") from None
        raise
    return build_server, ServerConfig, public_urls


def stores_from_environment() -> list[str]:
    """``LASTGOOD_STORES``: a JSON list of URLs (as ``lastgood ui`` sets it) or one URL."""
    raw = os.environ.get("LASTGOOD_STORES", "").strip()
    if not raw:
        return []
    if raw.startswith("["):
        try:
            urls = json.loads(raw)
        except json.JSONDecodeError:
            raise UsageError("LASTGOOD_STORES must be a JSON list of store URLs, or one URL") from None
        if not isinstance(urls, list) or not all(isinstance(u, str) and u for u in urls):
            raise UsageError("LASTGOOD_STORES must be a JSON list of store URLs, or one URL")
        return urls
    return [raw]


def check_stores(settings: Settings, urls: list[str], reader: str | None) -> None:
    """Open every store given once, before anything is served: one that cannot be opened is a one-line
    error (exit 2), a never-indexed one gets its handle (``store:N``) in the index, and the readers'
    code and the index are loaded, so a client's first call answers as fast as the next ones."""
    from lastgood.stores import open_catalog, open_store

    catalog = open_catalog(settings)
    try:
        for url in urls:
            open_store(catalog, url, reader).reader.close()
    finally:
        catalog.close()  # each tool call opens the index for itself
