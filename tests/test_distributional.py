"""α-DPG / f-DPG: pseudo-rewards, Ẑ, baselines and the loss against hand-computed values; the exact gradient on a
tabular policy; one step descends the exact divergence to p*; the trainer runs (full and LoRA) and refuses bad
settings in one line before any model loads."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from train_checks import assert_train_refuses, mixed_pair_sum

from rlvr_div import toy
from rlvr_div.cli import main as cli_main
from rlvr_div.errors import ConfigError
from rlvr_div.trainers.common import group_diversity
from rlvr_div.trainers.distributional import (
    REF_BETA,
    DPGConfig,
    check_dpg,
    divergence_estimate,
    dpg_advantages,
    leave_one_out,
    log_partition_estimate,
    log_target_ratio,
    pseudo_rewards,
    reinforce_loss,
)

ROOT = Path(__file__).resolve().parents[1]
RECIPE = str(ROOT / "recipes" / "tiny" / "alpha_dpg.yaml")
DPG_SPEC = (
    "dpg",
    "rlvr_div.trainers.dpg_trainer:DPGConfig",
    "rlvr_div.trainers.dpg_trainer:DPGTrainer",
    "α-DPG / f-DPG: policy gradient toward the filtered model p* = base(·|valid)",
)
# Until `dpg` is registered in rlvr_div/trainers/__init__.py, the tests register it themselves (a no-op afterwards).
REGISTER = (
    "from rlvr_div.trainers import TRAINERS, TrainerSpec\n"
    f"if 'dpg' not in TRAINERS: TRAINERS.add('dpg', TrainerSpec(*{DPG_SPEC!r}))\n"
)
exec(REGISTER)
DIVERSITY_KEYS = ("diversity/pass_at_group", "diversity/distinct_valid", "diversity/valid_rate")


# ---------------------------------------------------------------------------------------------------------------------
# Hand-computed values


def test_partition_estimate_clamps_and_floors():
    # group 1: valid samples have L^ref − L = −1, −2, −0.5 → Ẑ = (e^−1 + e^−2 + e^−0.5)/4
    # group 2: no valid sample → floor; group 3: Ẑ = (e^1 + e^1)/4 = 1.36 → clamped to 1
    policy = torch.tensor([-1.0, -2.0, -3.0, -4.0, -1.0, -1.0, -1.0, -1.0, -2.0, -2.0, -2.0, -2.0])
    ref = torch.tensor([-2.0, -9.0, -5.0, -4.5, -1.0, -1.0, -1.0, -1.0, -1.0, -1.0, -7.0, -7.0])
    valid = torch.tensor([1, 0, 1, 1, 0, 0, 0, 0, 1, 1, 0, 0], dtype=torch.bool)
    log_z = log_partition_estimate(policy, ref, valid, group=4, z_floor=1e-4)
    z1 = (math.exp(-1) + math.exp(-2) + math.exp(-0.5)) / 4
    assert log_z.tolist() == pytest.approx([math.log(z1), math.log(1e-4), 0.0])
    log_t = log_target_ratio(policy, ref, valid, log_z, group=4)
    assert log_t[0].item() == pytest.approx(-1.0 - (-2.0) + math.log(z1))
    assert log_t[3].item() == pytest.approx(-4.0 - (-4.5) + math.log(z1))
    assert log_t[8].item() == pytest.approx(-2.0 - (-1.0) + 0.0)
    assert torch.isinf(log_t[[1, 4, 5, 6, 7, 10, 11]]).all() and (log_t[[1, 4, 10]] > 0).all()


@pytest.mark.parametrize(
    "divergence, t, expected",
    [
        ("alpha", 0.5, 2**0.75 - 1),  # t^{α−1} − 1 at α = 0.25
        ("alpha", 2.0, 2**-0.75 - 1),
        ("alpha", 1e-3, 10.0),  # 1e-3^{−0.75} − 1 ≈ 176.8, clipped at M
        ("alpha", math.inf, -1.0),  # invalid
        ("forward_kl", 0.5, 1.0),  # 1/t − 1
        ("forward_kl", 2.0, -0.5),
        ("forward_kl", 1e-4, 10.0),
        ("forward_kl", math.inf, -1.0),
        ("js", 1.0, 0.0),  # log((1 + 1/t)/2)
        ("js", 0.5, math.log(1.5)),
        ("js", 3.0, math.log(2 / 3)),
        ("js", math.inf, -math.log(2)),
        ("js", 1e-9, 10.0),  # log((1 + 1e9)/2) ≈ 20 clipped at M
    ],
)
def test_pseudo_rewards(divergence, t, expected):
    r = pseudo_rewards(torch.tensor([math.log(t)], dtype=torch.float64), divergence, alpha=0.25, clip=10.0)
    assert r.item() == pytest.approx(expected, rel=1e-9, abs=1e-12)


@pytest.mark.parametrize(
    "divergence, alpha, clip, t, expected",
    [
        ("alpha", 0.5, 10.0, 0.25, 1.0),  # 0.25^{−1/2} − 1
        ("alpha", 0.5, 10.0, 4.0, -0.5),
        ("alpha", 0.5, 10.0, 1.0, 0.0),  # π = p*: no push
        ("alpha", 0.9, 10.0, 2.0, 2**-0.1 - 1),
        ("alpha", 0.5, 2.0, 0.04, 2.0),  # 0.04^{−1/2} − 1 = 4 > M = 2
        ("alpha", 0.5, 2.0, 0.25, 1.0),  # 1 < M: untouched
        ("alpha", 0.5, 2.0, math.inf, -1.0),
        ("forward_kl", 0.25, 2.0, 0.25, 2.0),  # 1/t − 1 = 3 > M
        ("forward_kl", 0.25, 2.0, 0.5, 1.0),
        ("js", 0.25, 0.5, 0.25, 0.5),  # log((1 + 4)/2) = 0.916 > M
        ("js", 0.25, 0.5, 2.0, math.log(0.75)),
        ("js", 0.25, 0.5, math.inf, -math.log(2)),
    ],
)
def test_pseudo_rewards_other_alpha_and_clip(divergence, alpha, clip, t, expected):
    r = pseudo_rewards(torch.tensor([math.log(t)], dtype=torch.float64), divergence, alpha=alpha, clip=clip)
    assert r.item() == pytest.approx(expected, rel=1e-9, abs=1e-12)


def test_partition_estimate_custom_floor_and_exact_clamp():
    # group 1: no valid sample → Ẑ = z_floor = 0.01; group 2: (e^0 + e^0)/2 = 1 exactly (clamp inactive);
    # group 3: one valid of 2 with L^ref − L = log 4 → Ẑ = 4/2 = 2 → clamped to 1
    policy = torch.tensor([-1.0, -2.0, -3.0, -5.0, -4.0, -1.0])
    ref = torch.tensor([-1.0, -2.0, -3.0, -5.0, -4.0 + math.log(4.0), -9.0])
    valid = torch.tensor([False, False, True, True, True, False])
    log_z = log_partition_estimate(policy, ref, valid, group=2, z_floor=0.01)
    assert log_z.tolist() == pytest.approx([math.log(0.01), 0.0, 0.0], abs=1e-12)
    log_t = log_target_ratio(policy, ref, valid, log_z, group=2)
    assert log_t[2:5].tolist() == pytest.approx([0.0, 0.0, -math.log(4.0)])
    assert torch.isinf(log_t[[0, 1, 5]]).all()


def test_alpha_family_tends_to_forward_kl():
    log_t = torch.tensor([-2.0, -0.3, 0.0, 0.7, 3.0, math.inf])
    small = pseudo_rewards(log_t, "alpha", alpha=1e-9, clip=1e6)
    assert torch.allclose(small, pseudo_rewards(log_t, "forward_kl", clip=1e6), atol=1e-6)
    g_small = divergence_estimate(log_t, "alpha", alpha=1e-6)
    assert torch.allclose(g_small, divergence_estimate(log_t, "forward_kl"), atol=1e-4)


def test_divergence_estimate_values():
    log_t = torch.tensor([0.0, math.log(2.0), math.inf], dtype=torch.float64)
    # α = 0.5: g(t) = (t^{-1/2} − 1/2 − 1/(2t))/(−1/4); at t = 2: −4·(0.70711 − 0.5 − 0.25) = 0.17157
    assert divergence_estimate(log_t, "alpha", 0.5).tolist() == pytest.approx([0.0, 0.1715729, 2.0], rel=1e-6)
    # forward KL: 1 − (1 + log t)/t; at t = 2: 1 − (1 + 0.69315)/2 = 0.15343
    assert divergence_estimate(log_t, "forward_kl").tolist() == pytest.approx([0.0, 0.1534264, 1.0], rel=1e-6)
    # JS: log t − (1 + 1/t)·log((1 + t)/2); at t = 2: 0.69315 − 1.5·log 1.5 = 0.0849495
    assert divergence_estimate(log_t, "js").tolist() == pytest.approx([0.0, 0.0849495, math.log(2)], rel=1e-6)


def test_leave_one_out():
    a = leave_one_out(torch.tensor([1.0, 2.0, 3.0, 6.0, 0.0, 0.0, 5.0, 1.0]), group=4)
    assert a.tolist() == pytest.approx([1 - 11 / 3, 2 - 10 / 3, 3 - 3, 6 - 2, -2, -2, 5 - 1 / 3, 1 - 5 / 3])
    # groups of 2: A_i = R_i − R_j
    assert leave_one_out(torch.tensor([3.0, -1.0, 0.5, 0.5]), group=2).tolist() == [4.0, -4.0, 0.0, 0.0]
    with pytest.raises(ValueError, match="groups of 3"):
        leave_one_out(torch.zeros(8), group=3)


def test_dpg_advantages_end_to_end():
    # one group of 4, two valid: Ẑ = (e^{−1} + e^{−1})/4 = e^{−1}/2; valid log t = L − L^ref + log Ẑ = 1 + log Ẑ
    policy = torch.tensor([-1.0, -2.0, -3.0, -4.0])
    ref = torch.tensor([-2.0, -5.0, -4.0, -4.0])
    valid = torch.tensor([True, False, True, False])
    out = dpg_advantages(policy, ref, valid, group=4, divergence="alpha", alpha=0.25, clip=10.0)
    t = math.exp(1.0) * math.exp(-1.0) / 2  # = 1/2
    r_valid = t**-0.75 - 1
    assert out.log_z.item() == pytest.approx(math.log(math.exp(-1) / 2))
    assert out.rewards.tolist() == pytest.approx([r_valid, -1.0, r_valid, -1.0])
    mean = (2 * r_valid - 2) / 4
    assert out.advantages.tolist() == pytest.approx([4 / 3 * (r - mean) for r in out.rewards.tolist()])
    assert out.advantages.sum().item() == pytest.approx(0.0, abs=1e-12)


HAND_R = {  # −f′(t) by hand (α = 0.25), and the value of an invalid sample
    "alpha": (lambda t: t**-0.75 - 1, -1.0),
    "forward_kl": (lambda t: 1 / t - 1, -1.0),
    "js": (lambda t: math.log((1 + 1 / t) / 2), -math.log(2)),
}


@pytest.mark.parametrize("divergence", ["alpha", "forward_kl", "js"])
def test_dpg_advantages_end_to_end_every_divergence(divergence):
    r, r_invalid = HAND_R[divergence]
    # group 1 as above: Ẑ = e^{−1}/2 and t = 1/2 for both valid samples; group 2: three valid samples with
    # L^ref − L = 0, 0, −12 → Ẑ = (2 + e^{−12})/4, t = Ẑ for the first two and t = e^{12}·Ẑ (π ≫ p*) for the third
    policy = torch.tensor([-1.0, -2.0, -3.0, -4.0, -2.0, -2.0, -1.0, -3.0])
    ref = torch.tensor([-2.0, -5.0, -4.0, -4.0, -2.0, -2.0, -13.0, -3.0])
    valid = torch.tensor([True, False, True, False, True, True, True, False])
    out = dpg_advantages(policy, ref, valid, group=4, divergence=divergence, alpha=0.25, clip=10.0)
    z2 = (2 + math.exp(-12)) / 4
    assert out.log_z.tolist() == pytest.approx([math.log(math.exp(-1) / 2), math.log(z2)])
    expected = [r(0.5), r_invalid, r(0.5), r_invalid, r(z2), r(z2), r(math.exp(12) * z2), r_invalid]
    assert out.rewards.tolist() == pytest.approx(expected, rel=1e-9)
    loo = [x - (sum(expected[g : g + 4]) - x) / 3 for g in (0, 4) for x in expected[g : g + 4]]
    assert out.advantages.tolist() == pytest.approx(loo, rel=1e-9, abs=1e-12)
    # the clip: Ẑ = e^{20}/2 → clamped to 1, t = e^{−20} for the valid sample: R = M exactly, A = ±(M − R_invalid)
    clipped = dpg_advantages(torch.tensor([-20.0, -1.0]), torch.tensor([0.0, -1.0]), torch.tensor([True, False]), 2,
                             divergence, 0.25, clip=10.0)  # fmt: skip
    assert clipped.log_z.item() == 0.0
    assert clipped.rewards.tolist() == pytest.approx([10.0, r_invalid])
    assert clipped.advantages.tolist() == pytest.approx([10.0 - r_invalid, r_invalid - 10.0])


def test_all_invalid_group_has_zero_advantage():
    out = dpg_advantages(torch.randn(8), torch.randn(8), torch.zeros(8, dtype=torch.bool), group=8)
    assert (out.rewards == -1).all() and (out.advantages == 0).all()
    assert out.log_z.item() == pytest.approx(math.log(1e-4))


def test_reinforce_loss_value_and_gradient():
    seq = torch.tensor([-3.0, -5.0, -1.0, -2.0], requires_grad=True)
    adv = torch.tensor([1.0, -2.0, 0.5, 0.5])
    loss = reinforce_loss(seq, adv, normaliser=8.0)  # on-policy: weights are 1
    assert loss.item() == pytest.approx(-adv.mean().item() / 8)
    (grad,) = torch.autograd.grad(loss, seq)
    assert grad.tolist() == pytest.approx((-adv / (4 * 8)).tolist())
    old = torch.tensor([-3.5, -5.0, -0.5, -2.0])
    loss = reinforce_loss(seq, adv, old_seq_logps=old, normaliser=8.0)
    w = torch.exp(seq.detach() - old)
    assert loss.item() == pytest.approx(-(w * adv).mean().item() / 8)
    (grad,) = torch.autograd.grad(loss, seq)
    assert grad.tolist() == pytest.approx((-w * adv / 32).tolist())


@pytest.mark.parametrize(
    "args, message",
    [
        (("nope", 0.25, 10.0, 1e-4), "unknown dpg_divergence 'nope'"),
        (("alpha", 0.0, 10.0, 1e-4), "dpg_alpha must be in (0, 1)"),
        (("alpha", 1.0, 10.0, 1e-4), "dpg_alpha must be in (0, 1)"),
        (("js", 0.25, 0.0, 1e-4), "dpg_clip"),
        (("alpha", 0.25, 10.0, 0.0), "dpg_z_floor"),
    ],
)
def test_check_dpg(args, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        check_dpg(*args)


def test_dpg_is_a_plug_in_of_the_grpo_trainer(tmp_path):
    """``trainer: dpg`` is the GRPO config with the ``dpg`` plug-in selected; ``dpg: true`` on the divergence trainer
    selects the same; its keys act only then; TRL's beta is its reference switch, and a resolved recipe's beta
    (REF_BETA) reads back without turning the divergence term on."""
    from rlvr_div.trainers.grpo import DivergenceGRPOConfig
    from rlvr_div.trainers.plugin import active_plugins

    common = dict(output_dir=str(tmp_path), use_cpu=True, bf16=False, report_to="none", activation_checkpointing=False)
    selected = DivergenceGRPOConfig(**common, dpg=True, dpg_alpha=0.5)
    preset = DPGConfig(**common, dpg_alpha=0.5)
    for cfg in (selected, preset):
        assert [p.name for p in active_plugins(cfg)] == ["dpg"] and cfg.beta == REF_BETA and cfg.divergence_coef == 0
    assert selected.to_dict() == preset.to_dict()
    again = DPGConfig(**common, beta=REF_BETA)  # what a resolved recipe.yaml records
    assert [p.name for p in active_plugins(again)] == ["dpg"] and not again.divergence_active
    with pytest.raises(ConfigError, match=r"^dpg_alpha=0.5 acts only with trainer: dpg$"):
        DivergenceGRPOConfig(**common, dpg_alpha=0.5)
    with pytest.raises(ConfigError, match=r"^validity_reward_index must be >= 0, got -1$"):
        DivergenceGRPOConfig(**common, validity_reward_index=-1)  # every trainer of the project, not only dpg
    with pytest.raises(ConfigError, match=r"^dpg=False contradicts trainer 'dpg'"):
        DPGConfig(**common, dpg=False)  # e.g. a divergence run's resolved recipe switched to --trainer dpg
    with pytest.raises(ConfigError, match=r"^dpg must be true or false, got 'false'$"):
        DivergenceGRPOConfig(**common, dpg="false")
    with pytest.raises(ConfigError, match=r"^divergence='js' does not act with trainer: dpg \(it replaces"):
        DPGConfig(**common, divergence="js")


def test_config_manages_beta(tmp_path):
    cfg = DPGConfig(
        output_dir=str(tmp_path), use_cpu=True, bf16=False, report_to="none", activation_checkpointing=False
    )
    assert cfg.beta != 0.0  # TRL computes reference log-probs
    with pytest.raises(ConfigError, match="no KL term"):
        DPGConfig(
            output_dir=str(tmp_path),
            use_cpu=True,
            bf16=False,
            report_to="none",
            activation_checkpointing=False,
            beta=0.04,
        )
    with pytest.raises(ConfigError, match="dpg_alpha"):
        DPGConfig(
            output_dir=str(tmp_path),
            use_cpu=True,
            bf16=False,
            report_to="none",
            activation_checkpointing=False,
            dpg_alpha=1.5,
        )


# ---------------------------------------------------------------------------------------------------------------------
# Exact setting: a tabular (softmax) policy over K enumerable "sequences"

K = 20


def _world(seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    log_a = torch.log_softmax(1.5 * torch.randn(K, generator=g, dtype=torch.float64), 0)
    valid = torch.zeros(K, dtype=torch.bool)
    valid[torch.randperm(K, generator=g)[:6]] = True
    theta0 = log_a + 0.7 * torch.randn(K, generator=g, dtype=torch.float64)  # a policy away from the base
    return log_a, valid, theta0


def _generator(name: str, alpha: float):
    """f with f(1) = 0 and the limit f(t)/t at t → ∞ (the cost of π's mass outside p*'s support)."""
    if name == "alpha":
        return (lambda t: (t**alpha - alpha * t - (1 - alpha)) / (alpha * (alpha - 1))), 1 / (1 - alpha)
    if name == "forward_kl":
        return (lambda t: t - 1 - torch.log(t)), 1.0
    return (lambda t: t * torch.log(t) - (t + 1) * torch.log((t + 1) / 2)), math.log(2)


def _exact_divergence(theta, log_a, valid, name, alpha):
    """D_f(π‖p*) = Σ_{valid} p*·f(π/p*) + π(invalid)·lim f(t)/t, by enumeration."""
    f, limit = _generator(name, alpha)
    log_pi = torch.log_softmax(theta, 0)
    log_p = log_a - torch.logsumexp(log_a[valid], 0)
    t = torch.exp(log_pi[valid] - log_p[valid])
    return (torch.exp(log_p[valid]) * f(t)).sum() + torch.exp(log_pi[~valid]).sum() * limit


@pytest.mark.parametrize(
    "name, alpha, scale", [("alpha", 0.25, 0.75), ("alpha", 0.6, 0.4), ("forward_kl", 0, 1.0), ("js", 0, 1.0)]
)
def test_expected_pseudo_reward_gradient_is_the_divergence_gradient(name, alpha, scale):
    """With the exact Ẑ = A and no clipping, E_π[R·∇log π] = −scale·∇D_f(π‖p*) (scale = 1 − α for alpha)."""
    log_a, valid, theta0 = _world()
    theta = theta0.clone().requires_grad_(True)
    (grad_d,) = torch.autograd.grad(_exact_divergence(theta, log_a, valid, name, alpha), theta)
    log_pi = torch.log_softmax(theta0, 0)
    log_z = torch.logsumexp(log_a[valid], 0)
    log_t = torch.where(valid, log_pi - log_a + log_z, torch.full_like(log_pi, math.inf))
    r = pseudo_rewards(log_t, name, alpha, clip=1e12)
    pi = log_pi.exp()
    expected_grad = pi * (r - (pi * r).sum())  # Σ_y π(y)·R(y)·∇_θ log π(y) for a softmax policy
    assert torch.allclose(expected_grad, -scale * grad_d, atol=1e-10)
    # and E_π[g(t)] is the divergence itself
    d = _exact_divergence(theta0, log_a, valid, name, alpha).item()
    assert (pi * divergence_estimate(log_t, name, alpha)).sum().item() == pytest.approx(d, rel=1e-9)


def _sampled_step(name: str, alpha: float, n: int, groups: int = 4000):
    """Gradient of the full sampled pipeline (Ẑ from each group of n, clip M = 10, leave-one-out, REINFORCE loss)
    on samples of the tabular policy, its cosine with ∇D_f(π‖p*), and the exact D before/after one small step."""
    log_a, valid, theta0 = _world()
    theta = theta0.clone().requires_grad_(True)
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        samples = torch.multinomial(torch.softmax(theta0, 0), groups * n, replacement=True, generator=g)
    seq = torch.log_softmax(theta, 0)[samples]  # L_i, differentiable in θ
    out = dpg_advantages(seq.detach(), log_a[samples], valid[samples], n, name, alpha, clip=10.0)
    loss = reinforce_loss(seq, out.advantages, normaliser=1.0)
    (grad_loss,) = torch.autograd.grad(loss, theta)
    theta_d = theta0.clone().requires_grad_(True)
    d0 = _exact_divergence(theta_d, log_a, valid, name, alpha)
    (grad_d,) = torch.autograd.grad(d0, theta_d)
    cosine = torch.nn.functional.cosine_similarity(grad_loss, grad_d, dim=0).item()
    d1 = _exact_divergence(theta0 - 0.05 * grad_loss / grad_loss.norm(), log_a, valid, name, alpha)
    return cosine, d0.item(), d1.item()


@pytest.mark.parametrize("name", ["alpha", "forward_kl", "js"])
@pytest.mark.parametrize("n", [4, 8])
def test_one_sampled_dpg_step_decreases_exact_divergence(name, n):
    """One small step along the sampled α-DPG / f-DPG gradient lowers the exact D_f(π‖p*) (α = 0.25)."""
    cosine, d0, d1 = _sampled_step(name, 0.25, n)
    assert cosine > 0.7, cosine  # Ẑ from a small group is biased (see below), the direction is still a descent one
    assert d1 < d0 - 1e-3, (d0, d1)


def test_partition_estimate_bias_shrinks_with_group_size():
    """With few valid samples per group, Ẑ (hence t) is biased: the sampled gradient aligns better with ∇D as the
    group grows (the policy here puts 12% of its mass on valid sequences)."""
    cos4, _, _ = _sampled_step("alpha", 0.25, 4)
    cos32, _, _ = _sampled_step("alpha", 0.25, 32)
    assert cos32 > 0.95 and cos32 > cos4 + 0.02, (cos4, cos32)


@pytest.mark.parametrize("name, alpha", [("alpha", 0.25), ("alpha", 0.6), ("forward_kl", 0.25), ("js", 0.25)])
def test_one_dpg_sgd_step_decreases_exact_divergence_on_toy_lab(name, alpha):
    """The toy lab's tabular family (rlvr_div/toy.py: all 4^6 sequences, bigram base a, mod-5 validity) under the
    full sampled pipeline (Ẑ per group of 8, M = 10, leave-one-out, REINFORCE loss): one plain SGD step with a small
    learning rate lowers the exact D_f(π‖p*) by enumeration, by about the first-order amount lr·⟨∇D, ∇loss⟩."""
    world = toy.make_world()
    family = toy.Tabular(world)
    g = torch.Generator().manual_seed(0)
    theta0 = family.init_params() + 0.5 * torch.randn(world.log_a.shape, generator=g, dtype=torch.float64)
    # α-DPG's α is DPH-RL's (the toy lab's) 1 − α: D_α^{α-DPG}(π‖p*) = D_{1−α}^{DPH}(π‖p*)
    toy_alpha = 1 - alpha if name == "alpha" else toy.DEFAULT_ALPHA

    def exact(theta: torch.Tensor) -> torch.Tensor:
        return toy.projection_objective(world, name, toy_alpha).value(family.log_probs(theta))

    theta = theta0.clone().requires_grad_(True)
    n, groups = 8, 2000
    with torch.no_grad():
        samples = torch.multinomial(theta0.softmax(0), n * groups, replacement=True, generator=g)
    seq = family.log_probs(theta)[samples]
    out = dpg_advantages(seq.detach(), world.log_a[samples], world.valid[samples], n, name, alpha, clip=10.0)
    (grad_loss,) = torch.autograd.grad(reinforce_loss(seq, out.advantages, normaliser=1.0), theta)
    theta_d = theta0.clone().requires_grad_(True)
    d0 = exact(theta_d)
    (grad_d,) = torch.autograd.grad(d0, theta_d)
    assert torch.nn.functional.cosine_similarity(grad_loss, grad_d, dim=0).item() > 0.5
    lr = 1.0  # ‖Δθ‖ ≈ 0.04–0.1 here
    d1 = exact(theta0 - lr * grad_loss).item()
    first_order = lr * torch.dot(grad_d, grad_loss).item()
    assert d1 < d0.item() - 1e-3, (d0.item(), d1)
    assert d0.item() - d1 == pytest.approx(first_order, rel=0.1)
    # the toy lab's divergence is the one these tests descend elsewhere (same generator, same invalid-mass limit)
    log_pi = family.log_probs(theta0)
    assert toy.f_divergence(log_pi, world.log_filtered, name, toy_alpha) == pytest.approx(d0.item(), rel=1e-12)
    log_t = torch.where(world.valid, log_pi - world.log_filtered, torch.full_like(log_pi, math.inf))
    estimate = (log_pi.exp() * divergence_estimate(log_t, name, alpha)).sum().item()
    assert estimate == pytest.approx(d0.item(), rel=1e-9)


# ---------------------------------------------------------------------------------------------------------------------
# The trainer on the tiny model


def _trainer(tmp_path, tiny_path, **kw):
    """DPGTrainer on the tiny model and 16 pairsum prompts, rewarded by :func:`train_checks.mixed_pair_sum`: every
    group holds a valid sample, so Ẑ and the advantages the tests check are not the empty group's constants."""
    from rlvr_div.models import load_tokenizer
    from rlvr_div.tasks import get_task
    from rlvr_div.trainers.distributional import DPGTrainer

    base = dict(
        output_dir=str(tmp_path), per_device_train_batch_size=16, num_generations=8, max_completion_length=8,
        bf16=False, use_cpu=True, report_to="none", seed=0, activation_checkpointing=False, logging_steps=1,
    )  # fmt: skip
    args = DPGConfig(**{**base, **kw})
    return DPGTrainer(
        model=tiny_path,
        reward_funcs=[mixed_pair_sum],
        args=args,
        train_dataset=get_task("pairsum", size=16),
        processing_class=load_tokenizer(tiny_path),
    )


