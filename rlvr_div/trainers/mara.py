"""MARA, mode-anchored reward augmentation (GX-Chen et al. 2025, "KL-regularized RL is designed to mode collapse"),
as a reward-shaping plug-in (``reward_shaping: mara``, with ``divergence: reverse_kl`` and β > 0).

With binary rewards every 0 < ``mara_tau`` ≤ 1 selects the same high-reward set (the valid completions): MARA's
setting that matters is the KL coefficient β it is used with.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch

from rlvr_div.errors import ConfigError
from rlvr_div.ranges import PROBABILITY
from rlvr_div.trainers.common import sequence_logps
from rlvr_div.trainers.plugin import kl_penalties, register_plugin
from rlvr_div.trainers.reward_shaping import RewardShaping, groups


@dataclass
class MaraArgs:
    mara_tau: float = field(
        default=1.0,
        metadata={
            "help": "MARA: rewards >= tau are re-anchored, 0 < tau <= 1 (rewards lie in [0, 1]: above 1 re-anchors "
            "no completion, at 0 every one, and MARA is inert); with a binary reward every such value selects the "
            "valid completions: tune MARA's β, divergence_coef, instead."
        },
    )


def mara_rewards(
    rewards: torch.Tensor, ref_seq_logps: torch.Tensor, group: int, tau: float, beta: float
) -> torch.Tensor:
    """Mode-anchored reward augmentation.

    In each group, H = {i : R_i ≥ τ} (unscorable NaN rewards are never in H); the anchor z = argmax_{i∈H} L^ref_i
    (the high-reward sample the reference likes most; ties: the first); for i ∈ H

        R̄_i = R_z + β·(L^ref_z − L^ref_i),        other samples keep R_i,

    with L^ref_i = log π_ref(y_i|x) the sequence log-probability under the reference. The optimum of the
    reverse-KL-regularised objective is π ∝ π_ref·exp(R̄/β), and R̄_i/β + L^ref_i = R_z/β + L^ref_z is the same for
    every i ∈ H: the target puts equal mass on all high-reward samples instead of concentrating on the reference's
    favourite. ``beta`` must be the β of the KL term of the same update (the transform is inert at β = 0).
    """
    if beta <= 0:
        raise ConfigError(f"MARA needs the KL coefficient β > 0 (it is inert at β = 0), got beta={beta}")
    r = groups(rewards, group, "rewards")
    ref = groups(ref_seq_logps.to(rewards.dtype), group, "ref_seq_logps")
    high = r >= tau  # NaN compares False
    masked_ref = torch.where(high, ref, torch.full_like(ref, -math.inf))
    anchor = masked_ref.argmax(dim=1, keepdim=True)
    r_anchor = r.gather(1, anchor)
    ref_anchor = ref.gather(1, anchor)
    shaped = torch.where(high, r_anchor + beta * (ref_anchor - ref), r)
    return shaped.reshape(-1)


@register_plugin("advantages", after=("reward_shaping", "divergence"))
class Mara(RewardShaping):
    name = "mara"
    Args = MaraArgs
    ranges = {"mara_tau": PROBABILITY}  # rewards lie in [0, 1] (rlvr_div.rewards.base); outside, MARA is inert

    @classmethod
    def prepare(cls, args: Any) -> None:
        if not cls.active(args):
            return
        penalties = kl_penalties(args)
        if not penalties:
            raise ConfigError(
                "reward_shaping 'mara' needs a KL term with β > 0 (it is inert at β = 0), and this run has none; "
                "set divergence: reverse_kl and divergence_coef > 0"
            )
        if penalties != ["reverse_kl"]:
            raise ConfigError(
                f"reward_shaping 'mara' re-anchors rewards for the reverse-KL-regularised optimum; it needs "
                f"divergence: reverse_kl, got {penalties[0]!r}"
            )

    @classmethod
    def check_task(cls, args: Any, task: str, spec: Any, rewards: list[str]) -> None:
        """On a task with one valid answer per prompt, scored by its own verifier alone, MARA is refused: the valid
        samples of a group are one completion and it re-anchors nothing."""
        super().check_task(args, task, spec, rewards)
        if spec.one_answer and rewards == [spec.reward]:
            raise ConfigError(
                f"reward_shaping 'mara' is inert on task {task!r}: every prompt has one valid answer, so the valid "
                "samples of a group are one completion and MARA re-anchors nothing (the run would be reverse KL at "
                "the same β); use divergence: reverse_kl without reward_shaping"
            )

    def shape(self, rewards: torch.Tensor, out: dict[str, Any]) -> torch.Tensor:
        trainer = self.trainer
        ref = sequence_logps(trainer, out["ref_per_token_logps"], out["completion_mask"])
        return mara_rewards(rewards, ref, trainer.num_generations, trainer.args.mara_tau, trainer.kl_coef)
