"""Settings from the environment: LASTGOOD_HOME, LASTGOOD_ALLOW_WRITE, LASTGOOD_OPERATOR.

Storage options for cloud stores follow fsspec's own conventions (FSSPEC_S3_*
environment variables, ~/.config/fsspec, the cloud SDKs' variables), so they
need nothing here.
"""

from __future__ import annotations

import errno
import getpass
import os
import socket
from dataclasses import dataclass
from pathlib import Path

import platformdirs

from lastgood.errors import EnvironmentFault

TRUE_WORDS = {"1", "true", "yes", "on"}


@dataclass(frozen=True, slots=True)
class Settings:
    home: Path
    allow_write: bool
    operator: str

    @property
    def index_path(self) -> Path:
        return self.home / "index.duckdb"


def load_settings(home: str | os.PathLike[str] | None = None) -> Settings:
    """Settings with ``home`` (the --home option) taking precedence over LASTGOOD_HOME."""
    chosen = home or os.environ.get("LASTGOOD_HOME") or platformdirs.user_cache_dir("lastgood")
    return Settings(
        home=Path(chosen).expanduser(),
        allow_write=os.environ.get("LASTGOOD_ALLOW_WRITE", "").strip().lower() in TRUE_WORDS,
        operator=os.environ.get("LASTGOOD_OPERATOR") or _login_name(),
    )


def _login_name() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "unknown"


def private_dir(path: Path) -> None:
    """Create ``path`` and its parents as 0700 folders, or check an existing one is a folder.

    Existing folders keep their mode (LASTGOOD_HOME may be a shared folder); the
    index file inside is made 0600 by ``private_file``."""
    if path.exists() and not path.is_dir():
        raise EnvironmentFault(f"the Lastgood home {path} is not a folder (set --home or LASTGOOD_HOME)")
    try:
        path.mkdir(parents=True, exist_ok=True, mode=0o700)
    except OSError as exc:
        raise EnvironmentFault(f"cannot create the Lastgood home {path}: {exc.strerror or exc}") from None


def private_file(path: str | os.PathLike[str]) -> None:
    """Make an existing file readable by its owner only (the index holds store contents)."""
    for candidate in (Path(path), Path(f"{path}.wal")):
        try:
            if candidate.exists() and candidate.stat().st_mode & 0o077:
                candidate.chmod(0o600)
        except OSError:
            continue


def check_port(host: str, port: int) -> None:
    """EnvironmentFault unless ``host:port`` can be listened on (checked before starting a server)."""
    if not 0 < port < 65536:
        raise EnvironmentFault(f"--port {port} is not a TCP port (1-65535)")
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except (socket.gaierror, UnicodeError) as exc:
        raise EnvironmentFault(f"--host {host!r} cannot be resolved: {exc}") from None
    family, kind, proto, _name, address = infos[0]
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(address)
        except OSError as exc:
            why = "is already in use" if exc.errno == errno.EADDRINUSE else f"cannot be used ({exc.strerror})"
            raise EnvironmentFault(f"port {port} on {host} {why}: pick another with --port") from None
