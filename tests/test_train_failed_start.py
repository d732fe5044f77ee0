"""`rlvr-div train`: a run that fails after writing recipe.yaml but before its first checkpoint does not block the
same command from starting again; another recipe in that directory, or a run with a checkpoint, is still refused."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

from rlvr_div.cli import main as cli_main

RECIPE = str(Path(__file__).resolve().parents[1] / "recipes" / "tiny" / "grpo.yaml")
MODULE = '''
FAIL = True


def flaky(completions, **kwargs):
    """Raises while FAIL is set (a reward server that is down), else 0 for every completion."""
    if FAIL:
        raise RuntimeError("reward server down")
    return [0.0 for _ in completions]
'''


@pytest.fixture
def flaky_reward(tmp_path, monkeypatch):
    (tmp_path / "flaky_reward_mod.py").write_text(textwrap.dedent(MODULE))
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "flaky_reward_mod:flaky"
    sys.modules.pop("flaky_reward_mod", None)


def test_a_run_that_failed_before_its_first_checkpoint_starts_again(tmp_path, tiny_path, flaky_reward, capsys):
    out = tmp_path / "run"
    args = ["train", "--config", RECIPE, "--output_dir", str(out), "--max_steps", "1", "--save_steps", "100"]
    args += ["--rewards", flaky_reward, "--threads", "1", "--disable_tqdm", "true"]
    with pytest.raises(RuntimeError, match="reward server down"):
        cli_main(args)
    assert sorted(p.name for p in out.iterdir()) == ["recipe.yaml"]  # what the failed start left
    capsys.readouterr()
    # another recipe in that directory: refused before any model loads, naming what differs
    assert cli_main([*args, "--learning_rate", "2e-4"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "holds a run that stopped before its first checkpoint with another recipe" in err[0], err
    assert "differs in learning_rate" in err[0] and "--overwrite_output_dir true" in err[0], err
    # the same command, once the reward works, trains
    sys.modules["flaky_reward_mod"].FAIL = False
    assert cli_main(args) == 0
    assert [json.loads(x)["step"] for x in (out / "metrics.jsonl").read_text().splitlines()] == [1]
    first, again = yaml.safe_load((out / "recipe.yaml").read_text())["history"]
    assert first["action"] == "new" and again["action"] == "restart" and "changed" not in again
    # finished: the same command is refused again, as before
    assert cli_main(args) == 2
    assert "holds a finished run (1 steps)" in capsys.readouterr().err
