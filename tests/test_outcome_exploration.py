"""Outcome-based exploration (Song, Kempe & Munos 2025): the UCB bonus and the repeat penalty against hand values,
history-only counts, the trainer's shaped advantages, the counts surviving a checkpoint resume, bad settings in
one line, the tiny recipe."""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from launchers import TWO_PROCESSES
from train_checks import assert_reward_rises, assert_train_refuses, make_trainer, run_recipe, trainer_config

from rlvr_div.errors import ConfigError
from rlvr_div.trainers.outcome_exploration import (
    STATE_FILE,
    OutcomeCounts,
    historical_bonus,
    prompt_key,
    repeat_penalty,
)

ROOT = Path(__file__).resolve().parents[1]
RECIPE = ROOT / "recipes" / "tiny" / "outcome_exploration.yaml"
NAN = float("nan")


def test_bonus_and_penalty_hand_values():
    # b = min(1, 1/sqrt(N)): never seen → 1, once → 1, 4 times → 1/2, 9 times → 1/3
    assert historical_bonus(torch.tensor([0, 1, 4, 9])).tolist() == pytest.approx([1, 1, 0.5, 1 / 3])
    # p_i = (1/G)·#{j ≠ i : a_j = a_i}; None is never a repeat and never penalised
    answers = ["a", "a", "b", None, "c", "c", "c", None]
    assert repeat_penalty(answers, 4).tolist() == pytest.approx([0.25, 0.25, 0, 0, 0.5, 0.5, 0.5, 0])
    with pytest.raises(ValueError, match="do not form groups of 4"):
        repeat_penalty(["a"] * 6, 4)


def test_shaped_rewards_use_earlier_batches_only():
    counts = OutcomeCounts()
    x, y = prompt_key("sum 4:"), prompt_key([{"role": "user", "content": "sum 5:"}])
    batch1 = [(x, "1+3"), (x, "1+3"), (x, "2+2"), (x, None)]
    counts.observe(batch1)
    shaped, stats = counts.shape(torch.tensor([1.0, 1.0, 1.0, 0.0]), 4, bonus_coef=0.5, penalty_coef=0.2)
    # first visit: every answer is new (b = 1); "1+3" is repeated once in the group (p = 1/4); None gets nothing
    assert shaped.tolist() == pytest.approx([1 + 0.5 - 0.05, 1 + 0.5 - 0.05, 1 + 0.5, 0.0])
    assert stats["outcome/distinct_answers"] == 2 and stats["outcome/answered_frac"] == 0.75
    assert counts.counts == {x: {"1+3": 2, "2+2": 1}}
    batch2 = [(x, "1+3"), (x, "0+4"), (y, "2+3"), (y, "2+3")]
    counts.observe(batch2)
    shaped, _ = counts.shape(torch.tensor([1.0, 1.0, NAN, 1.0]), 2, bonus_coef=1.0, penalty_coef=1.0)
    # "1+3" was seen twice before → 1/sqrt(2); "0+4" and y's "2+3" never (the first "2+3" of this batch does not
    # count for the second); y's group repeats "2+3": p = 1/2; a NaN reward stays NaN
    assert shaped[0].item() == pytest.approx(1 + 1 / math.sqrt(2))
    assert shaped[1].item() == pytest.approx(2.0)
    assert math.isnan(shaped[2].item()) and shaped[3].item() == pytest.approx(1 + 1 - 0.5)
    assert counts.counts[x] == {"1+3": 3, "2+2": 1, "0+4": 1} and counts.counts[y] == {"2+3": 2}


def test_shape_needs_the_batch_observed_first():
    with pytest.raises(RuntimeError, match="observe"):
        OutcomeCounts().shape(torch.zeros(4), 4, 1.0, 1.0)


def test_state_round_trip_and_missing_state(tmp_path):
    counts = OutcomeCounts()
    counts.update([("p", "a"), ("p", "a"), ("q", "b")])
    counts.save(tmp_path)
    again = OutcomeCounts()
    again.load(tmp_path)
    assert again.counts == {"p": {"a": 2}, "q": {"b": 1}}
    with pytest.raises(ConfigError, match="has no outcome_counts.json"):
        OutcomeCounts().load(tmp_path / "elsewhere")


