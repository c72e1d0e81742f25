"""Retention of session stores kept as files (pydantic-graph run files, AutoGen state series).

What a prune removes is whole stale sessions, as for the SQL stores
(:mod:`.session_retention`): each session's files, read byte for byte, go into the native archive
(its manifest, with each pack's sha256, written last), then — under the store's journal lock
(:mod:`lastgood.readers.common.filejournal`), after checking again that every file still has the
bytes archived and that the session has no file the plan did not list (a session written to
meanwhile stays whole: ``skipped``) — the intent (the sealed ``prune`` entry, the archive, each
file and its sha256) is written to the lock, the files are removed, the entry is written, the lock
goes. A kill before the intent leaves every file in place (and maybe an archive no entry names);
after, the next action (:meth:`FileSessionRetention.resume`, or any restore through the format's
``resolve_other``) finishes it: the files whose bytes are the archived ones are removed, the entry
written. The undo writes each file back (temp + fsync + rename) under the same kind of intent; a
session with a file back at one of its paths is a conflict (``--force`` leaves it in the archive).
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from typing import Any

from lastgood.errors import ConflictError, ReaderError
from lastgood.readers import journal as jr
from lastgood.readers.common.filejournal import Kept, durable_write, holding
from lastgood.readers.common.session_retention import Key, SessionRetention, skip_run
from lastgood.readers.common.urls import display_url
from lastgood.readers.native.archive import Archive, default_archive_beside, manifest_path
from lastgood.readers.journal import breakdown_row

PRUNE, UNPRUNE = "prune", jr.UNPRUNE


class FileSessionRetention(SessionRetention):
    """A format gives ``reader_name``, ``reader_class``, ``recovery_class`` (its ``FileJournal``) and
    :meth:`session_files`."""

    back_again_text = "has a file back at its place (written to since the prune)"

    def session_files(self, recovery: Any, run_id: str) -> list[str]:
        """The session's files, relative to the store root (none: no such session)."""
        raise NotImplementedError

    def default_archive(self) -> str | None:
        return default_archive_beside(str(self.recovery().root))

    # ---- prune ---------------------------------------------------------------------------------------

    def prune(self, request: jr.PruneRequest) -> jr.RetentionOutcome:
        self.resume()
        rec = self.recovery()
        action_id = str(request.entry["id"])
        planned: dict[str, dict[Key, dict[str, Any]]] = {}
        for r in request.forget.to_pylist():
            planned.setdefault(r["run_id"], {})[(r["run_id"], r["namespace"] or "", r["checkpoint_id"])] = r
        outcome = jr.RetentionOutcome(entry={})
        files = self._read_planned(rec, planned, outcome)
        archive = Archive(request.archive_url, request.archive_options)
        extra = {"sessions": {run: {"files": {p: _sha(d) for p, d in found.items()}, "carrier": list(min(planned[run]))}
                              for run, found in files.items()}}
        items = self._items(files, planned)
        manifest, digest = archive.stage(action_id, self._source(), items, extra, request.progress,
                                         sum(len(planned[r]) for r in files))
        lock = rec._acquire(action_id)
        with holding(rec, lock):
            going = self._recheck(rec, files, planned, outcome)
            note = {**dict(request.entry.get("note") or {}), "archive": display_url(request.archive_url),
                    "manifest": manifest_path(action_id), "manifest_sha256": digest, "bytes": manifest["bytes"],
                    "sessions": sorted(going), "count": sum(len(planned[r]) for r in going)}
            seq, prev = jr.tip(rec.journal_entries())
            sealed = jr.seal({**request.entry, "note": note, "new_head": None}, seq, prev)
            ops = {p: _sha(files[run][p]) for run in going for p in files[run]}
            self._run(rec, lock, {**lock, "retention": PRUNE, "entry": sealed, "remove": ops})
        outcome.entry, outcome.bytes, outcome.checkpoints = sealed, int(manifest["bytes"]), int(note["count"])
        outcome.space = {**self.reclaim(request.vacuum), "returned_bytes": sum(len(files[r][p]) for r in going
                                                                               for p in files[r])}
        return outcome

    def _read_planned(self, rec: Any, planned: Mapping[str, Mapping[Key, Any]], outcome: jr.RetentionOutcome
                      ) -> dict[str, dict[str, bytes]]:
        """Each planned session's files (bytes), when the store lists exactly the planned checkpoints."""
        files: dict[str, dict[str, bytes]] = {}
        for run in sorted(planned):
            paths = self.session_files(rec, run)
            if not paths:
                skip_run(outcome, planned[run], "no longer in the store")
                continue
            files[run] = {p: rec.fs.cat_file(rec._path(p)) for p in paths}
        listed = self._listed(set(files))
        for run in sorted(files):
            if listed.get(run, set()) != set(planned[run]):
                del files[run]
                skip_run(outcome, planned[run], "the session is not as planned (written to since the plan, or "
                                                 "only part of it was to go; a session goes whole): kept")
        return files

    def _items(self, files: Mapping[str, Mapping[str, bytes]], planned: Mapping[str, Mapping[Key, Any]]) -> Any:
        for run in sorted(files):
            carrier = min(planned[run])
            digest = _sha(b"".join(_sha(files[run][p]).encode() for p in sorted(files[run])))
            for key in sorted(planned[run]):
                rows = {"files": dict(files[run])} if key == carrier else {"with": list(carrier[1:])}
                yield key, planned[run][key], rows, digest

    def _recheck(self, rec: Any, files: Mapping[str, Mapping[str, bytes]], planned: Mapping[str, Mapping[Key, Any]],
                 outcome: jr.RetentionOutcome) -> list[str]:
        """Under the lock: nothing planned became pinned or a journaled target (refused: nothing
        removed); a session whose files changed or gained one stays whole."""
        entries = rec.journal_entries()
        protected = dict(jr.journal_targets(entries))
        protected.update({k: f"pinned by {p.action_id}" for k, p in jr.fold_pins(entries).items()})
        found = [f"{k[2]} of {k[0]!r} ({why})" for k, why in protected.items() if k[0] in files and k in planned[k[0]]]
        if found:
            raise ConflictError("since the plan, " + "; ".join(found[:5]) + " must be kept: nothing was removed "
                                "(the archive written for it can be removed) — plan the prune again")
        going = []
        for run, old in sorted(files.items()):
            now = self.session_files(rec, run)
            if set(now) != set(old) or any(_current(rec, p) != _sha(data) for p, data in old.items()):
                skip_run(outcome, planned[run], "written to during the prune: kept whole")
            else:
                going.append(run)
        return going

    def _run(self, rec: Any, lock: Mapping[str, Any], intent: dict[str, Any],
             payload: Mapping[str, bytes] | None = None) -> None:
        """The intent durable first, then the work, then the entry; a failure after the work began
        leaves the intent (interrupted) for the next action to finish."""
        rec._write_lock(intent)
        try:
            _work(rec, intent, payload)
            rec._write_entry(intent["entry"])
        except BaseException as exc:
            rec._mark_interrupted(intent, exc, failed=True)
            raise Kept(exc) from exc

    # ---- undo ------------------------------------------------------------------------------------------

    def _back_again(self, manifest: Mapping[str, Any], runs: Sequence[str], rec: Any = None) -> list[str]:
        """The pruned runs with a file back at its place (``rec``: the recovery journal in use)."""
        rec = rec if rec is not None else self.recovery()
        info = manifest.get("sessions") or {}
        return [run for run in runs if run in info and any(rec.fs.exists(rec._path(p)) for p in info[run]["files"])]

    def unprune(self, request: jr.UnpruneRequest) -> jr.RetentionOutcome:
        self.resume()
        rec = self.recovery()
        undone = {str(e.get("undo_of")): str(e.get("id")) for e in rec.journal_entries() if e.get("action") == "undo"}
        if str(request.original["id"]) in undone:  # an interrupted undo of it, just completed
            raise ConflictError(f"{request.original['id']} was already undone by {undone[str(request.original['id'])]} "
                                "(an interrupted undo, completed now); nothing more was restored")
        archive, manifest, runs = self._archived(request.original, request.archive_options)
        info = manifest.get("sessions") or {}
        lock = rec._acquire(str(request.entry["id"]))
        outcome = jr.RetentionOutcome(entry={})
        with holding(rec, lock):
            back = set(self._back_again(manifest, runs, rec))
            if back and not request.force:
                raise ConflictError("; ".join(self.unprune_conflicts(request.original)) + "; nothing was restored")
            write: dict[str, str] = {}
            for run in runs:
                if run in back:
                    outcome.skipped.append({"run_id": run, "namespace": "", "checkpoint_id": None,
                                            "reason": "a file of the session is back (written since the prune): left "
                                                      "in the archive"})
                    continue
                write.update(info[run]["files"])
                outcome.checkpoints += sum(1 for e in manifest["entries"] if e[0] == run)
            payload = archived_files(archive, manifest, info, [r for r in runs if r not in back])
            outcome.bytes = sum(len(d) for d in payload.values())
            seq, prev = jr.tip(rec.journal_entries())
            sealed = jr.seal({**request.entry, "new_head": None}, seq, prev)
            self._run(rec, lock, {**lock, "retention": UNPRUNE, "entry": sealed, "write": write,
                                  "archive": archive.url, "prune_id": str(request.original["id"]),
                                  "manifest_sha256": (request.original.get("note") or {}).get("manifest_sha256")},
                      payload)
        outcome.entry = sealed
        archive.mark_restored(str(request.original["id"]), str(sealed["id"]), outcome.checkpoints)
        return outcome

    # ---- interrupted prunes and undos ------------------------------------------------------------------

    def pending(self) -> list[dict[str, Any]]:
        return [lock for lock in self.recovery().pending() if lock.get("retention")]

    def resume(self) -> list[dict[str, Any]]:
        """An interrupted prune or undo (a stale lock) is finished by taking the lock (the format's
        ``resolve_other`` calls :func:`resolve_retention`)."""
        rec = self.recovery()
        pending = [lock for lock in rec.pending() if lock.get("retention")]
        if not rec.pending():
            return []
        rec._release(rec._acquire("resume"))
        return [{"action_id": p.get("action_id"), "kind": p["retention"]} for p in pending]

    # ---- what the store holds, and space ----------------------------------------------------------------

    def breakdown(self, channels: bool = True, sample: int = 200) -> list[dict[str, Any]]:
        rec = self.recovery()
        out: list[dict[str, Any]] = []
        runs: dict[str, list[str]] = {}
        for keys in self._listed(None).values():
            for run, _ns, _cid in keys:
                runs.setdefault(run, [])
        for run in sorted(runs):
            paths = self.session_files(rec, run)
            size = sum(int(rec.fs.size(rec._path(p)) or 0) for p in paths)
            out.append(breakdown_row("files", len(paths), size, run))
        out.insert(0, breakdown_row("files", sum(r["rows"] for r in out), sum(r["bytes"] for r in out)))
        return out

    def footprint(self) -> dict[str, Any]:
        rec = self.recovery()
        files: dict[str, int] = {}
        for path, info in rec.fs.find(rec.root, detail=True).items():
            rel = str(path)[len(str(rec.root)):].lstrip("/")
            area = "lastgood" if rel.startswith(".lastgood/") else "sessions"
            files[area] = files.get(area, 0) + int(info.get("size") or 0)
        return {"files": files, "bytes": sum(files.values()), "free_bytes": 0, "notes": []}

    def reclaim(self, vacuum: bool = False) -> dict[str, Any]:
        return {"returned_bytes": 0, "free_bytes": 0, "vacuumed": False,
                "notes": ["the pruned session files were removed after they were archived: their space is free "
                          "once the filesystem lets go of them; the archive keeps a copy until you remove it"]}


