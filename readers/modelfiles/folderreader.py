"""The reader base the folder formats share: tensors capability, checks driver, listing token.

A subclass lists its checkpoints (``scan``) and says, per record, which files make the
checkpoint (:meth:`FolderReader.parts`: its folder, files, model weights, pickle files). This
base then offers

- ``tensors(record)`` / ``read_tensor(record, entry, chunk_bytes)`` over the model weights
  (headers only; range reads of one tensor in bounded chunks);
- ``check_checkpoints(records, read_data)``: structure problems (empty files, headers, index ↔
  shards ↔ headers, torch zips, pickle globals) and, at data depth, one streamed pass per file
  (:mod:`.datascan`) yielding a ``TensorSummary`` per model tensor beside the findings
  (non-finite values, all-zero weights, CRC-32 and recorded-checksum mismatches, norm jumps).

:class:`RunFolderReader` adds what the formats whose layout module lists runs of checkpoint folders
share (DeepSpeed, Hugging Face Trainer): sniffing, the cached runs, the recovery capability, the
listing token compared with the previous one.
"""

from __future__ import annotations

import json
import math
from abc import abstractmethod
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Generic, Protocol, TypeVar

from lastgood.checks import Check
from lastgood.errors import DecodeError, LastgoodError, ReaderError
from lastgood.readers.base import (CheckpointRecord, Finding, HeadRecord, Reader, Scan, TensorEntry, TensorSummary,
                                   backend_named)
from lastgood.readers.modelfiles import checks
from lastgood.readers.modelfiles.checks import Problem
from lastgood.readers.modelfiles.datascan import FileScan, TensorScan, scan_file
from lastgood.readers.modelfiles.fsio import FILE, Entry, Folder, join
from lastgood.readers.modelfiles.listing import records_table
from lastgood.readers.modelfiles.sums import recorded_sha256
from lastgood.readers.modelfiles.threads import LOCAL_THREADS, REMOTE_THREADS, in_order
from lastgood.readers.modelfiles.weights import ModelFiles, Weights, reason
from lastgood.readers.tensors import dtypes
from lastgood.readers.tensors.errors import TensorsError
from lastgood.readers.tensors.torch_pickle import TORCH_ALLOW
from lastgood.readers.tensors.torchzip import read_tensor_bytes

if TYPE_CHECKING:
    from lastgood.readers.journal import RecoveryBackend

NORM_JUMP_FACTOR = 10.0  # a tensor whose norm grows or shrinks this much since the previous checkpoint
NORM_FLOOR = 1e-6
MAX_CONFIG_BYTES = 16 * 1024 * 1024
TORCH_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt")
NO_STEP = 2**63 - 1  # a checkpoint without a step sorts after every step of its run


@dataclass(frozen=True)
class Parts:
    """The files that make one checkpoint: names inside ``folder`` (a path under the store)."""

    folder: str
    entries: Mapping[str, Entry]
    weights: Weights | None = None
    pickles: tuple[str, ...] = ()
    allow: Mapping[str, Any] | None = None
    problems: tuple[Problem, ...] = field(default=())

    def rel(self, name: str) -> str:
        return join(self.folder, name)


