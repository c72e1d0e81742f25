"""Retention of Lightning checkpoint folders: a pruned ``.ckpt`` file is renamed into
``.lastgood/archive/<action>/<its path>`` (``ModelCheckpoint`` lists only its own folder).

Always kept beyond the core's rules: the head (what ``fit(ckpt_path="last")`` resumes from), every
last file in place (``last(-N)?.ckpt``: Lightning picks the newest of them), the
``ModelCheckpoint``'s ``best_model_path`` (read from the newest checkpoint's callback state, walked
with the allowlist, never unpickled — what ``trainer.test(ckpt_path="best")`` loads), and the last
files a restore archived (they belong to a journaled action), and the file a last link points to
(``save_last="link"``). See
:mod:`lastgood.readers.training_folders.retention`.
"""

from __future__ import annotations

import contextlib
import posixpath
from collections.abc import Mapping
from typing import Any, ClassVar

from lastgood.errors import LastgoodError
from lastgood.readers.lightning import layout as lay
from lastgood.readers.lightning.reader import LightningReader
from lastgood.readers.lightning.recovery import LightningRecovery
from lastgood.readers.training_folders.retention import FolderRetention, Layout, Piece

BEST_RULE = "best-model-path"  # ModelCheckpoint's best_model_path
LAST_RULE = "a last file (fit(ckpt_path='last') picks the newest)"
ARCHIVED_RULE = "archived by {}"
LINK_RULE = "a last file links to it"


class LightningRetention(FolderRetention):
    reader_name = "lightning"
    recovery_class: ClassVar[Any] = LightningRecovery
    noun = "checkpoint files"

    def layout(self) -> Layout:
        out = Layout()
        with LightningReader(self.url, self.storage_options) as reader:
            for run_id, run in reader.runs().items():
                self._run_layout(reader, run, out)
        return out

    def _run_layout(self, reader: LightningReader, run: lay.Run, out: Layout) -> None:
        for cid, item in run.listed:
            archived = item.action is not None
            out.pieces.append(Piece(run.run_id, cid, item.rel, int(item.entry.size or 0),
                                    area="archived" if archived else "checkpoints"))
            if archived:
                out.kept[(run.run_id, cid)] = ARCHIVED_RULE.format(item.action)
            elif lay.is_last(item.name):
                out.kept[(run.run_id, cid)] = LAST_RULE
        if run.head:
            out.heads[run.run_id] = run.head
        for cid in link_targets(reader, run):
            out.kept.setdefault((run.run_id, cid), LINK_RULE)
        for cid in best_models(reader, run):
            out.kept.setdefault((run.run_id, cid), BEST_RULE)


def link_targets(reader: LightningReader, run: lay.Run) -> list[str]:
    """The checkpoints a last file in place links to (``save_last="link"``): moving one would leave the
    link dangling."""
    targets = set()
    for item in run.lasts:
        if item.entry.kind == "link":
            with contextlib.suppress(LastgoodError, OSError):
                targets.add(reader.folder.link_target(item.rel))
    return [cid for cid, f in run.listed if f.action is None and f.rel in targets]


def best_models(reader: LightningReader, run: lay.Run) -> list[str]:
    """The checkpoints the ``ModelCheckpoint`` callbacks of the run's newest checkpoint name as
    ``best_model_path`` (matched by file name in the run's checkpoint folder)."""
    newest = run.head_file or max((f for _cid, f in run.listed if f.action is None), key=lambda f: f.order(),
                                  default=None)
    if newest is None:
        return []
    try:
        state = reader.load_state(reader.record_of(run, run.head or newest.name, newest, None))
    except (LastgoodError, OSError):
        return []
    callbacks = state.get("callbacks") if isinstance(state, Mapping) else None
    names = {posixpath.basename(v["best_model_path"]) for v in (callbacks or {}).values()
             if isinstance(v, Mapping) and isinstance(v.get("best_model_path"), str) and v["best_model_path"]}
    return [cid for cid, f in run.listed if f.action is None and f.name in names]
