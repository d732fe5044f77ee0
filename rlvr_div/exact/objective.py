"""The KL-regularised objective computed exactly on an enumerable valid set, and gradient ascent on it with no
sampling at all: the sampling-free arm of the β study (docs/study/collapse.md).

For a prompt x with valid set V(x), policy π and base a, teacher forcing every y ∈ V(x) followed by EOS gives
π(y|x) and a(y|x) exactly (:mod:`rlvr_div.exact`), hence μ(x) = Σ_{y∈V} π(y|x) and A(x) = Σ_{y∈V} a(y|x). Lump every
invalid completion into one outcome ⊥ (π(⊥) = 1 − μ, a(⊥) = 1 − A) and write π̄, ā for the distributions over
V(x) ∪ {⊥}. The objective is

    J(θ) = mean_x [ μ(x) − β·KL(π̄(·|x) ‖ ā(·|x)) ]
         = mean_x [ Σ_{y∈V} π(y)·(1 − β·log(π(y)/a(y))) − β·(1 − μ)·log((1 − μ)/(1 − A)) ].

It is the sequence-level objective E_π[v] − β·KL(π‖a) of binary-reward RLVR less β·(1 − μ)·KL(π(·|invalid) ‖
a(·|invalid)), the one term no enumeration reaches; that term is ≥ 0 and is 0 at the optimum, so J has the same
optimum on V: π(·|valid) = p* = a(·|valid) and μ(x) = σ(logit A(x) + 1/β)
(:func:`rlvr_div.theory.calibration.validity_at`),
at every β > 0. With β = 0, J = mean_x μ(x). Gradient ascent on J (AdamW as the sampled runs use it, the full valid
set of every training prompt in one batch) removes sampling noise entirely: a policy that still drifts away from p*
as β falls is driven there by its parameterisation and the optimiser, not by the sampler.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

_LOG_EPS = 1e-12  # 1 − μ is clamped below by this before its log (μ → 1 at small β)


@dataclass
class ValidSetBatch:
    """Every (prompt, valid completion ⊕ EOS) row of a set of prompts, tokenised once, in the layout of
    :func:`rlvr_div.logprobs.left_aligned_rows` (the one :func:`rlvr_div.logprobs.token_logprobs` scores)."""

    input_ids: torch.Tensor  # (N, W)
    attention_mask: torch.Tensor  # (N, W)
    columns: torch.Tensor  # (N, C): column of the logits that predict completion token t of each row
    completion_mask: torch.Tensor  # (N, C)
    owner: torch.Tensor  # (N,): index of the row's prompt
    base_logp: torch.Tensor  # (N,) float64: log a(y ⊕ EOS | x)
    n_prompts: int


def valid_set_batch(
    tokenizer: Any,
    prompts: Sequence[str],
    valid: Sequence[Sequence[str]],
    base_logps: Sequence[Sequence[float]],
) -> ValidSetBatch:
    """Tokenise every valid completion of every prompt as :func:`rlvr_div.exact.sequence_logprobs` does (the prompt
    with the tokenizer's special tokens, the completion without, then EOS)."""
    from rlvr_div.logprobs import left_aligned_rows

    if tokenizer.eos_token_id is None:
        raise ValueError("the exact objective needs a tokenizer with an EOS token")
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    prompt_ids: list[list[int]] = []
    completion_ids: list[list[int]] = []
    owner: list[int] = []
    base: list[float] = []
    for i, (prompt, ys, blp) in enumerate(zip(prompts, valid, base_logps, strict=True)):
        if len(ys) != len(blp):
            raise ValueError(f"prompt {prompt!r}: {len(ys)} valid completions but {len(blp)} base log-probs")
        p = list(tokenizer(prompt)["input_ids"])
        for y, lp in zip(ys, blp):
            prompt_ids.append(p)
            completion_ids.append(list(tokenizer(y, add_special_tokens=False)["input_ids"]) + [tokenizer.eos_token_id])
            owner.append(i)
            base.append(float(lp))
    input_ids, attention, columns = left_aligned_rows(prompt_ids, completion_ids, pad)
    mask = (torch.arange(columns.size(1)) < torch.tensor([len(c) for c in completion_ids]).unsqueeze(1)).float()
    return ValidSetBatch(
        input_ids, attention, columns, mask, torch.tensor(owner), torch.tensor(base, dtype=torch.float64),
        len(prompts),
    )  # fmt: skip


def valid_set_logprobs(model: Any, batch: ValidSetBatch, temperature: float = 1.0) -> torch.Tensor:
    """(N,) float64 log π(y ⊕ EOS | x) of every row, differentiable in the model's parameters, on the model's device
    (the batch is built on the CPU and moved there)."""
    from rlvr_div.logprobs import completion_logprobs

    device = next(model.parameters()).device
    input_ids, attention, columns = (t.to(device) for t in (batch.input_ids, batch.attention_mask, batch.columns))
    chosen = completion_logprobs(model, input_ids, attention, columns, temperature)
    return (chosen.double() * batch.completion_mask.to(chosen.device).double()).sum(-1)


def exact_objective(logp: torch.Tensor, batch: ValidSetBatch, beta: float) -> torch.Tensor:
    """J = mean_x [Σ_{y∈V} π(y)(1 − β log(π(y)/a(y))) − β(1 − μ) log((1 − μ)/(1 − A))] (see the module docstring)
    from the rows' log π (float64)."""
    if beta < 0:
        raise ValueError(f"beta must be >= 0, got {beta}")
    owner, base = batch.owner.to(logp.device), batch.base_logp.to(logp.device)
    pi = logp.exp()
    mu = torch.zeros(batch.n_prompts, dtype=logp.dtype, device=logp.device).index_add(0, owner, pi)
    if beta == 0:
        return mu.mean()
    big_a = torch.zeros_like(mu).index_add(0, owner, base.exp())
    valid_part = torch.zeros_like(mu).index_add(0, owner, pi * (1.0 - beta * (logp - base)))
    rest = 1.0 - mu
    invalid_part = rest * (torch.log(rest.clamp(min=_LOG_EPS)) - torch.log1p(-big_a))
    return (valid_part - beta * invalid_part).mean()


def ascend(
    model: Any,
    batch: ValidSetBatch,
    beta: float,
    learning_rate: float,
    max_steps: int,
    every: int,
    on_point: Callable[[int, torch.Tensor, float], bool],
    temperature: float = 1.0,
    max_grad_norm: float | None = 1.0,
    final_learning_rate: float | None = None,
) -> int:
    """AdamW ascent on :func:`exact_objective` (full batch, no weight decay, the gradient clipped to ``max_grad_norm``
    as the Hugging Face Trainer does; None: no clipping) for ``max_steps`` steps. The learning rate is constant, or
    with ``final_learning_rate`` decays from ``learning_rate`` to it on a cosine: lr_t = f + (l − f)(1 + cos(π t/T))/2
    at step t of T. After every ``every``-th step (and the last) ``on_point(step, logp, grad_norm)`` gets the rows'
    current log π (no grad) and that step's gradient norm before clipping; it returns True to stop (e.g. a plateau).
    Returns the last step."""
    if every < 1:
        raise ValueError(f"every must be >= 1, got {every}")
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=learning_rate, weight_decay=0.0)
    model.train()
    step = 0
    while step < max_steps:
        if final_learning_rate is not None:
            cosine = 0.5 * (1.0 + math.cos(math.pi * step / max_steps))
            for group in optimizer.param_groups:
                group["lr"] = final_learning_rate + (learning_rate - final_learning_rate) * cosine
        optimizer.zero_grad(set_to_none=True)
        logp = valid_set_logprobs(model, batch, temperature)
        loss = -exact_objective(logp, batch, beta)
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(params, max_grad_norm if max_grad_norm else float("inf"))
        optimizer.step()
        step += 1
        if step % every == 0 or step == max_steps:
            with torch.no_grad():
                current = valid_set_logprobs(model, batch, temperature)
            if on_point(step, current, float(norm)) and step < max_steps:
                break
    return step