class FolderReader(Reader):
    """Base of the readers of checkpoint folders (see the module docstring)."""

    allow: ClassVar[Mapping[str, Any]] = TORCH_ALLOW
    ids_per_run = True  # step folders and file names repeat across runs

    def __init__(self, url: str, storage_options: Mapping[str, Any] | None = None) -> None:
        super().__init__(url, storage_options)
        self.folder = Folder(url, storage_options)
        self.files = ModelFiles(self.folder, self.allow)
        self._norms: dict[str, tuple[str, dict[str, float]]] = {}

    def parts(self, record: CheckpointRecord) -> Parts:
        """The checkpoint's files (DecodeError when they cannot be listed)."""
        raise NotImplementedError

    def format_problems(self, record: CheckpointRecord, parts: Parts) -> list[Problem]:
        """Checks only this format knows (structure depth)."""
        return []

    def format_data(self, record: CheckpointRecord, parts: Parts) -> list[Problem]:
        """Data-depth checks only this format knows (loss spikes…)."""
        return []

    # ---- tensors capability ----------------------------------------------------------

    def model_tensors(self, parts: Parts) -> list[TensorEntry]:
        """The model's tensors (DecodeError when its files cannot be listed)."""
        return self.files.tensors(parts.weights) if parts.weights is not None else []

    def tensors(self, record: CheckpointRecord) -> list[TensorEntry]:
        return self.model_tensors(self.parts(record))

    def torch_name(self, entry: TensorEntry) -> str:
        """The tensor's path inside its torch file's pickle (a format may list it renamed)."""
        return entry.name

    def read_tensor(self, record: CheckpointRecord, entry: TensorEntry, chunk_bytes: int
                    ) -> Iterator[bytes | memoryview]:
        step = _aligned(chunk_bytes, entry.dtype)
        try:
            with self.folder.open(entry.file) as f:
                if entry.offset is None:
                    raw = read_tensor_bytes(f.fileobj(), self.files.torch_tensor(entry.file, self.torch_name(entry)))
                    for at in range(0, len(raw), step):
                        yield raw[at:at + step]
                    return
                end = entry.offset + entry.nbytes
                for at in range(entry.offset, end, step):
                    chunk = f.read(at, min(step, end - at))
                    if len(chunk) != min(step, end - at):
                        raise DecodeError(f"{entry.file}: cut short inside tensor {entry.name}")
                    yield chunk
        except (OSError, TensorsError, ReaderError) as exc:
            raise DecodeError(f"{entry.file}: {reason(exc)}") from exc

    # ---- checks capability -----------------------------------------------------------

    def check_checkpoints(self, records: Iterable[CheckpointRecord], read_data: bool = False
                          ) -> Iterator[Finding | TensorSummary]:
        for record in records:
            yield from self._check_one(record, read_data)

    def _check_one(self, record: CheckpointRecord, read_data: bool) -> Iterator[Finding | TensorSummary]:
        try:
            parts = self.parts(record)
        except (DecodeError, OSError, ReaderError) as exc:
            yield self.finding(record, Problem(Check.MISSING, "error", f"the checkpoint cannot be read: {exc}"))
            return
        problems = self.structure(record, parts)
        yield from (self.finding(record, p) for p in problems)
        if read_data:
            yield from self._data(record, parts)

    def structure(self, record: CheckpointRecord, parts: Parts) -> list[Problem]:
        problems = list(parts.problems)
        problems += checks.zero_byte(parts.folder, parts.entries)
        if parts.weights is not None:
            problems += checks.weights(self.files, parts.weights, parts.entries)
        problems += checks.pickles(self.files, parts.folder, parts.pickles, parts.entries, parts.allow)
        problems += self.format_problems(record, parts)
        return problems

    def finding(self, record: CheckpointRecord, problem: Problem) -> Finding:
        return Finding(problem.check, problem.severity, problem.message, record.run_id, record.namespace,
                       record.checkpoint_id)

    # ---- data depth --------------------------------------------------------------------

    def _data(self, record: CheckpointRecord, parts: Parts) -> Iterator[Finding | TensorSummary]:
        model = self._model_scans(parts)
        sums = recorded_sha256(self.folder, parts.folder, parts.entries)
        summaries: list[TensorSummary] = []
        for name in sorted(parts.entries):
            entry = parts.entries[name]
            if entry.kind != FILE or entry.size == 0:
                continue
            scanned, problems = self._scan_one(parts, name, entry, model.get(parts.rel(name), []), name in sums)
            yield from (self.finding(record, p) for p in problems)
            if scanned is None:
                continue
            if name in sums and scanned.sha256 is not None and sums[name] != scanned.sha256:
                yield self.finding(record, Problem(Check.SHA256_MISMATCH, "error",
                                                   f"{parts.rel(name)}: sha256 {scanned.sha256[:16]}… differs from "
                                                   f"the recorded {sums[name][:16]}…"))
            is_model = parts.rel(name) in model
            for scan in scanned.tensors:
                yield from (self.finding(record, p) for p in tensor_problems(parts.rel(name), scan, is_model))
                if is_model:
                    summaries.append(summary(record, scan))
        yield from self._strided(record, parts, model)
        yield from summaries
        yield from (self.finding(record, p) for p in self._norm_jumps(record, summaries))
        yield from (self.finding(record, p) for p in self.format_data(record, parts))

    def _model_scans(self, parts: Parts) -> dict[str, list[TensorScan]]:
        """The model's contiguous tensors by file (a weights file that does not list is skipped:
        its structure finding says why)."""
        try:
            listed = self.model_tensors(parts)
        except DecodeError:
            return {}
        out: dict[str, list[TensorScan]] = {}
        for t in listed:
            out.setdefault(t.file, [])
            if t.offset is not None:
                out[t.file].append(TensorScan(t.name, t.dtype, t.shape, t.offset, t.offset + t.nbytes))
        return out

    def _scan_one(self, parts: Parts, name: str, entry: Entry, model: list[TensorScan], recorded: bool
                  ) -> tuple[FileScan | None, list[Problem]]:
        """One streamed pass over a file; its own sha256 only when ``recorded`` (a checksum to compare with)."""
        rel = parts.rel(name)
        problems: list[Problem] = []
        tensors, zip_entries = list(model), None
        if name.endswith(TORCH_SUFFIXES) and (name in parts.pickles or model or rel == _main(parts)):
            try:
                torch = self.files.torch(rel, parts.allow)
            except (TensorsError, OSError, ReaderError) as exc:
                return None, [] if self._reported(parts, name) else [checks.file_problem(rel, exc)]
            if not torch.legacy:
                zip_entries = torch.entries
                if not model:
                    tensors = [TensorScan(t.name, t.ref.dtype, t.ref.shape, *_span(t)) for t in torch.tensors
                               if t.ref.is_contiguous]
        try:
            with self.folder.open(rel, entry.size) as f:
                scanned = scan_file(f, rel, tensors, zip_entries, file_sha256=recorded)
        except (OSError, ReaderError) as exc:
            return None, [Problem(Check.UNDECODABLE, "error", f"{rel} cannot be read: {exc}")]
        if scanned.read != entry.size:
            problems.append(Problem(Check.SIZE_MISMATCH, "error",
                                    f"{rel}: {scanned.read} bytes read, {entry.size} listed (it changed while read)"))
        for crc in scanned.crcs:
            if crc.status == "mismatch":
                problems.append(Problem(Check.CRC_MISMATCH, "error",
                                        f"{rel}: zip entry {crc.entry.name} fails its CRC-32 "
                                        f"(recorded {crc.entry.crc:08x}, read {crc.crc:08x})"))
            elif crc.status == "truncated":
                problems.append(Problem(Check.TORCH_FILE, "error", f"{rel}: zip entry {crc.entry.name} is cut short"))
        return scanned, problems

    def _reported(self, parts: Parts, name: str) -> bool:
        """The light check of a pickle file already failed (its finding is out)."""
        if name not in parts.pickles:
            return False
        try:
            self.files.pickle_check(parts.rel(name), parts.allow)
        except (TensorsError, OSError, ReaderError):
            return True
        return False

    def _strided(self, record: CheckpointRecord, parts: Parts, model: Mapping[str, list[TensorScan]]
                 ) -> Iterator[Finding | TensorSummary]:
        """Model tensors that are strided views of a torch storage (no single byte range)."""
        try:
            listed = [t for t in self.model_tensors(parts) if t.offset is None]
        except DecodeError:
            return
        from lastgood.readers.modelfiles.datascan import MAX_STRIDED_BYTES

        for t in listed:
            scan = TensorScan(t.name, t.dtype, t.shape, 0, t.nbytes)
            if t.nbytes <= MAX_STRIDED_BYTES:
                try:
                    for chunk in self.read_tensor(record, t, 1 << 20):
                        scan.feed(memoryview(chunk))
                except DecodeError as exc:
                    yield self.finding(record, Problem(Check.UNDECODABLE, "error", str(exc)))
                    continue
            yield from (self.finding(record, p) for p in tensor_problems(t.file, scan, True))
            yield summary(record, scan)

    def _norm_jumps(self, record: CheckpointRecord, summaries: list[TensorSummary]) -> list[Problem]:
        """Compared with the previous checkpoint of the run this reader checked (a verification
        walks a run's checkpoints in order)."""
        norms = {s.name: s.norm for s in summaries if s.norm is not None and s.numel > 1}
        previous = self._norms.get(record.run_id)
        self._norms[record.run_id] = (record.checkpoint_id, norms)
        if previous is None:
            return []
        before_id, before = previous
        problems = []
        for name, norm in norms.items():
            old = before.get(name)
            if old is None or max(old, norm) < NORM_FLOOR:
                continue
            ratio = max(old, norm) / max(min(old, norm), NORM_FLOOR)
            if ratio >= NORM_JUMP_FACTOR:
                problems.append(Problem(Check.NORM_JUMP, "warning",
                                        f"tensor {name}: norm {old:.4g} at {before_id} → {norm:.4g} (×{norm / old:.3g})"
                                        if old else f"tensor {name}: norm 0 at {before_id} → {norm:.4g}"))
        return problems

    # ---- shared pieces of a state ---------------------------------------------------------

    def tensor_shapes(self, parts: Parts) -> dict[str, dict[str, Any]]:
        return {t.name: {"dtype": t.dtype, "shape": list(t.shape)} for t in self.model_tensors(parts)}

    def json_file(self, rel: str, limit: int = MAX_CONFIG_BYTES) -> Any:
        """A small JSON file of the checkpoint (DecodeError when it does not parse)."""
        try:
            return json.loads(self.folder.read_small(rel, limit))
        except (ValueError, RecursionError) as exc:
            raise DecodeError(f"{rel} is not valid JSON: {exc}", Check.METADATA_INVALID) from exc
        except (OSError, ReaderError) as exc:
            raise DecodeError(f"{rel} cannot be read: {reason(exc)}") from exc

    def empty_scan(self, token: str) -> Scan:
        return Scan(token=token, full=False, checkpoints=iter(()))


