#!/usr/bin/env python3
"""Print, as JSON, what each framework's OWN resume logic picks in a checkpoint folder.

    python readback.py LAYOUT DIR

LAYOUT is one of:
  hf_trainer   transformers.trainer_utils.get_last_checkpoint(DIR) -- what
               Trainer.train(resume_from_checkpoint=True) resumes from -- plus the
               trainer_state.json of that checkpoint (global_step, best_model_checkpoint ...)
  deepspeed    the tag DeepSpeedEngine.load_checkpoint(DIR, tag=None) resolves
               ("latest" file, read and .strip()ed) and the files _load_checkpoint /
               _load_zero_checkpoint would open for it (mp rank 00, dp rank 0, world size 1)
  lightning    DIR = run dir (…/lightning) or its checkpoints/ dir.  What
               trainer.fit(ckpt_path="last") resolves to: ModelCheckpoint._find_last_checkpoints
               (files last(-N)?.ckpt in the checkpoint dir) then the newest by mtime;
               plus which epoch=E-step=S.ckpt that last.ckpt duplicates.
  orbax        CheckpointManager(DIR).latest_step() (+ all_steps, and best_step with the
               generator's best_fn).  Needs orbax: re-executes itself in
               .venv-fixtures/orbax if orbax is not importable here.
  dcp          n/a (DCP has no "latest" notion); lists step folders and their .metadata keys.
  peft_adapter where adapter_config.base_model_name_or_path points, resolved.
  hf_sharded   the shards model.safetensors.index.json names.

Extra tools (used to write README.md):
  pickle-globals PATH...   every GLOBAL / STACK_GLOBAL named by each pickle in the given
                           files or folders (torch zip data.pkl, legacy torch files, DCP
                           .metadata, training_args.bin ...).  Walks opcodes with
                           pickletools.genops; never unpickles.
  inventory DIR            every file under DIR with its size.

Only the fixtures this project generated are ever torch.load()ed here.
"""
from __future__ import annotations

import io
import json
import os
import pickletools
import re
import sys
import zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]


def emit(obj) -> None:
    print(json.dumps(obj, indent=2, sort_keys=False, default=str))


def rel(p, base) -> str | None:
    if p is None:
        return None
    try:
        return os.path.relpath(p, base)
    except ValueError:
        return str(p)


# --------------------------------------------------------------------------- hf_trainer
def rb_hf_trainer(d: Path) -> dict:
    import transformers
    from transformers.trainer_utils import get_last_checkpoint, sort_checkpoints

    last = get_last_checkpoint(str(d))
    out = {
        "layout": "hf_trainer",
        "library": f"transformers {transformers.__version__}",
        "logic": "transformers.trainer_utils.get_last_checkpoint(output_dir) "
                 "(= Trainer.train(resume_from_checkpoint=True)): max checkpoint-N dir by N",
        "checkpoints_sorted": [rel(p, d) for p in sort_checkpoints(str(d))],
        "resume_from": rel(last, d),
    }
    if last:
        st = json.loads((Path(last) / "trainer_state.json").read_text())
        out["trainer_state"] = {k: st.get(k) for k in (
            "global_step", "epoch", "max_steps", "best_metric", "best_global_step", "best_model_checkpoint")}
        out["trainer_state"]["log_history_len"] = len(st.get("log_history", []))
    return out


