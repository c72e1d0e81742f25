"""Kill a real writer process at random moments: the store must still load, with no
listed checkpoint whose blob is partial (crashed saves show up as *incomplete*)."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

from lastgood.index.catalog import Catalog
from lastgood.stores import index_store
from lastgood.index import queries
from lastgood.readers.base import as_table, record_from_row
from lastgood.readers.native.reader import NativeReader

WRITER = """
import sys
from lastgood.readers.native.writer import NativeWriter
w = NativeWriter(sys.argv[1], full_every=5)
big = "x" * 200_000
i = int(sys.argv[2])
print("ready", flush=True)
while True:
    w.save(f"run-{i % 3}", {"i": i, "payload": big, "list": list(range(i % 500))})
    i += 1
"""


def run_and_kill(store: Path, start: int, rng: random.Random) -> None:
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(store), str(start)],
                            stdout=subprocess.PIPE, text=True, cwd=Path(__file__).parent.parent)
    assert proc.stdout.readline().strip() == "ready"
    time.sleep(rng.uniform(0.02, 0.25))
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()


def test_killed_writer_never_leaves_a_listed_partial_checkpoint(tmp_path: Path) -> None:
    store = tmp_path / "store"
    rng = random.Random(1234)
    for attempt in range(12):
        run_and_kill(store, attempt * 1000, rng)
    reader = NativeReader(str(store))
    scan = reader.scan()
    records = [record_from_row(r) for t in scan.checkpoints for r in as_table(t).to_pylist()]
    committed = [r for r in records if r.status != "incomplete"]
    assert len(committed) > 12, "the writer should have committed checkpoints between kills"
    problems = list(reader.check_checkpoints(committed, read_data=True))
    assert problems == []
    for record in committed:
        assert reader.load_state(record)["payload"] == "x" * 200_000
    # the index agrees: only crashed saves are flagged, each as incomplete with its reason
    catalog = Catalog(tmp_path / "index.duckdb")
    sid = index_store(catalog, str(store)).store.store_id
    statuses = {r["status"] for r in queries.list_checkpoints(catalog, sid)}
    assert statuses <= {"ok", "incomplete"}
    for row in queries.list_checkpoints(catalog, sid, status="incomplete"):
        assert "never committed" in row["status_reason"]


def test_writer_resumes_after_a_crash(tmp_path: Path) -> None:
    store = tmp_path / "store"
    run_and_kill(store, 0, random.Random(7))
    from lastgood.readers.native.writer import NativeWriter

    writer = NativeWriter(str(store))
    head = writer.head("run-0")
    saved = writer.save("run-0", {"after": "crash"})
    assert head is None or saved.parent_id == head["checkpoint_id"]
    assert writer.load_head_state("run-0") == {"after": "crash"}
