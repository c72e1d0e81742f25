#!/usr/bin/env python3
"""Write small, real ML training checkpoint folders with the real libraries.

Run inside the pinned venv (see README.md next to this file):

    .venv-fixtures/training/bin/python sample_data/generators/training/generate.py \
        --out sample_data/training [--only hf_trainer,hf_sharded,peft_adapter,torch_save,lightning,dcp,deepspeed]

Orbax (JAX) lives in its own venv: sample_data/generators/orbax/generate.py.

Everything is seeded (and the script re-executes itself with PYTHONHASHSEED=0), so
tensors, optimizer states and most files are byte-identical between runs.  What
differs run to run is written by the libraries themselves: Trainer's timing
fields (eval_runtime, *_per_second, train_runtime) in trainer_state.json /
*_results.json, DCP .metadata (save_id/load_id UUIDs), and legacy_format.pt
(storage keys are object ids).  Nothing is downloaded: models are built from a
tiny config.  DeepSpeed JIT-builds its CPU shm comm op on first use (needs g++;
~90 s once, cached in ~/.cache/torch_extensions).
"""
from __future__ import annotations

import argparse
import io
import json
import os
import random
import shutil
import sys
import warnings
import zipfile
from pathlib import Path

# Quiet, offline, CPU-only, deterministic.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
os.environ.setdefault("WANDB_DISABLED", "true")
os.environ.setdefault("DS_BUILD_OPS", "0")
os.environ.setdefault("DS_ACCELERATOR", "cpu")
warnings.filterwarnings("ignore")

import numpy as np  # noqa: E402
import torch  # noqa: E402

ALL_LAYOUTS = ["hf_trainer", "hf_sharded", "peft_adapter", "torch_save", "lightning", "dcp", "deepspeed"]
SEED = 1234

VOCAB = 48
SEQ = 12


def seed_all(seed: int = SEED) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    torch.use_deterministic_algorithms(True, warn_only=True)


def fresh(path: Path) -> Path:
    if path.exists() or path.is_symlink():
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()
    path.mkdir(parents=True)
    return path


# --------------------------------------------------------------------------- tiny HF model
def tiny_llama_config():
    from transformers import LlamaConfig

    return LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=32,
        tie_word_embeddings=False,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=0,
    )


def tiny_llama():
    from transformers import LlamaForCausalLM

    seed_all()
    return LlamaForCausalLM(tiny_llama_config())


class SeqDataset(torch.utils.data.Dataset):
    """Arithmetic sequences mod VOCAB: learnable by a 2-layer model in a few dozen steps."""

    def __init__(self, n: int, seed: int, steps=(1, 2, 3)):
        g = torch.Generator().manual_seed(seed)
        self.rows = []
        for _ in range(n):
            start = int(torch.randint(3, VOCAB, (1,), generator=g))
            step = steps[int(torch.randint(0, len(steps), (1,), generator=g))]
            ids = torch.tensor([3 + (start + i * step) % (VOCAB - 3) for i in range(SEQ)], dtype=torch.long)
            self.rows.append(ids)

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, i):
        ids = self.rows[i]
        return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": ids.clone()}


# --------------------------------------------------------------------------- 1. hf_trainer
def gen_hf_trainer(out: Path) -> None:
    from transformers import Trainer, TrainingArguments, set_seed

    d = fresh(out / "hf_trainer")
    # Relative output_dir (cwd = --out), as a user typing `--output_dir hf_trainer`
    # gets: trainer_state.best_model_checkpoint is then "hf_trainer/checkpoint-16",
    # not an absolute path of this machine.
    os.chdir(out)
    set_seed(SEED)
    model = tiny_llama()
    args = TrainingArguments(
        output_dir="hf_trainer",
        max_steps=40,
        per_device_train_batch_size=4,
        per_device_eval_batch_size=8,
        learning_rate=3e-2,
        lr_scheduler_type="linear",
        warmup_steps=4,
        weight_decay=0.0,
        logging_strategy="steps",
        logging_steps=2,
        eval_strategy="steps",
        eval_steps=8,
        save_strategy="steps",
        save_steps=8,
        load_best_model_at_end=True,
        metric_for_best_model="eval_loss",
        greater_is_better=False,
        report_to="none",
        use_cpu=True,
        seed=SEED,
        data_seed=SEED,
        dataloader_num_workers=0,
        disable_tqdm=True,
        run_name="lastgood-fixture",
    )
    # The eval set mixes a stride the training set shows (2) with one it never
    # shows (3): eval_loss bottoms out at step 16 and the best checkpoint is
    # neither the first nor the last one.
    train_ds = SeqDataset(64, seed=1, steps=(1, 2))
    eval_ds = SeqDataset(16, seed=2, steps=(2, 3))
    trainer = Trainer(model=model, args=args, train_dataset=train_ds, eval_dataset=eval_ds)
    result = trainer.train()
    # What run_clm.py & co. do after training: final model + state + metrics at the root.
    trainer.save_model()
    trainer.save_state()
    trainer.save_metrics("train", result.metrics)
    print(f"  hf_trainer: best={trainer.state.best_model_checkpoint} metric={trainer.state.best_metric}")


