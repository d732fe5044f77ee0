"""Log-probs of *given* completions under a model, by teacher forcing, in left-aligned rows [prompt | completion |
padding]: DPH-RL's stored reference log-probs, exact measurement and the sampling-free objective use them, and the
DPH-RL trainer scores its rehearsal rows in the same layout, so stored and recomputed log-probs agree on a model in
the same dtype (to the round-off of matrix products over different numbers of rows).

log p(y_t | x, y_<t) = log softmax(logits / T)[y_t], no top-p: the model's own distribution at temperature T.

The output head is applied to the scored positions only and the log-softmax runs over chunks of them
(:func:`completion_logprobs`), so memory grows with the rows' length, not with length × vocabulary (a 262,144-token
vocabulary makes float32 logits at every position of a batch the largest tensor by far). The same pieces, the
probe forward that stops at the head's input (:func:`head_split`) and the chunked head with each chunk recomputed in
backward (:func:`head_chunks`, :func:`head_token_stats`), give the trainers their per-token log-probs and entropies in
training (``rlvr_div.trainers.common.chunked_token_logps``, SimKO's statistics).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.utils.checkpoint

from rlvr_div.errors import ConfigError
from rlvr_div.progress import Progress


@torch.inference_mode()
def token_logprobs(
    model: Any,
    prompt_ids: Sequence[Sequence[int]],
    completion_ids: Sequence[Sequence[int]],
    temperature: float = 1.0,
    batch_size: int = 16,
    pad_token_id: int = 0,
    progress: bool = False,
    chunk_size: int | None = None,
) -> list[list[float]]:
    """Per-token log-probs log softmax(logits / T)[y_t] of given completions y under ``model`` (no top-p), one list
    per completion, aligned with its ids.

    Rows are left-aligned [prompt | completion | padding] and get no ``position_ids``: with no left padding a
    model's default positions count from each row's first token (as in ``generate``) whatever its position scheme,
    and this is the layout in which the DPH-RL trainer scores its rehearsal rows, so the stored reference log-probs
    and the training forward agree on a model in the same dtype (up to round-off). Rows are grouped by length to limit
    padding. Memory per batch is batch_size × row length × hidden size for the hidden states plus one chunk of
    ``chunk_size`` positions × vocabulary floats for the logits (:func:`completion_logprobs`)."""
    if len(prompt_ids) != len(completion_ids):
        raise ValueError("prompt_ids and completion_ids must have one entry per completion")
    if temperature <= 0:
        raise ConfigError(f"token log-probs need temperature > 0, got {temperature}")
    device = model.device
    order = sorted(range(len(prompt_ids)), key=lambda i: -(len(prompt_ids[i]) + len(completion_ids[i])))
    out: list[list[float]] = [[] for _ in prompt_ids]
    with Progress(len(order), "log-probs", progress, mininterval=0.5, leave=False) as bar:
        for start in range(0, len(order), batch_size):
            rows = order[start : start + batch_size]
            c_len = max(len(completion_ids[i]) for i in rows)
            if c_len == 0:
                bar.update(len(rows))
                continue
            batch = left_aligned_rows([prompt_ids[i] for i in rows], [completion_ids[i] for i in rows], pad_token_id)
            chosen = completion_logprobs(model, *(t.to(device) for t in batch), temperature, chunk_size)
            chosen = chosen.cpu().tolist()
            for r, i in enumerate(rows):
                out[i] = chosen[r][: len(completion_ids[i])]
            bar.update(len(rows))
    return out


@torch.inference_mode()
def prefix_shared_logprobs(
    model: Any,
    prompt_ids: Sequence[int],
    completion_ids: Sequence[Sequence[int]],
    temperature: float = 1.0,
    batch_size: int = 16,
    pad_token_id: int = 0,
    chunk_size: int | None = None,
) -> list[list[float]]:
    """:func:`token_logprobs` of the completions of one prompt with the prompt's forward shared: the prompt but its
    last token runs once, and each batch of completions continues from a copy of its key/value cache in rows [last
    prompt token | completion | padding]. The same log-probs up to float round-off (matrix products over other
    shapes); the prompt's tokens are computed once instead of once per completion, which is most of the work when
    the prompt is long and the completions short (a chat template around a short question)."""
    import copy

    if len(prompt_ids) < 2:
        return token_logprobs(model, [prompt_ids] * len(completion_ids), completion_ids, temperature, batch_size,
                              pad_token_id, chunk_size=chunk_size)  # fmt: skip
    if temperature <= 0:
        raise ConfigError(f"token log-probs need temperature > 0, got {temperature}")
    device = model.device
    head = torch.tensor([list(prompt_ids[:-1])], device=device)
    cache = model(input_ids=head, attention_mask=torch.ones_like(head), use_cache=True).past_key_values
    order = sorted(range(len(completion_ids)), key=lambda i: -len(completion_ids[i]))
    out: list[list[float]] = [[] for _ in completion_ids]
    for start in range(0, len(order), batch_size):
        rows = order[start : start + batch_size]
        if max(len(completion_ids[i]) for i in rows) == 0:
            continue
        ids, attention, columns = left_aligned_rows(
            [[prompt_ids[-1]]] * len(rows), [completion_ids[i] for i in rows], pad_token_id
        )
        attention = torch.cat([torch.ones(len(rows), head.size(1), dtype=attention.dtype), attention], dim=1)

        def past(n: int = len(rows)) -> Any:
            fresh = copy.deepcopy(cache)
            fresh.batch_repeat_interleave(n)
            return fresh

        chosen = completion_logprobs(model, ids.to(device), attention.to(device), columns.to(device), temperature,
                                     chunk_size, past=past).cpu().tolist()  # fmt: skip
        for r, i in enumerate(rows):
            out[i] = chosen[r][: len(completion_ids[i])]
    return out


def left_aligned_rows(
    prompt_ids: Sequence[Sequence[int]], completion_ids: Sequence[Sequence[int]], pad_token_id: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(input_ids, attention_mask, columns) of rows [prompt | completion | padding]; ``columns[r, t]`` is the column
    of the logits that predict completion token t of row r, len(prompt_r) − 1 + t, for t below the longest
    completion (past a row's own completion it points into its padding, which the caller masks)."""
    c_len = max(len(c) for c in completion_ids)
    width = max(len(p) for p in prompt_ids) + c_len
    input_ids = torch.full((len(prompt_ids), width), pad_token_id, dtype=torch.long)
    attention = torch.zeros_like(input_ids)
    for r, (p, c) in enumerate(zip(prompt_ids, completion_ids, strict=True)):
        tokens = list(p) + list(c)
        input_ids[r, : len(tokens)] = torch.tensor(tokens, dtype=torch.long)
        attention[r, : len(tokens)] = 1
    starts = torch.tensor([len(p) - 1 for p in prompt_ids])
    return input_ids, attention, starts.unsqueeze(1) + torch.arange(c_len)


