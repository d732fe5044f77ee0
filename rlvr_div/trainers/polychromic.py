"""A set-level, polychromic objective (Hamid, Orney, Xu, Finn & Sadigh 2025, "Polychromic Objectives for
Reinforcement Learning", arXiv:2509.25424) as a direct-advantage shaping plug-in (``reward_shaping: polychromic``,
``polychromic_set_size``, ``polychromic_diversity``).

Set RL scores a *set* of n samples of one prompt jointly instead of each sample alone:
J(π) = E_x E_{y_1..y_n ~ π(·|x)} [f(x, y_1..y_n)], and the polychromic objective couples the set's reward with its
diversity, so that only sets both successful and diverse score high:

    f(S) = ( (1/n)·Σ_{i∈S} r_i ) · d(S)

r_i the validity reward (column ``validity_reward_index``, 1 = valid), and here

    d(S) = |{ text(y_i) : i ∈ S, r_i = 1 }| / n       (``polychromic_diversity: valid``, the default)
    d(S) = |{ text(y_i) : i ∈ S }| / n                (``polychromic_diversity: all``)

the fraction of distinct completions in the set, counting valid ones only (``valid``) or every one (``all``); texts
are compared after stripping whitespace, as ``diversity/distinct_valid`` does. The sets are drawn from a prompt's
group of G rollouts: every one of the C(G, n) subsets of size n, and each sample gets the *marginal* set advantage,
the mean score of the sets that contain it minus the mean score of all sets:

    A_i = mean_{S ∋ i} f(S) − mean_S f(S)

Writing F_out,i for the mean over the sets without i, A_i = (1 − n/G)·(mean_{S∋i} f(S) − F_out,i), and F_out,i depends
on the other samples only, so E[Σ_i A_i·∇log π(y_i)] = ((G − n)/n)·∇J: an unbiased estimate of the set objective's
gradient up to a positive constant. Σ_i A_i = 0 in each group. Unscored samples (NaN) are left out: the sets are
drawn from the group's scored samples, an unscored sample gets 0, and a group with at most n scored samples gets 0
everywhere. The advantages are used as they are (``scale_rewards: none``).

With ``valid``, a set holding two valid copies of one answer scores lower than one holding two distinct valid
answers, so a valid sample whose text its neighbours repeat gets less than a unique one: GRPO's r_i − mean r cannot
tell these apart. With ``all``, a failed but distinct sample can get a positive advantage when
the others of its sets bring the reward, the property the authors single out; on a verifier task a malformed string
is trivially "distinct", which is why ``valid`` is the default here.

Provenance: the abstract and a summary (set RL, the polychromic objective coupling reward and diversity, vine
sampling, a set-shared advantage in PPO), and the first author's set-RL visualisation page ("the marginal advantage:
the expected score of all sets containing y, minus the average score of all sets"). The product of mean reward and
diversity is how that page contrasts the polychromic objective with an additive diversity bonus, and how a
third-party reimplementation writes f_poly; the paper's method section and hyperparameter table were not readable in
this project's library, so n = 4 (the default) is the set size of that reimplementation (sets of 4 from 8 vine
rollouts), unconfirmed against the paper's table. Differences from the paper: the sets are all C(G, n) subsets of a
GRPO group, not M sets drawn from N vine rollouts at states along a trajectory (no vine sampling, no learned value
baseline, no window of timesteps: a completion is one action); the diversity of a set is the fraction of distinct
completion texts, where the paper's environments judge two trajectories distinct by their behaviour (in its grid
worlds, by a third-party account, the rooms they visit).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from itertools import combinations
from typing import Any

import torch

from rlvr_div.errors import ConfigError
from rlvr_div.ranges import AT_LEAST_TWO
from rlvr_div.trainers import trl_seam
from rlvr_div.trainers.plugin import register_plugin
from rlvr_div.trainers.reward_shaping import RewardShaping, groups

DIVERSITY_MODES = ("valid", "all")
MAX_SETS = 200_000  # C(G, n) above this is refused: every set of a group is scored


@lru_cache(maxsize=32)
def set_indices(m: int, n: int) -> torch.Tensor:
    """(C(m, n), n) long: every subset of size n of range(m), in lexicographic order."""
    return torch.tensor(list(combinations(range(m), n)), dtype=torch.long).view(-1, n)


def distinct_counts(ids: torch.Tensor) -> torch.Tensor:
    """Per row of ``ids`` (C, n), the number of distinct values ≥ 0 (a negative id is never counted)."""
    s = ids.sort(dim=1).values
    new = s >= 0
    new[:, 1:] &= s[:, 1:] != s[:, :-1]
    return new.sum(dim=1)


def set_scores(rewards: torch.Tensor, ids: torch.Tensor, n: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(sets, f, d) of one group's m scored samples: ``sets`` (C(m, n), n) their indices, f(S) = mean reward·d(S) and
    d(S) = distinct ids ≥ 0 in S / n; ``rewards`` (m,) float, ``ids`` (m,) long (−1: not counted in d)."""
    sets = set_indices(rewards.numel(), n).to(rewards.device)
    d = distinct_counts(ids[sets]).to(rewards.dtype) / n
    return sets, rewards[sets].mean(dim=1) * d, d


def marginal_advantages(sets: torch.Tensor, f: torch.Tensor, m: int) -> torch.Tensor:
    """A_i = mean of f over the sets containing i − mean of f over all sets, for i < m (every i in some set)."""
    member = torch.zeros(sets.size(0), m, dtype=f.dtype, device=f.device).scatter_(1, sets, 1.0)
    return (member.T @ f) / member.sum(dim=0) - f.mean()


