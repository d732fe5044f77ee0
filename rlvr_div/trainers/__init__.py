"""Trainers by name: each entry gives the config class a recipe is parsed into and the trainer class that runs it.

Classes are imported lazily (``"module:Class"`` strings) so that ``rlvr-div list`` and bad-input checks stay fast.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass

from rlvr_div.registry import Registry


@dataclass(frozen=True)
class TrainerSpec:
    name: str
    config: str  # "module:Class" of a GRPOConfig subclass
    trainer: str  # "module:Class" of a GRPOTrainer subclass
    description: str

    @staticmethod
    def _load(ref: str) -> type:
        module, cls = ref.split(":")
        return getattr(importlib.import_module(module), cls)

    def config_class(self) -> type:
        return self._load(self.config)

    def trainer_class(self) -> type:
        return self._load(self.trainer)


TRAINERS: Registry[TrainerSpec] = Registry("trainer")
TRAINERS.add("grpo", TrainerSpec("grpo", "trl:GRPOConfig", "trl:GRPOTrainer", "TRL's stock GRPOTrainer"))
TRAINERS.add(
    "divergence",
    TrainerSpec(
        "divergence",
        "rlvr_div.trainers.grpo:DivergenceGRPOConfig",
        "rlvr_div.trainers.grpo:DivergenceGRPOTrainer",
        "GRPO with a chosen divergence to the reference (reverse/forward KL, JS, α) and diversity metrics",
    ),
)
TRAINERS.add(
    "dpg",
    TrainerSpec(
        "dpg",
        "rlvr_div.trainers.dpg_trainer:DPGConfig",
        "rlvr_div.trainers.dpg_trainer:DPGTrainer",
        "α-DPG / f-DPG: policy gradient toward the filtered model p* = a(·|valid)",
    ),
)
