"""Clip-Cov and KL-Cov (Cui et al. 2025): the token covariance, both selections and the KL-Cov penalty against
values computed here from the paper's formulas; inside DivergenceGRPOTrainer, Clip-Cov equals TRL's loss with the
selected tokens' advantages zeroed and KL-Cov adds β·|log π_θ − log π_old| on its tokens; bad settings in one line;
the tiny recipes."""

from __future__ import annotations

import json
import math
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

from rlvr_div.trainers.covariance_clip import (
    clip_cov_tokens,
    kl_cov_penalty,
    kl_cov_tokens,
    token_covariance,
)

ROOT = Path(__file__).resolve().parents[1]


def _paper_cov(logps: list[list[float]], adv: list[float], mask: list[list[int]]) -> list[list[float]]:
    """Cov(y_t) = (log π(y_t) − mean log π)(A_t − mean A), means over the N unmasked tokens, written out."""
    tokens = [(i, t) for i, row in enumerate(mask) for t, m in enumerate(row) if m]
    n = len(tokens)
    lbar = sum(logps[i][t] for i, t in tokens) / n
    abar = sum(adv[i] for i, _ in tokens) / n
    return [[(logps[i][t] - lbar) * (adv[i] - abar) if mask[i][t] else 0.0 for t in range(len(mask[0]))]
            for i in range(len(mask))]  # fmt: skip


def test_covariance_hand_values():
    logps = [[-0.5, -1.0, -3.0], [-0.2, -2.0, -9.0]]
    adv = [1.0, -1.0]
    mask = [[1, 1, 1], [1, 1, 0]]
    got = token_covariance(torch.tensor(logps), torch.tensor(adv), torch.tensor(mask))
    # N = 5: mean log π = −6.7/5 = −1.34, mean A = 1/5 = 0.2; e.g. token (0, 0): (−0.5 + 1.34)(1 − 0.2) = 0.672
    assert got[0, 0].item() == pytest.approx(0.672)
    assert torch.allclose(got, torch.tensor(_paper_cov(logps, adv, mask), dtype=got.dtype), atol=1e-12)
    # per-token advantages (B, T) give the same as per-sequence ones broadcast
    per_token = torch.tensor(adv).unsqueeze(-1).expand(2, 3)
    assert torch.allclose(token_covariance(torch.tensor(logps), per_token, torch.tensor(mask)), got)


def test_clip_cov_draws_floor_r_n_tokens_inside_the_bounds():
    torch.manual_seed(0)
    cov = torch.randn(8, 50) * 3
    mask = torch.ones(8, 50)
    mask[:, 40:] = 0  # N = 320
    inside = (cov >= 1.0) & (cov <= 5.0) & mask.bool()
    picks = torch.zeros_like(cov)
    for seed in range(200):
        sel = clip_cov_tokens(
            cov, mask, ratio=0.05, lower=1.0, upper=5.0, generator=torch.Generator().manual_seed(seed)
        )
        assert int(sel.sum()) == math.floor(0.05 * 320) == 16
        assert not (sel & ~inside).any()
        picks += sel
    # uniform among the candidates: every candidate is drawn, at a rate near 16/#candidates
    rate = picks[inside] / 200
    assert (rate > 0).all() and abs(rate.mean().item() - 16 / int(inside.sum())) < 1e-6
    # fewer candidates than ⌊r·N⌋: all of them; ⌊r·N⌋ = 0: none (the paper's floor; the reference code takes 1)
    assert int(clip_cov_tokens(cov, mask, 1.0, 4.5, 5.0).sum()) == int(((cov >= 4.5) & (cov <= 5) & mask.bool()).sum())
    assert int(clip_cov_tokens(cov, mask, 0.003, -100.0, 100.0).sum()) == 0


def test_kl_cov_takes_the_top_floor_k_n_tokens():
    cov = torch.tensor([[0.5, 3.0, -1.0, 9.0], [2.0, 7.0, 8.0, 0.0]])
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0]])  # N = 6; the masked 8.0 never counts
    sel = kl_cov_tokens(cov, mask, ratio=0.5)  # ⌊3⌋ = 3 largest: 9.0, 7.0, 3.0
    assert sel.tolist() == [[False, True, False, True], [False, True, False, False]]
    assert int(kl_cov_tokens(cov, mask, ratio=0.1).sum()) == 0