# --------------------------------------------------------------------------- deepspeed
def rb_deepspeed(d: Path) -> dict:
    os.environ.setdefault("DS_ACCELERATOR", "cpu")
    import deepspeed

    # Mirrors DeepSpeedEngine.load_checkpoint(load_dir, tag=None) (deepspeed/runtime/engine.py):
    #   latest_tag = "latest_universal" if self.load_universal_checkpoint() else "latest"
    #   if os.path.isfile(latest_path): tag = open(latest_path).read().strip()
    #   else: warn + return None, None
    # The engine that wrote these fixtures has no universal-checkpoint config, so "latest".
    latest_path = d / "latest"
    tag = latest_path.read_text().strip() if latest_path.is_file() else None
    out = {
        "layout": "deepspeed",
        "library": f"deepspeed {deepspeed.__version__}",
        "logic": "engine.load_checkpoint(dir, tag=None): tag = open(dir/'latest').read().strip(); "
                 "model files = glob(dir/tag/'mp_rank_*_model_states.pt') sorted (ZeRO<3); "
                 "optim = dir/tag/'zero_pp_rank_{dp}_mp_rank_{mp:02d}_optim_states.pt' "
                 "for dp in range(dp_world_size saved in the model states)",
        "latest_file_raw": latest_path.read_text() if latest_path.is_file() else None,
        "resume_tag": tag,
        "tags_on_disk": sorted((p.name for p in d.iterdir() if p.is_dir()), key=_natural),
    }
    if tag is None:
        return out
    import glob

    model_files = sorted(glob.glob(os.path.join(str(d), tag, "mp_rank_*_model_states.pt")))
    out["model_state_files"] = [rel(p, d) for p in model_files]
    if model_files:
        import torch

        sd = torch.load(model_files[0], map_location="cpu", weights_only=False)  # our own fixture
        dp_ws = sd.get("dp_world_size", 1)
        zero = [os.path.join(str(d), tag, f"zero_pp_rank_{dp}_mp_rank_00_optim_states.pt") for dp in range(dp_ws)]
        out["zero_optim_files"] = [{"path": rel(z, d), "exists": os.path.exists(z)} for z in zero]
        out["model_states"] = {
            "keys": sorted(sd.keys()),
            "global_steps": sd.get("global_steps"),
            "global_samples": sd.get("global_samples"),
            "dp_world_size": dp_ws,
            "mp_world_size": sd.get("mp_world_size"),
            "ds_version": sd.get("ds_version"),
            "client_state": {k: sd[k] for k in ("my_step", "note") if k in sd},
        }
    return out


def _natural(s: str):
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", s)]


# --------------------------------------------------------------------------- lightning
def rb_lightning(d: Path) -> dict:
    import lightning
    import torch
    from lightning.pytorch.callbacks import ModelCheckpoint
    from lightning.fabric.utilities.cloud_io import get_filesystem

    ckdir = d
    if not any(p.suffix == ".ckpt" for p in d.iterdir()):
        hits = sorted(d.glob("**/checkpoints"))
        if not hits:
            return {"layout": "lightning", "error": f"no checkpoints/ dir under {d}"}
        ckdir = hits[-1]
    mc = ModelCheckpoint(dirpath=str(ckdir))
    # Lightning's _CheckpointConnector._parse_ckpt_path(ckpt_path="last"):
    candidates = mc._find_last_checkpoints(trainer=None)  # dirpath set -> no trainer needed
    fs = {p: get_filesystem(p) for p in candidates if p}
    ts = {p: f.modified(p) for p, f in fs.items() if f.exists(p)}
    chosen = max(ts, key=ts.get) if ts else None
    out = {
        "layout": "lightning",
        "library": f"lightning {lightning.__version__}",
        "logic": 'trainer.fit(ckpt_path="last"): files ^last(-\\d+)?\\.ckpt in the ModelCheckpoint dir, '
                 "newest by filesystem mtime",
        "checkpoint_dir": rel(ckdir, d),
        "last_candidates": sorted(rel(p, d) for p in candidates),
        "resume_from": rel(chosen, d),
    }
    if chosen:
        p = Path(chosen)
        out["is_symlink"] = p.is_symlink()
        if p.is_symlink():
            out["symlink_target"] = os.readlink(p)
        ck = torch.load(p, map_location="cpu", weights_only=False)  # our own fixture
        out["last_ckpt"] = {"epoch": ck.get("epoch"), "global_step": ck.get("global_step"),
                            "pytorch-lightning_version": ck.get("pytorch-lightning_version"),
                            "keys": sorted(ck.keys())}
        for k, v in ck.get("callbacks", {}).items():
            if k.startswith("ModelCheckpoint"):
                out["model_checkpoint_state"] = {"key": k, **{kk: v.get(kk) for kk in (
                    "monitor", "best_model_score", "best_model_path", "last_model_path", "kth_best_model_path",
                    "dirpath")}}
                if v.get("best_model_score") is not None:
                    out["model_checkpoint_state"]["best_model_score"] = float(v["best_model_score"])
        # Which step file holds the same training position (last.ckpt is a copy by default).
        same = []
        for other in sorted(ckdir.glob("*.ckpt")):
            if other.name == p.name:
                continue
            o = torch.load(other, map_location="cpu", weights_only=False)
            if o.get("global_step") == ck.get("global_step") and all(
                    torch.equal(o["state_dict"][k], ck["state_dict"][k]) for k in ck["state_dict"]):
                same.append(other.name)
        out["same_content_as"] = same
    return out


