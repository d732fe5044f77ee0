"""SimKO (simko: true, Peng et al. 2025): on a hand-computed batch, a positive sample's gradient at a high-entropy
token is spread over the top-K tokens, a negative sample's is λ times GRPO's on a sampled top-1 token, and every
other token keeps GRPO's; on random logits the loss value is unchanged and the gradient is the closed form; the
high-entropy set is the released code's per-completion quantile; inside the trainer the gradient is that of the
authors' mixed ratio and, at α = 0, λ = 1, that of stock TRL (whose forward gives the same log-probs); bad settings
in one line; the tiny recipe."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from train_checks import assert_train_refuses, make_trainer, mixed_pair_sum, run_recipe, trainer_config

from rlvr_div.errors import ConfigError
from rlvr_div.trainers.simko import high_entropy_positions, simko_logps, token_statistics

ROOT = Path(__file__).resolve().parents[1]
RECIPE = ROOT / "recipes" / "tiny" / "simko.yaml"

# next-token distributions over 4 tokens, no ties among the top two; entropies d_d < d_e < d_c < d_a < d_b
D_A, D_B = (0.4, 0.3, 0.2, 0.1), (0.35, 0.3, 0.2, 0.15)
D_C, D_D, D_E = (0.7, 0.15, 0.1, 0.05), (0.94, 0.03, 0.02, 0.01), (0.85, 0.08, 0.05, 0.02)


def _hand_batch() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Two completions of 5 tokens (+1 padding token), each holding every distribution once, so that with τ = 0.5 the
    high-entropy tokens (above the median, d_c) are the d_a and d_b positions. Row 0 is correct (A = +1), row 1 wrong
    (A = −1). The padding token has the highest entropy (d_b) and must count for nothing."""
    dists = [[D_A, D_D, D_B, D_C, D_E, D_B], [D_B, D_A, D_C, D_D, D_E, D_B]]
    logits = torch.tensor(dists, dtype=torch.float64).log().requires_grad_(True)
    ids = torch.tensor([[1, 0, 2, 0, 0, 0], [0, 2, 0, 0, 1, 0]])
    mask = torch.tensor([[1, 1, 1, 1, 1, 0], [1, 1, 1, 1, 1, 0]])
    return logits, ids, mask, torch.tensor([1.0, -1.0], dtype=torch.float64)


def test_hand_computed_gradients_at_high_entropy_tokens():
    logits, ids, mask, adv = _hand_batch()
    stats = token_statistics(logits, ids, top_k=2)
    high = high_entropy_positions(stats.entropies, mask, tau=0.5)
    assert high.tolist() == [[True, False, True, False, False, False], [True, True, False, False, False, False]]
    tilde, positive, negative = simko_logps(stats, high, adv, alpha=0.5, lam=1.1)
    assert positive.tolist() == [[True, False, True, False, False, False], [False] * 6]
    assert negative.tolist() == [[False] * 6, [True, False, False, False, False, False]]  # (1, 1) is high, not top-1
    assert torch.equal(tilde, stats.logps)  # the value, hence the ratio and its clipping, is GRPO's
    # on-policy GRPO loss −Σ_t A·r_t with r_t = exp(l̃_t − sg(l_t)): ∂/∂logits = −A·∂l̃_t/∂z, ∂l_j/∂z = e_j − p
    (-(adv.unsqueeze(1) * (tilde - stats.logps.detach()).exp() * mask).sum()).backward()
    expected = [
        [
            # y = 1, top-2 {0, 1}: −[(1 − α)(e_1 − p) + (α/2)(e_0 + e_1 − 2p)] = −[(.25, .75, 0, 0) − p]
            [0.15, -0.45, 0.2, 0.1],
            [-0.06, 0.03, 0.02, 0.01],  # low entropy: GRPO's −(e_0 − p)
            [0.1, 0.05, -0.3, 0.15],  # y = 2, top-2 {0, 1}: −[(.25, .25, .5, 0) − p]
            [-0.3, 0.15, 0.1, 0.05],  # GRPO's
            [-0.15, 0.08, 0.05, 0.02],  # GRPO's
            [0.0] * 4,  # padding
        ],
        [
            [0.715, -0.33, -0.22, -0.165],  # y = 0 is the top-1 at a high-entropy token: λ·(e_0 − p), λ = 1.1
            [-0.4, -0.3, 0.8, -0.1],  # high entropy but y = 2 is not the top-1: GRPO's (e_2 − p)
            [0.3, -0.15, -0.1, -0.05],  # top-1 but low entropy: GRPO's
            [0.06, -0.03, -0.02, -0.01],  # GRPO's
            [-0.85, 0.92, -0.05, -0.02],  # GRPO's
            [0.0] * 4,
        ],
    ]
    assert torch.allclose(logits.grad, torch.tensor(expected, dtype=torch.float64), atol=1e-12)


