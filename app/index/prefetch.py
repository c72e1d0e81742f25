"""Start reading a store before a command has imported anything heavy.

``lastgood index DB`` spends its first ~0.25 s importing DuckDB, pyarrow and
the command modules; a reader that can list a store without them starts that
listing in threads first (the registry's ``prefetch`` entries, by reader name: a
function that takes the URL, returns whether it recognised and started it, and
imports only the standard library). The reader's scan takes the result when the files are
unchanged, and lists as usual otherwise: nothing depends on a prefetch.

Only for a store's first listing in a home without an index yet: a store the
index already knows usually needs no listing (a reopen), and reading it anyway
would cost a reopen CPU it does not need.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

LISTING_COMMANDS = ("index", "ls", "show")
VALUE_OPTIONS = ("--home", "--format", "--reader", "--check", "--run", "--status")
_started = False


def prefetch_script() -> bool:
    """:func:`prefetch_command` for this process's arguments when it runs as the
    ``lastgood`` console script (not when a program imports ``lastgood.cli.main``)."""
    return Path(sys.argv[0]).name == "lastgood" and prefetch_command(sys.argv[1:])


def prefetch_command(argv: Sequence[str]) -> bool:
    """Start the listing of the store ``argv`` (a ``lastgood`` command line) names when it
    lists one into a home with no index yet; True when a reader started it. Once per process."""
    global _started
    if _started:
        return False
    _started = True
    try:
        options, positional = _parse(argv)
        if positional and positional[0] in LISTING_COMMANDS:
            single_threaded_blas()
        if len(positional) < 2 or positional[0] not in LISTING_COMMANDS or "://" in positional[1]:
            return False
        from lastgood.config import load_settings

        if load_settings(options.get("--home")).index_path.exists():
            return False
        return prefetch_store(positional[1], options.get("--reader"))
    except Exception:  # noqa: BLE001 - a prefetch is only a head start: the command reads as usual
        return False


def single_threaded_blas() -> None:
    """No OpenBLAS thread pool for a listing command: numpy (imported by pyarrow and the
    column-wise listing, in the fetch threads) starts one OpenBLAS thread per extra core
    that spins waiting for work (30-100 ms of CPU in `lastgood index` of a 100k-checkpoint
    DB, taken from the fetch threads that need both cores); a listing does no linear
    algebra. Only before numpy is imported; a value the user set is kept."""
    if "numpy" not in sys.modules:
        os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")


def prefetch_store(url: str, reader_name: str | None = None) -> bool:
    """Start the first listing of the store at ``url`` when a reader (``reader_name``, or
    any with a prefetcher) recognises it; for a caller that knows the store is not indexed
    yet (e.g. ``lastgood ui``'s start-up child, before its imports)."""
    from lastgood.readers.registry import prefetchers

    found = prefetchers()
    names = [reader_name] if reader_name else list(found)
    try:
        return any(_prefetcher(found[name])(url) for name in names if name in found)
    except Exception:  # noqa: BLE001 - a prefetch is only a head start
        return False


def _prefetcher(target: str) -> Callable[[str], bool]:
    module, function = target.split(":")
    return getattr(importlib.import_module(module), function)


def _parse(argv: Sequence[str]) -> tuple[dict[str, str], list[str]]:
    options: dict[str, str] = {}
    positional: list[str] = []
    tokens = iter(argv)
    for token in tokens:
        if token in VALUE_OPTIONS:
            options[token] = next(tokens, "")
        elif token.startswith("--") and "=" in token:
            name, value = token.split("=", 1)
            options[name] = value
        elif not token.startswith("-"):
            positional.append(token)
    return options, positional