def kl_to_tilted(logp: torch.Tensor, batch: ValidSetBatch, beta: float) -> torch.Tensor:
    """mean_x KL(π̄(·|x) ‖ p̄_β(·|x)), nats, on V(x) ∪ {⊥}, where p_β(y) = a(y)·e^{1/β}/Z on V, p_β(⊥) = (1 − A)/Z and
    Z = 1 − A + A·e^{1/β}. J* − J = β·KL(π̄‖p̄_β) (J* = :func:`closed_form_objective`), so this is the distance the
    objective has left, in nats; 1 − μ is floored as in :func:`exact_objective`."""
    if beta <= 0:
        raise ValueError(f"beta must be > 0, got {beta}")
    owner, base = batch.owner.to(logp.device), batch.base_logp.to(logp.device)
    pi = logp.exp()
    mu = torch.zeros(batch.n_prompts, dtype=logp.dtype, device=logp.device).index_add(0, owner, pi)
    big_a = torch.zeros_like(mu).index_add(0, owner, base.exp())
    # log Z = 1/β + log(A + (1 − A)·e^{−1/β}), stable for small β
    log_z = 1.0 / beta + torch.log(big_a + (1.0 - big_a) * math.exp(-1.0 / beta))
    valid = torch.zeros_like(mu).index_add(0, owner, pi * (logp - base - 1.0 / beta + log_z[owner]))
    rest = 1.0 - mu
    invalid = rest * (torch.log(rest.clamp(min=_LOG_EPS)) - torch.log1p(-big_a) + log_z)
    return (valid + invalid).mean()


def closed_form_objective(base_rates: Sequence[float], beta: float) -> float:
    """The maximum of J over all distributions: mean_x β·log(1 − A + A·e^{1/β}) (the log-partition of p_β), for
    checking that ascent approaches it from below."""
    out = []
    for a in base_rates:
        # β log(1 − A + A e^{1/β}) = 1 + β log(A + (1 − A) e^{−1/β}), stable for small β
        out.append(1.0 + beta * math.log(a + (1.0 - a) * math.exp(-1.0 / beta)))
    return float(sum(out) / len(out))
