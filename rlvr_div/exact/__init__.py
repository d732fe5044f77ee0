"""Exact validity and distance to the filtered model for tasks whose valid completions can be enumerated.

For a prompt x with a finite valid set V(x) (every completion the task's verifier accepts, see
``TaskSpec.valid_completions``), teacher forcing each y ∈ V(x) followed by EOS gives the exact probability that the
policy π samples y and stops: π(y|x) = Π_t softmax(logits_t / T)[y_t] (no top-p/top-k; T = 1 is the policy itself).
From those and the same numbers under the base model a, with no sampling at all:

- validity μ(x) = Σ_{y∈V} π(y|x) and pass@k = 1 − (1 − μ)^k (k independent draws);
- the policy's distribution over valid answers π_v(y) = π(y|x)/μ(x), and the filtered model p*(y) = a(y|x)/A(x),
  A(x) = Σ_{y∈V} a(y|x) (the KL-regularised optimum's valid part for binary rewards, for every β);
- KL(p*‖π_v) = Σ_y p*(y)·(log p*(y) − log π_v(y)) (nats): how much of p* the policy has dropped, and beside
  it KL(u‖π_v) = −log|V| − mean_y log π_v(y), u uniform over V: where p* is close to uniform the two agree, and
  covering p* cannot be told apart from spreading evenly over the valid answers;
- the correct-answer entropy H(π_v) = −Σ π_v log π_v and its exponential, the effective number of valid answers;
- distinct@k = Σ_y 1 − (1 − π(y|x))^k, the expected number of distinct valid answers in k draws, and
  cov@k = Σ_y p*(y)·(1 − (1 − π(y|x))^k), the expected p*-mass of the valid answers seen in k draws;
- n90, the fewest valid answers that hold 90% of the policy's valid mass, and cov90, their p*-mass (a policy that
  piles onto a few answers has a small n90 and a cov90 far below 0.9).

A completion that decodes to a valid string only after special tokens are dropped (e.g. ``3+<pad>4``), or whose
text is valid but that never emitted EOS, is not counted: exactness is over token sequences ``y ⊕ EOS``, each y
in its canonical tokenisation (:func:`canonical_ids`). With a BPE tokenizer a valid text can also be spelled by other
token sequences; :mod:`rlvr_div.exact.noncanonical` estimates that mass by sampling, to be reported beside μ. A task
whose valid strings carry their own end (``TaskSpec.ends_with_eos`` False, e.g. a newline) is measured without the EOS.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

COVERAGE = 0.9


@dataclass(frozen=True)
class ExactPrompt:
    """One prompt's valid set V(x), with log π(y ⊕ EOS | x) and log a(y ⊕ EOS | x) for each y ∈ V(x)."""

    prompt: Any  # text, or chat messages
    valid: tuple[str, ...]
    logp: np.ndarray  # (|V|,) policy
    base_logp: np.ndarray  # (|V|,) base model a


def sequence_logprobs(
    model: Any,
    tokenizer: Any,
    prompts: Sequence[Any],
    completions: Sequence[Sequence[str]],
    temperature: float = 1.0,
    batch_size: int = 512,
    append_eos: bool = True,
    shared_prefix: bool = False,
) -> list[np.ndarray]:
    """log π(y ⊕ EOS | x) for every completion y of every prompt x: one float64 array per prompt (log π(y | x)
    without ``append_eos``, for completions that carry their own end, see ``TaskSpec.ends_with_eos``).
    ``shared_prefix``: each prompt's forward is shared by its completions
    (:func:`rlvr_div.logprobs.prefix_shared_logprobs`: the same numbers up to float round-off, far fewer tokens when
    prompts are long and completions short; batches then hold one prompt's completions).

    Prompts are tokenised as TRL tokenises them: plain text with the tokenizer's special tokens added, chat messages
    through the chat template with the generation prompt (:func:`rlvr_div.sampling.encode_prompt`); completions
    without special tokens (their canonical tokenisation: see :mod:`rlvr_div.exact.noncanonical` for the mass on
    others), then EOS; per-token log-probs come from :func:`rlvr_div.logprobs.token_logprobs`.
    """
    import torch

    from rlvr_div.logprobs import prefix_shared_logprobs, token_logprobs
    from rlvr_div.sampling import encode_prompt

    if tokenizer.eos_token_id is None:
        raise ValueError("exact validity needs a tokenizer with an EOS token")
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    prompt_ids, completion_ids, owner = [], [], []
    for i, (prompt, ys) in enumerate(zip(prompts, completions, strict=True)):
        p = encode_prompt(tokenizer, prompt)
        for y in ys:
            prompt_ids.append(p)
            completion_ids.append(canonical_ids(tokenizer, y, append_eos))
            owner.append(i)
    with torch.no_grad():
        if shared_prefix:
            per_token = []
            for i in range(len(prompts)):
                mine = [j for j, o in enumerate(owner) if o == i]
                if mine:
                    per_token += prefix_shared_logprobs(model, prompt_ids[mine[0]], [completion_ids[j] for j in mine],
                                                        temperature, batch_size, pad)  # fmt: skip
        else:
            per_token = token_logprobs(model, prompt_ids, completion_ids, temperature=temperature,
                                       batch_size=batch_size, pad_token_id=pad)  # fmt: skip
    out = [np.zeros(len(ys)) for ys in completions]
    cursor = [0] * len(prompts)
    for i, lp in zip(owner, per_token):
        out[i][cursor[i]] = math.fsum(lp)
        cursor[i] += 1
    return out


