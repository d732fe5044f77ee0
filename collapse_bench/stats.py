"""Seed statistics of the collapse benchmark: means with Student-t confidence intervals, and paired differences.

With s seeds x_1..x_s of a metric, the interval is x̄ ± t_{(1+level)/2, s−1} · sd/√s (sd with the s − 1 divisor).
A paired difference compares two methods seed by seed (same data order and evaluation prompts): d_i = x_i − y_i
over the seeds both have, and the same interval on the d_i. The t quantile is computed from the regularised
incomplete beta function (continued fraction, Lentz's method), so no statistics package is needed. Beside the
t-test's p, every paired difference carries the exact sign-flip permutation p (:func:`sign_flip_p`), valid for few
seeds without assuming normality: with 5 seeds the smallest two-sided p it can give is 2/32 = 0.0625.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from typing import Any


def _betacf(a: float, b: float, x: float) -> float:
    """The continued fraction of the regularised incomplete beta function I_x(a, b) (modified Lentz)."""
    tiny, qab, qap, qam = 1e-300, a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 500):
        m2 = 2 * m
        for num in (m * (b - m) * x / ((qam + m2) * (a + m2)), -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))):
            d = 1.0 + num * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + num / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 1e-15:
            break
    return h


def incomplete_beta(a: float, b: float, x: float) -> float:
    """I_x(a, b) = B(x; a, b)/B(a, b) for 0 ≤ x ≤ 1."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    log_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(log_front) * _betacf(a, b, x) / a
    return 1.0 - math.exp(log_front) * _betacf(b, a, 1.0 - x) / b