# --------------------------------------------------------------------------- 2. hf_sharded
def gen_hf_sharded(out: Path) -> None:
    d = fresh(out / "hf_sharded")
    model = tiny_llama()
    # Total weights are ~37 KB (fp32); 16 KB shards force 3 files + index.
    model.save_pretrained(str(d), max_shard_size="16KB")


# --------------------------------------------------------------------------- 3. peft_adapter (+ hf_base)
def gen_peft_adapter(out: Path) -> None:
    from peft import LoraConfig, PeftModel, get_peft_model
    from transformers import LlamaForCausalLM

    base_dir = fresh(out / "hf_base")
    ad_dir = fresh(out / "peft_adapter")
    tiny_llama().save_pretrained(str(base_dir))

    # Load the base by the relative path a user would type from the adapter's
    # parent, so adapter_config.base_model_name_or_path == "hf_base"
    # (resolve it against the adapter folder's parent: sample_data/training/).
    cwd = os.getcwd()
    os.chdir(out)
    try:
        seed_all()
        base = LlamaForCausalLM.from_pretrained("hf_base")
        cfg = LoraConfig(
            r=4,
            lora_alpha=8,
            lora_dropout=0.0,
            target_modules=["q_proj", "v_proj"],
            task_type="CAUSAL_LM",
            bias="none",
        )
        model = get_peft_model(base, cfg)
        # A few real steps so lora_B is non-zero (it starts at zeros).
        opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
        ds = SeqDataset(16, seed=3)
        batch = {k: torch.stack([ds[i][k] for i in range(len(ds))]) for k in ds[0]}
        model.train()
        for _ in range(5):
            loss = model(**batch).loss
            loss.backward()
            opt.step()
            opt.zero_grad()
        model.save_pretrained("peft_adapter")
    finally:
        os.chdir(cwd)
    # Self-check: the adapter reloads onto the base it names.
    reloaded = PeftModel.from_pretrained(LlamaForCausalLM.from_pretrained(str(base_dir)), str(ad_dir))
    assert any("lora_B" in n for n, _ in reloaded.named_parameters())


# --------------------------------------------------------------------------- 4. torch_save
class TinyMLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(4, 8)
        self.norm = torch.nn.BatchNorm1d(8)  # buffers incl. an int64 num_batches_tracked
        self.fc2 = torch.nn.Linear(8, 2)

    def forward(self, x):
        return self.fc2(torch.relu(self.norm(self.fc1(x))))


def _trained_mlp(steps: int = 3):
    seed_all()
    m = TinyMLP()
    opt = torch.optim.AdamW(m.parameters(), lr=1e-2)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
    x, y = torch.randn(16, 4), torch.randn(16, 2)
    for _ in range(steps):
        loss = torch.nn.functional.mse_loss(m(x), y)
        loss.backward()
        opt.step()
        sched.step()
        opt.zero_grad()
    return m, opt, sched, float(loss)


def gen_torch_save(out: Path) -> None:
    d = fresh(out / "torch_save")
    m, opt, sched, loss = _trained_mlp()

    # a) plain state_dict (.pt)
    torch.save(m.state_dict(), d / "model_state_dict.pt")

    # b) training-resume dict with optimizer/scheduler state and plain Python values (.pth)
    torch.save(
        {
            "epoch": 2,
            "global_step": 3,
            "loss": loss,
            "run_name": "lastgood-fixture",
            "lr_history": [0.01, 0.01, 0.005],
            "model_state_dict": m.state_dict(),
            "optimizer_state_dict": opt.state_dict(),
            "scheduler_state_dict": sched.state_dict(),
        },
        d / "training_checkpoint.pth",
    )

    # c) bf16 weights (.bin, like pytorch_model.bin)
    torch.save({k: v.to(torch.bfloat16) if v.is_floating_point() else v for k, v in m.state_dict().items()},
               d / "pytorch_model_bf16.bin")

    # d) views sharing one storage, incl. a non-contiguous transpose and a strided slice
    g = torch.Generator().manual_seed(SEED)
    base = torch.randn(4, 6, generator=g)
    torch.save(
        {
            "base": base,
            "transposed": base.t(),  # non-contiguous, same storage
            "row1": base[1],  # storage_offset 6
            "every_other_col": base[:, ::2],  # stride (6, 2)
            "flat_tail": base.view(-1)[10:],  # offset 10
        },
        d / "shared_views.pt",
    )

    # e) legacy (pre-1.6) non-zip pickle stream format
    torch.save(m.state_dict(), d / "legacy_format.pt", _use_new_zipfile_serialization=False)

    # f) malicious-pickle canary (never loaded here)
    write_evil_canary(d / "evil.pt")

    # self-checks on our own files
    sv = torch.load(d / "shared_views.pt", weights_only=True)
    assert sv["transposed"].untyped_storage().data_ptr() == sv["base"].untyped_storage().data_ptr()
    assert not sv["transposed"].is_contiguous()
    assert torch.load(d / "pytorch_model_bf16.bin", weights_only=True)["fc1.weight"].dtype == torch.bfloat16
    torch.load(d / "legacy_format.pt", weights_only=True)
    torch.load(d / "training_checkpoint.pth", weights_only=True)


