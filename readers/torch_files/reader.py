"""Reader of ``torch.save`` files: a folder of them (or one file), on any fsspec URL.

Model: run = a folder (its files in modification order), or a numbered file series of a folder
(``ckpt_100.pt``, ``ckpt_200.pt`` → run ``ckpt_*``, step = the number, head = the highest);
checkpoint = one file (id = its name). The listing reads no file contents (names, sizes, mtimes);
checks open each zip by range: the central directory (missing: the save did not finish), the
pickle walked with the allowlist (a global outside it is an error naming it, and nothing of that
file is decoded), the storages it names; at data depth every entry's CRC-32 and every tensor's
statistics. The legacy (pre-1.6, non-zip) format is recognised and reported, not decoded.

Read-only: a folder of torch files has no resume pointer of its own to move.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from lastgood.checks import Check
from lastgood.errors import DecodeError
from lastgood.readers.base import CheckpointRecord, Finding, HeadRecord, Scan, TensorEntry
from lastgood.readers.torch_files import torchfile
from lastgood.readers.torch_files.files import READ_ERRORS, TorchFileReader, TorchFiles, looks_like_torch
from lastgood.readers.torch_files.files import location as _location
from lastgood.readers.training_folders import stamps
from lastgood.readers.training_folders.tables import columns_table, json_text, micros
from lastgood.readers.training_folders.folder import Entry, Folder

SUFFIXES = (".pt", ".pth", ".bin", ".ckpt")
MAX_DEPTH = 3
SNIFF_ENTRIES = 2000
# files that make a folder another format's (the readers of those formats claim it)
FOREIGN_NAMES = frozenset({"trainer_state.json", "latest", ".metadata", "_CHECKPOINT_METADATA",
                           "adapter_config.json", "config.json", "model.safetensors.index.json",
                           "commit_success.txt"})
FOREIGN_SUFFIXES = (".safetensors", ".distcp", ".ckpt", ".py")
SERIES = re.compile(r"^(?P<prefix>.*?)(?P<number>\d+)$")


@dataclass(frozen=True, slots=True)
class Placed:
    """A torch file, placed in its run."""

    entry: Entry
    run_id: str
    number: int | None  # its number in a file series


def is_torch_name(name: str) -> bool:
    return name.lower().endswith(SUFFIXES)


def place(files: Iterable[Entry], root_name: str) -> dict[str, list[Placed]]:
    """Runs and their files in order: a numbered series (2+ files of one folder whose names differ
    only in their trailing number) is a run; the other files are their folder's run."""
    files = list(files)
    keys = {}
    for entry in files:
        match = SERIES.match(entry.name.rsplit(".", 1)[0])
        keys[entry.rel] = (entry.parent, match["prefix"], int(match["number"])) if match else None
    counts = Counter((k[0], k[1]) for k in keys.values() if k)
    runs: dict[str, list[Placed]] = {}
    for entry in files:
        key = keys[entry.rel]
        if key and counts[(key[0], key[1])] >= 2:
            run = f"{key[0]}/{key[1] or ''}*" if key[0] else f"{key[1] or root_name + '/'}*"
            runs.setdefault(run, []).append(Placed(entry, run, key[2]))
        else:
            run = entry.parent or root_name
            runs.setdefault(run, []).append(Placed(entry, run, None))
    for listed in runs.values():
        listed.sort(key=lambda p: (p.number if p.number is not None else -1, p.entry.mtime or 0.0, p.entry.name))
    return runs


