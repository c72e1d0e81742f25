"""Lastgood's exception tree. Every message is written for the operator.

    LastgoodError                  base; the CLI prints it as one line, pages as st.error
    ├── UsageError               bad arguments (CLI exit 2)
    │   └── NothingToDo          a recovery whose target is already the state (CLI: exit 0, says so)
    ├── StoreNotFound            the URL points at nothing (exit 2)
    ├── ReaderError              a store could not be read as its format (exit 2)
    │   ├── MissingDependency    an optional package is needed; names the extra to install
    │   ├── UnsafePath           a blob path leaves the store root (a symlink out, ../)
    │   ├── NotAFile             a store path is a FIFO, device, folder…: refused unopened
    │   ├── TooLarge             a file or value is beyond lastgood.limits
    │   └── DecodeError          one checkpoint's bytes could not be decoded (becomes a finding)
    ├── CheckpointNotFound       no checkpoint matches an id or prefix (exit 2)
    │   └── AmbiguousCheckpoint  a prefix matches several checkpoints (exit 2)
    ├── ConflictError            the head moved since it was read (exit 1)
    ├── WriteDisabled            a write action while writes are switched off (exit 2)
    └── EnvironmentFault         the machine said no: disk full, home not a folder,
                                 port busy, permission denied (exit 2)
"""

from __future__ import annotations

from lastgood.checks import Check


class LastgoodError(Exception):
    """Base of every error Lastgood raises on purpose."""

    exit_code = 2


class UsageError(LastgoodError):
    """The command was called wrongly."""


class NothingToDo(UsageError):
    """A recovery action that would change nothing (its target is already the run's head).

    Pages show it like any refusal; the CLI reports it and exits 0, so a script that puts a run
    back on a checkpoint can run again safely (a dry run of it previews "no change")."""

    def __init__(self, message: str, *, run_id: str, namespace: str, checkpoint_id: str) -> None:
        super().__init__(message)
        self.run_id, self.namespace, self.checkpoint_id = run_id, namespace, checkpoint_id


class StoreNotFound(LastgoodError):
    """The store URL does not exist."""


class ReaderError(LastgoodError):
    """The store exists but cannot be read as the chosen format."""


class NotRecognised(ReaderError):
    """No reader recognises what is at the URL (a store a prune emptied may still be in the index)."""


class MissingDependency(ReaderError):
    """An optional dependency is missing; the message names the extra."""

    def __init__(self, package: str, extra: str, purpose: str) -> None:
        super().__init__(
            f"{purpose} needs the Python package '{package}': "
            f"pip install 'lastgood[{extra}]'"
        )
        self.package = package
        self.extra = extra


class UnsafePath(ReaderError):
    """A path named inside a store points outside the store root."""


class NotAFile(ReaderError):
    """A path inside a store is not a regular file (FIFO, device, socket, folder)."""


class TooLarge(ReaderError):
    """A file or decoded value is larger than Lastgood's bounds (lastgood.limits)."""


class DecodeError(ReaderError):
    """A checkpoint's payload could not be decoded into plain data.

    ``check`` names the kind of damage, so verification classifies it without
    parsing the message."""

    def __init__(self, message: str, check: Check = Check.UNDECODABLE) -> None:
        super().__init__(message)
        self.check = check


class CheckpointNotFound(LastgoodError):
    """No checkpoint matches the id or prefix."""


class AmbiguousCheckpoint(CheckpointNotFound):
    """An id prefix matches more than one checkpoint."""


class ConflictError(LastgoodError):
    """Optimistic concurrency failed: the head is not the one expected."""

    exit_code = 1


class WriteDisabled(LastgoodError):
    """A write action was requested but writes are not enabled."""


class EnvironmentFault(LastgoodError):
    """The operating system refused: a full disk, a home that is a file, a busy port."""


def as_fault(exc: BaseException) -> LastgoodError:
    """An unexpected exception as a one-line operator error (exit 2): the machine's
    faults (disk full, permissions, a home that is a file) name their cause;
    anything else is reported as a bug, still in one line."""
    import errno

    if isinstance(exc, LastgoodError):
        return exc
    if "cannot rollback" in str(exc) and exc.__context__ is not None:
        return as_fault(exc.__context__)  # the failure that made the rollback fail
    if isinstance(exc, OSError):
        where = f" ({exc.filename})" if getattr(exc, "filename", None) else ""
        if exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
            return EnvironmentFault(f"out of disk space{where}: {exc.strerror}; the index was left as it was")
        return EnvironmentFault(f"{exc.strerror or exc}{where}")
    if type(exc).__module__.startswith(("duckdb", "_duckdb")):
        text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        if any(word in text.lower() for word in ("no space", "disk", "file too large", "write")):
            return EnvironmentFault(f"the index could not be written: {text}; the index was left as it was")
        return EnvironmentFault(f"the index failed: {text}")
    if isinstance(exc, MemoryError):
        return EnvironmentFault("out of memory")
    return LastgoodError(f"unexpected error (a bug, please report it): {type(exc).__name__}: {exc}")