def answered_pair_sum(prompts, completions, target, **kwargs) -> list[float | None]:
    """pair_sum's score, with an ``extract`` that answers every completion: ``pair a+b`` when pair_sum reads the pair
    a+b, else ``text '...'``. Outcome exploration reads the answers with the validity reward's ``extract``, and
    pair_sum's can read none in a batch (the tiny base need not write a pair), which leaves it nothing to shape; and
    no answer is the completion's own text, so the counts show whether the trainer read them with this extract."""
    from rlvr_div.rewards import get_reward

    return get_reward("pair_sum")(prompts=prompts, completions=completions, target=target)


def _answer(text: str) -> str:
    from rlvr_div.rewards import get_reward

    pair = get_reward("pair_sum").extract(text)
    return f"pair {pair}" if pair is not None else f"text {text!r}"


answered_pair_sum.extract = _answer


def test_trainer_shapes_rewards_then_takes_group_advantages(tmp_path, tiny_path):
    """Two batches of the same two groups of 8, constructed so that the shaping moves the advantages:

    - every completion is answered (:func:`answered_pair_sum`), so in the first batch, counts empty, each gets the
      bonus b = 1 and the shaping does something (r̃ − r = 0.5 − 0.5·p ≥ 1/16);
    - but there it can be the same for a whole group (every answer of the group held by as many samples: the same p),
      which the advantages cancel; so the second batch repeats the first (the same seed, no step between), its
      answers all in the counts, and the history holds each group's first answer once more (written into the
      trainer's counts and the reference's alike): r̃ − r = 0.5/√N − (k − 1)/16 for an answer held by k samples of
      its group, N = k (+ 1 for the first answer), which differs between the first answer and any other of the
      group (by ≥ 0.026 for every k's summing to at most 8)."""
    from rlvr_div.trainers.grpo import DivergenceGRPOConfig, DivergenceGRPOTrainer

    args = trainer_config(
        DivergenceGRPOConfig,
        tmp_path,
        reward_shaping="outcome_exploration",
        outcome_bonus_coef=0.5,
        outcome_penalty_coef=0.5,
        scale_rewards="none",
    )
    trainer = make_trainer(DivergenceGRPOTrainer, args, tiny_path, reward=answered_pair_sum)
    counts = trainer.plugin("outcome_exploration").counts
    trainer.model.train()
    rows = [r for r in trainer.train_dataset.select(range(2)) for _ in range(8)]
    reference = OutcomeCounts()
    seen = []
    for batch in range(2):  # the second batch sees the first one's answers in its counts
        torch.manual_seed(0)
        out = trainer._generate_and_score_completions(rows)
        rewards = torch.tensor(list(trainer._logs["rewards"]["answered_pair_sum"])[-16:], dtype=torch.float64)
        texts = list(trainer._logs["completion"])[-16:]
        items = [(prompt_key(r["prompt"]), answered_pair_sum.extract(t)) for r, t in zip(rows, texts)]
        assert None not in (a for _, a in items), "premise: every completion answered (answered_pair_sum)"
        reference.observe(items)
        shaped, _ = reference.shape(rewards, 8, 0.5, 0.5)
        grouped = shaped.view(-1, 8)
        expected = (grouped - grouped.mean(1, keepdim=True)).view(-1)
        assert not torch.allclose(shaped, rewards), "premise: the shaping did something on this batch"
        if batch == 1:
            assert items == seen[0], "premise: the second batch repeats the first (the same seed, no step between)"
            moved = (shaped - rewards).view(-1, 8)
            spread = (moved.amax(1) - moved.amin(1)).max().item()
            assert spread > 0.02, f"premise: the shaping differs within a group (by {spread:.3g}), not cancelled"
        assert torch.allclose(out["advantages"].double(), expected, atol=1e-5), (batch, out["advantages"], expected)
        seen.append(items)
        if batch == 0:
            earlier = items[::8]  # each group's first answer, once more in the history
            counts.update(earlier)
            reference.update(earlier)
    assert counts.counts == reference.counts


def _train(out: Path, *extra: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "rlvr_div.train", "--config", str(RECIPE), "--output_dir", str(out),
           "--per_device_train_batch_size", "32", "--save_steps", "2", "--save_total_limit", "3",
           "--disable_tqdm", "true", *extra]  # fmt: skip
    return subprocess.run(cmd, capture_output=True, text=True)


