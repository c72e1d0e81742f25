"""Streamlit's Plotly theme, registered when Plotly is first imported instead of with Streamlit.

Importing Streamlit registers its Plotly template (``pio.templates["streamlit"]``, made the
default): that imports ``plotly.graph_objects`` (and narwhals) and builds a Template of validated
Plotly objects, ~0.25 s of CPU on a quiet machine — close to half of Streamlit's import — in a
dashboard whose first page, the Overview, draws no Plotly figure. :func:`install`, called before
Streamlit is imported, hands Streamlit's import a registration that does nothing and runs the real
one right after ``plotly.graph_objects`` is first imported: before any figure can be created,
which is when a figure reads the default template. Pages that draw Plotly figures (Timeline, Diff)
get Streamlit's theme exactly as before. No streamlit import here (this module is core).
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

THEME_MODULE = "streamlit.elements.lib.streamlit_plotly_theme"
TRIGGER = "plotly.graph_objects"

_deferred: list[Callable[[], None]] = []
_lock = threading.Lock()


def install() -> bool:
    """Defer the theme (in this process); False when it is too late (Streamlit or Plotly's
    figures already imported) and nothing was changed."""
    if any(name in sys.modules for name in ("streamlit", THEME_MODULE, TRIGGER)) or not _theme_module_exists():
        return False
    if not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder())
    return True


def _theme_module_exists() -> bool:
    """Whether this Streamlit still registers its theme where this module expects (looked up
    without importing Streamlit)."""
    spec = importlib.util.find_spec("streamlit")
    roots = list(spec.submodule_search_locations or []) if spec is not None else []
    return any(Path(root, *THEME_MODULE.split(".")[1:]).with_suffix(".py").is_file() for root in roots)


def configure_now() -> None:
    """Run Streamlit's deferred theme registration, once (no-op when nothing was deferred)."""
    with _lock:
        pending = list(_deferred)
        _deferred.clear()
    for configure in pending:
        configure()


class _Finder(importlib.abc.MetaPathFinder):
    """Wraps the loaders of the two modules involved; every other import is left alone."""

    def find_spec(self, name: str, path: Sequence[str] | None, target: ModuleType | None = None) -> Any:
        if name not in (THEME_MODULE, TRIGGER):
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or not hasattr(spec.loader, "exec_module"):
            return spec
        spec.loader = _Loader(spec.loader, name)
        if name == TRIGGER:
            sys.meta_path[:] = [f for f in sys.meta_path if f is not self]  # its work is done
        return spec


class _Loader(importlib.abc.Loader):
    def __init__(self, inner: Any, name: str) -> None:
        self.inner, self.name = inner, name

    def __getattr__(self, attr: str) -> Any:  # get_source, get_resource_reader, … of the real loader
        return getattr(self.inner, attr)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self.inner.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self.inner.exec_module(module)
        if self.name == THEME_MODULE:
            real = getattr(module, "configure_streamlit_plotly_theme", None)
            if callable(real):
                with _lock:
                    _deferred.append(real)
                module.configure_streamlit_plotly_theme = _later  # what Streamlit's import calls
        else:
            configure_now()  # plotly.graph_objects is complete: theme it before any figure exists


def _later() -> None:
    """Stands in for Streamlit's registration during Streamlit's import."""


WARM_UP_DELAY = 2.0  # seconds after the first page was drawn
_warm_up: threading.Timer | None = None


def warm_up(delay: float = WARM_UP_DELAY) -> threading.Thread:
    """Import what the Plotly pages (Timeline, Diff) need — pandas, then plotly.graph_objects with
    Streamlit's theme — in a background thread ``delay`` seconds from now, once per process: the
    Overview needs neither, and the first visit of those pages would otherwise pay for them
    (~0.5-0.8 s). pandas goes first: plotly's narwhals looks pandas up in ``sys.modules``."""
    global _warm_up
    with _lock:
        if _warm_up is None:
            _warm_up = threading.Timer(delay, import_plotly_figures)
            _warm_up.daemon = True
            _warm_up.name = "lastgood-warm-up"
            _warm_up.start()
        return _warm_up


def import_plotly_figures() -> ModuleType:
    """``plotly.graph_objects``, pandas imported first: plotly's narwhals looks pandas up in
    ``sys.modules`` without waiting, so a first Plotly import while another thread (the warm-up)
    is still importing pandas would see it half-made; an ``import`` of pandas waits for it."""
    import pandas  # noqa: F401
    import plotly.graph_objects as go

    return go
