"""Round trips of the torch readers (torch-files, lightning, torch-dcp) against the real libraries, in the
``training`` virtualenv (torch 2.13, Lightning 2.6.6):

- torch-files: what Lastgood reads from every sample ``torch.save`` file (state values, every tensor's
  bytes) is what ``torch.load(weights_only=True)`` loads; files written by the tests' own torch-zip
  writer (tests/training_torch_zip.py) load in torch as written;
- Lightning: ``lastgood restore/rollback`` make ``trainer.fit(ckpt_path="last")`` resume from the
  target — ``readback.py lightning`` (the resolution, mirrored from Lightning's code) and a real
  ``fit`` that resumes and reports its starting ``global_step`` — and ``undo`` puts ``last.ckpt``
  back byte for byte;
- DCP (no "latest" pointer of its own): after a rollback, a loader that takes the newest step folder
  picks the target, and ``torch.distributed.checkpoint.load`` loads it; undo brings the folders back.

    .venv/bin/python -m pytest sample_data/generators/training/test_roundtrip_torch.py
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[3]
TRAINING = ROOT / "sample_data" / "training"
V0 = "lightning_logs/version_0"


def _copy(tmp_path: Path, name: str) -> Path:
    folder = tmp_path / name
    shutil.copytree(TRAINING / name, folder)
    return folder


def _act(lastgood: Callable[..., Any], *args: str) -> dict[str, Any]:
    done = lastgood(*args, "--yes", "--reason", "round trip", "--format", "json")
    assert isinstance(done, dict) and (done["check"] is None or done["check"]["ok"]), done
    return done


def _run(python: Path, script: str, *args: str) -> Any:
    done = subprocess.run([str(python), "-c", script, *args], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _tree(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file() and ".lastgood" not in p.parts}


# ---- torch-files: what Lastgood reads is what torch loads -------------------------------------------------

TORCH_TENSORS = r"""
import hashlib, json, sys, torch
out = {}
for path in sys.argv[1:]:
    obj = torch.load(path, map_location="cpu", weights_only=True)
    found = {}
    def walk(node, prefix):
        if isinstance(node, torch.Tensor):
            found[prefix] = hashlib.sha256(node.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()
                                           if node.numel() else b"").hexdigest()
        elif isinstance(node, dict):
            for k, v in node.items():
                walk(v, f"{prefix}.{k}" if prefix else str(k))
        elif isinstance(node, (list, tuple)):
            for i, v in enumerate(node):
                walk(v, f"{prefix}.{i}" if prefix else str(i))
    walk(obj, "")
    plain = {k: v for k, v in obj.items() if isinstance(v, (int, float, str))} if isinstance(obj, dict) else {}
    out[path] = {"tensors": found, "plain": plain}