@pytest.mark.slow  # moved to make test-slow: keeps make test near 10 min (--durations, 2026-11-27)
def test_counts_survive_a_resume_from_a_checkpoint(tmp_path, tiny_path):
    full = tmp_path / "full"
    res = _train(full, "--max_steps", "4")
    assert res.returncode == 0, res.stderr[-3000:]
    for step in (2, 4):  # written with the checkpoint, before trainer_state.json marks it complete
        state, counts = full / f"checkpoint-{step}" / "trainer_state.json", full / f"checkpoint-{step}" / STATE_FILE
        assert counts.stat().st_mtime_ns <= state.stat().st_mtime_ns
    at2 = json.loads((full / "checkpoint-2" / STATE_FILE).read_text())["counts"]
    at4 = json.loads((full / "checkpoint-4" / STATE_FILE).read_text())["counts"]
    assert sum(map(sum, (d.values() for d in at2.values()))) < sum(map(sum, (d.values() for d in at4.values())))
    # a run stopped after its step-2 checkpoint, resumed: the counts go on from step 2's, so step 4 matches
    resumed = tmp_path / "resumed"
    resumed.mkdir()
    shutil.copytree(full / "checkpoint-2", resumed / "checkpoint-2")
    res = _train(resumed, "--max_steps", "4", "--resume_from_checkpoint", "true")
    assert res.returncode == 0, res.stderr[-3000:]
    assert json.loads((resumed / "checkpoint-4" / STATE_FILE).read_text())["counts"] == at4
    # a checkpoint without the optimizer (save_only_model) still holds them
    light = tmp_path / "light"
    res = _train(light, "--max_steps", "2", "--save_only_model", "true")
    assert res.returncode == 0, res.stderr[-3000:]
    assert not (light / "checkpoint-2" / "optimizer.pt").exists()
    assert json.loads((light / "checkpoint-2" / STATE_FILE).read_text())["counts"] == at2


@pytest.mark.slow  # moved to make test-slow: keeps make test near 10 min (--durations, 2026-11-27)
def test_two_processes_count_every_completion_once(tmp_path, tiny_path):
    """Under a 2-process launch the counts come from the gathered batch (a group may span processes): after two steps
    they hold each answered completion of the global batches once, on top of Clip-Cov in the same loss."""
    out = tmp_path / "ddp"
    cmd = TWO_PROCESSES + ["-m", "rlvr_div.train", "--config", str(RECIPE), "--output_dir", str(out),
                           "--max_steps", "2", "--per_device_train_batch_size", "16", "--save_steps", "2",
                           "--disable_tqdm", "true", "--covariance_penalty", "clip_cov",
                           "--clip_cov_ratio", "0.05"]  # fmt: skip
    res = subprocess.run(cmd, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr[-3000:]
    logs = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines() if '"reward"' in x]
    answered = sum(round(x["outcome/answered_frac"] * 32) for x in logs)  # 2 processes x 16 completions per step
    counts = json.loads((out / "checkpoint-2" / STATE_FILE).read_text())["counts"]
    assert len(logs) == 2 and all(x["cov/clip_cov_frac"] > 0 for x in logs)
    assert sum(n for per_prompt in counts.values() for n in per_prompt.values()) == answered


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--outcome_bonus_coef", "-1"], "outcome_bonus_coef must be a finite number >= 0"),
        (["--outcome_bonus_coef", "0", "--outcome_penalty_coef", "0"], "would be inert"),
        (["--reward_shaping", "none", "--outcome_penalty_coef", "0.5"], "acts only with reward_shaping: outcome"),
    ],
)
def test_bad_settings_fail_in_one_line_before_the_model_loads(extra, message, capsys, no_model_loads, tmp_path):
    assert_train_refuses(RECIPE, extra, message, capsys, tmp_path)


@pytest.mark.slow
def test_tiny_recipe_trains_50_steps_with_the_reward_rising(tmp_path, tiny_path):
    logs = run_recipe("outcome_exploration", False, tmp_path / "run", steps=50, batch=96)
    assert all("outcome/bonus_mean" in x for x in logs)
    assert_reward_rises(logs, 50, 0.05)
