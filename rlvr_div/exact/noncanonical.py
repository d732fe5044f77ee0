"""The mass a policy puts on non-canonical tokenisations of valid answers, estimated by sampling.

Exact validity (:mod:`rlvr_div.exact`) teacher-forces one token sequence per valid answer y: its canonical
tokenisation c(y) (the tokenizer's encoding of y alone), then EOS. A BPE vocabulary can spell the same text with
other sequences (``"su"`` as one token or as ``"s" "u"``; a newline as ``"\\n"`` or inside ``"\\n\\n"``; a special
token inside the answer, dropped when the text is decoded), and the verifier, which reads text, accepts those
too. So the validity a sampler sees is

    P(text valid) = μ + ν,    μ = Σ_y π(c(y) ⊕ EOS | x) (exact),    ν = P(text valid, tokens not canonical)

and ν is estimated from n samples per prompt: a sample counts as *valid* when its text is a valid answer (with EOS
for ``ends_with_eos`` tasks; else its text starts with a valid string, which carries its own end), and as
*canonical* when its first tokens are exactly c(y) (⊕ EOS). The canonical rate estimates μ without bias, so it
must agree with exact μ within sampling error (a check of the exact path), and ν is reported beside every exact
number.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rlvr_div.exact import canonical_ids


@dataclass(frozen=True)
class TokenisationCounts:
    """One prompt's samples: how many, how many had a valid text, and how many of those were canonical."""

    samples: int
    valid: int
    canonical: int


def classify(tokenizer: Any, ids: Sequence[int], valid: Sequence[str], append_eos: bool = True) -> tuple[bool, bool]:
    """(text valid, canonical) for one sampled token sequence ``ids`` (cut after its first EOS, if any)."""
    eos = tokenizer.eos_token_id
    finished = bool(ids) and ids[-1] == eos
    text = tokenizer.decode(list(ids), skip_special_tokens=True)
    if append_eos:
        answer = text if finished and text in set(valid) else None
    else:
        answer = next((v for v in valid if text.startswith(v)), None)
    if answer is None:
        return False, False
    canonical = canonical_ids(tokenizer, answer, append_eos)
    return True, list(ids[: len(canonical)]) == canonical


def sample_tokenisations(
    model: Any,
    tokenizer: Any,
    prompts: Sequence[Any],
    valid_sets: Sequence[Sequence[str]],
    n: int,
    append_eos: bool = True,
    seed: int = 0,
    temperature: float = 1.0,
    max_new_tokens: int | None = None,
    batch_size: int = 256,
) -> list[TokenisationCounts]:
    """Sample n completions per prompt from ``model`` (:class:`rlvr_div.sampling.HFSampler`, pure sampling at
    ``temperature``) and count valid and canonical ones (:func:`classify`). ``max_new_tokens`` defaults to twice the
    longest canonical valid sequence (room for a spelling in more, shorter tokens)."""
    from rlvr_div.sampling import HFSampler, SamplingConfig

    if max_new_tokens is None:
        longest = max(len(canonical_ids(tokenizer, y, append_eos)) for ys in valid_sets for y in ys)
        max_new_tokens = 2 * longest
    config = SamplingConfig(n=n, temperature=temperature, max_new_tokens=max_new_tokens, seed=seed,
                            batch_size=batch_size)  # fmt: skip
    sampler = HFSampler(model, tokenizer, config)
    out = []
    for samples, valid in zip(sampler.sample(list(prompts), progress=False), valid_sets, strict=True):
        flags = [classify(tokenizer, ids, valid, append_eos) for ids in samples.completion_ids]
        out.append(TokenisationCounts(n, sum(v for v, _ in flags), sum(c for _, c in flags)))
    return out


def summarise_tokenisations(counts: Sequence[TokenisationCounts]) -> dict[str, float]:
    """Mean over prompts of the sampled validity, the canonical rate (an estimate of exact μ) and the non-canonical
    mass ν = valid − canonical, each with its standard error (prompts equally weighted, binomial within a prompt)."""
    k = len(counts)

    def mean_se(rates: list[float], ns: list[int]) -> tuple[float, float]:
        var = sum(r * (1 - r) / n for r, n in zip(rates, ns)) / k**2
        return sum(rates) / k, math.sqrt(var)

    ns = [c.samples for c in counts]
    valid = mean_se([c.valid / c.samples for c in counts], ns)
    canonical = mean_se([c.canonical / c.samples for c in counts], ns)
    other = mean_se([(c.valid - c.canonical) / c.samples for c in counts], ns)
    return {
        "samples_per_prompt": float(max(ns)),
        "sampled_validity": valid[0],
        "sampled_validity_se": valid[1],
        "canonical_rate": canonical[0],
        "canonical_rate_se": canonical[1],
        "noncanonical_mass": other[0],
        "noncanonical_mass_se": other[1],
    }