def test_value_is_kept_and_the_gradient_is_the_closed_form_on_random_logits():
    """K = 3, α = 0.3, λ = 1.5 on random logits: l̃ has l's value, and ∂(Σ A·l̃)/∂z at each token is the closed form
    A·[(1 − α·h⁺ + (λ − 1)·h⁻)·(e_y − p) + (α·h⁺/K)·Σ_k (e_{c_k} − p)], h⁺ = h·[A > 0], h⁻ = h·[A < 0]·[y = c_1],
    written here from softmax probabilities and one-hot vectors (GRPO's is A·(e_y − p))."""
    torch.manual_seed(0)
    k, alpha, lam, vocab = 3, 0.3, 1.5, 11
    logits = torch.randn(4, 7, vocab, dtype=torch.float64, requires_grad=True)
    ids = torch.randint(0, vocab, (4, 7))
    ids[:, 0] = logits[:, 0].argmax(-1)  # some sampled tokens are the top-1
    mask = torch.ones(4, 7)
    adv = torch.tensor([1.0, -1.0, 0.5, -2.0], dtype=torch.float64)
    stats = token_statistics(logits, ids, top_k=k)
    high = high_entropy_positions(stats.entropies, mask, tau=0.3)
    tilde, positive, negative = simko_logps(stats, high, adv, alpha, lam)
    assert torch.equal(tilde, stats.logps)
    z = logits.detach()
    a = adv.unsqueeze(1).expand(4, 7)
    h_pos = high & (a > 0)
    h_neg = high & (a < 0) & (ids == z.argmax(-1))
    assert positive.equal(h_pos) and negative.equal(h_neg) and h_pos.any() and h_neg.any()
    p = z.softmax(-1)
    e_y = torch.nn.functional.one_hot(ids, vocab).double()
    e_top = torch.nn.functional.one_hot(z.topk(k, -1).indices, vocab).double().sum(-2)
    weight_y = 1 - alpha * h_pos.double() + (lam - 1) * h_neg.double()
    want = a[..., None] * (weight_y[..., None] * (e_y - p) + (alpha * h_pos.double() / k)[..., None] * (e_top - k * p))
    (got,) = torch.autograd.grad((adv.unsqueeze(1) * tilde).sum(), logits)
    assert torch.allclose(got, want, atol=1e-12)
    assert not torch.allclose(got, a[..., None] * (e_y - p))  # not GRPO's


@pytest.mark.parametrize("tau", [0.0, 0.5, 0.8])
def test_high_entropy_positions_are_the_released_per_completion_quantile(tau):
    """The authors' ``row_quantile_masked``: torch.quantile of each row's response-token entropies, then H > it."""
    torch.manual_seed(1)
    entropies = torch.rand(6, 9)
    lengths = [9, 5, 3, 2, 1, 0]
    mask = torch.tensor([[1] * n + [0] * (9 - n) for n in lengths])
    got = high_entropy_positions(entropies, mask, tau)
    for row, n in enumerate(lengths):
        if n == 0:
            assert not got[row].any()
            continue
        threshold = torch.quantile(entropies[row, :n], tau)
        assert got[row, :n].tolist() == (entropies[row, :n] > threshold).tolist()
        assert not got[row, n:].any()
    assert not got[4].any()  # a one-token completion has no token above its own quantile


def _batch(trainer):
    rows = [r for r in trainer.train_dataset.select(range(4)) for _ in range(8)]
    trainer.model.train()
    trainer.current_gradient_accumulation_steps = 1  # set by the training loop
    inputs = trainer._generate_and_score_completions(rows)
    mask = inputs["completion_mask"]
    # a policy that has moved since sampling: π_old differs from π_θ, so ratios are not 1 and some are clipped
    inputs["old_per_token_logps"] = (
        trainer._get_per_token_logps_and_entropies(
            trainer.model, torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], 1),
            torch.cat([inputs["prompt_mask"], mask], 1), mask.size(1))[0].detach()
        + 0.15 * torch.randn_like(mask.float())
    ) * mask  # fmt: skip
    return inputs


def _grads(loss, model) -> torch.Tensor:
    params = [p for p in model.parameters() if p.requires_grad]
    return torch.cat([g.flatten() for g in torch.autograd.grad(loss, params, retain_graph=True)])


