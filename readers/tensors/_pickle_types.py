"""The values a walked pickle is made of (shared by :mod:`.pickle_walk` and its machine)."""

from __future__ import annotations

import _compat_pickle
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .errors import PickleError


Handler = Callable[[str, tuple[Any, ...]], Any]
PersistentLoad = Callable[[Any], Any]


@dataclass(frozen=True)
class Limits:
    """Work bounds; exceeding one raises :class:`PickleTooLarge`."""

    max_ops: int = 20_000_000
    max_memo: int = 5_000_000
    max_container: int = 10_000_000
    max_tuple_depth: int = 1_000


_DEFAULT_LIMITS = Limits()


@dataclass(frozen=True)
class GlobalRef:
    """An allowlisted global named by the pickle (``module.qualname``)."""

    name: str
    handler: Handler = field(compare=False, repr=False)


class PlainObject(dict):  # type: ignore[type-arg]
    """An allowed-but-unknown object as data: ``{"__class__", "args", "state"}``.

    Hashable by identity, so such objects can be dict keys as in the original
    pickle (e.g. DCP's ``MetadataIndex``).
    """

    __hash__ = object.__hash__  # type: ignore[assignment]


class PickledOrderedDict(OrderedDict):  # type: ignore[type-arg]
    """``collections.OrderedDict`` whose pickled ``__dict__`` (BUILD) is kept in ``state``."""

    state: Any = None


def plain(name: str, args: tuple[Any, ...]) -> PlainObject:
    """Handler that records a call as a :class:`PlainObject`."""
    return PlainObject({"__class__": name, "args": args, "state": None})


def value_only(name: str, args: tuple[Any, ...]) -> Any:
    """Handler for globals that are values (dtypes, storage types), never called."""
    raise PickleError("BadCall", f"{name} is not callable")


_MISSING = object()


def _map_name(module: str, name: str) -> str:
    """Apply Python 2 → 3 renames the way ``pickle`` (fix_imports) and torch do."""
    if (module, name) in _compat_pickle.NAME_MAPPING:
        module, name = _compat_pickle.NAME_MAPPING[(module, name)]
    elif module in _compat_pickle.IMPORT_MAPPING:
        module = _compat_pickle.IMPORT_MAPPING[module]
    return f"{module}.{name}"