# --------------------------------------------------------------------------- orbax
def rb_orbax(d: Path) -> dict:
    try:
        import orbax.checkpoint as ocp
    except ImportError:
        py = REPO / ".venv-fixtures" / "orbax" / "bin" / "python"
        if py.exists() and os.environ.get("_LG_ORBAX_REEXEC") != "1":
            os.execve(str(py), [str(py), __file__, "orbax", str(d)], dict(os.environ, _LG_ORBAX_REEXEC="1"))
        raise
    import jax

    with ocp.CheckpointManager(d) as m:
        latest, steps = m.latest_step(), list(m.all_steps())
    opts = ocp.CheckpointManagerOptions(best_fn=lambda x: x["loss"], best_mode="min", read_only=True)
    with ocp.CheckpointManager(d, options=opts) as m:
        best = m.best_step()
        metrics = {s: m.metrics(s) for s in m.all_steps()}
    return {
        "layout": "orbax",
        "library": f"orbax-checkpoint {getattr(ocp, '__version__', '?')}, jax {jax.__version__}",
        "logic": "CheckpointManager(dir).latest_step(): max committed step dir (integer name, "
                 "finalized: no .orbax-checkpoint-tmp suffix)",
        "latest_step": latest,
        "all_steps": steps,
        "best_step_min_loss": best,
        "metrics": metrics,
    }


# --------------------------------------------------------------------------- dcp
def rb_dcp(d: Path) -> dict:
    from torch.distributed.checkpoint import FileSystemReader

    steps = {}
    for p in sorted((p for p in d.iterdir() if p.is_dir()), key=lambda p: _natural(p.name)):
        md = FileSystemReader(str(p)).read_metadata()  # unpickles .metadata: our own fixture only
        steps[p.name] = {
            "files": sorted(f.name for f in p.iterdir()),
            "state_dict_keys": sorted(md.state_dict_metadata),
            "metadata_class": type(md).__name__,
        }
    return {"layout": "dcp", "resume_from": None,
            "logic": "n/a: torch.distributed.checkpoint has no 'latest' pointer; the caller picks a folder",
            "steps": steps}


# --------------------------------------------------------------------------- peft / sharded
def rb_peft(d: Path) -> dict:
    cfg = json.loads((d / "adapter_config.json").read_text())
    b = cfg.get("base_model_name_or_path")
    cand = [d / b, d.parent / b] if b else []
    return {"layout": "peft_adapter", "base_model_name_or_path": b,
            "resolved_base": next((rel(c.resolve(), d) for c in cand if (c / "config.json").exists()), None),
            "note": "PEFT passes the string to from_pretrained(): relative to the CWD of the loading process"}


def rb_sharded(d: Path) -> dict:
    idx = json.loads((d / "model.safetensors.index.json").read_text())
    shards = sorted(set(idx["weight_map"].values()))
    return {"layout": "hf_sharded", "metadata": idx.get("metadata"), "shards": shards,
            "tensors": len(idx["weight_map"]), "all_present": all((d / s).exists() for s in shards)}


# --------------------------------------------------------------------------- pickle globals
_STR_OPS = {"SHORT_BINUNICODE", "BINUNICODE", "BINUNICODE8", "UNICODE", "SHORT_BINSTRING", "BINSTRING", "STRING"}


def pickle_globals(data: bytes, start: int = 0) -> tuple[list[str], int]:
    """Globals named by ONE pickle starting at data[start:]; returns (globals, end offset).
    Tracks string pushes and the memo so STACK_GLOBAL's operands are known."""
    found: list[str] = []
    stack: list = []
    memo: dict = {}
    f = io.BytesIO(data)
    f.seek(start)
    end = start
    for op, arg, pos in pickletools.genops(f):
        name = op.name
        end = pos
        if name == "GLOBAL":
            mod, _, attr = arg.partition(" ")
            found.append(f"{mod}.{attr}")
            stack.append(("G", f"{mod}.{attr}"))
        elif name == "STACK_GLOBAL":
            attr = stack.pop() if stack else None
            mod = stack.pop() if stack else None
            if isinstance(mod, str) and isinstance(attr, str):
                found.append(f"{mod}.{attr}")
            else:
                found.append("<STACK_GLOBAL with unknown operands>")
            stack.append(None)
        elif name in _STR_OPS:
            stack.append(arg if isinstance(arg, str) else arg.decode("latin-1") if isinstance(arg, bytes) else arg)
        elif name in ("PUT", "BINPUT", "LONG_BINPUT"):
            memo[arg] = stack[-1] if stack else None
        elif name == "MEMOIZE":
            memo[len(memo)] = stack[-1] if stack else None
        elif name in ("GET", "BINGET", "LONG_BINGET"):
            stack.append(memo.get(arg))
        elif name == "STOP":
            break
        else:
            stack.append(None)  # other pushes: value unknown (good enough: operands of STACK_GLOBAL are strings)
    return found, f.tell()


