"""Where a folder's model weights are, and their tensors — from headers, never the data.

Layouts (as ``save_pretrained`` / ``Trainer`` / PEFT write them):

- one safetensors file (``model.safetensors``, ``adapter_model.safetensors``, or any
  ``*.safetensors``);
- shards named by an index (``model.safetensors.index.json``: ``{"metadata": {"total_size"},
  "weight_map": {tensor: shard file}}``); ``pytorch_model.bin.index.json`` names torch shards;
- a ``torch.save`` zip of the state dict (``pytorch_model.bin``, ``adapter_model.bin``).

:class:`ModelFiles` parses headers, indexes and torch pickles once per file version (path, size,
mtime) and lists tensors as :class:`~lastgood.readers.base.TensorEntry` rows.
"""

from __future__ import annotations

import hashlib
import threading
import zipfile
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from lastgood.errors import DecodeError, ReaderError
from lastgood.readers.base import TensorEntry
from lastgood.readers.modelfiles.fastpaths import HeaderMemo, pickle_globals, read_header
from lastgood.readers.modelfiles.fsio import FILE, Entry, Folder, RangeFile, join
from lastgood.readers.modelfiles.zipdir import data_pickle
from lastgood.readers.tensors import dtypes
from lastgood.readers.tensors.errors import TensorsError, TorchFileError
from lastgood.readers.tensors.safetensors import SafetensorsHeader, SafetensorsIndex, parse_index
from lastgood.readers.tensors.torchzip import TorchFile, TorchTensor, inspect_torch_file, tensor_bytes

SAFETENSORS, TORCH = "safetensors", "torch"
ST_SUFFIX, INDEX_SUFFIX = ".safetensors", ".index.json"
MAX_INDEX_BYTES = 64 * 1024 * 1024
MAX_PICKLE_BYTES = 256 * 1024 * 1024  # a data.pkl read whole to scan its globals
CACHE_SIZE = 512
MAX_SEEN_PICKLES = 100_000
# the names save_pretrained / Trainer / PEFT give a model's weights, the preferred first
MODEL_NAMES = ("model.safetensors.index.json", "model.safetensors", "adapter_model.safetensors",
               "pytorch_model.bin.index.json", "pytorch_model.bin", "adapter_model.bin")
ZIP_MAGIC = (b"PK\x03\x04", b"PK\x05\x06")
_MISSING = object()


@dataclass(frozen=True, slots=True)
class Weights:
    """One model's weights in ``folder`` (a path under the store): ``main`` is the file that
    names them (the safetensors or torch file, or the index of the shards)."""

    folder: str
    main: str
    kind: str
    sharded: bool

    @property
    def main_path(self) -> str:
        return join(self.folder, self.main)


def weights_named(folder: str, entries: Mapping[str, Entry], names: tuple[str, ...] = MODEL_NAMES
                  ) -> Weights | None:
    """The first of ``names`` present in the folder, as :class:`Weights`."""
    for name in names:
        entry = entries.get(name)
        if entry is not None and entry.kind == FILE:
            return weights_of(folder, name)
    return None


def weights_of(folder: str, name: str) -> Weights:
    kind = SAFETENSORS if name.endswith((ST_SUFFIX, ST_SUFFIX + INDEX_SUFFIX)) else TORCH
    return Weights(folder, name, kind, name.endswith(INDEX_SUFFIX))


