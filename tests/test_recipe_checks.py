"""Recipe values that used to pass unchecked (issue 36): each is one `error:` line naming the key, before any model
loads, and leaves nothing in output_dir that would later stop a rerun as "a partial run".

- infinity and NaN in any number key of any trainer (`beta: .inf`, `--beta inf`, `--divergence_coef inf`, ...);
- a `loss_type` TRL does not know (the accepted ones are read from the installed TRL's GRPOConfig);
- a misspelt setting in `reward_kwargs` for a reward function that takes `**kwargs` (unless it declares
  `accepts_any_kwargs`);
- boolean keys: only true or false (YAML's booleans, or the text true/false), the same in YAML and on the command line.
"""

from __future__ import annotations

import dataclasses
import textwrap
from pathlib import Path
from typing import Literal

import pytest
import yaml

from rlvr_div.cli import main as cli_main
from rlvr_div.errors import ConfigError
from rlvr_div.recipe import parse_recipe
from rlvr_div.run_dir import earlier_run, plan_start

RECIPES = Path(__file__).resolve().parents[1] / "recipes" / "tiny"
TINY = yaml.safe_load((RECIPES / "grpo.yaml").read_text())


def _refused(argv: list[str], out: Path, capsys: pytest.CaptureFixture) -> str:
    assert cli_main(["train", *argv, "--output_dir", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: "), err
    assert earlier_run(out) is None  # no recipe.yaml, metrics or checkpoint: a rerun is not "a partial run"
    plan_start(str(out), None, False)
    return err[0]


def _recipe(tmp_path: Path, base: str, text: str) -> str:
    """``recipes/tiny/<base>`` with ``text`` (YAML lines) replacing the keys it sets."""
    recipe = yaml.safe_load((RECIPES / base).read_text())
    extra = yaml.safe_load(text)
    path = tmp_path / "recipe.yaml"
    kept = {k: v for k, v in recipe.items() if k not in extra}
    path.write_text(yaml.safe_dump(kept, sort_keys=False) + text + "\n")
    return str(path)


# --------------------------------------------------------------------------------------------- infinity


CLI_INFINITIES = [
    ("grpo.yaml", "beta", "inf"),
    ("grpo.yaml", "beta", "-inf"),
    ("grpo.yaml", "beta", "nan"),
    ("grpo_reverse_kl.yaml", "divergence_coef", "inf"),
    ("forward_kl.yaml", "divergence_coef", "Infinity"),
    ("sequence_kl.yaml", "sequence_kl_coef", "inf"),
    ("alpha_dpg.yaml", "dpg_clip", "inf"),
    ("grpo.yaml", "max_grad_norm", "inf"),
    ("grpo.yaml", "epsilon_high", "inf"),
    ("grpo.yaml", "delta", "inf"),
    ("grpo.yaml", "save_steps", "inf"),  # TrainingArguments' int() of it: OverflowError
    ("grpo.yaml", "warmup_steps", "nan"),
]


@pytest.mark.parametrize(("base", "key", "value"), CLI_INFINITIES)
def test_infinity_on_the_command_line_names_the_key(base, key, value, tmp_path, capsys, no_model_loads):
    line = _refused(["--config", str(RECIPES / base), f"--{key}", value], tmp_path / "o", capsys)
    assert line.startswith(f"error: {key}") and "finite number" in line, line


YAML_INFINITIES = [
    ("grpo.yaml", "beta: .inf", "beta=inf"),
    ("grpo.yaml", "beta: .nan", "beta=nan"),
    ("grpo.yaml", "beta: inf", "beta=inf"),  # YAML text: converted like the command line, and refused
    ("grpo_reverse_kl.yaml", "divergence_coef: .inf", "divergence_coef must"),
    ("grpo_reverse_kl.yaml", "beta: .inf\ndivergence_coef: null", "beta must"),
    ("grpo.yaml", "delta: -.inf", "delta must"),
    ("grpo.yaml", "logging_steps: .inf", "logging_steps=inf"),  # TrainingArguments' int() of it: OverflowError
    ("grpo.yaml", "reward_weights: [.inf]", "reward_weights must"),
]


@pytest.mark.parametrize(("base", "text", "named"), YAML_INFINITIES)
def test_infinity_in_a_recipe_names_the_key(base, text, named, tmp_path, capsys, no_model_loads):
    line = _refused(["--config", _recipe(tmp_path, base, text)], tmp_path / "o", capsys)
    assert line.startswith(f"error: {named}") and "finite number" in line, line


def test_finite_numbers_still_parse(tmp_path):
    _, training, _ = parse_recipe(["--config", str(RECIPES / "grpo.yaml"), "--beta", "0.5", "--max_grad_norm", "1e3",
                                   "--delta", "none", "--output_dir", str(tmp_path / "o")])  # fmt: skip
    assert training.beta == 0.5 and training.max_grad_norm == 1000.0 and training.delta is None


# --------------------------------------------------------------------------------------------- loss_type


def test_an_unknown_loss_type_names_trls_loss_types(tmp_path, capsys, no_model_loads):
    from trl import GRPOConfig

    from rlvr_div.recipe.checks import trl_loss_types

    accepted = trl_loss_types(GRPOConfig)
    assert {"grpo", "dapo", "dr_grpo", "bnpo"} <= set(accepted)  # read from the installed TRL's help text
    for base in ("grpo.yaml", "forward_kl.yaml", "alpha_dpg.yaml"):
        line = _refused(["--config", str(RECIPES / base), "--loss_type", "foo"], tmp_path / "o", capsys)
        assert "loss_type='foo'" in line and ", ".join(accepted) in line, line
    line = _refused(["--config", _recipe(tmp_path, "grpo.yaml", "loss_type: Dapo")], tmp_path / "o", capsys)
    assert "loss_type='Dapo'" in line
    for good in accepted:
        parse_recipe(["--config", str(RECIPES / "grpo.yaml"), "--loss_type", good, "--output_dir", str(tmp_path)])


def test_loss_types_from_a_literal_or_from_choices():
    from rlvr_div.recipe.checks import trl_loss_types

    @dataclasses.dataclass
    class WithLiteral:
        loss_type: Literal["a", "b"] = "a"

    @dataclasses.dataclass
    class WithChoices:
        loss_type: str = dataclasses.field(default="x", metadata={"choices": ["x", "y"], "help": "anything"})

    @dataclasses.dataclass
    class Unreadable:
        loss_type: str = dataclasses.field(default="x", metadata={"help": "the loss"})

    assert trl_loss_types(WithLiteral) == ("a", "b")
    assert trl_loss_types(WithChoices) == ("x", "y")
    assert trl_loss_types(Unreadable) == ()  # nothing to check against: left to TRL


# --------------------------------------------------------------------------------------------- reward_kwargs

MODULE = """
def digits_match(completions, answer, strict=True, **kwargs):
    return [float(c.strip() == a if strict else a in c) for c, a in zip(completions, answer)]


def anything_goes(completions, answer, **kwargs):
    return [float(c == a) for c, a in zip(completions, answer)]


anything_goes.accepts_any_kwargs = True
"""

CLASSES = """
from rlvr_div.rewards.base import Reward


class Strict(Reward):
    name = "strict"
    columns = ("answer",)

    def __init__(self, strict=True, **kwargs):
        self.strict = strict

    def score(self, completions, answer):
        return [1.0 for _ in completions]


def make_strict(strict=True, **kwargs):
    return Strict(strict)
"""


@pytest.fixture
def rewards_module(tmp_path, monkeypatch):
    (tmp_path / "recipe_checks_rewards.py").write_text(textwrap.dedent(MODULE) + textwrap.dedent(CLASSES))
    monkeypatch.syspath_prepend(str(tmp_path))
    return "recipe_checks_rewards"


def test_a_misspelt_setting_of_a_reward_that_takes_kwargs_is_one_line(rewards_module, tmp_path, capsys,
                                                                      no_model_loads):  # fmt: skip
    import json

    for attr in ("digits_match", "Strict", "make_strict"):
        name = f"{rewards_module}:{attr}"
        argv = ["--config", str(RECIPES / "grpo.yaml"), "--rewards", name]
        line = _refused([*argv, "--reward_kwargs", json.dumps({name: {"strcit": False}})], tmp_path / "o", capsys)
        assert f"reward {name!r} takes no setting 'strcit'" in line and "strict" in line, line
        parse_recipe([*argv, "--reward_kwargs", json.dumps({name: {"strict": False}}), "--output_dir", str(tmp_path)])


def test_a_reward_that_accepts_any_setting_says_so(rewards_module):
    from rlvr_div.rewards import get_reward

    reward = get_reward(f"{rewards_module}:anything_goes", strcit=False)
    assert reward.settings() == {"strcit": False}
    with pytest.raises(ConfigError, match="takes no setting 'strcit'; its settings: strict"):
        get_reward(f"{rewards_module}:digits_match", strcit=False)


# --------------------------------------------------------------------------------------------- booleans


@pytest.mark.parametrize("text", ['"yes"', "1", "0", "'1'", '"on"', "2.0", '"t"'])
def test_a_boolean_key_in_a_recipe_takes_true_or_false_only(text, tmp_path, capsys, no_model_loads):
    line = _refused(["--config", _recipe(tmp_path, "grpo.yaml", f"use_cpu: {text}")], tmp_path / "o", capsys)
    assert "use_cpu=" in line and "true or false" in line, line


@pytest.mark.parametrize("value", ["yes", "1", "0", "t", "n", "on"])
def test_a_boolean_key_on_the_command_line_takes_true_or_false_only(value, tmp_path, capsys, no_model_loads):
    line = _refused(["--config", str(RECIPES / "grpo.yaml"), "--use_cpu", value], tmp_path / "o", capsys)
    assert f"use_cpu={value!r}" in line and "true or false" in line, line


def test_booleans_written_as_booleans_still_parse(tmp_path):
    out = ["--output_dir", str(tmp_path / "o")]
    for text, want in (("use_cpu: true", True), ("use_cpu: false", False), ("use_cpu: 'True'", True),
                       ("use_cpu: 'false'", False)):  # fmt: skip
        _, training, _ = parse_recipe(["--config", _recipe(tmp_path, "grpo.yaml", text), *out])
        assert training.use_cpu is want, text
    for argv, want in ((["--use_cpu", "false"], False), (["--use_cpu", "TRUE"], True), (["--use_cpu"], True),
                       (["--use_cpu=false"], False)):  # fmt: skip
        _, training, _ = parse_recipe(["--config", str(RECIPES / "grpo.yaml"), *argv, *out])
        assert training.use_cpu is want, argv
