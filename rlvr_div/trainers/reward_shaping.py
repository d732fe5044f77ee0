"""Group-level reward transforms for diversity: MARA, the unlikeliness reward, pass@k rewards (PKPO), and the
weighting of positive and negative samples (W-REINFORCE).

Every function is pure (tensors in, tensors out, no trainer state) and works on a batch laid out as consecutive
groups of ``group`` completions of one prompt (the layout of TRL's gathered rewards, shape (N,) with N = B·group).
Samples come from the policy that generated the group (π_old). The results replace the scalar rewards before the
usual group-relative advantages, except for the shapings in ``DIRECT_ADVANTAGES`` (PKPO, W-REINFORCE, Pass@k
Training), whose results already are advantages and are used as they are (``direct_advantages``).

``DivergenceGRPOConfig`` keys: ``reward_shaping: none|mara|unlikeliness|pkpo|w_reinforce|passk_training|
outcome_exploration``, ``mara_tau``, ``unlikeliness_lambda``, ``unlikeliness_rank``, ``pkpo_k`` (checked in one line
by ``check_reward_shaping``), ``psr_weight``, ``nsr_weight`` (``WReinforceArgs``), ``passk_k``
(``rlvr_div.trainers.passk_advantage``) and the ``outcome_*`` keys (``rlvr_div.trainers.outcome_exploration``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch

from rlvr_div.errors import ConfigError
from rlvr_div.trainers.passk_advantage import passk_training_advantages

REWARD_SHAPINGS = ("none", "mara", "unlikeliness", "pkpo", "w_reinforce", "passk_training", "outcome_exploration")
# shapings whose output is the advantage itself (no group centring or std scaling); they read only validity
DIRECT_ADVANTAGES = ("pkpo", "w_reinforce", "passk_training")
UNLIKELINESS_RANKS = ("correct", "all")


def _groups(x: torch.Tensor, group: int, what: str) -> torch.Tensor:
    """``x`` (N,) as (N/group, group); a ValueError when N is not a multiple of ``group``."""
    if x.dim() != 1 or group < 1 or x.numel() % group:
        raise ValueError(f"{what} of shape {tuple(x.shape)} does not form groups of {group}")
    return x.view(-1, group)


# ---------------------------------------------------------------------------------------------------------------------
# MARA (GX-Chen et al. 2025, "KL-regularized RL is designed to mode collapse")


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
    r = _groups(rewards, group, "rewards")
    ref = _groups(ref_seq_logps.to(rewards.dtype), group, "ref_seq_logps")
    high = r >= tau  # NaN compares False
    masked_ref = torch.where(high, ref, torch.full_like(ref, -math.inf))
    anchor = masked_ref.argmax(dim=1, keepdim=True)
    r_anchor = r.gather(1, anchor)
    ref_anchor = ref.gather(1, anchor)
    shaped = torch.where(high, r_anchor + beta * (ref_anchor - ref), r)
    return shaped.reshape(-1)


# ---------------------------------------------------------------------------------------------------------------------
# Unlikeliness reward (He, Fried & Welleck 2025, "Rewarding the unlikely")


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
    r = _groups(rewards, group, "rewards")
    score = _groups(old_seq_logps.to(rewards.dtype), group, "old_seq_logps")
    ranked = (r > 0) if among == "correct" else ~torch.isnan(r)
    # unranked samples go last (+inf) so that ranks among the ranked ones run 0, 1, ...
    key = torch.where(ranked, score, torch.full_like(score, math.inf))
    order = torch.argsort(key, dim=1, stable=True)
    rank = torch.argsort(order, dim=1, stable=True).to(r.dtype)
    factor = torch.where(ranked, 1.0 - lam * rank / group, torch.ones_like(r))
    return (r * factor).reshape(-1)


# ---------------------------------------------------------------------------------------------------------------------
# Pass@k policy optimisation (Walder & Karkhanis 2025, PKPO), binary rewards


def pass_at_k_estimate(n: int, c: int, k: int) -> float:
    """ρ(n, c, k) = 1 − C(n−c, k)/C(n, k): the unbiased pass@k estimate from n samples with c correct.

    It is the average over all size-k subsets of 1[subset has a correct sample]; ρ(n, c, 0) = 0, and ρ = 1 when
    n − c < k.
    """
    if not 0 <= c <= n or not 0 <= k <= n:
        raise ValueError(f"need 0 <= c <= n and 0 <= k <= n, got n={n}, c={c}, k={k}")
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def _correct_groups(correct: torch.Tensor, group: int, k: int) -> torch.Tensor:
    c = _groups(correct.to(torch.bool), group, "correct")
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
    c = _correct_groups(correct, group, k)
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
    c = _correct_groups(correct, group, k)
    n = group
    others = c.sum(dim=1, keepdim=True) - c.long()  # c_{-i}
    table = torch.tensor([pass_at_k_estimate(n - 1, m, k - 1) for m in range(n)], dtype=torch.float64, device=c.device)
    baseline = (k / n) * table[others]
    return (pkpo_rewards(correct, group, k, torch.float64).view_as(baseline) - baseline).reshape(-1).to(dtype)


# ---------------------------------------------------------------------------------------------------------------------
# W-REINFORCE: positive and negative sample reinforcement (Zhu et al. 2025, "The Surprising Effectiveness of Negative
# Reinforcement in LLM Reasoning", arXiv:2506.01347)


def w_reinforce_advantages(
    rewards: torch.Tensor, psr_weight: float = 0.1, nsr_weight: float = 1.0, dtype: torch.dtype = torch.float32
) -> torch.Tensor:
    """A_i = λ_+ if sample i is correct (reward == 1), −λ_− if it is scored and not correct, 0 if unscored (NaN).

    With binary rewards r ∈ {+1, −1} the RLVR loss splits into positive and negative sample reinforcement,
    L_PSR = −E_x[Σ_{y: r=+1} π_θ(y|x)] and L_NSR = −E_x[Σ_{y: r=−1} −π_θ(y|x)]; W-REINFORCE minimises
    λ·L_PSR + L_NSR (λ = 0.1 in the paper). On samples y ∼ π_θ its REINFORCE gradient weighs ∇log π_θ(y) by +λ for a
    correct sample and −1 for an incorrect one, with no baseline: these are the advantages, used as they are.
    ``psr_weight`` = λ_+ = λ and ``nsr_weight`` = λ_− (1 in the paper); (1, 0) is PSR alone, (0, 1) NSR alone.
    The paper's code computes the same advantages (+λ for score 1, −1 for score 0).
    """
    correct = rewards == 1.0
    scored = ~torch.isnan(rewards)
    pos = torch.full_like(rewards, psr_weight, dtype=torch.float64)
    neg = torch.full_like(rewards, -nsr_weight, dtype=torch.float64)
    adv = torch.where(correct, pos, torch.where(scored, neg, torch.zeros_like(pos)))
    return adv.to(dtype)


@dataclass
class WReinforceArgs:
    """Recipe keys of W-REINFORCE (selected by ``reward_shaping: w_reinforce``)."""

    psr_weight: float = field(
        default=0.1,
        metadata={"help": "W-REINFORCE: λ, the advantage of a correct sample (positive sample reinforcement)."},
    )
    nsr_weight: float = field(
        default=1.0,
        metadata={"help": "W-REINFORCE: minus the advantage of an incorrect sample (negative sample reinforcement)."},
    )

    def __post_init__(self) -> None:
        getattr(super(), "__post_init__", lambda: None)()
        check_w_reinforce(self)


def check_w_reinforce(args: Any) -> None:
    """One-line ConfigError for bad ``psr_weight``/``nsr_weight``, or either set without ``w_reinforce``."""
    weights = {"psr_weight": args.psr_weight, "nsr_weight": args.nsr_weight}
    if getattr(args, "reward_shaping", "none") != "w_reinforce":
        for key, value in weights.items():
            if value != getattr(WReinforceArgs, key):
                raise ConfigError(
                    f"{key}={value} acts only with reward_shaping: w_reinforce (got {args.reward_shaping!r})"
                )
        return
    for key, value in weights.items():
        if not (isinstance(value, int | float) and math.isfinite(value) and value >= 0):
            raise ConfigError(f"{key} must be a finite number >= 0, got {value!r}")
    if args.psr_weight == 0 and args.nsr_weight == 0:
        raise ConfigError("psr_weight and nsr_weight are both 0: every advantage would be 0")
    check_unscaled(args)


def check_unscaled(args: Any) -> None:
    """A shaping whose advantages are used as they are leaves TRL's ``scale_rewards`` without effect: refuse any
    value but ``none`` rather than ignore it."""
    scale = getattr(args, "scale_rewards", "none")
    if scale != "none":
        raise ConfigError(
            f"scale_rewards={scale!r} does not act with reward_shaping {args.reward_shaping!r}, whose advantages are "
            "used as they are; set scale_rewards: none"
        )


def check_shaping_rewards(name: str, rewards: list[str]) -> None:
    """One-line ConfigError when a shaping in ``DIRECT_ADVANTAGES`` (which reads only the validity reward) is given
    several reward functions: the others would be computed, logged and silently left out of the advantages."""
    if name in DIRECT_ADVANTAGES and len(rewards) > 1:
        raise ConfigError(
            f"reward_shaping {name!r} builds its advantages from validity alone, so the other rewards of {rewards} "
            "would not act; keep one reward (the verifier)"
        )


def direct_advantages(name: str, rewards: torch.Tensor, group: int, args: Any) -> torch.Tensor:
    """The advantages of a shaping in ``DIRECT_ADVANTAGES`` from the gathered validity rewards (N,) (NaN =
    unscored), laid out in groups of ``group``; ``args`` holds the shaping's keys (``pkpo_k``, ``psr_weight`` and
    ``nsr_weight``, ``passk_k``)."""
    if name == "pkpo":
        return pkpo_advantages(rewards == 1.0, group, args.pkpo_k)
    if name == "w_reinforce":
        return w_reinforce_advantages(rewards, args.psr_weight, args.nsr_weight)
    if name == "passk_training":
        return passk_training_advantages(rewards == 1.0, group, args.passk_k, scored=~torch.isnan(rewards))
    raise ValueError(f"{name!r} is not one of {DIRECT_ADVANTAGES}")


# ---------------------------------------------------------------------------------------------------------------------
# Validation


def check_reward_shaping(name: str, beta: float, **params: float | int | str | None) -> None:
    """One-line :class:`ConfigError` for an invalid shaping setting, before any model loads.

    ``name`` is the ``reward_shaping`` key; ``beta`` the KL coefficient of the update; ``params`` the other keys:
    ``mara_tau`` (any finite number), ``unlikeliness_lambda`` (in [0, 1]), ``unlikeliness_rank`` (correct|all),
    ``pkpo_k`` (an integer, 1 ≤ k ≤ ``num_generations`` when that is given). Unknown keys are refused.
    """
    if name not in REWARD_SHAPINGS:
        raise ConfigError(f"unknown reward_shaping {name!r}; known: {', '.join(REWARD_SHAPINGS)}")
    known = {"mara_tau", "unlikeliness_lambda", "unlikeliness_rank", "pkpo_k", "num_generations"}
    for key in params:
        if key not in known:
            raise ConfigError(f"unknown reward shaping parameter {key!r}; known: {', '.join(sorted(known))}")
    if name == "mara":
        if beta is None or not beta > 0:
            raise ConfigError(
                f"reward_shaping 'mara' needs a KL term with β > 0 (it is inert at β = 0), got β={beta}; "
                "set divergence: reverse_kl and divergence_coef > 0"
            )
        tau = params.get("mara_tau", 1.0)
        if tau is None or not math.isfinite(float(tau)):
            raise ConfigError(f"mara_tau must be a finite number, got {tau!r}")
        if not 0.0 < float(tau) <= 1.0:  # rewards lie in [0, 1] (rlvr_div.rewards.base)
            raise ConfigError(
                f"mara_tau={tau} re-anchors {'no' if float(tau) > 1 else 'every'} completion (rewards lie in [0, 1]), "
                "which makes MARA inert; use 0 < mara_tau <= 1 (with a binary reward every such value selects the "
                "valid completions: tune MARA's β, divergence_coef, instead)"
            )
    elif name == "unlikeliness":
        lam = params.get("unlikeliness_lambda", 0.25)
        if lam is None or not 0.0 <= float(lam) <= 1.0:
            raise ConfigError(f"unlikeliness_lambda must be in [0, 1], got {lam!r}")
        rank = params.get("unlikeliness_rank", "correct")
        if rank not in UNLIKELINESS_RANKS:
            raise ConfigError(f"unlikeliness_rank must be one of {', '.join(UNLIKELINESS_RANKS)}, got {rank!r}")
    elif name == "pkpo":
        k = params.get("pkpo_k", 1)
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise ConfigError(f"pkpo_k must be an integer >= 1, got {k!r}")
        n = params.get("num_generations")
        if n is not None and k > int(n):
            raise ConfigError(f"pkpo_k={k} exceeds num_generations={n}; pass@k needs k <= the group size")
