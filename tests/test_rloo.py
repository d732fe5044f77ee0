"""RLOO (reward_shaping: rloo): the leave-one-out advantages against a hand computation and the unbiasedness of
the estimator on a tabular policy, the trainer's advantages, bad settings in one line, the tiny recipe."""

from __future__ import annotations

import itertools
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

from rlvr_div.trainers.rloo import rloo_advantages

ROOT = Path(__file__).resolve().parents[1]
NAN = float("nan")


def test_hand_values_with_weights_and_unscored_completions():
    rewards = torch.tensor(
        [
            [1.0, 0.0],
            [0.0, 1.0],
            [1.0, 1.0],
            [NAN, NAN],  # group 1: R = 1, 0.5, 1.5, unscored
            [1.0, 0.0],
            [NAN, NAN],
            [NAN, NAN],
            [NAN, NAN],
        ]
    )  # group 2: one scored completion
    adv = rloo_advantages(rewards, torch.tensor([1.0, 0.5]), group=4)
    # group 1: baselines (0.5 + 1.5)/2 = 1, (1 + 1.5)/2 = 1.25, (1 + 0.5)/2 = 0.75; the unscored one gets 0
    assert adv.tolist()[:4] == pytest.approx([0.0, -0.75, 0.75, 0.0])
    assert adv.tolist()[4:] == [0.0] * 4  # fewer than two scored completions: no baseline, no signal


def test_weights_on_another_device_follow_the_rewards():
    """TRL keeps ``reward_weights`` on the CPU and the gathered rewards on the accelerator: on a lent H200 the
    plug-in failed with "Expected all tensors to be on the same device" (bench/gpu_check.py --recipes). The meta
    device stands in for the accelerator here: mixing it with a CPU tensor raises the same way."""
    adv = rloo_advantages(torch.zeros(4, 1, device="meta"), torch.ones(1), group=2)
    assert adv.device.type == "meta" and adv.shape == (4,)


def test_the_estimator_is_unbiased_on_a_tabular_policy():
    """E over every group of 3 draws of Σ_i A_i·∇log π(y_i) / 3 = ∇E_π[R]·(the RLOO identity: no bias factor)."""
    torch.manual_seed(0)
    reward = torch.tensor([1.0, 0.0, 0.5, 0.0], dtype=torch.float64)
    theta = torch.randn(4, dtype=torch.float64, requires_grad=True)
    logp = torch.log_softmax(theta, 0)
    p = logp.exp().detach()
    expected = torch.zeros(4, dtype=torch.float64)
    for ys in itertools.product(range(4), repeat=3):
        adv = rloo_advantages(reward[list(ys)].unsqueeze(1), torch.ones(1, dtype=torch.float64), group=3)
        (g,) = torch.autograd.grad(sum(adv[i] * logp[y] for i, y in enumerate(ys)) / 3, theta, retain_graph=True)
        expected += p[list(ys)].prod() * g
    (objective,) = torch.autograd.grad((logp.exp() * reward).sum(), theta)
    assert torch.allclose(expected, objective, atol=1e-12)


def test_trainer_uses_the_leave_one_out_advantages(tmp_path, tiny_path):
    from rlvr_div.trainers.grpo import DivergenceGRPOConfig, DivergenceGRPOTrainer

    torch.manual_seed(0)
    args = trainer_config(DivergenceGRPOConfig, tmp_path, reward_shaping="rloo", scale_rewards="none")
    trainer = make_trainer(DivergenceGRPOTrainer, args, tiny_path, reward=mixed_pair_sum)  # both kinds of sample
    trainer.model.train()
    rows = [r for r in trainer.train_dataset.select(range(2)) for _ in range(8)]
    out = trainer._generate_and_score_completions(rows)
    r = torch.tensor(list(trainer._logs["rewards"]["mixed_pair_sum"])).view(-1, 8)
    expected = (r - (r.sum(1, keepdim=True) - r) / 7).view(-1)
    assert 0 < (r == 1).sum() < r.numel(), "premise: correct and incorrect samples (mixed_pair_sum)"
    assert torch.allclose(out["advantages"].float(), expected, atol=1e-6)


def test_a_std_scaling_is_refused_in_one_line(capsys, no_model_loads, tmp_path):
    message = "scale_rewards='group' does not act with reward_shaping: rloo"
    assert_train_refuses(
        ROOT / "recipes" / "tiny" / "rloo.yaml", ["--scale_rewards", "group"], message, capsys, tmp_path
    )


@pytest.mark.slow
def test_tiny_recipe_trains_50_steps_with_the_reward_rising(tmp_path, tiny_path):
    logs = run_recipe("rloo", False, tmp_path / "run", steps=50, batch=96)
    assert_reward_rises(logs, 50, 0.05)
