"""Hide secrets in states before they are shown, printed or exported.

By name (keys like ``api_key``, ``token``, ``password``) and by shape (values
that look like ``sk-…`` keys, bearer tokens, AWS access keys, JWTs, private
keys), at any depth. Returns a redacted copy; the input is not modified.
"""

from __future__ import annotations

import re
from typing import Any

MASK = "[redacted]"

SECRET_KEY = re.compile(
    r"(api[_-]?key|apikey|secret|token|passw(or)?d|passwd|pwd|authorization|auth[_-]?header|"
    r"access[_-]?key|private[_-]?key|client[_-]?secret|credential|cookie|session[_-]?key|dsn)",
    re.IGNORECASE,
)
NOT_SECRET_KEY = re.compile(r"^(max_|num_|n_)?tokens(_count|_used|_limit|_total)?$|token_count|"
                            r"tokens_(in|out)|input_tokens|output_tokens|total_tokens|max_tokens",
                            re.IGNORECASE)
SECRET_SHAPES = [
    re.compile(r"\bsk-[A-Za-z0-9_\-]{12,}"),
    re.compile(r"\b(ghp|gho|ghu|ghs|github_pat)_[A-Za-z0-9_]{16,}"),
    re.compile(r"\bxox[abposr]-[A-Za-z0-9\-]{10,}"),
    re.compile(r"\bAKIA[0-9A-Z]{16}\b"),
    re.compile(r"\bAIza[0-9A-Za-z_\-]{30,}"),
    re.compile(r"\beyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}"),
    re.compile(r"(?i)\bbearer\s+[A-Za-z0-9._\-]{12,}"),
    re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?(-----END [A-Z ]*PRIVATE KEY-----|$)"),
    re.compile(r"(?i)(postgres(ql)?|mysql|mongodb(\+srv)?|redis|amqp)://[^:/\s]+:[^@/\s]+@"),
]


def redact(value: Any) -> Any:
    """A copy of ``value`` with secrets replaced by ``[redacted]``."""
    if isinstance(value, dict):
        return {k: _redact_item(k, v) for k, v in value.items()}
    if isinstance(value, list):
        return [redact(v) for v in value]
    if isinstance(value, tuple):
        return [redact(v) for v in value]
    if isinstance(value, str):
        return redact_text(value)
    return value


def _redact_item(key: Any, value: Any) -> Any:
    if isinstance(key, str) and is_secret_key(key) and _is_leaf(value):
        return MASK if value not in (None, "") else value
    return redact(value)


def _is_leaf(value: Any) -> bool:
    return not isinstance(value, (dict, list, tuple))


def is_secret_key(key: str) -> bool:
    return bool(SECRET_KEY.search(key)) and not NOT_SECRET_KEY.search(key)


def redact_text(text: str) -> str:
    """``text`` with secret-shaped substrings masked."""
    for shape in SECRET_SHAPES:
        text = shape.sub(_mask_match, text)
    return text


def _mask_match(match: re.Match[str]) -> str:
    found = match.group(0)
    if "://" in found:
        return found.split("://", 1)[0] + "://" + MASK + "@"
    return MASK
