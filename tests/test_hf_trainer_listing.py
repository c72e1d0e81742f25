"""Listing a Trainer folder reads little (issue #31): the short reads of ``trainer_state.json`` give
the answer the whole windows gave, a safetensors header seen before is not parsed again, the table is
built without pandas, and the structure check of a full listing (``listed_structure``, no rows read
back from the index) records exactly the findings verification's own pass makes — locally and on an
object store read by many threads."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Any

import fsspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lastgood.checks import Check
from lastgood.index.catalog import Catalog
from lastgood.integrity.verify import store_findings, verify_store
from lastgood.readers.base import as_table, record_from_row
from lastgood.readers.hf_trainer import trainer_state as ts
from lastgood.readers.hf_trainer.reader import HfTrainerReader
from lastgood.readers.modelfiles.threads import in_order
from lastgood.readers.modelfiles.fastpaths import read_header
from lastgood.readers.registry import open_reader
from lastgood.readers.tensors.errors import SafetensorsError
from lastgood.stores import index_store, open_store

from tests.training_stores import (TRAINING, cut_before_central_directory, drop_canary, lie_about_header_length,
                                   stamp_in_order, truncate_half)

SOURCE = TRAINING / "hf_trainer" / "checkpoint-8"
STEPS = 20  # checkpoints


# ---- a Trainer folder of many checkpoints, some damaged -------------------------------------------


def _state(step: int, last: int, entries_per_step: int = 2) -> dict[str, Any]:
    history = []
    for at in range(8, step + 1, 8):
        history.append({"epoch": at / last, "grad_norm": 1.0, "learning_rate": 0.03, "loss": 3.0 - at / last,
                        "step": at})
        history += [{"epoch": at / last, "eval_loss": 3.1 - at / last, "eval_runtime": 0.1, "step": at}
                    ][: entries_per_step - 1]
    return {"best_global_step": 8, "best_metric": 3.0, "best_model_checkpoint": "run/checkpoint-8", "epoch": step / last,
            "global_step": step, "log_history": history, "max_steps": last, "save_steps": 8,
            "stateful_callbacks": {"TrainerControl": {"args": {"should_training_stop": step == last}, "attributes": {}}},
            "train_batch_size": 4}


def make_run(root: Path) -> Path:
    root.mkdir(parents=True)
    shutil.copyfile(TRAINING / "hf_trainer" / "config.json", root / "config.json")
    for k in range(1, STEPS + 1):
        folder = root / f"checkpoint-{8 * k}"
        shutil.copytree(SOURCE, folder)
        (folder / "trainer_state.json").write_text(json.dumps(_state(8 * k, 8 * STEPS), indent=2, sort_keys=True))
    stamp_in_order(root, "checkpoint-*")
    return root


def damage(root: Path) -> None:
    """One damage per checkpoint of a few (each a structure finding)."""
    truncate_half(root / "checkpoint-16" / "model.safetensors")
    (root / "checkpoint-24" / "optimizer.pt").write_bytes(b"")
    (root / "checkpoint-32" / "trainer_state.json").unlink()
    cut_before_central_directory(root / "checkpoint-40" / "rng_state.pth")
    drop_canary(root / "checkpoint-48" / "training_args.bin")
    state = json.loads((root / "checkpoint-56" / "trainer_state.json").read_text())
    (root / "checkpoint-56" / "trainer_state.json").write_text(json.dumps({**state, "global_step": 1}, indent=2))
    (root / "checkpoint-64" / "trainer_state.json").write_text('{"global_step": 64, "log_history": [')
    lie_about_header_length(root / "checkpoint-72" / "model.safetensors")


@pytest.fixture(scope="module")
def damaged(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = make_run(tmp_path_factory.mktemp("trainer") / "run")
    damage(root)
    return root


EXPECTED = {("checkpoint-16", Check.SAFETENSORS_HEADER), ("checkpoint-24", Check.INCOMPLETE),
            ("checkpoint-32", Check.INCOMPLETE), ("checkpoint-40", Check.TORCH_FILE),
            ("checkpoint-48", Check.UNSAFE_PICKLE), ("checkpoint-56", Check.METADATA_INVALID),
            ("checkpoint-64", Check.METADATA_INVALID), ("checkpoint-72", Check.SAFETENSORS_HEADER)}


def _found(catalog: Catalog, store_id: int) -> list[tuple[Any, ...]]:
    rows = store_findings(catalog, store_id, "structure")
    return sorted((r["checkpoint_id"], r["check"], r["severity"], r["message"], r["depth"]) for r in rows)


def _statuses(catalog: Catalog, store_id: int) -> list[tuple[Any, ...]]:
    with catalog.connect() as con:
        return con.execute("""SELECT checkpoint_id, status, status_reason, verified FROM checkpoints
                              WHERE store_id = ? ORDER BY checkpoint_id""", [store_id]).fetchall()


def test_the_index_records_the_findings_verification_makes(damaged: Path, tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """``lastgood index`` (structure depth) checks what its listing built — no row is read back from
    the index for it — and the index then holds the findings and statuses of verification's own pass."""
    import lastgood.integrity.verify as verify

    listing = Catalog(tmp_path / "listing" / "index.duckdb")
    with monkeypatch.context() as patch:
        patch.setattr(verify, "_chunks", lambda *a: pytest.fail("the structure check read the rows back"))
        summary = index_store(listing, str(damaged), check="structure")
    assert summary.verify is not None and summary.verify.checked == STEPS
    own = Catalog(tmp_path / "own" / "index.duckdb")
    listed = index_store(own, str(damaged), check="none").store
    again = open_store(own, str(damaged))  # a reader of its own: no listing of its own to answer from
    assert again.reader.scan(own.scan_token(listed.store_id)).full is False
    report = verify_store(own, listed.store_id, again.reader, only_unverified=True)
    assert report.checked == STEPS
    found = _found(listing, summary.store.store_id)
    assert found == _found(own, listed.store_id)
    assert {(f[0], f[1]) for f in found} == EXPECTED
    assert _statuses(listing, summary.store.store_id) == _statuses(own, listed.store_id)
    assert sorted((f.checkpoint_id, f.message) for f in summary.verify.findings if f.checkpoint_id) == \
        sorted((f.checkpoint_id, f.message) for f in report.findings if f.checkpoint_id)


