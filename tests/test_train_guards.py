"""A training set too small for one step is refused before the model loads (TRL would train 0 steps, exit 0)."""

import pytest

from rlvr_div.errors import ConfigError
from rlvr_div.recipe import parse_recipe
from rlvr_div.train import build_trainer


def test_too_few_prompts_for_one_step_is_one_line(tmp_path, no_model_loads):
    script, training, model = parse_recipe([
        "--config", "recipes/tiny/grpo.yaml", "--task", "pairsum", "--task_options", '{"max_target": 25}',
        "--per_device_train_batch_size", "128", "--output_dir", str(tmp_path / "o"),
    ])  # fmt: skip
    with pytest.raises(ConfigError, match="has 12 prompts but one step samples 16 distinct prompts"):
        build_trainer(script, training, model)


@pytest.mark.parametrize("value", ["-0.1", "inf"])
def test_a_negative_or_infinite_beta_is_one_line(tmp_path, value, no_model_loads):
    """Stock GRPO with a negative KL coefficient would train away from its base; an infinite one fails at step 1
    (refused while parsing, as any non-finite number: tests/test_recipe_checks.py)."""
    from rlvr_div.recipe import validate

    with pytest.raises(ConfigError, match=f"beta={value} is out of range: it must be >= 0"):
        script, training, model = parse_recipe(
            ["--config", "recipes/tiny/grpo.yaml", "--beta", value, "--output_dir", str(tmp_path / "o")]
        )
        validate(script, training, model)  # the pre-load checks every trainer runs


def test_a_recipe_that_sets_a_key_twice_is_one_line(tmp_path, no_model_loads):
    recipe = tmp_path / "r.yaml"
    recipe.write_text("trainer: grpo\nbeta: 0.1\nlearning_rate: 1.0e-4\nbeta: 0.0\n")
    with pytest.raises(ConfigError, match="sets key 'beta' twice"):
        parse_recipe(["--config", str(recipe), "--output_dir", str(tmp_path / "o")])