class ListedRun(Protocol):
    run_id: str


RunT = TypeVar("RunT", bound=ListedRun)


class RunFolderReader(FolderReader, Generic[RunT]):
    """A folder reader whose layout lists runs of checkpoint folders (see the module docstring)."""

    recovery_target: ClassVar[str]  # "module:Class" of its recovery backend
    token_version: ClassVar[int] = 1

    def __init__(self, url: str, storage_options: Mapping[str, Any] | None = None) -> None:
        super().__init__(url, storage_options)
        self._runs: dict[str, RunT] | None = None
        self._listed: tuple[str, Sequence[CheckpointRecord]] | None = None  # the last full listing

    @classmethod
    def sniff(cls, url: str, storage_options: Mapping[str, Any] | None = None) -> bool:
        try:
            return cls.sniff_folder(Folder(url, storage_options))
        except (LastgoodError, OSError, ValueError):
            return False

    @staticmethod
    @abstractmethod
    def sniff_folder(folder: Folder) -> bool:
        """The folder holds this format's runs (any error reading it: not this format)."""

    @abstractmethod
    def list_runs(self) -> list[RunT]:
        """Every run of the folder, as the layout lists it now."""

    def recovery(self) -> RecoveryBackend:
        return backend_named(self.recovery_target, self)

    def runs(self, fresh: bool = False) -> dict[str, RunT]:
        if self._runs is None or fresh:
            self.folder.forget()
            self._runs = {run.run_id: run for run in self.list_runs()}
        return self._runs

    def relisting(self, since: str | None, listing: Mapping[str, Any]) -> tuple[str, dict[str, Any] | None, bool]:
        """The token of ``listing``, what ``since`` listed (None: no token of ours; equal to
        ``listing``: nothing changed) and whether everything is listed again (no token, or a run or
        checkpoint vanished)."""
        token = json.dumps({"v": self.token_version, "runs": listing}, sort_keys=True)
        previous = parse_token(since, self.token_version)
        return token, previous, previous is None or vanished(previous, listing)

    def listed(self, token: str, full: bool, records: Sequence[CheckpointRecord], findings: list[Finding],
               heads: list[HeadRecord]) -> Scan:
        """The scan of ``records``; a full listing is kept for :meth:`listed_structure`."""
        self._listed = (token, records) if full else None
        return Scan(token=token, full=full, checkpoints=iter([records_table(records)] if records else []),
                    findings=findings, heads=heads)

    def listed_structure(self, token: str | None) -> tuple[int, list[Finding]] | None:
        """(checkpoints, structure findings) of the last full listing when ``token`` is its token:
        the checks :meth:`check_checkpoints` makes, on the records the scan built (verification
        reads no rows back from the index for them). None: no such listing, or a check raised
        (verification then checks as usual, which decides what that error means)."""
        listed, self._listed = self._listed, None
        if listed is None or listed[0] != token:
            return None
        records = sorted(listed[1], key=_step_order)
        try:
            found = [f for answer in self._structure_all(records) for f in answer]
        except Exception:  # noqa: BLE001 - see above
            return None
        return len(records), found

    def check_checkpoints(self, records: Iterable[CheckpointRecord], read_data: bool = False
                          ) -> Iterator[Finding | TensorSummary]:
        """As :meth:`FolderReader.check_checkpoints`; at structure depth the checkpoints of an object
        store are read ``read_threads()`` at a time (findings in the records' order)."""
        if read_data:
            yield from super().check_checkpoints(records, read_data)
            return
        yield from (f for found in self._structure_all(records) for f in found)

    def _structure_all(self, records: Iterable[CheckpointRecord]) -> Iterator[list[Finding]]:
        threads = self.read_threads()
        if threads > 1:
            try:
                self.runs()  # listed once here, not by each thread
            except (LastgoodError, OSError):
                pass  # each checkpoint's check says what cannot be read
        return in_order(self.structure_findings, records, threads)

    def structure_findings(self, record: CheckpointRecord) -> list[Finding]:
        return [f for f in self._check_one(record, False) if isinstance(f, Finding)]

    def read_threads(self) -> int:
        """Checkpoints read at once: many on an object store (each read waits on a request)."""
        return LOCAL_THREADS if self.folder.local else REMOTE_THREADS