def test_trainer_advantages_and_loss_match_the_formulas(tmp_path, tiny_path):
    torch.manual_seed(0)
    trainer = _trainer(tmp_path, tiny_path)
    assert [p.name for p in trainer.plugins] == ["dpg"] and trainer._tag_names[-2:] == ["rlvr-div", "dpg"]
    trainer.model.train()
    trainer.current_gradient_accumulation_steps = 1
    rows = [r for r in trainer.train_dataset.select(range(2)) for _ in range(8)]
    inputs = trainer._generate_and_score_completions(rows)
    assert "ref_per_token_logps" in inputs
    # recompute every quantity by hand from the model, its reference and the reward
    ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], 1)
    att = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], 1)
    mask, keep = inputs["completion_mask"], inputs["completion_ids"].size(1)
    with torch.no_grad():
        pol = trainer._get_per_token_logps_and_entropies(trainer.model, ids, att, keep)[0]
        ref = trainer._get_per_token_logps_and_entropies(trainer.ref_model, ids, att, keep)[0]
    valid = torch.tensor(list(trainer._logs["rewards"]["mixed_pair_sum"])) == 1.0  # TRL's own record of the rewards
    expected = dpg_advantages((pol * mask).sum(-1), (ref * mask).sum(-1), valid, 8)
    assert torch.allclose(inputs["advantages"], expected.advantages.float(), atol=1e-5)
    metrics = trainer._metrics["train"]
    assert metrics["dpg/invalid_frac"][-1] == pytest.approx(1 - valid.float().mean().item())
    assert metrics["dpg/pseudo_reward_max"][-1] == pytest.approx(expected.rewards.max().item(), rel=1e-5)
    # the divergence trainer's group diversity metrics, from the same function on this batch's texts
    texts = [c.strip() for c in trainer._logs["completion"]]
    for key, value in group_diversity(valid, texts, 8).items():
        assert metrics[f"diversity/{key}"] == [pytest.approx(value)]
    assert metrics["diversity/valid_rate"][-1] == pytest.approx(valid.float().mean().item())
    # the loss: plain REINFORCE on sequence log-probs, normalised by max_completion_length, no KL term
    params = [p for p in trainer.model.parameters() if p.requires_grad]
    with torch.no_grad():  # move the policy away from its reference: a KL term would no longer vanish
        params[0].add_(0.05 * torch.randn_like(params[0]))
    loss = trainer._compute_loss(trainer.model, inputs)
    seq = (trainer._get_per_token_logps_and_entropies(trainer.model, ids, att, keep)[0] * mask).sum(-1)
    manual = -(inputs["advantages"] * seq).mean() / trainer.max_completion_length
    assert loss.item() == pytest.approx(-inputs["advantages"].mean().item() / 8, abs=1e-6)
    g_loss = torch.autograd.grad(loss, params[:2])
    g_manual = torch.autograd.grad(manual, params[:2])
    for a, b in zip(g_loss, g_manual):
        assert torch.allclose(a, b, atol=1e-7)


