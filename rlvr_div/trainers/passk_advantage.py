"""Pass@k Training's closed-form group advantage (Chen et al. 2025, arXiv:2508.10751).

The pass@k objective rewards a *set* of k responses with max(R_1, …, R_k). Pass@k Training scores every size-k
subset S of a prompt's group of n = G responses (drawn from π_old) by R_S = max_{i∈S} R_i, normalises the subset
rewards by their mean and standard deviation over all C(n, k) subsets, and gives each response the mean normalised
reward of the subsets that contain it. For binary rewards (c correct, n_neg = n − c incorrect) the paper derives
this "analytical" advantage in closed form:

    R̄ = 1 − C(n_neg, k)/C(n, k)                  (the fraction of subsets with a correct response)
    σ = sqrt(R̄·(1 − R̄))                         (their standard deviation over subsets)
    A_pos = (1 − R̄)/σ
    A_neg = (1 − R̄ − C(n_neg − 1, k − 1)/C(n − 1, k − 1))/σ

k = 1 is GRPO's group-normalised advantage with the population standard deviation. The advantages are used as they
are (no further centring or std scaling). This is not PKPO (``reward_shaping: pkpo``, Walder & Karkhanis), whose
baselined rewards are an unbiased estimate of ∇pass@k, nor verl's ``grpo_passk`` (only the best response of a group
gets an advantage).

Paper and reference code (RUCAIBox/Passk_Training ``code/passk_adv.py``) differ in one place: the code divides by
σ + 1e-6, the paper by σ. This module follows the paper. When σ = 0 (no correct response, or every subset holds one:
n_neg < k) both numerators are 0 too and the advantage is defined as 0, the limit the code reaches.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch

from rlvr_div.errors import ConfigError
from rlvr_div.passk import pass_at_k_estimate
from rlvr_div.ranges import AT_LEAST_ONE
from rlvr_div.trainers.plugin import register_plugin
from rlvr_div.trainers.reward_shaping import RewardShaping


def passk_group_advantages(n: int, c: int, k: int) -> tuple[float, float]:
    """(A_pos, A_neg) of a group of n responses with c correct, for pass@k (see the module docstring)."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"need 0 <= c <= n and 1 <= k <= n, got n={n}, c={c}, k={k}")
    mean = pass_at_k_estimate(n, c, k)  # R̄ = 1 − C(n_neg, k)/C(n, k)
    var = mean * (1.0 - mean)
    if var <= 0.0:  # c = 0 or n_neg < k
        return 0.0, 0.0
    sigma = math.sqrt(var)
    a_pos = (1.0 - mean) / sigma
    # C(n_neg − 1, k − 1)/C(n − 1, k − 1) = 1 − ρ(n − 1, c, k − 1): the k − 1 others of a negative's subsets miss
    a_neg = (pass_at_k_estimate(n - 1, c, k - 1) - mean) / sigma
    return a_pos, a_neg


def passk_training_advantages(
    correct: torch.Tensor, group: int, k: int, scored: torch.Tensor | None = None, dtype: torch.dtype = torch.float32
) -> torch.Tensor:
    """Per-response Pass@k Training advantages of a batch laid out as consecutive groups of ``group`` responses.

    ``correct`` (N,) bool marks the correct responses; ``scored`` (N,) bool, when given, marks the responses a
    verifier could judge: an unscored response (NaN reward) gets advantage 0 and its group is scored on the other
    responses (n = the group's scored count, which must stay ≥ k; a group with fewer gets 0 everywhere).
    """
    if correct.dim() != 1 or group < 1 or correct.numel() % group:
        raise ValueError(f"correct of shape {tuple(correct.shape)} does not form groups of {group}")
    if not 1 <= k <= group:
        raise ValueError(f"pass@k needs 1 <= k <= group size {group}, got k={k}")
    c = correct.to(torch.bool).view(-1, group).cpu()
    s = torch.ones_like(c) if scored is None else scored.to(torch.bool).view(-1, group).cpu()
    out = torch.zeros(c.shape, dtype=torch.float64)
    for g in range(c.size(0)):
        n = int(s[g].sum())
        if n < k:
            continue
        a_pos, a_neg = passk_group_advantages(n, int((c[g] & s[g]).sum()), k)
        row = torch.where(c[g], torch.tensor(a_pos, dtype=torch.float64), torch.tensor(a_neg, dtype=torch.float64))
        out[g] = torch.where(s[g], row, torch.zeros_like(row))
    return out.reshape(-1).to(dtype=dtype, device=correct.device)


@dataclass
class PassKTrainingArgs:
    """Recipe key of Pass@k Training (selected by ``reward_shaping: passk_training``)."""

    passk_k: int = field(
        default=4,
        metadata={"help": "Pass@k Training: the k of the pass@k objective (1 <= k <= num_generations; 1 = GRPO)."},
    )


def check_passk_training(args: object) -> None:
    """One-line ConfigError for a ``passk_k`` the group cannot hold (the range of ``passk_k``, "acts only with
    reward_shaping: passk_training" and the refusal of TRL's ``scale_rewards``, which would not act on advantages
    already normalised, are declared in :class:`PassKTraining`)."""
    k = args.passk_k
    n = getattr(args, "num_generations", None)
    if n is not None and k > n:
        raise ConfigError(f"passk_k={k} exceeds num_generations={n}; pass@k needs k <= the group size")
    if n is not None and k == n and n > 1:
        raise ConfigError(
            f"passk_k={k} equals num_generations: every group with a correct response then has pass@k = 1 in each "
            "of its subsets, so every advantage is 0 and nothing trains; use passk_k < num_generations"
        )


@register_plugin("advantages", after=("reward_shaping",))
class PassKTraining(RewardShaping):
    name = "passk_training"
    Args = PassKTrainingArgs
    ranges = {"passk_k": AT_LEAST_ONE}
    direct = True

    @classmethod
    def prepare(cls, args: Any) -> None:
        if cls.active(args):
            check_passk_training(args)

    def direct_advantages(self, rewards: torch.Tensor, group: int) -> torch.Tensor:
        return passk_training_advantages(rewards == 1.0, group, self.trainer.args.passk_k, scored=~torch.isnan(rewards))