def _step_order(record: CheckpointRecord) -> tuple[str, str, int, str]:
    """Verification's order of checkpoints (app.integrity.verify's ``KEY_ORDER``)."""
    return record.run_id, record.namespace, record.step if record.step is not None else NO_STEP, record.checkpoint_id


def _main(parts: Parts) -> str | None:
    return parts.weights.main_path if parts.weights is not None else None


def _span(t: Any) -> tuple[int, int]:
    from lastgood.readers.tensors.torchzip import tensor_bytes

    span = tensor_bytes(t)
    return span.start, span.start + t.ref.numel * dtypes.itemsize(t.ref.dtype)


def _aligned(chunk_bytes: int, dtype: str) -> int:
    bits = dtypes.bits(dtype) if dtype in dtypes.DTYPE_BITS else 8
    size = bits // 8 if bits % 8 == 0 else 1
    chunk = max(chunk_bytes, size)
    return chunk - chunk % size


def tensor_problems(rel: str, scan: TensorScan, is_model: bool) -> list[Problem]:
    """Non-finite values (any tensor); an all-zero weight (model tensors, floating point, more
    than one value)."""
    stats = scan.stats
    if stats is None:
        return []
    problems = []
    bad = stats.nan + stats.posinf + stats.neginf
    if bad:
        where = "" if is_model else f"{rel}: "
        problems.append(Problem(Check.NON_FINITE, "warning",
                                f"{where}tensor {scan.name} holds {stats.nan} NaN, {stats.posinf} +Inf, "
                                f"{stats.neginf} -Inf of {stats.numel} values"))
    floating = scan.dtype.startswith(("F", "BF"))
    if is_model and floating and stats.numel > 1 and stats.zeros == stats.numel:
        problems.append(Problem(Check.ZERO_TENSOR, "warning", f"tensor {scan.name} holds only zeros ({stats.numel})"))
    return problems


