"""Scan tokens of file-based training stores: what each listed file looked like.

A token is ``tf1:`` + urlsafe-base64 of zlib-compressed JSON ``{"stamps": {rel: stamp}, …}``
(``stamp`` = kind, size and mtime of a file or folder). The next scan compares: files only added
→ an incremental listing of the new checkpoints; anything changed or removed → a full one.
"""

from __future__ import annotations

import base64
import json
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

PREFIX = "tf1:"


def encode(stamps: Mapping[str, str], **extra: Any) -> str:
    raw = json.dumps({"stamps": dict(sorted(stamps.items())), **extra}, separators=(",", ":"),
                     sort_keys=True).encode()
    return PREFIX + base64.urlsafe_b64encode(zlib.compress(raw, 6)).decode()


def decode(token: str | None) -> dict[str, Any] | None:
    """The token's content, or None for no token or one this module did not write."""
    if not token or not token.startswith(PREFIX):
        return None
    try:
        value = json.loads(zlib.decompress(base64.urlsafe_b64decode(token[len(PREFIX):].encode())))
    except (ValueError, zlib.error):
        return None
    if not isinstance(value, dict) or not isinstance(value.get("stamps"), dict):
        return None
    return value


@dataclass
class Delta:
    """How ``now`` differs from the stamps a token recorded."""

    added: set[str] = field(default_factory=set)
    changed: set[str] = field(default_factory=set)
    removed: set[str] = field(default_factory=set)

    @property
    def unchanged(self) -> bool:
        return not (self.added or self.changed or self.removed)


def delta(before: Mapping[str, str], now: Mapping[str, str]) -> Delta:
    out = Delta()
    for key, stamp in now.items():
        if key not in before:
            out.added.add(key)
        elif before[key] != stamp:
            out.changed.add(key)
    out.removed = {key for key in before if key not in now}
    return out
