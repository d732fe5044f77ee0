"""The unlikeliness reward (He, Fried & Welleck 2025, "Rewarding the unlikely") as a reward-shaping plug-in
(``reward_shaping: unlikeliness``): correct samples that π_old finds likely are rewarded less."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch

from rlvr_div.errors import ConfigError
from rlvr_div.ranges import UNIT
from rlvr_div.trainers.common import sampling_logps, sequence_logps
from rlvr_div.trainers.plugin import register_plugin
from rlvr_div.trainers.reward_shaping import RewardShaping, groups

UNLIKELINESS_RANKS = ("correct", "all")


@dataclass
class UnlikelinessArgs:
    unlikeliness_lambda: float = field(default=0.25, metadata={"help": "Unlikeliness reward: λ in [0, 1]."})
    unlikeliness_rank: str = field(
        default="correct", metadata={"help": "Unlikeliness reward: rank among 'correct' samples or 'all'."}
    )


def unlikeliness_rewards(
    rewards: torch.Tensor,
    old_seq_logps: torch.Tensor,
    group: int,
    lam: float = 0.25,
    among: str = "correct",
) -> torch.Tensor:
    """r̃_i = r_i·(1 − λ·rank_i/G), G = ``group``.

    Rank convention: rank_i ∈ {0, 1, …} orders samples by *increasing* likelihood under π_old, so the least likely
    sample has rank 0 (no penalty) and the most likely the largest rank (the largest penalty); ties keep batch order.
    ``among="correct"`` (default, as in methods.md) ranks only the group's correct samples (r_i > 0), so ranks run
    0…c−1; ``among="all"`` ranks all G samples (0…G−1), as the authors' released code does. Incorrect samples
    (r_i = 0) are unchanged either way; NaN rewards stay NaN and are not ranked.

    ``old_seq_logps`` is the likelihood score used for ranking; the authors rank by the *mean per-token* log-prob
    under π_old (length-normalised), which is what callers should pass.
    """
    if among not in UNLIKELINESS_RANKS:
        raise ValueError(f"among must be one of {UNLIKELINESS_RANKS}, got {among!r}")
    r = groups(rewards, group, "rewards")
    score = groups(old_seq_logps.to(rewards.dtype), group, "old_seq_logps")
    ranked = (r > 0) if among == "correct" else ~torch.isnan(r)
    # unranked samples go last (+inf) so that ranks among the ranked ones run 0, 1, ...
    key = torch.where(ranked, score, torch.full_like(score, math.inf))
    order = torch.argsort(key, dim=1, stable=True)
    rank = torch.argsort(order, dim=1, stable=True).to(r.dtype)
    factor = torch.where(ranked, 1.0 - lam * rank / group, torch.ones_like(r))
    return (r * factor).reshape(-1)


@register_plugin("advantages", after=("reward_shaping",))
class Unlikeliness(RewardShaping):
    name = "unlikeliness"
    Args = UnlikelinessArgs
    ranges = {"unlikeliness_lambda": UNIT}

    @classmethod
    def prepare(cls, args: Any) -> None:
        if not cls.active(args):
            return
        if args.unlikeliness_rank not in UNLIKELINESS_RANKS:
            raise ConfigError(
                f"unlikeliness_rank must be one of {', '.join(UNLIKELINESS_RANKS)}, got {args.unlikeliness_rank!r}"
            )

    def shape(self, rewards: torch.Tensor, out: dict[str, Any]) -> torch.Tensor:
        """Ranked by the mean per-token log-prob under the sampling policy π_old, as the authors do."""
        trainer = self.trainer
        score = sequence_logps(trainer, sampling_logps(trainer, out), out["completion_mask"], mean=True)
        args = trainer.args
        return unlikeliness_rewards(
            rewards, score, trainer.num_generations, args.unlikeliness_lambda, args.unlikeliness_rank
        )
