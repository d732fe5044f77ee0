"""LoRA adapters: one trained on ``tiny`` stores ``rlvr_div/tiny_bases/tiny-<spec hash>`` (the shipped base's
package-relative directory) as its base and still loads after the cache moves; ``rlvr-div merge`` writes a full
model with the adapter's log-probs; merge's bad input is one line."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from rlvr_div.cli import main as cli_main

REPO = Path(__file__).resolve().parents[1]
RECIPE = str(REPO / "recipes" / "tiny" / "grpo.yaml")


def _base_name(adapter_dir: Path) -> str:
    return json.loads((adapter_dir / "adapter_config.json").read_text())["base_model_name_or_path"]


@pytest.fixture(scope="module")
def random_adapter(tiny_path, tmp_path_factory):
    """A LoRA adapter on the tiny base with random A and B (so it changes the model), saved by peft."""
    import torch
    from peft import LoraConfig, get_peft_model

    from rlvr_div.models import load_model

    torch.manual_seed(0)
    config = LoraConfig(r=4, lora_alpha=8, target_modules="all-linear", init_lora_weights=False, task_type="CAUSAL_LM")
    model = get_peft_model(load_model(tiny_path), config)
    path = tmp_path_factory.mktemp("adapter")
    model.save_pretrained(path)
    return path


def _logprobs(model, ids):
    import torch

    with torch.no_grad():
        logits = model(input_ids=ids).logits[:, :-1].float()
    return torch.log_softmax(logits, -1).gather(-1, ids[:, 1:, None])[..., 0]


def test_merged_model_gives_the_adapters_logprobs(random_adapter, tiny_path, tmp_path):
    import torch
    from peft import PeftModel

    from rlvr_div.models import load_model, load_tokenizer

    out = tmp_path / "merged"
    assert cli_main(["merge", "--adapter", str(random_adapter), "--out", str(out)]) == 0
    assert not (out / "adapter_config.json").exists() and (out / "model.safetensors").is_file()
    tok = load_tokenizer(str(out))
    ids = tok(["12+34=46", "7*8=56", "pairs: 3,4"], return_tensors="pt", padding=True).input_ids
    with_adapter = _logprobs(PeftModel.from_pretrained(load_model(tiny_path), str(random_adapter)).eval(), ids)
    merged = _logprobs(load_model(str(out)).eval(), ids)
    base = _logprobs(load_model(tiny_path).eval(), ids)
    assert (with_adapter - base).abs().max() > 1e-2  # the adapter matters, so the comparison below means something
    torch.testing.assert_close(merged, with_adapter, atol=1e-5, rtol=1e-5)


def test_merge_bad_input_is_one_line(random_adapter, tmp_path, capsys, no_model_loads):
    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "x").write_text("x")
    cases = [
        (["--adapter", str(tmp_path / "nope"), "--out", str(tmp_path / "o")], "is not a directory"),
        (["--adapter", str(taken), "--out", str(tmp_path / "o")], "holds no adapter_config.json"),
        (["--adapter", str(random_adapter), "--out", str(taken)], "is not an empty directory"),
        (["--adapter", str(random_adapter), "--out", str(random_adapter)], "--out must differ from --adapter"),
        (["--adapter", str(random_adapter), "--out", str(tmp_path / "o"), "--dtype", "int3"], "--dtype 'int3'"),
    ]
    for args, message in cases:
        assert cli_main(["merge", *args]) == 2, args
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("error: ") and message in err[0], (args, err)


def test_adapter_trained_on_tiny_survives_a_moved_cache(tiny_path, tmp_path, monkeypatch):
    """Train a LoRA adapter with the cache in A: the adapter and its checkpoint store the shipped base's
    package-relative directory, ``rlvr_div/tiny_bases/tiny-<hash>``, and its model card names ``tiny``. Move A to B:
    the adapter (and one saved the old way, with A's absolute path) still evaluates and merges."""
    from peft import get_peft_model

    from rlvr_div.models import load_model, lora_config
    from rlvr_div.models.tiny_base import TinySpec

    name = f"tiny-{TinySpec().key()}"
    cache_a, cache_b = tmp_path / "cache_a", tmp_path / "cache_b"
    shutil.copytree(tiny_path, cache_a / name)
    run = tmp_path / "lora"
    env = {**os.environ, "RLVR_DIV_CACHE": str(cache_a), "HF_HUB_OFFLINE": "1"}
    cmd = [sys.executable, "-m", "rlvr_div.train", "--config", RECIPE, "--output_dir", str(run), "--max_steps", "2",
           "--save_steps", "1", "--use_peft", "true", "--lora_target_modules", "all-linear",
           "--model_revision", "v1", "--disable_tqdm", "true"]  # fmt: skip
    proc = subprocess.run(cmd, env=env, cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert _base_name(run) == f"rlvr_div/tiny_bases/{name}"
    card = (run / "README.md").read_text()
    assert "fine-tuned version of `tiny`" in card and "None" not in card
    # the base revision trained on is recorded (a local base ignores it; a hub base is loaded at it again)
    assert json.loads((run / "adapter_config.json").read_text())["revision"] == "v1"
    assert _base_name(run / "checkpoint-2") == f"rlvr_div/tiny_bases/{name}"
    old_style = tmp_path / "old_style"  # saved as peft does by itself: the absolute path of the base in cache A
    get_peft_model(load_model(str(cache_a / name)), lora_config(r=4, alpha=8)).save_pretrained(old_style)
    assert _base_name(old_style) == str(cache_a / name)

    (cache_a).rename(cache_b)
    monkeypatch.setenv("RLVR_DIV_CACHE", str(cache_b))
    for adapter in (run, old_style):
        out = tmp_path / f"eval_{adapter.name}"
        args = ["--model", f"m={adapter}", "--task", "arith", "--n", "2", "--limit", "2", "--max-new-tokens", "4"]
        assert cli_main(["eval", *args, "--quiet", "--threads", "1", "--output-dir", str(out)]) == 0
        assert json.loads((out / "m" / "results.json").read_text())["metrics"]["problems"] == 2
    assert cli_main(["merge", "--adapter", str(run), "--out", str(tmp_path / "merged")]) == 0


def test_an_adapter_is_loaded_on_the_base_revision_it_records(random_adapter, tmp_path, monkeypatch):
    """peft's ``revision`` in ``adapter_config.json`` reaches every load of the base: merge, eval's model reference
    and the fingerprint (a hub base at another revision is another model)."""
    import transformers

    from eval.runner import load_for_eval, resolve_model_ref
    from rlvr_div.models.fingerprint import model_fingerprint

    adapter = tmp_path / "adapter"
    shutil.copytree(random_adapter, adapter)
    config = json.loads((adapter / "adapter_config.json").read_text())
    (adapter / "adapter_config.json").write_text(json.dumps({**config, "revision": "v1"}))
    seen = []
    load = transformers.AutoModelForCausalLM.from_pretrained

    def spy(path, *args, **kwargs):
        seen.append(kwargs.get("revision"))
        return load(path, *args, **kwargs)

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", spy)
    assert cli_main(["merge", "--adapter", str(adapter), "--out", str(tmp_path / "merged")]) == 0
    assert seen == ["v1"]
    ref = resolve_model_ref("m", str(adapter))
    assert ref.revision == "v1"
    load_for_eval(ref, SimpleNamespace(dtype="float32", device="cpu"))  # eval's HF backend
    assert seen == ["v1", "v1"]
    assert resolve_model_ref("m", str(random_adapter)).revision is None  # none recorded: the default branch
    on_hub = tmp_path / "on_hub"
    shutil.copytree(adapter, on_hub)
    (on_hub / "adapter_config.json").write_text(
        json.dumps({**config, "base_model_name_or_path": "org/m", "revision": "v1"})
    )
    assert model_fingerprint(str(on_hub)) == model_fingerprint("org/m", str(on_hub), revision="v1")
    assert model_fingerprint(str(on_hub)) != model_fingerprint("org/m", str(on_hub), revision="main")


def test_tiny_of_another_spec_is_one_line(tmp_path, monkeypatch, no_model_loads):
    from rlvr_div.errors import ConfigError
    from rlvr_div.models import portable_model_name, resolve_model

    monkeypatch.setenv("RLVR_DIV_CACHE", str(tmp_path))
    assert portable_model_name("tiny").startswith("rlvr_div/tiny_bases/tiny-")
    assert resolve_model(portable_model_name("tiny"), build=False) == "tiny"
    with pytest.raises(ConfigError, match="spec hash 000000000000, but this rlvr-div builds"):
        resolve_model("/gone/cache/tiny-000000000000")
    (tmp_path / "tiny-000000000000").mkdir()
    (tmp_path / "tiny-000000000000" / "config.json").write_text("{}")
    assert resolve_model("tiny-000000000000") == str(tmp_path / "tiny-000000000000")
