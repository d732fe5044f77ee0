"""``trainer: dpg``: the GRPO trainer with the α-DPG / f-DPG plug-in selected (:mod:`rlvr_div.trainers.distributional`).

``DPGConfig`` is ``DivergenceGRPOConfig`` with ``dpg: true`` by default and ``DPGTrainer`` is ``DivergenceGRPOTrainer``
with the model-card tag ``dpg``: neither adds a check, an ``__init__`` or a loss of its own. They live here, not in
the plug-in's module, because they import the GRPO trainer, which imports every plug-in module.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from rlvr_div.trainers.grpo import DivergenceGRPOConfig, DivergenceGRPOTrainer


@dataclass
class DPGConfig(DivergenceGRPOConfig):
    """``DivergenceGRPOConfig`` with α-DPG selected. TRL's ``beta`` is the plug-in's switch for reference log-probs:
    leave it unset."""

    dpg: bool = field(
        default=True, metadata={"help": "Train toward p* with DPG in place of GRPO's loss (trainer: dpg sets it)."}
    )


class DPGTrainer(DivergenceGRPOTrainer):
    """``DivergenceGRPOTrainer`` running α-DPG (its config's ``dpg`` plug-in)."""

    _tag_names = ["trl", "grpo", "rlvr-div", "dpg"]
