"""Polychromic set objective (reward_shaping: polychromic, Hamid et al. 2025): the marginal set advantage against
the six sets of a group of 4 enumerated by hand; repeated valid answers get less than distinct ones (which GRPO cannot
tell apart); with `all` a failed but distinct sample can gain; the expected update over every group of draws of a
tabular policy is ((G − n)/n)·∇E[f]; the trainer's advantages; bad settings in one line; the tiny recipe."""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import pytest
import torch
from train_checks import assert_train_refuses, make_trainer, mixed_pair_sum, run_recipe, trainer_config

from rlvr_div.trainers.polychromic import polychromic_advantages

ROOT = Path(__file__).resolve().parents[1]
RECIPE = ROOT / "recipes" / "tiny" / "polychromic.yaml"
NAN = float("nan")


def _marginal(f: dict[tuple[int, ...], float], size: int) -> list[float]:
    """A_i = mean f over the listed sets containing i − mean f over all of them (0 for an i in none of them)."""
    mean = sum(f.values()) / len(f)
    within = [[v for s, v in f.items() if i in s] for i in range(size)]
    return [sum(vs) / len(vs) - mean if vs else 0.0 for vs in within]


def test_hand_values_group_of_four_sets_of_two():
    texts = ["1+3", "1+3", "2+2", "9"]  # valid, valid (the same pair), valid (another pair), invalid
    rewards = torch.tensor([1.0, 1.0, 1.0, 0.0])
    # f(S) = mean reward × (distinct valid texts in S)/2, the C(4, 2) = 6 sets written out
    f_valid = {
        (0, 1): 1.0 * 1 / 2,  # the same valid pair twice
        (0, 2): 1.0 * 2 / 2,
        (0, 3): 0.5 * 1 / 2,
        (1, 2): 1.0 * 2 / 2,
        (1, 3): 0.5 * 1 / 2,
        (2, 3): 0.5 * 1 / 2,
    }
    expected = _marginal(f_valid, 4)
    assert expected == pytest.approx([1 / 24, 1 / 24, 5 / 24, -7 / 24])
    adv, stats = polychromic_advantages(rewards, texts, 4, 2, "valid", torch.float64)
    assert adv.tolist() == pytest.approx(expected)
    assert stats["polychromic/set_objective"] == pytest.approx(3.25 / 6)
    assert stats["polychromic/set_diversity"] == pytest.approx((0.5 + 1 + 0.5 + 1 + 0.5 + 0.5) / 6)
    # `all` counts the invalid "9" as a distinct member too: d({0, 3}) = 2/2
    f_all = {(0, 1): 0.5, (0, 2): 1.0, (0, 3): 0.5, (1, 2): 1.0, (1, 3): 0.5, (2, 3): 0.5}
    adv_all, _ = polychromic_advantages(rewards, texts, 4, 2, "all", torch.float64)
    assert _marginal(f_all, 4) == pytest.approx([0, 0, 1 / 6, -1 / 6])
    assert adv_all.tolist() == pytest.approx(_marginal(f_all, 4))


def test_unscored_samples_are_left_out_of_the_sets():
    texts = ["1+3", "?", "2+2", "9", "?", "?", "2+2", "9"]
    rewards = torch.tensor([1.0, NAN, 1.0, 0.0, NAN, NAN, 1.0, 0.0])
    adv, _ = polychromic_advantages(rewards, texts, 4, 2, "valid", torch.float64)
    # group 1: the sets of the 3 scored samples {0, 2, 3}; group 2: 2 scored samples form one set only → all 0
    f = {(0, 2): 1.0, (0, 3): 0.25, (2, 3): 0.25}
    a0, a2, a3 = (_marginal(f, 4)[i] for i in (0, 2, 3))
    assert adv.tolist() == pytest.approx([a0, 0.0, a2, a3, 0.0, 0.0, 0.0, 0.0])
    assert [a0, a2, a3] == pytest.approx([0.125, 0.125, -0.25])