def file_pickles(path: Path) -> dict:
    """{'<member>': [globals...]} for every pickle stream in a file, without unpickling."""
    raw = path.read_bytes()
    res: dict = {}
    if path.suffix == ".distcp":
        return distcp_pickles(raw)
    if zipfile.is_zipfile(io.BytesIO(raw)):
        with zipfile.ZipFile(io.BytesIO(raw)) as z:
            for n in z.namelist():
                if n.endswith(".pkl"):
                    res[n] = sorted(set(pickle_globals(z.read(n))[0]))
        return res
    # Legacy torch (non-zip): magic, protocol, sys_info, object, storage keys, then raw storage bytes.
    # A plain pickle (e.g. DCP .metadata) is just one stream.
    off, i = 0, 0
    names = ["magic_number", "protocol_version", "sys_info", "object", "storage_keys"]
    while off < len(raw) and i < len(names):
        try:
            g, off = pickle_globals(raw, off)
        except Exception as e:  # raw storage bytes or not a pickle
            if i == 0:
                res["<not a pickle>"] = str(e)
            break
        res[names[i]] = sorted(set(g))
        i += 1
        if i == 1 and not _looks_like_legacy_torch(raw):
            res = {"pickle": res.pop("magic_number")}
            break
    return res


def distcp_pickles(raw: bytes) -> dict:
    """A DCP .distcp file is a concatenation of one torch.save zip per item (tensors AND
    non-tensor 'bytes' items). Walk every local-file header named */data.pkl and parse
    the pickle that starts right after it (torch stores the records uncompressed)."""
    import struct

    res: dict = {}
    pos, n = 0, 0
    while True:
        pos = raw.find(b"PK\x03\x04", pos)
        if pos < 0:
            break
        (_sig, _ver, _flags, method, _t, _d, _crc, _csz, _usz, nlen, xlen) = struct.unpack_from("<IHHHHHIIIHH", raw, pos)
        name = raw[pos + 30: pos + 30 + nlen].decode("utf-8", "replace")
        start = pos + 30 + nlen + xlen
        if name.endswith("data.pkl") and method == 0:
            g, _ = pickle_globals(raw, start)
            res[f"@{pos}:{name}"] = sorted(set(g))
            n += 1
        pos += 4
    return res


def _looks_like_legacy_torch(raw: bytes) -> bool:
    # torch's MAGIC_NUMBER 0x1950a86a20f9469cfc6c pickled as a LONG1
    return raw[:3] == b"\x80\x02\x8a" and raw[4:14] == (0x1950A86A20F9469CFC6C).to_bytes(10, "little")


def is_pickle_file(p: Path) -> bool:
    if p.suffix in (".pt", ".pth", ".bin", ".ckpt", ".pkl", ".distcp") or p.name == ".metadata":
        return True
    return False


def cmd_pickle_globals(paths: list[str]) -> dict:
    out: dict = {}
    for a in paths:
        root = Path(a)
        files = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file() and is_pickle_file(p))
        for p in files:
            out[str(p)] = file_pickles(p)
    return out


def cmd_inventory(d: Path) -> dict:
    files = sorted(p for p in d.rglob("*") if p.is_file() or p.is_symlink())
    rows = {str(p.relative_to(d)): p.lstat().st_size for p in files}
    return {"root": str(d), "files": rows, "total_bytes": sum(rows.values()), "count": len(rows)}


LAYOUTS = {
    "hf_trainer": rb_hf_trainer,
    "deepspeed": rb_deepspeed,
    "lightning": rb_lightning,
    "orbax": rb_orbax,
    "dcp": rb_dcp,
    "peft_adapter": rb_peft,
    "hf_sharded": rb_sharded,
}


def main(argv: list[str]) -> int:
    if len(argv) < 2 or argv[0] in ("-h", "--help"):
        print(__doc__)
        return 2
    cmd, rest = argv[0], argv[1:]
    if cmd == "pickle-globals":
        emit(cmd_pickle_globals(rest))
    elif cmd == "inventory":
        emit(cmd_inventory(Path(rest[0])))
    elif cmd in LAYOUTS:
        emit(LAYOUTS[cmd](Path(rest[0]).resolve()))
    else:
        print(f"unknown layout {cmd!r}; one of {', '.join(LAYOUTS)}, pickle-globals, inventory", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    import warnings

    warnings.filterwarnings("ignore")
    sys.exit(main(sys.argv[1:]))
