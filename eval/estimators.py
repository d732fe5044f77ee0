"""Estimators over n samples per problem: unbiased pass@k, cover@τ, maj@k, and bootstrap standard errors.

All per-problem estimators return arrays of shape (problems, len(ks)); the reported number is their mean over
problems, and its standard error is a bootstrap over problems (:func:`bootstrap_se`).
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import combinations
from math import comb

import numpy as np

from rlvr_div.passk import pass_at_k, report_ks

__all__ = ["pass_at_k", "report_ks", "cover_at", "maj_at_k", "bootstrap_se"]


def cover_at(n: Sequence[int] | np.ndarray, c: Sequence[int] | np.ndarray, taus: Sequence[float]) -> np.ndarray:
    """cover@τ per problem, shape (problems, len(taus)): 1 when the problem's validity rate c/n ≥ τ, else 0.

    Compared exactly as c ≥ τ·n (with a 1e-9 tolerance for τ that are not exact binary fractions, e.g. 0.1·10)."""
    n_arr = np.asarray(n, dtype=np.float64).reshape(-1, 1)
    c_arr = np.asarray(c, dtype=np.float64).reshape(-1, 1)
    t = np.asarray(taus, dtype=np.float64).reshape(1, -1)
    return (c_arr >= t * n_arr - 1e-9).astype(np.float64)


def maj_at_k(
    answers: Sequence[Sequence[str | None]],
    correct: Sequence[Sequence[bool]],
    ks: Sequence[int],
    seeds: Sequence[int],
    subsets: int = 200,
) -> np.ndarray:
    """maj@k per problem, shape (problems, len(ks)): the expected accuracy of a majority vote over the verifier's
    extracted answers of k samples drawn without replacement from the problem's n samples.

    Votes: samples whose extracted answer is None abstain; a subset where everyone abstains scores 0. An answer is
    correct when a sample carrying it was scored correct. Ties between the most frequent answers are broken
    uniformly at random, in expectation: a subset scores (#correct answers among the tied top)/(#tied top).
    Estimate: exact (every k-subset enumerated) when C(n, k) ≤ ``subsets`` — so k = 1 and k = n are always exact —
    otherwise the mean over ``subsets`` uniformly random k-subsets: the first k entries of ``subsets`` random
    permutations of the samples drawn with ``numpy.random.default_rng(seeds[i])`` for problem i (so a problem's
    estimate does not depend on the other problems; the same permutations serve every k).
    """
    if not (len(answers) == len(correct) == len(seeds)):
        raise ValueError("answers, correct and seeds need one entry per problem")
    out = np.zeros((len(answers), len(ks)), dtype=np.float64)
    for p, (ans, ok, seed) in enumerate(zip(answers, correct, seeds)):
        n = len(ans)
        if len(ok) != n:
            raise ValueError(f"problem {p}: {n} answers but {len(ok)} correctness flags")
        classes: dict[str, int] = {}
        ids = np.array([-1 if a is None else classes.setdefault(a, len(classes)) for a in ans], dtype=np.int64)
        m = len(classes)
        if m == 0:
            continue
        class_ok = np.zeros(m, dtype=bool)
        for i, a_id in enumerate(ids):
            if a_id >= 0 and ok[i]:
                class_ok[a_id] = True
        perms = None  # random permutations of the samples; their first k form uniform k-subsets, for every k
        for j, k in enumerate(ks):
            if k > n:
                raise ValueError(f"k = {k} exceeds n = {n} samples of problem {p}")
            if comb(n, k) <= subsets:
                chosen = np.array(list(combinations(range(n), k)), dtype=np.int64).reshape(-1, k)
            else:
                if perms is None:
                    perms = np.argsort(np.random.default_rng(int(seed)).random((subsets, n)), axis=1)
                chosen = perms[:, :k]
            out[p, j] = _vote_accuracy(ids[chosen], class_ok, m)
    return out


def _vote_accuracy(votes: np.ndarray, class_ok: np.ndarray, m: int) -> float:
    """Mean over rows of ``votes`` (subsets × k answer ids, −1 abstains) of the majority vote's expected accuracy."""
    rows = votes.shape[0]
    valid = votes >= 0
    flat = (votes + m * np.arange(rows)[:, None])[valid]
    counts = np.bincount(flat, minlength=rows * m).reshape(rows, m)
    top = counts.max(axis=1, keepdims=True)
    tied = (counts == top) & (top > 0)
    n_tied = tied.sum(axis=1)
    score = np.where(n_tied > 0, (tied & class_ok[None, :]).sum(axis=1) / np.maximum(n_tied, 1), 0.0)
    return float(score.mean())


def bootstrap_se(values: np.ndarray, resamples: int = 1000, seed: int = 0) -> np.ndarray:
    """Bootstrap standard error of the mean over problems (axis 0) of ``values`` (problems × …).

    Draws ``resamples`` multisets of the problems with replacement (``numpy.random.default_rng(seed)``), takes each
    one's mean, and returns the standard deviation (ddof = 1) of those means. 0 for fewer than two problems."""
    v = np.asarray(values, dtype=np.float64)
    p = v.shape[0]
    if p < 2 or resamples < 2:
        return np.zeros(v.shape[1:], dtype=np.float64)
    rng = np.random.default_rng(seed)
    counts = rng.multinomial(p, np.full(p, 1.0 / p), size=resamples).astype(np.float64)  # (resamples, problems)
    means = counts @ v.reshape(p, -1) / p
    return means.std(axis=0, ddof=1).reshape(v.shape[1:])