def completion_logprobs(
    model: Any,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    columns: torch.Tensor,
    temperature: float = 1.0,
    chunk_size: int | None = None,
    past: Callable[[], Any] | None = None,
) -> torch.Tensor:
    """(rows, C) log softmax(logits / T)[y_t] of the tokens after ``columns`` (:func:`left_aligned_rows`), in
    float32 (float64 for a float64 model), differentiable unless called under no_grad.

    Only the scored positions meet the vocabulary. One forward stops at the hidden states h that the model's output
    head takes (a pre-hook on ``get_output_embeddings()`` hands the head one probe position instead of all), h is
    gathered at ``columns``, and logits = head(h) are formed ``chunk_size`` (row, column) pairs at a time (None:
    :data:`LOGIT_CHUNK_BYTES` of float32 logits per chunk), each chunk's log-softmax gathered at its tokens and the
    chunks concatenated. Peak memory is rows × width × hidden plus one chunk × vocabulary, not rows × width ×
    vocabulary. With gradients each chunk is recomputed in backward (activation checkpointing), so no chunk's logits
    are kept. "The head" is the module plus what the model applies after it (final-logit soft-capping, a logit
    scale), told by matching the model's own logits at the probe position bit for bit; a model whose head is none
    of these, or that calls no output-embeddings module, is scored by :func:`completion_logprobs_unchunked`'s
    forward with the log-softmax still chunked. Equal to :func:`completion_logprobs_unchunked` up to float round-off
    (the head's matrix product runs over fewer rows).

    ``past``: a function returning a fresh key/value cache of tokens that precede every row (each forward extends
    the cache it is given); ``attention_mask`` then covers those tokens too (:func:`prefix_shared_logprobs`)."""
    if chunk_size is not None and chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1 or None, got {chunk_size}")
    targets = input_ids.gather(1, columns + 1)
    split = head_split(model, input_ids, attention_mask, past)
    if split is None:
        cached = {} if past is None else {"past_key_values": past()}
        logits = model(input_ids=input_ids, attention_mask=attention_mask, **cached).logits
        logits = logits.gather(1, columns.unsqueeze(-1).expand(-1, -1, logits.size(-1)))
        n = chunk_size or default_chunk(logits.size(-1))
        flat, flat_targets = logits.reshape(-1, logits.size(-1)), targets.reshape(-1)
        pieces = [
            _gathered_log_softmax(flat[i : i + n], flat_targets[i : i + n], temperature)
            for i in range(0, flat.size(0), n)
        ]
        return torch.cat(pieces).view(targets.shape)
    head, finish, hidden, vocab = split
    h = hidden.gather(1, columns.unsqueeze(-1).expand(-1, -1, hidden.size(-1))).reshape(-1, hidden.size(-1))
    logps, _ = head_token_stats(head, finish, h, targets.reshape(-1), temperature, chunk_size or default_chunk(vocab))
    return logps.view(targets.shape)


