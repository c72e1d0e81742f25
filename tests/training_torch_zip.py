"""Write ``torch.save``-format zip files without torch (the tests' own writer of training checkpoints).

The layout torch 2.x writes: stored zip records ``<prefix>/data.pkl`` (pickle protocol 2, storages as
persistent ids ``("storage", torch.<Type>Storage, key, "cpu", numel)``, tensors rebuilt by
``torch._utils._rebuild_tensor_v2``), ``.format_version``, ``.storage_alignment``, ``byteorder``,
``data/<key>`` (one per storage, 64-byte aligned), ``version``, ``.data/serialization_id``. The
opcodes are emitted by hand: nothing here imports torch or pickles a Python object, and the round
trip suite checks that real torch loads these files (``torch.load(weights_only=True)``).
"""

from __future__ import annotations

import hashlib
import io
import struct
import zipfile
from collections import OrderedDict
from pathlib import Path
from typing import Any

import numpy as np

STORAGES = {np.dtype("float32"): "FloatStorage", np.dtype("float64"): "DoubleStorage",
            np.dtype("int64"): "LongStorage", np.dtype("int32"): "IntStorage",
            np.dtype("float16"): "HalfStorage", np.dtype("uint8"): "ByteStorage", np.dtype("bool"): "BoolStorage"}


