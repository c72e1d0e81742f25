"""A folder of AutoGen state files: its series (runs), each file read bounded and judged once,
and the journal of Lastgood's restores kept beside them (``.lastgood/journal``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from lastgood import limits
from lastgood.checks import Check
from lastgood.errors import NotAFile, TooLarge, UnsafePath
from lastgood.readers.autogen.layout import LASTGOOD_DIR, Series, StateFile, group, walk
from lastgood.readers.autogen.states import Parsed, parse_state
from lastgood.readers.common.filejournal import read_entries
from lastgood.readers.common.fsutil import open_fs, read_bounded, real_root, require_dir, safe_join

JOURNAL_DIR = f"{LASTGOOD_DIR}/journal"
LOCK = f"{LASTGOOD_DIR}/lock.json"
REFUSED = (NotAFile, TooLarge, UnsafePath)  # what a bounded read refuses


@dataclass
class StateStore:
    """The store at ``url``: files found, read and parsed on demand (each at most once)."""

    url: str
    storage_options: Mapping[str, Any] | None = None
    parsed: dict[str, Parsed] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.fs, self.root = open_fs(self.url, self.storage_options)
        require_dir(self.fs, self.root, self.url)
        self.root_real = real_root(self.fs, self.root)

    def path(self, relative: str) -> str:
        return safe_join(self.root, relative)

    def files(self) -> list[StateFile]:
        return list(walk(self.fs, self.root))

    def read(self, relative: str) -> bytes:
        return read_bounded(self.fs, self.path(relative), limits.MAX_BLOB_BYTES, self.root_real)

    def parse(self, f: StateFile) -> Parsed:
        found = self.parsed.get(f.path)
        if found is None:
            try:
                found = parse_state(self.read(f.path))
            except (OSError, *REFUSED) as exc:
                found = Parsed(problem=(Check.UNDECODABLE, f"cannot be read: {exc}"))
            self.parsed[f.path] = found
        return found

    def series(self, files: list[StateFile] | None = None) -> list[Series]:
        """Every run of the store (each file parsed to tell state series from other JSON)."""
        return group(self.files() if files is None else files, lambda f: self.parse(f).value is not None)

    def run(self, run_id: str) -> Series | None:
        return next((s for s in self.series() if s.run_id == run_id), None)

    # ---- the journal of restores ---------------------------------------------------------------

    def journal_entries(self) -> list[dict[str, Any]]:
        return read_entries(self.fs, self.path(JOURNAL_DIR), self.root_real)
