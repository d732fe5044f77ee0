"""Rewards named by import path (`package.module:function`) and reward settings for training (`reward_kwargs`):
a TRL-style reward function of the user's own trains and scores; bad names and settings fail in one line before any
model loads."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from rlvr_div.cli import main as cli_main
from rlvr_div.rewards import get_reward

TINY = str(Path(__file__).resolve().parents[1] / "recipes" / "tiny" / "grpo.yaml")
MODULE = '''
def digits_match(completions, answer, strict=True, **kwargs):
    """1 when the completion is the answer (strict) or contains it."""
    return [float(c.strip() == a if strict else a in c) for c, a in zip(completions, answer)]
'''


@pytest.fixture
def my_rewards(tmp_path, monkeypatch):
    (tmp_path / "my_rewards_mod.py").write_text(textwrap.dedent(MODULE))
    monkeypatch.syspath_prepend(str(tmp_path))
    return "my_rewards_mod:digits_match"


def test_a_reward_function_by_import_path_scores_with_its_settings(my_rewards):
    strict = get_reward(my_rewards)
    assert strict.columns == ("answer",) and strict.settings() == {}
    assert strict.score(["12", " 12 ", "x12"], answer=["12"] * 3) == [1.0, 1.0, 0.0]
    loose = get_reward(my_rewards, strict=False)
    assert loose.settings() == {"strict": False}
    assert loose.score(["12", "x12"], answer=["12"] * 2) == [1.0, 1.0]
    assert loose(prompts=["p", "p"], completions=["x12", "1"], answer=["12", "12"]) == [1.0, 0.0]  # TRL's call


def test_score_only_eval_with_a_custom_reward(my_rewards, tmp_path, no_model_loads):
    rows = [{"prompt": "3+9=", "completions": ["12", "x12", "11"], "answer": "12"}]
    (tmp_path / "s.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "out"
    args = ["eval", "--samples", f"m={tmp_path / 's.jsonl'}", "--reward", my_rewards, "--quiet"]
    assert cli_main([*args, "--reward-arg", "strict=false", "--output-dir", str(out)]) == 0
    res = json.loads((out / "m" / "results.json").read_text())
    assert res["config"]["reward"] == my_rewards and res["config"]["reward_settings"] == {"strict": False}
    assert res["metrics"]["pass_at_k"]["1"] == pytest.approx(2 / 3)


def test_training_with_a_custom_reward_and_reward_kwargs(my_rewards, tmp_path, tiny_path):
    out = tmp_path / "run"
    args = ["train", "--config", TINY, "--output_dir", str(out), "--max_steps", "1", "--save_steps", "100"]
    args += ["--rewards", my_rewards, "--reward_kwargs", json.dumps({my_rewards: {"strict": False}}), "--threads", "1"]
    assert cli_main(args) == 0
    logged = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert any(f"rewards/{my_rewards}/mean" in line for line in logged), logged[0].keys()


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--rewards", "no_such_mod_xyz:f"], "cannot import 'no_such_mod_xyz'"),
        (["--rewards", "json:nope"], "has no attribute 'nope'"),
        (["--reward_kwargs", '{"pair_sum": {}}'], "reward_kwargs names 'pair_sum'"),
        (["--reward_kwargs", '{"arith_exact": {"oops": 1}}'], "bad settings for reward 'arith_exact'"),
        (["--reward_kwargs", "[1]"], "reward_kwargs must map reward names to settings"),
    ],
)
def test_bad_reward_names_and_settings_are_one_line(extra, message, tmp_path, capsys, no_model_loads):
    assert cli_main(["train", "--config", TINY, "--output_dir", str(tmp_path / "o"), *extra]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and message in err[0], err
