"""Reward transforms for diversity (MARA, unlikeliness, PKPO) against hand-computed values; PKPO's gradient estimate
is unbiased for ∇ pass@k by exact enumeration; invalid settings fail in one line; the tiny recipes' values pass."""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import pytest
import torch
import yaml
from train_checks import assert_train_refuses, make_far_pair_trainer, run_recipe, trainer_config

from rlvr_div.errors import ConfigError
from rlvr_div.passk import pass_at_k_estimate
from rlvr_div.trainers.common import policy_logps_no_grad
from rlvr_div.trainers.grpo import DivergenceGRPOConfig
from rlvr_div.trainers.mara import mara_rewards
from rlvr_div.trainers.pkpo import pkpo_advantages, pkpo_rewards
from rlvr_div.trainers.unlikeliness import unlikeliness_rewards

ROOT = Path(__file__).resolve().parents[1]
NAN = float("nan")


def _same(a: torch.Tensor, expected: list[float]) -> bool:
    return torch.allclose(a.double(), torch.tensor(expected, dtype=torch.float64), atol=1e-9, equal_nan=True)


# ---------------------------------------------------------------------------------------------------------------------
# MARA


def test_mara_hand_values():
    rewards = torch.tensor([1.0, 1.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, NAN, 1.0, 1.0, 0.0])
    ref = torch.tensor([-3.0, -1.0, -0.5, -2.0, -1.0, -2.0, -3.0, -4.0, -1.0, -2.0, -2.0, -1.0])
    out = mara_rewards(rewards, ref, group=4, tau=1.0, beta=0.1)
    # group 1: H = {0, 1, 3}, anchor 1 (L^ref = −1): R̄_0 = 1 + 0.1·2, R̄_3 = 1 + 0.1·1; sample 2 (R < τ) unchanged
    # group 2: H empty, unchanged; group 3: NaN never in H, tie between 9 and 10 → anchor 9
    assert _same(out, [1.2, 1.0, 0.0, 1.1, 0, 0, 0, 0, NAN, 1.0, 1.0, 0.0])


def test_mara_graded_rewards_take_the_anchor_reward():
    # τ = 0.5: H = {0, 1, 3}; the anchor is 0 (L^ref = −1, the reference's favourite) even though R_3 = 1 > R_0 = 0.6:
    # R̄_1 = 0.6 + 0.1·(−1 − (−3)) = 0.8, R̄_3 = 0.6 + 0.1·(−1 − (−2)) = 0.7; R_2 = 0.2 < τ unchanged
    rewards = torch.tensor([0.6, 0.9, 0.2, 1.0])
    ref = torch.tensor([-1.0, -3.0, -0.5, -2.0])
    assert _same(mara_rewards(rewards, ref, group=4, tau=0.5, beta=0.1), [0.6, 0.8, 0.2, 0.7])
    # τ above every reward: nothing is re-anchored
    assert _same(mara_rewards(rewards, ref, group=4, tau=1.5, beta=0.1), rewards.tolist())
    # groups of 2 with β = 0.5: anchor 1 in the first (L^ref −2 > −4), 2 in the second (tie → the first)
    out = mara_rewards(torch.tensor([1.0, 1.0, 1.0, 1.0]), torch.tensor([-4.0, -2.0, -3.0, -3.0]), 2, 1.0, 0.5)
    assert _same(out, [2.0, 1.0, 1.0, 1.0])


def test_mara_equalises_the_kl_optimum_on_high_reward_samples():
    g = torch.Generator().manual_seed(0)
    rewards = (torch.rand(64, generator=g) < 0.5).float()
    ref = -5 * torch.rand(64, generator=g, dtype=torch.float64)
    beta = 0.2
    out = mara_rewards(rewards.double(), ref, group=8, tau=0.5, beta=beta).view(8, 8)
    # π* ∝ π_ref·exp(R̄/β): log-weights R̄/β + L^ref are equal across each group's high-reward samples
    logw = out / beta + ref.view(8, 8)
    for row, high in zip(logw, rewards.view(8, 8) >= 0.5):
        if high.any():
            assert torch.allclose(row[high], row[high][0].expand(int(high.sum())), atol=1e-9)