def _run(out: Path, *extra: str) -> subprocess.CompletedProcess:
    code = REGISTER + "import sys\nfrom rlvr_div.cli import run_command\nfrom rlvr_div.train import main\n"
    code += "sys.exit(run_command(main, sys.argv[1:]))\n"
    cmd = [sys.executable, "-c", code, "--config", RECIPE, "--output_dir", str(out), "--disable_tqdm", "true", *extra]
    return subprocess.run(cmd, capture_output=True, text=True)


def _metrics(out: Path) -> list[dict]:
    return [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.parametrize("lora", [False, True])
def test_recipe_short_run(lora, tmp_path, tiny_path):
    out = tmp_path / "run"
    extra = ["--max_steps", "2", "--save_steps", "100", "--per_device_train_batch_size", "32"]
    res = _run(out, *extra, *(["--use_peft", "true"] if lora else []))
    assert res.returncode == 0, res.stderr[-3000:]
    lines = [x for x in _metrics(out) if "dpg/z_mean" in x]
    assert [x["step"] for x in lines] == [1, 2]
    assert all(0 < x["dpg/z_mean"] <= 1 and x["dpg/pseudo_reward_min"] >= -1 for x in lines)
    assert (out / ("adapter_config.json" if lora else "model.safetensors")).exists()
    # the same in-training diversity metrics as DivergenceGRPOTrainer, every logged step
    for x in lines:
        assert all(key in x for key in DIVERSITY_KEYS), sorted(x)
        assert 0 <= x["diversity/pass_at_group"] <= 1 and 0 <= x["diversity/valid_rate"] <= 1
        assert 0 <= x["diversity/distinct_valid"] <= 8
        assert x["diversity/valid_rate"] == pytest.approx(1 - x["dpg/invalid_frac"])


def test_off_policy_run_logs_importance_weights(tmp_path, tiny_path):
    out = tmp_path / "offpolicy"
    res = _run(out, "--max_steps", "2", "--num_iterations", "2", "--per_device_train_batch_size", "32")
    assert res.returncode == 0, res.stderr[-3000:]
    weights = [x["dpg/is_weight_mean"] for x in _metrics(out) if "dpg/is_weight_mean" in x]
    assert weights and all(0.5 < w < 2.0 for w in weights)


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--dpg_alpha", "1.5"], "dpg_alpha must be in (0, 1)"),
        (["--dpg_divergence", "reverse_kl"], "unknown dpg_divergence 'reverse_kl'"),
        (["--dpg_clip", "-1"], "dpg_clip"),
        (["--beta", "0.04"], "no KL term"),
        # TRL's own check (GRPO needs 2), before the plug-in's: the leave-one-out baseline needs 2 as well
        (["--num_generations", "1", "--per_device_train_batch_size", "8"], "at least 2 generations per prompt"),
        (["--dpg_alpha", "0"], "dpg_alpha must be in (0, 1)"),
        (["--dpg_alpha", "1"], "dpg_alpha must be in (0, 1)"),
        (["--dpg_alpha", "-0.5"], "dpg_alpha must be in (0, 1)"),
        (["--dpg_clip", "0"], "dpg_clip (M) must be a finite number > 0"),
        (["--dpg_clip", "inf"], "dpg_clip (M) must be a finite number > 0"),
        (["--dpg_clip", "nan"], "dpg_clip (M) must be a finite number > 0"),
        (["--dpg_z_floor", "0"], "dpg_z_floor must be in (0, 1]"),
        (["--dpg_z_floor", "1.5"], "dpg_z_floor must be in (0, 1]"),
        (["--validity_reward_index", "-1"], "validity_reward_index must be >= 0"),
        (["--use_vllm", "true", "--vllm_importance_sampling_mode", "token_truncate"], "sequence_mask"),
        (["--dpg_alpha", "abc"], "dpg_alpha"),
        # the loss is replaced: another plug-in's term would not act, so it is refused
        (["--divergence", "reverse_kl", "--divergence_coef", "0.1"], "divergence='reverse_kl' does not act with"),
        (["--reward_shaping", "rloo", "--scale_rewards", "none"], "dpg and rloo both act on the advantages (dpg"),
    ],
)
def test_bad_settings_fail_in_one_line(extra, message, capsys, no_model_loads, tmp_path):
    assert_train_refuses(RECIPE, extra, message, capsys, tmp_path)


