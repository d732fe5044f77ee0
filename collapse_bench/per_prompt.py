"""Comparisons that need each prompt's numbers, not only a split's mean: a method against the untrained base at every
k with an interval that includes prompt sampling, two training paths at matched validity with the same, and validity
by the base's difficulty.

Both read the exact per-prompt validities μ_s(x) of a method's seed-s run and A(x) of the base on the same prompts
(the ``per_prompt`` lists of ``result.json`` and ``base/<task>.json``, in the split's order).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from collapse_bench.measure import MIN_PROBLEMS, path_value_at
from collapse_bench.stats import mean_ci, t_quantile, t_test_p
from rlvr_div.exact import pass_at

# base validity A(x): hard, middle, near-perfect (8 of 8 correct with probability ≥ 0.66 at A ≥ 0.95)
DIFFICULTY_BINS = ((0.0, 0.5), (0.5, 0.95), (0.95, 1.0))


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


def _path_arrays(path: Sequence[Mapping[str, Any]], key: str) -> tuple[list[int], np.ndarray, np.ndarray]:
    """A path's steps and its points' per-prompt μ and ``key`` as (points, prompts) arrays."""
    if not all("per_prompt" in p for p in path):
        raise ValueError("a path point has no per_prompt numbers (the study ran without path_per_prompt)")
    return ([int(p["step"]) for p in path], np.asarray([p["per_prompt"]["mu"] for p in path], float),
            np.asarray([p["per_prompt"][key] for p in path], float))  # fmt: skip


def _level_value(arrays: tuple[list[int], np.ndarray, np.ndarray], prompts: np.ndarray, level: float, key: str
                 ) -> float | None:  # fmt: skip
    """``key`` where a path first reaches validity ``level``, with the path's μ and ``key`` recomputed as means over
    the prompt indices ``prompts`` (:func:`path_value_at`'s rule)."""
    steps, mu, values = arrays
    means_mu, means_key = mu[:, prompts].mean(axis=1), values[:, prompts].mean(axis=1)
    points = [{"step": t, "mu": float(m), key: float(v)} for t, m, v in zip(steps, means_mu, means_key, strict=True)]
    return path_value_at(points, level, key)


def matched_with_prompts(
    method_paths: Mapping[int, Sequence[Mapping[str, Any]]],
    baseline_paths: Mapping[int, Sequence[Mapping[str, Any]]],
    level: float,
    key: str,
    resamples: int = 2000,
    seed: int = 0,
    confidence: float = 0.95,
) -> dict[str, Any]:
    """Method minus baseline in path number ``key`` at validity ``level``, read along both training paths of each seed s
    (d_s, :func:`path_value_at` on the prompts' means), with an interval that includes prompt sampling.

    The prompts are the same for every seed (a crossed design), so the seeds' spread leaves the prompts' out: the
    variance of d̄ = mean_s d_s is taken as sd_s²/n + v_p, where v_p is the variance of d̄ over ``resamples``
    bootstrap draws of the prompts (with replacement, one draw shared by all seeds and both arms, the paths' μ and
    ``key`` recomputed on the drawn prompts, so the matched point moves with them). Interval d̄ ± t_{n−1}·se, and
    the two-sided p-value of t = d̄/se with n − 1 degrees of freedom; None below 2 seeds. Beside them, the same with
    Welch–Satterthwaite df (:func:`satterthwaite_df` with s1 = sd_s²/n on n − 1 df and s2 = v_p on P − 1 df for P
    prompts: df = (s1 + s2)² / (s1²/(n − 1) + s2²/(P − 1))): ``df_satterthwaite``, ``half_satterthwaite`` (the
    interval's half-width with t_df) and ``p_satterthwaite`` (the same t on df); a reading beside the declared one,
    which Holm reads. Seeds whose two paths do not both reach ``level`` are left out (``seeds`` lists those taken,
    ``differences`` their d_s); a draw in which a seed's resampled path misses ``level`` leaves that seed out of that
    draw (``missed_draws`` counts them)."""
    seeds, diffs, arrays = [], [], {}
    for s in sorted(set(method_paths) & set(baseline_paths)):
        a, b = _path_arrays(method_paths[s], key), _path_arrays(baseline_paths[s], key)
        arrays[s] = (a, b)
        everyone = np.arange(a[1].shape[1])
        va, vb = _level_value(a, everyone, level, key), _level_value(b, everyone, level, key)
        if va is not None and vb is not None:
            seeds.append(s)
            diffs.append(va - vb)
    out: dict[str, Any] = {"level": level, "key": key, "seeds": seeds, "differences": [float(d) for d in diffs],
                           "n": len(seeds), "mean": None, "lo": None, "hi": None, "half": None, "se_seeds": None,
                           "se_prompts": None, "p": None, "df_satterthwaite": None, "half_satterthwaite": None,
                           "p_satterthwaite": None, "missed_draws": 0}  # fmt: skip
    if not seeds:
        return out
    mean = float(np.mean(diffs))
    out["mean"] = mean
    if len(seeds) < 2:
        return out
    n_prompts = arrays[seeds[0]][0][1].shape[1]
    rng = np.random.default_rng(seed)
    draws = []
    for _ in range(resamples):
        idx = rng.integers(0, n_prompts, size=n_prompts)
        ds = []
        for s in seeds:
            va, vb = (_level_value(arr, idx, level, key) for arr in arrays[s])
            if va is None or vb is None:
                out["missed_draws"] += 1
            else:
                ds.append(va - vb)
        if ds:
            draws.append(float(np.mean(ds)))
    n = len(seeds)
    se_seeds = float(np.std(diffs, ddof=1) / np.sqrt(n))
    se_prompts = float(np.std(draws, ddof=1)) if len(draws) > 1 else 0.0
    se = float(np.hypot(se_seeds, se_prompts))
    half = t_quantile(0.5 + confidence / 2.0, n - 1) * se
    df = satterthwaite_df(se_seeds**2, n - 1, se_prompts**2, n_prompts - 1)
    out |= {"lo": mean - half, "hi": mean + half, "half": half, "se_seeds": se_seeds, "se_prompts": se_prompts,
            "p": t_test_p(mean, se, n - 1), "df_satterthwaite": df,
            "half_satterthwaite": t_quantile(0.5 + confidence / 2.0, df) * se if se > 0 else 0.0,
            "p_satterthwaite": t_test_p(mean, se, df)}  # fmt: skip
    return out


def satterthwaite_df(v1: float, df1: float, v2: float, df2: float) -> float:
    """Welch–Satterthwaite degrees of freedom of a variance v1 + v2 whose parts have df1 and df2:
    (v1 + v2)² / (v1²/df1 + v2²/df2); df1 when v2 = 0 and df2 when v1 = 0. Where the prompts' part dominates, the
    t quantile of :func:`matched_with_prompts` with n − 1 df (the declared, conservative one) overstates the interval;
    this df is reported beside it."""
    if v1 + v2 <= 0:
        return float(df1)
    return float((v1 + v2) ** 2 / ((v1**2 / df1 if v1 else 0.0) + (v2**2 / df2 if v2 else 0.0)))
