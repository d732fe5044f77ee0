"""The unbiased pass@k estimator, the one every part of the project uses (evaluation, PKPO, Pass@k Training).

With n samples of a problem of which c are correct, pass@k = 1 − C(n−c, k)/C(n, k): the probability that k samples
drawn without replacement from the n include a correct one (Chen et al. 2021), computed as 1 − ∏_{i=n−c+1}^{n}
(1 − k/i), and 1 when n − c < k.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def pass_at_k(n: Sequence[int] | np.ndarray, c: Sequence[int] | np.ndarray, ks: Sequence[int]) -> np.ndarray:
    """Unbiased pass@k per problem (Chen et al. 2021), shape (problems, len(ks)), float64.

    With n samples of which c are correct, pass@k = 1 − C(n−c, k)/C(n, k) = 1 − ∏_{i=n−c+1}^{n} (1 − k/i), and 1
    when n − c < k: the probability that k samples drawn without replacement from the n include a correct one.
    The product form never forms a binomial coefficient, so it is stable for n in the thousands. Problems that share
    (n, c) share one product, so the work is O(#distinct (n, c) · len(ks) · max c), not O(problems · n).
    """
    n_arr = np.asarray(n, dtype=np.int64).reshape(-1)
    c_arr = np.asarray(c, dtype=np.int64).reshape(-1)
    k_arr = np.asarray(ks, dtype=np.int64).reshape(-1)
    if n_arr.shape != c_arr.shape:
        raise ValueError(f"n and c must have the same length, got {n_arr.shape} and {c_arr.shape}")
    if n_arr.size and ((c_arr < 0).any() or (c_arr > n_arr).any()):
        raise ValueError("need 0 <= c <= n for every problem")
    if k_arr.size and (k_arr < 1).any():
        raise ValueError(f"k must be >= 1, got {k_arr.tolist()}")
    if n_arr.size and k_arr.size and k_arr.max() > n_arr.min():
        raise ValueError(f"k = {int(k_arr.max())} exceeds the fewest samples of a problem (n = {int(n_arr.min())})")
    out = np.zeros((n_arr.size, k_arr.size), dtype=np.float64)
    if not n_arr.size or not k_arr.size:
        return out
    pairs, inverse = np.unique(np.stack([n_arr, c_arr], axis=1), axis=0, return_inverse=True)
    pn, pc = pairs[:, 0], pairs[:, 1]
    width = int(pc.max())
    if width == 0:
        return out
    # factors[p, j] = 1 - k / (n - c + 1 + j) for j < c (the product's terms), 1 beyond; shape (pairs, ks, width).
    j = np.arange(width)
    denom = (pn - pc + 1)[:, None] + j[None, :]  # (pairs, width)
    active = j[None, :] < pc[:, None]
    factors = 1.0 - k_arr[None, :, None] / np.where(active, denom, 1)[:, None, :]
    factors = np.where(active[:, None, :], factors, 1.0)
    values = 1.0 - np.prod(factors, axis=2)  # (pairs, ks)
    values = np.where((pn - pc)[:, None] < k_arr[None, :], 1.0, values)
    return values[inverse.reshape(-1)]


def report_ks(n: int) -> list[int]:
    """The k reported for n samples: 1, 2, 4, … (powers of two ≤ n) and n itself."""
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    ks = [1 << i for i in range(n.bit_length()) if (1 << i) <= n]
    return ks if ks[-1] == n else [*ks, n]


def pass_at_k_estimate(n: int, c: int, k: int) -> float:
    """ρ(n, c, k) = 1 − C(n−c, k)/C(n, k) for one problem (:func:`pass_at_k`), with ρ(n, c, 0) = 0 (no draw holds
    no correct sample): the average over all size-k subsets of 1[subset has a correct sample]."""
    if not 0 <= c <= n or not 0 <= k <= n:
        raise ValueError(f"need 0 <= c <= n and 0 <= k <= n, got n={n}, c={c}, k={k}")
    return 0.0 if k == 0 else float(pass_at_k([n], [c], [k])[0, 0])
