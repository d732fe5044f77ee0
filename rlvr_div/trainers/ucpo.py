"""UCPO, Uniform-Correct Policy Optimization (Lochab, Li & Zhang 2026, "Uniform-Correct Policy Optimization: Breaking
RLVR's Indifference to Diversity", arXiv:2605.00365; code AnamikaLochab/UCPO), as an advantage-shaping plug-in
(``reward_shaping: ucpo``, ``ucpo_tau``).

GRPO gives every correct sample of a group the same advantage, so it is indifferent to how mass spreads over the
correct answers, and on-policy sampling then reinforces the likely ones most: mass collapses onto a few correct
answers. UCPO penalises non-uniformity of the policy's distribution over a group's correct samples and redistributes
their advantage toward the under-represented ones. For a group with c ≥ 2 correct samples (validity 1):

    ℓ_i = log π_old(y_i|x)/|y_i|                    (mean per-token log-prob, correct samples only)
    q_i = exp(ℓ_i)/Σ_{j correct} exp(ℓ_j)           (the policy's distribution over the group's correct samples)
    w_i = (1 − τ)/c + τ·(1/q_i)/Σ_{j correct} (1/q_j)    (q clamped at 1e-6)
    A_i ← A_i·c·w_i                                 (correct samples; incorrect samples and groups with c ≤ 1 keep A_i)

τ = ``ucpo_tau`` ∈ (0, 1], A_i TRL's group advantage as configured. τ = 0 is GRPO; τ = 1 gives every correct
sample an advantage ∝ 1/q_i, so that in expectation (a correct answer is drawn ∝ q) each gets the same push. Σ_i c·w_i
= c, so with binary rewards (every correct A_i equal) the group's total positive advantage is unchanged: only who gets
it changes. The non-uniformity the penalty acts on is logged as ``ucpo/kl_to_uniform`` = KL(q ‖ U_c) = log c − H(q),
averaged over the groups with c ≥ 2.

Source: the estimator the authors' run scripts select (``algorithm.adv_estimator=iq``, ``algorithm.tau=0.2``,
``algorithm.alpha=0.0`` in ``scripts_c/run_ucpo_1.5b.sh`` and ``run_ucpo_7b.sh``;
``compute_dgrpo_advantage_outcome_invq_l`` in their ``verl/verl/trainer/ppo/core_algos.py``), which their README names
as UCPO's advantage estimator. The paper's method section was not readable here, so the penalty is implemented as that
released code computes it; its optional ``alpha`` term on incorrect samples (0 in the released runs) is not
implemented.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch

from rlvr_div.ranges import PROBABILITY
from rlvr_div.trainers import trl_seam
from rlvr_div.trainers.common import sampling_logps, sequence_logps, trainer_group_advantages
from rlvr_div.trainers.plugin import register_plugin
from rlvr_div.trainers.reward_shaping import RewardShaping, groups

Q_FLOOR = 1e-6  # the released code clamps q before inverting it


def correct_set_distribution(validity: torch.Tensor, mean_logps: torch.Tensor, group: int) -> torch.Tensor:
    """q (N/G, G): softmax of the mean per-token log-probs over each group's correct samples (validity == 1), 0 on
    the others (a row of zeros for a group without a correct sample)."""
    correct = groups(validity, group, "validity") == 1.0
    ell = groups(mean_logps.detach().to(torch.float64), group, "mean_logps")
    masked = torch.where(correct, ell, torch.full_like(ell, -math.inf))
    norm = torch.logsumexp(masked, dim=1, keepdim=True)
    return torch.where(correct, (masked - norm).exp(), torch.zeros_like(ell))


def kl_to_uniform(q: torch.Tensor) -> torch.Tensor:
    """KL(q ‖ U_c) = Σ_i q_i·log q_i + log c per row of ``q`` (c = the row's support size; 0 for an empty row)."""
    c = (q > 0).sum(dim=1).to(q.dtype)
    plogp = torch.where(q > 0, q * q.clamp(min=1e-300).log(), torch.zeros_like(q)).sum(dim=1)
    return torch.where(c > 0, plogp + c.clamp(min=1.0).log(), torch.zeros_like(c))


def ucpo_weights(validity: torch.Tensor, mean_logps: torch.Tensor, group: int, tau: float) -> torch.Tensor:
    """The factors (N,) that UCPO multiplies the advantages by: c·w_i on the correct samples of a group with c ≥ 2
    correct samples, 1 elsewhere (module docstring)."""
    q = correct_set_distribution(validity, mean_logps, group)
    correct = q > 0
    c = correct.sum(dim=1, keepdim=True).to(q.dtype)
    inv = torch.where(correct, 1.0 / q.clamp(min=Q_FLOOR), torch.zeros_like(q))
    target = inv / inv.sum(dim=1, keepdim=True).clamp(min=1e-300)
    w = (1.0 - tau) / c.clamp(min=1.0) + tau * target
    return torch.where(correct & (c >= 2), c * w, torch.ones_like(q)).reshape(-1)


def ucpo_advantages(
    advantages: torch.Tensor, validity: torch.Tensor, mean_logps: torch.Tensor, group: int, tau: float
) -> torch.Tensor:
    """A_i·c·w_i on the correct samples of groups with c ≥ 2 correct samples, A_i elsewhere; ``advantages``,
    ``validity`` (NaN = unscored) and ``mean_logps`` (N,) in consecutive groups of ``group``."""
    factor = ucpo_weights(validity, mean_logps, group, tau).to(advantages.device)
    return (advantages.to(torch.float64) * factor).to(advantages.dtype)


@dataclass
class UCPOArgs:
    """Recipe key of UCPO (selected by ``reward_shaping: ucpo``)."""

    ucpo_tau: float = field(
        default=0.2,
        metadata={
            "help": "UCPO: τ in (0, 1], how far a group's correct-sample advantages move from GRPO's equal shares "
            "toward shares ∝ 1/q (q: the policy's distribution over the group's correct samples); 0.2 in the "
            "authors' runs (0 would be plain GRPO)."
        },
    )


@register_plugin("advantages", after=("reward_shaping",))
class UCPO(RewardShaping):
    """TRL's group advantages of a training batch, redistributed over each group's correct samples toward 1/q."""

    name = "ucpo"
    Args = UCPOArgs
    ranges = {"ucpo_tau": PROBABILITY}  # 0 would be plain GRPO

    def advantages(self, out: dict[str, Any]) -> torch.Tensor | None:
        trainer = self.trainer
        if not trainer.model.training:
            return None
        args, group = trainer.args, trainer.num_generations
        mask = out["completion_mask"]
        rewards = trainer.gathered_rewards
        base = trainer_group_advantages(trainer, rewards, mask.device)
        validity = rewards[:, args.validity_reward_index].to(mask.device)
        mean_logps = sequence_logps(trainer, sampling_logps(trainer, out), mask, mean=True).to(mask.device)
        q = correct_set_distribution(validity, mean_logps, group)
        several = (q > 0).sum(dim=1) >= 2
        if several.any():
            trl_seam.metrics(trainer, "train")["ucpo/kl_to_uniform"].append(kl_to_uniform(q[several]).mean().item())
        return ucpo_advantages(base, validity, mean_logps, group, args.ucpo_tau)
