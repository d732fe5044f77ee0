"""REINFORCE leave-one-out (RLOO; Kool et al. 2019, Ahmadian et al. 2024, "Back to Basics: Revisiting REINFORCE
Style Optimization for Learning from Human Feedback in LLMs") as an advantage plug-in (``reward_shaping: rloo``).

Each completion's baseline is the mean reward of the *other* completions of its group, so it is independent of the
completion itself and the policy gradient stays unbiased (GRPO's group mean includes the completion itself):

    A_i = R_i − (1/(n−1))·Σ_{j≠i} R_j = n/(n−1)·(R_i − mean_group R),

R_i = Σ_k w_k·r_ik the weighted sum of a completion's rewards (TRL's ``reward_weights``; NaN terms skipped), n the
number of scored completions of the group. No division by a standard deviation (``scale_rewards`` must be
``none``); an unscored completion (every reward NaN) gets A = 0 and is left out of the others' baselines; a group with
fewer than two scored completions gets A = 0.
"""

from __future__ import annotations

from typing import Any

import torch

from rlvr_div.trainers.plugin import register_plugin
from rlvr_div.trainers.reward_shaping import RewardShaping


def rloo_advantages(rewards_per_func: torch.Tensor, weights: torch.Tensor, group: int) -> torch.Tensor:
    """A_i = R_i − mean_{j≠i, scored} R_j within consecutive groups of ``group`` completions (see the module
    docstring); rewards (N, K) of K reward functions, NaN = not scored; computed on the rewards' device (TRL keeps
    ``reward_weights`` on the CPU while the gathered rewards are on the accelerator)."""
    unscored = torch.isnan(rewards_per_func).all(dim=1)
    weights = weights.to(rewards_per_func.device)
    total = (rewards_per_func.double() * weights.double().unsqueeze(0)).nansum(dim=1)
    scored = (~unscored).view(-1, group)
    r = torch.where(scored, total.view(-1, group), torch.zeros_like(total.view(-1, group)))
    n = scored.sum(dim=1, keepdim=True)
    baseline = (r.sum(dim=1, keepdim=True) - r) / (n - 1).clamp(min=1)
    adv = torch.where(scored & (n >= 2), r - baseline, torch.zeros_like(r))
    return adv.reshape(-1)


@register_plugin("advantages", after=("reward_shaping",))
class RLOO(RewardShaping):
    name = "rloo"
    unscaled = True  # its own advantages, used as they are: no division by a standard deviation

    def advantages(self, out: dict[str, Any]) -> torch.Tensor | None:
        trainer = self.trainer
        if not trainer.model.training:
            return None
        device = out["completion_mask"].device
        return rloo_advantages(trainer.gathered_rewards, trainer.reward_weights, trainer.num_generations).to(device)