def test_mara_refuses_beta_zero():
    with pytest.raises(ConfigError, match="β > 0"):
        mara_rewards(torch.ones(4), torch.zeros(4), group=4, tau=1.0, beta=0.0)


# ---------------------------------------------------------------------------------------------------------------------
# Unlikeliness


def test_unlikeliness_hand_values():
    rewards = torch.tensor([1.0, 0.0, 1.0, 1.0])
    logp = torch.tensor([-1.0, -5.0, -3.0, -2.0])
    # correct samples by increasing likelihood: 2 (rank 0), 3 (rank 1), 0 (rank 2); factor 1 − 0.25·rank/4
    assert _same(unlikeliness_rewards(rewards, logp, group=4, lam=0.25), [0.875, 0.0, 1.0, 0.9375])
    # among all four: 1 (rank 0), 2 (1), 3 (2), 0 (3)
    assert _same(unlikeliness_rewards(rewards, logp, group=4, lam=0.25, among="all"), [0.8125, 0.0, 0.9375, 0.875])


def test_unlikeliness_lambda_one_and_graded_rewards():
    # λ = 1, G = 4, among all: ranks by increasing log-prob 3 (−4), 1 (−3), 0 (−2), 2 (−1) → factors 1 − rank/4
    rewards = torch.tensor([1.0, 0.5, 1.0, 1.0])
    logp = torch.tensor([-2.0, -3.0, -1.0, -4.0])
    assert _same(unlikeliness_rewards(rewards, logp, group=4, lam=1.0, among="all"), [0.5, 0.375, 0.25, 1.0])
    # among correct (r > 0, so the 0.5 counts): the same ranks here
    assert _same(unlikeliness_rewards(rewards, logp, group=4, lam=1.0), [0.5, 0.375, 0.25, 1.0])


def test_unlikeliness_ties_nan_and_groups():
    rewards = torch.tensor([1.0, 1.0, NAN, 0.0, 1.0, 1.0, 1.0, 1.0])
    logp = torch.tensor([-2.0, -2.0, -9.0, -1.0, -1.0, -2.0, -3.0, -4.0])
    out = unlikeliness_rewards(rewards, logp, group=4, lam=0.5)
    # group 1: tie → batch order (0 rank 0, 1 rank 1), NaN stays NaN; group 2: ranks 3, 2, 1, 0
    assert _same(out, [1.0, 1 - 0.5 / 4, NAN, 0.0, 1 - 0.5 * 3 / 4, 1 - 0.5 * 2 / 4, 1 - 0.5 / 4, 1.0])
    assert _same(unlikeliness_rewards(rewards, logp, group=4, lam=0.0), rewards.tolist())


# ---------------------------------------------------------------------------------------------------------------------
# PKPO


@pytest.mark.parametrize("n", [1, 4, 8, 16])
def test_pass_at_k_estimate_is_the_subset_average(n):
    """ρ(n, c, k) = 1 − C(n−c, k)/C(n, k), the fraction of size-k subsets holding a correct sample; ρ(n, c, 0) = 0."""
    for c in range(n + 1):
        assert pass_at_k_estimate(n, c, 0) == 0.0
        for k in range(1, n + 1):
            assert pass_at_k_estimate(n, c, k) == pytest.approx(1 - math.comb(n - c, k) / math.comb(n, k), abs=1e-12)


def test_pkpo_hand_values():
    correct = torch.tensor([1, 0, 1, 0, 0, 0, 0, 0, 1, 0, 0, 0], dtype=torch.bool)
    # k = 2, n = 4: correct k/n = 0.5; incorrect 0.5·ρ(3, c, 1) = 0.5·c/3
    assert _same(pkpo_rewards(correct, group=4, k=2), [0.5, 1 / 3, 0.5, 1 / 3, 0, 0, 0, 0, 0.5, 1 / 6, 1 / 6, 1 / 6])
    # baselined: correct (k/n)·C(n−c, k−1)/C(n−1, k−1), incorrect 0
    assert _same(pkpo_advantages(correct, group=4, k=2), [1 / 3, 0, 1 / 3, 0, 0, 0, 0, 0, 0.5, 0, 0, 0])
    # k = 1 is the plain reward / n; k = n rewards only a group's single correct sample
    assert _same(pkpo_rewards(correct, group=4, k=1), (correct.float() / 4).tolist())
    assert _same(pkpo_advantages(correct, group=4, k=4), [0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0])


