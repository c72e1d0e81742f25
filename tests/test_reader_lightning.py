"""The lightning reader: ModelCheckpoint folders of .ckpt files, last.ckpt as the head, recovery by
replacing last.ckpt (archived first; undo byte for byte).

Stores: sample_data/training/lightning (written by Lightning 2.6.6: epoch=E-step=S.ckpt every 5
steps, last.ckpt a copy of the newest, CSVLogger metrics.csv) and runs written by
tests/training_torch_zip.py in the same shape (version_1, with a secret in its hyper-parameters).
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import pytest

from lastgood.checks import Check
from lastgood.readers.base import Capability, TensorSummary, as_table, capabilities, record_from_row
from lastgood.readers.registry import open_reader
from lastgood.readers.testing import Damage, ReaderConformance
from tests.helpers import ROOT, lastgood_cli
from tests.test_reader_torch_files import drop_storage, flip_storage_byte, truncate
from tests.training_torch_zip import lightning_checkpoint, write_torch

LIGHTNING = ROOT / "sample_data" / "training" / "lightning"
V0 = "lightning_logs/version_0"
V1 = "lightning_logs/version_1"
SECRET = "sk-test-LIGHTNING-0123456789abcdef"


def write_run(root: Path, run: str, steps: list[tuple[int, int]], last: bool = True) -> Path:
    """Files as ModelCheckpoint(every_n_train_steps=5, save_last=True) writes them."""
    folder = root / run / "checkpoints"
    for i, (epoch, step) in enumerate(steps):
        path = write_torch(folder / f"epoch={epoch}-step={step}.ckpt",
                           lightning_checkpoint(epoch, step, seed=step, loss=1.0 / (i + 1),
                                                hparams={"hidden": 8, "api_key": SECRET}), "archive")
        if last:
            shutil.copyfile(path, folder / "last.ckpt")
    return folder


def make_store(tmp: Path) -> Path:
    root = tmp / "lightning"
    shutil.copytree(LIGHTNING, root)  # copy2: the files keep Lightning's mtimes
    write_run(root, V1, [(0, 6), (1, 12), (2, 18)])  # ids differ from version_0's: the kit restores by bare id
    return root


def listed(root: Path):
    with open_reader(str(root), "lightning") as reader:
        scan = reader.scan()
        rows = [r for b in scan.checkpoints for r in as_table(b).to_pylist()]
    return [record_from_row(r) for r in rows], scan


def heads(root: Path) -> dict[str, str]:
    return {h.run_id: h.checkpoint_id for h in listed(root)[1].heads}


def ckpts(root: Path, run: str = V0) -> Path:
    return root / run / "checkpoints"


class TestLightningKit(ReaderConformance):
    reader_name = "lightning"
    secret = SECRET

    def make_store(self, tmp: Path) -> str:
        tmp.mkdir(parents=True, exist_ok=True)
        return str(make_store(tmp))

    def append(self, url: str) -> int:
        write_run(Path(url), V1, [(3, 24)])
        return 1

    def damages(self) -> list[Damage]:
        def rename(url: str) -> None:
            folder = ckpts(Path(url), V1)
            (folder / "epoch=1-step=12.ckpt").rename(folder / "epoch=1-step=13.ckpt")

        def link_out(url: str) -> None:
            last = ckpts(Path(url)) / "last.ckpt"
            last.unlink()
            last.symlink_to(Path(url).parent / "elsewhere.ckpt")
            shutil.copyfile(ckpts(Path(url)) / "epoch=0-step=5.ckpt", Path(url).parent / "elsewhere.ckpt")

        def evil(url: str) -> None:
            shutil.copyfile(ROOT / "sample_data" / "training" / "torch_save" / "evil.pt",
                            ckpts(Path(url), V1) / "epoch=9-step=99.ckpt")

        return [
            Damage("a truncated .ckpt", lambda u: truncate(ckpts(Path(u)) / "epoch=1-step=15.ckpt"),
                   {Check.INCOMPLETE}, "structure"),
            Damage("a flipped storage byte", lambda u: flip_storage_byte(ckpts(Path(u)) / "epoch=1-step=10.ckpt"),
                   {Check.CRC_MISMATCH}),
            Damage("a missing storage entry", lambda u: drop_storage(ckpts(Path(u), V1) / "epoch=0-step=6.ckpt"),
                   {Check.BLOB_MISSING}, "structure"),
            Damage("a name that disagrees with the pickle", rename, {Check.METADATA_INVALID}, "structure"),
            Damage("last.ckpt linking out of the store", link_out, {Check.UNSAFE_PATH}, "structure"),
            Damage("a malicious pickle", evil, {Check.UNSAFE_PICKLE}, "structure"),
        ]


# ---- the listing ---------------------------------------------------------------------------------


def test_checkpoints_steps_and_the_head_as_lightning_resolves_it(tmp_path: Path) -> None:
    root = make_store(tmp_path)
    records, scan = listed(root)
    v0 = [r for r in records if r.run_id == V0]
    assert [(r.checkpoint_id, r.step, r.metadata["epoch"], r.parent_id) for r in v0] == [
        ("epoch=0-step=5.ckpt", 5, 0, None), ("epoch=1-step=10.ckpt", 10, 1, "epoch=0-step=5.ckpt"),
        ("epoch=1-step=15.ckpt", 15, 1, "epoch=1-step=10.ckpt"),
        ("epoch=2-step=20.ckpt", 20, 2, "epoch=1-step=15.ckpt")]
    assert all(r.metadata["lightning_version"] == "2.6.6" and r.trigger == "periodic" for r in v0)
    # last.ckpt is a copy of epoch=2-step=20.ckpt: the head, not a checkpoint of its own
    assert {h.run_id: h.checkpoint_id for h in scan.heads} == {V0: "epoch=2-step=20.ckpt", V1: "epoch=2-step=18.ckpt"}


def test_a_last_file_of_its_own_content_is_listed_and_is_the_head(tmp_path: Path) -> None:
    root = make_store(tmp_path)
    write_torch(ckpts(root) / "last.ckpt", lightning_checkpoint(2, 24, seed=24, loss=0.5), "archive")
    records, scan = listed(root)
    [last] = [r for r in records if r.run_id == V0 and r.trigger == "last"]
    assert last.checkpoint_id.startswith("last.ckpt#") and last.step == 24 and last.metadata["last"]
    assert heads(root)[V0] == last.checkpoint_id


def test_the_newest_last_file_wins_as_in_lightning(tmp_path: Path) -> None:
    root = make_store(tmp_path)
    folder = ckpts(root)
    shutil.copyfile(folder / "epoch=1-step=10.ckpt", folder / "last-v1.ckpt")
    past = time.time() - 3600
    os.utime(folder / "last.ckpt", (past, past))
    assert heads(root)[V0] == "epoch=1-step=10.ckpt"
    os.utime(folder / "last-v1.ckpt", (past - 10, past - 10))
    assert heads(root)[V0] == "epoch=2-step=20.ckpt"


def test_a_link_as_last_ckpt_names_its_target(tmp_path: Path) -> None:
    root = make_store(tmp_path)
    last = ckpts(root) / "last.ckpt"
    last.unlink()
    last.symlink_to("epoch=1-step=15.ckpt")  # save_last="link"
    assert heads(root)[V0] == "epoch=1-step=15.ckpt"


def test_state_tensors_and_checks(tmp_path: Path) -> None:
    root = make_store(tmp_path)
    records, _ = listed(root)
    rec = next(r for r in records if r.checkpoint_id == "epoch=1-step=10.ckpt" and r.run_id == V0)
    with open_reader(str(root), "lightning") as reader:
        state = reader.load_state(rec)
        [monitor] = state["callbacks"].values()
        assert state["global_step"] == 10 and state["hyper_parameters"] == {"hidden": 8, "lr": 0.05}
        assert state["state_dict"]["net.0.weight"] == {"dtype": "F32", "shape": [8, 4]}
        assert monitor["monitor"] == "train_loss_step"
        assert monitor["current_score"]["value"] == pytest.approx(0.7284, abs=1e-4)
        names = [t.name for t in reader.tensors(rec)]
        assert names[:4] == ["net.0.weight", "net.0.bias", "net.2.weight", "net.2.bias"]
        assert all(n.startswith("optimizer_states.0.state.") for n in names[4:]) and len(names) == 16
        items = list(reader.check_checkpoints([rec], True))
    summaries = [s for s in items if isinstance(s, TensorSummary)]
    assert [s.name for s in summaries] == names and not [f for f in items if not isinstance(f, TensorSummary)]


def test_metrics_from_the_csv_logger_and_the_monitored_values(tmp_path: Path) -> None:
    root = make_store(tmp_path)
    with open_reader(str(root), "lightning") as reader:
        v0 = reader.metrics(V0)
        v1 = reader.metrics(V1)
    names = {p.name for p in v0}
    assert names == {"train_loss_step", "train_loss_epoch", "val_loss"}
    assert any(p.step == 23 and p.name == "val_loss" and p.value == pytest.approx(0.4594, abs=1e-4) for p in v0)
    # version_1 has no CSVLogger: the ModelCheckpoint's monitored value saved in each checkpoint
    assert [(p.step, p.name, round(p.value, 3)) for p in v1] == [
        (6, "train_loss_step", 1.0), (12, "train_loss_step", 0.5), (18, "train_loss_step", 0.333)]


# ---- recovery: last.ckpt replaced, archived, put back byte for byte -------------------------------------


def _index(root: Path, tmp: Path):
    from lastgood.index.catalog import Catalog
    from lastgood.stores import index_store

    catalog = Catalog(str(tmp / "index.duckdb"))
    return catalog, index_store(catalog, str(root), reader_name="lightning", check="structure").store


def _apply(catalog, store, plan):
    from lastgood import recovery

    return recovery.apply_plan(catalog, store, plan, reason="test", operator="test")


def test_restore_replaces_last_ckpt_and_undo_puts_it_back_byte_for_byte(tmp_path: Path) -> None:
    from lastgood import recovery

    root = make_store(tmp_path)
    folder = ckpts(root)
    original = (folder / "last.ckpt").read_bytes()
    catalog, store = _index(root, tmp_path)
    done = _apply(catalog, store, recovery.plan_restore(catalog, store, f"{V0}/epoch=1-step=10.ckpt"))
    assert done.check["ok"], done.check
    assert (folder / "last.ckpt").read_bytes() == (folder / "epoch=1-step=10.ckpt").read_bytes()
    assert (root / ".lastgood" / "archive" / done.action_id / V0 / "checkpoints" / "last.ckpt").read_bytes() == original
    assert heads(root)[V0] == "epoch=1-step=10.ckpt"
    assert sorted(p.name for p in folder.iterdir()) == sorted(
        ["epoch=0-step=5.ckpt", "epoch=1-step=10.ckpt", "epoch=1-step=15.ckpt", "epoch=2-step=20.ckpt", "last.ckpt"])
    _apply(catalog, store, recovery.plan_undo(catalog, store, done.action_id))
    assert (folder / "last.ckpt").read_bytes() == original and heads(root)[V0] == "epoch=2-step=20.ckpt"
    entries = sorted((root / ".lastgood" / "journal" / "entries").iterdir())
    assert [json.loads(p.read_text())["action"] for p in entries] == ["restore", "undo"]
    assert not (root / ".lastgood" / "journal" / "lock.json").exists()


def test_a_linked_last_ckpt_is_archived_as_the_link_and_comes_back(tmp_path: Path) -> None:
    from lastgood import recovery

    root = make_store(tmp_path)
    last = ckpts(root) / "last.ckpt"
    last.unlink()
    last.symlink_to("epoch=2-step=20.ckpt")
    catalog, store = _index(root, tmp_path)
    done = _apply(catalog, store, recovery.plan_rollback(catalog, store, V0, f"{V0}/epoch=0-step=5.ckpt"))
    assert not last.is_symlink() and last.read_bytes() == (ckpts(root) / "epoch=0-step=5.ckpt").read_bytes()
    assert done.superseded == ["epoch=1-step=10.ckpt", "epoch=1-step=15.ckpt", "epoch=2-step=20.ckpt"]
    _apply(catalog, store, recovery.plan_undo(catalog, store, done.action_id))
    assert last.is_symlink() and os.readlink(last) == "epoch=2-step=20.ckpt"


def test_a_last_file_of_its_own_is_still_listed_from_the_archive_and_restorable(tmp_path: Path) -> None:
    from lastgood import recovery

    root = make_store(tmp_path)
    write_torch(ckpts(root) / "last.ckpt", lightning_checkpoint(2, 24, seed=24, loss=0.5), "archive")
    own = (ckpts(root) / "last.ckpt").read_bytes()
    catalog, store = _index(root, tmp_path)
    head = heads(root)[V0]
    done = _apply(catalog, store, recovery.plan_restore(catalog, store, f"{V0}/epoch=1-step=15.ckpt"))
    records, _ = listed(root)
    archived = next(r for r in records if r.checkpoint_id == head)
    assert archived.metadata["archived_by"] == done.action_id and archived.location.startswith(".lastgood/archive/")
    back = _apply(catalog, store, recovery.plan_restore(catalog, store, f"{V0}/{head}"))
    assert back.check["ok"] and (ckpts(root) / "last.ckpt").read_bytes() == own and heads(root)[V0] == head


def test_a_moved_head_is_a_conflict_and_nothing_is_written(tmp_path: Path) -> None:
    from lastgood.errors import ConflictError
    from lastgood import recovery

    root = make_store(tmp_path)
    catalog, store = _index(root, tmp_path)
    plan = recovery.plan_restore(catalog, store, f"{V0}/epoch=0-step=5.ckpt")
    write_run(root, V0, [(3, 25)])  # training went on meanwhile
    before = (ckpts(root) / "last.ckpt").read_bytes()
    with pytest.raises(ConflictError):
        _apply(catalog, store, plan)
    assert (ckpts(root) / "last.ckpt").read_bytes() == before and not (root / ".lastgood" / "archive").exists()


def test_an_interrupted_restore_is_finished_by_the_next_action(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from lastgood.readers.lightning.recovery import LightningRecovery
    from lastgood import recovery

    root = make_store(tmp_path)
    catalog, store = _index(root, tmp_path)
    real = LightningRecovery._replace

    def crash(self, source: str, last: str) -> None:
        real(self, source, last)
        raise OSError("killed after the rename")
    monkeypatch.setattr(LightningRecovery, "_replace", crash)
    with pytest.raises(OSError):
        _apply(catalog, store, recovery.plan_restore(catalog, store, f"{V0}/epoch=0-step=5.ckpt"))
    monkeypatch.setattr(LightningRecovery, "_replace", real)
    assert (root / ".lastgood" / "journal" / "lock.json").exists()
    backend = recovery.backend(store)
    assert backend.pending() and backend.journal_entries() == []
    _apply(catalog, store, recovery.plan_quarantine(catalog, store, f"{V0}/epoch=1-step=15.ckpt"))
    assert [e["action"] for e in backend.journal_entries()] == ["restore", "quarantine"]
    assert heads(root)[V0] == "epoch=0-step=5.ckpt"


def test_cli_lists_shows_and_verifies(tmp_path: Path) -> None:
    root = make_store(tmp_path)
    home = tmp_path / "home"
    rows = json.loads(lastgood_cli("--format", "json", "ls", str(root), home=home).stdout)
    assert len(rows) == 7 and {r["run_id"] for r in rows} == {V0, V1}
    shown = lastgood_cli("--format", "json", "show", str(root), f"{V0}/epoch=1-step=15.ckpt", home=home)
    shown = json.loads(shown.stdout)
    assert shown["state"]["global_step"] == 15
    verified = lastgood_cli("--format", "json", "verify", str(root), "--read-data", home=home)
    assert verified.returncode == 0, verified.stdout[-2000:]


def test_capabilities() -> None:
    from lastgood.readers.lightning.reader import LightningReader

    assert capabilities(LightningReader) == {Capability.CHECKS, Capability.TENSORS, Capability.METRICS,
                                             Capability.RECOVERY, Capability.RETENTION}


def test_any_fsspec_url_is_read_by_range() -> None:
    import fsspec

    from lastgood.readers.registry import pick_reader

    fs = fsspec.filesystem("memory")
    for path in LIGHTNING.rglob("*"):
        if path.is_file():
            fs.pipe_file(f"/litmem/lightning/{path.relative_to(LIGHTNING)}", path.read_bytes())
    try:
        url = "memory://litmem/lightning"
        assert pick_reader(url) == "lightning"
        with open_reader(url, "lightning") as reader:
            scan = reader.scan()
            records = [record_from_row(r) for b in scan.checkpoints for r in as_table(b).to_pylist()]
            assert len(records) == 4 and {h.checkpoint_id for h in scan.heads} == {"epoch=2-step=20.ckpt"}
            assert reader.load_state(records[0])["global_step"] == 5
            assert len(reader.metrics(V0)) > 10
            items = list(reader.check_checkpoints(records, True))
        assert sum(isinstance(s, TensorSummary) for s in items) == 64
    finally:
        fs.rm("/litmem", recursive=True)


def test_a_file_with_an_unsafe_pickle_never_becomes_last_ckpt(tmp_path: Path) -> None:
    from lastgood import recovery
    from lastgood.errors import UsageError

    root = make_store(tmp_path)
    shutil.copyfile(ROOT / "sample_data" / "training" / "torch_save" / "evil.pt", ckpts(root) / "epoch=0-step=1.ckpt")
    before = (ckpts(root) / "last.ckpt").read_bytes()
    catalog, store = _index(root, tmp_path)
    with pytest.raises(UsageError, match="can never be restored.*os.system"):  # refused by the planner
        recovery.plan_restore(catalog, store, f"{V0}/epoch=0-step=1.ckpt", force=True)
    ref = f"{V0}/epoch=0-step=1.ckpt"  # and by the backend itself, for a plan made before the finding
    plan = recovery.Plan("restore", V0, "", ref.split("/")[-1], recovery.backend(store).head(V0, ""),
                         restore_from=ref.split("/")[-1])
    with pytest.raises(UsageError, match="can never be restored.*os.system"):
        recovery.apply_plan(catalog, store, plan, reason="test", operator="test")
    assert (ckpts(root) / "last.ckpt").read_bytes() == before and recovery.backend(store).journal_entries() == []
