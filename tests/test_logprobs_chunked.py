"""Chunked teacher-forced log-probs (rlvr_div.logprobs.completion_logprobs): the output head applied to the scored
positions only, a chunk of them at a time, equal in values and gradients to the full-vocabulary path
(completion_logprobs_unchunked) for every chunk size; the model's own finish after the head (soft-capping) is
reproduced, and a model whose logits are something else falls back to the full path.

"Equal" is within 1e-6 relative (|Δ| ≤ 1e-6·max(1, |reference|)): the head's matrix product over a chunk of rows
rounds differently from the same product over the whole batch (MKL measured here: up to 2 float32 ulps of a
log-prob near −20, 0 for some chunk sizes), so bitwise equality cannot hold in float32; a float64 model agrees to
1e-12."""

from __future__ import annotations

import logging

import pytest
import torch

from rlvr_div.logprobs import (
    completion_logprobs,
    completion_logprobs_unchunked,
    left_aligned_rows,
    token_logprobs,
)

TOL = 1e-6


def _close(got: torch.Tensor, ref: torch.Tensor, tol: float = TOL) -> bool:
    """|got − ref| ≤ tol·max(1, |ref|) everywhere."""
    return bool(((got - ref).abs() <= tol * ref.abs().clamp(min=1.0)).all())


def _rows(vocab: int, seed: int = 0) -> tuple[list[list[int]], list[list[int]]]:
    """Five prompts of 2..9 tokens and completions of 1..6 tokens (some rows shorter than the longest: padding)."""
    g = torch.Generator().manual_seed(seed)
    lens = [(2, 6), (9, 1), (4, 4), (7, 3), (3, 5)]
    draw = lambda n: torch.randint(3, vocab, (n,), generator=g).tolist()  # noqa: E731
    return [draw(p) for p, _ in lens], [draw(c) for _, c in lens]


@pytest.fixture(scope="module")
def tiny(tiny_path):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_path).eval()
    prompts, completions = _rows(model.config.vocab_size)
    return model, left_aligned_rows(prompts, completions, pad_token_id=0), (prompts, completions)


def _sizes(batch) -> list[int | None]:
    """Chunk sizes: one position, a few, all but one, more than there are positions, and the default."""
    n = batch[2].numel()  # rows × longest completion: 5 × 6
    return [1, 2, 7, n - 1, n + 5, None]


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_chunked_values_equal_the_full_vocabulary_path(tiny, temperature):
    model, batch, _ = tiny
    with torch.no_grad():
        full = completion_logprobs_unchunked(model, *batch, temperature)
        for size in _sizes(batch):
            got = completion_logprobs(model, *batch, temperature, chunk_size=size)
            assert got.shape == full.shape and got.dtype == torch.float32
            assert _close(got, full), size


def test_chunked_gradients_equal_the_full_vocabulary_path(tiny, tiny_path):
    """The exact objective's use: a weighted sum of masked log-probs, backpropagated into every parameter (the
    head's weight, tied to the embeddings, included); chunks are recomputed in backward (checkpointing). In float64:
    float32 gradients sum many rows in an order that depends on the chunking and on the CPU's kernels (a 2-core x86
    machine measured 1.1e-6 of the largest entry), so the tolerance would test the hardware, not the code."""
    from transformers import AutoModelForCausalLM

    model, batch, (_, completions) = tiny
    model = AutoModelForCausalLM.from_pretrained(tiny_path).double()
    model.train()  # as rlvr_div.exact.objective.ascend runs it
    mask = (torch.arange(batch[2].size(1)) < torch.tensor([len(c) for c in completions]).unsqueeze(1)).float()
    weights = torch.linspace(0.5, 1.5, mask.numel()).view(mask.shape) * mask

    def grads(fn) -> tuple[torch.Tensor, list[torch.Tensor]]:
        model.zero_grad(set_to_none=True)
        logp = fn()
        (logp * weights).sum().backward()
        return logp.detach(), [p.grad.clone() for p in model.parameters()]

    ref_value, ref_grads = grads(lambda: completion_logprobs_unchunked(model, *batch, 0.8))
    assert all(g.abs().sum() > 0 for g in ref_grads[-3:])
    for size in _sizes(batch):
        value, got = grads(lambda size=size: completion_logprobs(model, *batch, 0.8, chunk_size=size))
        assert _close(value, ref_value), size
        for g, r in zip(got, ref_grads, strict=True):  # relative to the largest entry of each gradient
            assert (g - r).abs().max().item() <= TOL * max(1.0, r.abs().max().item()), size


def test_the_head_sees_only_the_scored_positions_a_chunk_at_a_time(tiny):
    """Apart from the one probe position of the forward, every call of the output head gets at most chunk_size
    (row, column) pairs, and together exactly rows × longest completion of them."""
    model, batch, _ = tiny
    shapes: list[tuple[int, ...]] = []
    head = model.get_output_embeddings()
    handle = head.register_forward_hook(lambda m, a, out: shapes.append(tuple(a[0].shape)))  # the input it ran on
    try:
        with torch.no_grad():
            completion_logprobs(model, *batch, chunk_size=4)
    finally:
        handle.remove()
    hidden = model.config.hidden_size
    assert shapes[0] == (1, 1, hidden)  # the probe inside the forward
    assert all(s[0] <= 4 and s[1:] == (hidden,) for s in shapes[2:])  # shapes[1]: the probe replayed outside
    assert sum(s[0] for s in shapes[2:]) == batch[2].numel()


