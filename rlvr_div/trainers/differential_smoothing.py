"""Differential smoothing (Gai, Zeng, Zhang & Raghunathan 2025, "Differential Smoothing Mitigates Sharpening and
Improves LLM Reasoning", arXiv:2511.19942), DS-GRPO, as an advantage-shaping plug-in
(``reward_shaping: differential_smoothing``, ``ds_gamma_p``, ``ds_gamma_n``).

The paper's diagnosis: RL fine-tuning collapses diversity through a selection and a reinforcement bias that act on
the *correct* trajectories, so a reward modification against collapse needs to act on those only. Its reward
(Eq. 4) smooths correct trajectories and may sharpen incorrect ones,

    r_DS(y) = r(y) − γ_p·log π_base(y)   if r(y) > 0,        r_DS(y) = r(y) + γ_n·log π_base(y)   otherwise,

and DS-GRPO (Eq. 6, the algorithm the paper runs) applies it to GRPO's advantage with the sampling policy in place
of the base (the paper finds π_old more stable, and equivalent up to a reparametrisation of γ):

    A^DS_i = A_i − γ_p·log π_old(y_i|x)   if r_i = 1,        A^DS_i = A_i + γ_n·log π_old(y_i|x)   otherwise,

A_i TRL's group-relative advantage (as configured: group mean, ``scale_rewards``), log π_old(y_i|x) the sequence
log-probability (sum over the completion's tokens) under the sampling policy, detached. With γ_n = 0 (the default
here) only correct trajectories' advantages change. On a tabular policy the correction's expected gradient is

    E_{y∼π}[(−γ_p·1{y∈C} + γ_n·1{y∉C})·log π(y)·∇log π(y)] = γ_p·∇(H_C + π(C)) − γ_n·∇(H_W + π(W)),

H_C = −Σ_{y∈C} π(y)·log π(y) the entropy mass on the correct set C (H_W on the wrong set W): an entropy bonus on
correct answers only (and an entropy penalty on wrong ones when γ_n > 0).

Sources: the formula of Eq. 4 and Eq. 6 as quoted by two independent readers of the paper (a paper digest and a
reimplementation); the paper's values of γ_p and γ_n were not available here, so the defaults are this project's.
An unscored completion (NaN validity) keeps TRL's advantage (0).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from rlvr_div.errors import ConfigError
from rlvr_div.ranges import NON_NEGATIVE
from rlvr_div.trainers import trl_seam
from rlvr_div.trainers.common import sampling_logps, sequence_logps, trainer_group_advantages
from rlvr_div.trainers.plugin import register_plugin
from rlvr_div.trainers.reward_shaping import RewardShaping


def differential_smoothing_advantages(
    advantages: torch.Tensor, validity: torch.Tensor, seq_logps: torch.Tensor, gamma_p: float, gamma_n: float = 0.0
) -> torch.Tensor:
    """A^DS_i = A_i − γ_p·L_i for a correct sample (validity == 1), A_i + γ_n·L_i for a scored incorrect one, A_i for
    an unscored one (NaN); L_i = log π_old(y_i|x), the sequence log-probability. All inputs (N,); returns
    ``advantages``' dtype."""
    if not (advantages.shape == validity.shape == seq_logps.shape) or advantages.dim() != 1:
        raise ValueError(
            f"advantages {tuple(advantages.shape)}, validity {tuple(validity.shape)} and seq_logps "
            f"{tuple(seq_logps.shape)} must be the same (N,)"
        )
    logp = seq_logps.detach().to(torch.float64)
    correct = validity == 1.0
    wrong = ~correct & ~torch.isnan(validity)
    correction = torch.where(correct, -gamma_p * logp, torch.where(wrong, gamma_n * logp, torch.zeros_like(logp)))
    return (advantages.to(torch.float64) + correction).to(advantages.dtype)


@dataclass
class DifferentialSmoothingArgs:
    """Recipe keys of differential smoothing (selected by ``reward_shaping: differential_smoothing``)."""

    ds_gamma_p: float = field(
        default=0.05,
        metadata={
            "help": "Differential smoothing: γ_p >= 0; a correct sample's advantage gains −γ_p·log π_old(y|x) (an "
            "entropy bonus on correct trajectories only)."
        },
    )
    ds_gamma_n: float = field(
        default=0.0,
        metadata={
            "help": "Differential smoothing: γ_n >= 0; an incorrect sample's advantage gains +γ_n·log π_old(y|x) (an "
            "entropy penalty on incorrect trajectories); 0 leaves them unchanged."
        },
    )


def check_differential_smoothing(args: Any) -> None:
    """One-line ConfigError for ``ds_gamma_p`` and ``ds_gamma_n`` both 0 (their ranges, and "acts only with
    reward_shaping: differential_smoothing", are declared in :class:`DifferentialSmoothing`)."""
    if args.ds_gamma_p == 0 and args.ds_gamma_n == 0:
        raise ConfigError("ds_gamma_p and ds_gamma_n are both 0: differential smoothing would be plain GRPO")


@register_plugin("advantages", after=("reward_shaping",))
class DifferentialSmoothing(RewardShaping):
    """TRL's group advantages of a training batch, then the DS-GRPO correction from π_old's sequence log-probs."""

    name = "differential_smoothing"
    Args = DifferentialSmoothingArgs
    ranges = {"ds_gamma_p": NON_NEGATIVE, "ds_gamma_n": NON_NEGATIVE}

    @classmethod
    def prepare(cls, args: Any) -> None:
        if cls.active(args):
            check_differential_smoothing(args)

    def advantages(self, out: dict[str, Any]) -> torch.Tensor | None:
        trainer = self.trainer
        if not trainer.model.training:
            return None
        args = trainer.args
        mask = out["completion_mask"]
        rewards = trainer.gathered_rewards
        base = trainer_group_advantages(trainer, rewards, mask.device)
        validity = rewards[:, args.validity_reward_index].to(mask.device)
        seq = sequence_logps(trainer, sampling_logps(trainer, out), mask).to(mask.device)
        shaped = differential_smoothing_advantages(base, validity, seq, args.ds_gamma_p, args.ds_gamma_n)
        correct = validity == 1.0
        metrics = trl_seam.metrics(trainer, "train")
        if correct.any():
            metrics["ds/correct_logp"].append(seq[correct].mean().item())
        metrics["ds/correction_abs"].append((shaped - base).abs().mean().item())
        return shaped