def _memory_copy(root: Path, name: str) -> str:
    fs = fsspec.filesystem("memory")
    for path in root.rglob("*"):
        if path.is_file():
            fs.pipe_file(f"/{name}/run/{path.relative_to(root)}", path.read_bytes())
    return f"memory://{name}/run"


def _records(reader: HfTrainerReader) -> list[Any]:
    return [record_from_row(r) for b in reader.scan().checkpoints for r in as_table(b).to_pylist()]


def test_an_object_store_is_checked_in_threads_with_the_same_findings(damaged: Path) -> None:
    url = _memory_copy(damaged, "lastgood-test-listing")
    try:
        with open_reader(url, "hf-trainer") as remote, open_reader(str(damaged), "hf-trainer") as local:
            assert remote.read_threads() > 1 and local.read_threads() == 1
            records = sorted(_records(remote), key=lambda r: r.step)
            assert [r.step for r in records] == [8 * k for k in range(1, STEPS + 1)]
            threaded = [(f.checkpoint_id, f.check, f.message) for f in remote.check_checkpoints(records)]
            in_step = [(f.checkpoint_id, f.check, f.message)
                       for f in local.check_checkpoints(sorted(_records(local), key=lambda r: r.step))]
        assert threaded == in_step and {(c, k) for c, k, _ in threaded} == EXPECTED
    finally:
        fsspec.filesystem("memory").rm("/lastgood-test-listing", recursive=True)


