"""Reader of PyTorch Lightning checkpoint folders (``ModelCheckpoint``'s ``.ckpt`` files).

Model: run = one checkpoint folder (``lightning_logs/version_0/checkpoints`` → run
``lightning_logs/version_0``); checkpoint = one ``.ckpt`` file (id = its name; step = the pickle's
``global_step``, else the ``step=`` in the name; metadata: ``epoch``, ``global_step``); head = what
``trainer.fit(ckpt_path="last")`` resumes from (:mod:`.layout`). A ``.ckpt`` is a torch zip, read
without unpickling (:mod:`lastgood.readers.torch_files.torchfile`): state = the pickled dict as plain
data (tensors as dtype and shape, one-element tensors with their value), tensors = the model's
``state_dict`` (names as in it) and the optimizer states (``optimizer_states.…``), metrics = the
``CSVLogger``'s ``metrics.csv`` beside the checkpoint folder and every ``ModelCheckpoint``'s
monitored value saved in each checkpoint.

Recovery (:mod:`.recovery`): the head's last file is replaced by a copy of the target, atomically;
the file it replaces is kept under ``.lastgood/archive/<action>/``; undo puts it back byte for byte.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from lastgood import limits
from lastgood.checks import Check
from lastgood.errors import DecodeError, ReaderError, UnsafePath
from lastgood.readers.base import (CheckpointRecord, Finding, HeadRecord, MetricPoint, Scan, TensorEntry,
                                   TensorSummary, backend_named)
from lastgood.readers.lightning import layout as lay
from lastgood.readers.tensors.torchzip import TorchFile
from lastgood.readers.torch_files import torchfile
from lastgood.readers.torch_files.files import READ_ERRORS, TorchFileReader, TorchFiles, looks_like_torch
from lastgood.readers.torch_files.files import location as _location
from lastgood.readers.training_folders import stamps
from lastgood.readers.training_folders.tables import records_table
from lastgood.readers.training_folders.folder import Folder, as_datetime

if TYPE_CHECKING:
    from lastgood.readers.journal import RecoveryBackend, RetentionBackend

TENSOR_ROOTS = ("state_dict", "optimizer_states")
MAX_METRIC_ROWS = 1_000_000


class LightningReader(TorchFileReader):
    name = "lightning"
    ids_per_run = True  # step folders and file names repeat across runs
    description = "PyTorch Lightning checkpoint folders (.ckpt files, last.ckpt), read without unpickling"

    def __init__(self, url: str, storage_options: Mapping[str, Any] | None = None) -> None:
        super().__init__(url, storage_options)
        self.folder = Folder(url, storage_options)
        self.files = TorchFiles(self.folder)
        self._runs: dict[str, lay.Run] | None = None

    @classmethod
    def sniff(cls, url: str, storage_options: Mapping[str, Any] | None = None) -> bool:
        try:
            folder = Folder(url, storage_options)
            found = sorted(e.rel for e in folder.walk(max_depth=lay.MAX_DEPTH - 1, limit=5000)
                           if e.kind == "file" and e.name.endswith(lay.SUFFIX))
            return bool(found) and looks_like_torch(folder.read_range(found[0], 0, 8))
        except Exception:  # noqa: BLE001 - "not mine", whatever the reason
            return False

    def recovery(self) -> RecoveryBackend:
        return backend_named("lastgood.readers.lightning.recovery:LightningRecovery", self)

    def retention(self) -> RetentionBackend:
        """Prune: .ckpt files moved by rename into ``.lastgood/archive/`` (:mod:`.retention`)."""
        return backend_named("lastgood.readers.lightning.retention:LightningRetention", self)  # type: ignore[return-value]

    # ---- the layout -----------------------------------------------------------------------

    def _root_name(self) -> str:
        return self.folder.root.rstrip("/").rsplit("/", 1)[-1] or "lightning"

    def runs(self, known: Mapping[str, dict[str, Any]] | None = None) -> dict[str, lay.Run]:
        self._runs = lay.build(self.folder, self._root_name(), known or {})
        return self._runs

    def _run(self, run_id: str) -> lay.Run | None:
        if self._runs is None or run_id not in self._runs:
            self.runs()
        return (self._runs or {}).get(run_id)

    def record_of(self, run: lay.Run, checkpoint_id: str, item: lay.CkptFile, parent: str | None) -> CheckpointRecord:
        facts = item.facts
        meta: dict[str, Any] = {"file": item.rel}
        for short, key in (("e", "epoch"), ("g", "global_step"), ("v", "lightning_version")):
            if short in facts:
                meta[key] = facts[short]
        if lay.is_last(item.name):
            meta["last"] = True
        if item.action:
            meta["archived_by"] = item.action
        if item.entry.kind == "link":
            meta["link"] = True
        return CheckpointRecord(
            run_id=run.run_id, checkpoint_id=checkpoint_id, parent_id=parent, step=item.step,
            created_at=as_datetime(item.mtime if item.mtime is not None else item.entry.mtime),
            trigger="last" if lay.is_last(item.name) else "periodic", size_bytes=item.entry.size,
            codec="torch", location=item.rel, metadata=meta)

    def records(self, run: lay.Run) -> list[CheckpointRecord]:
        out, parent = [], None
        for cid, item in run.listed:
            out.append(self.record_of(run, cid, item, parent))
            parent = cid
        return out

    # ---- listing ---------------------------------------------------------------------------

    def scan(self, since: str | None = None) -> Scan:
        before = stamps.decode(since)
        usable = before if before is not None and before.get("reader") == self.name else None
        old_stamps: Mapping[str, str] = usable["stamps"] if usable else {}
        old_facts: Mapping[str, Any] = usable.get("facts") or {} if usable else {}
        entries = {e.rel: e for e, _ in lay.walk_files(self.folder)}
        known = {rel: old_facts[rel] for rel, e in entries.items()
                 if rel in old_facts and old_stamps.get(rel) == e.stamp}
        runs = self.runs(known)
        files = {f.rel: f for run in runs.values() for f in [*run.steps, *run.lasts, *run.archived]}
        now = {rel: f.entry.stamp for rel, f in files.items()}
        listed = {run_id: [cid for cid, _ in run.listed] for run_id, run in runs.items()}
        token = stamps.encode(now, reader=self.name, facts={rel: f.facts for rel, f in files.items()}, listed=listed)
        touched = set(runs)
        full = True
        if usable is not None:
            change = stamps.delta(old_stamps, now)
            if change.unchanged:
                return Scan(token, False, iter(()))
            gone = any(cid not in listed.get(run_id, []) for run_id, ids in (usable.get("listed") or {}).items()
                       for cid in ids)
            links = any(stamp.startswith("link:") for rel in change.changed | change.removed
                        for stamp in (old_stamps.get(rel, ""), now.get(rel, "")))
            if not gone and not links:  # a link's findings are store-level: a full listing replaces them
                full = False
                moved = change.added | change.changed | change.removed
                touched = {f.run_id for rel, f in files.items() if rel in moved}
                touched |= {run_id for run_id, run in runs.items() if any(
                    rel.startswith(run.folder + "/") or not run.folder for rel in change.removed)}
        return self._scan_of(runs, touched, token, full)

    def _scan_of(self, runs: dict[str, lay.Run], touched: set[str], token: str, full: bool) -> Scan:
        records, heads, findings = [], [], []
        for run_id in sorted(touched & set(runs)):
            run = runs[run_id]
            records += self.records(run)
            if run.head:
                heads.append(HeadRecord(run_id, run.head))
            findings += self._link_findings(run)
        return Scan(token, full, iter([records_table(records)]) if records else iter(()),
                    findings=findings, heads=heads)

    def _link_findings(self, run: lay.Run) -> list[Finding]:
        out = []
        for item in run.lasts:
            if item.entry.kind == "link" and item.mtime is None:
                try:
                    self.folder.link_target(item.rel)
                    why = "is a link to nothing"
                except UnsafePath:
                    why = "is a link leading out of the store: refused (Lightning would follow it)"
                out.append(Finding(Check.UNSAFE_PATH, "error", f"{item.rel} {why}", run.run_id))
        return out

    # ---- capability: checks (the rest: TorchFileReader) --------------------------------------

    def _file_findings(self, record: CheckpointRecord, tf: TorchFile) -> Iterator[Finding]:
        return _name_findings(record, tf)

    def _summaries(self, handle: Any, tf: TorchFile, record: CheckpointRecord) -> Iterator[Finding | TensorSummary]:
        found = []
        for tensor, name in _named(tf):
            try:
                found.append(torchfile.summary(handle, tensor, record, name))
            except READ_ERRORS as exc:
                yield torchfile.finding(exc, record, f"{name}: ")
                continue
            yield found[-1]
        yield from torchfile.tensor_warnings(found, record)

    # ---- capability: tensors ---------------------------------------------------------------

    def tensors(self, record: CheckpointRecord) -> list[TensorEntry]:
        try:
            with self.files.opened(_location(record)) as (_handle, tf):
                entries = {e.name: e for e in torchfile.tensor_entries(tf, _location(record))}
                return [_renamed(entries[torchfile.tensor_name(t)], name) for t, name in _named(tf)]
        except READ_ERRORS as exc:
            raise torchfile.decode_error(exc) from None

    def read_tensor(self, record: CheckpointRecord, entry: TensorEntry, chunk_bytes: int
                    ) -> Iterator[bytes | memoryview]:
        try:
            with self.files.opened(_location(record)) as (handle, tf):
                tensor = next((t for t, name in _named(tf) if name == entry.name), None)
                if tensor is None:
                    raise DecodeError(f"no tensor {entry.name!r} in this checkpoint", Check.MISSING)
                yield from torchfile.tensor_chunks(handle, tensor, chunk_bytes)
        except READ_ERRORS as exc:
            if isinstance(exc, DecodeError):
                raise
            raise torchfile.decode_error(exc) from None

    # ---- capability: metrics ---------------------------------------------------------------

    def metrics(self, run_id: str) -> list[MetricPoint]:
        """``metrics.csv`` of the run's ``CSVLogger`` (beside the checkpoint folder), and each
        checkpoint's monitored value (``ModelCheckpoint``'s ``current_score``) for names it lacks."""
        run = self._run(run_id)
        if run is None:
            return []
        points = self._logged(run)
        logged = {p.name for p in points}  # the logger's own record of a name wins
        points += [p for p in self._monitored(run) if p.name not in logged]
        return sorted(points, key=lambda p: (p.step, p.name))

    def _logged(self, run: lay.Run) -> list[MetricPoint]:
        if not run.folder.endswith("checkpoints") or "/" not in run.folder:
            return []
        csv_rel = run.folder.rsplit("/", 1)[0] + "/metrics.csv"
        try:
            text = self.folder.read_small(csv_rel, limits.MAX_CATALOG_FILE_BYTES).decode("utf-8", "replace")
        except (OSError, ReaderError):
            return []
        return csv_points(text, run.run_id)

    def _monitored(self, run: lay.Run) -> list[MetricPoint]:
        out = []
        for cid, item in run.listed:
            if item.action is not None or item.step is None:
                continue
            try:
                state = self.load_state(self.record_of(run, cid, item, None))
            except DecodeError:
                continue
            for key, value in (state.get("callbacks") or {}).items() if isinstance(state, dict) else []:
                score = value.get("current_score") if isinstance(value, dict) else None
                monitor = value.get("monitor") if isinstance(value, dict) else None
                number = score.get("value") if isinstance(score, dict) else score
                if isinstance(monitor, str) and isinstance(number, (int, float)) and not isinstance(number, bool):
                    out.append(MetricPoint(item.step, monitor, float(number), run.run_id,
                                           as_datetime(item.mtime)))
        return out


def csv_points(text: str, run_id: str) -> list[MetricPoint]:
    """Every number of a ``CSVLogger`` ``metrics.csv`` (columns ``epoch``, ``step`` and one per
    logged name; a row holds the values logged at that step)."""
    points = []
    for number, row in enumerate(csv.DictReader(io.StringIO(text))):
        if number >= MAX_METRIC_ROWS:
            break
        step = _number(row.get("step"))
        if step is None:
            continue
        for name, raw in row.items():
            value = _number(raw) if name not in (None, "step") else None
            if value is not None and name != "epoch" and math.isfinite(value):
                points.append(MetricPoint(int(step), str(name), value, run_id))
    return points


def _number(raw: Any) -> float | None:
    try:
        return float(raw) if raw not in (None, "") else None
    except (TypeError, ValueError):
        return None


def _named(tf: TorchFile) -> list[tuple[Any, str]]:
    """The tensors the reader shows: the model's ``state_dict`` (names as in it), then the
    optimizer states (``optimizer_states.…``)."""
    out = []
    for tensor in tf.tensors:
        name = tensor.name
        if name.startswith("state_dict."):
            out.append((tensor, name[len("state_dict."):]))
        elif name.startswith("optimizer_states."):
            out.append((tensor, name))
    return out


def _renamed(entry: TensorEntry, name: str) -> TensorEntry:
    return TensorEntry(name, entry.dtype, entry.shape, entry.nbytes, entry.file, entry.offset)


def _name_findings(record: CheckpointRecord, tf: TorchFile) -> Iterator[Finding]:
    """The file name's ``epoch=``/``step=`` against the pickle's ``epoch``/``global_step``."""
    root = tf.root if isinstance(tf.root, Mapping) else {}
    name = record.location.rsplit("/", 1)[-1] if record.location else ""
    for pattern, label, key in ((lay.NAME_EPOCH, "epoch", "epoch"), (lay.NAME_STEP, "step", "global_step")):
        said, saved = lay.name_number(pattern, name), root.get(key)
        if said is not None and type(saved) is int and said != saved:
            yield Finding(Check.METADATA_INVALID, "warning", f"the file name says {label}={said}, the "
                          f"checkpoint's {key} is {saved}", record.run_id, record.namespace, record.checkpoint_id)