def test_validity_index_beyond_the_rewards_fails_before_the_model_loads(tiny_path, no_model_loads, capsys, tmp_path):
    # a local model path (the tiny base, built beforehand): the check runs before TRL loads it
    argv = ["train", "--config", RECIPE, "--output_dir", str(tmp_path), "--model_name_or_path", tiny_path,
            "--validity_reward_index", "1"]  # fmt: skip
    rc = cli_main(argv)
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2
    assert len(err) == 1 and "validity_reward_index=1 but the rewards are" in err[0], err


def test_trainer_api_checks_the_validity_index_before_the_model_loads(tiny_path, no_model_loads, tmp_path):
    # Python users who build DPGTrainer themselves skip `rlvr-div train`'s checks: the trainer makes its own
    with pytest.raises(ConfigError, match="validity_reward_index=1 but the rewards are"):
        _trainer(tmp_path, tiny_path, validity_reward_index=1)


@pytest.mark.slow
@pytest.mark.parametrize("lora", [False, True])
def test_recipe_trains_50_steps(lora, tmp_path, tiny_path):
    out = tmp_path / "run50"
    res = _run(out, "--save_steps", "100", *(["--use_peft", "true"] if lora else []))
    assert res.returncode == 0, res.stderr[-3000:]
    lines = [x for x in _metrics(out) if "dpg/divergence" in x]
    assert [x["step"] for x in lines] == list(range(1, 51))
    assert all(math.isfinite(x["dpg/divergence"]) and math.isfinite(x["loss"]) for x in lines)
    assert all(key in x for x in lines for key in DIVERSITY_KEYS)