def head_token_stats(
    head: torch.nn.Module,
    finish: Callable[[torch.Tensor], torch.Tensor],
    hidden: torch.Tensor,
    targets: torch.Tensor,
    temperature: float,
    chunk_size: int,
    entropy: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """For each row h_i of ``hidden`` (N, hidden size) and its token ``targets[i]``: log p_i(target) and, with
    ``entropy``, H_i = −Σ_v p_i(v)·log p_i(v), where p_i = softmax(finish(head(h_i)) / T); (N,) each, float32
    (float64 for float64 logits), differentiable unless under no_grad; chunked as :func:`head_chunks` does."""
    stats = functools.partial(_stats, entropy=entropy)
    out = head_chunks(head, finish, hidden, targets, temperature, chunk_size, stats)
    return (out[:, 0], out[:, 1]) if entropy else (out, None)


def head_chunks(
    head: torch.nn.Module,
    finish: Callable[[torch.Tensor], torch.Tensor],
    hidden: torch.Tensor,
    targets: torch.Tensor,
    temperature: float,
    chunk_size: int,
    stats: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
) -> torch.Tensor:
    """``stats(z, y)`` of the rows of ``hidden`` (N, hidden size), concatenated: z = finish(head(h)) / T, the
    (n, vocabulary) float32 (float64) logits of a chunk of n rows, and y their ``targets`` (n,); ``stats`` returns
    (n, ...).

    The logits are formed ``chunk_size`` rows at a time (:func:`default_chunk`: :data:`LOGIT_CHUNK_BYTES` of float32
    logits) and dropped once ``stats`` has read them; with gradients each chunk is recomputed in its backward
    (activation checkpointing), so autograd keeps the chunk's rows of ``hidden``, not its logits. Peak memory beyond
    ``hidden``: the few chunk × vocabulary tensors ``stats`` and its gradient form at a time."""
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
    checkpoint = (
        hidden.size(0) > chunk_size
        and torch.is_grad_enabled()
        and (hidden.requires_grad or any(p.requires_grad for p in head.parameters()))
    )
    pieces = []
    for i in range(0, max(hidden.size(0), 1), chunk_size):  # no rows: one empty chunk, for the output's shape
        args = (head, finish, hidden[i : i + chunk_size], targets[i : i + chunk_size], temperature, stats)
        if checkpoint:
            pieces.append(torch.utils.checkpoint.checkpoint(_head_chunk, *args, use_reentrant=False))
        else:
            pieces.append(_head_chunk(*args))
    return torch.cat(pieces)


def completion_logprobs_unchunked(
    model: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor, columns: torch.Tensor, temperature: float = 1.0
) -> torch.Tensor:
    """:func:`completion_logprobs` the plain way, the reference it is tested against: the model's logits at every
    position (rows × width × vocabulary), gathered at ``columns``, one log-softmax over all of them."""
    logits = model(input_ids=input_ids, attention_mask=attention_mask).logits
    logits = logits.gather(1, columns.unsqueeze(-1).expand(-1, -1, logits.size(-1)))
    return _gathered_log_softmax(logits, input_ids.gather(1, columns + 1), temperature)


LOGIT_CHUNK_BYTES = 64 << 20
"""Float32 logits per chunk when :func:`completion_logprobs` picks the chunk size: 64 positions of a 262,144-token
vocabulary (Gemma-3), 341 of a 49,152-token one (SmolLM2); a small vocabulary fits every position in one chunk."""

_log = logging.getLogger(__name__)


def default_chunk(vocab: int) -> int:
    """Rows of logits per chunk: :data:`LOGIT_CHUNK_BYTES` of float32 logits of a ``vocab``-token vocabulary."""
    return max(1, LOGIT_CHUNK_BYTES // (4 * vocab))


def _gathered_log_softmax(logits: torch.Tensor, targets: torch.Tensor, temperature: float) -> torch.Tensor:
    """log softmax(logits / T)[target] over the last axis, in float32 (float64 for float64 logits)."""
    logits = logits if logits.dtype == torch.float64 else logits.float()
    logp = torch.log_softmax(logits / temperature, dim=-1)
    return logp.gather(-1, targets.unsqueeze(-1)).squeeze(-1)


def _head_chunk(
    head: torch.nn.Module,
    finish: Callable[[torch.Tensor], torch.Tensor],
    hidden: torch.Tensor,
    targets: torch.Tensor,
    temperature: float,
    stats: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
) -> torch.Tensor:
    """One chunk of :func:`head_chunks`: ``stats(finish(head(hidden)) / T, targets)``, the logits a temporary of
    this function in float32 (float64 for float64 logits), divided by T in place (x / 1 = x exactly: T = 1 skips
    it)."""
    logits = finish(head(hidden))
    logits = logits if logits.dtype == torch.float64 else logits.float()
    if temperature != 1.0:
        logits = logits.div_(temperature)
    return stats(logits, targets)


def _stats(logits: torch.Tensor, targets: torch.Tensor, entropy: bool) -> torch.Tensor:
    """log softmax(z)[y] (n,) of logits z (n, V), or with ``entropy`` (n, 2) of that and H = −Σ_v p_v·log p_v: one
    chunk × vocabulary tensor beside z, three with the entropy (p = exp(log p) and p·log p)."""
    logp = torch.log_softmax(logits, dim=-1)
    chosen = logp.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    if not entropy:
        return chosen
    return torch.stack([chosen, -(logp.exp() * logp).sum(-1)], dim=-1)


_UNSPLIT: weakref.WeakSet[Any] = weakref.WeakSet()
"""Models whose logits :func:`head_split` could not reproduce from their head: later calls skip the probe forward
(and its warning) and go straight to the full logits."""


def may_split(model: Any) -> bool:
    """Whether :func:`head_split` may split ``model``: it has an output-embeddings module and no earlier forward
    showed that its logits are not that module's output plus a known finish."""
    get = getattr(model, "get_output_embeddings", None)
    return isinstance(get() if callable(get) else None, torch.nn.Module) and model not in _UNSPLIT


def head_split(
    model: Any,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    past: Callable[[], Any] | None = None,
    **forward_kwargs: Any,
) -> tuple[torch.nn.Module, Callable[[torch.Tensor], torch.Tensor], torch.Tensor, int] | None:
    """Run ``model`` with its output head fed one probe position: (head module, what the model applies after it,
    the head's input hidden states (rows, width, hidden), vocabulary size), or None (before any forward) for a model
    without an output-embeddings module. A forward that did not go through the head once on (rows, width, hidden),
    or whose logits at the probe position no known finish reproduces, is also None after a warning.
    ``forward_kwargs`` go to the model's forward (``use_cache=False`` in training)."""
    get = getattr(model, "get_output_embeddings", None)
    head = get() if callable(get) else None
    if not isinstance(head, torch.nn.Module) or model in _UNSPLIT:
        return None
    seen: list[torch.Tensor] = []

    def probe(module: torch.nn.Module, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        x = args[0] if args else kwargs.get("input")
        seen.append(x)
        if len(seen) > 1 or not isinstance(x, torch.Tensor) or x.dim() != 3:
            return args, kwargs
        return ((x[:1, :1], *args[1:]), kwargs) if args else (args, {**kwargs, "input": x[:1, :1]})

    handle = head.register_forward_pre_hook(probe, with_kwargs=True)
    try:
        cached = {} if past is None else {"past_key_values": past()}
        expected = model(input_ids=input_ids, attention_mask=attention_mask, **cached, **forward_kwargs).logits
    finally:
        handle.remove()
    hidden = seen[0] if len(seen) == 1 else None
    finish = None
    if hidden is not None and hidden.dim() == 3 and hidden.shape[:2] == input_ids.shape:
        finish = _finish(model, head, hidden[:1, :1], expected)
    if finish is None:
        _log.warning(
            "%s: its logits are not its output embeddings' output plus a known finish; log-probs are computed from "
            "its full logits (rows x width x vocabulary; in training, by TRL's fused LM head), from now on without "
            "the probe forward",
            type(model).__name__,
        )
        with contextlib.suppress(TypeError):  # a model that cannot be weakly referenced is probed every time
            _UNSPLIT.add(model)
        return None
    return head, finish, hidden, expected.size(-1)


def _finish(
    model: Any, head: torch.nn.Module, probe: torch.Tensor, expected: torch.Tensor
) -> Callable[[torch.Tensor], torch.Tensor] | None:
    """What ``model`` applies after ``head``: the first candidate (the config's final-logit soft-capping
    c·tanh(z/c), logit scale z·s, logits scaling z/s; then nothing) that turns head(probe) into ``expected`` bit for
    bit, or None."""
    with torch.no_grad():
        raw = head(probe)
        for finish in _finish_candidates(model):
            got = finish(raw)
            if got.shape == expected.shape and got.dtype == expected.dtype and torch.equal(got, expected):
                return finish
    return None


def _finish_candidates(model: Any) -> list[Callable[[torch.Tensor], torch.Tensor]]:
    config = getattr(model, "config", None)
    configs = [config] if config is not None else []
    text = getattr(config, "get_text_config", None)
    if callable(text) and text() is not config:
        configs.append(text())
    out: list[Callable[[torch.Tensor], torch.Tensor]] = []
    for c in configs:
        cap = getattr(c, "final_logit_softcapping", None)
        if isinstance(cap, int | float) and cap > 0:
            out.append(lambda z, c=float(cap): torch.tanh(z / c) * c)
        scale = getattr(c, "logit_scale", None)
        if isinstance(scale, int | float) and scale != 1:
            out.append(lambda z, s=scale: z * s)
        scaling = getattr(c, "logits_scaling", None)
        if isinstance(scaling, int | float) and scaling != 1:
            out.append(lambda z, s=scaling: z / s)
    return [*out, lambda z: z]
