"""Structure checks of a checkpoint's files (headers, indexes, zips, pickles): no tensor bytes.

Each check returns :class:`Problem` rows (check, severity, message); the readers attach the run
and checkpoint. Finding names follow the reference errors: a safetensors header the
``safetensors`` library would refuse is ``safetensors-header`` with its error variant
(``InvalidHeaderLength``, ``MetadataIncompleteBuffer``…) in the message; a torch zip is
``torch-file`` with the torch-file code (``TruncatedZip``: no central directory…); a pickle
naming a global outside the allowlist is ``unsafe-pickle`` ("would import os.system") and
nothing of that file is decoded.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from lastgood.checks import Check
from lastgood.errors import ReaderError
from lastgood.readers.base import Severity
from lastgood.readers.modelfiles.fsio import FILE, Entry, join
from lastgood.readers.modelfiles.weights import ModelFiles, Weights, reason
from lastgood.readers.tensors.errors import PickleError, SafetensorsError, TensorsError, UnsafeGlobal


@dataclass(frozen=True, slots=True)
class Problem:
    check: Check
    severity: Severity
    message: str


def zero_byte(folder: str, entries: Mapping[str, Entry], names: Iterable[str] | None = None) -> list[Problem]:
    """Empty files: a save that stopped before writing them."""
    wanted = entries if names is None else {n: entries[n] for n in names if n in entries}
    return [Problem(Check.INCOMPLETE, "error", f"{join(folder, name)} is empty (0 bytes): the save did not finish")
            for name, entry in sorted(wanted.items()) if entry.kind == FILE and entry.size == 0]


def weights(files: ModelFiles, w: Weights, entries: Mapping[str, Entry]) -> list[Problem]:
    """The model's weight files: headers (or torch zips), and an index against its shards."""
    if w.sharded:
        return _sharded(files, w, entries)
    if entries.get(w.main) is not None and entries[w.main].size == 0:
        return []  # reported as an empty file
    return _one_file(files, w, w.main)


def _one_file(files: ModelFiles, w: Weights, name: str) -> list[Problem]:
    rel = join(w.folder, name)
    try:
        if w.kind == "safetensors":
            files.header(rel)
        else:
            torch = files.torch(rel)
            if torch.legacy:
                return [Problem(Check.TORCH_FILE, "warning",
                                f"{rel}: a pre-1.6 (non-zip) torch file: its pickles and tensors are not read")]
    except (TensorsError, OSError, ReaderError) as exc:
        return [file_problem(rel, exc)]
    return []


def file_problem(rel: str, exc: BaseException) -> Problem:
    if isinstance(exc, UnsafeGlobal):
        return Problem(Check.UNSAFE_PICKLE, "error", f"{rel}: {exc.message}: refused, nothing of it is decoded")
    if isinstance(exc, SafetensorsError):
        return Problem(Check.SAFETENSORS_HEADER, "error", f"{rel}: {exc.code}: {exc.message}")
    if isinstance(exc, TensorsError) and exc.code == "CrcMismatch":
        return Problem(Check.CRC_MISMATCH, "error", f"{rel}: {exc.message}")
    if isinstance(exc, PickleError):
        return Problem(Check.UNDECODABLE, "error", f"{rel}: its pickle does not decode: {reason(exc)}")
    if isinstance(exc, TensorsError):
        return Problem(Check.TORCH_FILE, "error", f"{rel}: {reason(exc)}")
    if isinstance(exc, FileNotFoundError):
        return Problem(Check.BLOB_MISSING, "error", f"{rel} is missing")
    return Problem(Check.UNDECODABLE, "error", f"{rel}: {reason(exc)}")


def _sharded(files: ModelFiles, w: Weights, entries: Mapping[str, Entry]) -> list[Problem]:
    try:
        index = files.index(w.main_path)
    except (TensorsError, OSError, ReaderError) as exc:
        code = f"{exc.code}: {exc.message}" if isinstance(exc, TensorsError) else reason(exc)
        return [Problem(Check.INDEX_MISMATCH, "error", f"{w.main_path}: {code}")]
    problems: list[Problem] = []
    headers: dict[str, set[str]] = {}
    for shard in index.files:
        entry = entries.get(shard)
        if entry is None or entry.kind != FILE:
            problems.append(Problem(Check.SHARD_MISSING, "error",
                                    f"{join(w.folder, shard)} is missing (named by {w.main})"))
        elif entry.size == 0:
            continue  # reported as an empty file
        else:
            found = _one_file(files, w, shard)
            problems += found
            if not found:
                headers[shard] = _names(files, w, shard)
    if len(headers) == len(index.files):
        problems += _index_against_headers(files, w, index.weight_map, index.total_size, headers)
    return problems


def _names(files: ModelFiles, w: Weights, shard: str) -> set[str]:
    rel = join(w.folder, shard)
    if w.kind == "safetensors":
        return set(files.header(rel).by_name())
    return {t.name for t in files.torch(rel).tensors}


def _index_against_headers(files: ModelFiles, w: Weights, mapping: Mapping[str, str], total: int | None,
                           headers: Mapping[str, set[str]]) -> list[Problem]:
    problems = []
    absent = sorted(name for name, shard in mapping.items() if name not in headers[shard])
    if absent:
        problems.append(Problem(Check.INDEX_MISMATCH, "error",
                                f"{w.main}: {len(absent)} mapped tensor(s) not in their shard, e.g. "
                                f"{absent[0]!r} → {mapping[absent[0]]}"))
    extra = sorted(n for shard, names in headers.items() for n in names if mapping.get(n) != shard)
    if extra:
        problems.append(Problem(Check.INDEX_MISMATCH, "warning",
                                f"{w.main}: {len(extra)} tensor(s) in the shards are not mapped there "
                                f"(from_pretrained ignores them), e.g. {extra[0]!r}"))
    if total is not None and not absent and w.kind == "safetensors":
        size = sum(t.nbytes for t in files.tensors(w))
        if size != total:
            problems.append(Problem(Check.INDEX_MISMATCH, "warning",
                                    f"{w.main}: metadata.total_size is {total}, the mapped tensors hold {size} bytes"))
    return problems


def pickles(files: ModelFiles, folder: str, names: Iterable[str], entries: Mapping[str, Entry],
            allow: Mapping[str, Any] | None = None) -> list[Problem]:
    """The light check of each torch pickle file (zip directory, pickle globals)."""
    problems = []
    for name in names:
        entry = entries.get(name)
        if entry is None or entry.kind != FILE or entry.size == 0:
            continue
        rel = join(folder, name)
        try:
            if files.pickle_check(rel, allow) == "legacy":
                problems.append(Problem(Check.TORCH_FILE, "warning",
                                        f"{rel}: a pre-1.6 (non-zip) torch file: its pickles are not read"))
        except (TensorsError, OSError, ReaderError) as exc:
            problems.append(file_problem(rel, exc))
    return problems