def test_repeated_valid_answers_get_less_than_distinct_ones():
    """Two valid and two invalid samples: when the valid two repeat one pair, every set holding both scores less,
    and their advantage is half that of two distinct valid pairs; GRPO's r − mean r is the same in both groups."""
    texts = ["1+3", "1+3", "9", "x", "1+3", "2+2", "9", "x"]
    rewards = torch.tensor([1.0, 1.0, 0.0, 0.0] * 2)
    adv = polychromic_advantages(rewards, texts, 4, 2, "valid", torch.float64)[0].view(2, 4)
    assert adv[0].tolist() == pytest.approx([1 / 12, 1 / 12, -1 / 12, -1 / 12])
    assert adv[1].tolist() == pytest.approx([1 / 6, 1 / 6, -1 / 6, -1 / 6])
    assert (adv[0, :2] < adv[1, :2]).all()
    grpo = rewards.view(2, 4) - rewards.view(2, 4).mean(dim=1, keepdim=True)
    assert torch.equal(grpo[0], grpo[1])
    # a group of four copies of one valid pair scores every set alike: no push at all, while four distinct pairs
    # make every set score 1 (also no push: all sets equal) — the objective's value, not its advantage, differs
    same, s_same = polychromic_advantages(torch.ones(4), ["1+3"] * 4, 4, 2, "valid", torch.float64)
    distinct, s_distinct = polychromic_advantages(torch.ones(4), ["0+4", "1+3", "2+2", "3+1"], 4, 2)
    assert same.abs().max() == 0 and distinct.abs().max() == 0
    assert s_same["polychromic/set_objective"] == pytest.approx(0.5) and s_distinct["polychromic/set_objective"] == 1


def test_a_failed_but_distinct_sample_can_gain_with_all():
    """Three copies of one valid pair and one failure, sets of 3: with `all` the failure adds diversity to the sets
    the others carry the reward of, so it gets +1/36 (the paper's exploratory-failure property); with `valid` −1/36."""
    texts, rewards = ["1+3", "1+3", "1+3", "7"], torch.tensor([1.0, 1.0, 1.0, 0.0])
    # sets: {0,1,2}: r̄ = 1, d = 1/3; the three {·,·,3}: r̄ = 2/3, d = 2/3 (all) or 1/3 (valid)
    f_all = {(0, 1, 2): 1 / 3, (0, 1, 3): 4 / 9, (0, 2, 3): 4 / 9, (1, 2, 3): 4 / 9}
    f_valid = {(0, 1, 2): 1 / 3, (0, 1, 3): 2 / 9, (0, 2, 3): 2 / 9, (1, 2, 3): 2 / 9}
    adv_all = polychromic_advantages(rewards, texts, 4, 3, "all", torch.float64)[0]
    adv_valid = polychromic_advantages(rewards, texts, 4, 3, "valid", torch.float64)[0]
    assert adv_all.tolist() == pytest.approx(_marginal(f_all, 4))
    assert adv_valid.tolist() == pytest.approx(_marginal(f_valid, 4))
    assert adv_all[3].item() == pytest.approx(1 / 36) and adv_valid[3].item() == pytest.approx(-1 / 36)


def test_advantages_sum_to_zero_in_each_group():
    torch.manual_seed(0)
    rewards = (torch.rand(48) < 0.6).double()
    texts = [str(int(x)) for x in torch.randint(0, 3, (48,))]
    for mode in ("valid", "all"):
        adv = polychromic_advantages(rewards, texts, 8, 3, mode, torch.float64)[0].view(6, 8)
        assert adv.sum(dim=1).abs().max() < 1e-12
        assert adv.abs().max() > 0


