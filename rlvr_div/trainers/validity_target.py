"""The validity-target controller as a GRPO plug-in (``beta_schedule: validity_target``): the divergence coefficient
β is adapted after every scored training batch so that the running validity tracks ``target_validity``
(:class:`rlvr_div.theory.beta_controller.ValidityTargetController`: a PI law on 1/β, the tilted model's closed form
μ(β) = σ(logit A + 1/β), or on log β). Logged: ``controller/beta`` and ``controller/running_validity``. The
controller's state travels with every checkpoint (``validity_controller.json``, written before
``trainer_state.json``), so a resumed run continues with the same β.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from rlvr_div.errors import ConfigError
from rlvr_div.ranges import NON_NEGATIVE, OPEN_UNIT, POSITIVE, PROBABILITY
from rlvr_div.theory.beta_controller import ValidityTargetController
from rlvr_div.trainers import trl_seam
from rlvr_div.trainers.plugin import GRPOPlugin, kl_penalties, kl_penalty_coef, register_plugin

BETA_SCHEDULES = ("constant", "validity_target")
CONTROLLER_STATE = "validity_controller.json"


@dataclass
class ValidityTargetArgs:
    """Recipe keys of the validity-target controller."""

    beta_schedule: str = field(
        default="constant",
        metadata={
            "help": "'constant', or 'validity_target': adapt divergence_coef so validity tracks target_validity."
        },
    )
    target_validity: float = field(default=0.9, metadata={"help": "validity_target: the validity rate to track."})
    validity_horizon: float = field(
        default=256.0, metadata={"help": "validity_target: EMA horizon of the running validity, in completions."}
    )
    controller_gain: float = field(
        default=0.5, metadata={"help": "validity_target: integral gain per logit of validity error, in (0, 1]."}
    )
    controller_prop_gain: float = field(
        default=1.5, metadata={"help": "validity_target: proportional gain (on 1/β or log β) per logit of error."}
    )
    controller_beta_min: float = field(default=1e-3, metadata={"help": "validity_target: lower bound of β."})
    controller_beta_max: float = field(default=100.0, metadata={"help": "validity_target: upper bound of β."})
    controller_approach_steps: float = field(
        default=0.0,
        metadata={
            "help": "validity_target: skip the integral step while the running validity would reach the target "
            "within this many steps at its current rate (conditional integration; 0 = off)."
        },
    )
    controller_actuator: str = field(
        default="inverse",
        metadata={"help": "validity_target: PI law on 'inverse' (1/β, the tilted-model closed form) or 'log' (log β)."},
    )

    def make_controller(self) -> ValidityTargetController:
        return ValidityTargetController(
            init_beta=kl_penalty_coef(self),
            target_validity=self.target_validity,
            horizon=self.validity_horizon,
            gain=self.controller_gain,
            prop_gain=self.controller_prop_gain,
            beta_min=self.controller_beta_min,
            beta_max=self.controller_beta_max,
            approach_steps=self.controller_approach_steps,
            actuator=self.controller_actuator,
        )


@register_plugin("callbacks", after=("divergence",))
class ValidityTarget(GRPOPlugin):
    """Moves the divergence term's live coefficient (``trainer.kl_coef``, which starts at ``divergence_coef``) after
    each scored training batch."""

    name = "validity_target"
    Args = ValidityTargetArgs
    selected_by = "beta_schedule: validity_target"
    switches = ("beta_schedule",)
    ranges = {
        "target_validity": OPEN_UNIT,
        "validity_horizon": POSITIVE,
        "controller_gain": PROBABILITY,
        "controller_prop_gain": NON_NEGATIVE,
        "controller_beta_min": POSITIVE,
        "controller_beta_max": POSITIVE,
        "controller_approach_steps": NON_NEGATIVE,
    }

    def __init__(self, trainer: Any) -> None:
        super().__init__(trainer)
        self.controller = trainer.args.make_controller()

    @classmethod
    def prepare(cls, args: Any) -> None:
        if args.beta_schedule not in BETA_SCHEDULES:
            raise ConfigError(f"beta_schedule must be one of {BETA_SCHEDULES}, got {args.beta_schedule!r}")
        low, high = args.controller_beta_min, args.controller_beta_max
        if not low < high:
            raise ConfigError(f"controller_beta_min={low} must be below controller_beta_max={high}")
        if args.beta_schedule == "validity_target":
            if not kl_penalties(args):
                raise ConfigError(
                    "beta_schedule 'validity_target' adapts divergence_coef: set a divergence and a coef > 0"
                )
            args.make_controller()  # the controller's own checks (its initial β, its actuator)

    @classmethod
    def active(cls, args: Any) -> bool:
        return args.beta_schedule != "constant"  # an unknown schedule reaches prepare, which names it

    def on_rewards(self, rewards_per_func: torch.Tensor, prompts: list[Any], completions: list[Any],
                   valid: torch.Tensor, stats: dict[str, float]) -> None:  # fmt: skip
        trainer = self.trainer
        if not trainer.model.training:
            return
        trainer.kl_coef = self.controller.update(stats["valid_rate"], valid.numel())
        metrics = trl_seam.metrics(trainer, "train")
        metrics["controller/beta"].append(trainer.kl_coef)
        metrics["controller/running_validity"].append(self.controller.running_validity)

    def save(self, checkpoint: Path) -> None:
        tmp = checkpoint / (CONTROLLER_STATE + ".tmp")
        tmp.write_text(json.dumps(self.controller.state_dict()))
        tmp.replace(checkpoint / CONTROLLER_STATE)

    def load(self, checkpoint: Path) -> None:
        path = checkpoint / CONTROLLER_STATE
        if not path.is_file():
            raise ConfigError(
                f"checkpoint {checkpoint} has no {CONTROLLER_STATE} (not saved by a validity_target run), so β "
                "would restart; resume from a checkpoint of this run or start afresh"
            )
        self.controller.load_state_dict(json.loads(path.read_text()))
        self.trainer.kl_coef = self.controller.beta