def test_token_logprobs_is_the_same_for_every_chunk_size(tiny):
    model, _, (prompts, completions) = tiny
    ref = token_logprobs(model, prompts, completions, batch_size=2, chunk_size=None)
    assert [len(r) for r in ref] == [len(c) for c in completions]
    for size in (1, 3, 1000):
        got = token_logprobs(model, prompts, completions, batch_size=2, chunk_size=size)
        assert all(abs(a - b) <= TOL * max(1.0, abs(b)) for g, r in zip(got, ref) for a, b in zip(g, r))


def test_a_float64_model_is_scored_in_float64(tiny, tiny_path):
    from transformers import AutoModelForCausalLM

    _, batch, _ = tiny
    model = AutoModelForCausalLM.from_pretrained(tiny_path, dtype=torch.float64).eval()
    with torch.no_grad():
        full = completion_logprobs_unchunked(model, *batch)
        got = completion_logprobs(model, *batch, chunk_size=3)
    assert got.dtype == torch.float64
    assert _close(got, full, 1e-12)


def _softcapped_gemma() -> torch.nn.Module:
    """A random 1-layer Gemma-3 with final-logit soft-capping (logits = 3·tanh(head(h)/3)), float32."""
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    torch.manual_seed(0)
    config = Gemma3TextConfig(vocab_size=97, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                              num_attention_heads=2, num_key_value_heads=1, head_dim=16, max_position_embeddings=64,
                              final_logit_softcapping=3.0, sliding_window=8, pad_token_id=0)  # fmt: skip
    model = Gemma3ForCausalLM(config).eval()
    with torch.no_grad():  # larger logits, so that the soft cap bends them visibly
        model.get_output_embeddings().weight.mul_(20.0)
    return model


def test_a_soft_capped_head_is_reproduced(caplog):
    """Gemma's finish after the head, c·tanh(z/c), is found and applied per chunk (no fall-back warning)."""
    model = _softcapped_gemma()
    prompts, completions = _rows(97, seed=1)
    batch = left_aligned_rows(prompts, completions, pad_token_id=0)
    with torch.no_grad(), caplog.at_level(logging.WARNING, logger="rlvr_div.logprobs"):
        full = completion_logprobs_unchunked(model, *batch)
        raw = model(input_ids=batch[0], attention_mask=batch[1]).logits
        assert raw.abs().max() < 3.0 and raw.abs().max() > 2.5  # the cap is active
        for size in (1, 5, 1000):
            assert _close(completion_logprobs(model, *batch, chunk_size=size), full)
    assert "known finish" not in caplog.text


class _Doubled(torch.nn.Module):
    """A model whose logits are twice its head's output: a finish the chunked path does not know."""

    def __init__(self, inner: torch.nn.Module) -> None:
        super().__init__()
        self.inner = inner

    def get_output_embeddings(self) -> torch.nn.Module:
        return self.inner.get_output_embeddings()

    def forward(self, **kw):
        out = self.inner(**kw)
        out.logits = out.logits * 2.0
        return out


class _NoHead(_Doubled):
    """A model that does not say which module is its head."""

    get_output_embeddings = None


@pytest.mark.parametrize("wrapper", [_Doubled, _NoHead])
def test_an_unknown_head_falls_back_to_the_full_logits(tiny, wrapper, caplog):
    model, batch, _ = tiny
    wrapped = wrapper(model)
    with torch.no_grad(), caplog.at_level(logging.WARNING, logger="rlvr_div.logprobs"):
        full = completion_logprobs_unchunked(wrapped, *batch)
        got = completion_logprobs(wrapped, *batch, chunk_size=2)
    assert _close(got, full)
    assert ("known finish" in caplog.text) == (wrapper is _Doubled)


def test_chunk_size_must_be_positive(tiny):
    model, batch, _ = tiny
    with pytest.raises(ValueError, match="chunk_size"):
        completion_logprobs(model, *batch, chunk_size=0)


def test_an_unknown_head_is_probed_once_per_model(tiny, caplog):
    """After a model's head could not be split off, later calls run one forward (no probe forward) and do not warn
    again."""
    model, batch, _ = tiny
    wrapped = _Doubled(model)
    calls = []
    wrapped.register_forward_hook(lambda *a: calls.append(1))
    with torch.no_grad(), caplog.at_level(logging.WARNING, logger="rlvr_div.logprobs"):
        first = completion_logprobs(wrapped, *batch, chunk_size=2)
        assert len(calls) == 2 and caplog.text.count("known finish") == 1  # the probe, then the full logits
        second = completion_logprobs(wrapped, *batch, chunk_size=2)
    assert len(calls) == 3 and caplog.text.count("known finish") == 1
    assert torch.equal(first, second)


class _DoubledOnDevice(_Doubled):
    """:class:`_Doubled` with the ``device`` that the row-building functions read."""

    @property
    def device(self) -> torch.device:
        return self.inner.device


@pytest.mark.parametrize("wrapper", [None, _DoubledOnDevice])
def test_a_shared_prompt_forward_gives_the_per_row_log_probs(tiny, wrapper):
    """prefix_shared_logprobs (the prompt's cache shared by its completions, batches of 2 so the cache is copied
    per batch) against token_logprobs (every row on its own) for each of the five prompts with all five
    completions, a one-token prompt and an empty completion; also through the full-logits fallback."""
    from rlvr_div.logprobs import prefix_shared_logprobs

    model, _, (prompts, completions) = tiny
    model = model if wrapper is None else wrapper(model)
    for prompt in [*prompts, prompts[0][:1]]:
        rows = [*completions, []]
        got = prefix_shared_logprobs(model, prompt, rows, temperature=0.8, batch_size=2)
        ref = token_logprobs(model, [prompt] * len(rows), rows, temperature=0.8, batch_size=16)
        assert [len(g) for g in got] == [len(c) for c in rows]
        for g, r in zip(got, ref, strict=True):
            assert _close(torch.tensor(g), torch.tensor(r), tol=1e-5)
