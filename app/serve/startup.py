"""``lastgood ui``'s start-up refresh of never-seen stores, in a child process.

The dashboard's own process spends its first second importing and starting Streamlit, holding
the interpreter lock; a refresh in one of its threads (a 100k-checkpoint store: ~2 s of Python)
shared that lock and finished late. Run as ``python -m lastgood.serve.startup INDEX CHECK READER
URL…``, this indexes the stores one after another on the machine's other core while the server
starts, and prints one JSON line per store as it finishes::

    {"url": …, "store_id": 3, "changed": true, "seconds": 1.9, "error": null}
    {"url": …, "error": {"lastgood": true, "message": "…"}}

(URLs are public: a secret stays in the home's credentials file, found through LASTGOOD_HOME.)
:mod:`lastgood.serve.process` reads the lines; the dashboard opens the index once this process ended.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from collections.abc import Sequence
from typing import Any, TextIO

NO_READER = "-"  # READER when the command named none
PARENT_ENV = "LASTGOOD_STARTUP_PARENT"  # the dashboard's process id, set by command_env()
PR_SET_PDEATHSIG = 1


def command(index_path: str, urls: Sequence[str], reader_name: str | None, check: str) -> list[str]:
    """The child's argv (run with this interpreter)."""
    return [sys.executable, "-m", "lastgood.serve.startup", index_path, check,
            reader_name or NO_READER, *urls]


def command_env() -> dict[str, str]:
    """The child's environment: this one (LASTGOOD_HOME names the index and the credentials), and
    the dashboard's process id, so the child ends with it."""
    return {**os.environ, PARENT_ENV: str(os.getpid())}


def main(argv: Sequence[str], out: TextIO) -> int:
    index_path, check, reader, *urls = argv
    _end_with_parent()
    if urls:  # never seen: the first store's listing can start before the imports below
        from lastgood.index.prefetch import prefetch_store

        prefetch_store(urls[0], None if reader == NO_READER else reader)
    from lastgood.serve.process import StartupRefresh, refresh_here

    pending = [StartupRefresh(url) for url in urls]
    refresh_here(index_path, pending, None if reader == NO_READER else reader, check,
                 on_done=lambda refresh: _report(out, _line(refresh)))
    return 0


def _end_with_parent() -> None:
    """End when the dashboard's process ends, however it ends (Linux: the parent-death signal;
    a refresh killed half-way leaves the index as its last commit left it)."""
    parent = int(os.environ.get(PARENT_ENV) or 0)
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):  # not Linux: the dashboard's shutdown still ends this process
        pass
    if parent and os.getppid() != parent:  # the dashboard ended before the signal was set
        os._exit(1)


def _line(refresh: Any) -> dict[str, Any]:
    """One store's outcome (a lastgood.serve.process.StartupRefresh) as the dashboard reads it."""
    if refresh.error is not None:
        return {"url": refresh.url, "error": _error(refresh.error), "seconds": refresh.seconds}
    return {"url": refresh.url, "store_id": refresh.store_id, "changed": refresh.changed,
            "seconds": refresh.seconds, "error": None}


def _error(exc: BaseException) -> dict[str, Any]:
    from lastgood.errors import LastgoodError

    return {"lastgood": isinstance(exc, LastgoodError), "message": str(exc) or type(exc).__name__}


def _report(out: TextIO, line: dict[str, Any]) -> None:
    out.write(json.dumps(line) + "\n")
    out.flush()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:], sys.stdout))