def test_the_listing_answers_the_structure_check_once_and_only_for_its_token(
        damaged: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with open_reader(str(damaged), "hf-trainer") as reader:
        scan = reader.scan()
        assert reader.listed_structure("another listing") is None
        assert reader.listed_structure(scan.token) is None  # forgotten once asked
        scan = reader.scan()
        answer = reader.listed_structure(scan.token)
        assert answer is not None and answer[0] == STEPS
        assert {(f.checkpoint_id, f.check) for f in answer[1]} == EXPECTED
        again = reader.scan(scan.token)  # nothing changed: not a full listing, nothing to answer
        assert again.full is False and reader.listed_structure(scan.token) is None
        scan = reader.scan()
        monkeypatch.setattr(reader, "structure_findings", lambda record: 1 / 0)
        assert reader.listed_structure(scan.token) is None  # verification checks its own way


def test_the_table_is_the_one_checkpoints_table_builds_without_pandas(damaged: Path) -> None:
    import subprocess
    import sys
    from datetime import datetime

    from lastgood.readers.base import CheckpointRecord, Status, checkpoints_table
    from lastgood.readers.modelfiles.listing import records_table

    with open_reader(str(damaged), "hf-trainer") as reader:
        records = [r for run in reader.runs(fresh=True).values() for r in reader._records(run, reader._best(run), None)]
    odd = CheckpointRecord("r", "c", step=None, created_at=datetime(2026, 1, 2, 3, 4, 5, 6), status=Status.INCOMPLETE,
                           size_bytes=None, metadata={"loss": float("nan"), "at": datetime(2026, 1, 1), "é": [1, None]})
    for rows in (records, [odd, *records], [odd]):
        assert records_table(rows).equals(checkpoints_table(rows))
    code = ("import sys; from lastgood.readers.base import CheckpointRecord; "
            "from lastgood.readers.modelfiles.listing import records_table; "
            "t = records_table([CheckpointRecord('r', 'c', step=1, size_bytes=2, metadata={'a': 1})]); "
            "print(t.num_rows, 'pandas' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.stdout.split() == ["1", "False"], done.stderr


def test_in_order_keeps_the_order_and_raises_in_place() -> None:
    def slow(n: int) -> int:
        time.sleep(0.002 * (n % 3))
        if n == 40:
            raise OSError("gone")
        return n * n
    assert list(in_order(slow, range(40), 8)) == [n * n for n in range(40)]
    assert list(in_order(slow, range(5), 1)) == [0, 1, 4, 9, 16]
    seen: list[int] = []
    with pytest.raises(OSError, match="gone"):
        for value in in_order(slow, range(100), 4):
            seen.append(value)
    assert seen == [n * n for n in range(40)]


# ---- trainer_state.json: the short reads give the whole windows' answer ----------------------------


def whole_windows(read_range: Any, size: int) -> dict[str, Any] | None:
    """``trainer_state.digest`` as it was: 16 KiB and 64 KiB read at once (the reference)."""
    if size < ts.PARTIAL_MIN_BYTES:
        return None
    head = read_range(0, ts.HEAD_BYTES).decode("utf-8", "replace")
    tail = read_range(size - ts.TAIL_BYTES, ts.TAIL_BYTES).decode("utf-8", "replace")
    start, end = head.find('\n  "log_history": ['), tail.rfind('\n  ],\n  "')
    if not head.startswith("{") or start < 0 or end < 0:
        return None
    try:
        before = json.loads(head[:start].rstrip().rstrip(",") + "\n}")
        after = json.loads("{" + tail[end + len("\n  ],"):])
        parts = tail[:end].split("\n    {\n")[1:][-ts.DIGEST_ENTRIES:]
        entries = [json.loads("{\n" + part.rstrip().rstrip(",")) for part in parts]
    except (ValueError, RecursionError):
        return None
    if not isinstance(before, dict) or not isinstance(after, dict) or "log_history" in after or not entries \
            or not all(isinstance(e, dict) for e in entries):
        return None
    return {**before, **after, "log_history": entries, "log_history_cut": True}


def _reads(data: bytes) -> tuple[Any, list[int]]:
    sizes: list[int] = []

    def read(offset: int, length: int) -> bytes:
        sizes.append(length)
        return data[max(0, offset):offset + length]
    return read, sizes


BIG = json.dumps(_state(8 * 600, 8 * 600), indent=2, sort_keys=True).encode()
WIDE = json.dumps(_state(8 * 60, 8 * 60) | {"log_history": [{"step": n, "text": "é" * 2000} for n in range(40)]},
                  indent=2, sort_keys=True, ensure_ascii=False).encode()  # entries of 4 KB, multi-byte text


def test_a_long_state_is_read_in_two_short_reads() -> None:
    read, sizes = _reads(BIG)
    digest = ts.digest(read, len(BIG))
    assert digest is not None and digest == whole_windows(_reads(BIG)[0], len(BIG))
    assert sizes == [ts.FIRST_HEAD_BYTES, ts.FIRST_TAIL_BYTES]
    assert [e["step"] for e in digest["log_history"]][-2:] == [4800, 4800] and digest["global_step"] == 4800
    read, sizes = _reads(WIDE)  # entries too long for the short tail: the whole window is read
    assert ts.digest(read, len(WIDE)) == whole_windows(_reads(WIDE)[0], len(WIDE)) is not None
    assert sizes == [ts.FIRST_HEAD_BYTES, ts.FIRST_TAIL_BYTES, ts.TAIL_BYTES]


PIECES = st.sampled_from(["{", "}", "\n", "    ", "\n    {\n", "\n  ],\n  \"", "\n    {\n    {\n", ",", "\"",
                          "]", "1", "é", "NaN", "\n  \"log_history\": [", "\\"])


@settings(max_examples=150, deadline=None)
@given(base=st.sampled_from([BIG, WIDE]), at=st.integers(0, 70_000), cut=st.integers(0, 40),
       text=st.lists(PIECES, max_size=6), from_end=st.booleans())
def test_damage_anywhere_gets_the_whole_windows_answer(base: bytes, at: int, cut: int, text: list[str],
                                                       from_end: bool) -> None:
    at = len(base) - at if from_end else at
    at = min(max(at, 0), len(base))
    data = base[:at] + "".join(text).encode() + base[at + cut:]
    assert ts.digest(_reads(data)[0], len(data)) == whole_windows(_reads(data)[0], len(data))


# ---- a safetensors header seen before --------------------------------------------------------------


def test_a_header_seen_before_is_not_parsed_again_and_gets_the_same_verdict(tmp_path: Path) -> None:
    data = (SOURCE / "model.safetensors").read_bytes()
    seen: dict[Any, Any] = {}
    first = read_header(_reads(data)[0], len(data), seen)
    assert read_header(_reads(data)[0], len(data), seen) is first == first
    assert first == read_header(_reads(data)[0], len(data))
    short = data[:-4]  # same header bytes, another size: judged again (MetadataIncompleteBuffer)
    with pytest.raises(SafetensorsError) as fresh:
        read_header(_reads(short)[0], len(short))
    for _ in range(2):
        with pytest.raises(SafetensorsError) as remembered:
            read_header(_reads(short)[0], len(short), seen)
        assert remembered.value.code == fresh.value.code == "MetadataIncompleteBuffer"
    assert len(seen) == 2


def test_a_file_link_inside_the_store_is_followed_and_one_leading_out_refused(tmp_path: Path) -> None:
    """Local files open without following links first; a link (a Hub snapshot's into ``blobs/``) is
    then resolved and must stay inside the store, through a linked folder too."""
    from lastgood.errors import UnsafePath
    from lastgood.readers.modelfiles.fsio import Folder

    root = tmp_path / "store"
    (root / "blobs").mkdir(parents=True)
    (root / "snap").mkdir()
    (root / "blobs" / "abc").write_bytes(b"inside")
    (root / "snap" / "model.bin").symlink_to(root / "blobs" / "abc")
    (root / "snap" / "plain.bin").write_bytes(b"plain!")
    (tmp_path / "secret").write_bytes(b"secret")
    (root / "snap" / "leak.bin").symlink_to(tmp_path / "secret")
    (root / "linked").symlink_to(root / "snap")
    folder = Folder(str(root))
    for rel, expected in (("snap/model.bin", b"inside"), ("linked/model.bin", b"inside"),
                          ("snap/plain.bin", b"plain!"), ("linked/plain.bin", b"plain!")):
        with folder.open(rel) as f:
            assert f.read(0, 6) == expected and f.size == 6
    for rel in ("snap/leak.bin", "linked/leak.bin"):
        with pytest.raises(UnsafePath):
            folder.open(rel)