class _Emitter:
    def __init__(self) -> None:
        self.out = bytearray(b"\x80\x02")
        self.storages: list[np.ndarray] = []

    def global_(self, module: str, name: str) -> None:
        self.out += b"c" + module.encode() + b"\n" + name.encode() + b"\n"

    def value(self, v: Any) -> None:  # noqa: C901 - one branch per pickle type
        out = self.out
        if v is None:
            out += b"N"
        elif v is True or v is False:
            out += b"\x88" if v else b"\x89"
        elif isinstance(v, int):
            if 0 <= v < 2**31 - 1:
                out += b"J" + struct.pack("<i", v)
            else:
                raw = v.to_bytes((v.bit_length() + 8) // 8, "little", signed=True)
                out += b"\x8a" + bytes([len(raw)]) + raw
        elif isinstance(v, float):
            out += b"G" + struct.pack(">d", v)
        elif isinstance(v, str):
            raw = v.encode()
            out += b"X" + struct.pack("<I", len(raw)) + raw
        elif isinstance(v, np.ndarray):
            self.tensor(v)
        elif isinstance(v, OrderedDict):
            self.global_("collections", "OrderedDict")
            out += b")R"
            self.items(v)
        elif isinstance(v, dict):
            out += b"}"
            self.items(v)
        elif isinstance(v, list):
            out += b"]"
            if v:
                out += b"("
                for item in v:
                    self.value(item)
                out += b"e"
        elif isinstance(v, tuple):
            out += b"("
            for item in v:
                self.value(item)
            out += b"t"
        else:
            raise TypeError(type(v))

    def items(self, mapping: dict[Any, Any]) -> None:
        if not mapping:
            return
        self.out += b"("
        for key, item in mapping.items():
            self.value(key)
            self.value(item)
        self.out += b"u"

    def tensor(self, array: np.ndarray) -> None:
        array = np.array(array, order="C", copy=True)  # ascontiguousarray would make a 0-d array 1-d
        key = str(len(self.storages))
        self.storages.append(array)
        self.global_("torch._utils", "_rebuild_tensor_v2")
        self.out += b"("
        self.out += b"("  # the persistent id tuple
        self.value("storage")
        self.global_("torch", STORAGES[array.dtype])
        self.value(key)
        self.value("cpu")
        self.value(int(array.size))
        self.out += b"tQ"
        self.value(0)
        self.value(tuple(int(d) for d in array.shape))
        strides = tuple(int(s // array.itemsize) for s in array.strides) if array.ndim else ()
        self.value(strides)
        self.value(False)
        self.global_("collections", "OrderedDict")
        self.out += b")R"
        self.out += b"tR"


def torch_zip_bytes(obj: Any, prefix: str = "archive") -> bytes:
    """The bytes of ``torch.save(obj)`` for ``obj`` made of dicts, lists, tuples, scalars, strings and
    numpy arrays (the tensors)."""
    emitter = _Emitter()
    emitter.value(obj)
    emitter.out += b"."
    records = [("data.pkl", bytes(emitter.out)), (".format_version", b"1"), (".storage_alignment", b"64"),
               ("byteorder", b"little")]
    records += [(f"data/{i}", a.astype(a.dtype.newbyteorder("<")).tobytes()) for i, a in enumerate(emitter.storages)]
    records += [("version", b"3\n"),
                (".data/serialization_id", hashlib.sha1(bytes(emitter.out)).hexdigest().encode()[:40])]
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_STORED) as archive:
        for name, data in records:
            info = zipfile.ZipInfo(f"{prefix}/{name}", date_time=(1980, 1, 1, 0, 0, 0))
            info.extra = _alignment(buffer.tell(), len(info.filename.encode()))
            archive.writestr(info, data)
    return buffer.getvalue()


def _alignment(offset: int, name_length: int) -> bytes:
    """An extra field ("FB" padding, as torch writes) putting the record's data on a 64-byte boundary."""
    start = offset + 30 + name_length + 4
    pad = (-start) % 64
    return b"FB" + struct.pack("<H", pad) + b"Z" * pad


def write_torch(path: Path, obj: Any, prefix: str | None = None) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(torch_zip_bytes(obj, prefix or path.stem))
    return path


# ---- training-shaped objects ---------------------------------------------------------------------


def tiny_state_dict(seed: int) -> OrderedDict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return OrderedDict([("net.0.weight", rng.standard_normal((8, 4)).astype(np.float32)),
                        ("net.0.bias", rng.standard_normal(8).astype(np.float32)),
                        ("net.2.weight", rng.standard_normal((1, 8)).astype(np.float32)),
                        ("net.2.bias", rng.standard_normal(1).astype(np.float32))])


MONITOR_KEY = ("ModelCheckpoint{'monitor': 'train_loss_step', 'mode': 'min', 'every_n_train_steps': 5, "
               "'every_n_epochs': 0, 'train_time_interval': None}")


def lightning_checkpoint(epoch: int, global_step: int, seed: int, loss: float,
                         hparams: dict[str, Any] | None = None) -> dict[str, Any]:
    """A dict shaped as Lightning 2.6's ``.ckpt`` content (see sample_data/generators/training/README.md)."""
    state = tiny_state_dict(seed)
    optimizer = {"state": {i: {"step": np.array(float(global_step), dtype=np.float32),
                               "exp_avg": np.zeros_like(t) + 0.01, "exp_avg_sq": np.zeros_like(t) + 1e-4}
                           for i, t in enumerate(state.values())},
                 "param_groups": [{"lr": 0.05, "betas": (0.9, 0.999), "eps": 1e-08, "weight_decay": 0,
                                   "params": list(range(len(state)))}]}
    return {"epoch": epoch, "global_step": global_step, "pytorch-lightning_version": "2.6.6",
            "state_dict": state,
            "loops": {"fit_loop": {"epoch_progress": {"total": {"ready": epoch + 1, "completed": epoch}}}},
            "callbacks": {MONITOR_KEY: {"monitor": "train_loss_step",
                                        "current_score": np.array(loss, dtype=np.float32),
                                        "best_model_score": np.array(loss, dtype=np.float32),
                                        "dirpath": "lightning_logs/version_1/checkpoints"}},
            "optimizer_states": [optimizer],
            "lr_schedulers": [{"step_size": 1, "gamma": 0.7, "base_lrs": [0.05], "last_epoch": epoch}],
            "hparams_name": "kwargs", "hyper_parameters": dict(hparams or {"hidden": 8, "lr": 0.05})}
