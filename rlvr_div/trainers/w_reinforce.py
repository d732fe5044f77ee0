"""W-REINFORCE: positive and negative sample reinforcement (Zhu et al. 2025, "The Surprising Effectiveness of
Negative Reinforcement in LLM Reasoning", arXiv:2506.01347), as a direct-advantage shaping plug-in
(``reward_shaping: w_reinforce``, ``psr_weight``, ``nsr_weight``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from rlvr_div.errors import ConfigError
from rlvr_div.ranges import NON_NEGATIVE
from rlvr_div.trainers.plugin import register_plugin
from rlvr_div.trainers.reward_shaping import RewardShaping


def w_reinforce_advantages(
    rewards: torch.Tensor, psr_weight: float = 0.1, nsr_weight: float = 1.0, dtype: torch.dtype = torch.float32
) -> torch.Tensor:
    """A_i = λ_+ if sample i is correct (reward == 1), −λ_− if it is scored and not correct, 0 if unscored (NaN).

    With binary rewards r ∈ {+1, −1} the RLVR loss splits into positive and negative sample reinforcement,
    L_PSR = −E_x[Σ_{y: r=+1} π_θ(y|x)] and L_NSR = −E_x[Σ_{y: r=−1} −π_θ(y|x)]; W-REINFORCE minimises
    λ·L_PSR + L_NSR (λ = 0.1 in the paper). On samples y ∼ π_θ its REINFORCE gradient weighs ∇log π_θ(y) by +λ for a
    correct sample and −1 for an incorrect one, with no baseline: these are the advantages, used as they are.
    ``psr_weight`` = λ_+ = λ and ``nsr_weight`` = λ_− (1 in the paper); (1, 0) is PSR alone, (0, 1) NSR alone.
    The paper's code computes the same advantages (+λ for score 1, −1 for score 0).
    """
    correct = rewards == 1.0
    scored = ~torch.isnan(rewards)
    pos = torch.full_like(rewards, psr_weight, dtype=torch.float64)
    neg = torch.full_like(rewards, -nsr_weight, dtype=torch.float64)
    adv = torch.where(correct, pos, torch.where(scored, neg, torch.zeros_like(pos)))
    return adv.to(dtype)


@dataclass
class WReinforceArgs:
    """Recipe keys of W-REINFORCE (selected by ``reward_shaping: w_reinforce``)."""

    psr_weight: float = field(
        default=0.1,
        metadata={"help": "W-REINFORCE: λ, the advantage of a correct sample (positive sample reinforcement)."},
    )
    nsr_weight: float = field(
        default=1.0,
        metadata={"help": "W-REINFORCE: minus the advantage of an incorrect sample (negative sample reinforcement)."},
    )


def check_w_reinforce(args: Any) -> None:
    """One-line ConfigError for ``psr_weight`` and ``nsr_weight`` both 0 (their ranges, "acts only with
    reward_shaping: w_reinforce" and the refusal of TRL's ``scale_rewards`` are declared in :class:`WReinforce`)."""
    if args.psr_weight == 0 and args.nsr_weight == 0:
        raise ConfigError("psr_weight and nsr_weight are both 0: every advantage would be 0")


@register_plugin("advantages", after=("reward_shaping",))
class WReinforce(RewardShaping):
    name = "w_reinforce"
    Args = WReinforceArgs
    ranges = {"psr_weight": NON_NEGATIVE, "nsr_weight": NON_NEGATIVE}
    direct = True

    @classmethod
    def prepare(cls, args: Any) -> None:
        if cls.active(args):
            check_w_reinforce(args)

    def direct_advantages(self, rewards: torch.Tensor, group: int) -> torch.Tensor:
        return w_reinforce_advantages(rewards, self.trainer.args.psr_weight, self.trainer.args.nsr_weight)
