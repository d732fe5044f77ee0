"""Comparisons that need each prompt's numbers, not only a split's mean: a method against the untrained base at every
k with an interval that includes prompt sampling, and validity by the base's difficulty.

Both read the exact per-prompt validities μ_s(x) of a method's seed-s run and A(x) of the base on the same prompts
(the ``per_prompt`` lists of ``result.json`` and ``base/<task>.json``, in the split's order).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from collapse_bench.measure import MIN_PROBLEMS
from collapse_bench.stats import mean_ci

# base validity A(x): hard, middle, near-perfect (8 of 8 correct with probability ≥ 0.66 at A ≥ 0.95)
DIFFICULTY_BINS = ((0.0, 0.5), (0.5, 0.95), (0.95, 1.0))


def pass_at(mu: np.ndarray, k: int) -> np.ndarray:
    """pass@k = 1 − (1 − μ)^k, elementwise."""
    return -np.expm1(k * np.log1p(-np.clip(mu, 0.0, 1.0 - 1e-16)))


def versus_base(
    per_seed_mu: Mapping[int, Sequence[float]],
    base_mu: Sequence[float],
    ks: Sequence[int],
    reps: int = 1000,
    level: float = 0.95,
    seed: int = 0,
    min_problems: float = MIN_PROBLEMS,
) -> dict[str, dict[str, Any]]:
    """Δ pass@k = mean over seeds s and prompts x of pass@k(μ_s(x)) − pass@k(A(x)), for each k, with an interval
    that cannot be narrower than either of two: a two-level percentile bootstrap that resamples seeds and,
    independently, prompts (the prompt sampling of the split), and the Student-t interval over the seeds' prompt
    means (a percentile bootstrap over a handful of seeds alone is too narrow). ``separated``: the interval excludes 0
    **and** the difference is at least ``min_problems`` problems (|Δ| · prompts; positive: the method ahead of the
    base at that k; negative: the base ahead)."""
    seeds = sorted(per_seed_mu)
    if not seeds:
        return {}
    mu = np.asarray([per_seed_mu[s] for s in seeds], float)  # (S, P)
    base = np.asarray(base_mu, float)
    if mu.shape[1] != base.shape[0]:
        raise ValueError(f"{mu.shape[1]} prompts per run against {base.shape[0]} of the base")
    rng = np.random.default_rng(seed)
    s_idx = rng.integers(0, mu.shape[0], size=(reps, mu.shape[0]))
    p_idx = rng.integers(0, mu.shape[1], size=(reps, mu.shape[1]))
    out = {}
    for k in ks:
        d = pass_at(mu, k) - pass_at(base, k)[None, :]  # (S, P)
        resampled = np.take_along_axis(d[s_idx], p_idx[:, None, :], axis=2)  # (reps, S, P): seeds, then prompts
        boots = resampled.mean(axis=(1, 2))
        lo, hi = np.quantile(boots, [(1 - level) / 2, (1 + level) / 2])
        t = mean_ci(d.mean(axis=1).tolist(), level)
        if t["lo"] is not None:
            lo, hi = min(lo, t["lo"]), max(hi, t["hi"])
        problems = float(d.mean()) * mu.shape[1]
        out[str(k)] = {
            "mean": float(d.mean()),
            "lo": float(lo),
            "hi": float(hi),
            "problems": problems,
            "separated": bool((lo > 0 or hi < 0) and abs(problems) >= min_problems),
            "n_seeds": len(seeds),
            "n_prompts": int(mu.shape[1]),
        }
    return out


def by_difficulty(
    per_seed_mu: Mapping[int, Sequence[float]],
    base_mu: Sequence[float],
    bins: Sequence[tuple[float, float]] = DIFFICULTY_BINS,
) -> list[dict[str, Any]]:
    """Per bin of the base's validity A(x) (the last bin closed at 1): the prompts in it, the base's mean A, and
    the method's mean μ over those prompts, mean ± t-interval over seeds."""
    base = np.asarray(base_mu, float)
    out = []
    for i, (lo, hi) in enumerate(bins):
        last = i == len(bins) - 1
        mask = (base >= lo) & ((base <= hi) if last else (base < hi))
        entry: dict[str, Any] = {"range": [lo, hi], "prompts": int(mask.sum())}
        if mask.any():
            entry["base_mu"] = float(base[mask].mean())
            entry["mu"] = mean_ci([float(np.asarray(v, float)[mask].mean()) for v in per_seed_mu.values()])
        out.append(entry)
    return out