def test_kl_cov_penalty_value_and_gradient():
    logps = torch.tensor([[-1.0, -2.0, -0.5]], requires_grad=True)
    old = torch.tensor([[-1.5, -1.0, -0.5]])
    sel = torch.tensor([[True, True, False]])
    pen = kl_cov_penalty(logps, old, sel)
    assert pen.tolist() == [[0.5, 1.0, 0.0]]
    pen.sum().backward()
    assert logps.grad.tolist() == [[1.0, -1.0, 0.0]]  # sign(l − l_old) on the selected tokens


def _batch(trainer):
    rows = [r for r in trainer.train_dataset.select(range(4)) for _ in range(8)]
    trainer.model.train()
    trainer.current_gradient_accumulation_steps = 1  # set by the training loop
    return trainer._generate_and_score_completions(rows)


def _grads(model) -> torch.Tensor:
    return torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])


def test_trainer_clip_cov_is_trl_loss_with_the_selected_advantages_zeroed(tmp_path, tiny_path):
    from rlvr_div.trainers.grpo import DivergenceGRPOConfig, DivergenceGRPOTrainer

    torch.manual_seed(0)
    kw = dict(per_device_train_batch_size=32, covariance_penalty="clip_cov", clip_cov_ratio=0.05)
    args = trainer_config(DivergenceGRPOConfig, tmp_path, clip_cov_lb=0.0, clip_cov_ub=100.0, **kw)
    trainer = make_trainer(DivergenceGRPOTrainer, args, tiny_path, reward=mixed_pair_sum)  # non-zero advantages
    inputs = _batch(trainer)
    loss = trainer._compute_loss(trainer.model, inputs)
    loss.backward()
    got = _grads(trainer.model)
    trainer.model.zero_grad()
    sel = trainer.plugin("covariance_penalty").penalty.last_selected
    mask = inputs["completion_mask"]
    assert int(sel.sum()) == math.floor(0.05 * int(mask.sum())) > 0
    cov = token_covariance(trainer._get_per_token_logps_and_entropies(
        trainer.model, torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], 1),
        torch.cat([inputs["prompt_mask"], mask], 1), mask.size(1))[0], inputs["advantages"], mask)  # fmt: skip
    assert (cov[sel] >= 0.0).all()
    zeroed = dict(inputs, advantages=inputs["advantages"].unsqueeze(-1) * (~sel).float())
    expected = trainer._loss(trainer.model, zeroed)  # TRL's loss, no covariance hook
    expected.backward()
    assert torch.allclose(loss, expected, atol=1e-6)
    assert torch.allclose(got, _grads(trainer.model), atol=1e-6)
    plain = trainer._loss(trainer.model, inputs)
    assert not torch.allclose(plain, loss, atol=1e-6)  # the zeroed tokens mattered


