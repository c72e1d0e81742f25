"""Credentials kept out of the index, the command line and the environment.

A store URL may carry a secret (``postgresql://user:PASSWORD@host/db``,
``…?password=…``). Lastgood names every store by its *public* URL — the same
URL with the secret removed — in the index, in the dashboard's store list, in
``ps`` output and in the dashboard's environment. The full URL is kept in one
private file in the home (``credentials.json``, mode 0600 in a 0700 folder)
so the dashboard process, run by the same user, can open the store again.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from lastgood.errors import UsageError

VAULT_NAME = "credentials.json"
SECRET_QUERY_KEYS = frozenset({"password", "passwd", "pwd", "secret", "token", "access_token",
                               "sslpassword", "key", "api_key"})


def split_url(url: str) -> tuple[str, bool]:
    """``(public_url, had_secret)``: ``url`` without its password and secret query values."""
    if "://" not in url:
        return url, False
    scheme = url.split("://", 1)[0]
    try:
        parts = urlsplit(url)
    except ValueError as exc:  # e.g. an unclosed [IPv6] host
        raise UsageError(f"not a valid {scheme}:// URL: {exc}") from None
    if parts.netloc.count("@") > 1:  # where the password ends is a guess: never send a piece of it anywhere
        raise UsageError(f"the {scheme}:// URL has more than one '@' before its host: write an '@' in a "
                         "user name or password as %40")
    netloc, had_password = _netloc_without_password(parts.netloc)
    query, had_secret_query = _query_without_secrets(parts.query)
    if not (had_password or had_secret_query):
        return url, False
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment)), True


def _netloc_without_password(netloc: str) -> tuple[str, bool]:
    userinfo, at, host = netloc.rpartition("@")
    if not at or ":" not in userinfo:
        return netloc, False
    user = userinfo.split(":", 1)[0]
    return (f"{user}@{host}" if user else host), True


def _query_without_secrets(query: str) -> tuple[str, bool]:
    if not query:
        return query, False
    pairs = parse_qsl(query, keep_blank_values=True)
    kept = [(k, v) for k, v in pairs if k.lower() not in SECRET_QUERY_KEYS]
    return (urlencode(kept), True) if len(kept) != len(pairs) else (query, False)


class Vault:
    """The private file mapping public URLs to full ones."""

    def __init__(self, home: str | os.PathLike[str]) -> None:
        self.home = Path(home)
        self.path = self.home / VAULT_NAME

    def remember(self, url: str) -> str:
        """Keep ``url``'s secret (if any); returns its public URL."""
        public, had_secret = split_url(url)
        if had_secret and self._load().get(public) != url:
            self._save({**self._load(), public: url})
        return public

    def put_back(self, public: str, previous: str | None) -> None:
        """Undo a :meth:`remember`: ``public`` maps to ``previous`` again (dropped when None) —
        a store that failed to open keeps no secret on disk."""
        data = self._load()
        if data.get(public) == previous:
            return
        if previous is None:
            data.pop(public, None)
        else:
            data[public] = previous
        self._save(data)

    def kept(self, public: str) -> str | None:
        """The full URL kept for ``public``, if any."""
        return self._load().get(public)

    def resolve(self, public: str) -> str:
        """The full URL for ``public`` (``public`` itself when no secret was kept)."""
        return self._load().get(public, public)

    def _load(self) -> dict[str, str]:
        try:
            data = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return {}
        return {k: v for k, v in data.items() if isinstance(k, str) and isinstance(v, str)} \
            if isinstance(data, dict) else {}

    def _save(self, data: dict[str, str]) -> None:
        self.home.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd, tmp = tempfile.mkstemp(prefix=".credentials-", dir=self.home)  # created 0600
        try:
            with os.fdopen(fd, "w") as handle:
                json.dump(data, handle, sort_keys=True)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
