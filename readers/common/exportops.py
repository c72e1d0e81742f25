"""Intent operations that move checkpoints to another filesystem (an archive on any fsspec URL) and back.

Three operation kinds beside :class:`~lastgood.readers.common.filejournal.MoveOps`' ``move``, each
idempotent, so an intent killed at any point is rolled forward by applying its operations again:

``{"op": "export", "archive", "from", "to", "files", "sha256", "file"}``
    copy every file of the store path ``from`` to ``to`` inside the archive (streamed, its sha256
    computed as it goes and compared with the manifest's, the copy's size checked), and only then
    delete the source. Source present: what is missing or differs in the archive is copied, then the
    source deleted; source gone: the archive copy must be complete (else :class:`ReaderError`).
``{"op": "import", "archive", "from", "to", "stage", "files", "sha256", "file"}``
    copy ``from`` (inside the archive) into ``stage`` in the store (verified the same way), then
    rename it to ``to``; the archive copy stays.
``{"op": "archive-write", "archive", "path", "text"}``
    write a small file of the archive (its manifest, a restored marker).

``archive`` is the archive's URL without credentials (what the intent may hold); this process opens
it with what :meth:`ExportOps.use_archive` registered, another one (a roll-forward) with the URL and
the storage options the environment gives fsspec. An export or import op may name an item of the
intent's entry manifest (``"item": i``) instead of carrying its files: :func:`expand` fills them in.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import posixpath
import shutil
from collections.abc import Mapping
from typing import Any

from lastgood.errors import LastgoodError, ReaderError
from lastgood.readers import journal as jr
from lastgood.readers.common.filejournal import MoveOps, sync_dir
from lastgood.readers.common.fsutil import atomic_write, full_fs, is_local, open_fs, safe_join
from lastgood.readers.common.urls import _one_line, display_url

CHUNK = 4 * 1024 * 1024
KINDS = ("export", "import", "archive-write", "archive-manifest")
KEPT = ("nothing is deleted before its copy is verified; an action that had begun stays as an interrupted intent "
        "(`lastgood journal`), finished by the next action once the archive is reachable")


def expand(intent: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The intent's operations, each export/import op naming a manifest item given that item's files
    and each ``archive-manifest`` op its text (the entry's manifest, as the archive keeps it)."""
    entry = intent.get("entry") if isinstance(intent.get("entry"), Mapping) else {}
    note = entry.get("note") if isinstance(entry.get("note"), Mapping) else {}
    items = note.get("manifest") or []
    out = []
    for op in intent.get("ops") or []:
        op = dict(op)
        if "item" in op:
            item = items[int(op["item"])]
            op.update(files=item["files"], sha256=item["sha256"], file=bool(item.get("file")))
        if op.get("op") == "archive-manifest":
            op.update(op="archive-write", text=jr.canonical(archive_manifest(entry)).decode())
        out.append(op)
    return out


def archive_manifest(entry: Mapping[str, Any]) -> dict[str, Any]:
    """What ``<archive>/<store>/<action>/manifest.json`` says: the prune entry (without its chain
    fields), so the archive is self-describing."""
    return {k: v for k, v in entry.items() if k not in ("seq", "prev_hash", "hash")}


