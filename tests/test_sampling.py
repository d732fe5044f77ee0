"""rlvr_div.sampling (HF backend) on the tiny model: the sampling distribution, per-prompt reproducibility that does
not depend on the batch, log-probs, chat templates, and isolation from the model's own generation config."""

from __future__ import annotations

import math

import pytest
import torch

from rlvr_div.errors import ConfigError
from rlvr_div.logprobs import token_logprobs
from rlvr_div.sampling import (
    HFSampler,
    SamplingConfig,
    choose_tokens,
    encode_prompt,
    format_prompt,
    make_sampler,
)

PROMPTS = ["3+4=", "17+9=", "sum 12:", "25-8=", "sum 40:", "6+6="]
CHAT = (
    "{% for m in messages %}{{ m['role'][0] }}:{{ m['content'] }};{% endfor %}"
    "{% if add_generation_prompt %}a:{% endif %}"
)


@pytest.fixture(scope="module")
def tiny(tiny_path):
    """The tiny model, run with one torch thread (far faster than two on a CPU shared with other jobs)."""
    from rlvr_div.models import load_model, load_tokenizer

    saved = torch.get_num_threads()
    torch.set_num_threads(1)
    yield load_model(tiny_path).eval(), load_tokenizer(tiny_path)
    torch.set_num_threads(saved)


def run(tiny, prompts, indices=None, logprobs=False, **cfg):
    model, tok = tiny
    cfg.setdefault("max_new_tokens", 6)
    return list(HFSampler(model, tok, SamplingConfig(**cfg)).sample(prompts, indices, logprobs, progress=False))


# --------------------------------------------------------------------------------------------- choose_tokens


def test_choose_tokens_inverse_cdf_follows_the_tempered_nucleus_distribution():
    logits = torch.tensor([2.0, 1.0, 0.5, -1.0, -30.0])
    rows = 40_000
    u = torch.rand(rows, generator=torch.Generator().manual_seed(0))
    for temperature, top_p in [(1.0, 1.0), (0.7, 1.0), (1.3, 0.8)]:
        tokens, logp = choose_tokens(logits.expand(rows, -1), u, temperature, top_p)
        p = torch.softmax(logits / temperature, -1)
        keep = (p.cumsum(-1) - p) < top_p  # logits are sorted, so this is the nucleus
        q = torch.where(keep, p, torch.zeros_like(p))
        q = q / q.sum()
        freq = torch.bincount(tokens, minlength=5).double() / rows
        se = (q * (1 - q) / rows).sqrt()
        assert torch.all((freq - q).abs() <= 5 * se + 1e-9), (temperature, top_p, freq, q)
        torch.testing.assert_close(logp, q.log()[tokens].float(), rtol=0, atol=1e-5)
    assert (tokens != 4).all()  # outside the nucleus: never drawn


def test_choose_tokens_never_draws_a_zero_probability_token_and_greedy_is_argmax():
    logits = torch.tensor([[0.0, -math.inf, 1.0, -math.inf], [-math.inf, -math.inf, -math.inf, 3.0]])
    for u in (0.0, 0.5, 1.0 - 2**-24):
        tokens, _ = choose_tokens(logits, torch.full((2,), u), 1.0, 1.0)
        assert tokens[0] in (0, 2) and tokens[1] == 3
    tokens, logp = choose_tokens(logits, torch.zeros(2), 0.0, 1.0)
    assert tokens.tolist() == [2, 3] and logp is None


def test_sampling_config_rejects_bad_values():
    for bad in (dict(n=0), dict(temperature=-1), dict(top_p=0), dict(top_p=1.5), dict(batch_size=0)):
        with pytest.raises(ConfigError):
            SamplingConfig(**bad)
    assert SamplingConfig(n=8, batch_size=20).prompts_per_batch() == 2
    assert SamplingConfig(n=64, batch_size=20).prompts_per_batch() == 1


# --------------------------------------------------------------------------------------------- with the model


