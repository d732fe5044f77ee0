"""Exact measurement beyond the tiny model's character tokenizer: chat prompts, valid strings that carry their own
end (no EOS), canonical vs non-canonical tokenisations of a BPE vocabulary, and exact μ against sampling."""

from __future__ import annotations

import math

import pytest
import torch

from rlvr_div.exact import canonical_ids, exact_prompts, prompt_metrics, sequence_logprobs
from rlvr_div.exact.noncanonical import TokenisationCounts, classify, sample_tokenisations, summarise_tokenisations
from rlvr_div.tasks.synthetic import pairsum_valid

pytest.importorskip("gguf")

from gguf_fixture import smollm2_gguf, write_tiny_gguf  # noqa: E402


@pytest.fixture(scope="module")
def bpe(tmp_path_factory):
    """(tokenizer, model) of the GGUF test model: a byte-BPE vocabulary with the merge ``s u``, a chat template."""
    import os

    from rlvr_div.models import load_model, load_tokenizer

    d = tmp_path_factory.mktemp("gguf")
    write_tiny_gguf(d / "t.gguf")
    old = os.environ.get("RLVR_DIV_CACHE")
    os.environ["RLVR_DIV_CACHE"] = str(d / "cache")
    try:
        return load_tokenizer(str(d / "t.gguf")), load_model(str(d / "t.gguf")).eval()
    finally:
        if old is None:
            del os.environ["RLVR_DIV_CACHE"]
        else:
            os.environ["RLVR_DIV_CACHE"] = old


def test_classify_tells_canonical_from_other_spellings_of_a_valid_text(bpe):
    tok, _ = bpe
    su, s, u = (tok.convert_tokens_to_ids(t) for t in ("su", "s", "u"))
    eos = tok.eos_token_id
    assert canonical_ids(tok, "sum") == [su, tok.convert_tokens_to_ids("m"), eos]
    m = tok.convert_tokens_to_ids("m")
    valid = ["sum", "s"]
    assert classify(tok, [su, m, eos], valid) == (True, True)
    assert classify(tok, [s, u, m, eos], valid) == (True, False)  # the same text, spelled without the merge
    assert classify(tok, [su, m], valid) == (False, False)  # never ended
    assert classify(tok, [u, eos], valid) == (False, False)
    nl = tok.convert_tokens_to_ids("Ċ") if "Ċ" in tok.get_vocab() else None
    if nl is None:  # the test vocabulary has no newline: a prefix-ended valid string uses ":" as its end
        end = tok.convert_tokens_to_ids(":")
        assert classify(tok, [s, u, end, s], ["su:"], append_eos=False) == (True, False)
        assert classify(tok, [su, end, u, u], ["su:"], append_eos=False) == (True, True)


def test_chat_prompts_are_teacher_forced_on_the_chat_template_tokens(bpe):
    tok, model = bpe
    messages = [{"role": "user", "content": "sum 4:"}]
    ids = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=True)["input_ids"]
    (lp,) = sequence_logprobs(model, tok, [messages], [["1+3"]])
    full = list(ids) + canonical_ids(tok, "1+3")
    with torch.no_grad():
        logp = model(input_ids=torch.tensor([full])).logits[0].double().log_softmax(-1)
    expected = sum(float(logp[t - 1, full[t]]) for t in range(len(ids), len(full)))
    assert lp[0] == pytest.approx(expected, abs=1e-5)


@pytest.fixture(scope="module")
def tiny(tiny_path):
    from transformers import AutoModelForCausalLM

    from rlvr_div.models import load_tokenizer

    return load_tokenizer(tiny_path), AutoModelForCausalLM.from_pretrained(tiny_path).eval()


@pytest.mark.parametrize("append_eos", [True, False])
def test_exact_validity_agrees_with_the_sampled_canonical_rate(tiny, append_eos):
    """Exact μ (canonical sequences, with or without EOS) and the sampled canonical rate agree within 4 standard
    errors; the tiny model's character tokenizer has one spelling per text, so the non-canonical mass is near 0."""
    tok, model = tiny
    prompts, n = ["sum 9:", "sum 20:"], 1500
    valid = [pairsum_valid({"target": 9}), pairsum_valid({"target": 20})]
    exact = exact_prompts(model, model, tok, prompts, valid, append_eos=append_eos)
    mus = [prompt_metrics(e, [1])["mu"] for e in exact]
    counts = sample_tokenisations(model, tok, prompts, valid, n=n, append_eos=append_eos, seed=3)
    summary = summarise_tokenisations(counts)
    mu = sum(mus) / len(mus)
    assert 0.05 < mu < 0.95
    assert abs(summary["canonical_rate"] - mu) < 4 * summary["canonical_rate_se"], (summary, mu)
    # one spelling per text, except texts that decode valid once special tokens are dropped ("3+<pad>4"): rare
    assert summary["noncanonical_mass"] < 0.005
    if not append_eos:  # a valid pair as a prefix is at least as likely as the pair then EOS
        with_eos = exact_prompts(model, model, tok, prompts, valid)
        assert all(prompt_metrics(a, [1])["mu"] <= m + 1e-12 for a, m in zip(with_eos, mus))


@pytest.mark.slow
def test_smollm2_between_exact_mu_agrees_with_sampling_and_the_noncanonical_mass_is_measured():
    """SmolLM2-135M-Instruct on three `between` prompts: exact μ against 200 samples per prompt (the canonical
    rate), and the task's verifier accepts exactly the samples counted valid (canonical or not)."""
    from rlvr_div.models import load_model, load_tokenizer
    from rlvr_div.rewards import get_reward
    from rlvr_div.sampling import HFSampler, SamplingConfig
    from rlvr_div.tasks import get_task
    from rlvr_div.tasks.between import between_valid

    d, name = smollm2_gguf()
    tok, model = load_tokenizer(d, name), load_model(d, name).eval()
    rows = list(get_task("between", split="test").select(range(3)))
    prompts, valid = [r["prompt"] for r in rows], [between_valid(r) for r in rows]
    exact = exact_prompts(model, model, tok, prompts, valid, append_eos=False)
    mu = sum(prompt_metrics(e, [1])["mu"] for e in exact) / len(exact)
    n, reward = 200, get_reward("number_between")
    sampler = HFSampler(model, tok, SamplingConfig(n=n, max_new_tokens=8, seed=0, batch_size=200))
    counts = []
    for samples, row, v in zip(sampler.sample(prompts, progress=False), rows, valid):
        flags = [classify(tok, ids, v, append_eos=False) for ids in samples.completion_ids]
        scores = reward.score(samples.completions, low=[row["low"]] * n, high=[row["high"]] * n)
        assert [s == 1.0 for s in scores] == [f[0] for f in flags]  # text validity = the verifier's verdict
        counts.append(TokenisationCounts(n, sum(f[0] for f in flags), sum(f[1] for f in flags)))
    s = summarise_tokenisations(counts)
    assert 0.1 < mu < 0.8
    assert abs(s["canonical_rate"] - mu) < 4 * s["canonical_rate_se"], (s, mu)
    assert s["noncanonical_mass"] >= 0 and math.isfinite(s["noncanonical_mass_se"])