def clopper_pearson_upper(successes: int, trials: int, level: float = 0.95) -> float:
    """The one-sided ``level`` Clopper–Pearson upper bound of a binomial proportion: the p with
    P(X ≤ successes | trials, p) = 1 − level, i.e. I_p(successes + 1, trials − successes) = level (bisection);
    1 when every trial succeeded. With no success it is 1 − (1 − level)^(1/trials)."""
    if not 0 <= successes <= trials or trials < 1:
        raise ValueError(f"need 0 <= successes <= trials and trials >= 1, got {successes} of {trials}")
    if successes == trials:
        return 1.0
    lo, hi = 0.0, 1.0
    for _ in range(200):
        mid = (lo + hi) / 2
        if incomplete_beta(successes + 1, trials - successes, mid) < level:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def t_cdf(t: float, df: float) -> float:
    """P(T ≤ t) for Student's t with ``df`` degrees of freedom: 1 − I_{df/(df+t²)}(df/2, 1/2)/2 for t ≥ 0."""
    tail = 0.5 * incomplete_beta(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t >= 0 else tail


def t_quantile(p: float, df: float) -> float:
    """The p-quantile of Student's t (bisection on :func:`t_cdf`, to 1e-12)."""
    if not 0.0 < p < 1.0 or df <= 0:
        raise ValueError(f"t_quantile needs 0 < p < 1 and df > 0, got p={p}, df={df}")
    if p < 0.5:
        return -t_quantile(1.0 - p, df)
    lo, hi = 0.0, 1.0
    while t_cdf(hi, df) < p:
        hi *= 2.0
    while hi - lo > 1e-12 * max(1.0, hi):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if t_cdf(mid, df) < p else (lo, mid)
    return 0.5 * (lo + hi)


def mean_ci(values: Sequence[float], level: float = 0.95) -> dict[str, Any]:
    """{mean, half, lo, hi, sd, n}: the mean of ``values`` and its t-interval (half-width ``half``; None for n < 2)."""
    xs = [float(v) for v in values if v is not None and math.isfinite(float(v))]
    n = len(xs)
    if n == 0:
        return {"mean": None, "half": None, "lo": None, "hi": None, "sd": None, "n": 0}
    mean = math.fsum(xs) / n
    if n < 2:
        return {"mean": mean, "half": None, "lo": None, "hi": None, "sd": None, "n": 1}
    sd = math.sqrt(math.fsum((x - mean) ** 2 for x in xs) / (n - 1))
    half = t_quantile(0.5 + level / 2.0, n - 1) * sd / math.sqrt(n)
    return {"mean": mean, "half": half, "lo": mean - half, "hi": mean + half, "sd": sd, "n": n}


def paired_difference(a: Mapping[int, float], b: Mapping[int, float], level: float = 0.95) -> dict[str, Any]:
    """The mean of a[s] − b[s] over the seeds s both have, with its t-interval, and whether the interval excludes 0."""
    seeds = sorted(set(a) & set(b))
    out = mean_ci([a[s] - b[s] for s in seeds], level)
    out["seeds"] = seeds
    out["separated"] = out["lo"] is not None and (out["lo"] > 0 or out["hi"] < 0)
    out["sign_flip_p"] = sign_flip_p([a[s] - b[s] for s in seeds])
    return out


SIGN_FLIP_MAX = 20  # 2^20 sign vectors: exact enumeration takes a few seconds


def sign_flip_p(differences: Sequence[float]) -> float | None:
    """Exact two-sided sign-flip permutation p of H0: the paired differences are symmetric about 0: the share of
    the 2^n sign vectors whose |mean| is at least the observed |mean| (the observed vector counts). None for no
    differences or more than :data:`SIGN_FLIP_MAX` of them. The smallest p it can give is 2/2^n (all differences of
    one sign: the observed signs and their mirror), 0.0625 with 5 seeds; all differences zero give 1."""
    d = [float(x) for x in differences if x is not None and math.isfinite(float(x))]
    n = len(d)
    if n == 0 or n > SIGN_FLIP_MAX:
        return None
    observed = abs(math.fsum(d))
    tol = 1e-12 * max(1.0, math.fsum(abs(x) for x in d))
    hits = sum(
        1
        for signs in itertools.product((1.0, -1.0), repeat=n)
        if abs(math.fsum(g * x for g, x in zip(signs, d))) >= observed - tol
    )
    return hits / 2**n


def paired_p_value(diff: Mapping[str, Any]) -> float | None:
    """Two-sided p-value of the paired t-test behind :func:`paired_difference` (H0: mean difference 0), from its
    mean, sd and n; None with fewer than 2 seeds. A zero sd gives 0 (a nonzero mean) or 1."""
    n, mean, sd = diff.get("n", 0), diff.get("mean"), diff.get("sd")
    if n < 2 or mean is None or sd is None:
        return None
    return t_test_p(mean, sd / math.sqrt(n), n - 1)


def t_test_p(mean: float, se: float, df: float) -> float:
    """Two-sided p-value of H0: mean 0, from the t statistic |mean|/se with ``df`` degrees of freedom; a zero
    ``se`` gives 0 (a nonzero mean) or 1."""
    if se == 0:
        return 0.0 if mean != 0 else 1.0
    return 2.0 * (1.0 - t_cdf(abs(mean) / se, df))


def holm(p_values: Mapping[Any, float | None], alpha: float = 0.05) -> dict[Any, bool]:
    """Holm–Bonferroni over a family: sort the m p-values p_(1) <= ... <= p_(m), reject H_(i) while
    p_(i) <= alpha / (m − i + 1); True for the hypotheses rejected (the claims that survive). None counts as not
    rejected and is not part of m."""
    tested = sorted(((p, key) for key, p in p_values.items() if p is not None), key=lambda pk: pk[0])
    m = len(tested)
    out = {key: False for key in p_values}
    for i, (p, key) in enumerate(tested):
        if p > alpha / (m - i):
            break
        out[key] = True
    return out


def holm_adjusted(p_values: Mapping[Any, float]) -> dict[Any, float]:
    """Holm's adjusted p-values over a family of m: with p_(1) <= ... <= p_(m), p̃_(i) = max_{j<=i} min(1, (m − j + 1)
    · p_(j)); H_(i) is rejected at α by :func:`holm` exactly when p̃_(i) <= α."""
    ordered = sorted(p_values.items(), key=lambda kv: kv[1])
    out: dict[Any, float] = {}
    running = 0.0
    for i, (key, p) in enumerate(ordered):
        running = max(running, min(1.0, (len(ordered) - i) * p))
        out[key] = running
    return out


def holm_paired(family: Mapping[Any, dict[str, Any]], alpha: float = 0.05) -> int:
    """Paired t-test and Holm–Bonferroni over a family of paired differences (:func:`paired_difference`'s dicts):
    each gets ``p`` (:func:`paired_p_value`) and then ``holm`` (True: it survives at ``alpha``). Returns the number
    tested (those with a p-value)."""
    for diff in family.values():
        diff["p"] = paired_p_value(diff)
    for key, ok in holm({key: diff["p"] for key, diff in family.items()}, alpha).items():
        family[key]["holm"] = ok
    return sum(1 for diff in family.values() if diff["p"] is not None)