def test_pkpo_hand_values_k3():
    correct = torch.tensor([1, 0, 0, 0, 1, 1, 0, 0, 1, 1, 1, 1], dtype=torch.bool)
    # n = 4, k = 3: correct 3/4; incorrect (3/4)·ρ(3, c, 2), ρ(3, 1, 2) = 1 − C(2,2)/C(3,2) = 2/3, ρ(3, 2, 2) = 1
    assert _same(pkpo_rewards(correct, 4, 3), [0.75, 0.5, 0.5, 0.5, 0.75, 0.75, 0.75, 0.75, 0.75, 0.75, 0.75, 0.75])
    # advantages of correct samples (3/4)·C(4−c, 2)/C(3, 2): c = 1 → 3/4, c = 2 → 1/4, c = 4 → 0; incorrect → 0
    assert _same(pkpo_advantages(correct, 4, 3), [0.75, 0, 0, 0, 0.25, 0.25, 0, 0, 0, 0, 0, 0])


@pytest.mark.parametrize("n, k", [(4, 1), (4, 2), (4, 4), (6, 3), (6, 5)])
def test_pkpo_gradient_is_unbiased_by_enumeration(n, k):
    """Bernoulli policy with success probability p (logit θ): E[Σ_i r_i·∂_θ log π(x_i)] = ∂_θ pass@k exactly, for the
    raw rewards and for the leave-one-out baselined advantages; centring by the group mean (GRPO) is biased."""
    p = 0.3
    target = k * (1 - p) ** (k - 1) * p * (1 - p)  # ∂/∂θ [1 − (1 − p)^k], ∂p/∂θ = p(1 − p)
    est = {"raw": 0.0, "loo": 0.0, "centred": 0.0}
    for outcome in itertools.product([0, 1], repeat=n):
        x = torch.tensor(outcome, dtype=torch.bool)
        prob = p ** int(x.sum()) * (1 - p) ** (n - int(x.sum()))
        score = x.double() - p  # ∂_θ log π(x_i)
        raw = pkpo_rewards(x, n, k, torch.float64)
        est["raw"] += prob * (raw * score).sum().item()
        est["loo"] += prob * (pkpo_advantages(x, n, k, torch.float64) * score).sum().item()
        est["centred"] += prob * ((raw - raw.mean()) * score).sum().item()
    assert est["raw"] == pytest.approx(target, rel=1e-9)
    assert est["loo"] == pytest.approx(target, rel=1e-9)
    if k > 1:
        assert abs(est["centred"] - target) > 1e-3


def test_pkpo_bad_k():
    with pytest.raises(ValueError, match="1 <= k <= group size 4"):
        pkpo_rewards(torch.ones(8, dtype=torch.bool), group=4, k=5)


# ---------------------------------------------------------------------------------------------------------------------
# Validation and recipes


def _shaping_config(tmp_path, name, beta, **params):
    """The config of a divergence run with ``reward_shaping: name`` (reverse KL at ``beta`` when it is > 0; no std
    scaling, which PKPO's advantages refuse)."""
    kl = {"divergence": "reverse_kl", "divergence_coef": beta} if beta else {}
    return trainer_config(
        DivergenceGRPOConfig, tmp_path, reward_shaping=name, **kl, **{"scale_rewards": "none", **params}
    )


