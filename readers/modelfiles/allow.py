"""Allowlists of pickle globals beyond ``torch_pickle.TORCH_ALLOW``, as plain-data classes.

Each name here is recorded as a ``PlainObject`` (its class name, arguments and fields) when a
pickle is walked: nothing is imported or called. Found in files the libraries write
(``sample_data/generators/training/README.md``, "Pickle GLOBALS"):

- DeepSpeed's ZeRO optimizer file (``*_optim_states.pt``): the loss scaler, the ZeRO stage
  enum, the parameter fragment addresses;
- ``training_args.bin`` of trainers built on ``TrainingArguments`` (TRL's configs are
  subclasses of it; Trainer itself never loads this file).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from lastgood.readers.tensors.pickle_walk import plain
from lastgood.readers.tensors.torch_pickle import TORCH_ALLOW

DEEPSPEED_GLOBALS = (
    "deepspeed.runtime.fp16.loss_scaler.LossScaler",
    "deepspeed.runtime.fp16.loss_scaler.DynamicLossScaler",
    "deepspeed.runtime.zero.config.ZeroStageEnum",
    "deepspeed.utils.tensor_fragment.fragment_address",
)
TRAINING_ARGS_GLOBALS = (
    "transformers.trainer_utils.EvaluationStrategy",
    "transformers.trainer_utils.FSDPOption",
    "transformers.training_args.ParallelMode",
    "trl.trainer.sft_config.SFTConfig",
    "trl.trainer.dpo_config.DPOConfig",
    "trl.trainer.grpo_config.GRPOConfig",
    "trl.trainer.reward_config.RewardConfig",
    "trl.trainer.kto_config.KTOConfig",
    "trl.trainer.orpo_config.ORPOConfig",
    "trl.trainer.cpo_config.CPOConfig",
    "trl.trainer.ppo_config.PPOConfig",
    "trl.trainer.dpo_config.FDivergenceType",
)


def extended(*names: str) -> Mapping[str, Any]:
    """``TORCH_ALLOW`` plus ``names`` as plain-data classes."""
    return {**TORCH_ALLOW, **{name: plain for name in names}}


DEEPSPEED_ALLOW = extended(*DEEPSPEED_GLOBALS)
TRAINER_ALLOW = extended(*DEEPSPEED_GLOBALS, *TRAINING_ARGS_GLOBALS)  # Trainer + DeepSpeed saves both
