"""What LangGraph's SQLite and Postgres savers have in common, read the same way.

A dialect (``sqlite.py``, ``postgres.py``) keeps only its connection and its SQL: it opens a
*session* (a connection or a cursor in a read-only transaction), fetches one checkpoint
(decoded: ``channel_values`` merged as the saver merges them), its writes' raw rows, and
checks a batch of checkpoints at data depth. Everything else lives here: the AES key, the
decoding of writes, the state's rebuild (DeltaChannel values from ancestors), the depth
dispatch of checks, the capabilities (recovery, conversation messages, shared decoding).
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, ClassVar

from lastgood.errors import CheckpointNotFound, DecodeError
from lastgood.readers.base import CheckpointRecord, Finding, PendingWrite, Reader, backend_named
from lastgood.readers.langgraph.common import parse_metadata, sort_writes
from lastgood.readers.langgraph.delta import Ancestor, rebuild_delta_values
from lastgood.readers.langgraph.serde import (aes_key_from_env, decode_typed, normalize_message, normalize_state,
                                              shared_decoding)

if TYPE_CHECKING:
    from lastgood.readers.journal import RecoveryBackend, RetentionBackend

Key = tuple[str, str, str]  # thread_id, checkpoint_ns, checkpoint_id
WriteRow = tuple[Any, ...]  # task_id, channel, type, value, task_path, idx


def key_of(record: CheckpointRecord) -> Key:
    return record.run_id, record.namespace or "", record.checkpoint_id


def task_node(task_path: Any) -> str | None:
    """The node of a LangGraph task path (``~__pregel_pull, agent`` -> ``agent``; a ``Send``'s
    ``~__pregel_push, 0, …`` names no node itself: its first name-like part, else None)."""
    if not isinstance(task_path, str):
        return None
    parts = [p.strip() for p in task_path.split(",")[1:]]
    names = [p for p in parts if p and not p.lstrip("-").isdigit() and p not in ("True", "False")
             and not p.startswith("~")]
    return names[0][:80] if names else None


def is_marker(value: Any) -> bool:
    """A value that stands for one that could not be decoded (encrypted without the key, unloaded)."""
    return isinstance(value, dict) and ("$encrypted" in value or "$unloaded" in value)


class LangGraphReader(Reader):
    """The base of LangGraph saver readers (see the module docstring)."""

    recovery_class: ClassVar[str]  # "module:Class" of the dialect's RecoveryBackend
    retention_class: ClassVar[str]  # "module:Class" of the dialect's RetentionBackend

    def __init__(self, url: str, storage_options: Mapping[str, Any] | None = None) -> None:
        super().__init__(url, storage_options)
        key = self.storage_options.get("aes_key")
        self.aes_key: bytes | None = key.encode() if isinstance(key, str) else key
        if self.aes_key is None:
            self.aes_key = aes_key_from_env()

    # ---- what a dialect provides --------------------------------------------------------

    @abstractmethod
    def _session(self) -> AbstractContextManager[Any]:
        """A connection or cursor that reads one consistent snapshot."""

    @abstractmethod
    def _checkpoint(self, session: Any, key: Key) -> tuple[Any, Any, str | None]:
        """(decoded checkpoint, raw metadata, parent id); CheckpointNotFound when the row is gone.
        The checkpoint may be a marker (:func:`is_marker`) when it cannot be decoded here."""

    @abstractmethod
    def _write_rows(self, session: Any, key: Key) -> Iterable[WriteRow]:
        """The raw rows of the checkpoint's writes."""

    @abstractmethod
    def _check_data(self, records: Iterable[CheckpointRecord]) -> Iterator[Finding]:
        """Data depth: every blob and write of ``records`` decoded (never executed)."""

    @abstractmethod
    def check_structure(self, keys: Sequence[Key]) -> list[Finding]:
        """Structure depth for ``keys`` in a few set-based queries, whatever their number."""

    # ---- state ------------------------------------------------------------------------

    def load_state(self, record: CheckpointRecord) -> Any:
        """The checkpoint's channel values (DeltaChannels rebuilt): user channels first, messages
        normalized. A checkpoint this reader cannot decrypt is returned as its marker."""
        key = key_of(record)
        with self._session() as session:
            checkpoint, metadata, parent_id = self._checkpoint(session, key)
            if is_marker(checkpoint):
                return checkpoint
            meta, _problem = parse_metadata(metadata)
            values = rebuild_delta_values(checkpoint, meta, parent_id, self._ancestor_loader(session, key))
        return normalize_state(values)

    def _ancestor_loader(self, session: Any, key: Key) -> Callable[[str], Ancestor | None]:
        def load(checkpoint_id: str) -> Ancestor | None:
            ancestor = (key[0], key[1], checkpoint_id)
            try:
                checkpoint, _meta, parent_id = self._checkpoint(session, ancestor)
            except CheckpointNotFound:
                return None
            if is_marker(checkpoint):
                raise DecodeError(f"ancestor {checkpoint_id} cannot be decoded here (encrypted without the key)")
            return Ancestor(checkpoint, parent_id, self._writes(session, ancestor))
        return load

    def pending_writes(self, record: CheckpointRecord) -> list[PendingWrite]:
        """Decoded writes of the checkpoint; an undecodable value becomes ``{"$undecodable": cause}``."""
        with self._session() as session:
            return self._writes(session, key_of(record))

    def _writes(self, session: Any, key: Key) -> list[PendingWrite]:
        writes = []
        for task_id, channel, type_, value, task_path, idx in self._write_rows(session, key):
            try:
                decoded = decode_typed(type_, value, aes_key=self.aes_key)
            except DecodeError as exc:
                decoded = {"$undecodable": str(exc)}
            writes.append(PendingWrite(task_id, channel, decoded, idx, task_path or ""))
        return sort_writes(writes)

    def decoding_together(self) -> AbstractContextManager[Any]:
        return shared_decoding()

    # ---- the nodes that ran ---------------------------------------------------------------

    def _task_path_rows(self, session: Any, run_ids: list[str]) -> Iterable[tuple[str, str, str, str]]:
        """(thread, namespace, checkpoint id, task path) of the writes of these threads; a dialect
        whose writes have task paths overrides this."""
        return []

    def task_nodes(self, run_ids: Sequence[str]) -> dict[Key, list[str]]:
        """The nodes whose tasks ran from each checkpoint (its writes' task paths, one read of the
        writes table): the nodes that produced its children."""
        found: dict[Key, list[str]] = {}
        with self._session() as session:
            for thread, namespace, checkpoint_id, path in self._task_path_rows(session, list(run_ids)):
                node = task_node(path)
                nodes = found.setdefault((thread, namespace or "", checkpoint_id), [])
                if node and node not in nodes:
                    nodes.append(node)
        return {key: sorted(nodes) for key, nodes in found.items() if nodes}

    # ---- integrity --------------------------------------------------------------------

    def check_checkpoints(self, records: Iterable[CheckpointRecord], read_data: bool = False) -> Iterator[Finding]:
        """Structure depth: codecs and pending errors (set-based); with ``read_data`` every blob and
        write decoded."""
        if not read_data:
            yield from self.check_structure([key_of(r) for r in records])
            return
        yield from self._check_data(records)

    # ---- capabilities -----------------------------------------------------------------

    def recovery(self) -> RecoveryBackend:
        return backend_named(self.recovery_class, self)

    def retention(self) -> RetentionBackend:
        return backend_named(self.retention_class, self)  # type: ignore[return-value]

    def normalize_message(self, value: Any) -> dict[str, Any] | None:
        return normalize_message(value) if isinstance(value, dict) else None