@pytest.mark.parametrize(
    "name, beta, params, message",
    [
        ("nope", 0.0, {}, "unknown reward_shaping 'nope'"),
        ("mara", 0.0, {"mara_tau": 1.0}, "inert at β = 0"),
        ("mara", 0.05, {"mara_tau": float("inf")}, "mara_tau"),
        (
            "unlikeliness",
            0.0,
            {"unlikeliness_lambda": 1.5},
            "unlikeliness_lambda must be a finite number in [0, 1], got 1.5",
        ),
        ("unlikeliness", 0.0, {"unlikeliness_rank": "best"}, "unlikeliness_rank"),
        ("pkpo", 0.0, {"pkpo_k": 0}, "pkpo_k must be an integer >= 1"),
        ("pkpo", 0.0, {"pkpo_k": 2.5}, "pkpo_k must be an integer"),
        ("pkpo", 0.0, {"pkpo_k": 9, "num_generations": 8}, "pkpo_k=9 exceeds num_generations=8"),
    ],
)
def test_shaping_checks_are_one_line(name, beta, params, message, tmp_path):
    with pytest.raises(ConfigError) as err:
        _shaping_config(tmp_path, name, beta, **params)
    assert message in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize("recipe", ["mara", "unlikeliness", "pkpo"])
def test_tiny_recipes_hold_valid_shaping_settings(recipe, tmp_path):
    data = yaml.safe_load((ROOT / "recipes" / "tiny" / f"{recipe}.yaml").read_text())
    assert data["reward_shaping"] == recipe and data["trainer"] == "divergence"
    keys = ("mara_tau", "unlikeliness_lambda", "unlikeliness_rank", "pkpo_k", "num_generations")
    params = {k: data[k] for k in keys if k in data}
    _shaping_config(tmp_path, recipe, data.get("divergence_coef", 0.0), **params)


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--reward_shaping", "nope"], "unknown reward_shaping 'nope'"),
        (
            ["--reward_shaping", "unlikeliness", "--unlikeliness_lambda", "-0.1"],
            "unlikeliness_lambda must be a finite number in [0, 1], got -0.1",
        ),
        (
            ["--reward_shaping", "unlikeliness", "--unlikeliness_lambda", "1.5"],
            "unlikeliness_lambda must be a finite number in [0, 1], got 1.5",
        ),
        (["--reward_shaping", "unlikeliness", "--unlikeliness_rank", "best"], "unlikeliness_rank must be one of"),
        (
            ["--reward_shaping", "pkpo", "--scale_rewards", "none", "--pkpo_k", "9"],
            "pkpo_k=9 exceeds num_generations=8",
        ),
        (["--reward_shaping", "pkpo", "--scale_rewards", "none", "--pkpo_k", "0"], "pkpo_k must be an integer >= 1"),
        (["--reward_shaping", "pkpo", "--pkpo_k", "2.5"], "pkpo_k"),
        (["--reward_shaping", "mara", "--divergence", "none", "--divergence_coef", "0"], "inert at β = 0"),
        (["--reward_shaping", "mara", "--divergence_coef", "0"], "inert at β = 0"),
        (["--reward_shaping", "mara", "--mara_tau", "inf"], "mara_tau must be a finite number"),
        (["--reward_shaping", "mara", "--mara_tau", "nan"], "mara_tau must be a finite number"),
        (["--reward_shaping", "mara", "--mara_tau", "2.0"], "mara_tau must be a finite number in (0, 1], got 2.0"),
        (["--reward_shaping", "mara", "--mara_tau", "0"], "mara_tau must be a finite number in (0, 1], got 0.0"),
        (["--reward_shaping", "mara", "--divergence", "forward_kl"], "needs divergence: reverse_kl"),
        (["--reward_shaping", "mara", "--task", "carry"], "'mara' is inert on task 'carry': every prompt has one"),
        (["--reward_shaping", "mara", "--task", "arith"], "'mara' is inert on task 'arith'"),
    ],
)
def test_bad_shaping_settings_fail_in_one_line_before_the_model_loads(extra, message, capsys, no_model_loads, tmp_path):
    assert_train_refuses(
        ROOT / "recipes" / "tiny" / "mara.yaml", extra, message, capsys, tmp_path
    )  # reverse_kl with divergence_coef 0.05, 8 generations