def test_samples_do_not_depend_on_the_batch(tiny):
    together = run(tiny, PROMPTS, n=6, seed=3, batch_size=64)  # all prompts in one generate call
    alone = [run(tiny, [p], [i], n=6, seed=3, batch_size=6)[0] for i, p in enumerate(PROMPTS)]
    split = run(tiny, PROMPTS[2:], list(range(2, 6)), n=6, seed=3, batch_size=4)  # n > batch_size: split samples
    for a, b in zip(together, alone):
        assert (a.index, a.completion_ids) == (b.index, b.completion_ids)
    for a, b in zip(together[2:], split):
        assert a.completion_ids == b.completion_ids
    assert [r.index for r in together] == list(range(6))
    assert all(len(r.completions) == 6 for r in together)


def test_seed_and_index_drive_the_samples_and_raising_n_keeps_the_first(tiny):
    a = run(tiny, PROMPTS, n=8, seed=0)
    b = run(tiny, PROMPTS, n=8, seed=1)
    c = run(tiny, PROMPTS, n=4, seed=0)
    assert [r.completions for r in a] != [r.completions for r in b]
    assert all(x.completions[:4] == y.completions for x, y in zip(a, c))
    shifted = run(tiny, PROMPTS, indices=[10, 11, 12, 13, 14, 15], n=8, seed=0)
    assert [r.completions for r in shifted] != [r.completions for r in a]


def test_completions_end_with_eos_and_decode_to_text(tiny):
    model, tok = tiny
    out = run(tiny, PROMPTS[:2], n=4, max_new_tokens=8)
    for r in out:
        assert r.prompt_ids == tok(r.prompt)["input_ids"]
        for text, ids, reason in zip(r.completions, r.completion_ids, r.finish_reasons):
            assert reason == "stop" and ids[-1] == tok.eos_token_id and tok.eos_token_id not in ids[:-1]
            assert text == tok.decode(ids, skip_special_tokens=True) and text
    short = run(tiny, PROMPTS[:1], n=4, max_new_tokens=1)[0]
    assert short.finish_reasons == ["length"] * 4 and all(len(ids) == 1 for ids in short.completion_ids)


def test_first_token_frequencies_match_the_model(tiny):
    model, tok = tiny
    n = 1500
    out = run(tiny, ["sum 30:"], n=n, max_new_tokens=1, batch_size=n, seed=5)[0]
    ids = torch.tensor(tok("sum 30:")["input_ids"])[None]
    with torch.no_grad():
        q = torch.softmax(model(ids).logits[0, -1].double(), -1)
    freq = torch.bincount(torch.tensor([c[0] for c in out.completion_ids]), minlength=q.numel()).double() / n
    se = (q * (1 - q) / n).sqrt()
    assert torch.all((freq - q).abs() <= 5 * se + 2e-3), (freq, q)


def test_logprobs_match_token_logprobs(tiny):
    model, tok = tiny
    for temperature, top_p in [(1.0, 1.0), (0.7, 1.0), (1.0, 0.6)]:
        out = run(tiny, PROMPTS, logprobs=True, n=4, temperature=temperature, top_p=top_p)
        prompts = [r.prompt_ids for r in out for _ in r.completion_ids]
        comps = [c for r in out for c in r.completion_ids]
        ref = token_logprobs(
            model, prompts, comps, temperature=temperature, batch_size=5, pad_token_id=tok.pad_token_id
        )
        got = [lp for r in out for lp in r.logprobs]
        assert [len(x) for x in got] == [len(c) for c in comps] == [len(x) for x in ref]
        for g, w in zip(got, ref):
            if top_p == 1.0:  # the sampling distribution is softmax(logits / T)
                assert g == pytest.approx(w, abs=1e-4)
            else:  # the nucleus renormalises: log q >= log p for every kept token
                assert all(a >= b - 1e-5 for a, b in zip(g, w))


