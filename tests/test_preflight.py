"""Pre-load checks that need more than a lookup (rlvr_div.recipe.checks, rlvr_div.models.hub and .lora_targets): a
hub id with no network answers in one line within seconds, LoRA targets are matched against the model's module names
before the load (and peft's own error after a load is one line), logging backends are checked before the load,
push_to_hub without the hub is one line."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from rlvr_div import ranges
from rlvr_div.cli import main as cli_main
from rlvr_div.errors import ConfigError
from rlvr_div.models import hub, lora_targets
from rlvr_div.recipe import checks

RECIPE = str(Path(__file__).resolve().parents[1] / "recipes" / "tiny" / "grpo.yaml")
REFUSED = "http://127.0.0.1:9"  # nothing listens on the discard port: every request fails at once, like no network


def _one_error_line(capsys: pytest.CaptureFixture) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: "), err
    return err[0]


@pytest.fixture
def online_without_network(monkeypatch):
    """HF_HUB_OFFLINE unset (as in the README quickstart) and a hub that cannot be reached."""
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "ENDPOINT", REFUSED)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)


def test_unknown_hub_id_without_network_is_one_line_and_fast(online_without_network, capsys, no_model_loads, tmp_path):
    argv = ["train", "--config", RECIPE, "--output_dir", str(tmp_path), "--model_name_or_path", "org/nope"]
    assert cli_main(argv) == 2
    line = _one_error_line(capsys)
    assert "cannot reach the Hugging Face Hub" in line and "'org/nope'" in line
    t0 = time.perf_counter()  # again, with the libraries imported: the time the check itself takes
    assert cli_main(argv) == 2
    seconds = time.perf_counter() - t0
    assert "cannot reach the Hugging Face Hub" in _one_error_line(capsys)
    assert seconds < 5, f"{seconds:.1f} s"  # transformers' own retries took 57 s here


def test_hub_ids_offline_and_cached(monkeypatch, tmp_path):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(ConfigError, match="not in the Hugging Face cache, and HF_HUB_OFFLINE is set"):
        hub.check_hub_model("org/nope")
    with pytest.raises(ConfigError, match="valid Hugging Face Hub id"):
        hub.check_hub_model("a/b/c/../d")
    # a model in the hub cache passes without any request
    snapshot = tmp_path / "models--org--cached" / "snapshots" / ("0" * 40)
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text("{}")
    (tmp_path / "models--org--cached" / "refs").mkdir()
    (tmp_path / "models--org--cached" / "refs" / "main").write_text("0" * 40)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path))
    hub.check_hub_model("org/cached")


def test_push_to_hub_without_the_hub_is_one_line(online_without_network, capsys, no_model_loads, tmp_path):
    assert cli_main(["train", "--config", RECIPE, "--output_dir", str(tmp_path), "--push_to_hub", "true"]) == 2
    assert "push_to_hub=true but the Hugging Face Hub cannot be reached" in _one_error_line(capsys)


def test_lora_targets_are_checked_before_the_load(tiny_path, capsys, no_model_loads, tmp_path):
    base = ["train", "--config", RECIPE, "--output_dir", str(tmp_path), "--use_peft", "true"]
    assert cli_main([*base, "--lora_target_modules", "q_proj", "v_prj"]) == 2
    line = _one_error_line(capsys)
    assert "'v_prj' matches no module of tiny" in line and "q_proj" in line and "v_proj" in line
    assert cli_main([*base, "--lora_target_modules", "mlp"]) == 2
    assert "'mlp' names LlamaMLP modules, which LoRA cannot wrap" in _one_error_line(capsys)


def test_good_lora_targets_pass(tiny_path):
    from rlvr_div.recipe import parse_recipe

    for targets in (["q_proj", "v_proj"], ["all-linear"], ["self_attn.o_proj"]):
        _, _, model = parse_recipe(["--config", RECIPE, "--use_peft", "true", "--lora_target_modules", *targets])
        lora_targets.check_lora_targets(model, tiny_path)


def test_peft_refusing_targets_after_a_load_is_one_line():
    """When the config is not on disk before the load, peft's own error is turned into one line."""
    from peft import LoraConfig, get_peft_model
    from transformers import LlamaConfig, LlamaForCausalLM

    model = LlamaForCausalLM(LlamaConfig(vocab_size=16, hidden_size=8, intermediate_size=16, num_hidden_layers=1,
                                         num_attention_heads=2, num_key_value_heads=2))  # fmt: skip

    class Args:
        lora_target_modules = ["q_prj"]

    for targets in (["q_prj"], ["mlp"]):
        with pytest.raises(ValueError) as info:
            get_peft_model(model, LoraConfig(target_modules=targets, task_type="CAUSAL_LM"))
        assert lora_targets.is_lora_target_error(info.value)
        Args.lora_target_modules = targets
        line = lora_targets.lora_error_line(info.value, Args)
        assert "\n" not in line and line.startswith(f"lora_target_modules={targets}")
    assert not lora_targets.is_lora_target_error(ValueError("something else"))


def test_report_to_needs_an_installed_backend(monkeypatch, capsys, no_model_loads, tmp_path):
    from transformers.integrations import integration_utils

    monkeypatch.setattr(integration_utils, "is_tensorboard_available", lambda: False)
    assert cli_main(["train", "--config", RECIPE, "--output_dir", str(tmp_path), "--report_to", "tensorboard"]) == 2
    assert "tensorboard is not installed: pip install -e '.[tensorboard]'" in _one_error_line(capsys)
    monkeypatch.setattr(integration_utils, "is_wandb_available", lambda: False)
    assert cli_main(["train", "--config", RECIPE, "--output_dir", str(tmp_path), "--report_to", "wandb"]) == 2
    assert "wandb is not installed: pip install -e '.[wandb]'" in _one_error_line(capsys)


def test_report_to_names_known_backends():
    class Args:
        report_to = ["tensorbord"]

    with pytest.raises(ConfigError, match="unknown report_to backend 'tensorbord'; known: none, all, .*tensorboard"):
        checks.check_report_to(Args)
    Args.report_to = ["none"]
    checks.check_report_to(Args)


def test_ranges_read_as_intervals():
    assert str(ranges.POSITIVE) == "> 0" and str(ranges.AT_LEAST_ONE) == ">= 1"
    assert str(ranges.PROBABILITY) == "in (0, 1]" and str(ranges.HALF_OPEN_UNIT) == "in [0, 1)"
    assert 1.0 in ranges.PROBABILITY and 0.0 not in ranges.PROBABILITY
    assert float("nan") not in ranges.NON_NEGATIVE and float("inf") not in ranges.POSITIVE