class ModelFiles:
    """Parsed headers, indexes and torch files of a store, cached per file version."""

    def __init__(self, folder: Folder, allow: Mapping[str, Any]) -> None:
        self.folder = folder
        self.allow = allow
        self._cache: OrderedDict[tuple[str, str, int, float], Any] = OrderedDict()
        self._pickles: dict[int, dict[bytes, Any]] = {}  # allowlist → pickle sha256 → verdict
        self._headers: HeaderMemo = {}  # (file size, header bytes) → verdict
        self._lock = threading.Lock()

    # ---- parsed files (exceptions are cached too: a damaged file is parsed once) -------

    def _cached(self, kind: str, rel: str, parse: Any) -> Any:
        entry = self.folder.entry(rel)
        if entry is None or entry.kind != FILE:
            raise FileNotFoundError(rel)
        key = (kind, rel, entry.size, entry.mtime)
        value = self._cache.get(key, _MISSING)
        if value is _MISSING:
            try:
                value = parse(entry)
            except (TensorsError, ReaderError, OSError, ValueError) as exc:
                value = exc
            with self._lock:  # threads may fill the cache together (FolderReader prefetches)
                self._cache[key] = value
                while len(self._cache) > CACHE_SIZE:
                    self._cache.popitem(last=False)
        if isinstance(value, Exception):
            raise value
        return value

    def header(self, rel: str) -> SafetensorsHeader:
        """A safetensors file's validated header (SafetensorsError with the reference's code)."""
        def parse(entry: Entry) -> SafetensorsHeader:
            with self.folder.open(rel, entry.size) as f:
                return read_header(f.read, f.size, self._headers)
        return self._cached("header", rel, parse)

    def index(self, rel: str) -> SafetensorsIndex:
        """A weights index (SafetensorsError ``Index…`` codes)."""
        return self._cached("index", rel, lambda e: parse_index(self.folder.read_small(rel, MAX_INDEX_BYTES)))

    def torch(self, rel: str, allow: Mapping[str, Any] | None = None) -> TorchFile:
        """A torch file walked in full (tensors and their byte ranges)."""
        def parse(entry: Entry) -> TorchFile:
            with self.folder.open(rel, entry.size) as f:
                return inspect_torch_file(f.fileobj(), f.size, allow=allow or self.allow)
        return self._cached("torch", rel, parse)

    def pickle_check(self, rel: str, allow: Mapping[str, Any] | None = None) -> str:
        """The light check of a torch file: its zip central directory and the globals of its
        pickle (raises TorchFileError / UnsafeGlobal / PickleError). ``"legacy"`` for a pre-1.6
        file (not a zip: not decoded), else ``"ok"``."""
        def parse(entry: Entry) -> str:
            with self.folder.open(rel, entry.size) as f:
                return light_check(f, allow or self.allow, self._pickles.setdefault(id(allow or self.allow), {}))
        return self._cached("pickle", rel, parse)

    # ---- weights ----------------------------------------------------------------------

    def shard_files(self, weights: Weights) -> tuple[str, ...]:
        """The weight files of ``weights``, names inside its folder (an index's shards)."""
        if not weights.sharded:
            return (weights.main,)
        return self.index(weights.main_path).files

    def tensors(self, weights: Weights) -> list[TensorEntry]:
        """Every tensor of the model (DecodeError when a file cannot be listed)."""
        try:
            return list(self._tensors(weights))
        except (TensorsError, OSError, ReaderError) as exc:
            raise DecodeError(f"{weights.main}: {_reason(exc)}") from exc

    def _tensors(self, weights: Weights) -> Iterator[TensorEntry]:
        if weights.sharded:
            mapping = self.index(weights.main_path).weight_map
            wanted: dict[str, set[str]] = {}
            for name, shard in mapping.items():
                wanted.setdefault(shard, set()).add(name)
            for shard in sorted(wanted):
                found = self.file_tensors(weights.kind, join(weights.folder, shard))
                yield from (t for t in found if t.name in wanted[shard])
            return
        yield from self.file_tensors(weights.kind, weights.main_path)

    def file_tensors(self, kind: str, rel: str) -> list[TensorEntry]:
        if kind == SAFETENSORS:
            header = self.header(rel)
            return [TensorEntry(t.name, t.dtype, t.shape, t.nbytes, rel, t.begin) for t in header.tensors]
        parsed = self.torch(rel)
        if parsed.legacy:
            raise TorchFileError("LegacyFormat", "a pre-1.6 (non-zip) torch file: its tensors are not read")
        return [torch_entry(rel, t) for t in parsed.tensors]

    def torch_tensor(self, rel: str, name: str) -> TorchTensor:
        for tensor in self.torch(rel).tensors:
            if tensor.name == name:
                return tensor
        raise DecodeError(f"{rel} has no tensor {name!r}")


