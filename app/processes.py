"""Child processes that end with their parent (the bottom layer: nothing of Lastgood is imported)."""

from __future__ import annotations

import os
import signal

PR_SET_PDEATHSIG = 1


def end_with_parent(parent: int | None = None) -> None:
    """This process ends (SIGTERM) when its parent does, however the parent ends — a SIGKILL of
    ``lastgood verify`` included (Linux's parent-death signal; elsewhere a no-op). ``parent``: the
    parent's process id, checked afterwards (it may have ended before the signal was set)."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):  # not Linux
        return
    if parent and os.getppid() != parent:
        os._exit(1)
