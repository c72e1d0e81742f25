"""Modules imported on first use: ``pa = lazy_module("pyarrow")`` binds a stand-in that imports
pyarrow the first time one of its attributes is read, then keeps each attribute it handed out
(later reads cost what a module's do).

pyarrow and numpy take ~0.25 s of CPU to import; a command that only reads (``lastgood diff``,
``show``, a reopen that lists nothing new) never touches them. Only module-level code must not
read an attribute at import time (a schema built on first use instead, an annotation left as text).
"""

from __future__ import annotations

import importlib
import importlib.util
import types
from typing import Any


class LazyModule(types.ModuleType):
    """Stands in for the module named ``name`` until an attribute is read."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.__dict__["_lazy_target"] = name

    def __getattr__(self, attr: str) -> Any:
        module = importlib.import_module(self.__dict__["_lazy_target"])
        value = getattr(module, attr)
        if not attr.startswith("__"):
            self.__dict__[attr] = value
        return value


def lazy_module(name: str) -> Any:
    """A stand-in for module ``name`` (typed ``Any``: it is used like the module)."""
    return LazyModule(name)


def installed(name: str) -> bool:
    """True when module ``name`` can be imported (found, not imported)."""
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def require_psycopg(what: str) -> None:
    """Raise MissingDependency (the ``postgres`` extra) for ``what`` when psycopg is not installed."""
    from lastgood.errors import MissingDependency

    if not installed("psycopg"):
        raise MissingDependency("psycopg", "postgres", what)
