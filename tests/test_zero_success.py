"""Zero-success-only updates (reward_shaping: zero_success, Yuan et al. 2026): only all-failed groups move, by a
signed REINFORCE advantage (hand values); the estimator's expectation is λ·∇pass@G (every group of draws enumerated
on a tabular policy); the trainer's advantages; bad settings in one line; the tiny recipe."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
import torch
from train_checks import assert_train_refuses, make_trainer, run_recipe, trainer_config

from rlvr_div.trainers.zero_success import zero_success_advantages, zero_success_groups

ROOT = Path(__file__).resolve().parents[1]
RECIPE = ROOT / "recipes" / "tiny" / "zero_success.yaml"
NAN = float("nan")


def test_only_groups_without_a_correct_sample_are_updated():
    rewards = torch.tensor(
        [
            *[0.0, 1.0, 0.0, 0.0],  # a success: the whole group gets 0
            *[0.0, 0.0, 0.0, 0.0],  # zero success: −λ on every sample
            *[0.0, NAN, 0.0, 0.5],  # zero success (0.5 is not correct); the unscored sample gets 0
            *[NAN, NAN, NAN, NAN],  # nothing scored: nothing observed, 0
            *[1.0, 1.0, 1.0, 1.0],  # all correct: 0
        ]
    )
    assert zero_success_groups(rewards, 4).tolist() == [False, True, True, False, False]
    adv = zero_success_advantages(rewards, 4, weight=0.5).view(-1, 4)
    assert adv.tolist() == [[0.0] * 4, [-0.5] * 4, [-0.5, 0.0, -0.5, -0.5], [0.0] * 4, [0.0] * 4]


@pytest.mark.parametrize("lam", [1.0, 0.3])
def test_the_expected_update_is_lambda_times_the_gradient_of_pass_at_g(lam):
    """Σ over every group of G draws of P(group)·Σ_i A_i·∇log π(y_i) = λ·∇(1 − (1 − p)^G) = λ·∇pass@G, p = π(correct):
    the signed push-down of all-failed groups is an unbiased estimate of the pass@G gradient."""
    torch.manual_seed(0)
    correct = torch.tensor([1, 0, 0, 1, 0], dtype=torch.bool)
    theta = torch.randn(5, dtype=torch.float64, requires_grad=True)
    logp = torch.log_softmax(theta, 0)
    p = logp.exp().detach()
    g = 3
    expected = torch.zeros(5, dtype=torch.float64)
    for ys in itertools.product(range(5), repeat=g):
        rewards = correct[list(ys)].double()
        adv = zero_success_advantages(rewards, g, weight=lam, dtype=torch.float64)
        (grad,) = torch.autograd.grad(sum(adv[i] * logp[y] for i, y in enumerate(ys)), theta, retain_graph=True)
        expected += p[list(ys)].prod() * grad
    pass_at_g = 1 - (1 - torch.softmax(theta, 0)[correct].sum()) ** g
    (objective,) = torch.autograd.grad(lam * pass_at_g, theta)
    assert torch.allclose(expected, objective, atol=1e-12)
    assert expected[correct].gt(0).all() and expected[~correct].lt(0).all()


def test_trainer_uses_the_zero_success_advantages(tmp_path, tiny_path):
    """Four groups of 8 scored by pair_sum, except that, whatever was sampled, every completion of the first prompt
    fails and every completion of the second is correct: the batch holds both kinds of group by construction (the
    other two are as sampled), and the advantages are −λ on the all-failed groups, 0 elsewhere."""
    from rlvr_div.rewards import get_reward
    from rlvr_div.trainers.grpo import DivergenceGRPOConfig, DivergenceGRPOTrainer

    torch.manual_seed(0)
    args = trainer_config(
        DivergenceGRPOConfig, tmp_path, reward_shaping="zero_success", zero_success_weight=0.7, scale_rewards="none",
        per_device_train_batch_size=32,
    )  # fmt: skip
    pair_sum = get_reward("pair_sum")
    script: dict[int, float] = {}  # a prompt's target → the score of every completion of that prompt

    def scripted_pair_sum(prompts, completions, target, **kwargs) -> list[float | None]:
        real = pair_sum(prompts=prompts, completions=completions, target=target)
        return [script.get(t, x) for t, x in zip(target, real, strict=True)]

    trainer = make_trainer(DivergenceGRPOTrainer, args, tiny_path, reward=scripted_pair_sum)
    trainer.model.train()
    rows = [r for r in trainer.train_dataset.select(range(4)) for _ in range(8)]
    script.update({rows[0]["target"]: 0.0, rows[8]["target"]: 1.0})
    assert len(script) == 2, "premise: the first two prompts differ, so the reward can tell them apart"
    out = trainer._generate_and_score_completions(rows)
    r = torch.tensor(list(trainer._logs["rewards"]["scripted_pair_sum"])).view(-1, 8)  # TRL's, unshaped
    failed = ~(r == 1).any(dim=1)
    expected = torch.where(failed.unsqueeze(1), torch.full_like(r, -0.7), torch.zeros_like(r)).view(-1)
    assert failed[0] and not failed[1], "premise: the scripted groups, one all-failed and one all-correct"
    assert torch.allclose(out["advantages"].float(), expected, atol=1e-6)
    assert trainer._metrics["train"]["zero_success/group_frac"][-1] == pytest.approx(failed.float().mean().item())


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--zero_success_weight", "0"], "zero_success_weight must be a finite number > 0, got 0"),
        (["--zero_success_weight", "-1"], "zero_success_weight must be a finite number > 0, got -1"),
        (
            ["--reward_shaping", "none", "--zero_success_weight", "2"],
            "zero_success_weight=2.0 acts only with reward_shaping: zero_success",
        ),
        (["--scale_rewards", "group"], "scale_rewards='group' does not act with reward_shaping: zero_success"),
    ],
)
def test_bad_settings_fail_in_one_line_before_the_model_loads(extra, message, capsys, no_model_loads, tmp_path):
    assert_train_refuses(RECIPE, extra, message, capsys, tmp_path)


@pytest.mark.parametrize("value", ["nan", "inf"])
def test_a_non_finite_value_fails_in_one_line_before_the_model_loads(value, capsys, no_model_loads, tmp_path):
    assert_train_refuses(
        RECIPE, ["--zero_success_weight", value], ("zero_success_weight", value, "finite number"), capsys, tmp_path
    )


@pytest.mark.slow
def test_tiny_recipe_trains(tmp_path, tiny_path):
    logs = run_recipe("zero_success", False, tmp_path / "run", steps=2, batch=None)
    assert [x["step"] for x in logs] == [1, 2]
    assert all("zero_success/group_frac" in x for x in logs)
