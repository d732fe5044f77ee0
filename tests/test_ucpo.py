"""UCPO (reward_shaping: ucpo): the redistribution of a group's correct-sample advantages toward 1/q and the
non-uniformity KL(q ‖ U) against a hand computation; along the expected update (every group of draws of a tabular
policy enumerated) the correct set concentrates less than under GRPO, less the larger τ, while the wrong answer's
update is GRPO's; the trainer's advantages; bad settings in one line; the tiny recipe."""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import pytest
import torch
from train_checks import assert_train_refuses, make_far_pair_trainer, run_recipe, trainer_config

from rlvr_div.trainers.common import group_advantages
from rlvr_div.trainers.ucpo import correct_set_distribution, kl_to_uniform, ucpo_advantages

ROOT = Path(__file__).resolve().parents[1]
RECIPE = ROOT / "recipes" / "tiny" / "ucpo.yaml"
NAN = float("nan")


LN = math.log


def test_hand_values():
    validity = torch.tensor([*[1.0, 1.0, 1.0, 0.0], *[1.0, 0.0, 0.0, 0.0], *[0.0] * 4, *[1.0, NAN, 1.0, 0.0]])
    # group 1: q = (0.5, 0.25, 0.25) over the correct samples (any common shift of ℓ gives the same q)
    ell = torch.tensor(
        [LN(0.5) - 1, LN(0.25) - 1, LN(0.25) - 1, -0.1, -3.0, -1.0, -1.0, -1.0, *[-2.0] * 4, *[-2.0] * 4]
    )
    adv = torch.tensor([0.5, 0.5, 0.5, -1.5, 1.5, -0.5, -0.5, -0.5, *[0.0] * 4, 0.7, 0.0, 0.7, -1.4])
    q = correct_set_distribution(validity, ell, 4)
    assert q[0].tolist() == pytest.approx([0.5, 0.25, 0.25, 0.0])
    assert q[3].tolist() == pytest.approx([0.5, 0.0, 0.5, 0.0])
    # KL(q ‖ U_3) = log 3 − 1.5·log 2; a uniform q (group 4) is 0
    assert kl_to_uniform(q[[0, 3]]).tolist() == pytest.approx([LN(3) - 1.5 * LN(2), 0.0])
    # τ = 0.5: 1/q = (2, 4, 4) → target (0.2, 0.4, 0.4); w = 0.5/3 + 0.5·target; factors 3·w = (0.8, 1.1, 1.1)
    out = ucpo_advantages(adv, validity, ell, 4, tau=0.5).view(4, 4)
    assert out[0].tolist() == pytest.approx([0.4, 0.55, 0.55, -1.5])
    assert out[0, :3].sum().item() == pytest.approx(1.5)  # the correct samples' total advantage is kept
    assert out[1:].reshape(-1).tolist() == pytest.approx(adv.view(4, 4)[1:].reshape(-1).tolist())  # c ≤ 1, uniform q
    # τ = 1: advantages ∝ 1/q; the rarer correct samples get more
    assert ucpo_advantages(adv, validity, ell, 4, tau=1.0)[:4].tolist() == pytest.approx([0.3, 0.6, 0.6, -1.5])


def test_tau_zero_is_grpo():
    torch.manual_seed(0)
    validity = (torch.rand(32) < 0.6).double()
    adv, ell = torch.randn(32, dtype=torch.float64), -torch.rand(32, dtype=torch.float64) * 3
    assert torch.allclose(ucpo_advantages(adv, validity, ell, 8, tau=0.0), adv, atol=1e-12)


def _expected_update(theta: torch.Tensor, correct: torch.Tensor, group: int, tau: float) -> torch.Tensor:
    """E over every group of ``group`` draws of Σ_i A_i·∇log π(y_i), A = UCPO on GRPO's advantages (one-token
    answers, so ℓ = log π)."""
    logp = torch.log_softmax(theta, 0)
    p = logp.exp().detach()
    out = torch.zeros_like(theta)
    for ys in itertools.product(range(theta.numel()), repeat=group):
        r = correct[list(ys)].double()
        adv = group_advantages(r.unsqueeze(1), torch.ones(1, dtype=torch.float64), group)
        a = ucpo_advantages(adv, r, logp.detach()[list(ys)], group, tau)
        (g,) = torch.autograd.grad(sum(a[i] * logp[y] for i, y in enumerate(ys)), theta, retain_graph=True)
        out += p[list(ys)].prod() * g
    return out


