"""``trainer: dpg``: the GRPO trainer with the α-DPG / f-DPG plug-in selected (:mod:`rlvr_div.trainers.distributional`).

``DPGConfig`` is ``DivergenceGRPOConfig`` with ``dpg: true`` (``dpg: false`` is refused: the trainer's name says
α-DPG) and ``DPGTrainer`` is ``DivergenceGRPOTrainer`` (whose model-card tags name the active plug-ins, ``dpg`` here):
neither adds an ``__init__``, a hook or a loss of its own. They live here, not in the plug-in's module, because they
import the GRPO trainer, which imports every plug-in module.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from rlvr_div.errors import ConfigError
from rlvr_div.trainers.grpo import DivergenceGRPOConfig, DivergenceGRPOTrainer


@dataclass
class DPGConfig(DivergenceGRPOConfig):
    """``DivergenceGRPOConfig`` with α-DPG selected. TRL's ``beta`` is the plug-in's switch for reference log-probs:
    leave it unset."""

    dpg: bool = field(default=True, metadata={"help": "Always true with trainer dpg (false is refused)."})

    def __post_init__(self) -> None:
        if self.dpg is not True:
            raise ConfigError(f"dpg={self.dpg} contradicts trainer 'dpg' (α-DPG); use trainer: divergence without it")
        super().__post_init__()


class DPGTrainer(DivergenceGRPOTrainer):
    """``DivergenceGRPOTrainer`` running α-DPG (its config's ``dpg`` plug-in)."""