def test_partition_estimate_weights_by_the_distribution_the_samples_came_from():
    """Ẑ = (1/n)·Σ v·a/q is unbiased for A = a(valid) only with q the distribution that drew the samples. With vLLM
    that is the sampler's, not π_old: given the sampler's log-probs, Ẑ is unbiased; with π_old's it is not."""
    g = torch.Generator().manual_seed(0)
    n_seq, group, groups = 40, 8, 20000
    log_a = torch.randn(n_seq, generator=g, dtype=torch.float64).log_softmax(0)
    log_old = (log_a + 0.3 * torch.randn(n_seq, generator=g, dtype=torch.float64)).log_softmax(0)
    log_q = (log_old + 0.5 * torch.randn(n_seq, generator=g, dtype=torch.float64)).log_softmax(0)  # the sampler
    valid = torch.arange(n_seq) % 3 == 0
    exact = log_a[valid].exp().sum().item()
    y = torch.multinomial(log_q.exp(), groups * group, replacement=True, generator=g)
    with_sampler = log_partition_estimate(log_old[y], log_a[y], valid[y], group, sampler_seq_logps=log_q[y]).exp()
    with_old = log_partition_estimate(log_old[y], log_a[y], valid[y], group).exp()
    se = with_sampler.std().item() / groups**0.5
    assert abs(with_sampler.mean().item() - exact) < 4 * se
    assert abs(with_old.mean().item() - exact) > 10 * se  # measured 17 SE (0.026 on A = 0.442)