def test_the_expected_update_concentrates_the_correct_set_less_than_grpo():
    """d KL(q ‖ U)/dt along the expected update, q = π restricted to the correct answers: GRPO's (τ = 0) raises it
    (the rich get richer); UCPO's raises it less, the less the larger τ. The wrong answer's component is the same:
    UCPO moves advantage among correct samples only, keeping their total."""
    correct = torch.tensor([1, 1, 1, 0], dtype=torch.bool)
    theta = torch.tensor([2.0, 0.5, -0.5, 0.0], dtype=torch.float64, requires_grad=True)
    probe = theta.detach().clone().requires_grad_(True)
    pc = torch.softmax(probe, 0)[correct]
    (grad_kl,) = torch.autograd.grad(kl_to_uniform((pc / pc.sum()).unsqueeze(0))[0], probe)
    updates = {tau: _expected_update(theta, correct, 3, tau) for tau in (0.0, 0.2, 1.0)}
    slopes = [float(grad_kl @ updates[tau]) for tau in (0.0, 0.2, 1.0)]
    assert slopes[0] > slopes[1] > slopes[2]
    assert slopes[2] < 0.8 * slopes[0]
    assert updates[0.2][3].item() == pytest.approx(updates[0.0][3].item(), abs=1e-12)
    assert updates[1.0][3].item() == pytest.approx(updates[0.0][3].item(), abs=1e-12)


def test_trainer_redistributes_the_correct_samples_advantages(tmp_path, tiny_path):
    """Two groups of 8, each with two correct samples by construction: the reward ``far_pair`` marks correct the
    group's most and least likely completions under the policy (mean per-token log-prob, UCPO's ℓ), so q is not
    uniform and the redistribution has something to move."""
    from rlvr_div.trainers.common import policy_logps_no_grad
    from rlvr_div.trainers.grpo import DivergenceGRPOConfig, DivergenceGRPOTrainer

    torch.manual_seed(0)
    args = trainer_config(DivergenceGRPOConfig, tmp_path, reward_shaping="ucpo", ucpo_tau=0.6)
    trainer = make_far_pair_trainer(DivergenceGRPOTrainer, args, tiny_path, mean=True)
    trainer.model.train()
    rows = [r for r in trainer.train_dataset.select(range(2)) for _ in range(8)]
    out = trainer._generate_and_score_completions(rows)
    r = torch.tensor(list(trainer._logs["rewards"]["far_pair"])).view(-1, 8)
    grpo = (r - r.mean(1, keepdim=True)) / (r.std(1, keepdim=True) + 1e-4)  # TRL's, scale_rewards group
    mask = out["completion_mask"]
    ell = ((policy_logps_no_grad(trainer, out) * mask).sum(-1) / mask.sum(-1)).view(-1, 8).double()
    expected = grpo.clone().double()
    for g in range(r.size(0)):  # the module docstring's formula, written out
        idx = (r[g] == 1).nonzero().squeeze(-1)
        c = idx.numel()
        if c < 2:
            continue
        q = torch.softmax(ell[g, idx], 0)
        w = 0.4 / c + 0.6 * (1 / q) / (1 / q).sum()
        expected[g, idx] = grpo[g, idx].double() * c * w
    assert (r == 1).sum(1).tolist() == [2, 2], "premise: two correct samples per group (far_pair)"
    gap = max(float(ell[g, r[g] == 1].max() - ell[g, r[g] == 1].min()) for g in range(r.size(0)))
    assert gap > 0.1, f"premise: a group's correct samples differ in ℓ (largest gap {gap:.3g}), so q is not uniform"
    adv = out["advantages"].double().view(-1, 8)
    assert torch.allclose(adv, expected, atol=1e-4)
    assert torch.allclose(adv[r == 0], grpo[r == 0].double(), atol=1e-6)  # incorrect samples: GRPO's
    assert (adv[r == 1] - grpo[r == 1].double()).abs().max() > 0.01  # the correct ones were redistributed
    assert trainer._metrics["train"]["ucpo/kl_to_uniform"][-1] >= 0


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--ucpo_tau", "0"], "ucpo_tau must be a finite number in (0, 1], got 0"),
        (["--ucpo_tau", "1.5"], "ucpo_tau must be a finite number in (0, 1], got 1.5"),
        (["--reward_shaping", "none", "--ucpo_tau", "0.5"], "ucpo_tau=0.5 acts only with reward_shaping: ucpo"),
    ],
)
def test_bad_settings_fail_in_one_line_before_the_model_loads(extra, message, capsys, no_model_loads, tmp_path):
    assert_train_refuses(RECIPE, extra, message, capsys, tmp_path)


@pytest.mark.parametrize("value", ["nan", "inf"])
def test_a_non_finite_value_fails_in_one_line_before_the_model_loads(value, capsys, no_model_loads, tmp_path):
    assert_train_refuses(RECIPE, ["--ucpo_tau", value], ("ucpo_tau", value, "finite number"), capsys, tmp_path)


@pytest.mark.slow
def test_tiny_recipe_trains(tmp_path, tiny_path):
    logs = run_recipe("ucpo", False, tmp_path / "run", steps=2, batch=None)
    assert [x["step"] for x in logs] == [1, 2]
    assert all("ucpo/kl_to_uniform" in x for x in logs)