# ---------------------------------------------------------------------------------------------------------------------
# The trainer's shaped advantages (DivergenceGRPOTrainer) against the formulas


@pytest.mark.parametrize(
    "shaping, kw",
    [
        ("mara", {"divergence": "reverse_kl", "divergence_coef": 0.05, "mara_tau": 1.0}),
        ("unlikeliness", {"unlikeliness_lambda": 0.5}),
        ("unlikeliness", {"unlikeliness_lambda": 0.5, "unlikeliness_rank": "all", "scale_rewards": "none"}),
        ("pkpo", {"pkpo_k": 4, "scale_rewards": "none"}),
    ],
)
def test_trainer_shaped_advantages_match_the_formulas(shaping, kw, tmp_path, tiny_path):
    """Two groups of 8, each with two correct samples by construction (the reward ``far_pair``: a group's most and
    least likely completions, by the sequence log-prob MARA anchors on, or the mean per-token one the unlikeliness
    reward ranks by): MARA re-anchors one of them, the unlikeliness reward ranks one above the other."""
    from rlvr_div.trainers.grpo import DivergenceGRPOConfig, DivergenceGRPOTrainer

    torch.manual_seed(0)
    args = trainer_config(DivergenceGRPOConfig, tmp_path, reward_shaping=shaping, **kw)
    trainer = make_far_pair_trainer(DivergenceGRPOTrainer, args, tiny_path, mean=shaping != "mara")
    trainer.model.train()
    rows = [r for r in trainer.train_dataset.select(range(2)) for _ in range(8)]
    out = trainer._generate_and_score_completions(rows)
    rewards = torch.tensor(list(trainer._logs["rewards"]["far_pair"]), dtype=torch.float32)  # TRL's, unshaped
    assert (rewards.view(-1, 8) == 1).sum(1).tolist() == [2, 2], "premise: two correct samples per group (far_pair)"
    mask = out["completion_mask"]
    if shaping == "pkpo":
        expected = pkpo_advantages(rewards == 1.0, 8, kw["pkpo_k"])  # used as they are: no centring, no scaling
    else:
        if shaping == "mara":  # sequence log-probs under the reference, β = divergence_coef
            ref = (out["ref_per_token_logps"] * mask).sum(-1)
            shaped = mara_rewards(rewards, ref, 8, kw["mara_tau"], kw["divergence_coef"])
        else:  # mean per-token log-prob under the sampling policy
            old = policy_logps_no_grad(trainer, out)
            score = (old * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)
            shaped = unlikeliness_rewards(
                rewards, score, 8, kw["unlikeliness_lambda"], kw.get("unlikeliness_rank", "correct")
            )
        grouped = shaped.view(-1, 8)
        expected = (grouped - grouped.mean(1, keepdim=True)).view(-1)
        if kw.get("scale_rewards", "group") == "group":
            expected = expected / (grouped.std(1, keepdim=True).expand_as(grouped).reshape(-1) + 1e-4)
        moved = (shaped - rewards).abs().max().item()  # MARA: β·(L^ref gap of a group's correct pair); ≥ λ/8
        assert moved > 1e-3, f"premise: the shaping changed a reward by {moved:.3g}, far above the tolerance below"
    assert torch.allclose(out["advantages"].float(), expected.float(), atol=1e-5), (out["advantages"], expected)
    logged = torch.tensor(list(trainer._logs["advantages"]))  # the completions log shows the shaped advantages
    assert logged.shape == expected.shape and torch.allclose(logged.float(), expected.float(), atol=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("recipe", ["mara", "unlikeliness", "pkpo"])
@pytest.mark.parametrize("lora", [False, True])
def test_reward_shaping_recipes_train_50_steps(recipe, lora, tmp_path, tiny_path):
    """Each recipe as shipped (its own batch) trains its 50 steps with finite losses."""
    logs = run_recipe(recipe, lora, tmp_path / recipe, steps=50, batch=None)
    assert [x["step"] for x in logs] == list(range(1, 51))
    assert all(math.isfinite(x["loss"]) and "diversity/pass_at_group" in x for x in logs)
