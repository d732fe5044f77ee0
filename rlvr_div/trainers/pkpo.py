"""Pass@k policy optimisation (Walder & Karkhanis 2025, PKPO) for binary rewards, as a direct-advantage shaping
plug-in (``reward_shaping: pkpo``, ``pkpo_k``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from rlvr_div.errors import ConfigError
from rlvr_div.passk import pass_at_k_estimate
from rlvr_div.ranges import AT_LEAST_ONE
from rlvr_div.trainers.plugin import register_plugin
from rlvr_div.trainers.reward_shaping import RewardShaping, groups


@dataclass
class PKPOArgs:
    pkpo_k: int = field(default=1, metadata={"help": "PKPO: the k of the pass@k objective (<= num_generations)."})


def _correctgroups(correct: torch.Tensor, group: int, k: int) -> torch.Tensor:
    c = groups(correct.to(torch.bool), group, "correct")
    if not 1 <= k <= group:
        raise ValueError(f"pass@k needs 1 <= k <= group size {group}, got k={k}")
    return c


def pkpo_rewards(correct: torch.Tensor, group: int, k: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """PKPO's transformed rewards for binary correctness, one group of n = ``group`` samples with c correct:

        r_i = k/n                       if sample i is correct,
        r_i = (k/n)·ρ(n−1, c, k−1)      if it is incorrect.

    Σ_i r_i·∇log π(y_i) is an unbiased estimate of ∇ pass@k (checked against Walder & Karkhanis, "Pass@K Policy
    Optimization", and derived here: averaging 1[subset correct]·Σ_{j∈subset} ∇log π(y_j) over all C(n, k) subsets,
    sample i is in C(n−1, k−1) of them; all of them pass when i is correct, and a fraction ρ(n−1, c, k−1) of them
    when it is not, and C(n−1, k−1)/C(n, k) = k/n). k = 1 gives r = correct/n.

    These rewards are *not* safe to centre by the group mean as GRPO does: the mean depends on every sample's
    correctness, so the baselined estimator is biased (for k = n every r_i equals 1[c ≥ 1] and the centred signal is
    identically zero). Use :func:`pkpo_advantages` for a baselined, unbiased version.
    """
    c = _correctgroups(correct, group, k)
    n = group
    counts = c.sum(dim=1, keepdim=True)
    values = [pass_at_k_estimate(n - 1, m, k - 1) if m <= n - 1 else 1.0 for m in range(n + 1)]
    incorrect_value = (k / n) * torch.tensor(values, dtype=torch.float64, device=c.device)[counts]
    correct_value = torch.full(c.shape, k / n, dtype=torch.float64, device=c.device)
    return torch.where(c, correct_value, incorrect_value.expand_as(c)).reshape(-1).to(dtype)


def pkpo_advantages(correct: torch.Tensor, group: int, k: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """PKPO rewards minus a leave-one-out baseline that keeps the gradient estimate unbiased:

        A_i = r_i − (k/n)·ρ(n−1, c_{−i}, k−1),      c_{−i} = number of correct samples other than i,

    the "leave-one-out, k−1" baseline: b_i depends only on the other n−1 samples, so E[b_i·∇log π(y_i)] = 0.
    For an incorrect sample c_{−i} = c and A_i = 0; for a correct one A_i = (k/n)·(1 − ρ(n−1, c−1, k−1)) =
    (k/n)·C(n−c, k−1)/C(n−1, k−1): only correct samples move, and by more when few others are correct. k = n
    rewards only a group's single correct sample; k = 1 gives A_i = correct_i/n.

    Use these directly as advantages (no further centring or std scaling, which would re-introduce bias).
    """
    c = _correctgroups(correct, group, k)
    n = group
    others = c.sum(dim=1, keepdim=True) - c.long()  # c_{-i}
    table = torch.tensor([pass_at_k_estimate(n - 1, m, k - 1) for m in range(n)], dtype=torch.float64, device=c.device)
    baseline = (k / n) * table[others]
    return (pkpo_rewards(correct, group, k, torch.float64).view_as(baseline) - baseline).reshape(-1).to(dtype)


@register_plugin("advantages", after=("reward_shaping",))
class PKPO(RewardShaping):
    name = "pkpo"
    Args = PKPOArgs
    ranges = {"pkpo_k": AT_LEAST_ONE}
    direct = True

    @classmethod
    def prepare(cls, args: Any) -> None:
        if not cls.active(args):
            return
        k, n = args.pkpo_k, args.num_generations
        if n is not None and k > int(n):
            raise ConfigError(f"pkpo_k={k} exceeds num_generations={n}; pass@k needs k <= the group size")

    def direct_advantages(self, rewards: torch.Tensor, group: int) -> torch.Tensor:
        return pkpo_advantages(rewards == 1.0, group, self.trainer.args.pkpo_k)
