"""Pass@k Training's closed-form group advantage (Chen et al. 2025): hand values, the closed form against the
paper's definition by enumerating every size-k subset, the trainer's advantages, bad settings in one line, and the
tiny recipe's 50 steps."""

from __future__ import annotations

import itertools
import math
import statistics
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

from rlvr_div.trainers.passk_advantage import passk_group_advantages, passk_training_advantages

ROOT = Path(__file__).resolve().parents[1]
NAN = float("nan")


def _paper_closed_form(n: int, c: int, k: int) -> tuple[float, float]:
    """The paper's equations, written out independently: R̄, σ, Â_pos, Â_neg (None where σ = 0)."""
    comb = lambda a, b: math.comb(a, b) if 0 <= b <= a else 0  # noqa: E731
    n_neg = n - c
    r_bar = 1 - comb(n_neg, k) / comb(n, k)
    sigma = math.sqrt(r_bar * (1 - r_bar))
    if sigma == 0:
        return 0.0, 0.0
    return (1 - r_bar) / sigma, (1 - r_bar - comb(n_neg - 1, k - 1) / comb(n - 1, k - 1)) / sigma


def _by_enumeration(correct: list[int], k: int) -> list[float]:
    """The definition: every size-k subset S scores max_{i∈S} R_i, normalised by the mean and (population) std over
    all subsets; a response's advantage is the mean normalised score of the subsets that contain it."""
    n = len(correct)
    subsets = list(itertools.combinations(range(n), k))
    scores = [max(correct[i] for i in s) for s in subsets]
    mean, std = statistics.fmean(scores), statistics.pstdev(scores)
    if std == 0:
        return [0.0] * n
    return [statistics.fmean((sc - mean) / std for s, sc in zip(subsets, scores) if i in s) for i in range(n)]


def test_hand_values():
    # n = 4, c = 1, k = 2: R̄ = 1 − C(3,2)/C(4,2) = 1/2, σ = 1/2; Â_pos = 1, Â_neg = (1/2 − C(2,1)/C(3,1))/(1/2) = −1/3
    assert passk_group_advantages(4, 1, 2) == pytest.approx((1.0, -1 / 3), abs=1e-12)
    out = passk_training_advantages(torch.tensor([0, 1, 0, 0], dtype=torch.bool), group=4, k=2)
    assert torch.allclose(out.double(), torch.tensor([-1 / 3, 1.0, -1 / 3, -1 / 3], dtype=torch.float64), atol=1e-7)


@pytest.mark.parametrize("n", [2, 4, 5, 8])
def test_closed_form_equals_the_papers_formula_and_the_subset_definition(n):
    for c in range(n + 1):
        correct = [1] * c + [0] * (n - c)
        for k in range(1, n + 1):
            a_pos, a_neg = passk_group_advantages(n, c, k)
            assert (a_pos, a_neg) == pytest.approx(_paper_closed_form(n, c, k), abs=1e-12)
            expected = _by_enumeration(correct, k)
            got = passk_training_advantages(torch.tensor(correct, dtype=torch.bool), group=n, k=k, dtype=torch.float64)
            assert got.tolist() == pytest.approx(expected, abs=1e-9), (n, c, k)


def test_k1_is_grpo_with_the_population_std():
    correct = torch.tensor([1, 0, 0, 1, 1, 0, 0, 0], dtype=torch.bool)
    r = correct.double()
    expected = (r - r.mean()) / r.std(unbiased=False)
    assert torch.allclose(passk_training_advantages(correct, 8, 1, dtype=torch.float64), expected, atol=1e-12)


def test_degenerate_groups_and_unscored_samples():
    # all wrong, all right, and n_neg < k (every subset holds a correct response): σ = 0, advantage 0
    correct = torch.tensor([0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 0], dtype=torch.bool)
    assert passk_training_advantages(correct, 4, 2).abs().max() == 0
    # an unscored sample gets 0 and its group is scored on the other 3: n = 3, c = 1, k = 2
    scored = torch.tensor([True, True, False, True])
    out = passk_training_advantages(torch.tensor([1, 0, 0, 0], dtype=torch.bool), 4, 2, scored=scored)
    a_pos, a_neg = _paper_closed_form(3, 1, 2)
    assert torch.allclose(out.double(), torch.tensor([a_pos, a_neg, 0.0, a_neg], dtype=torch.float64), atol=1e-7)
    with pytest.raises(ValueError, match="1 <= k <= group size 4"):
        passk_training_advantages(correct, 4, 5)


def test_trainer_uses_the_closed_form_advantages(tmp_path, tiny_path):
    from rlvr_div.trainers.grpo import DivergenceGRPOConfig, DivergenceGRPOTrainer

    torch.manual_seed(0)
    args = trainer_config(
        DivergenceGRPOConfig, tmp_path, reward_shaping="passk_training", passk_k=3, scale_rewards="none"
    )
    trainer = make_trainer(DivergenceGRPOTrainer, args, tiny_path, reward=mixed_pair_sum)  # both kinds of sample
    trainer.model.train()
    rows = [r for r in trainer.train_dataset.select(range(2)) for _ in range(8)]
    out = trainer._generate_and_score_completions(rows)
    rewards = torch.tensor(list(trainer._logs["rewards"]["mixed_pair_sum"]), dtype=torch.float64)
    expected = []
    for g in range(2):
        a_pos, a_neg = _paper_closed_form(8, int(rewards[8 * g : 8 * g + 8].sum()), 3)
        expected += [a_pos if r == 1 else a_neg for r in rewards[8 * g : 8 * g + 8].tolist()]
    assert any(expected), "premise: a group with both correct and incorrect samples (mixed_pair_sum)"
    assert torch.allclose(out["advantages"].double(), torch.tensor(expected, dtype=torch.float64), atol=1e-5)


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--passk_k", "9"], "passk_k=9 exceeds num_generations=8"),
        (["--passk_k", "8"], "passk_k=8 equals num_generations"),
        (["--passk_k", "0"], "passk_k must be an integer >= 1"),
        (["--reward_shaping", "none", "--passk_k", "2"], "passk_k=2 acts only with reward_shaping: passk_training"),
        (["--rewards", "pair_sum", "pair_sum"], "builds its advantages from validity alone"),
        (["--scale_rewards", "batch"], "scale_rewards='batch' does not act with reward_shaping: passk_training"),
    ],
)
def test_bad_settings_fail_in_one_line_before_the_model_loads(extra, message, capsys, no_model_loads, tmp_path):
    assert_train_refuses(ROOT / "recipes" / "tiny" / "passk_training.yaml", extra, message, capsys, tmp_path)


@pytest.mark.slow
def test_tiny_recipe_trains_50_steps_with_the_reward_rising(tmp_path, tiny_path):
    logs = run_recipe("passk_training", False, tmp_path / "run", steps=50, batch=96)
    assert_reward_rises(logs, 50, 0.02)