def test_trainer_at_alpha_zero_lambda_one_is_stock_grpo(tmp_path, tiny_path):
    """The loss forward on the full logits, with SimKO's reshaping switched off, gives TRL's loss and gradient."""
    from rlvr_div.trainers.grpo import DivergenceGRPOConfig, DivergenceGRPOTrainer

    torch.manual_seed(0)
    stock = make_trainer(DivergenceGRPOTrainer, trainer_config(DivergenceGRPOConfig, tmp_path / "a"), tiny_path)
    ours = make_trainer(
        DivergenceGRPOTrainer, trainer_config(DivergenceGRPOConfig, tmp_path / "b", simko=True), tiny_path
    )
    assert [p.name for p in ours.plugins] == ["simko"] and stock.plugins == []
    ours.model.load_state_dict(stock.model.state_dict())
    ours.args.simko_alpha, ours.args.simko_lambda = 0.0, 1.0  # past the config check, which refuses plain GRPO
    inputs = _batch(stock)
    ours.model.train()
    ours.current_gradient_accumulation_steps = 1
    a, b = stock._compute_loss(stock.model, inputs), ours._compute_loss(ours.model, inputs)
    # float32 round-off: the trainer's forward runs each distinct prompt once, SimKO's every row (other shapes)
    assert abs(a.item() - b.item()) < 1e-5, (a.item(), b.item())
    assert torch.allclose(_grads(a, stock.model), _grads(b, ours.model), atol=1e-5)
    assert ours._metrics["train"]["simko/high_entropy_frac"][-1] > 0
    # off-policy π_old comes from TRL's forward, the loss's log-probs from SimKO's full logits: the same numbers
    mask = inputs["completion_mask"]
    ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], 1)
    attention = torch.cat([inputs["prompt_mask"], mask], 1)
    with torch.no_grad():
        trl_logps = stock._get_per_token_logps_and_entropies(stock.model, ids, attention, mask.size(1))[0]
        simko_logps_ = ours.plugin("simko").statistics(ours.model, ids, attention, mask.size(1), None).logps
    assert ((trl_logps - simko_logps_) * mask).abs().max() < 1e-5