print(json.dumps(out))
"""


def _ours(url: str, reader_name: str) -> dict[str, dict[str, Any]]:
    from lastgood.readers.base import as_table, record_from_row
    from lastgood.readers.registry import open_reader

    out = {}
    with open_reader(url, reader_name) as reader:
        records = [record_from_row(r) for b in reader.scan().checkpoints for r in as_table(b).to_pylist()]
        for record in records:
            try:
                entries = reader.tensors(record)
                state = reader.load_state(record)
            except Exception:  # noqa: BLE001 - legacy / evil: checked elsewhere
                continue
            tensors = {e.name: hashlib.sha256(b"".join(bytes(c) for c in reader.read_tensor(record, e, 1 << 16)))
                       .hexdigest() for e in entries}
            plain = {k: v for k, v in state.items() if isinstance(v, (int, float, str))} \
                if isinstance(state, dict) else {}
            out[str(Path(url) / record.location)] = {"tensors": tensors, "plain": plain}
    return out


def test_torch_files_read_what_torch_loads(tmp_path: Path, framework_python: Callable[[str], Path]) -> None:
    store = _copy(tmp_path, "torch_save")
    ours = _ours(str(store), "torch-files")
    assert len(ours) == 4  # every file but the legacy one and the canary
    theirs = _run(framework_python("training"), TORCH_TENSORS, *ours)
    assert ours == theirs


def test_files_of_the_tests_writer_load_in_torch(tmp_path: Path, framework_python: Callable[[str], Path]) -> None:
    sys.path.insert(0, str(ROOT))
    from tests.training_torch_zip import lightning_checkpoint, write_torch

    path = write_torch(tmp_path / "w" / "epoch=3-step=25.ckpt", lightning_checkpoint(3, 25, seed=3, loss=0.25),
                       "archive")
    theirs = _run(framework_python("training"), TORCH_TENSORS, str(path))
    assert theirs == _ours(str(tmp_path / "w"), "torch-files")
    assert theirs[str(path)]["plain"] == {"epoch": 3, "global_step": 25, "pytorch-lightning_version": "2.6.6",
                                          "hparams_name": "kwargs"}


# ---- Lightning: fit(ckpt_path="last") resumes from the target ----------------------------------------------

RESUME = r"""
import json, os, sys, warnings
warnings.filterwarnings("ignore")
import torch, lightning as L
from lightning.pytorch.callbacks import Callback, ModelCheckpoint

class LitRegressor(L.LightningModule):  # the generator's module (sample_data/generators/training/generate.py)
    def __init__(self, hidden: int = 8, lr: float = 0.05):
        super().__init__()
        self.save_hyperparameters()
        self.net = torch.nn.Sequential(torch.nn.Linear(4, hidden), torch.nn.Tanh(), torch.nn.Linear(hidden, 1))
    def training_step(self, batch, _idx):
        x, y = batch
        return torch.nn.functional.mse_loss(self.net(x), y)
    def configure_optimizers(self):
        opt = torch.optim.Adam(self.parameters(), lr=self.hparams.lr)
        return {"optimizer": opt, "lr_scheduler": torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.7)}

class Start(Callback):
    def on_train_start(self, trainer, module):
        self.step, self.epoch = trainer.global_step, trainer.current_epoch
        self.weight = module.net[0].weight.detach().flatten()[:4].tolist()

ckdir = sys.argv[1]
start = Start()
x = torch.randn(48, 4)
data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, x[:, :1]), batch_size=4)
trainer = L.Trainer(max_epochs=4, accelerator="cpu", devices=1, logger=False, enable_progress_bar=False,
                    enable_model_summary=False, callbacks=[start, ModelCheckpoint(dirpath=ckdir, save_last=True)],
                    default_root_dir=os.path.dirname(ckdir))
trainer.fit(LitRegressor(), data, ckpt_path="last")
print(json.dumps({"step": start.step, "epoch": start.epoch, "weight": start.weight}))
"""

WEIGHT = r"""
import json, sys, torch
print(json.dumps(torch.load(sys.argv[1], map_location="cpu", weights_only=True)["state_dict"]["net.0.weight"]
                 .flatten()[:4].tolist()))