# ---- the work of an intent, and finishing an interrupted one -------------------------------------------


def _work(rec: Any, intent: Mapping[str, Any], payload: Mapping[str, bytes] | None = None) -> None:
    """Remove the intent's files that still have the archived bytes; write back the undo's files
    that are not there yet (from ``payload``, else from the archive). Idempotent."""
    for path, sha in (intent.get("remove") or {}).items():
        if _current(rec, path) == sha:
            rec.fs.rm_file(rec._path(path))
    write = intent.get("write") or {}
    missing = [p for p in write if _current(rec, p) != write[p]]
    if missing:
        data = payload if payload is not None else _from_archive(intent)
        for path in missing:
            if _sha(data[path]) != write[path]:
                raise ReaderError(f"the archive's copy of {path} does not match the manifest; nothing more was restored")
            durable_write(rec.fs, rec._path(path), data[path])


def resolve_retention(rec: Any, lock: Mapping[str, Any]) -> bool:
    """A ``FileJournal.resolve_other`` for a stale prune or undo: finish its work, write its entry.
    False when ``lock`` is not one."""
    if not lock.get("retention"):
        return False
    _work(rec, lock)
    entry = lock.get("entry")
    if isinstance(entry, dict) and "seq" in entry and not rec.fs.exists(rec._entry_path(entry)):
        rec._create(rec._entry_path(entry), jr.canonical(entry))
    return True