class TorchFilesReader(TorchFileReader):
    name = "torch-files"
    ids_per_run = True  # step folders and file names repeat across runs
    description = "Files written by torch.save (.pt, .pth, .bin), read without unpickling"
    read_only_reason = ("a folder of torch.save files has no resume pointer to move: copy the file "
                        "to resume from yourself")

    def __init__(self, url: str, storage_options: Mapping[str, Any] | None = None) -> None:
        super().__init__(url, storage_options)
        self.folder = Folder(url, storage_options, allow_file=True)
        self.files = TorchFiles(self.folder)

    @classmethod
    def sniff(cls, url: str, storage_options: Mapping[str, Any] | None = None) -> bool:
        try:
            folder = Folder(url, storage_options, allow_file=True)
            entries = folder.walk(max_depth=MAX_DEPTH, keep_hidden=frozenset({".metadata"}), limit=SNIFF_ENTRIES)
            if folder.only is None and any(e.name in FOREIGN_NAMES or e.name.lower().endswith(FOREIGN_SUFFIXES)
                                           for e in entries):
                return False
            torch = sorted(e.rel for e in entries if e.kind == "file" and is_torch_name(e.name))
            return bool(torch) and looks_like_torch(folder.read_range(torch[0], 0, 16))
        except Exception:  # noqa: BLE001 - "not mine", whatever the reason
            return False

    # ---- listing ---------------------------------------------------------------------------

    def _root_name(self) -> str:
        return self.folder.root.rstrip("/").rsplit("/", 1)[-1] or "files"

    def _listed(self) -> tuple[list[Entry], list[Finding]]:
        found, findings = [], []
        for entry in self.folder.walk(max_depth=MAX_DEPTH):
            if entry.kind == "dir" or not is_torch_name(entry.name):
                continue
            if entry.kind == "other":
                findings.append(Finding(Check.NOT_A_FILE, "warning", f"{entry.rel} is not a regular file: skipped"))
                continue
            found.append(entry)
        return found, findings

    def scan(self, since: str | None = None) -> Scan:
        files, findings = self._listed()
        now = {e.rel: e.stamp for e in files}
        token = stamps.encode(now, reader=self.name)
        before = stamps.decode(since)
        if before is not None and before.get("reader") == self.name:
            change = stamps.delta(before["stamps"], now)
            if change.unchanged:
                return Scan(token, False, iter(()), findings=[])
            runs = place(files, self._root_name())
            if not change.changed and not change.removed and self._same_runs(before["stamps"], runs):
                touched = {p.run_id for listed in runs.values() for p in listed if p.entry.rel in change.added}
                return self._scan_of({r: runs[r] for r in touched}, token, False, findings)
        return self._scan_of(place(files, self._root_name()), token, True, findings)

    def _same_runs(self, old: Mapping[str, str], runs: dict[str, list[Placed]]) -> bool:
        """True when every file listed before is in the same run now (an added file may turn a
        lone file into a series: then the listing is read again in full)."""
        was = place([_entry_of(rel, stamp) for rel, stamp in old.items()], self._root_name())
        run_of = {p.entry.rel: p.run_id for listed in runs.values() for p in listed}
        return all(run_of.get(p.entry.rel) == p.run_id for listed in was.values() for p in listed)

    def _scan_of(self, runs: dict[str, list[Placed]], token: str, full: bool, findings: list[Finding]) -> Scan:
        columns: dict[str, list[Any]] = {name: [] for name in LISTED}
        heads = []
        for run_id, listed in sorted(runs.items()):
            _add_rows(columns, run_id, listed)
            if listed and listed[-1].number is not None:
                heads.append(HeadRecord(run_id, listed[-1].entry.name))
        rows = len(columns["checkpoint_id"])
        columns.update(trigger=["save"] * rows, codec=["torch"] * rows)
        return Scan(token, full, iter([columns_table(columns, rows)]) if rows else iter(()),
                    findings=findings, heads=heads)

    # one checkpoint (state, blob) and its checks: TorchFileReader

    # ---- capability: tensors ---------------------------------------------------------------

    def tensors(self, record: CheckpointRecord) -> list[TensorEntry]:
        try:
            with self.files.opened(_location(record)) as (_handle, tf):
                if tf.legacy:
                    raise DecodeError(torchfile.LEGACY_MESSAGE, Check.TORCH_FILE)
                return torchfile.tensor_entries(tf, _location(record))
        except READ_ERRORS as exc:
            if isinstance(exc, DecodeError):
                raise
            raise torchfile.decode_error(exc) from None

    def read_tensor(self, record: CheckpointRecord, entry: TensorEntry, chunk_bytes: int
                    ) -> Iterator[bytes | memoryview]:
        try:
            with self.files.opened(_location(record)) as (handle, tf):
                if tf.legacy:
                    raise DecodeError(torchfile.LEGACY_MESSAGE, Check.TORCH_FILE)
                yield from torchfile.tensor_chunks(handle, torchfile.find_tensor(tf, entry.name), chunk_bytes)
        except READ_ERRORS as exc:
            if isinstance(exc, DecodeError):
                raise
            raise torchfile.decode_error(exc) from None


LISTED = ("run_id", "checkpoint_id", "parent_id", "step", "created_at", "size_bytes", "location", "metadata")


def _add_rows(columns: dict[str, list[Any]], run_id: str, listed: list[Placed]) -> None:
    """The listing's columns for one run's files, in order (each file's parent: the one before)."""
    parent = None
    for index, placed in enumerate(listed):
        entry = placed.entry
        meta: dict[str, Any] = {"file": entry.rel, "link": True} if entry.kind == "link" else {"file": entry.rel}
        for name, value in (("run_id", run_id), ("checkpoint_id", entry.name), ("parent_id", parent),
                            ("step", placed.number if placed.number is not None else index),
                            ("created_at", micros(entry.mtime or 0.0)), ("size_bytes", entry.size),
                            ("location", entry.rel), ("metadata", json_text(meta))):
            columns[name].append(value)
        parent = entry.name


def _entry_of(rel: str, stamp: str) -> Entry:
    """An entry back from its stamp (``kind:size:mtime``)."""
    kind, _, rest = stamp.partition(":")
    size, _, mtime = rest.partition(":")
    return Entry(rel, kind, int(size) if size.isdigit() else None, _float(mtime))


def _float(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None