"""


def _resumed(python: Path, store: Path, tmp: Path) -> dict[str, Any]:
    """A real ``fit(ckpt_path="last")`` on a copy of the store (training writes into the folder)."""
    copy = tmp / f"fit-{len(list(tmp.iterdir()))}"
    shutil.copytree(store, copy, symlinks=True)
    return _run(python, RESUME, str(copy / V0 / "checkpoints"))


def test_lightning_restore_makes_fit_resume_from_the_target_and_undo_restores_last_ckpt(
        tmp_path: Path, readback: Callable[..., Any], lastgood: Callable[..., Any],
        framework_python: Callable[[str], Path]) -> None:
    python = framework_python("training")
    store = _copy(tmp_path, "lightning")
    last = store / V0 / "checkpoints" / "last.ckpt"
    original = last.read_bytes()
    before = readback("training", "lightning", str(store))
    assert before["last_ckpt"]["global_step"] == 20
    restored = _act(lastgood, "restore", str(store), f"{V0}/epoch=1-step=10.ckpt")
    after = readback("training", "lightning", str(store))
    assert after["resume_from"].endswith("checkpoints/last.ckpt") and after["last_ckpt"]["global_step"] == 10
    assert after["last_ckpt"]["epoch"] == 1 and "epoch=1-step=10.ckpt" in after["same_content_as"]
    fitted = _resumed(python, store, tmp_path)
    assert fitted["step"] == 10 and fitted["epoch"] == 1
    expected = _run(python, WEIGHT, str(store / V0 / "checkpoints" / "epoch=1-step=10.ckpt"))
    assert fitted["weight"] == expected
    _act(lastgood, "undo", str(store), restored["action_id"])
    assert last.read_bytes() == original
    assert readback("training", "lightning", str(store))["last_ckpt"]["global_step"] == 20
    assert _resumed(python, store, tmp_path)["step"] == 20


def test_lightning_rollback_with_a_linked_last_ckpt(
        tmp_path: Path, readback: Callable[..., Any], lastgood: Callable[..., Any]) -> None:
    store = _copy(tmp_path, "lightning")
    last = store / V0 / "checkpoints" / "last.ckpt"
    last.unlink()
    last.symlink_to("epoch=2-step=20.ckpt")  # ModelCheckpoint(save_last="link")
    assert readback("training", "lightning", str(store))["is_symlink"]
    rolled = _act(lastgood, "rollback", str(store), V0, "--to", "epoch=0-step=5.ckpt")
    assert sorted(rolled["superseded"]) == ["epoch=1-step=10.ckpt", "epoch=1-step=15.ckpt", "epoch=2-step=20.ckpt"]
    after = readback("training", "lightning", str(store))
    assert after["last_ckpt"]["global_step"] == 5 and not after["is_symlink"]
    _act(lastgood, "undo", str(store), rolled["action_id"])
    back = readback("training", "lightning", str(store))
    assert back["is_symlink"] and back["symlink_target"] == "epoch=2-step=20.ckpt"


# ---- DCP: the newest step folder is the target ------------------------------------------------------------

DCP_NEWEST = r"""
import json, re, sys, warnings
warnings.filterwarnings("ignore")
from pathlib import Path
import torch, torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint import FileSystemReader

root = Path(sys.argv[1])
steps = sorted((p for p in root.iterdir() if p.is_dir() and re.fullmatch(r"step-\d+", p.name)),
               key=lambda p: int(p.name.split("-")[1]))
newest = steps[-1]
FileSystemReader(str(newest)).read_metadata()
state = {"extra": {"step": 0, "loss": 0.0, "tag": ""}}
dcp.load(state, checkpoint_id=str(newest))
print(json.dumps({"newest": newest.name, "folders": [p.name for p in steps], "extra": state["extra"]}))
"""


def test_dcp_rollback_makes_the_newest_folder_the_target_and_undo_brings_the_rest_back(
        tmp_path: Path, lastgood: Callable[..., Any], framework_python: Callable[[str], Path]) -> None:
    python = framework_python("training")
    store = _copy(tmp_path, "dcp")
    tree = _tree(store)
    assert _run(python, DCP_NEWEST, str(store))["newest"] == "step-30"
    rolled = _act(lastgood, "rollback", str(store), "dcp", "--to", "step-20")
    assert sorted(rolled["superseded"]) == ["step-30"]
    after = _run(python, DCP_NEWEST, str(store))
    assert after["folders"] == ["step-10", "step-20"] and after["extra"]["step"] == 20
    assert after["extra"]["tag"] == "step-20"
    _act(lastgood, "undo", str(store), rolled["action_id"])
    assert _run(python, DCP_NEWEST, str(store))["extra"]["step"] == 30
    assert _tree(store) == tree