def test_greedy_equals_generate(tiny):
    model, tok = tiny
    out = run(tiny, PROMPTS, n=3, temperature=0.0)
    for r in out:
        assert len(set(r.completions)) == 1
        ids = torch.tensor([r.prompt_ids])
        want = model.generate(ids, do_sample=False, max_new_tokens=6, pad_token_id=tok.pad_token_id)
        assert r.completion_ids[0] == want[0, ids.shape[1] :].tolist()[: len(r.completion_ids[0])]


def test_model_generation_config_is_not_applied(tiny):
    model, tok = tiny
    before = run(tiny, PROMPTS, n=4)
    saved = model.generation_config.suppress_tokens
    model.generation_config.suppress_tokens = [tok.convert_tokens_to_ids(ch) for ch in "0123456789"]
    try:
        after = run(tiny, PROMPTS, n=4)
    finally:
        model.generation_config.suppress_tokens = saved
    assert [r.completions for r in before] == [r.completions for r in after]
    assert model.generation_config.suppress_tokens == saved


def test_chat_prompts(tiny):
    model, tok = tiny
    messages = [{"role": "user", "content": "3+4="}]
    with pytest.raises(ConfigError, match="no chat template"):
        encode_prompt(tok, messages)
    assert format_prompt(tok, messages, chat_template=False) == ("3+4=", False)
    tok.chat_template = CHAT
    try:
        assert format_prompt(tok, messages) == ("u:3+4=;a:", True)
        assert format_prompt(tok, "3+4=", chat_template=True) == ("u:3+4=;a:", True)
        assert format_prompt(tok, "3+4=") == ("3+4=", False)
        ids = encode_prompt(tok, messages)
        assert tok.decode(ids) == "u:3+4=;a:"  # no BOS added to a templated text
        out = run(tiny, [messages, "3+4="], n=2)
        assert out[0].prompt_ids == ids and out[1].prompt_ids == tok("3+4=")["input_ids"]
    finally:
        tok.chat_template = None


def test_make_sampler(tiny):
    model, tok = tiny
    assert isinstance(make_sampler("hf", SamplingConfig(), tok, model=model), HFSampler)
    with pytest.raises(ConfigError, match="unknown sampling backend"):
        make_sampler("nope", SamplingConfig(), tok, model=model)
    with pytest.raises(ConfigError, match="temperature > 0"):
        next(HFSampler(model, tok, SamplingConfig(temperature=0)).sample(PROMPTS, logprobs=True))


# --------------------------------------------------------------------------------------------- stop text


def test_stop_token_ids_are_the_tokens_holding_the_text(tiny):
    from rlvr_div.sampling import stop_token_ids

    _, tok = tiny
    assert [tok.decode([i]) for i in stop_token_ids(tok, "=")] == ["="]
    with pytest.raises(ConfigError, match="no token of the tokenizer contains the stop text"):
        stop_token_ids(tok, "é")
    with pytest.raises(ConfigError, match="stop_text is empty"):
        SamplingConfig(stop_text="")


def test_a_stop_text_cuts_each_sample_at_its_first_stop_token_and_changes_nothing_before(tiny):
    """The same uniforms draw the same tokens: a sample with a stop text is the sample without it, up to and including
    its first token holding the text; a sample that never reaches one is unchanged. The stop text is chosen by
    measuring the free samples (the tiny tokenizer spells them one character a token): the character that the most
    samples go on after, among those that some sample lacks, so that both cases occur."""
    from rlvr_div.sampling import stop_token_ids

    kwargs = dict(n=16, seed=3, max_new_tokens=8)
    free = run(tiny, PROMPTS, **kwargs)
    texts = [t for a in free for t in a.completions]
    _, tok = tiny
    cut = {c: sum(c in t[:-1] for t in texts) for c in sorted(set("".join(texts))) if any(c not in t for t in texts)}
    stop = max(cut, key=cut.get, default=None)
    assert stop is not None and cut[stop] > 0, f"premise: a character some samples go on after, some lack ({cut})"
    assert [tok.decode([i]) for i in stop_token_ids(tok, stop)] == [stop], "premise: one token, the character alone"
    stopped = run(tiny, PROMPTS, stop_text=stop, **kwargs)
    for a, b in zip(free, stopped):
        for ids, text, ids_s, text_s, why in zip(
            a.completion_ids, a.completions, b.completion_ids, b.completions, b.finish_reasons
        ):
            if stop in text:
                assert text_s == text[: text.index(stop) + 1] and why == "stop" and ids_s == ids[: len(ids_s)]
            else:
                assert ids_s == ids


