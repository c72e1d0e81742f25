"""Lastgood's own checkpoint store on any fsspec URL (layout: docs/format.md).

``reader`` lists and reads it, ``writer`` saves into it (what agents use), ``recovery`` moves a run's head
and keeps the journal; ``format``, ``structure`` and ``profile`` hold the layout, the catalog-level checks
and the one-pass profile of a compacted part.

    from lastgood.readers.native import NativeWriter
"""

from __future__ import annotations

from typing import Any

_EXPORTS = {"NativeReader": "lastgood.readers.native.reader", "NativeWriter": "lastgood.readers.native.writer"}


def __getattr__(name: str) -> Any:  # imported on first use: the package's modules stay independent
    if name in _EXPORTS:
        import importlib

        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