def torch_entry(rel: str, tensor: TorchTensor) -> TensorEntry:
    ref = tensor.ref
    span = tensor_bytes(tensor)
    nbytes = ref.numel * dtypes.itemsize(ref.dtype) if dtypes.bits(ref.dtype) % 8 == 0 else 0
    return TensorEntry(tensor.name, ref.dtype, ref.shape, nbytes, rel, span.start if span.contiguous else None)


def light_check(f: RangeFile, allow: Mapping[str, Any], seen: dict[bytes, Any] | None = None) -> str:
    """Central directory present and readable, ``<prefix>/data.pkl`` there, its globals allowed.
    ``seen``: verdicts by the pickle's sha256 (the same pickle in many checkpoints is scanned once)."""
    head = f.read(0, 512)
    if head[:4] not in ZIP_MAGIC:
        if _legacy(head):
            return "legacy"
        raise TorchFileError("NotATorchFile", "neither a torch zip nor a legacy torch file")
    data = data_pickle(f, MAX_PICKLE_BYTES)
    if data is None:
        data = _zipfile_pickle(f)
    if seen is None:
        pickle_globals(data, allow)
        return "ok"
    key = hashlib.sha256(data).digest()
    verdict = seen.get(key)
    if verdict is None:
        try:
            pickle_globals(data, allow)
            verdict = "ok"
        except TensorsError as exc:
            verdict = exc
        if len(seen) > MAX_SEEN_PICKLES:
            seen.clear()
        seen[key] = verdict
    if isinstance(verdict, Exception):
        raise verdict
    return "ok"


def _zipfile_pickle(f: RangeFile) -> bytes:
    """``data.pkl`` through ``zipfile`` (its error codes: TruncatedZip, BadZip…)."""
    try:
        with zipfile.ZipFile(f.fileobj()) as archive:
            infos = archive.infolist()
            pkl = _data_pkl(infos)
            if pkl.file_size > MAX_PICKLE_BYTES:
                raise TorchFileError("PickleTooLarge", f"{pkl.filename} is {pkl.file_size} bytes")
            return archive.read(pkl)
    except zipfile.BadZipFile as exc:
        text = str(exc)
        code = "TruncatedZip" if "not a zip file" in text or "Truncated" in text else "BadZip"
        if "CRC" in text:
            code = "CrcMismatch"
        raise TorchFileError(code, f"zip central directory unreadable: {text}") from None
    except (EOFError, ValueError, NotImplementedError, RuntimeError) as exc:
        raise TorchFileError("BadZip", f"zip unreadable: {exc}") from None


def _data_pkl(infos: list[zipfile.ZipInfo]) -> zipfile.ZipInfo:
    first = infos[0].filename if infos else ""
    prefix = first.split("/", 1)[0] if "/" in first else ""
    for info in infos:
        if prefix and info.filename == f"{prefix}/data.pkl":
            return info
    raise TorchFileError("NoDataPickle", "no <name>/data.pkl entry")


def _legacy(head: bytes) -> bool:
    magic = b"\x8a\x0al\xfc\x9cF\xf9 j\xa8P\x19"
    return (len(head) >= 14 and head[0] == 0x80 and head[2:14] == magic) or head[257:262] == b"ustar"


def _reason(exc: BaseException) -> str:
    if isinstance(exc, TensorsError):
        return f"{exc.code}: {exc.message}"
    if isinstance(exc, FileNotFoundError):
        return f"{exc.args[0] if exc.args else 'a file'} is missing"
    return str(exc)


def reason(exc: BaseException) -> str:
    """One line saying why a file could not be read (``Code: message`` for the tensor library's
    errors)."""
    return _reason(exc)
