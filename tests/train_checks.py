"""Helpers shared by the training tests: a small trainer config and trainer on the tiny model, a recipe run in a
subprocess, one-line refusals before the model loads, and a reward that rises."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from pathlib import Path

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


def trainer_config(cls, tmp_path, **kw):
    """A small CPU config of trainer class ``cls`` (16 rollouts, 8 per prompt) with ``kw`` on top."""
    base = dict(
        output_dir=str(tmp_path), per_device_train_batch_size=16, num_generations=8, max_completion_length=8,
        bf16=False, use_cpu=True, report_to="none", seed=0, activation_checkpointing=False, logging_steps=1,
    )  # fmt: skip
    return cls(**{**base, **kw})


def make_trainer(cls, args, tiny_path):
    """Trainer ``cls`` on the tiny model and 16 `pairsum` prompts with the `pair_sum` reward."""
    from rlvr_div.models import load_tokenizer
    from rlvr_div.rewards import get_reward
    from rlvr_div.tasks import get_task

    return cls(
        model=tiny_path,
        reward_funcs=[get_reward("pair_sum")],
        args=args,
        train_dataset=get_task("pairsum", size=16),
        processing_class=load_tokenizer(tiny_path),
    )


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