@pytest.mark.parametrize("mode", ["valid", "all"])
def test_the_expected_update_is_a_multiple_of_the_set_objective_gradient(mode):
    """Σ over every group of G = 4 draws of a tabular policy of P(group)·Σ_i A_i·∇log π(y_i) = ((G − n)/n)·∇J with
    J = E_{y_1, y_2 ~ π}[f(y_1, y_2)], n = 2: the marginal advantage is an unbiased set-RL gradient estimate."""
    answers = ["0+4", "1+3", "2+2", "9"]  # three valid pairs and a failure
    reward = torch.tensor([1.0, 1.0, 1.0, 0.0], dtype=torch.float64)
    theta = torch.tensor([1.2, 0.3, -0.4, 0.5], dtype=torch.float64, requires_grad=True)
    logp = torch.log_softmax(theta, 0)
    p = logp.exp().detach()
    big, n = 4, 2

    def f(ys: tuple[int, ...]) -> float:
        counted = {y for y in ys if mode == "all" or reward[y] == 1}
        return reward[list(ys)].mean().item() * len(counted) / len(ys)

    coef = torch.zeros(4, dtype=torch.float64)  # Σ_groups P(group)·Σ_{i: y_i = k} A_i
    for ys in itertools.product(range(4), repeat=big):
        adv, _ = polychromic_advantages(reward[list(ys)], [answers[y] for y in ys], big, n, mode, torch.float64)
        coef.index_add_(0, torch.tensor(ys), p[list(ys)].prod() * adv)
    (update,) = torch.autograd.grad((coef * logp).sum(), theta, retain_graph=True)
    probs = torch.softmax(theta, 0)
    objective = sum(probs[list(ys)].prod() * f(ys) for ys in itertools.product(range(4), repeat=n))
    (grad,) = torch.autograd.grad(objective, theta)
    assert torch.allclose(update, (big - n) / n * grad, atol=1e-12)
    assert update.abs().max() > 1e-3


def test_trainer_uses_the_marginal_set_advantages(tmp_path, tiny_path, monkeypatch):
    from rlvr_div.trainers import common
    from rlvr_div.trainers.grpo import DivergenceGRPOConfig, DivergenceGRPOTrainer

    torch.manual_seed(0)
    args = trainer_config(DivergenceGRPOConfig, tmp_path, reward_shaping="polychromic", scale_rewards="none")
    trainer = make_trainer(DivergenceGRPOTrainer, args, tiny_path, reward=mixed_pair_sum)  # both kinds of sample
    trainer.model.train()
    rows = [r for r in trainer.train_dataset.select(range(2)) for _ in range(8)]
    gathers = []
    monkeypatch.setattr(common, "gather_object", lambda x: gathers.append(x) or list(x))
    out = trainer._generate_and_score_completions(rows)
    rewards = list(trainer._logs["rewards"]["mixed_pair_sum"])  # TRL's own record of the batch
    texts = [c.strip() for c in trainer._logs["completion"]]
    assert len(gathers) == 1 and trainer.gathered_texts == texts  # one gather of the texts, shared with diversity/*
    expected = []
    for g in range(2):  # the module docstring's formula, over all C(8, 4) = 70 sets, written out
        r, t = rewards[8 * g : 8 * g + 8], texts[8 * g : 8 * g + 8]
        f = {
            s: sum(r[i] for i in s) / 4 * len({t[i] for i in s if r[i] == 1.0}) / 4
            for s in itertools.combinations(range(8), 4)
        }
        assert len(f) == math.comb(8, 4)
        expected += _marginal(f, 8)
    adv = out["advantages"].double()
    assert adv.tolist() == pytest.approx(expected, abs=1e-6)
    assert adv.abs().max() > 0.01
    assert "polychromic/set_objective" in trainer._metrics["train"]


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--polychromic_set_size", "1"], "polychromic_set_size must be an integer >= 2, got 1"),
        (["--polychromic_set_size", "8"], "polychromic_set_size=8 must be below num_generations=8"),
        (
            ["--num_generations", "32", "--polychromic_set_size", "8"],
            "C(32, 8) = 10518300 sets per group, over 200000",
        ),
        (["--polychromic_diversity", "semantic"], "polychromic_diversity must be one of valid, all, got 'semantic'"),
        (["--reward_shaping", "none", "--polychromic_set_size", "3"], "polychromic_set_size=3 acts only with"),
        (["--reward_shaping", "none", "--polychromic_diversity", "all"], "polychromic_diversity=all acts only with"),
        (["--scale_rewards", "group"], "scale_rewards='group' does not act with reward_shaping: polychromic"),
    ],
)
def test_bad_settings_fail_in_one_line_before_the_model_loads(extra, message, capsys, no_model_loads, tmp_path):
    assert_train_refuses(RECIPE, extra, message, capsys, tmp_path)


@pytest.mark.slow
def test_tiny_recipe_trains(tmp_path, tiny_path):
    logs = run_recipe("polychromic", False, tmp_path / "run", steps=2, batch=None)
    assert [x["step"] for x in logs] == [1, 2]
    assert all("polychromic/set_objective" in x and "polychromic/set_diversity" in x for x in logs)