CANARY_CMD = "echo LASTGOOD-CANARY > /tmp/lastgood-canary"


def write_evil_canary(path: Path) -> None:
    """A torch-zip that is real in every record except data.pkl, whose pickle is
    GLOBAL 'os system' + REDUCE(CANARY_CMD).  Built by copying the records of a
    real torch.save zip and swapping data.pkl -- the file is never loaded."""
    buf = io.BytesIO()
    torch.save({"w": torch.zeros(2)}, buf)
    buf.seek(0)
    # protocol 2 by hand: PROTO 2, GLOBAL 'os\nsystem\n', (str), TUPLE1, REDUCE, STOP
    arg = CANARY_CMD.encode()
    evil = (
        b"\x80\x02"
        + b"cos\nsystem\n"
        + b"X" + len(arg).to_bytes(4, "little") + arg
        + b"\x85"  # TUPLE1
        + b"R"  # REDUCE
        + b"."  # STOP
    )
    with zipfile.ZipFile(buf) as src, zipfile.ZipFile(path, "w", compression=zipfile.ZIP_STORED) as dst:
        for info in src.infolist():
            data = src.read(info.filename)
            if info.filename.endswith("/data.pkl"):
                data = evil
            zi = zipfile.ZipInfo(info.filename, date_time=(1980, 1, 1, 0, 0, 0))
            zi.compress_type = zipfile.ZIP_STORED
            dst.writestr(zi, data)


# --------------------------------------------------------------------------- 5. lightning
def gen_lightning(out: Path) -> None:
    import lightning as L
    from lightning.pytorch.callbacks import ModelCheckpoint
    from lightning.pytorch.loggers import CSVLogger

    d = fresh(out / "lightning")

    class LitRegressor(L.LightningModule):
        def __init__(self, hidden: int = 8, lr: float = 0.05):
            super().__init__()
            self.save_hyperparameters()
            self.net = torch.nn.Sequential(torch.nn.Linear(4, hidden), torch.nn.Tanh(), torch.nn.Linear(hidden, 1))

        def training_step(self, batch, _idx):
            x, y = batch
            loss = torch.nn.functional.mse_loss(self.net(x), y)
            self.log("train_loss", loss, on_step=True, on_epoch=True, prog_bar=False)
            return loss

        def validation_step(self, batch, _idx):
            x, y = batch
            self.log("val_loss", torch.nn.functional.mse_loss(self.net(x), y))

        def configure_optimizers(self):
            opt = torch.optim.Adam(self.parameters(), lr=self.hparams.lr)
            sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.7)
            return {"optimizer": opt, "lr_scheduler": sched}

    L.seed_everything(SEED, workers=True, verbose=False)
    g = torch.Generator().manual_seed(SEED)
    x = torch.randn(48, 4, generator=g)
    y = x @ torch.tensor([[0.5], [-1.0], [2.0], [0.25]]) + 0.1
    train = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x[:32], y[:32]), batch_size=4, shuffle=True,
                                        generator=torch.Generator().manual_seed(SEED))
    val = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x[32:], y[32:]), batch_size=8)

    # Relative paths (cwd = --out) so the paths Lightning stores inside each .ckpt
    # (ModelCheckpoint state: dirpath, best_model_path, last_model_path ...) read
    # "lightning/lightning_logs/version_0/checkpoints/..." rather than this machine's.
    # No dirpath: ModelCheckpoint uses the logger's <save_dir>/<name>/version_<v>/checkpoints.
    os.chdir(out)
    logger = CSVLogger(save_dir="lightning", name="lightning_logs", version=0)
    ckpt = ModelCheckpoint(
        every_n_train_steps=5,
        save_last=True,
        monitor="train_loss_step",
        mode="min",
        save_top_k=-1,
    )
    trainer = L.Trainer(
        max_epochs=3,
        accelerator="cpu",
        devices=1,
        logger=logger,
        callbacks=[ckpt],
        enable_progress_bar=False,
        enable_model_summary=False,
        log_every_n_steps=2,
        deterministic=True,
        default_root_dir="lightning",
    )
    trainer.fit(LitRegressor(), train, val)
    print(f"  lightning: best={ckpt.best_model_path} last={ckpt.last_model_path}")


