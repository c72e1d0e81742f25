"""The ``lastgood`` command run in this process (``lastgood.cli.main``), for tests that call it many
times: a new interpreter per call costs ~1 s on a loaded machine. Each call closes the index
afterwards, as a process exiting would; a few calls per area still go through the real console
script (tests.helpers.lastgood_cli)."""

from __future__ import annotations

import io
import os
from collections.abc import Iterator
from contextlib import contextmanager, redirect_stderr, redirect_stdout
from dataclasses import dataclass
from pathlib import Path


@dataclass
class Done:
    returncode: int
    stdout: str
    stderr: str


@contextmanager
def _environ(env: dict[str, str]) -> Iterator[None]:
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def run_cli(*args: str, home: Path, env: dict[str, str] | None = None) -> Done:
    """``lastgood ARGS --home HOME`` in this process: its exit code, stdout and stderr."""
    from lastgood.cli.main import main
    from lastgood.index.catalog import close_all

    out, err = io.StringIO(), io.StringIO()
    with _environ({"LASTGOOD_HOME": str(home), **(env or {})}), redirect_stdout(out), redirect_stderr(err):
        try:
            code = main([*args, "--home", str(home)])
        except SystemExit as exc:  # argparse: a usage error
            code = int(exc.code or 0)
        finally:
            close_all()
    return Done(code, out.getvalue(), err.getvalue())