def _released_loss(trainer, inputs, alpha: float, lam: float, k: int, tau: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(SimKO's loss, GRPO's loss) written out as the authors' compute_policy_loss_simko computes them, from the
    model's logits: the mixed ratio on correct (here A > 0) samples, λ on the advantage of negative samples at
    high-entropy top-1 tokens, PPO's clip, and TRL's dapo normaliser."""
    mask = inputs["completion_mask"].float()
    ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], 1)
    width = mask.size(1)
    logits = trainer.model(input_ids=ids, attention_mask=torch.cat([inputs["prompt_mask"], mask], 1)).logits
    logits = logits[:, -width - 1 : -1] / trainer.temperature
    logp_all = torch.log_softmax(logits.float(), -1)
    logp = logp_all.gather(-1, inputs["completion_ids"].unsqueeze(-1)).squeeze(-1)
    entropy = -(logp_all.exp() * logp_all).sum(-1).detach()
    topk_logp = logp_all.gather(-1, logits.detach().topk(k, -1).indices)
    old_topk = topk_logp.detach() + 0.1 * torch.randn_like(topk_logp)  # π_old's top-K log-probs: they cancel
    max_token = logits.detach().argmax(-1) == inputs["completion_ids"]
    threshold = torch.stack([torch.quantile(entropy[b][mask[b].bool()], tau) for b in range(mask.size(0))])
    w = (entropy > threshold.unsqueeze(1)).float() * mask
    ratio = torch.exp(logp - inputs["old_per_token_logps"])
    numerator = ratio.detach().unsqueeze(-1)
    denominator = torch.exp(topk_logp - old_topk).detach()
    topk_sum = (numerator / (denominator + 1e-8) * torch.exp(topk_logp - old_topk)).sum(-1)
    adv = inputs["advantages"].unsqueeze(1).expand_as(logp)
    correct = (adv > 0) & mask.bool()
    mixed = torch.where(correct, (1 - alpha * w) * ratio + (alpha * w / k) * topk_sum, ratio)
    scaled = adv * torch.where((adv < 0) & max_token & (w > 0), lam, 1.0)
    normaliser = inputs["num_items_in_batch"].clamp(min=1.0) / trainer.args.steps_per_generation

    def ppo(r: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
        clipped = torch.clamp(r, 1 - trainer.epsilon_low, 1 + trainer.epsilon_high)
        return (-torch.min(r * a, clipped * a) * mask).sum() / normaliser

    return ppo(mixed, scaled), ppo(ratio, adv)


def test_trainer_gradient_is_the_released_codes_mixed_ratio(tmp_path, tiny_path):
    from rlvr_div.trainers.grpo import DivergenceGRPOConfig, DivergenceGRPOTrainer

    torch.manual_seed(0)
    kw = dict(simko=True, simko_top_k=3, simko_alpha=0.5, simko_tau=0.5, simko_lambda=1.5)
    args = trainer_config(DivergenceGRPOConfig, tmp_path, **kw)
    trainer = make_trainer(DivergenceGRPOTrainer, args, tiny_path, reward=mixed_pair_sum)  # A > 0 and A < 0 samples
    assert trainer.loss_type == "dapo"
    inputs = _batch(trainer)
    loss = trainer._compute_loss(trainer.model, inputs)
    metrics = trainer._metrics["train"]
    assert metrics["simko/topk_branch_frac"][-1] > 0 and metrics["simko/top1_branch_frac"][-1] > 0
    released, grpo = _released_loss(trainer, inputs, alpha=0.5, lam=1.5, k=3, tau=0.5)
    assert abs(loss.item() - grpo.item()) < 1e-6  # the value is GRPO's (the released code's λ also scales it)
    got, want, plain = (_grads(x, trainer.model) for x in (loss, released, grpo))
    assert torch.allclose(got, want, atol=1e-6, rtol=1e-4), (got - want).abs().max()
    assert (got - plain).abs().max() > 100 * (got - want).abs().max()  # SimKO moved the gradient


def test_top_k_larger_than_the_vocabulary_fails_in_one_line(tmp_path, tiny_path):
    from rlvr_div.trainers.grpo import DivergenceGRPOConfig, DivergenceGRPOTrainer

    args = trainer_config(DivergenceGRPOConfig, tmp_path, simko=True, simko_top_k=1000)
    with pytest.raises(ConfigError, match=r"simko_top_k=1000 exceeds the vocabulary \(\d+ tokens\)"):
        make_trainer(DivergenceGRPOTrainer, args, tiny_path)


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--simko_top_k", "0"], "simko_top_k must be an integer >= 1, got 0"),
        (["--simko_alpha", "1.5"], "simko_alpha must be a finite number in [0, 1], got 1.5"),
        (["--simko_tau", "1"], "simko_tau must be a finite number in [0, 1), got 1"),
        (["--simko_lambda", "0.9"], "simko_lambda must be a finite number >= 1, got 0.9"),
        (["--simko_alpha", "0", "--simko_lambda", "1"], "SimKO would be plain GRPO"),
        (["--simko", "false", "--simko_alpha", "0.5"], "simko_alpha=0.5 acts only with simko: true"),
        (
            ["--divergence", "reverse_kl", "--divergence_coef", "0.04"],
            "simko does not combine with divergence: reverse_kl (coefficient > 0), a penalty",
        ),
        (
            ["--covariance_penalty", "kl_cov", "--kl_cov_ratio", "0.02", "--num_iterations", "2"],
            "does not combine with covariance_penalty: kl_cov",
        ),
        (["--importance_sampling_level", "sequence"], "simko needs importance_sampling_level: token"),
        (["--flowrl", "true"], ("flowrl", "simko")),  # FlowRL replaces the loss SimKO reshapes
        (["--rehearsal_path", "stored"], "dph_rehearsal and simko both take over the loss forward; use one"),
    ],
)
def test_bad_settings_fail_in_one_line_before_the_model_loads(extra, message, capsys, no_model_loads, tmp_path):
    assert_train_refuses(RECIPE, extra, message, capsys, tmp_path)


@pytest.mark.parametrize("key", ["simko_alpha", "simko_tau", "simko_lambda"])
@pytest.mark.parametrize("value", ["nan", "inf"])
def test_a_non_finite_value_fails_in_one_line_before_the_model_loads(key, value, capsys, no_model_loads, tmp_path):
    assert_train_refuses(RECIPE, [f"--{key}", value], (key, value, "finite number"), capsys, tmp_path)


@pytest.mark.slow
def test_tiny_recipe_trains(tmp_path, tiny_path):
    logs = run_recipe("simko", False, tmp_path / "run", steps=2, batch=None)
    assert [x["step"] for x in logs] == [1, 2]
    assert all(0 < x["simko/high_entropy_frac"] < 0.5 and x["simko/topk_branch_frac"] > 0 for x in logs)
