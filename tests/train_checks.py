"""Helpers shared by the training tests: a small trainer config and trainer on the tiny model, a recipe run in a
subprocess, one-line refusals before the model loads, and a reward that rises."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from rlvr_div.cli import main as cli_main

ROOT = Path(__file__).resolve().parents[1]


def assert_train_refuses(
    recipe: str | Path, extra: list[str], message: str | tuple[str, ...], capsys: pytest.CaptureFixture,
    output_dir: Path,
) -> None:  # fmt: skip
    """``rlvr-div train --config recipe --output_dir output_dir *extra`` exits 2 with one stderr line, ``error: ...``,
    that contains ``message`` (each of them, for a tuple)."""
    rc = cli_main(["train", "--config", str(recipe), "--output_dir", str(output_dir), *extra])
    err = capsys.readouterr().err.strip().splitlines()
    parts = (message,) if isinstance(message, str) else message
    assert rc == 2
    assert len(err) == 1 and err[0].startswith("error: ") and all(p in err[0] for p in parts), err


def assert_reward_rises(logs: list[dict], steps: int, margin: float) -> None:
    """Every step 1..steps logged, and the mean reward of the last 10 steps above that of the first 10 by ``margin``."""
    assert [x["step"] for x in logs] == list(range(1, steps + 1))
    rewards = [x["reward"] for x in logs]
    assert statistics.fmean(rewards[-10:]) > statistics.fmean(rewards[:10]) + margin, rewards


GENERATIONS = 8  # completions per prompt in trainer_config


def trainer_config(cls, tmp_path, **kw):
    """A small CPU config of trainer class ``cls`` (16 rollouts, 8 per prompt) with ``kw`` on top."""
    base = dict(
        output_dir=str(tmp_path), per_device_train_batch_size=16, num_generations=GENERATIONS, max_completion_length=8,
        bf16=False, use_cpu=True, report_to="none", seed=0, activation_checkpointing=False, logging_steps=1,
    )  # fmt: skip
    return cls(**{**base, **kw})


def make_trainer(cls, args, tiny_path, reward: Callable[..., list[float | None]] | None = None):
    """Trainer ``cls`` on the tiny model and 16 `pairsum` prompts with the `pair_sum` reward (or ``reward``, a TRL
    reward function: one that constructs what a test needs of the batch instead of hoping the sampler brings it)."""
    from rlvr_div.models import load_tokenizer
    from rlvr_div.rewards import get_reward
    from rlvr_div.tasks import get_task

    return cls(
        model=tiny_path,
        reward_funcs=[reward or get_reward("pair_sum")],
        args=args,
        train_dataset=get_task("pairsum", size=16),
        processing_class=load_tokenizer(tiny_path),
    )


def mixed_pair_sum(prompts: list[Any], completions: list[Any], target: list[int], **kwargs: Any) -> list[float | None]:
    """pair_sum's score, except that the first completion of every group of :data:`GENERATIONS` scores 1 and the second
    0, whatever they say: every group holds a correct and an incorrect sample, so its advantages are not all 0 (the
    tiny base can fail, or pass, every sample of a group, and a step then checks and moves nothing). Assumes TRL's
    layout, each group's completions side by side; importable by path, ``train_checks:mixed_pair_sum``, with tests/
    on PYTHONPATH."""
    from rlvr_div.rewards import get_reward

    real = get_reward("pair_sum")(prompts=prompts, completions=completions, target=target)
    pinned = {0: 1.0, 1: 0.0}
    return [pinned.get(i % GENERATIONS, x) for i, x in enumerate(real)]


def make_far_pair_trainer(cls, args, tiny_path, mean: bool):
    """:func:`make_trainer` with the reward ``far_pair``: whatever the completions say, it scores 1 the two
    completions of each group of :data:`GENERATIONS` that the trainer's model (the policy, at step 0 also the
    reference) finds farthest apart in log-probability, the most and the least likely, and 0 the other six. Every
    group then holds exactly two correct samples, picked by measuring (two sampled correct answers can be the same
    text, or near in log-probability, and then UCPO, MARA or the unlikeliness reward have nothing to act on). The
    log-probability is the completion's sum over its tokens, or with ``mean`` its mean per token, at the sampling
    temperature; a test asserts on its own numbers that the pair it got lies apart."""
    import torch

    from rlvr_div.logprobs import token_logprobs

    held: dict[str, Any] = {}

    def far_pair(prompts: list[Any], completions: list[Any], completion_ids: list[list[int]], **kwargs: Any):
        trainer = held["trainer"]
        tokenizer = trainer.processing_class
        with torch.no_grad():
            logps = token_logprobs(
                trainer.model, tokenizer(text=prompts)["input_ids"], completion_ids,
                temperature=trainer.args.temperature, pad_token_id=tokenizer.pad_token_id,
            )  # fmt: skip
        score = [sum(x) / max(len(x), 1) if mean else sum(x) for x in logps]
        out: list[float | None] = []
        for start in range(0, len(score), GENERATIONS):
            block = score[start : start + GENERATIONS]
            hi = max(range(len(block)), key=block.__getitem__)
            lo = min(range(len(block)), key=block.__getitem__)
            lo = lo if lo != hi else (hi + 1) % len(block)  # a group of equal scores: still two samples
            out += [float(i in (hi, lo)) for i in range(len(block))]
        return out

    held["trainer"] = make_trainer(cls, args, tiny_path, reward=far_pair)
    return held["trainer"]


def run_recipe(recipe: str, lora: bool, out: Path, steps: int, batch: int | None) -> list[dict]:
    """Train a tiny recipe for ``steps`` steps (``batch``: completions per step; None: the recipe's own)."""
    cmd = [sys.executable, "-m", "rlvr_div.train", "--config", str(ROOT / f"recipes/tiny/{recipe}.yaml"),
           "--output_dir", str(out), "--max_steps", str(steps), "--disable_tqdm", "true",
           "--save_strategy", "no"]  # fmt: skip
    if batch is not None:
        cmd += ["--per_device_train_batch_size", str(batch)]
    if lora:
        cmd += ["--use_peft", "true", "--lora_target_modules", "all-linear"]
    res = subprocess.run(cmd, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr[-3000:]
    return [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines() if '"reward"' in x]
