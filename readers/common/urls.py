"""URLs as they may be shown: without credentials (a password, a token in the query), and
errors from storage libraries as one line with the URL's secrets masked."""

from __future__ import annotations

import re


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    for secret in _url_secrets(str(exc)):
        text = text.replace(secret, "***")
    return f"{type(exc).__name__}: {text}"[:300]


def _url_secrets(text: str) -> list[str]:
    return [m.group(1) for m in re.finditer(r"://[^:/@\s]+:([^@/\s]+)@", text)]


def display_url(url: str) -> str:
    """``url`` without credentials, safe to show or log."""
    if "://" not in url:
        return url
    scheme, rest = url.split("://", 1)
    if scheme.lower() in ("postgresql", "postgres") and "@" in rest:
        rest = rest.rsplit("@", 1)[1]  # a DSN's path has no '@': all before the last is credentials
    authority, sep, tail = rest.partition("/")
    if "@" in authority:
        authority = authority.rsplit("@", 1)[1]
    query_free = tail
    for marker in ("password=", "secret=", "token=", "key="):
        if marker in query_free.lower():
            query_free = query_free.split("?", 1)[0]
    return f"{scheme}://{authority}{sep}{query_free}"


def is_postgres_url(url: str) -> bool:
    return url.lower().startswith(("postgresql://", "postgres://"))