class ExportOps(MoveOps):
    """``MoveOps`` plus the export/import operations (see the module docstring)."""

    _archives: dict[str, tuple[str, dict[str, Any]]]
    _opened: dict[str, tuple[Any, str]]

    def use_archive(self, url: str, options: Mapping[str, Any] | None = None) -> str:
        """Register how this process opens ``url``; returns the URL the intent holds (no credentials)."""
        shown = display_url(url)
        self._archives = {**getattr(self, "_archives", {}), shown: (url, dict(options or {}))}
        self._opened = {k: v for k, v in getattr(self, "_opened", {}).items() if k != shown}
        return shown

    def archive_fs(self, shown: str) -> tuple[Any, str]:
        opened = getattr(self, "_opened", None)
        if opened is None:
            opened = self._opened = {}
        if shown not in opened:
            url, options = getattr(self, "_archives", {}).get(shown, (shown, {}))
            try:
                opened[shown] = open_fs(url, options)
            except Exception as exc:
                raise unreachable(shown, exc) from None
        return opened[shown]

    def archive_path(self, shown: str, rel: str) -> tuple[Any, str]:
        fs, root = self.archive_fs(shown)
        return fs, safe_join(root, rel)

    # ---- operations ------------------------------------------------------------------------

    def apply(self, op: Mapping[str, Any]) -> None:
        kind = op.get("op")
        try:
            if kind == "export":
                self._export(op)
            elif kind == "import":
                self._import(op)
            elif kind == "archive-write":
                self._archive_write(op)
            else:
                super().apply(op)
        except LastgoodError:
            raise
        except Exception as exc:  # an object store's client error is not always an OSError
            if kind in KINDS:
                raise ReaderError(f"{kind} of {op.get('from') or op.get('path')} ({op.get('archive')}) failed: "
                                  f"{_one_line(exc)}; {KEPT}") from None
            raise

    def applied(self, op: Mapping[str, Any]) -> bool:
        """Whether ``op`` took effect (for these kinds: at least in part)."""
        kind = op.get("op")
        try:
            if kind == "export":
                fs, dst = self.archive_path(str(op["archive"]), str(op["to"]))
                return not self.fs.exists(self._path(str(op["from"]))) or bool(fs.exists(dst))
            if kind == "import":
                return bool(self.fs.exists(self._path(str(op["to"]))) or self.fs.exists(self._path(str(op["stage"]))))
            if kind in ("archive-write", "archive-manifest"):
                fs, path = self.archive_path(str(op["archive"]), str(op["path"]))
                return bool(fs.exists(path))
        except LastgoodError:
            raise
        except Exception as exc:
            if kind in KINDS:
                raise unreachable(str(op.get("archive")), exc) from None
            raise
        return super().applied(op)

    def _export(self, op: Mapping[str, Any]) -> None:
        afs, dst = self.archive_path(str(op["archive"]), str(op["to"]))
        src = self._path(str(op["from"]))
        for name, size in op["files"].items():
            s, d = _join(src, name, op), _join(dst, name, op)
            if verified(afs, d, int(size), op["sha256"][name]):
                continue
            if not self.fs.exists(s):
                raise ReaderError(f"{op['from']} is gone from the store, and its archive copy in {op['archive']} "
                                  f"is missing or differs ({name}): the intent is kept; bring the archive back, "
                                  "then run any action")
            copy_verified(self.fs, s, afs, d, int(size), str(op["sha256"][name]))
        if self.fs.exists(src):
            self._delete(src)

    def _import(self, op: Mapping[str, Any]) -> None:
        afs, src = self.archive_path(str(op["archive"]), str(op["from"]))
        stage, target = self._path(str(op["stage"])), self._path(str(op["to"]))
        if self.fs.exists(target):
            if self.fs.exists(stage):
                self._rename(stage, target)  # an object store's copy-then-delete, interrupted
            return
        for name, size in op["files"].items():
            s, d = _join(src, name, op), _join(stage, name, op)
            if verified(self.fs, d, int(size), op["sha256"][name]):
                continue
            if not afs.exists(s):
                raise ReaderError(f"{op['from']} is not in the archive {op['archive']} any more ({name}): "
                                  "nothing more was restored")
            copy_verified(afs, s, self.fs, d, int(size), str(op["sha256"][name]))
        self._rename(stage, target)

    def _archive_write(self, op: Mapping[str, Any]) -> None:
        fs, path = self.archive_path(str(op["archive"]), str(op["path"]))
        data = str(op["text"]).encode()
        with contextlib.suppress(FileNotFoundError):
            if bytes(fs.cat_file(path)) == data:
                return
        atomic_write(fs, path, data)

    def _delete(self, path: str) -> None:
        if not self.local:
            full_fs(self.fs).rm(path, recursive=True)
            return
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
        else:
            os.unlink(path)
        sync_dir(posixpath.dirname(path))


def _join(base: str, name: str, op: Mapping[str, Any]) -> str:
    return base if op.get("file") else f"{base}/{name}"


def unreachable(shown: str, exc: BaseException) -> ReaderError:
    return ReaderError(f"the archive {shown} cannot be reached ({_one_line(exc)}): {KEPT}")


def sha256_of(fs: Any, path: str) -> str:
    digest = hashlib.sha256()
    with fs.open(path, "rb") as handle:
        while chunk := handle.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def tree(fs: Any, path: str) -> dict[str, int]:
    """Every file under ``path`` (a folder: by its path inside; a file: its name) and its size."""
    try:
        found = full_fs(fs).find(path, detail=True)
    except FileNotFoundError:
        return {}
    out = {}
    for name, info in found.items():
        inner = str(name)[len(path):].lstrip("/") or posixpath.basename(path)
        out[inner] = int(info.get("size") or 0)
    return dict(sorted(out.items()))


def verified(fs: Any, path: str, size: int, sha256: str) -> bool:
    """Is ``path`` there with ``size`` bytes whose sha256 is ``sha256``?"""
    try:
        if int(fs.info(path).get("size") or 0) != size:
            return False
    except FileNotFoundError:
        return False
    return sha256_of(fs, path) == sha256


def copy_verified(src_fs: Any, src: str, dst_fs: Any, dst: str, size: int, sha256: str) -> None:
    """Stream ``src`` to ``dst``, hashing as it goes; the bytes sent must have the manifest's sha256
    and the copy the manifest's size (else ReaderError: the source is not deleted)."""
    digest, sent = hashlib.sha256(), 0
    with src_fs.open(src, "rb") as reader, _writer(dst_fs, dst) as writer:
        while chunk := reader.read(CHUNK):
            digest.update(chunk)
            writer.write(chunk)
            sent += len(chunk)
    if digest.hexdigest() != sha256 or sent != size:
        raise ReaderError(f"{src} changed since the plan (its sha256 or size differs from the manifest): "
                          "it was not deleted; the intent is kept")
    if int(dst_fs.info(dst).get("size") or 0) != size:
        raise ReaderError(f"the copy {dst} has not the manifest's size: the source was not deleted; the intent is kept")


@contextlib.contextmanager
def _writer(fs: Any, path: str) -> Any:
    """A local file is written then synced (durable before its source is deleted); else fsspec's writer."""
    if not is_local(fs):
        with full_fs(fs).open(path, "wb") as handle:
            yield handle
        return
    os.makedirs(posixpath.dirname(path), exist_ok=True)
    with open(path, "wb") as handle:
        yield handle
        handle.flush()
        os.fsync(handle.fileno())
    sync_dir(posixpath.dirname(path))
