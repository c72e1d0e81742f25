"""The layout of a Lightning store: runs (checkpoint folders), their ``.ckpt`` files, and the head.

Lightning's own resume rule, ``trainer.fit(ckpt_path="last")``
(``_CheckpointConnector._parse_ckpt_path`` → ``ModelCheckpoint._find_last_checkpoints``): the files
of the checkpoint folder whose stem matches ``^last(-(\\d+))?`` (a *prefix* match) with suffix
``.ckpt``, then the newest by filesystem mtime (a link: its target's). That file is the run's head.

``last.ckpt`` is a copy of (or a link to) the newest periodic save, so it is not listed twice: a
last file whose content equals a listed file (same zip entries and CRC-32s, from the central
directory; the per-save ``serialization_id`` ignored) names that file's checkpoint as the head. A
last file equal to no other file is listed as a checkpoint of its own, id ``<name>#<8 hex of its
content signature>`` — the same id when an action has archived it under ``.lastgood/archive/``.

Per file, the listing reads the zip's central directory and its pickle (walked with the allowlist,
never unpickled): ``epoch`` and ``global_step``. What it learned is kept in the scan token, so a
refresh reads only new or changed files.
"""

from __future__ import annotations

import hashlib
import posixpath
import re
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import IO, Any

from lastgood.errors import ReaderError
from lastgood.readers.tensors.errors import TensorsError, UnsafeGlobal
from lastgood.readers.torch_files import torchfile
from lastgood.readers.training_folders.folder import Entry, Folder
from lastgood.readers.training_folders.journal import ARCHIVE

SUFFIX = ".ckpt"
MAX_DEPTH = 5
LAST = re.compile(r"^last(-(\d+))?")  # ModelCheckpoint.CHECKPOINT_NAME_LAST, matched as Lightning does
NAME_EPOCH = re.compile(r"(?:^|[-_])epoch=(\d+)")
NAME_STEP = re.compile(r"(?:^|[-_])step=(\d+)")
IGNORED_ENTRIES = (".data/serialization_id",)  # differs between two saves of the same content


def is_last(name: str) -> bool:
    return name.endswith(SUFFIX) and bool(LAST.match(name[: -len(SUFFIX)]))


@dataclass
class CkptFile:
    """One ``.ckpt`` file: where it is, what the listing learned from it."""

    entry: Entry
    run_id: str
    facts: dict[str, Any]
    mtime: float | None  # Lightning's view: a link's target's
    action: str | None = None  # the action that archived it

    @property
    def rel(self) -> str:
        return self.entry.rel

    @property
    def name(self) -> str:
        return self.entry.name

    @property
    def sig(self) -> str | None:
        return self.facts.get("s")

    @property
    def step(self) -> int | None:
        g = self.facts.get("g")
        return g if isinstance(g, int) else name_number(NAME_STEP, self.name)

    def order(self) -> tuple[Any, ...]:
        return (self.step if self.step is not None else -1, self.mtime or 0.0, self.name)


@dataclass
class Run:
    """One checkpoint folder: its files, what is listed, the head."""

    run_id: str
    folder: str  # the checkpoint folder, relative to the store root
    steps: list[CkptFile] = field(default_factory=list)  # every non-last file
    lasts: list[CkptFile] = field(default_factory=list)  # last(-N)?.ckpt files in place
    archived: list[CkptFile] = field(default_factory=list)  # last files an action replaced
    listed: list[tuple[str, CkptFile]] = field(default_factory=list)  # (checkpoint id, file) in order
    head: str | None = None
    head_file: CkptFile | None = None  # the last file Lightning resumes from

    def file_of(self, checkpoint_id: str) -> CkptFile | None:
        return next((f for cid, f in self.listed if cid == checkpoint_id), None)

    def id_of(self, file: CkptFile) -> str | None:
        """The listed checkpoint a file holds (its own id, or the listed file of equal content)."""
        for cid, listed in self.listed:
            if listed.rel == file.rel or (file.sig and listed.sig == file.sig):
                return cid
        return None


def name_number(pattern: re.Pattern[str], name: str) -> int | None:
    found = pattern.search(name[: -len(SUFFIX)] if name.endswith(SUFFIX) else name)
    return int(found.group(1)) if found else None


def run_id_of(folder: str, root_name: str) -> str:
    """A checkpoint folder's run: ``lightning_logs/version_0`` for ``…/version_0/checkpoints``."""
    if not folder:
        return root_name
    return folder[: -len("/checkpoints")] if folder.endswith("/checkpoints") else folder


# ---- facts: what one file says ------------------------------------------------------------------


