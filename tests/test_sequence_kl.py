"""The sequence-level reverse KL in the reward (rlvr_div.trainers.sequence_kl): the trainer's advantages against the
formula, no KL in the loss, one-line refusals, and its fixed point on the exact toy lab's tabular family: the tilted
model p_β (validity σ(logit A + 1/β), valid part p*)."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
import torch
from train_checks import assert_train_refuses, make_trainer, run_recipe, trainer_config

from rlvr_div.theory.calibration import validity_at
from rlvr_div.trainers.common import group_advantages, policy_logps_no_grad
from rlvr_div.trainers.sequence_kl import penalised_rewards

ROOT = Path(__file__).resolve().parents[1]


def test_penalised_rewards_add_one_column_of_weight_one():
    rewards = torch.tensor([[1.0, 0.5], [0.0, 0.5]])
    weights = torch.tensor([1.0, 2.0])
    r, w = penalised_rewards(rewards, weights, torch.tensor([0.3, -0.2]), coef=0.5)
    assert torch.equal(w, torch.tensor([1.0, 2.0, 1.0]))
    assert torch.allclose((r * w).sum(1), torch.tensor([1.0 + 1.0 - 0.15, 0.0 + 1.0 + 0.1]))


def test_trainer_advantages_are_centred_penalised_rewards(tmp_path, tiny_path):
    from rlvr_div.trainers.grpo import DivergenceGRPOConfig, DivergenceGRPOTrainer

    torch.manual_seed(0)
    beta = 0.5
    args = trainer_config(DivergenceGRPOConfig, tmp_path, sequence_kl_coef=beta, scale_rewards="none")
    trainer = make_trainer(DivergenceGRPOTrainer, args, tiny_path)
    trainer.model.train()
    with torch.no_grad():  # a policy away from its reference, so the penalty is not 0
        for p in trainer.model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    rows = [r for r in trainer.train_dataset.select(range(2)) for _ in range(8)]
    out = trainer._generate_and_score_completions(rows)
    rewards = torch.tensor(list(trainer._logs["rewards"]["pair_sum"]), dtype=torch.float64)
    mask = out["completion_mask"]
    policy = policy_logps_no_grad(trainer, out)
    log_ratio = ((policy - out["ref_per_token_logps"]) * mask).sum(-1).double()
    assert log_ratio.abs().max() > 1e-3
    shaped = (rewards - beta * log_ratio).view(-1, 8)
    expected = (shaped - shaped.mean(1, keepdim=True)).view(-1)  # scale_rewards none: no division by the std
    assert torch.allclose(out["advantages"].double(), expected, atol=1e-5)
    # the loss carries no KL term: equal to the loss with TRL's beta set to 0 by hand
    trainer.current_gradient_accumulation_steps = 1  # set by the training loop, which this test does not run
    loss = trainer.compute_loss(trainer.model, out)
    trainer.beta, trainer.args.sequence_kl_coef = 0.0, 0.0
    assert torch.allclose(loss, trainer.compute_loss(trainer.model, out))
    assert "kl" not in trainer._metrics["train"] and trainer._metrics["train"]["sequence_kl/k1"]


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--sequence_kl_coef", "-0.1"], "sequence_kl_coef must be a finite number >= 0, got -0.1"),
        (["--divergence", "reverse_kl", "--divergence_coef", "0.1"], "a divergence term in the loss as well"),
        (["--reward_shaping", "unlikeliness"], "unlikeliness and sequence_kl both set the advantages; use one"),
        (["--multi_objective_aggregation", "normalize_then_sum"], "needs multi_objective_aggregation"),
    ],
)
def test_bad_settings_fail_in_one_line_before_the_model_loads(extra, message, capsys, no_model_loads, tmp_path):
    assert_train_refuses(ROOT / "recipes" / "tiny" / "sequence_kl.yaml", extra, message, capsys, tmp_path)


def test_recipe_trains(tmp_path, tiny_path):
    logs = run_recipe("sequence_kl", False, tmp_path / "run", steps=2, batch=32)
    assert len(logs) == 2 and all("sequence_kl/k1" in x and "kl" not in x for x in logs)


def _expected_update(log_q: torch.Tensor, log_a: torch.Tensor, valid: torch.Tensor, beta: float, group: int):
    """E over groups of ``group`` i.i.d. draws y_1..y_G ∼ q of Σ_i A_i·∇_θ log q(y_i) for a tabular softmax q_θ
    (∇_θ log q(y) = e_y − q), with A the trainer's advantages (penalised rewards, group-centred, scale none), by
    enumerating every ordered group (all groups in one call, laid out as consecutive groups)."""
    n = log_q.numel()
    ys = torch.tensor(list(itertools.product(range(n), repeat=group))).view(-1)  # (n^G · G,)
    prob = log_q[ys].view(-1, group).sum(1).exp().repeat_interleave(group)  # q(y_1)···q(y_G) of each row's group
    rewards, weights = penalised_rewards(valid[ys].double().unsqueeze(1), torch.ones(1, dtype=torch.float64),
                                         log_q[ys] - log_a[ys], beta)  # fmt: skip
    w = prob * group_advantages(rewards, weights, group, scale="none")
    return torch.zeros(n, dtype=torch.float64).index_add(0, ys, w) - w.sum() * log_q.exp()


def _toy_world(length: int = 2):
    """A world of the exact toy lab (rlvr_div.toy: its letters, a seeded bigram base, the mod-5 validity rule) with
    sequences short enough that every group of draws can be enumerated: 4^length sequences."""
    from rlvr_div.toy.world import World, all_sequences, bigram_log_probs, is_valid

    g = torch.Generator().manual_seed(0)
    first, trans = torch.randn(4, generator=g, dtype=torch.float64), torch.randn(4, 4, generator=g, dtype=torch.float64)
    seqs = all_sequences(4, length)
    return World(seqs, bigram_log_probs(first, trans, seqs), is_valid(seqs), first, trans)


@pytest.mark.parametrize("beta", [1.0, 0.3])
def test_fixed_point_is_the_tilted_model_on_the_toy_labs_tabular_family(beta):
    """Ascent along the exact expected update of the trainer's advantages (preconditioned by 1/q), on the toy lab's
    tabular family (one logit per sequence, started at the base), reaches the lab's tilted model p_β: validity
    σ(logit A + 1/β) and the valid part p* = a(·|valid). 16 sequences, groups of 2, every group enumerated."""
    from rlvr_div.toy.families import Tabular

    world = _toy_world()
    family = Tabular(world)
    theta = family.init_params()
    for _ in range(300):  # the update divided by q (the tabular Fisher metric): the same zeros, reached fast
        log_q = family.log_probs(theta)
        theta = theta + 0.5 * _expected_update(log_q, world.log_a, world.valid, beta, group=2) / log_q.exp()
    q = family.log_probs(theta).exp()
    mu = float(q[world.valid].sum())
    assert mu == pytest.approx(validity_at(beta, world.base_rate), abs=1e-9)
    assert torch.allclose(family.log_probs(theta), world.log_tilted(beta), atol=1e-9)  # the whole distribution
    assert mu > world.base_rate + 0.05  # it moved: the base is not the optimum
