"""Hide secrets before anything is shown, printed, exported or stored in the index.

One function, ``redact``, for every value that reaches an operator: states,
metadata, ids, run ids, agent names, event and error texts, finding messages,
connection errors. By name (keys like ``api_key``, ``token``, ``password``), by
shape (``sk-…`` keys, bearer tokens, AWS access keys, JWTs, private keys) and by
context (credentials in URLs ``scheme://user:pw@host``, ``KEY=value`` and
``password: value`` pairs, libpq ``password=…``), at any depth — nesting past
lastgood.limits.MAX_DEPTH is replaced, never recursed into. Returns a redacted
copy; the input is not modified. ``strip_url_credentials`` is for URLs that
must stay usable as keys (the index's store list).
"""

from __future__ import annotations

import re
from typing import Any

from lastgood.limits import MAX_DEPTH
from lastgood.records import columns_of, map_column, map_records

MASK = "[redacted]"
TOO_DEEP = "[nested too deeply to show]"

_SECRET_WORDS = (r"api[_-]?key|apikey|secret|token|passw(?:or)?d|passwd|pwd|authorization|"
                 r"auth[_-]?header|access[_-]?key|private[_-]?key|client[_-]?secret|credential|"
                 r"cookie|session[_-]?key|dsn")
SECRET_KEY = re.compile(f"({_SECRET_WORDS})", re.IGNORECASE)
NOT_SECRET_KEY = re.compile(r"^(max_|num_|n_)?tokens(_count|_used|_limit|_total)?$|token_count|token_usage|"
                            r"tokens_(in|out)|input_tokens|output_tokens|total_tokens|max_tokens|"
                            r"prompt_tokens|completion_tokens|reasoning_tokens|cached_tokens",
                            re.IGNORECASE)
SECRET_SHAPES = [
    re.compile(r"\bsk-[A-Za-z0-9_\-]{12,}"),
    re.compile(r"\b(ghp|gho|ghu|ghs|github_pat)_[A-Za-z0-9_]{16,}"),
    re.compile(r"\bxox[abposr]-[A-Za-z0-9\-]{10,}"),
    re.compile(r"\bAKIA[0-9A-Z]{16}\b"),
    # an AWS secret access key: 40 characters of base64 with upper and lower case and digits
    re.compile(r"(?<![A-Za-z0-9/+=])(?=[A-Za-z0-9/+]{0,39}[A-Z])(?=[A-Za-z0-9/+]{0,39}[a-z])"
               r"(?=[A-Za-z0-9/+]{0,39}[0-9])[A-Za-z0-9/+]{40}(?![A-Za-z0-9/+=])"),
    re.compile(r"\bAIza[0-9A-Za-z_\-]{30,}"),
    re.compile(r"\beyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}"),
    re.compile(r"(?i)\bbearer\s+[A-Za-z0-9._\-~+/=]{12,}"),
    re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?(-----END [A-Z ]*PRIVATE KEY-----|$)"),
]
# user:password@ in any URL (postgresql://, https://, redis://, s3://…)
URL_CREDENTIALS = re.compile(r"(?i)\b([a-z][a-z0-9+.\-]{0,30}://)[^\s/@:'\"<>]*:[^\s/@'\"<>]*@")
# user:password@host without a scheme (a URL cut up by an error message)
BARE_CREDENTIALS = re.compile(r"(?<![\w/:])([\w.%\-\[\]]+):([^\s@/'\"<>:]+)@(?=[\w\[])")
# KEY=value, key: value, "key": "value" (environment dumps, libpq DSNs, log lines, JSON text)
SECRET_ASSIGNMENT = re.compile(
    r"(?i)(\b[\w.\-]*(?:" + _SECRET_WORDS + r")[\w.\-]*[\"']?\s*(?:[!=]?=|:)\s*)"
    r"(\"[^\"]*\"|'[^']*'|[^\s,;&\"'}\]]+)")
_ANY = re.compile("|".join([*(p.pattern.replace("(?i)", "") for p in SECRET_SHAPES),
                            r"://", r"[=:]", r"-----BEGIN"]), re.IGNORECASE)


