"""Bounds on everything Lastgood reads from a store: sizes, depths, lengths, counts.

A store is data written by someone else, possibly broken, possibly hostile. Every
read, decode, walk and patch in Lastgood is bounded by one of these numbers;
going past one becomes a finding (``Check.TOO_DEEP`` / ``Check.TOO_LARGE``) or a
one-line error, never a hang, a RecursionError or an out-of-memory kill.

At the bottom of the package (imports nothing from Lastgood) so readers use it too.
"""

from __future__ import annotations

import os

# ---- reads ------------------------------------------------------------------------
BLOB_MARGIN_BYTES = 4096  # a blob may be read up to its recorded size plus this
MAX_BLOB_BYTES = 512 * 1024 * 1024  # a blob with no recorded size: at most this
MAX_CATALOG_FILE_BYTES = 256 * 1024 * 1024  # one tail file, part, head, pending marker
MAX_SMALL_FILE_BYTES = 1024 * 1024  # store marker, head pointer, pending marker
MAX_LINE_BYTES = 4 * 1024 * 1024  # one catalog line

# ---- decoded data -------------------------------------------------------------------
MAX_DEPTH = 200  # nesting of a state, metadata or patch value
MAX_STATE_COST = 4_000_000  # nodes (+ 1 per 256 characters of text) in one state
MAX_CHAIN = 200_000  # incremental checkpoints replayed to rebuild one state
MAX_PATCH_OPS = 1_000_000  # operations in one patch

# ---- catalog fields -------------------------------------------------------------------
MAX_ID_CHARS = 1024  # run ids, checkpoint ids, namespaces, agent names, locations
MAX_TEXT_CHARS = 64 * 1024  # triggers, reasons, event messages
MAX_METADATA_CHARS = 1024 * 1024
MIN_YEAR, MAX_YEAR = 1970, 9999
MAX_INT64 = 2**63 - 1

# ---- time -------------------------------------------------------------------------------
SNAPSHOT_SECONDS = 60.0  # a native catalog that keeps changing is re-read for at most this long
SNAPSHOT_STALLED = 3  # re-reads of an unchanged listing whose files cannot be read, then an error
PORT_CHECK_SECONDS = 1.0


# ---- what a refresh does on its own --------------------------------------------------
# stores of at most this many checkpoints get their blob files walked (presence, size) on every
# refresh; beyond it, catalog-level checks only until `lastgood verify STORE`
AUTO_WALK_ENTRIES = 100_000


def auto_walk_entries() -> int:
    """:data:`AUTO_WALK_ENTRIES`, or ``LASTGOOD_AUTO_WALK_ENTRIES`` (0: never walk on a refresh)."""
    raw = os.environ.get("LASTGOOD_AUTO_WALK_ENTRIES", "").strip()
    try:
        return max(0, int(raw)) if raw else AUTO_WALK_ENTRIES
    except ValueError:
        from lastgood.errors import UsageError

        raise UsageError(f"LASTGOOD_AUTO_WALK_ENTRIES must be a number of checkpoints, not {raw!r}") from None
