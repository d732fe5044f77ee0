"""Every recipe key refuses a value of the wrong type with one line, before any model loads: a YAML value is not
converted by the command-line parser, so without this check `max_steps: 5.5` or `rewards: arith_exact` reached the
trainer. The walk covers every field of the script arguments, every trainer's config and TRL's ModelConfig."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import yaml

from rlvr_div.cli import main as cli_main
from rlvr_div.errors import ConfigError
from rlvr_div.recipe import ScriptArguments, parse_recipe
from rlvr_div.recipe.value_types import field_types

TINY = yaml.safe_load((Path(__file__).resolve().parents[1] / "recipes/tiny/grpo.yaml").read_text())
MAPPING = {"wrong": [1]}  # wrong for any key whose type is not a mapping
NESTED_LIST = [[1]]  # wrong for the mapping-typed keys (a list of lists is no field's type)


def _wrong_value(annotation: object) -> object:
    return NESTED_LIST if "dict" in str(annotation) else MAPPING


def _all_keys() -> list[tuple[str, str, object]]:
    from trl import ModelConfig

    from rlvr_div.trainers import TRAINERS

    out, seen = [], set()
    for trainer in TRAINERS.names():
        for cls in (ScriptArguments, TRAINERS.get(trainer).config_class(), ModelConfig):
            # the annotations, not Field.type: transformers' HfArgumentParser rewrites Field.type in place once a
            # parser is built (`dict | str | None` becomes `str`), so Field.type depends on which tests ran before
            annotations = field_types(cls)
            for f in dataclasses.fields(cls):
                if f.name not in seen and f.init:
                    seen.add(f.name)
                    out.append((trainer, f.name, _wrong_value(annotations[f.name])))
    return out


def test_every_recipe_key_refuses_a_wrong_type(tmp_path, no_model_loads):
    keys = _all_keys()
    assert len(keys) > 200  # the walk sees TrainingArguments, GRPOConfig, our configs and ModelConfig
    refused = set()
    for trainer, key, value in keys:
        recipe = tmp_path / "recipe.yaml"
        recipe.write_text(yaml.safe_dump({**TINY, "trainer": trainer, key: value}))
        try:
            parse_recipe(["--config", str(recipe), "--output_dir", str(tmp_path / "out")])
        except ConfigError as e:
            message = str(e)
            assert "\n" not in message and f"{key}=" in message and "wrong type" in message, (key, message)
            refused.add(key)
    assert {k for _, k, _ in keys} == refused


CASES = [
    ("max_steps", 5.5, "must be a whole number"),
    ("num_generations", 8.0, "must be a whole number"),
    ("learning_rate", [1, 2], "must be a number"),
    ("beta", None, "must be a number"),
    ("seed", [1], "must be a whole number"),
    ("rewards", "arith_exact", "(a list: [arith_exact])"),
]


@pytest.mark.parametrize(("key", "value", "message"), CASES)
def test_the_reported_wrong_types_are_one_line(key, value, message, tmp_path, capsys, no_model_loads):
    recipe = {**TINY, key: value}
    (tmp_path / "r.yaml").write_text(yaml.safe_dump(recipe))
    assert cli_main(["train", "--config", str(tmp_path / "r.yaml"), "--output_dir", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: recipe key {key}=") and message in err[0], err


def test_yaml_text_numbers_still_convert(tmp_path):
    """YAML reads `1e-4` as text; the command-line parser converts it, so it is not a wrong type."""
    base = {k: v for k, v in TINY.items() if k not in ("learning_rate", "max_steps")}  # each key once
    (tmp_path / "r.yaml").write_text(yaml.safe_dump(base) + "learning_rate: 1e-4\nmax_steps: '3'\n")
    _, training, _ = parse_recipe(["--config", str(tmp_path / "r.yaml"), "--output_dir", str(tmp_path / "o")])
    assert training.learning_rate == 1e-4 and training.max_steps == 3


@pytest.mark.parametrize(
    ("key", "ours"), [("dataset_name", "data_path"), ("reward_funcs", "rewards"), ("torch_dtype", "dtype")]
)
def test_trl_names_get_a_hint(key, ours, tmp_path, capsys, no_model_loads):
    (tmp_path / "r.yaml").write_text(f"{key}: x\n")
    assert cli_main(["train", "--config", str(tmp_path / "r.yaml")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"unknown recipe key {key!r}" in err[0] and ours in err[0], err
    assert cli_main(["train", "--use_cpu", "true", f"--{key}", "x"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"unknown command line key {key!r}" in err[0] and ours in err[0], err


def test_a_resolved_recipe_runs_as_config(tmp_path):
    """The recipe.yaml a run writes (sections script/training/model/launch/history) parses back to the same run."""
    from dataclasses import asdict

    from rlvr_div.run_dir import RunStart, write_resolved_recipe

    recipe = Path(__file__).resolve().parents[1] / "recipes/tiny/forward_kl.yaml"
    argv = ["--config", str(recipe), "--output_dir", str(tmp_path / "run"), "--max_steps", "7"]
    script, training, model = parse_recipe(argv)
    training.model_init_kwargs = {"dtype": model.dtype, "revision": model.model_revision}  # as train.py fills it
    resolved = {"script": asdict(script), "training": training.to_dict(), "model": asdict(model),
                "launch": {"processes": 1}}  # fmt: skip
    write_resolved_recipe(str(tmp_path / "run"), resolved, RunStart("new"))
    again = parse_recipe(["--config", str(tmp_path / "run" / "recipe.yaml")])
    assert again[0] == script and again[2] == model
    got, want = again[1].to_dict(), parse_recipe(argv)[1].to_dict()
    assert {k: (got[k], want.get(k)) for k in got if got[k] != want.get(k)} == {}


def test_threads_and_use_vllm_are_checked_before_the_load(tmp_path, capsys, no_model_loads):
    from rlvr_div.sampling import vllm_available

    base = ["train", "--config", str(Path(__file__).resolve().parents[1] / "recipes/tiny/grpo.yaml")]
    base += ["--output_dir", str(tmp_path / "o")]
    assert cli_main([*base, "--threads", "0"]) == 2
    assert "threads=0 is out of range" in capsys.readouterr().err
    if not vllm_available():
        assert cli_main([*base, "--use_vllm", "true"]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "use_vllm=true needs the vllm package" in err[0], err