def test_trainer_partition_estimate_uses_the_samplers_log_probs(tmp_path, tiny_path, monkeypatch):
    """When TRL hands over the sampler's per-token log-probs (vLLM), Ẑ weights by them; log t still uses π_old."""
    from trl import GRPOTrainer

    generate = GRPOTrainer._generate_and_score_completions

    def with_sampler(self, inputs):  # a stand-in sampler, 0.2 nats per token more likely than π_old
        out = generate(self, inputs)
        ids = torch.cat([out["prompt_ids"], out["completion_ids"]], 1)
        att = torch.cat([out["prompt_mask"], out["completion_mask"]], 1)
        with torch.no_grad():
            logps = self._get_per_token_logps_and_entropies(self.model, ids, att, out["completion_ids"].size(1))[0]
        out["sampling_per_token_logps"] = logps + 0.2
        return out

    monkeypatch.setattr(GRPOTrainer, "_generate_and_score_completions", with_sampler)
    torch.manual_seed(0)
    trainer = _trainer(tmp_path, tiny_path)
    trainer.model.train()
    rows = [r for r in trainer.train_dataset.select(range(2)) for _ in range(8)]
    inputs = trainer._generate_and_score_completions(rows)
    ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], 1)
    att = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], 1)
    mask, keep = inputs["completion_mask"], inputs["completion_ids"].size(1)
    with torch.no_grad():
        pol = (trainer._get_per_token_logps_and_entropies(trainer.model, ids, att, keep)[0] * mask).sum(-1)
        ref = (trainer._get_per_token_logps_and_entropies(trainer.ref_model, ids, att, keep)[0] * mask).sum(-1)
    valid = torch.tensor(list(trainer._logs["rewards"]["mixed_pair_sum"])) == 1.0
    sampler = pol + 0.2 * mask.sum(-1)
    log_z = log_partition_estimate(pol, ref, valid, 8, sampler_seq_logps=sampler)
    z_old = log_partition_estimate(pol, ref, valid, 8).exp().mean().item()
    z_mean = trainer._metrics["train"]["dpg/z_mean"][-1]
    assert z_mean == pytest.approx(log_z.exp().mean().item(), rel=1e-5) and z_mean != pytest.approx(z_old, rel=1e-3)
    expected = dpg_advantages(pol, ref, valid, 8, sampler_seq_logps=sampler)
    assert torch.allclose(expected.log_t, log_target_ratio(pol, ref, valid, log_z, 8))
    assert torch.allclose(inputs["advantages"], expected.advantages.float(), atol=1e-5)
