"""Assertions shared by the training tests: one-line refusals before the model loads, and a reward that rises."""

from __future__ import annotations

import statistics
from pathlib import Path

import pytest

from rlvr_div.cli import main as cli_main


def assert_train_refuses(
    recipe: str | Path, extra: list[str], message: str, capsys: pytest.CaptureFixture, output_dir: Path
) -> None:
    """``rlvr-div train --config recipe --output_dir output_dir *extra`` exits 2 with one stderr line, ``error: ...``,
    that contains ``message``."""
    rc = cli_main(["train", "--config", str(recipe), "--output_dir", str(output_dir), *extra])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2
    assert len(err) == 1 and err[0].startswith("error: ") and message in err[0], err


def assert_reward_rises(logs: list[dict], steps: int, margin: float) -> None:
    """Every step 1..steps logged, and the mean reward of the last 10 steps above that of the first 10 by ``margin``."""
    assert [x["step"] for x in logs] == list(range(1, steps + 1))
    rewards = [x["reward"] for x in logs]
    assert statistics.fmean(rewards[-10:]) > statistics.fmean(rewards[:10]) + margin, rewards
