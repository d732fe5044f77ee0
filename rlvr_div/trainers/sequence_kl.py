"""The sequence-level reverse KL in the reward (the KL penalty of classic RLHF/PPO), for GRPO.

Each completion y_i of a group gets the penalised reward

    r'_i = R_i − β·Σ_t (log π_old(y_t | x, y_<t) − log π_ref(y_t | x, y_<t)),

R_i the weighted sum of its rewards and the sum over its completion tokens the k1 estimate of KL(π‖π_ref) on that
sequence (detached: log-probs of the sampling policy π_old and of the reference). Advantages are TRL's group-relative
ones on r' (``scale_rewards`` as configured); no KL term enters the loss. Because E_π[∇ log π] = 0,

    E_{y∼π}[(v(y) − β·log(π(y)/π_ref(y)))·∇ log π(y)] = ∇ (E_π[v] − β·KL(π‖π_ref)),

so this is REINFORCE on the sequence-level KL-regularised objective; with ``scale_rewards: none`` (no division by
the group's standard deviation, which would rescale β per group) its optimum is the tilted model
p_β ∝ π_ref·e^{v/β}: validity σ(logit A + 1/β) and valid part p* = π_ref(·|valid) at every β. The group mean is a
baseline of the same expectation up to the factor (G − 1)/G, so the fixed point is unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from rlvr_div.errors import ConfigError
from rlvr_div.ranges import NON_NEGATIVE
from rlvr_div.trainers import trl_seam
from rlvr_div.trainers.common import group_advantages, sampling_logps, sequence_logps
from rlvr_div.trainers.plugin import GRPOPlugin, kl_penalties, register_plugin


@dataclass
class SequenceKLArgs:
    sequence_kl_coef: float = field(
        default=0.0,
        metadata={
            "help": "β of the sequence-level reverse KL in the reward, r' = r − β·Σ_t log(π_old/π_ref) (no KL in the "
            "loss; with scale_rewards none the optimum is p_β). 0: off."
        },
    )


def check_sequence_kl(coef: float, kl_penalty: bool, aggregation: str) -> None:
    """One-line errors: a combination whose meaning would be ambiguous (the coefficient's range, >= 0, is declared
    in :class:`SequenceKL`)."""
    if coef == 0:
        return
    if kl_penalty:
        raise ConfigError(
            "sequence_kl_coef puts the KL in the reward; a divergence term in the loss as well is ambiguous: set "
            "divergence: none (or sequence_kl_coef: 0)"
        )
    if aggregation != "sum_then_normalize":
        raise ConfigError(
            f"sequence_kl_coef needs multi_objective_aggregation 'sum_then_normalize' (the penalty is added to the "
            f"summed reward), got {aggregation!r}"
        )


def penalised_rewards(
    rewards_per_func: torch.Tensor, weights: torch.Tensor, seq_log_ratio: torch.Tensor, coef: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """(rewards with one more column −β·Σ_t log(π_old/π_ref), weights with a 1 for it): TRL's weighted sum of the
    columns is then r' = R − β·k1(sequence)."""
    column = (-coef * seq_log_ratio).to(rewards_per_func.dtype).unsqueeze(1)
    return torch.cat([rewards_per_func, column], dim=1), torch.cat([weights, weights.new_ones(1)])


@register_plugin("advantages", after=("divergence",))
class SequenceKL(GRPOPlugin):
    """Replaces a training batch's advantages by the group advantages of r' (needs TRL's reference log-probs)."""

    name = "sequence_kl"
    Args = SequenceKLArgs
    switches = ("sequence_kl_coef",)  # its one key is the selection (> 0)
    ranges = {"sequence_kl_coef": NON_NEGATIVE}

    @classmethod
    def prepare(cls, args: Any) -> None:
        check_sequence_kl(args.sequence_kl_coef, bool(kl_penalties(args)), args.multi_objective_aggregation)

    @classmethod
    def active(cls, args: Any) -> bool:
        return args.sequence_kl_coef > 0

    @classmethod
    def reference_coef(cls, args: Any) -> float:
        return float(args.sequence_kl_coef)

    def advantages(self, out: dict[str, Any]) -> torch.Tensor | None:
        trainer = self.trainer
        if not trainer.model.training:
            return None
        mask = out["completion_mask"]
        log_ratio = sequence_logps(trainer, sampling_logps(trainer, out) - out["ref_per_token_logps"], mask)
        trl_seam.metrics(trainer, "train")["sequence_kl/k1"].append(log_ratio.mean().item())
        rewards, weights = penalised_rewards(
            trainer.gathered_rewards, trainer.reward_weights.to(log_ratio.device), log_ratio,
            trainer.args.sequence_kl_coef,
        )  # fmt: skip
        return group_advantages(
            rewards.to(mask.device), weights.to(mask.device), trainer.num_generations,
            trainer.multi_objective_aggregation, trainer.scale_rewards,
        )  # fmt: skip