def _from_archive(intent: Mapping[str, Any]) -> dict[str, bytes]:
    archive = Archive(str(intent["archive"]))
    manifest = archive.manifest(str(intent["prune_id"]), intent.get("manifest_sha256"))
    info = manifest.get("sessions") or {}
    runs = [run for run, i in info.items() if set(i["files"]) & set(intent.get("write") or {})]
    return archived_files(archive, manifest, info, runs)


def archived_files(archive: Archive, manifest: Mapping[str, Any], info: Mapping[str, Any], runs: list[str]
                   ) -> dict[str, bytes]:
    """The archived bytes of each file of ``runs`` (each pack's sha256 checked by the archive)."""
    keys = {(run, *[str(v) for v in info[run]["carrier"][1:]]) for run in runs}
    out: dict[str, bytes] = {}
    for _key, rows, _entry in archive.bundles(manifest, keys):  # type: ignore[arg-type]
        out.update({str(p): bytes(d) for p, d in (rows.get("files") or {}).items()})
    return out


def _current(rec: Any, path: str) -> str | None:
    with contextlib.suppress(FileNotFoundError, OSError):
        return _sha(rec.fs.cat_file(rec._path(path)))
    return None


def _sha(data: bytes) -> str:
    import hashlib

    return "sha256:" + hashlib.sha256(data).hexdigest()

