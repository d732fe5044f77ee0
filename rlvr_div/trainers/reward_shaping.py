"""Reward and advantage shaping for GRPO: the ``reward_shaping`` key and what every shaping plug-in shares.

``reward_shaping: <name>`` selects one shaping, a :class:`RewardShaping` plug-in in its own module (MARA
:mod:`~rlvr_div.trainers.mara`, the unlikeliness reward :mod:`~rlvr_div.trainers.unlikeliness`, PKPO
:mod:`~rlvr_div.trainers.pkpo`, W-REINFORCE :mod:`~rlvr_div.trainers.w_reinforce`, Pass@k Training
:mod:`~rlvr_div.trainers.passk_advantage`, outcome exploration :mod:`~rlvr_div.trainers.outcome_exploration`).
A shaping either transforms the validity reward of each completion (column ``validity_reward_index`` of the gathered
rewards, laid out in consecutive groups of ``num_generations`` completions of one prompt, sampled from π_old) before
TRL's group-relative advantages (:func:`rlvr_div.trainers.common.group_advantages`), or (``direct``) its output is the
advantage itself and is used as it is: centring or scaling would bias it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch

from rlvr_div.errors import ConfigError
from rlvr_div.trainers.common import trainer_group_advantages
from rlvr_div.trainers.plugin import GRPOPlugin, plugin_classes, register_plugin


def groups(x: torch.Tensor, group: int, what: str) -> torch.Tensor:
    """``x`` (N,) as (N/group, group); a ValueError when N is not a multiple of ``group``."""
    if x.dim() != 1 or group < 1 or x.numel() % group:
        raise ValueError(f"{what} of shape {tuple(x.shape)} does not form groups of {group}")
    return x.view(-1, group)


@dataclass
class RewardShapingArgs:
    """The recipe key that selects a shaping (each shaping's own keys live in its module)."""

    reward_shaping: str = field(
        default="none",
        metadata={
            "help": "Group reward or advantage shaping: none or a shaping plug-in (mara, needing divergence_coef > 0; "
            "unlikeliness, pkpo, w_reinforce, passk_training, outcome_exploration, ...)."
        },
    )


class RewardShaping(GRPOPlugin):
    """Base of the shaping plug-ins: active when ``reward_shaping`` is its ``name``; replaces a training batch's
    advantages by :meth:`direct_advantages` (``direct``) or by TRL's group advantages of the rewards with the
    validity column replaced by :meth:`shape`. Its keys act only when it is selected, and a direct shaping refuses
    TRL's ``scale_rewards`` (both declared here for every subclass: :meth:`__init_subclass__`)."""

    direct: ClassVar[bool] = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """A shaping is selected by ``reward_shaping: <name>`` (its keys act only then), and a direct one's
        advantages are used as they are (``unscaled``), unless the subclass declares otherwise."""
        super().__init_subclass__(**kwargs)
        if cls.name and "selected_by" not in cls.__dict__:
            cls.selected_by = f"reward_shaping: {cls.name}"
        if "unscaled" not in cls.__dict__:
            cls.unscaled = cls.direct

    @classmethod
    def active(cls, args: Any) -> bool:
        return args.reward_shaping == cls.name

    @classmethod
    def check_task(cls, args: Any, task: str, spec: Any, rewards: list[str]) -> None:
        """A direct shaping (which reads only the validity reward) given several reward functions is refused: the
        others would be computed, logged and silently left out of the advantages."""
        if cls.direct and len(rewards) > 1:
            raise ConfigError(
                f"reward_shaping {cls.name!r} builds its advantages from validity alone, so the other rewards of "
                f"{rewards} would not act; keep one reward (the verifier)"
            )

    def shape(self, rewards: torch.Tensor, out: dict[str, Any]) -> torch.Tensor:
        """The shaped validity rewards (N,) of a gathered batch (NaN = unscored)."""
        raise NotImplementedError

    def direct_advantages(self, rewards: torch.Tensor, group: int) -> torch.Tensor:
        """The advantages (N,) of a direct shaping from the gathered validity rewards (NaN = unscored)."""
        raise NotImplementedError

    def advantages(self, out: dict[str, Any]) -> torch.Tensor | None:
        trainer = self.trainer
        if not trainer.model.training:
            return None
        rewards = trainer.gathered_rewards.clone()
        col = trainer.args.validity_reward_index
        device = out["completion_mask"].device
        if self.direct:
            return self.direct_advantages(rewards[:, col], trainer.num_generations).to(device)
        rewards[:, col] = self.shape(rewards[:, col], out)
        return trainer_group_advantages(trainer, rewards, device)


def shaping_names() -> tuple[str, ...]:
    """``none`` and the name of every registered shaping plug-in."""
    return ("none", *(c.name for c in plugin_classes() if issubclass(c, RewardShaping)))


def shaping(name: str) -> type[RewardShaping] | None:
    """The shaping plug-in called ``name`` (None for ``none``)."""
    return next((c for c in plugin_classes() if issubclass(c, RewardShaping) and c.name == name), None)


@register_plugin("advantages")
class ShapingChoice(GRPOPlugin):
    """Checks the ``reward_shaping`` key itself; the chosen shaping is its own plug-in."""

    name = "reward_shaping"
    Args = RewardShapingArgs
    switches = ("reward_shaping",)  # the key is the selection itself

    @classmethod
    def prepare(cls, args: Any) -> None:
        known = shaping_names()
        if args.reward_shaping not in known:
            raise ConfigError(f"unknown reward_shaping {args.reward_shaping!r}; known: {', '.join(known)}")
