"""A real PostgreSQL server for tests, started in a temp dir the fixture owns.

``pg_dsn`` (session) starts one server; ``pg_create_database`` makes a fresh,
uniquely named database on it; ``pg_module_dsn`` gives each test module its own.
The binaries come from Debian's ``postgresql`` package. As root, ``initdb`` and
``pg_ctl`` run as the ``postgres`` user (initdb refuses root).
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

SERVER_OPTIONS = (
    "-c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off "
    "-c full_page_writes=off -c max_connections=50"
)
INSTALL_HINT = (
    "PostgreSQL server binaries (initdb, pg_ctl) not found in /usr/lib/postgresql/*/bin "
    "or `pg_config --bindir`: install Debian's package with `apt-get install -y postgresql`"
)


def find_pg_bindir() -> Path | None:
    """The newest PostgreSQL bin dir that has initdb and pg_ctl, or None."""
    candidates = sorted(
        (Path(p).parent for p in glob.glob("/usr/lib/postgresql/*/bin/initdb")),
        key=lambda p: _version_key(p.parent.name),
        reverse=True,
    )
    candidates += [p for p in [_pg_config_bindir()] if p is not None]
    for bindir in candidates:
        if (bindir / "initdb").exists() and (bindir / "pg_ctl").exists():
            return bindir
    return None


def _version_key(name: str) -> tuple[int, ...]:
    return tuple(int(part) for part in name.split(".") if part.isdigit())


def _pg_config_bindir() -> Path | None:
    pg_config = shutil.which("pg_config")
    if pg_config is None:
        return None
    try:
        out = subprocess.run([pg_config, "--bindir"], capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        return None
    return Path(out.stdout.strip())


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _as_server_user(args: list[str]) -> list[str]:
    """Run as ``postgres`` when we are root (initdb refuses to run as root)."""
    if os.geteuid() != 0:
        return args
    return ["runuser", "-u", "postgres", "--", *args]


def _run(args: list[str], what: str) -> None:
    proc = subprocess.run(_as_server_user(args), capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{what} failed ({proc.returncode}): {proc.stderr.strip() or proc.stdout.strip()}")


def _prepare_dir(base: Path) -> None:
    if os.geteuid() != 0:
        return
    try:
        entry = pwd.getpwnam("postgres")
    except KeyError:
        pytest.fail("running as root but there is no 'postgres' user: " + INSTALL_HINT)
    os.chown(base, entry.pw_uid, entry.pw_gid)


class PgServer:
    """One throwaway cluster: initdb, start, stop, remove."""

    def __init__(self, bindir: Path) -> None:
        self.bindir = bindir
        self.base = Path(tempfile.mkdtemp(prefix="lastgood-pg-"))
        self.data = self.base / "data"
        self.log = self.base / "server.log"
        self.port = 0

    @property
    def dsn(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def start(self) -> None:
        _prepare_dir(self.base)
        _run([str(self.bindir / "initdb"), "-D", str(self.data), "-A", "trust", "-U", "postgres",
              "-E", "UTF8", "--no-sync"], "initdb")
        last_error: Exception | None = None
        for _ in range(3):  # the free port may be taken between probe and bind
            self.port = free_port()
            try:
                self._pg_ctl_start()
                return
            except RuntimeError as exc:
                last_error = exc
        raise RuntimeError(f"{last_error}\n{self._log_tail()}")

    def _pg_ctl_start(self) -> None:
        options = f"-p {self.port} -k {self.base} {SERVER_OPTIONS}"
        _run([str(self.bindir / "pg_ctl"), "-D", str(self.data), "-l", str(self.log),
              "-o", options, "-w", "-t", "30", "start"], "pg_ctl start")

    def stop(self) -> None:
        if self.data.exists():
            subprocess.run(
                _as_server_user([str(self.bindir / "pg_ctl"), "-D", str(self.data), "-m", "fast",
                                 "-w", "stop"]),
                capture_output=True,
            )
        shutil.rmtree(self.base, ignore_errors=True)

    def _log_tail(self) -> str:
        try:
            return self.log.read_text(errors="replace")[-2000:]
        except OSError:
            return ""


@pytest.fixture(scope="session")
def pg_dsn() -> Iterator[str]:
    """DSN of a real PostgreSQL server for this test session (superuser, trust auth)."""
    bindir = find_pg_bindir()
    if bindir is None:
        pytest.fail(INSTALL_HINT)
    server = PgServer(bindir)
    try:
        server.start()
    except RuntimeError as exc:
        server.stop()
        pytest.fail(f"could not start PostgreSQL from {bindir}: {exc}")
    try:
        yield server.dsn
    finally:
        server.stop()


def dsn_for_database(dsn: str, dbname: str) -> str:
    """``dsn`` pointing at another database on the same server."""
    head, _, _ = dsn.rpartition("/")
    return f"{head}/{dbname}"


@pytest.fixture(scope="session")
def pg_create_database(pg_dsn: str) -> Callable[[str], str]:
    """A function making a fresh database (unique name from ``prefix``) -> its DSN."""
    import psycopg

    def create(prefix: str = "lastgood_test") -> str:
        name = f"{prefix}_{uuid.uuid4().hex[:10]}".lower()
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return dsn_for_database(pg_dsn, name)

    return create


@pytest.fixture(scope="module")
def pg_module_dsn(pg_create_database: Callable[[str], str], request: pytest.FixtureRequest) -> str:
    """A database of its own for the requesting test module."""
    module = request.module.__name__.rsplit(".", 1)[-1]
    return pg_create_database(module[:40])
