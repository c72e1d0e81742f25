"""The orbax reader: CheckpointManager step folders, OCDBT arrays listed from their metadata (values
not decoded without tensorstore); recovery moves later step folders aside so latest_step() is the
target.

Store: sample_data/training/orbax (written by orbax-checkpoint 0.12.8 + jax 0.10.2: steps 10/20/30/40,
items state (StandardSave, OCDBT), metadata and metrics (JSON)), copied into two runs.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest

from lastgood.checks import Check
from lastgood.errors import DecodeError
from lastgood.readers.base import Capability, Status, as_table, capabilities, record_from_row
from lastgood.readers.registry import open_reader
from lastgood.readers.testing import Damage, ReaderConformance
from tests.helpers import ROOT, lastgood_cli, tree_digest

ORBAX = ROOT / "sample_data" / "training" / "orbax"


def save_step(run: Path, source: str, step: int, suffix: str = "") -> Path:
    """A step folder as CheckpointManager writes it: the sample's files, this step's timestamps."""
    target = run / f"{step}{suffix}"
    shutil.copytree(ORBAX / source, target, copy_function=shutil.copyfile)
    meta_path = target / "_CHECKPOINT_METADATA"
    meta = json.loads(meta_path.read_text())
    now = time.time_ns()
    meta.update(init_timestamp_nsecs=now - 1000, commit_timestamp_nsecs=now)
    meta_path.write_text(json.dumps(meta))
    return target


def make_store(tmp: Path) -> Path:
    """``runA/{10,20,30,40}`` (the sample) and ``runB/{15,25}``."""
    root = tmp / "orbax"
    shutil.copytree(ORBAX, root / "runA")
    save_step(root / "runB", "10", 15)
    save_step(root / "runB", "20", 25)
    return root


def listed(root: Path):
    with open_reader(str(root), "orbax") as reader:
        scan = reader.scan()
        rows = [r for b in scan.checkpoints for r in as_table(b).to_pylist()]
    return [record_from_row(r) for r in rows], scan


def record(root: Path, run: str, checkpoint_id: str):
    return next(r for r in listed(root)[0] if (r.run_id, r.checkpoint_id) == (run, checkpoint_id))


def checks(root: Path, run: str, checkpoint_id: str, read_data: bool = False) -> list:
    with open_reader(str(root), "orbax") as reader:
        return list(reader.check_checkpoints([record(root, run, checkpoint_id)], read_data))


def first_data_file(step: Path) -> Path:
    return sorted((step / "state" / "ocdbt.process_0" / "d").iterdir())[0]


class TestOrbaxKit(ReaderConformance):
    reader_name = "orbax"

    def make_store(self, tmp: Path) -> str:
        tmp.mkdir(parents=True, exist_ok=True)
        return str(make_store(tmp))

    def append(self, url: str) -> int:
        save_step(Path(url) / "runA", "40", 50)
        return 1

    def damages(self) -> list[Damage]:
        def step(url: str, name: str = "20") -> Path:
            return Path(url) / "runA" / name

        return [
            Damage("no commit marker", lambda u: (step(u) / "commit_success.txt").unlink(), {Check.INCOMPLETE},
                   "structure"),
            Damage("an unfinished save (tmp folder)",
                   lambda u: save_step(Path(u) / "runA", "40", 50, ".orbax-checkpoint-tmp-1795820375"),
                   {Check.INCOMPLETE}, "structure"),
            Damage("a missing OCDBT manifest", lambda u: (step(u) / "state" / "manifest.ocdbt").unlink(),
                   {Check.BLOB_MISSING}, "structure"),
            Damage("an empty OCDBT data file", lambda u: first_data_file(step(u)).write_bytes(b""),
                   {Check.SIZE_MISMATCH}, "structure"),
            Damage("a malformed _METADATA", lambda u: (step(u) / "state" / "_METADATA").write_text("{not json"),
                   {Check.METADATA_INVALID}, "structure"),
        ]


# ---- the listing ---------------------------------------------------------------------------------


def test_steps_commit_times_and_latest_step_as_head(tmp_path: Path) -> None:
    root = make_store(tmp_path)
    records, scan = listed(root)
    assert [(r.run_id, r.checkpoint_id, r.step, r.parent_id) for r in records] == [
        ("runA", "10", 10, None), ("runA", "20", 20, "10"), ("runA", "30", 30, "20"), ("runA", "40", 40, "30"),
        ("runB", "15", 15, None), ("runB", "25", 25, "15")]
    meta = json.loads((ORBAX / "10" / "_CHECKPOINT_METADATA").read_text())
    assert records[0].created_at.timestamp() == pytest.approx(meta["commit_timestamp_nsecs"] / 1e9, abs=1e-5)
    assert records[0].metadata["items"] == ["metadata", "metrics", "state"]
    assert {h.run_id: h.checkpoint_id for h in scan.heads} == {"runA": "40", "runB": "25"}


def test_a_missing_commit_marker_is_incomplete_yet_still_the_head(tmp_path: Path) -> None:
    root = make_store(tmp_path)
    (root / "runA" / "40" / "commit_success.txt").unlink()
    records, scan = listed(root)
    step40 = next(r for r in records if r.checkpoint_id == "40")
    assert step40.status == Status.INCOMPLETE and "latest_step() still picks it" in step40.status_reason
    assert {h.run_id: h.checkpoint_id for h in scan.heads}["runA"] == "40"  # what Orbax resumes from
    problems = checks(root, "runA", "40")
    assert [f.check for f in problems] == [Check.INCOMPLETE] and "latest_step() would pick" in problems[0].message


def test_an_unfinished_tmp_folder_is_listed_incomplete_and_never_the_head(tmp_path: Path) -> None:
    root = make_store(tmp_path)
    save_step(root / "runA", "40", 50, ".orbax-checkpoint-tmp-1795820375")
    records, scan = listed(root)
    tmp = next(r for r in records if r.checkpoint_id.startswith("50."))
    assert tmp.status == Status.INCOMPLETE and "Orbax ignores it" in tmp.status_reason and tmp.step == 50
    assert {h.run_id: h.checkpoint_id for h in scan.heads}["runA"] == "40"
    problems = checks(root, "runA", tmp.checkpoint_id)
    assert [f.check for f in problems] == [Check.INCOMPLETE] and "Orbax never finalized it" in problems[0].message


# ---- reading -------------------------------------------------------------------------------------


def test_state_is_the_json_items_and_the_tree_structure(tmp_path: Path) -> None:
    root = make_store(tmp_path)
    with open_reader(str(root), "orbax") as reader:
        state = reader.load_state(record(root, "runA", "20"))
    assert state["items"]["metadata"] == {"step": 20, "run_name": "lastgood-fixture", "loss": 0.4}
    assert state["items"]["metrics"] == {"loss": 0.4}
    tree = state["items"]["state"]["tree"]
    assert tree["params"]["dense"]["kernel"] == {"type": "jax.Array", "shape": [4, 8]}
    assert tree["opt_state"]["count"] == {"type": "jax.Array", "shape": []}
    assert "not decoded without tensorstore" in state["items"]["state"]["$values"]


def test_tensors_come_from_the_metadata_and_are_not_decoded(tmp_path: Path) -> None:
    root = make_store(tmp_path)
    with open_reader(str(root), "orbax") as reader:
        rec = record(root, "runA", "10")
        entries = reader.tensors(rec)
        assert [(e.name, e.shape, e.offset) for e in entries] == [
            ("opt_state.count", (), None), ("opt_state.mu", (4, 8), None), ("params.dense.bias", (8,), None),
            ("params.dense.kernel", (4, 8), None), ("params.head.kernel", (8, 2), None), ("step", (), None)]
        with pytest.raises(DecodeError, match="not decoded without tensorstore"):
            list(reader.read_tensor(rec, entries[0], 1 << 20))
        data = list(reader.check_checkpoints([rec], True))
    assert [(f.check, f.severity) for f in data] == [(Check.UNDECODABLE, "info")]
    assert "not decoded without tensorstore" in data[0].message


def test_metrics_per_step(tmp_path: Path) -> None:
    root = make_store(tmp_path)
    with open_reader(str(root), "orbax") as reader:
        points = reader.metrics("runA")
    assert [(p.step, p.name, p.value) for p in points] == [(10, "loss", 0.9), (20, "loss", 0.4), (30, "loss", 0.55),
                                                           (40, "loss", 0.6)]


def test_ocdbt_structure_checks(tmp_path: Path) -> None:
    root = make_store(tmp_path)
    step = root / "runA" / "30"
    (step / "state" / "ocdbt.process_0" / "manifest.ocdbt").write_bytes(b"garbage!")
    first_data_file(step).write_bytes(b"")
    problems = {f.check: f.message for f in checks(root, "runA", "30")}
    assert set(problems) == {Check.METADATA_INVALID, Check.SIZE_MISMATCH}
    assert "not an OCDBT manifest" in problems[Check.METADATA_INVALID]
    assert "1 empty OCDBT data file" in problems[Check.SIZE_MISMATCH]


# ---- recovery ---------------------------------------------------------------------------------------


def _index(root: Path, tmp: Path):
    from lastgood.index.catalog import Catalog
    from lastgood.stores import index_store

    catalog = Catalog(str(tmp / "index.duckdb"))
    return catalog, index_store(catalog, str(root), reader_name="orbax", check="structure").store


def test_rollback_moves_later_steps_aside_and_undo_brings_them_back(tmp_path: Path) -> None:
    from lastgood import recovery

    root = make_store(tmp_path)
    digest = tree_digest(root)
    catalog, store = _index(root, tmp_path)
    done = recovery.apply_plan(catalog, store, recovery.plan_rollback(catalog, store, "runA", "runA/20"),
                               reason="eval loss regressed", operator="test")
    assert done.check["ok"] and done.superseded == ["30", "40"]
    assert sorted(p.name for p in (root / "runA").iterdir()) == ["10", "20"]
    aside = root / ".lastgood" / "quarantine" / done.action_id / "runA"
    assert sorted(p.name for p in aside.iterdir()) == ["30", "40"]
    recovery.apply_plan(catalog, store, recovery.plan_undo(catalog, store, done.action_id), reason="undo",
                        operator="test")
    after = {k: v for k, v in tree_digest(root).items() if not k.startswith(".lastgood")}
    assert after == digest


def test_cli_ls_and_verify(tmp_path: Path) -> None:
    root = make_store(tmp_path)
    home = tmp_path / "home"
    rows = json.loads(lastgood_cli("--format", "json", "ls", str(root), home=home).stdout)
    assert len(rows) == 6
    verified = lastgood_cli("--format", "json", "verify", str(root), "--read-data", home=home)
    assert verified.returncode == 0, verified.stdout[-2000:]


def test_capabilities() -> None:
    from lastgood.readers.orbax.reader import OrbaxReader

    assert capabilities(OrbaxReader) == {Capability.CHECKS, Capability.TENSORS, Capability.METRICS,
                                         Capability.RECOVERY, Capability.RETENTION}


def test_any_fsspec_url_is_read() -> None:
    import fsspec

    from lastgood.readers.registry import pick_reader

    fs = fsspec.filesystem("memory")
    for path in ORBAX.rglob("*"):
        if path.is_file():
            fs.pipe_file(f"/orbaxmem/orbax/{path.relative_to(ORBAX)}", path.read_bytes())
    try:
        url = "memory://orbaxmem/orbax"
        assert pick_reader(url) == "orbax"
        with open_reader(url, "orbax") as reader:
            scan = reader.scan()
            records = [record_from_row(r) for b in scan.checkpoints for r in as_table(b).to_pylist()]
            assert [r.checkpoint_id for r in records] == ["10", "20", "30", "40"]
            assert reader.load_state(records[2])["items"]["metrics"] == {"loss": 0.55}
            assert [f.severity for f in reader.check_checkpoints(records, False)] == []
    finally:
        fs.rm("/orbaxmem", recursive=True)
