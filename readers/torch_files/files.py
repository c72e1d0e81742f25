"""Torch files of a store folder, opened by range and inspected once (an LRU of the inspections), and
the base of the readers whose checkpoints are each one such file (:class:`TorchFileReader`)."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import IO, Any

from lastgood import limits
from lastgood.checks import Check
from lastgood.errors import DecodeError, ReaderError
from lastgood.readers.base import CheckpointRecord, Finding, Reader, TensorSummary
from lastgood.readers.tensors.errors import TensorsError, TorchFileError
from lastgood.readers.tensors.torchzip import TorchFile
from lastgood.readers.torch_files import torchfile
from lastgood.readers.training_folders.folder import Folder

ZIP_MAGIC = (b"PK\x03\x04", b"PK\x05\x06")
LEGACY_MAGIC = b"\x80\x02\x8a\x0a"  # pickled LONG1 magic number of the pre-zip format
CACHE_SIZE = 16
READ_ERRORS = (TensorsError, OSError, ReaderError)


def looks_like_torch(head: bytes) -> bool:
    """A torch zip's or a legacy torch file's first bytes."""
    return head[:4] in ZIP_MAGIC or head[:4] == LEGACY_MAGIC


def location(record: CheckpointRecord) -> str:
    """The torch file a record names (relative to the store root)."""
    if not record.location:
        raise DecodeError("the checkpoint names no file", Check.MISSING)
    return record.location


class TorchFiles:
    """Inspections of the torch files of ``folder``, kept for the last few files read."""

    def __init__(self, folder: Folder) -> None:
        self.folder = folder
        self._cache: OrderedDict[tuple[str, str], TorchFile] = OrderedDict()

    @contextmanager
    def opened(self, rel: str) -> Iterator[tuple[IO[bytes], TorchFile]]:
        """The file open for reading, with its inspection (raises what inspecting raises)."""
        with self.folder.open(rel) as handle:
            yield handle, self.inspect(rel, handle)

    def inspect(self, rel: str, handle: IO[bytes]) -> TorchFile:
        handle.seek(0, 2)
        size = handle.tell()
        entry = self.folder.entry(rel)
        key = (rel, f"{size}:{entry.mtime if entry else ''}")
        found = self._cache.get(key)
        if found is not None:
            self._cache.move_to_end(key)
            return found
        if size == 0:
            raise TorchFileError("TruncatedZip", "the file is empty")
        found = torchfile.inspect(handle, size)
        self._cache[key] = found
        while len(self._cache) > CACHE_SIZE:
            self._cache.popitem(last=False)
        return found

    def load_state(self, record: CheckpointRecord) -> Any:
        """The record's file as plain data (tensors by dtype and shape, small ones with their value)."""
        try:
            with self.opened(location(record)) as (handle, tf):
                if tf.legacy:
                    raise DecodeError(torchfile.LEGACY_MESSAGE, Check.TORCH_FILE)
                return torchfile.plain_state(tf.root, torchfile.scalar_reader(handle, tf))
        except READ_ERRORS as exc:
            if isinstance(exc, DecodeError):
                raise
            raise torchfile.decode_error(exc) from None

    def read_blob(self, record: CheckpointRecord) -> bytes:
        try:
            return self.folder.read_small(location(record), limits.MAX_BLOB_BYTES)
        except READ_ERRORS as exc:
            raise torchfile.decode_error(exc) from None


class TorchFileReader(Reader):
    """A reader whose checkpoints are each one ``torch.save`` file of its folder (``self.files``):
    the state, the blob and the checks of the file, read the same way for every such format."""

    files: TorchFiles

    def load_state(self, record: CheckpointRecord) -> Any:
        return self.files.load_state(record)

    def read_blob(self, record: CheckpointRecord) -> bytes:
        return self.files.read_blob(record)

    def check_checkpoints(self, records: Iterable[CheckpointRecord], read_data: bool = False
                          ) -> Iterator[Finding | TensorSummary]:
        for record in records:
            yield from self._check(record, read_data)

    def _check(self, record: CheckpointRecord, read_data: bool) -> Iterator[Finding | TensorSummary]:
        try:
            with self.files.opened(location(record)) as (handle, tf):
                if tf.legacy:
                    yield torchfile.legacy_finding(record)
                    return
                yield from self._file_findings(record, tf)
                if read_data:
                    yield from torchfile.crc_findings(handle, tf, record)
                    yield from self._summaries(handle, tf, record)
        except READ_ERRORS as exc:
            yield torchfile.finding(exc, record)

    def _file_findings(self, record: CheckpointRecord, tf: TorchFile) -> Iterator[Finding]:
        """What the format checks in a readable file beyond the torch zip itself (nothing here)."""
        return iter(())

    def _summaries(self, handle: IO[bytes], tf: TorchFile, record: CheckpointRecord
                   ) -> Iterator[Finding | TensorSummary]:
        """The data check's tensor summaries and their findings."""
        return torchfile.summaries(handle, tf, record)