def summary(record: CheckpointRecord, scan: TensorScan) -> TensorSummary:
    stats = scan.stats
    numel = scan.numel
    if stats is None:
        return TensorSummary(record.run_id, record.checkpoint_id, scan.name, scan.dtype, tuple(scan.shape),
                             record.namespace, numel=numel, sha256=scan.sha256)
    finite = stats.finite > 0
    return TensorSummary(
        record.run_id, record.checkpoint_id, scan.name, scan.dtype, tuple(scan.shape), record.namespace,
        numel=stats.numel, nan=stats.nan, posinf=stats.posinf, neginf=stats.neginf, zeros=stats.zeros,
        min=_finite(stats.min) if finite else None, max=_finite(stats.max) if finite else None,
        mean=stats.mean, std=stats.std, norm=stats.l2 if math.isfinite(stats.l2) else None, sha256=scan.sha256)


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


# ---- scan tokens ------------------------------------------------------------------------------


def parse_token(since: str | None, version: int, key: str = "runs") -> dict[str, Any] | None:
    """What a scan token of ``version`` lists under ``key`` (None: no token, or not one of ours)."""
    if not since:
        return None
    try:
        value = json.loads(since)
    except ValueError:
        return None
    if not isinstance(value, dict) or value.get("v") != version or not isinstance(value.get(key), dict):
        return None
    return value[key]


def vanished(previous: Mapping[str, Any], listing: Mapping[str, Any]) -> bool:
    """A run or checkpoint listed before is gone (moved, rotated, deleted): list everything again."""
    for run_id, old in previous.items():
        new = listing.get(run_id)
        if new is None or not isinstance(old, dict) or set(old.get("stamps") or {}) - set(new["stamps"]):
            return True
    return False