# a peaked vocabulary (the first top-k), a flatter one (the second, 8 times wider) and a flat one (the full sort)
@pytest.mark.parametrize("decay, width", [(0.05, 256), (0.002, 2048), (1e-5, 5000)])
def test_the_nucleus_from_a_partial_top_k_equals_the_sorted_one(decay, width):
    from rlvr_div.sampling import _nucleus

    g = torch.Generator().manual_seed(1)
    # p_i ∝ exp(−decay · rank), the ranks shuffled over a 5,000-token vocabulary, row by row
    logits = torch.stack([-decay * torch.randperm(5000, generator=g).double() for _ in range(6)])
    probs = torch.softmax(logits, -1)
    kept, order = _nucleus(probs, 0.9)
    ref = probs.sort(dim=-1, descending=True, stable=True)
    ref_kept = ref.values.masked_fill(ref.values.cumsum(-1) - ref.values >= 0.9, 0.0)
    assert kept.size(-1) == width  # premise: each case takes the path it is meant to test
    for row in range(6):
        mine = {int(t): float(p) for t, p in zip(order[row], kept[row]) if p > 0}
        theirs = {int(t): float(p) for t, p in zip(ref.indices[row], ref_kept[row]) if p > 0}
        assert mine == theirs and len(mine) > 1


def test_a_prompt_with_several_rows_is_read_once_and_ended_rows_leave_the_batch(tiny):
    """The prefill runs over the distinct prompts (2 here), not over their 2 × 8 rows; then every forward pass is one
    token per row, over fewer rows once some have ended; the samples' log-probs still equal a full forward pass over
    prompt + completion, and each completion stops at its first end token."""
    model, tok = tiny
    shapes: list[tuple[int, int]] = []
    hook = model.register_forward_pre_hook(
        lambda _m, _a, kw: shapes.append(tuple(kw["input_ids"].shape)), with_kwargs=True
    )
    try:
        out = run(tiny, PROMPTS[:2], logprobs=True, n=8, batch_size=16, max_new_tokens=12)
    finally:
        hook.remove()
    assert shapes[0] == (2, max(len(r.prompt_ids) for r in out))
    rows = [b for b, width in shapes[1:]]
    assert all(width == 1 for _, width in shapes[1:]) and rows[0] == 16
    lengths = sorted(len(c) for r in out for c in r.completion_ids)
    assert lengths[0] < lengths[-1], "premise: completions of several lengths"
    assert rows == sorted(rows, reverse=True) and rows[-1] < 16  # ended rows left the batch
    assert len(rows) == lengths[-1] - 1  # one forward pass per token after the first, up to the longest
    prompts = [r.prompt_ids for r in out for _ in r.completion_ids]
    comps = [c for r in out for c in r.completion_ids]
    ref = token_logprobs(model, prompts, comps, temperature=1.0, batch_size=16, pad_token_id=tok.pad_token_id)
    for got, want in zip([lp for r in out for lp in r.logprobs], ref):
        assert got == pytest.approx(want, abs=1e-4)
    for r in out:
        for ids, reason in zip(r.completion_ids, r.finish_reasons):
            assert (reason == "stop") == (ids[-1] == tok.eos_token_id) and tok.eos_token_id not in ids[:-1]
