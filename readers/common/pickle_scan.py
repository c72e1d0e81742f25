"""What a ``pickle`` payload would import, read without loading it.

LangGraph can store checkpoint values as pickles; unpickling runs code. Here the
opcodes are only walked (``pickletools.genops``) to list the globals the pickle
names, so a finding can say what it would have imported. Split from
lastgood.readers.langgraph.serde.
"""

from __future__ import annotations

import pickletools
from collections.abc import Iterator
from typing import Any

from lastgood.errors import DecodeError

_STRING_OPS = frozenset(
    {"SHORT_BINUNICODE", "BINUNICODE", "BINUNICODE8", "UNICODE", "SHORT_BINSTRING",
     "BINSTRING", "STRING"}
)
_GET_OPS = frozenset({"GET", "BINGET", "LONG_BINGET"})
_PUT_OPS = frozenset({"PUT", "BINPUT", "LONG_BINPUT"})
_SILENT_OPS = frozenset({"PROTO", "FRAME"})


def pickle_globals(data: bytes) -> tuple[list[str], str | None]:
    """The globals a pickle would import (never loading it) and the damage, if any."""
    found: list[str] = []
    try:
        for name in _iter_pickle_globals(data):
            if name not in found:
                found.append(name)
    except Exception as exc:  # noqa: BLE001 - genops raises ValueError and friends
        return found, str(exc) or type(exc).__name__
    return found, None


def _iter_pickle_globals(data: bytes) -> Iterator[str]:
    pushed: list[Any] = []
    memo: dict[Any, Any] = {}
    for op, arg, _pos in pickletools.genops(data):
        name = op.name
        if name in ("GLOBAL", "INST"):
            yield str(arg).replace(" ", ".", 1)
        elif name == "STACK_GLOBAL":
            yield _stack_global(pushed)
            pushed.append(None)
        elif name in _STRING_OPS:
            pushed.append(arg.decode("latin-1") if isinstance(arg, bytes) else arg)
        elif name in _GET_OPS:
            pushed.append(memo.get(arg))
        elif name == "MEMOIZE":
            memo[len(memo)] = pushed[-1] if pushed else None
        elif name in _PUT_OPS:
            memo[arg] = pushed[-1] if pushed else None
        elif name not in _SILENT_OPS:
            pushed.append(None)


def _stack_global(pushed: list[Any]) -> str:
    if len(pushed) >= 2 and isinstance(pushed[-2], str) and isinstance(pushed[-1], str):
        return f"{pushed[-2]}.{pushed[-1]}"
    return "<unresolved STACK_GLOBAL>"


def decode_pickle(data: bytes) -> dict[str, Any]:
    """A marker listing the pickle's globals; the pickle is never loaded."""
    found, problem = pickle_globals(data)
    if problem:
        raise DecodeError(f"pickle: {problem} (globals named before the damage: {found})")
    return {"$unloaded": "pickle", "globals": found, "size": len(data)}