def file_facts(folder: Folder, rel: str) -> dict[str, Any]:
    """``{"s": content signature, "e": epoch, "g": global_step, "v": version}`` of one ``.ckpt``
    (``"x"``: why it could not be read — its checks say more)."""
    facts: dict[str, Any] = {}
    try:
        with folder.open(rel) as handle:
            facts["s"] = signature(handle)
            handle.seek(0, 2)
            tf = torchfile.inspect(handle, handle.tell())
    except UnsafeGlobal as exc:
        return {**facts, "x": f"unsafe: {exc.name}"}
    except (TensorsError, OSError, ReaderError, zipfile.BadZipFile, ValueError) as exc:
        return {**facts, "x": type(exc).__name__}
    root = tf.root if isinstance(tf.root, Mapping) else {}
    for key, short in (("epoch", "e"), ("global_step", "g")):
        if type(root.get(key)) is int:
            facts[short] = root[key]
    if isinstance(root.get("pytorch-lightning_version"), str):
        facts["v"] = root["pytorch-lightning_version"][:40]
    return facts


def signature(handle: IO[bytes]) -> str | None:
    """The content of a torch zip, from its central directory: every entry's name (without the
    archive prefix), size and CRC-32."""
    try:
        with zipfile.ZipFile(handle) as archive:
            infos = archive.infolist()
    except (zipfile.BadZipFile, OSError, ValueError):
        return None
    rows = sorted((i.filename.split("/", 1)[-1], i.file_size, i.CRC) for i in infos
                  if not i.filename.endswith(IGNORED_ENTRIES))
    return hashlib.sha256(repr(rows).encode()).hexdigest()[:16]


def signature_of(folder: Folder, rel: str) -> str | None:
    try:
        with folder.open(rel) as handle:
            return signature(handle)
    except (OSError, ReaderError):
        return None


def _target_mtime(folder: Folder, entry: Entry) -> float | None:
    """A file's mtime as Lightning sees it (``fs.modified``: a link's target's); None for a link
    leaving the store or dangling."""
    if entry.kind != "link":
        return entry.mtime
    try:
        target = folder.link_target(entry.rel)
    except ReaderError:
        return None
    found = folder.entry(target) if target else None
    return found.mtime if found is not None and found.kind == "file" else None


# ---- the layout ---------------------------------------------------------------------------------


def walk_files(folder: Folder) -> list[tuple[Entry, str | None]]:
    """Every ``.ckpt`` in place, and every archived last file with the action that archived it."""
    found = [(e, None) for e in folder.walk(max_depth=MAX_DEPTH) if e.name.endswith(SUFFIX) and e.kind != "dir"]
    for entry in folder.walk(ARCHIVE, max_depth=MAX_DEPTH + 1):
        if entry.kind == "file" and is_last(entry.name):
            action = entry.rel[len(ARCHIVE) + 1:].split("/", 1)[0]
            found.append((entry, action))
    return found


def home_of(entry: Entry, action: str | None) -> str:
    """Where an archived file was (its path in the store before the action)."""
    if action is None:
        return entry.rel
    return entry.rel[len(f"{ARCHIVE}/{action}/"):]


def build(folder: Folder, root_name: str, known: Mapping[str, dict[str, Any]]) -> dict[str, Run]:
    """The runs of the store. ``known``: facts of files whose stamp has not changed (by rel)."""
    runs: dict[str, Run] = {}
    for entry, action in walk_files(folder):
        if entry.kind == "other":
            continue
        home = home_of(entry, action)
        parent = posixpath.dirname(home)
        run = runs.setdefault(run_id_of(parent, root_name), Run(run_id_of(parent, root_name), parent))
        facts = known.get(entry.rel)
        if facts is None:
            facts = file_facts(folder, entry.rel)
        item = CkptFile(entry, run.run_id, facts, _target_mtime(folder, entry), action)
        if action is not None:
            run.archived.append(item)
        elif is_last(entry.name):
            run.lasts.append(item)
        else:
            run.steps.append(item)
    for run in runs.values():
        _list(run)
    return runs


def standalone_id(item: CkptFile) -> str:
    digest = item.sig or hashlib.sha256(item.entry.stamp.encode()).hexdigest()
    return f"{item.name}#{digest[:8]}"


def _list(run: Run) -> None:
    """What the run lists, in order, and its head."""
    listed: list[tuple[str, CkptFile]] = [(f.name, f) for f in run.steps]
    sigs = {f.sig for f in run.steps if f.sig}
    for item in sorted(run.lasts, key=lambda f: f.order()) + sorted(run.archived, key=lambda f: f.order()):
        if item.sig and item.sig in sigs:
            continue
        if item.sig:
            sigs.add(item.sig)
        listed.append((standalone_id(item), item))
    listed.sort(key=lambda pair: (pair[1].order(), pair[1].action is not None))
    run.listed = listed
    candidates = [f for f in run.lasts if f.mtime is not None]
    if candidates:
        run.head_file = max(candidates, key=lambda f: f.mtime or 0.0)
        run.head = _newest_equal(run, run.head_file)


def _newest_equal(run: Run, last: CkptFile) -> str | None:
    """The listed checkpoint with the last file's content: the newest step file of equal
    content, else the last file itself."""
    equal = [f for cid, f in run.listed if last.sig and f.sig == last.sig and f.action is None and f is not last]
    steps = [f for f in equal if f in run.steps]
    if steps:
        return max(steps, key=lambda f: f.order()).name
    return run.id_of(last)
