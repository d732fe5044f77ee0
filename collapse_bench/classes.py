"""Comparisons by prompt class, for tasks that sort their prompts into classes (``TaskSpec.class_column``; on
``routes``: ``short``, like every training prompt, and ``long``, never trained on, which only the base's minority
strategy solves).

Everything is read from the runs' ``result.json`` (``splits[split]["mean"]["by_class"]``, exact per class: validity,
pass@k, the minority strategy's share of the valid mass, and the expected number of problems lost and gained against
the base at every k) and the base's file. Per method and class: mean ± t-interval over seeds. Against the baseline,
seed by seed: the paired difference in problems lost (t-interval over seeds, never a bootstrap over a handful of
seeds). A difference is *claimed* only where its interval excludes 0 **and** its mean is at least the study's
smallest difference that matters (``Primary.min_difference`` problems); the primary comparison (the config's
``primary``, committed before the runs) is also corrected by Holm over its family, every method against the baseline.
"""

from __future__ import annotations

from typing import Any

from collapse_bench.spec import Primary
from collapse_bench.stats import holm_paired, mean_ci, paired_difference

CLASS_METRICS = ("mu", "minority_share")
CLASS_CURVES = ("pass_at", "lost_at", "gained_at")


def base_by_class(base_split: dict[str, Any]) -> dict[str, Any]:
    """The base's per-class numbers of one split (``by_class`` of its summary), or {} for a task without classes."""
    return base_split["summary"]["mean"].get("by_class") or {}


def per_seed_classes(results: dict[int, dict[str, Any]], split: str) -> dict[int, dict[str, Any]]:
    """seed → class → that run's per-class numbers on ``split``."""
    return {s: r["splits"][split]["mean"]["by_class"] for s, r in results.items() if split in r["splits"]}


def class_table(results: dict[int, dict[str, Any]], split: str, ks: list[int]) -> dict[str, Any]:
    """class → {metric: mean_ci over seeds} for validity and the minority share, and {curve: {k: mean_ci}} for
    pass@k and the problems lost and gained against the base."""
    seeds = per_seed_classes(results, split)
    classes = list(dict.fromkeys(c for by_class in seeds.values() for c in by_class))
    out: dict[str, Any] = {}
    for c in classes:
        rows = [by_class[c] for by_class in seeds.values() if c in by_class]
        entry: dict[str, Any] = {"problems": rows[0]["problems"], "seeds": len(rows)}
        for key in CLASS_METRICS:
            if all(key in r for r in rows):
                entry[key] = mean_ci([r[key] for r in rows])
        for curve in CLASS_CURVES:
            entry[curve] = {str(k): mean_ci([r[curve][str(k)] for r in rows]) for k in ks}
        out[c] = entry
    return out


def claimed(diff: dict[str, Any], min_difference: float) -> bool:
    """A paired difference is claimed where its interval excludes 0 and its mean is at least ``min_difference``."""
    return bool(diff.get("separated")) and abs(diff["mean"]) >= min_difference


def lost_versus_baseline(
    results: dict[int, dict[str, Any]],
    baseline: dict[int, dict[str, Any]],
    split: str,
    ks: list[int],
    min_difference: float,
) -> dict[str, Any]:
    """class → k → the paired difference (method − baseline) in expected problems lost against the base, over the
    seeds both have, with ``claimed`` (:func:`claimed`). Negative: the method loses fewer problems."""
    mine, theirs = per_seed_classes(results, split), per_seed_classes(baseline, split)
    classes = list(dict.fromkeys(c for by_class in mine.values() for c in by_class))
    out: dict[str, Any] = {}
    for c in classes:
        out[c] = {}
        for k in ks:
            diff = paired_difference(
                {s: v[c]["lost_at"][str(k)] for s, v in mine.items() if c in v},
                {s: v[c]["lost_at"][str(k)] for s, v in theirs.items() if c in v},
            )
            diff["claimed"] = claimed(diff, min_difference)
            out[c][str(k)] = diff
    return out


def primary_comparison(
    primary: Primary, results: dict[str, dict[int, dict[str, Any]]], baseline: str
) -> dict[str, Any]:
    """The study's primary comparison: for every method, the paired difference (method − ``baseline``) in
    ``primary.metric`` at ``primary.k`` on class ``primary.cls`` of ``primary.split``, with its p-value (paired
    t-test), Holm's correction over the family (every method but the baseline) and ``claimed``: separated, at least
    ``primary.min_difference`` in size, and surviving Holm."""
    ref = per_seed_classes(results.get(baseline, {}), primary.split)
    rows: dict[str, Any] = {}
    for name, by_seed in results.items():
        if name == baseline:
            continue
        mine = per_seed_classes(by_seed, primary.split)
        diff = paired_difference(
            {s: _value(v, primary) for s, v in mine.items() if primary.cls in v},
            {s: _value(v, primary) for s, v in ref.items() if primary.cls in v},
        )
        rows[name] = diff
    family = holm_paired(rows, primary.alpha)
    for diff in rows.values():
        diff["claimed"] = diff["holm"] and claimed(diff, primary.min_difference)
    return {"spec": primary.describe(), "family": family, "rows": rows}


def _value(by_class: dict[str, Any], primary: Primary) -> float:
    entry = by_class[primary.cls]
    value = entry[primary.metric]
    return float(value[str(primary.k)] if isinstance(value, dict) else value)


def held_out_path(results: dict[int, dict[str, Any]], key: str) -> list[dict[str, Any]]:
    """The mean over seeds of ``key`` along the report split's path (``trajectory_held_out``), step by step, with
    the seeds that have each step."""
    by_step: dict[int, list[float]] = {}
    for r in results.values():
        for point in r.get("trajectory_held_out") or []:
            if point.get(key) is not None:
                by_step.setdefault(point["step"], []).append(point[key])
    return [{"step": step, **mean_ci(values)} for step, values in sorted(by_step.items())]
