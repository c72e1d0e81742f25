"""The runs of a store: the folders that hold a format's checkpoints.

A store is a folder: a run's own folder (a Trainer ``output_dir``, a DeepSpeed save folder, a
``save_pretrained`` folder) or a parent of several (a sweep: ``outputs/lr-1e-4/``,
``outputs/lr-3e-4/``). Folders are visited breadth first, a few levels down, never into hidden
folders (``.lastgood``, ``.git``) or the format's checkpoint folders, and never more than
:data:`MAX_FOLDERS` of them: finding runs stays cheap on a big tree.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping

from lastgood.readers.modelfiles.fsio import DIR, Entry, Folder, join

MAX_DEPTH = 3
MAX_FOLDERS = 2_000

IsRun = Callable[[Mapping[str, Entry]], bool]
SkipDir = Callable[[str], bool]


def find_runs(folder: Folder, is_run: IsRun, skip_dir: SkipDir, *, into_runs: bool = False,
              max_depth: int = MAX_DEPTH) -> list[str]:
    """Relative paths (``""``: the root) of the folders ``is_run`` accepts, root first."""
    runs: list[str] = []
    queue: deque[tuple[str, int]] = deque([("", 0)])
    visited = 0
    while queue and visited < MAX_FOLDERS:
        rel, depth = queue.popleft()
        entries = folder.listdir(rel)
        visited += 1
        run = is_run(entries)
        if run:
            runs.append(rel)
        if depth >= max_depth or (run and not into_runs):
            continue
        for name in sorted(entries):
            entry = entries[name]
            if entry.kind == DIR and not name.startswith(".") and not skip_dir(name):
                queue.append((join(rel, name), depth + 1))
    return runs


def run_ids(folder: Folder, rels: list[str]) -> dict[str, str]:
    """Each run folder's id: its path under the store, the root's own folder name for the root
    (``"."`` if a subfolder already has that name)."""
    taken = {rel for rel in rels if rel}
    root = folder.name if folder.name not in taken else "."
    return {rel: rel or root for rel in rels}
