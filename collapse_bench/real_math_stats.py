"""The real-math study's numbers from per-problem correct counts: problems lost and gained against the base (expected
counts from the unbiased pass@k), their interval over seeds and problems, the held-out paths in the form
:func:`collapse_bench.per_prompt.matched_with_prompts` reads, and an exact sign-flip test over seeds.

A model evaluated with n samples per problem, c of them correct, has the unbiased per-problem estimate
pass@k = 1 − C(n−c, k)/C(n, k) (:func:`eval.estimators.pass_at_k`). Against the base's b_x = pass_base@k(x) and a
run's m_x = pass_run@k(x), with the draws of the two models independent (collapse_bench.real_lm_report's definition,
:func:`rlvr_div.exact.expected_lost_gained`):

    lost@k = Σ_x b_x·(1 − m_x)        gained@k = Σ_x (1 − b_x)·m_x

and since the two models' samples are independent, b̂_x(1 − m̂_x) is unbiased for b_x(1 − m_x).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from collapse_bench.stats import mean_ci
from collapse_bench.stats import sign_flip_p as stats_sign_flip_p
from eval.estimators import pass_at_k


def pass_per_problem(n: int, c: Sequence[int], k: int) -> np.ndarray:
    """Unbiased pass@k of each problem (n samples each, ``c`` correct)."""
    return pass_at_k([n] * len(c), list(c), [k])[:, 0]


def lost_gained_terms(base: Mapping[str, Any], run: Mapping[str, Any], k: int) -> tuple[np.ndarray, np.ndarray]:
    """Per problem (the run's problems, the base's first that many): b·(1 − m) and (1 − b)·m at k; ``base`` and
    ``run`` are ``{n, c}`` count records."""
    problems = len(run["c"])
    if len(base["c"]) < problems:
        raise ValueError(f"the base has {len(base['c'])} problems, the run {problems}")
    b = pass_per_problem(base["n"], base["c"][:problems], k)
    m = pass_per_problem(run["n"], run["c"], k)
    return b * (1 - m), (1 - b) * m


def hierarchical_interval(values: np.ndarray, reps: int = 2000, level: float = 0.95, seed: int = 0,
                          low: float | None = 0.0) -> dict[str, Any]:  # fmt: skip
    """The mean over seeds of Σ_x values[s, x] (shape seeds × problems; the same problems for every seed), with an
    interval that is the wider of two: a percentile bootstrap that resamples seeds and, independently, problems
    (collapse_bench.per_prompt.versus_base's scheme), and the Student-t interval over the seeds' sums; clipped below
    at ``low`` (a count cannot be negative)."""
    v = np.asarray(values, float)
    seeds, problems = v.shape
    sums = v.sum(axis=1)
    out: dict[str, Any] = {"mean": float(sums.mean()), "per_seed": [float(x) for x in sums], "n": seeds,
                           "problems": problems, "lo": None, "hi": None, "half": None}  # fmt: skip
    if problems == 0:
        return out
    rng = np.random.default_rng(seed)
    s_idx = rng.integers(0, seeds, size=(reps, seeds))
    p_idx = rng.integers(0, problems, size=(reps, problems))
    boots = np.array([v[s_idx[r]][:, p_idx[r]].sum(axis=1).mean() for r in range(reps)])
    lo, hi = (float(x) for x in np.quantile(boots, [(1 - level) / 2, (1 + level) / 2]))
    t = mean_ci(sums.tolist(), level)
    if t["lo"] is not None:
        lo, hi = min(lo, t["lo"]), max(hi, t["hi"])
    if low is not None:
        lo = max(lo, low)
    out |= {"lo": lo, "hi": hi, "half": max(out["mean"] - lo, hi - out["mean"])}
    return out


def sign_flip_p(differences: Sequence[float]) -> dict[str, Any]:
    """:func:`collapse_bench.stats.sign_flip_p` (the exact two-sided sign-flip test of paired differences) with the
    least p the design allows, ``smallest`` = 2/2^n (the observed signs and their mirror), and n."""
    n = len(differences)
    if n == 0:
        return {"p": None, "smallest": None, "n": 0}
    return {"p": stats_sign_flip_p(differences), "smallest": 2.0 / 2**n, "n": n}


def matched_paths(runs: Mapping[int, Mapping[str, Any]], base: Mapping[str, Any], metric: str,
                  k: int) -> dict[int, list[dict[str, Any]]]:  # fmt: skip
    """Each seed's held-out path as :func:`collapse_bench.per_prompt.matched_with_prompts` reads it: a point per
    step with, per problem, ``mu`` = c/n (so the point's mean is its pass@1) and ``metric`` (``lost_at_k`` or
    ``gained_at_k``) = P·b(1 − m) or P·(1 − b)·m at ``k`` (so the point's mean is the expected count over the P path
    problems). Step 0 is the base itself, with m = b (the plug-in: the base against a second draw of itself)."""
    out: dict[int, list[dict[str, Any]]] = {}
    for seed, result in runs.items():
        points = []
        for point in result["path"]:
            problems = len(point["c"])
            lost, gained = lost_gained_terms(base, point, k)
            values = lost if metric == "lost_at_k" else gained
            mu = np.asarray(point["c"], float) / point["n"]
            points.append({"step": point["step"], "mu": float(mu.mean()),
                           "per_prompt": {"mu": mu.tolist(), metric: (problems * values).tolist()}})  # fmt: skip
        out[seed] = points
    return out


def path_summary(result: Mapping[str, Any], ks: Sequence[int]) -> list[dict[str, Any]]:
    """A run's held-out path as (step, pass@k at each of ``ks``) means over its problems."""
    return [{"step": p["step"], **{str(k): float(pass_per_problem(p["n"], p["c"], k).mean()) for k in ks}}
            for p in result["path"]]  # fmt: skip
