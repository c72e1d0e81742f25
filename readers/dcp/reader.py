"""Reader of ``torch.distributed.checkpoint`` (DCP) folders: one folder per step, or one DCP folder.

A DCP checkpoint is a folder: ``__<rank>_<n>.distcp`` data files and ``.metadata`` (a pickle of
``Metadata``, written LAST by the coordinator: a folder without it is an unfinished save). Each
``storage_data`` item is a ``(relative_path, offset, length)`` range of a data file, and each range
is itself a complete ``torch.save`` zip — tensors are read through it, by range.

Model: run = the folder holding the step folders (several such folders: several runs); checkpoint =
one step folder (id = its name, step = the number in it); head = the newest step folder (DCP has
no "latest" pointer: a training script that resumes from the newest folder picks it). Listing reads
folder entries only; checks parse ``.metadata`` with the DCP allowlist (never unpickled), compare
every item's extent with its file's size, and at data depth read every item (CRC-32, tensor stats).

Recovery: later step folders are moved aside into ``.lastgood/quarantine/<action>/`` (see
:mod:`lastgood.readers.training_folders.moves`), so the newest folder is the target; undo moves them back.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import IO, TYPE_CHECKING, Any

from lastgood import limits
from lastgood.checks import Check
from lastgood.errors import DecodeError, ReaderError
from lastgood.readers.base import (CheckpointRecord, Finding, Reader, Scan, Status, TensorEntry, TensorSummary,
                                   backend_named)
from lastgood.readers.tensors import dtypes
from lastgood.readers.tensors.dcp import DcpMetadata, DcpStorageItem, DcpTensor, check_extents, parse_dcp_metadata
from lastgood.readers.tensors.errors import TensorsError, UnsafeGlobal
from lastgood.readers.tensors.torchzip import TorchFile
from lastgood.readers.torch_files import torchfile
from lastgood.readers.training_folders.folder import Entry, Folder, Window, as_datetime
from lastgood.readers.training_folders.journal import QUARANTINE
from lastgood.readers.training_folders.listing import scan_folders
from lastgood.readers.training_folders.moves import StepFolder, assign_ids, current_location, split_quarantined

if TYPE_CHECKING:
    from lastgood.readers.journal import RecoveryBackend, RetentionBackend

METADATA = ".metadata"
MAX_DEPTH = 3
MAX_BYTES_ITEM = 1 << 20  # a non-tensor item larger than this is not shown in the state
READ_ERRORS = (TensorsError, OSError, ReaderError)
_NUMBER = re.compile(r"(\d+)(?!.*\d)")
_EXTENT_CHECKS = {"BeyondEnd": Check.SIZE_MISMATCH, "MissingFile": Check.BLOB_MISSING,
                  "BadRelativePath": Check.UNSAFE_PATH}


def _join(folder: str, name: str) -> str:
    return f"{folder}/{name}" if folder else name


class DcpReader(Reader):
    name = "torch-dcp"
    ids_per_run = True  # step folders and file names repeat across runs
    description = "torch.distributed.checkpoint folders (.metadata + .distcp), read without unpickling"

    def __init__(self, url: str, storage_options: Mapping[str, Any] | None = None) -> None:
        super().__init__(url, storage_options)
        self.folder = Folder(url, storage_options)
        self._meta: dict[tuple[str, str], DcpMetadata] = {}
        self._handles: dict[str, IO[bytes]] | None = None

    @classmethod
    def sniff(cls, url: str, storage_options: Mapping[str, Any] | None = None) -> bool:
        try:
            folder = Folder(url, storage_options)
            found = [e for e in folder.walk(max_depth=MAX_DEPTH, keep_hidden=frozenset({METADATA}), limit=5000)
                     if e.name == METADATA and e.kind == "file"]
            return bool(found) and folder.read_range(found[0].rel, 0, 2)[:1] == b"\x80"
        except Exception:  # noqa: BLE001 - "not mine", whatever the reason
            return False

    def recovery(self) -> RecoveryBackend:
        return backend_named("lastgood.readers.dcp.recovery:DcpRecovery", self)

    def retention(self) -> RetentionBackend:
        """Prune: step folders moved by rename into ``.lastgood/archive/`` (:mod:`.retention`)."""
        return backend_named("lastgood.readers.dcp.retention:DcpRetention", self)  # type: ignore[return-value]

    # ---- the layout ------------------------------------------------------------------------

    def _root_name(self) -> str:
        return self.folder.root.rstrip("/").rsplit("/", 1)[-1] or "dcp"

    def _walk(self) -> list[Entry]:
        hidden = frozenset({METADATA})
        entries = self.folder.walk(max_depth=MAX_DEPTH, keep_hidden=hidden)
        entries += self.folder.walk(QUARANTINE, max_depth=MAX_DEPTH + 2, keep_hidden=hidden)
        return entries

    def _layout(self) -> tuple[list[StepFolder], dict[str, list[Entry]]]:
        """Every step folder (in place or moved aside) and the files in each."""
        files: dict[str, list[Entry]] = {}
        for entry in self._walk():
            if entry.kind in ("file", "link"):
                files.setdefault(entry.parent, []).append(entry)
        folders = []
        for rel, inside in files.items():
            if any(e.name == METADATA or e.name.endswith(".distcp") for e in inside):
                folders.append(self._step_folder(rel, inside))
        return assign_ids(folders), files

    def _step_folder(self, rel: str, inside: list[Entry]) -> StepFolder:
        moved = split_quarantined(rel)
        action, home = moved if moved else (None, rel)
        parent, _, name = home.rpartition("/")
        meta = next((e for e in inside if e.name == METADATA), None)
        number = _NUMBER.search(name)
        when = meta.mtime if meta else max((e.mtime or 0.0) for e in inside)
        run = (parent or self._root_name()) if home else self._root_name()
        return StepFolder(run, name or self._root_name(), rel, home,
                          (int(number.group(1)) if number else -1, when or 0.0, name), action, meta is not None)

    def _where(self, record: CheckpointRecord) -> str:
        return current_location(self, record)

    def step_folders(self) -> list[StepFolder]:
        return self._layout()[0]

    def record_of(self, folder: StepFolder, inside: list[Entry] | None = None,
                  parent: str | None = None) -> CheckpointRecord:
        inside = inside if inside is not None else []
        meta = {"files": len(inside)} if inside else {}
        if folder.action:
            meta["moved_aside_by"] = folder.action
        incomplete = not folder.complete
        return CheckpointRecord(
            run_id=folder.run_id, checkpoint_id=folder.checkpoint_id, parent_id=parent,
            step=folder.key[0] if folder.key[0] >= 0 else None, created_at=as_datetime(folder.key[1] or None),
            trigger="save", status=Status.INCOMPLETE if incomplete else Status.OK,
            status_reason="no .metadata: the save did not finish (DCP writes it last)" if incomplete else None,
            size_bytes=sum(e.size or 0 for e in inside) if inside else None, codec="torch-dcp",
            location=folder.rel, metadata=meta)

    # ---- listing ---------------------------------------------------------------------------

    def scan(self, since: str | None = None) -> Scan:
        folders, files = self._layout()
        now = {e.rel: e.stamp for f in folders for e in files.get(f.rel, [])}
        # an unfinished save is listed incomplete; its check says why
        return scan_folders(self.name, since, folders, files, now,
                            lambda folder, parent: self.record_of(folder, files.get(folder.rel, []), parent))

    # ---- metadata ----------------------------------------------------------------------------

    def _metadata(self, record: CheckpointRecord) -> DcpMetadata:
        where = self._where(record)
        entry = self.folder.entry(_join(where, METADATA))
        if entry is None:
            raise DecodeError("no .metadata: the save did not finish (DCP writes it last)", Check.INCOMPLETE)
        key = (where, entry.stamp)
        if key not in self._meta:
            try:
                data = self.folder.read_small(_join(where, METADATA), limits.MAX_CATALOG_FILE_BYTES)
                self._meta = {key: parse_dcp_metadata(data)}  # the last one only: states are read in turn
            except READ_ERRORS as exc:
                raise torchfile.decode_error(exc, ".metadata: ") from None
        return self._meta[key]

    @contextmanager
    def _item(self, record: CheckpointRecord, item: DcpStorageItem) -> Iterator[tuple[IO[bytes], TorchFile]]:
        """One storage item, open as the torch zip it is, inspected."""
        if item.transforms:
            raise DecodeError(f"{item.fqn}: stored with transforms {list(item.transforms)}: not decoded")
        path = _join(self._where(record), item.relative_path)
        if self._handles is not None:  # within _shared_files: one handle per data file
            base = self._handles.get(path) or self._handles.setdefault(path, self.folder.open(path))
            window = Window(base, item.file_offset, item.length)
            yield window, torchfile.inspect(window, item.length)  # type: ignore[arg-type]
            return
        with self.folder.open(path) as base:
            window = Window(base, item.file_offset, item.length)
            yield window, torchfile.inspect(window, item.length)  # type: ignore[arg-type]

    @contextmanager
    def _shared_files(self) -> Iterator[None]:
        """A block reading many items: each data file is opened once (remote: its blocks cached)."""
        if self._handles is not None:
            yield
            return
        self._handles = {}
        try:
            yield
        finally:
            handles, self._handles = self._handles, None
            for handle in handles.values():
                handle.close()

    def unsafe_reason(self, record: CheckpointRecord) -> str | None:
        """Why loading the folder would run code: a pickle (``.metadata`` or an item's) naming a
        global outside the allowlist; None when none does."""
        try:
            meta = self._metadata(record)
        except DecodeError as exc:
            return str(exc) if exc.check == Check.UNSAFE_PICKLE else None
        with self._shared_files():
            for item in meta.storage:
                try:
                    with self._item(record, item):
                        pass
                except UnsafeGlobal as exc:
                    return f"{item.fqn}: {exc.message}"
                except READ_ERRORS:
                    continue
        return None

    # ---- one checkpoint ------------------------------------------------------------------------

    def load_state(self, record: CheckpointRecord) -> Any:
        meta = self._metadata(record)
        items = {(i.fqn, i.offset): i for i in meta.storage}
        state: dict[str, Any] = {}
        scalars = [torchfile.MAX_SCALARS]
        with self._shared_files():
            for fqn, entry in meta.state_dict.items():
                if isinstance(entry, DcpTensor):
                    state[fqn] = self._tensor_value(record, entry, items, scalars)
                else:
                    state[fqn] = self._bytes_value(record, items.get((fqn, None)))
        return state

    def _tensor_value(self, record: CheckpointRecord, entry: DcpTensor, items: Mapping[Any, DcpStorageItem],
                      scalars: list[int]) -> dict[str, Any]:
        value: dict[str, Any] = {"dtype": entry.dtype, "shape": list(entry.size)}
        item = items.get((entry.fqn, entry.chunks[0].offsets)) if len(entry.chunks) == 1 else None
        if item is None or _numel(entry.size) != 1 or scalars[0] <= 0 or not dtypes.is_decodable(entry.dtype):
            return value
        scalars[0] -= 1
        try:
            with self._item(record, item) as (handle, tf):
                found = torchfile.scalar_reader(handle, tf)(tf.tensors[0].ref) if tf.tensors else None
        except READ_ERRORS as exc:
            raise torchfile.decode_error(exc, f"{entry.fqn}: ") from None
        if found is not None:
            value["value"] = found
        return value

    def _bytes_value(self, record: CheckpointRecord, item: DcpStorageItem | None) -> Any:
        if item is None:
            return {"$not_shown": "no storage item"}
        if item.length > MAX_BYTES_ITEM:
            return {"$not_shown": f"{item.length} bytes"}
        try:
            with self._item(record, item) as (handle, tf):
                return torchfile.plain_state(tf.root, torchfile.scalar_reader(handle, tf))
        except READ_ERRORS as exc:
            if isinstance(exc, DecodeError):
                raise
            raise torchfile.decode_error(exc, f"{item.fqn}: ") from None

    def read_blob(self, record: CheckpointRecord) -> bytes:
        try:
            return self.folder.read_small(_join(self._where(record), METADATA), limits.MAX_CATALOG_FILE_BYTES)
        except READ_ERRORS as exc:
            raise torchfile.decode_error(exc, ".metadata: ") from None

    # ---- capability: checks ----------------------------------------------------------------

    def check_checkpoints(self, records: Iterable[CheckpointRecord], read_data: bool = False
                          ) -> Iterator[Finding | TensorSummary]:
        for record in records:
            yield from self._check(record, read_data)

    def _check(self, record: CheckpointRecord, read_data: bool) -> Iterator[Finding | TensorSummary]:
        try:
            meta = self._metadata(record)
        except DecodeError as exc:
            yield Finding(exc.check, "error", str(exc), record.run_id, record.namespace, record.checkpoint_id)
            return
        sizes = {e.rel[len(self._where(record)) + 1:] if self._where(record) else e.rel: e.size or 0
                 for e in self.folder.walk(self._where(record), max_depth=2) if e.kind in ("file", "link")}
        problems = check_extents(meta, sizes)
        for problem in problems:
            check = _EXTENT_CHECKS.get(problem.code, Check.METADATA_INVALID)
            where = f" ({problem.relative_path})" if problem.relative_path else ""
            yield Finding(check, "error", f"{problem.fqn}{where}: {problem.message}",
                          record.run_id, record.namespace, record.checkpoint_id)
        if read_data:
            bad = {p.fqn for p in problems}
            with self._shared_files():
                yield from self._read_items(record, meta, bad)

    def _read_items(self, record: CheckpointRecord, meta: DcpMetadata, bad: set[str]
                    ) -> Iterator[Finding | TensorSummary]:
        found: list[TensorSummary] = []
        for item in meta.storage:
            if item.fqn in bad:
                continue
            entry = meta.state_dict.get(item.fqn)
            name = _tensor_name(entry, item) if isinstance(entry, DcpTensor) else item.fqn
            try:
                with self._item(record, item) as (handle, tf):
                    yield from torchfile.crc_findings(handle, tf, record, prefix=f"{name}: ")
                    for tensor in tf.tensors[:1] if isinstance(entry, DcpTensor) else []:
                        found.append(torchfile.summary(handle, tensor, record, name))
                        yield found[-1]
            except READ_ERRORS as exc:
                yield torchfile.finding(exc, record, f"{name}: ")
        yield from torchfile.tensor_warnings(found, record)

    # ---- capability: tensors ---------------------------------------------------------------

    def tensors(self, record: CheckpointRecord) -> list[TensorEntry]:
        meta = self._metadata(record)
        out = []
        for item in meta.storage:
            entry = meta.state_dict.get(item.fqn)
            if not isinstance(entry, DcpTensor):
                continue
            shape = next((c.sizes for c in entry.chunks if c.offsets == item.offset), entry.size)
            out.append(TensorEntry(_tensor_name(entry, item), entry.dtype, tuple(shape),
                                   dtypes.nbytes(entry.dtype, _numel(shape)),
                                   _join(self._where(record), item.relative_path), None))
        return out

    def read_tensor(self, record: CheckpointRecord, entry: TensorEntry, chunk_bytes: int
                    ) -> Iterator[bytes | memoryview]:
        meta = self._metadata(record)
        for item in meta.storage:
            found = meta.state_dict.get(item.fqn)
            if isinstance(found, DcpTensor) and _tensor_name(found, item) == entry.name:
                try:
                    with self._item(record, item) as (handle, tf):
                        if not tf.tensors:
                            raise DecodeError(f"{entry.name}: the item holds no tensor")
                        yield from torchfile.tensor_chunks(handle, tf.tensors[0], chunk_bytes)
                except READ_ERRORS as exc:
                    if isinstance(exc, DecodeError):
                        raise
                    raise torchfile.decode_error(exc, f"{entry.name}: ") from None
                return
        raise DecodeError(f"no tensor {entry.name!r} in this checkpoint", Check.MISSING)


def _tensor_name(entry: DcpTensor, item: DcpStorageItem) -> str:
    """The FQN; a tensor saved in several chunks: one name per chunk, ``fqn@offsets``."""
    if len(entry.chunks) <= 1:
        return entry.fqn
    return f"{entry.fqn}@{','.join(str(o) for o in item.offset or ())}"


def _numel(shape: Iterable[int]) -> int:
    count = 1
    for dim in shape:
        count *= dim
    return count
