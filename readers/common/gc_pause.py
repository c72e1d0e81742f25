"""The cyclic garbage collector paused around work that builds many small objects holding no
cycles (a 100k-row listing's tuples, two decoded 10,000-message states): each collection would
rescan the growing heap for nothing."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic GC for the block (restored as it was, also on errors)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
