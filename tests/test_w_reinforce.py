"""W-REINFORCE (Zhu et al. 2025): advantages against the paper's PSR/NSR decomposition (hand values and the exact
expected gradient on a tabular policy), the trainer's advantages, bad settings in one line, the tiny recipe."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from train_checks import (
    assert_reward_rises,
    assert_train_refuses,
    make_trainer,
    mixed_pair_sum,
    run_recipe,
    trainer_config,
)

from rlvr_div.trainers.w_reinforce import w_reinforce_advantages

ROOT = Path(__file__).resolve().parents[1]
NAN = float("nan")


def test_hand_values():
    rewards = torch.tensor([1.0, 0.0, NAN, 1.0, 0.5])
    # correct (score 1) → +λ; scored and not correct → −1 (the paper's r = −1); unscored → 0
    assert w_reinforce_advantages(rewards, 0.1, 1.0).tolist() == pytest.approx([0.1, -1.0, 0.0, 0.1, -1.0])
    assert w_reinforce_advantages(rewards, 1.0, 0.0).tolist() == pytest.approx([1.0, 0.0, 0.0, 1.0, 0.0])  # PSR
    assert w_reinforce_advantages(rewards, 0.0, 1.0).tolist() == pytest.approx([0.0, -1.0, 0.0, 0.0, -1.0])  # NSR


@pytest.mark.parametrize("lam", [0.0, 0.1, 1.0])
def test_expected_gradient_is_the_gradient_of_the_weighted_objective(lam):
    """Σ_y π(y)·A(y)·∇log π(y) (the estimator's expectation, by enumeration) = −∇(λ·L_PSR + L_NSR), with
    L_PSR = −Σ_{r(y)=+1} π(y) and L_NSR = −Σ_{r(y)=−1} −π(y) (the paper's decomposition)."""
    torch.manual_seed(0)
    correct = torch.tensor([1, 0, 0, 1, 0, 1], dtype=torch.bool)
    theta = torch.randn(6, dtype=torch.float64, requires_grad=True)
    logp = torch.log_softmax(theta, 0)
    adv = w_reinforce_advantages(correct.double(), psr_weight=lam, nsr_weight=1.0, dtype=torch.float64)
    (estimator,) = torch.autograd.grad((logp.exp().detach() * adv * logp).sum(), theta)
    p = torch.softmax(theta, 0)
    loss_psr = -p[correct].sum()
    loss_nsr = -(-p[~correct]).sum()
    (objective,) = torch.autograd.grad(-(lam * loss_psr + loss_nsr), theta)
    assert torch.allclose(estimator, objective, atol=1e-12)


def test_trainer_uses_the_weighted_advantages(tmp_path, tiny_path):
    from rlvr_div.trainers.grpo import DivergenceGRPOConfig, DivergenceGRPOTrainer

    torch.manual_seed(0)
    args = trainer_config(
        DivergenceGRPOConfig,
        tmp_path,
        reward_shaping="w_reinforce",
        psr_weight=0.3,
        nsr_weight=0.7,
        scale_rewards="none",
    )
    trainer = make_trainer(DivergenceGRPOTrainer, args, tiny_path, reward=mixed_pair_sum)  # both kinds of sample
    trainer.model.train()
    rows = [r for r in trainer.train_dataset.select(range(2)) for _ in range(8)]
    out = trainer._generate_and_score_completions(rows)
    rewards = list(trainer._logs["rewards"]["mixed_pair_sum"])  # TRL's, unshaped
    expected = torch.tensor([0.3 if r == 1 else -0.7 for r in rewards])
    assert 0 < sum(r == 1 for r in rewards) < len(rewards), "premise: both kinds of sample (mixed_pair_sum)"
    assert torch.allclose(out["advantages"].float(), expected, atol=1e-6)
    assert torch.allclose(torch.tensor(list(trainer._logs["advantages"])).float(), expected, atol=1e-6)


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--psr_weight", "-0.1"], "psr_weight must be a finite number >= 0"),
        (["--nsr_weight", "inf"], "nsr_weight must be a finite number >= 0"),
        (["--psr_weight", "0", "--nsr_weight", "0"], "psr_weight and nsr_weight are both 0"),
        (
            ["--reward_shaping", "none", "--psr_weight", "0.2"],
            "psr_weight=0.2 acts only with reward_shaping: w_reinforce",
        ),
        (["--reward_shaping", "pkpo", "--nsr_weight", "0.5"], "nsr_weight=0.5 acts only with reward_shaping"),
        (["--scale_rewards", "group"], "scale_rewards='group' does not act with reward_shaping: w_reinforce"),
    ],
)
def test_bad_settings_fail_in_one_line_before_the_model_loads(extra, message, capsys, no_model_loads, tmp_path):
    assert_train_refuses(ROOT / "recipes" / "tiny" / "w_reinforce.yaml", extra, message, capsys, tmp_path)


@pytest.mark.slow
def test_tiny_recipe_trains_50_steps_with_the_reward_rising(tmp_path, tiny_path):
    logs = run_recipe("w_reinforce", False, tmp_path / "run", steps=50, batch=96)
    assert_reward_rises(logs, 50, 0.05)