def test_trainer_kl_cov_adds_beta_abs_log_ratio_on_its_tokens(tmp_path, tiny_path):
    """On a batch with non-zero advantages by construction (:func:`train_checks.mixed_pair_sum`: every group scores 0
    and 1), so that Cov(l, A) is not 0 on every token (where any ⌊0.05·N⌋ tokens would do): the selected tokens are
    the ones with the largest Cov, each at least any token left out (ties, such as the same token of two equal
    completions, may fall either way)."""
    from rlvr_div.trainers.grpo import DivergenceGRPOConfig, DivergenceGRPOTrainer

    torch.manual_seed(0)
    kw = dict(covariance_penalty="kl_cov", kl_cov_ratio=0.05, kl_cov_coef=0.5, num_iterations=2)
    args = trainer_config(DivergenceGRPOConfig, tmp_path, per_device_train_batch_size=32, **kw)
    trainer = make_trainer(DivergenceGRPOTrainer, args, tiny_path, reward=mixed_pair_sum)  # non-zero advantages
    inputs = _batch(trainer)
    mask = inputs["completion_mask"]
    assert (inputs["advantages"].view(-1, 8).abs().amax(1) > 0.1).all(), "premise: non-zero advantages in each group"
    # a policy that has moved since sampling: π_old differs from π_θ by known offsets
    inputs["old_per_token_logps"] = (inputs["old_per_token_logps"] + 0.3 * torch.randn_like(mask.float())) * mask
    loss = trainer._compute_loss(trainer.model, inputs)
    sel = trainer.plugin("covariance_penalty").penalty.last_selected
    assert int(sel.sum()) == math.floor(0.05 * int(mask.sum())) > 0
    logps = trainer._get_per_token_logps_and_entropies(
        trainer.model, torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], 1),
        torch.cat([inputs["prompt_mask"], mask], 1), mask.size(1))[0]  # fmt: skip
    cov = token_covariance(logps, inputs["advantages"], mask)
    on = mask.bool()
    assert cov[on].max() - cov[on].min() > 0.1, "premise: Cov(l, A) varies over the tokens (non-zero advantages)"
    assert not sel[~on].any() and cov[sel].min() >= cov[on & ~sel].max() - 1e-6  # the largest Cov(l, A)
    top = cov[on].sort(descending=True).values[: int(sel.sum())]
    assert torch.allclose(cov[sel].sort(descending=True).values, top)
    penalty = ((logps - inputs["old_per_token_logps"]).abs() * sel * mask).sum()
    # loss_type dapo: TRL's normaliser is the generation batch's token count over the accumulation window
    normaliser = (
        inputs["num_items_in_batch"] / trainer.args.steps_per_generation * trainer.args.gradient_accumulation_steps
    )
    expected = trainer._loss(trainer.model, inputs) + 0.5 * penalty / normaliser
    assert torch.allclose(loss, expected, atol=1e-6)


@pytest.mark.parametrize(
    "recipe, extra, message",
    [
        ("clip_cov", ["--covariance_penalty", "nope"], "unknown covariance_penalty 'nope'"),
        ("clip_cov", ["--clip_cov_ratio", "0.0002"], "selects ⌊0.0002·N⌋ = 0 tokens"),
        ("clip_cov", ["--clip_cov_ratio", "0"], "clip_cov_ratio must be a finite number in (0, 1], got 0.0"),
        ("clip_cov", ["--clip_cov_lb", "6"], "need finite clip_cov_lb <= clip_cov_ub"),
        ("clip_cov", ["--kl_cov_coef", "1.0"], "kl_cov_coef=1.0 does not act with covariance_penalty: clip_cov"),
        ("kl_cov", ["--num_iterations", "1"], "which is 0 with zero gradient on fresh samples"),
        ("kl_cov", ["--kl_cov_coef", "0"], "kl_cov_coef must be a finite number > 0"),
        (
            "kl_cov",
            ["--covariance_penalty", "none"],
            "kl_cov_ratio=0.02 acts only with covariance_penalty: clip_cov or kl_cov",
        ),
    ],
)
def test_bad_settings_fail_in_one_line_before_the_model_loads(recipe, extra, message, capsys, no_model_loads, tmp_path):
    assert_train_refuses(ROOT / "recipes" / "tiny" / f"{recipe}.yaml", extra, message, capsys, tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("recipe", ["clip_cov", "kl_cov"])
def test_tiny_recipes_train_50_steps_with_the_reward_rising(recipe, tmp_path, tiny_path):
    logs = run_recipe(recipe, False, tmp_path / recipe, steps=50, batch=96)  # the steps that generated
    every = [json.loads(x) for x in (tmp_path / recipe / "metrics.jsonl").read_text().splitlines()]
    assert [x["step"] for x in every if "loss" in x] == list(range(1, 51))
    assert all(x[f"cov/{recipe}_frac"] > 0 for x in every if "loss" in x)
    if recipe == "kl_cov":  # num_iterations 2: a batch is generated every other step and reused on the next
        assert [x["step"] for x in logs] == list(range(1, 51, 2))
        assert all(x["cov/kl_cov_penalty"] > 0 for x in every if "loss" in x and x["step"] % 2 == 0)
    else:
        assert_reward_rises(logs, 50, 0.05)