def canonical_ids(tokenizer: Any, completion: str, append_eos: bool = True) -> list[int]:
    """The canonical token sequence of a completion: the tokenizer's encoding of its text alone (no special
    tokens), then EOS when ``append_eos``. A BPE tokenizer can spell the same text other ways; those are not counted
    here (:mod:`rlvr_div.exact.noncanonical` measures their mass by sampling)."""
    ids = list(tokenizer(completion, add_special_tokens=False)["input_ids"])
    return ids + [tokenizer.eos_token_id] if append_eos else ids


def _log_normalise(logp: np.ndarray) -> tuple[float, np.ndarray]:
    """(log Σ e^logp, logp − log Σ e^logp), stable."""
    m = float(np.max(logp))
    log_total = m + math.log(float(np.sum(np.exp(logp - m))))
    return log_total, logp - log_total


def pass_at(mu: Any, k: int) -> np.ndarray:
    """pass@k = 1 − (1 − μ)^k, elementwise, as −expm1(k·log1p(−μ)) with μ clipped below 1."""
    return -np.expm1(k * np.log1p(-np.clip(mu, 0.0, 1.0 - 1e-16)))


def pass_at_one(mu: float, k: int) -> float:
    """:func:`pass_at` of one μ in scalar arithmetic (``math``: numpy's array log1p and expm1 may differ from it
    in the last bit, and the stored prompt-by-prompt numbers were computed this way)."""
    return -math.expm1(k * math.log1p(-min(mu, 1 - 1e-16)))


def expected_distinct(probs: np.ndarray, k: int, weights: np.ndarray | None = None) -> float:
    """Σ_y w_y·(1 − (1 − p_y)^k): with w = 1 the expected number of distinct y seen in k independent draws, with
    w = p* their expected p*-mass."""
    seen = pass_at(probs, k)
    return float(np.sum(seen if weights is None else weights * seen))


def prompt_metrics(ex: ExactPrompt, ks: Sequence[int]) -> dict[str, Any]:
    """The exact numbers of one prompt (see the module docstring); pass@k, distinct@k and cov@k for each k in ks."""
    log_mu, log_pv = _log_normalise(ex.logp)
    log_a, log_pstar = _log_normalise(ex.base_logp)
    mu, pv, pstar, pi = math.exp(log_mu), np.exp(log_pv), np.exp(log_pstar), np.exp(ex.logp)
    order = np.argsort(-pv, kind="stable")
    n90 = int(np.searchsorted(np.cumsum(pv[order]), COVERAGE * (1 - 1e-12))) + 1
    entropy = float(-np.sum(pv * log_pv))
    return {
        "prompt": ex.prompt,
        "n_valid": len(ex.valid),
        "mu": mu,
        "base_mu": math.exp(log_a),
        "kl_pstar": float(np.sum(pstar * (log_pstar - log_pv))),
        "kl_uniform": float(-math.log(len(ex.valid)) - np.mean(log_pv)),
        "entropy_valid": entropy,
        "effective_answers": math.exp(entropy),
        "n90": n90,
        "cov90": float(np.sum(pstar[order[:n90]])),
        "top_answer": ex.valid[int(order[0])],
        "top_share": float(pv[order[0]]),
        "pass_at": {str(k): pass_at_one(mu, k) for k in ks},
        "distinct_at": {str(k): expected_distinct(pi, k) for k in ks},
        "cov_at": {str(k): expected_distinct(pi, k, pstar) for k in ks},
    }


def expected_lost_gained(base_mu: Sequence[float], mu: Sequence[float], k: int) -> tuple[float, float]:
    """Expected numbers of problems lost and gained at k draws each, draws independent between the two models:
    lost = Σ_x (1 − (1 − A_x)^k)·(1 − μ_x)^k (the base solves x, the model does not), gained the other way round."""
    b, m = pass_at(np.asarray(base_mu, float), k), pass_at(np.asarray(mu, float), k)
    return float(np.sum(b * (1 - m))), float(np.sum((1 - b) * m))


def exact_prompts(
    model: Any,
    base: Any,
    tokenizer: Any,
    prompts: Sequence[Any],
    valid_sets: Sequence[Sequence[str]],
    temperature: float = 1.0,
    base_logps: Sequence[np.ndarray] | None = None,
    append_eos: bool = True,
) -> list[ExactPrompt]:
    """Teacher-force every valid completion under the policy and the base (``base_logps`` reuses a base pass)."""
    logps = sequence_logprobs(model, tokenizer, prompts, valid_sets, temperature, append_eos=append_eos)
    if base_logps is None:
        base_logps = sequence_logprobs(base, tokenizer, prompts, valid_sets, temperature, append_eos=append_eos)
    return [
        ExactPrompt(p, tuple(v), lp, blp) for p, v, lp, blp in zip(prompts, valid_sets, logps, base_logps, strict=True)
    ]
