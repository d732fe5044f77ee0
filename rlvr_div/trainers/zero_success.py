"""Zero-success-only updates (Yuan et al. 2026, "Understanding Diversity Collapse in RLVR via the Lens of
Overtraining", arXiv:2606.15455), as a direct-advantage shaping plug-in (``reward_shaping: zero_success``,
``zero_success_weight``).

The paper's intervention "restricts updates to problems with zero observed success": a problem whose group of G
samples holds a correct one is, for high-k Pass@k, already (nearly) saturated, so updating on it only concentrates
mass on the trajectories on-policy sampling favours. The update is made only on groups with no correct sample.
There GRPO's group-normalised advantage is identically 0 (every reward is 0), so the update cannot be GRPO's: the
zero-success bucket learns through a *signed* REINFORCE loss (reward sign, no group baseline), i.e. every sample
of an all-failed group is pushed down:

    A_i = −λ   if no scored sample of i's group is correct (and i is scored),
    A_i = 0    otherwise (every group with a correct sample, and unscored samples),

λ = ``zero_success_weight``. On a tabular softmax the expected update over groups of G draws is
−λ·∇ (Σ_{y wrong} π(y))^G = λ·∇ pass@G: negative sample reinforcement (W-REINFORCE with ψ_+ = 0) on the problems
the policy fails, weighted by the chance that the whole group fails.

Provenance (docs/methods.md says the same): the paper's method section was not readable in this project's library;
"restrict updates to zero-observed-success problems" is the abstract's wording, and "the m = 0 bucket learns
through a signed REINFORCE loss" is how a third-party reimplementation of the paper's Bayesian Boundary Gating
describes it. The paper's normalisation of that loss was not seen; λ = 1 (the sign alone) is this project's choice.
"Observed success" is read as the current group's (the m of n that BBG's posterior uses), not a history over
earlier epochs. BBG itself (a Beta-posterior weight on groups with successes) is not implemented.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from rlvr_div.ranges import POSITIVE
from rlvr_div.trainers import trl_seam
from rlvr_div.trainers.plugin import register_plugin
from rlvr_div.trainers.reward_shaping import RewardShaping, groups


def zero_success_groups(rewards: torch.Tensor, group: int) -> torch.Tensor:
    """(N/G,) bool: the groups with at least one scored sample and no correct one (reward == 1 is correct)."""
    r = groups(rewards, group, "rewards")
    scored = ~torch.isnan(r)
    return scored.any(dim=1) & ~(r == 1.0).any(dim=1)


def zero_success_advantages(
    rewards: torch.Tensor, group: int, weight: float = 1.0, dtype: torch.dtype = torch.float32
) -> torch.Tensor:
    """A_i = −``weight`` for each scored sample of a group with no correct sample, 0 for every other sample (groups
    with a correct sample and unscored NaN samples); ``rewards`` (N,) in consecutive groups of ``group``."""
    r = groups(rewards, group, "rewards")
    zero = zero_success_groups(rewards, group).unsqueeze(1)
    scored = ~torch.isnan(r)
    adv = torch.where(
        zero & scored, torch.full_like(r, -weight, dtype=torch.float64), torch.zeros_like(r, dtype=torch.float64)
    )
    return adv.reshape(-1).to(dtype)


@dataclass
class ZeroSuccessArgs:
    """Recipe key of zero-success-only updates (selected by ``reward_shaping: zero_success``)."""

    zero_success_weight: float = field(
        default=1.0,
        metadata={
            "help": "Zero-success-only updates: λ > 0, minus the advantage of every sample of a group with no correct "
            "sample (signed REINFORCE); every group with a correct sample gets advantage 0."
        },
    )


@register_plugin("advantages", after=("reward_shaping",))
class ZeroSuccess(RewardShaping):
    """Signed REINFORCE on the all-failed groups of a batch, nothing elsewhere; logs the share of such groups."""

    name = "zero_success"
    Args = ZeroSuccessArgs
    ranges = {"zero_success_weight": POSITIVE}
    direct = True  # so its advantages refuse scale_rewards (RewardShaping declares it, and its selection)

    def direct_advantages(self, rewards: torch.Tensor, group: int) -> torch.Tensor:
        frac = zero_success_groups(rewards, group).double().mean().item()
        trl_seam.metrics(self.trainer, "train")["zero_success/group_frac"].append(frac)
        return zero_success_advantages(rewards, group, self.trainer.args.zero_success_weight)
