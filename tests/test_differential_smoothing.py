"""Differential smoothing (reward_shaping: differential_smoothing, DS-GRPO): the correction against a hand
computation; with γ_n = 0 only correct samples' advantages change; the correction's expected gradient is an entropy
bonus on the correct set (every outcome of a tabular policy enumerated); the trainer's advantages; bad settings in
one line; the tiny recipe."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from train_checks import assert_train_refuses, make_trainer, mixed_pair_sum, run_recipe, trainer_config

from rlvr_div.trainers.differential_smoothing import differential_smoothing_advantages

ROOT = Path(__file__).resolve().parents[1]
RECIPE = ROOT / "recipes" / "tiny" / "differential_smoothing.yaml"
NAN = float("nan")


def test_hand_values():
    adv = torch.tensor([0.5, -0.5, 1.0, 0.0, -1.0])
    validity = torch.tensor([1.0, 0.0, 1.0, NAN, 0.5])  # 0.5 is scored and not correct
    logp = torch.tensor([-2.0, -3.0, -10.0, -4.0, -1.0])
    # correct: A − γ_p·L; scored incorrect: A + γ_n·L; unscored: A
    out = differential_smoothing_advantages(adv, validity, logp, gamma_p=0.1, gamma_n=0.2)
    assert out.tolist() == pytest.approx([0.5 + 0.2, -0.5 - 0.6, 1.0 + 1.0, 0.0, -1.0 - 0.2])
    # γ_n = 0: the incorrect and unscored samples keep their advantages exactly; the rarer correct one gains more
    out = differential_smoothing_advantages(adv, validity, logp, gamma_p=0.1)
    assert out[[1, 3, 4]].tolist() == adv[[1, 3, 4]].tolist()
    assert out[[0, 2]].tolist() == pytest.approx([0.7, 2.0])


@pytest.mark.parametrize("gamma_p, gamma_n", [(0.3, 0.0), (0.0, 0.2), (0.1, 0.4)])
def test_the_correction_is_an_entropy_bonus_on_the_correct_set(gamma_p, gamma_n):
    """Σ_y π(y)·c(y)·∇log π(y) for the correction c = A^DS − A (every outcome y enumerated) equals
    γ_p·∇(H_C + π(C)) − γ_n·∇(H_W + π(W)), H_S = −Σ_{y∈S} π(y)·log π(y)."""
    torch.manual_seed(0)
    correct = torch.tensor([1, 0, 1, 1, 0, 0], dtype=torch.bool)
    theta = torch.randn(6, dtype=torch.float64, requires_grad=True)
    logp = torch.log_softmax(theta, 0)
    c = differential_smoothing_advantages(torch.zeros(6, dtype=torch.float64), correct.double(), logp, gamma_p, gamma_n)
    (expected,) = torch.autograd.grad((logp.exp().detach() * c * logp).sum(), theta)
    p = torch.softmax(theta, 0)
    entropy = lambda s: -(p[s] * torch.log(p[s])).sum()  # noqa: E731
    objective = gamma_p * (entropy(correct) + p[correct].sum()) - gamma_n * (entropy(~correct) + p[~correct].sum())
    (grad,) = torch.autograd.grad(objective, theta)
    assert torch.allclose(expected, grad, atol=1e-12)


def test_trainer_changes_only_the_correct_samples_advantages(tmp_path, tiny_path):
    from rlvr_div.trainers.common import policy_logps_no_grad
    from rlvr_div.trainers.grpo import DivergenceGRPOConfig, DivergenceGRPOTrainer

    torch.manual_seed(0)
    args = trainer_config(DivergenceGRPOConfig, tmp_path, reward_shaping="differential_smoothing", ds_gamma_p=0.2)
    trainer = make_trainer(DivergenceGRPOTrainer, args, tiny_path, reward=mixed_pair_sum)  # both kinds of sample
    trainer.model.train()
    rows = [r for r in trainer.train_dataset.select(range(2)) for _ in range(8)]
    out = trainer._generate_and_score_completions(rows)
    r = torch.tensor(list(trainer._logs["rewards"]["mixed_pair_sum"])).view(-1, 8)
    grpo = ((r - r.mean(1, keepdim=True)) / (r.std(1, keepdim=True) + 1e-4)).view(-1)  # TRL's, scale_rewards group
    seq = (policy_logps_no_grad(trainer, out) * out["completion_mask"]).sum(-1).float()
    correct = r.view(-1) == 1
    assert 0 < correct.sum() < correct.numel(), "premise: correct and incorrect samples (mixed_pair_sum)"
    adv = out["advantages"].float()
    assert torch.allclose(adv[~correct], grpo[~correct], atol=1e-5)  # incorrect: GRPO's, unchanged
    assert torch.allclose(adv[correct], grpo[correct] - 0.2 * seq[correct], atol=1e-4)
    assert (adv[correct] > grpo[correct]).all()  # −γ_p·log π > 0: every correct sample gains
    assert trainer._metrics["train"]["ds/correct_logp"][-1] == pytest.approx(seq[correct].mean().item(), abs=1e-4)


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--ds_gamma_p", "-0.1"], "ds_gamma_p must be a finite number >= 0, got -0.1"),
        (["--ds_gamma_p", "0"], "ds_gamma_p and ds_gamma_n are both 0"),
        (
            ["--reward_shaping", "none", "--ds_gamma_n", "0.1"],  # the recipe's ds_gamma_p is checked first
            "ds_gamma_p=0.1 acts only with reward_shaping: differential_smoothing",
        ),
    ],
)
def test_bad_settings_fail_in_one_line_before_the_model_loads(extra, message, capsys, no_model_loads, tmp_path):
    assert_train_refuses(RECIPE, extra, message, capsys, tmp_path)


@pytest.mark.parametrize("value", ["nan", "inf"])
def test_a_non_finite_value_fails_in_one_line_before_the_model_loads(value, capsys, no_model_loads, tmp_path):
    assert_train_refuses(RECIPE, ["--ds_gamma_n", value], ("ds_gamma_n", value, "finite number"), capsys, tmp_path)


@pytest.mark.slow
def test_tiny_recipe_trains(tmp_path, tiny_path):
    logs = run_recipe("differential_smoothing", False, tmp_path / "run", steps=2, batch=None)
    assert [x["step"] for x in logs] == [1, 2]
    assert all("ds/correction_abs" in x for x in logs)