# --------------------------------------------------------------------------- 6. dcp
def gen_dcp(out: Path) -> None:
    import torch.distributed.checkpoint as dcp

    d = fresh(out / "dcp")
    os.chdir(out)
    seed_all()
    model = TinyMLP()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    x, y = torch.randn(16, 4), torch.randn(16, 2)
    step = 0
    for target in (10, 20, 30):
        while step < target:
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad()
            step += 1
        # The documented single-process shape: nested dicts of tensors + plain values.
        state = {
            "model": model.state_dict(),
            "optim": opt.state_dict(),
            "extra": {"step": step, "loss": float(loss), "tag": f"step-{step}"},
        }
        # Relative checkpoint_id (cwd = --out): .metadata pickles it as
        # StorageMeta.checkpoint_id = PosixPath('dcp/step-N'), not this machine's path.
        dcp.save(state, checkpoint_id=f"dcp/step-{step}")
    # self-check: load the last one back in place
    state = {"model": TinyMLP().state_dict(), "extra": {"step": 0, "loss": 0.0, "tag": ""}}
    dcp.load(state, checkpoint_id=str(d / "step-30"))
    assert state["extra"]["step"] == 30, state["extra"]


# --------------------------------------------------------------------------- 8. deepspeed
def gen_deepspeed(out: Path) -> None:
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(29500 + os.getpid() % 1000))
    os.environ.setdefault("RANK", "0")
    os.environ.setdefault("LOCAL_RANK", "0")
    os.environ.setdefault("WORLD_SIZE", "1")
    os.environ.setdefault("LOCAL_WORLD_SIZE", "1")
    import deepspeed

    d = fresh(out / "deepspeed")
    seed_all()
    model = TinyMLP()
    config = {
        "train_micro_batch_size_per_gpu": 4,
        "gradient_accumulation_steps": 1,
        "steps_per_print": 1000,
        "optimizer": {"type": "Adam", "params": {"lr": 1e-2, "torch_adam": True, "adam_w_mode": True}},
        "scheduler": {"type": "WarmupLR", "params": {"warmup_min_lr": 0, "warmup_max_lr": 1e-2,
                                                     "warmup_num_steps": 5}},
        "zero_optimization": {"stage": 1},
        "fp16": {"enabled": False},
        "bf16": {"enabled": False},
        "wall_clock_breakdown": False,
    }
    engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=config,
                                           dist_init_required=True)
    x, y = torch.randn(16, 4), torch.randn(16, 2)
    for step in range(1, 16):
        i = (step * 4) % 16
        loss = torch.nn.functional.mse_loss(engine(x[i:i + 4]), y[i:i + 4])
        engine.backward(loss)
        engine.step()
        if step % 5 == 0:
            engine.save_checkpoint(str(d), client_state={"my_step": step, "note": "lastgood-fixture"})
    # self-check: the engine resolves 'latest' and loads it back
    path, client = engine.load_checkpoint(str(d))
    assert client["my_step"] == 15, client
    import torch.distributed as dist

    if dist.is_initialized():
        dist.destroy_process_group()


GENERATORS = {
    "hf_trainer": gen_hf_trainer,
    "hf_sharded": gen_hf_sharded,
    "peft_adapter": gen_peft_adapter,
    "torch_save": gen_torch_save,
    "lightning": gen_lightning,
    "dcp": gen_dcp,
    "deepspeed": gen_deepspeed,
}


def main(argv=None) -> int:
    if os.environ.get("PYTHONHASHSEED") != "0" or not os.environ.get("_LASTGOOD_REEXEC"):
        # set iteration order (e.g. adapter_config.target_modules) depends on the hash seed,
        # which only takes effect at interpreter start.
        env = dict(os.environ, PYTHONHASHSEED="0", _LASTGOOD_REEXEC="1")
        os.execve(sys.executable, [sys.executable, os.path.abspath(__file__)] + (argv or sys.argv[1:]), env)
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="sample_data/training")
    ap.add_argument("--only", default="", help="comma list of: " + ",".join(ALL_LAYOUTS))
    a = ap.parse_args(argv)
    out = Path(a.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()
    todo = [x for x in a.only.split(",") if x] or ALL_LAYOUTS
    for name in todo:
        if name not in GENERATORS:
            ap.error(f"unknown layout {name!r}")
        print(f"== {name}", flush=True)
        cwd = os.getcwd()
        try:
            GENERATORS[name](out)
        finally:
            os.chdir(cwd)
    return 0


if __name__ == "__main__":
    sys.exit(main())