def text_ids(texts: Sequence[str], counted: Sequence[bool]) -> torch.Tensor:
    """A small integer per distinct text (first come, first numbered), −1 where ``counted`` is False."""
    table: dict[str, int] = {}
    ids = [table.setdefault(t, len(table)) if c else -1 for t, c in zip(texts, counted)]
    return torch.tensor(ids, dtype=torch.long)


def polychromic_advantages(
    rewards: torch.Tensor, texts: Sequence[str], group: int, set_size: int, diversity: str = "valid",
    dtype: torch.dtype = torch.float32,
) -> tuple[torch.Tensor, dict[str, float]]:  # fmt: skip
    """The marginal set advantages (N,) of a batch in consecutive groups of ``group`` (module docstring), and the
    mean set score f and diversity d over the groups with a set (``polychromic/set_objective``, ``.../set_diversity``).

    ``rewards`` (N,) are the validity rewards (NaN = unscored, 1 = valid), ``texts`` the N completion texts."""
    if diversity not in DIVERSITY_MODES:
        raise ValueError(f"diversity must be one of {DIVERSITY_MODES}, got {diversity!r}")
    r = groups(rewards.detach().to(torch.float64).cpu(), group, "rewards")
    if len(texts) != rewards.numel():
        raise ValueError(f"{len(texts)} texts for {rewards.numel()} rewards")
    out = torch.zeros_like(r)
    objective, spread = [], []
    for g in range(r.size(0)):
        scored = (~torch.isnan(r[g])).nonzero().squeeze(1)
        m = scored.numel()
        if m <= set_size:  # no set, or a single one: nothing to compare
            continue
        rg = r[g, scored]
        keep = [bool(v == 1.0) or diversity == "all" for v in rg.tolist()]
        ids = text_ids([texts[g * group + int(i)] for i in scored], keep)
        sets, f, d = set_scores(rg, ids, set_size)
        out[g, scored] = marginal_advantages(sets, f, m)
        objective.append(f.mean().item())
        spread.append(d.mean().item())
    stats = {}
    if objective:
        stats = {
            "polychromic/set_objective": sum(objective) / len(objective),
            "polychromic/set_diversity": sum(spread) / len(spread),
        }
    return out.reshape(-1).to(dtype=dtype, device=rewards.device), stats


@dataclass
class PolychromicArgs:
    """Recipe keys of the polychromic set objective (selected by ``reward_shaping: polychromic``)."""

    polychromic_set_size: int = field(
        default=4,
        metadata={
            "help": "Polychromic objective: n, the size of the sets f = mean reward × diversity scores "
            "(2 <= n < num_generations; every C(G, n) subset of a group is a set); 4 is a third-party "
            "reimplementation's set size, unconfirmed against the paper."
        },
    )
    polychromic_diversity: str = field(
        default="valid",
        metadata={
            "help": "Polychromic objective: d(S) = distinct completion texts in the set / n, counting the valid "
            "ones only ('valid') or all of them ('all', closer to the paper: a failed but distinct sample can gain)."
        },
    )


def check_polychromic(args: Any) -> None:
    """One-line ConfigError for a bad ``polychromic_diversity`` or a set size the group cannot hold (the range of
    ``polychromic_set_size``, "acts only with reward_shaping: polychromic" and the refusal of TRL's
    ``scale_rewards``, which would not act, are declared in :class:`Polychromic`)."""
    n, mode = args.polychromic_set_size, args.polychromic_diversity
    if mode not in DIVERSITY_MODES:
        raise ConfigError(f"polychromic_diversity must be one of {', '.join(DIVERSITY_MODES)}, got {mode!r}")
    g = getattr(args, "num_generations", None)
    if g is not None and n >= int(g):
        raise ConfigError(
            f"polychromic_set_size={n} must be below num_generations={g}: a group then forms at most one set and "
            "every advantage is 0"
        )
    if g is not None and math.comb(int(g), n) > MAX_SETS:
        raise ConfigError(
            f"polychromic_set_size={n} with num_generations={g} gives C({g}, {n}) = {math.comb(int(g), n)} sets per "
            f"group, over {MAX_SETS}; use a smaller set size"
        )


@register_plugin("advantages", after=("reward_shaping",))
class Polychromic(RewardShaping):
    """Marginal set advantages of the polychromic objective, from the batch's completion texts that the trainer
    gathered for its diversity metrics (``gathered_texts``, :func:`rlvr_div.trainers.common.log_group_diversity`)."""

    name = "polychromic"
    Args = PolychromicArgs
    ranges = {"polychromic_set_size": AT_LEAST_TWO}
    direct = True

    @classmethod
    def prepare(cls, args: Any) -> None:
        if cls.active(args):
            check_polychromic(args)

    def direct_advantages(self, rewards: torch.Tensor, group: int) -> torch.Tensor:
        args = self.trainer.args
        texts = getattr(self.trainer, "gathered_texts", None)  # the whole batch's: a group can span processes
        if texts is None or len(texts) != rewards.numel():
            raise RuntimeError("polychromic: the batch's completion texts were not gathered before its advantages")
        n, mode = args.polychromic_set_size, args.polychromic_diversity
        adv, stats = polychromic_advantages(rewards, texts, group, n, mode)
        for key, value in stats.items():
            trl_seam.metrics(self.trainer, "train")[key].append(value)
        return adv