def redact(value: Any, _depth: int = 0) -> Any:
    """A copy of ``value`` with secrets replaced by ``[redacted]`` (keys too)."""
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, (dict, list, tuple)) and _depth >= MAX_DEPTH:
        return TOO_DEEP
    if isinstance(value, dict):
        return {_redact_key(k): _redact_item(k, v, _depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        if _depth + 1 < MAX_DEPTH and (table := columns_of(value)) is not None:
            return map_records(value, table, _redact_key, lambda k, c: _redact_column(k, c, _depth + 2))
        return [redact(v, _depth + 1) for v in value]
    return value


def _redact_column(key: Any, values: list[Any], depth: int) -> list[Any]:
    """One column of records of the same keys (lastgood.records): ``_redact_item`` of each
    value, skipped when no rule can act on the column's text (a million ``ls`` rows in a
    second, not minutes)."""
    if isinstance(key, str) and is_secret_key(key):
        return [_redact_item(key, v, depth) for v in values]
    return map_column(values, _column_might_need_redaction, lambda v: redact(v, depth))


# every REDACTION_ANCHORS entry has a character outside these: text made of them alone (hex ids,
# UUIDs, digests, dates, joined by newlines) needs no redaction, found by one C-level pass
_NO_ANCHOR_BYTES = b"0123456789abcdef-\n "


def _column_might_need_redaction(text: str) -> bool:
    """:func:`might_need_redaction` of a column's joined text, with that pass first."""
    if text.isascii() and not text.lower().encode("ascii").translate(None, _NO_ANCHOR_BYTES):
        return False
    return might_need_redaction(text)


def _redact_key(key: Any) -> Any:
    return redact_text(key) if isinstance(key, str) else key


def _redact_item(key: Any, value: Any, depth: int) -> Any:
    if isinstance(key, str) and is_secret_key(key):
        return _mask_all(value, depth)
    return redact(value, depth)


def _mask_all(value: Any, depth: int) -> Any:
    """Everything under a secret-named key (``secrets: [...]``, ``client_secret: {...}``): every
    leaf masked, the shape (keys, lengths) kept."""
    if _is_leaf(value):
        return MASK if value not in (None, "") else value
    if depth >= MAX_DEPTH:
        return TOO_DEEP
    if isinstance(value, dict):
        return {_redact_key(k): _mask_all(v, depth + 1) for k, v in value.items()}
    return [_mask_all(v, depth + 1) for v in value]


def _is_leaf(value: Any) -> bool:
    return not isinstance(value, (dict, list, tuple))


def is_secret_key(key: str) -> bool:
    return bool(SECRET_KEY.search(key)) and not NOT_SECRET_KEY.search(key)


def redact_text(text: str) -> str:
    """``text`` with secret-shaped substrings, URL credentials and secret assignments masked."""
    if not _ANY.search(text):
        return text
    text = URL_CREDENTIALS.sub(lambda m: m.group(1) + MASK + "@", text)
    text = BARE_CREDENTIALS.sub(lambda m: m.group(1) + ":" + MASK + "@", text)
    for shape in SECRET_SHAPES:
        text = shape.sub(MASK, text)
    return SECRET_ASSIGNMENT.sub(_mask_assignment, text)


# "NoCredentialsError: Unable to locate credentials": an exception's name and its message, not a secret
EXCEPTION_NAME = re.compile(r"^[A-Z]\w*(Error|Exception|Warning|Expired|Missing|NotFound)$")


def _mask_assignment(match: re.Match[str]) -> str:
    prefix, value = match.group(1), match.group(2)
    name = prefix.rstrip(" =:\"'\t").rsplit(".", 1)[-1]
    if NOT_SECRET_KEY.search(name) or EXCEPTION_NAME.match(name) or value.strip("\"'") in ("", MASK):
        return match.group(0)
    quote = value[0] if value[:1] in ("'", '"') else ""
    return f"{prefix}{quote}{MASK}{quote}"


# Every rule of lastgood.redact needs one of these in the (lowercased) text: a secret word
# (secret keys, KEY=value assignments), the start of a secret shape, or '@' / '://' (credentials
# in URLs, user:pw@host). Substring tests are C-fast; text with none of them is left as it is.
# Keep in step with the rules above (tests/test_diff.py compares diff output with redact() on random trees).
REDACTION_ANCHORS = ("key", "secret", "token", "passw", "pwd", "auth", "credential", "cookie", "dsn",
                      "sk-", "ghp_", "gho_", "ghu_", "ghs_", "github_pat_", "xox", "akia", "aiza", "eyj",
                      "bearer", "-----begin", "@", "://")


def might_need_redaction(text: str) -> bool:
    """False when no rule above could act on ``text`` (a C-fast pre-filter for big trees)."""
    lowered = text.lower()
    return any(anchor in lowered for anchor in REDACTION_ANCHORS)
