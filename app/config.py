"""Settings from the environment: LASTGOOD_HOME, LASTGOOD_ALLOW_WRITE, LASTGOOD_OPERATOR.

Storage options for cloud stores follow fsspec's own conventions (FSSPEC_S3_*
environment variables, ~/.config/fsspec, the cloud SDKs' variables), so they
need nothing here.
"""

from __future__ import annotations

import getpass
import os
from dataclasses import dataclass
from pathlib import Path

import platformdirs

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
