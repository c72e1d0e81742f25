"""A safe pickle interpreter: opcodes are simulated, nothing is imported or called.

:func:`walk` decodes the opcodes (:func:`._opdecode.iter_ops`, equivalent to
:func:`pickletools.genops`) and makes two passes.  The first checks every
``GLOBAL``/``INST``/``STACK_GLOBAL`` name against the allowlist and raises
:class:`UnsafeGlobal` before any object is built; the second runs a small
stack machine (:mod:`._machine`) that builds only plain Python data and
re-checks each global as it is used.
A global is represented by a :class:`GlobalRef`; calling it (``REDUCE``,
``NEWOBJ``, ``INST``, ``OBJ``) runs the pure handler the allowlist maps its
name to.  Handlers never import anything.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from ._opdecode import iter_ops
from .errors import PickleError, PickleTooLarge, UnsafeGlobal

from ._pickle_types import (  # noqa: F401 - part of this module's interface
    _DEFAULT_LIMITS, _MISSING, GlobalRef, Handler, Limits, PersistentLoad, PickledOrderedDict, PlainObject,
    _map_name, plain, value_only,
)
from ._machine import Machine


def _genops(data: bytes, limits: Limits) -> Iterator[tuple[str, Any, int]]:
    """Yield (opcode name, argument, position), bounded by ``max_ops``."""
    count = 0
    for item in iter_ops(data):
        count += 1
        if count > limits.max_ops:
            raise PickleTooLarge("PickleTooLarge", f"more than {limits.max_ops} opcodes")
        yield item


# Decoded opcodes are kept between the two passes up to this many (~100 MB).
_CACHE_OPS = 1_000_000


_STRING, _GET, _MEMOIZE, _PUT, _PUSH, _NAMED, _STACK_GLOBAL, _EXT, _NEUTRAL = range(9)
_CATEGORY: dict[str, int] = {
    **dict.fromkeys(("SHORT_BINUNICODE", "BINUNICODE", "BINUNICODE8", "UNICODE", "STRING",
                     "BINSTRING", "SHORT_BINSTRING"), _STRING),
    **dict.fromkeys(("GET", "BINGET", "LONG_BINGET"), _GET),
    **dict.fromkeys(("PUT", "BINPUT", "LONG_BINPUT"), _PUT),
    **dict.fromkeys(("INT", "BININT", "BININT1", "BININT2", "LONG", "LONG1", "LONG4",
                     "BINBYTES", "SHORT_BINBYTES", "BINBYTES8", "BYTEARRAY8", "NONE",
                     "NEWTRUE", "NEWFALSE", "FLOAT", "BINFLOAT", "EMPTY_LIST",
                     "EMPTY_TUPLE", "EMPTY_DICT", "EMPTY_SET", "MARK"), _PUSH),
    **dict.fromkeys(("GLOBAL", "INST"), _NAMED),
    **dict.fromkeys(("EXT1", "EXT2", "EXT4"), _EXT),
    **dict.fromkeys(("FRAME", "PROTO"), _NEUTRAL),
    "MEMOIZE": _MEMOIZE, "STACK_GLOBAL": _STACK_GLOBAL,
}


def check_globals(data: bytes | memoryview, allow: Mapping[str, Handler],
                  limits: Limits = _DEFAULT_LIMITS) -> list[str]:
    """First pass: return every global the pickle names; raise on a forbidden one.

    ``STACK_GLOBAL`` names are resolved by tracking constant strings pushed
    just before it (directly or through the memo); a ``STACK_GLOBAL`` whose
    names are computed any other way is refused as unsafe.
    """
    return _scan(bytes(data), allow, limits, None)


def _scan(data: bytes, allow: Mapping[str, Handler], limits: Limits,
          keep: list[tuple[str, Any, int]] | None) -> list[str]:
    """Body of :func:`check_globals`; appends decoded ops to ``keep`` if given."""
    names: list[str] = []
    below: Any = _MISSING  # the two values known to be on top of the stack
    top: Any = _MISSING
    memo: dict[Any, Any] = {}
    for item in _genops(data, limits):
        if keep is not None and len(keep) <= _CACHE_OPS:
            keep.append(item)
        op, arg, pos = item
        kind = _CATEGORY.get(op)
        if kind == _PUSH:
            below, top = top, _MISSING
        elif kind in (_PUT, _MEMOIZE):
            memo[len(memo) if kind == _MEMOIZE else arg] = top
            if len(memo) > limits.max_memo:
                raise PickleTooLarge("PickleTooLarge", f"more than {limits.max_memo} memo entries")
        elif kind == _STRING:
            below, top = top, arg
        elif kind == _GET:
            below, top = top, memo.get(arg, _MISSING)
        elif kind == _NAMED:
            module, _, name = str(arg).partition(" ")
            names.append(_require(allow, _map_name(module, name)))
            below, top = (top, _MISSING) if op == "GLOBAL" else (_MISSING, _MISSING)
        elif kind == _STACK_GLOBAL:
            if not (isinstance(below, str) and isinstance(top, str)):
                raise UnsafeGlobal("<computed>", f"STACK_GLOBAL at {pos} with non-constant names")
            names.append(_require(allow, _map_name(below, top)))
            below = top = _MISSING
        elif kind == _EXT:
            raise UnsafeGlobal(f"<extension {arg}>", f"copyreg extension code {arg}")
        elif kind != _NEUTRAL:
            below = top = _MISSING
    return names


def _require(allow: Mapping[str, Handler], name: str) -> str:
    """Return ``name`` if allowlisted, else raise :class:`UnsafeGlobal`."""
    if name not in allow:
        raise UnsafeGlobal(name)
    return name


def walk(data: bytes | memoryview, allow: Mapping[str, Handler], *,
         persistent_load: PersistentLoad | None = None,
         limits: Limits = _DEFAULT_LIMITS) -> Any:
    """Reconstruct the object a pickle describes, as plain data, without executing it.

    ``allow`` maps ``module.qualname`` to a handler ``(name, args) -> value``
    (see :func:`plain`, :func:`value_only`).  ``persistent_load(pid)`` turns
    persistent ids into values; without it a persistent id is an error.
    Raises :class:`UnsafeGlobal`, :class:`PickleTooLarge` or :class:`PickleError`.
    """
    raw = bytes(data)
    ops: list[tuple[str, Any, int]] = []
    _scan(raw, allow, limits, ops)

    replay = iter(ops) if len(ops) <= _CACHE_OPS else _genops(raw, limits)
    return Machine(allow, persistent_load, limits).run(replay)
