"""A third-party Lastgood reader, as a plugin author writes one (docs/readers.md walks through it).

The format: a folder of ``<run>.ckpt.jsonl`` files, one checkpoint per line::

    {"checkpoint": "c-0003", "step": 3, "time": "2026-11-02T09:03:00Z", "state": {...}}

Installed as a distribution with an entry point in the ``lastgood.readers`` group::

    [project.entry-points."lastgood.readers"]
    jsonl-demo = "lastgood_jsonl_demo:JsonlReader"
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

from lastgood.checks import Check
from lastgood.errors import DecodeError, StoreNotFound
from lastgood.readers.base import (CheckpointRecord, Finding, HeadRecord, Reader, Scan, checkpoints_table)

SUFFIX = ".ckpt.jsonl"


class JsonlReader(Reader):
    name = "jsonl-demo"
    description = "A folder of <run>.ckpt.jsonl files, one checkpoint per line (the plugin example)"
    read_only_reason = "the demo format has no write actions"

    def __init__(self, url: str, storage_options: Mapping[str, Any] | None = None) -> None:
        super().__init__(url, storage_options)
        self.root = Path(url)
        if not self.root.is_dir():
            raise StoreNotFound(f"store not found: {url}")

    @classmethod
    def sniff(cls, url: str, storage_options: Mapping[str, Any] | None = None) -> bool:
        root = Path(url)
        if "://" in url or not root.is_dir():
            return False
        first = next(iter(sorted(root.glob(f"*{SUFFIX}"))), None)
        if first is None:
            return False
        with first.open("rb") as handle:
            try:
                line = json.loads(handle.readline())
            except ValueError:
                return False
        return isinstance(line, dict) and {"checkpoint", "state"} <= set(line)

    # ---- listing --------------------------------------------------------------------

    def scan(self, since: str | None = None) -> Scan:
        seen: dict[str, int] = json.loads(since) if since else {}
        sizes = {p.name: p.stat().st_size for p in sorted(self.root.glob(f"*{SUFFIX}"))}
        records: list[CheckpointRecord] = []
        findings: list[Finding] = []
        heads: list[HeadRecord] = []
        for name, size in sizes.items():
            start = seen.get(name, 0) if seen.get(name, 0) <= size else 0
            if start == size:
                continue
            new, problems, last = self._read_lines(name, start)
            records += new
            findings += problems
            if last is not None:
                heads.append(HeadRecord(name[: -len(SUFFIX)], last))
        token = json.dumps(sizes, sort_keys=True)
        return Scan(token, full=since is None, checkpoints=iter([checkpoints_table(records)] if records else []),
                    findings=findings, heads=heads)

    def _read_lines(self, name: str, start: int) -> tuple[list[CheckpointRecord], list[Finding], str | None]:
        run = name[: -len(SUFFIX)]
        records, findings = [], []
        parent = self._last_id_before(name, start)
        with (self.root / name).open("rb") as handle:
            handle.seek(start)
            offset = start
            for raw in handle:
                where, offset = offset, offset + len(raw)
                try:
                    line = json.loads(raw)
                    cid, step = str(line["checkpoint"]), int(line["step"])
                    created = datetime.fromisoformat(str(line["time"]).replace("Z", "+00:00"))
                except (ValueError, KeyError, TypeError) as exc:
                    findings.append(Finding(Check.CATALOG_LINE, "error",
                                            f"{name} at byte {where}: not a checkpoint line ({exc})", run))
                    continue
                records.append(CheckpointRecord(run, cid, parent_id=parent, step=step, created_at=created,
                                                trigger="periodic", size_bytes=len(raw), codec="json",
                                                location=f"{name}:{where}"))
                parent = cid
        return records, findings, parent

    def _last_id_before(self, name: str, start: int) -> str | None:
        if not start:
            return None
        lines = (self.root / name).read_bytes()[:start].splitlines()
        for raw in reversed(lines):
            try:
                return str(json.loads(raw)["checkpoint"])
            except (ValueError, KeyError, TypeError):
                continue
        return None

    # ---- one checkpoint ---------------------------------------------------------------

    def read_blob(self, record: CheckpointRecord) -> bytes:
        name, _, offset = (record.location or "").rpartition(":")
        with (self.root / name).open("rb") as handle:
            handle.seek(int(offset))
            return handle.readline()

    def load_state(self, record: CheckpointRecord) -> Any:
        try:
            return json.loads(self.read_blob(record))["state"]
        except (ValueError, KeyError, TypeError) as exc:
            raise DecodeError(f"checkpoint {record.checkpoint_id}: no readable state ({exc})") from None

    def check_checkpoints(self, records: Iterable[CheckpointRecord], read_data: bool = False) -> Iterator[Finding]:
        for record in records:
            if not read_data:
                continue
            try:
                self.load_state(record)
            except DecodeError as exc:
                yield Finding(Check.UNDECODABLE, "error", str(exc), record.run_id, record.namespace,
                              record.checkpoint_id)
