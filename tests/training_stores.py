"""Stores for the training-folder readers' tests (hf-trainer, safetensors, deepspeed): copies of the
real fixtures in sample_data/training/ (written by transformers, PEFT and DeepSpeed themselves),
and the damage a test injects into them."""

from __future__ import annotations

import json
import os
import pickle
import shutil
import struct
import zipfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
TRAINING = ROOT / "sample_data" / "training"
CANARY = Path("/tmp/lastgood-canary")
SECRET_TOKEN = "sk-test-hub-token-0123456789abcdef"
T0 = 1_700_000_000.0


def copy_tree(source: Path, target: Path, keep: set[str] | None = None) -> Path:
    """A copy of a fixture folder (``keep``: only these top-level names)."""
    target.parent.mkdir(parents=True, exist_ok=True)

    def ignore(folder: str, names: list[str]) -> list[str]:
        return [n for n in names if keep is not None and Path(folder) == source and n not in keep]
    shutil.copytree(source, target, ignore=ignore)
    return target


def stamp_in_order(root: Path, pattern: str, start: float = T0) -> None:
    """Give each matching folder's files increasing times in step order (as training wrote them):
    a checkout or copy may have scrambled them."""
    folders = sorted(root.glob(pattern), key=lambda p: int("".join(ch for ch in p.name if ch.isdigit()) or 0))
    for number, folder in enumerate(folders):
        for path in sorted(folder.rglob("*")):
            if path.is_file():
                os.utime(path, (start + number * 60, start + number * 60))


def set_mtime(path: Path, when: float) -> None:
    for item in [path, *path.rglob("*")] if path.is_dir() else [path]:
        if item.is_file():
            os.utime(item, (when, when))


# ---- torch.save-shaped zips with a pickle of our choosing (never loaded) ----------------------


class _Args:
    """A stand-in pickled, then renamed to the class training_args.bin names."""


def training_args_pickle(fields: dict[str, object]) -> bytes:
    obj = _Args()
    obj.__dict__.update(fields)
    data = pickle.dumps(obj, protocol=2)
    here = f"c{_Args.__module__}\n_Args\n".encode()
    assert here in data
    return data.replace(here, b"ctransformers.training_args\nTrainingArguments\n")


def torch_zip(prefix: str, data_pkl: bytes) -> bytes:
    """A zip laid out as torch.save writes it (stored records under ``prefix/``)."""
    import io

    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as archive:
        archive.writestr(f"{prefix}/data.pkl", data_pkl)
        archive.writestr(f"{prefix}/byteorder", b"little")
        archive.writestr(f"{prefix}/version", b"3\n")
    return out.getvalue()


# ---- safetensors damage -------------------------------------------------------------------------


def header_of(path: Path) -> tuple[int, dict]:
    raw = path.read_bytes()
    n = struct.unpack("<Q", raw[:8])[0]
    return n, json.loads(raw[8:8 + n])


def truncate_half(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def lie_about_header_length(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[:8] = struct.pack("<Q", len(data) * 4)
    path.write_bytes(bytes(data))


def write_into_tensor(path: Path, name: str | None = None, value: float = float("nan"), count: int = 3) -> str:
    """Overwrite the first ``count`` values of an F32 tensor in place; returns its name."""
    n, header = header_of(path)
    names = [k for k, v in header.items() if k != "__metadata__" and v["dtype"] == "F32"]
    name = name or min(names)
    start = 8 + n + header[name]["data_offsets"][0]
    data = bytearray(path.read_bytes())
    data[start:start + 4 * count] = np.full(count, value, dtype="<f4").tobytes()
    path.write_bytes(bytes(data))
    return name


def zero_tensor(path: Path, name: str) -> None:
    n, header = header_of(path)
    s, e = header[name]["data_offsets"]
    data = bytearray(path.read_bytes())
    data[8 + n + s:8 + n + e] = bytes(e - s)
    path.write_bytes(bytes(data))


def flip_byte_in_tensor(path: Path) -> None:
    """One bit of a tensor's mantissa: the value changes, stays finite."""
    n, header = header_of(path)
    name = min(k for k in header if k != "__metadata__")
    at = 8 + n + header[name]["data_offsets"][0]
    data = bytearray(path.read_bytes())
    data[at] ^= 0x01
    path.write_bytes(bytes(data))


def flip_byte_in_zip_storage(path: Path) -> None:
    """One bit inside the first tensor storage of a torch zip (its CRC-32 no longer matches)."""
    with zipfile.ZipFile(path) as archive:
        info = next(i for i in archive.infolist() if "/data/" in i.filename and i.file_size > 0)
    data = bytearray(path.read_bytes())
    name_len, extra_len = struct.unpack("<HH", data[info.header_offset + 26:info.header_offset + 30])
    at = info.header_offset + 30 + name_len + extra_len
    data[at] ^= 0x01
    path.write_bytes(bytes(data))


def cut_before_central_directory(path: Path) -> None:
    """The file as a save killed before the zip's central directory was written."""
    with zipfile.ZipFile(path) as archive:
        start = archive.start_dir
    path.write_bytes(path.read_bytes()[:start])


def drop_canary(path: Path) -> None:
    """The malicious-pickle canary (torch_save/evil.pt: os.system) in place of ``path``."""
    shutil.copyfile(TRAINING / "torch_save" / "evil.pt", path)


def prune_killed_after_first_op(make_backend, forget, archive: str) -> dict:
    """Run a prune of ``forget`` in a forked process killed right after its first intent operation
    (no cleanup, no journal entry); the prune's entry (its ``id`` names the action). ``make_backend``
    builds the retention backend (in the child)."""
    from lastgood.readers import journal as jr

    entry = {"id": jr.new_action_id(), "time": jr.now_iso(), "operator": "k", "action": "prune", "reason": "r",
             "run_id": None, "namespace": "", "target": None, "previous_head": None, "superseded": [],
             "undo_of": None, "marks": jr.empty_marks(), "note": {}}
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the killed process
        backend = make_backend()
        real = backend.recovery.apply

        def apply_then_die(op: object) -> None:
            real(op)
            os._exit(9)  # killed right after the first operation

        backend.recovery.apply = apply_then_die
        backend.prune(jr.PruneRequest(entry, forget, archive))
        os._exit(0)
    assert os.waitpid(pid, 0)[1] != 0
    return entry
