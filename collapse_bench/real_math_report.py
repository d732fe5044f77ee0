"""The real-math study's report (issue 62): ``report.md``, ``report.json`` and figures, from the finished runs'
``result.json`` files and ``base.json`` alone (nothing is loaded or sampled).

``python -m collapse_bench.real_math report --config bench/real_math.yaml --out DIR`` writes, per arm (mean ± 95%
t-interval over seeds unless said otherwise):
- held-out pass@k at the end for every k, the base beside;
- the held-out path: pass@1 and pass@k_max (k_max the largest k <= n_path) at every checkpoint;
- problems lost and gained against the base at every k (:mod:`collapse_bench.real_math_stats`), with an interval
  over seeds and problems;
- the primary comparison exactly as the config declares it: each arm minus the baseline in lost (or gained) at k,
  read off both held-out paths of a seed where pass@1 equals each declared level (linear between path points,
  :func:`collapse_bench.per_prompt.matched_with_prompts`: the interval includes problem sampling), paired by seed,
  Holm over every (arm, level); the seeds whose two paths reach a level are listed; an exact sign-flip test beside;
- the OOD set's pass@k and lost/gained; distinct correct solution lines (completions, whitespace-normalised) and
  distinct correct answers per problem; the wall times;
- figures: the end pass@k curves, the paths, the pass@1-vs-pass@k_max Pareto plot, the training reward.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from collapse_bench.per_prompt import matched_with_prompts
from collapse_bench.real_math_runs import BASE, FILTER, RESULT, STATE, TIMING
from collapse_bench.real_math_spec import Study
from collapse_bench.real_math_stats import (
    hierarchical_interval,
    lost_gained_terms,
    matched_paths,
    pass_per_problem,
    path_summary,
    sign_flip_p,
)
from collapse_bench.stats import holm, mean_ci
from eval.records import write_json


def _read(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def finished(study: Study, out: Path) -> tuple[dict[str, dict[int, dict[str, Any]]], list[str]]:
    """The runs with a ``result.json`` by arm and seed (in the config's order), and the keys of those without."""
    done: dict[str, dict[int, dict[str, Any]]] = {}
    missing = []
    for arm in study.arms:
        for seed in arm.seeds:
            result = _read(out / "runs" / arm.name / f"seed{seed}" / RESULT)
            if result is None:
                missing.append(f"{arm.name}/seed{seed}")
            else:
                done.setdefault(arm.name, {})[seed] = result
    return done, missing


def _passes(counts: dict[str, Any], ks: list[int]) -> dict[str, float]:
    return {str(k): float(pass_per_problem(counts["n"], counts["c"], k).mean()) for k in ks if k <= counts["n"]}


def _distinct(counts: dict[str, Any]) -> dict[str, float]:
    """Means over problems of the distinct correct solution lines and answers, and the lines over solved problems."""
    lines = np.asarray(counts["distinct_correct_completions"], float)
    solved = np.asarray(counts["c"]) > 0
    return {"lines": float(lines.mean()), "lines_solved": float(lines[solved].mean()) if solved.any() else None,
            "answers": float(np.mean(counts["distinct_correct_answers"]))}  # fmt: skip


def _versus_base(base: dict[str, Any], runs: list[dict[str, Any]], ks: list[int]) -> dict[str, Any]:
    """Lost and gained at each k against the base over the given runs' counts (seeds × problems), with the
    hierarchical interval."""
    out: dict[str, Any] = {"lost_at": {}, "gained_at": {}}
    for k in ks:
        terms = [lost_gained_terms(base, r, k) for r in runs]
        out["lost_at"][str(k)] = hierarchical_interval(np.stack([t[0] for t in terms]))
        out["gained_at"][str(k)] = hierarchical_interval(np.stack([t[1] for t in terms]))
    return out


def _arm(study: Study, base: dict[str, Any], seeds: dict[int, dict[str, Any]]) -> dict[str, Any]:
    e = study.eval
    runs = list(seeds.values())
    ks, kmax_path = list(e.ks), max(e.path_ks)
    entry: dict[str, Any] = {"label": runs[0]["label"], "seeds": list(seeds), "steps": mean_ci([r["steps"] for r in
                             runs])}  # fmt: skip
    ends = [_passes(r["end"], ks) for r in runs]
    entry["end"] = {"pass_at_k": {str(k): mean_ci([p[str(k)] for p in ends]) for k in ks}}
    entry["end"] |= _versus_base(base["test"], [r["end"] for r in runs], ks)
    paths = {s: {p["step"]: p for p in path_summary(r, [1, kmax_path])} for s, r in seeds.items()}
    steps = sorted({step for path in paths.values() for step in path})
    entry["path"] = [{"step": step, "seeds": sum(step in p for p in paths.values()),
                      "pass_at_1": mean_ci([p[step]["1"] for p in paths.values() if step in p]),
                      "pass_at_kmax": mean_ci([p[step][str(kmax_path)] for p in paths.values() if step in p])}
                     for step in steps]  # fmt: skip
    if all(r.get("ood") for r in runs) and base.get("ood"):
        oks = [k for k in ks if k <= base["ood"]["n"]]
        oods = [_passes(r["ood"], oks) for r in runs]
        entry["ood"] = {"pass_at_k": {str(k): mean_ci([p[str(k)] for p in oods]) for k in oks}}
        entry["ood"] |= _versus_base(base["ood"], [r["ood"] for r in runs], [oks[-1]])
    entry["protocols"] = {}
    for name, counts in (base.get("protocols") or {}).items():
        if all(name in (r.get("protocols") or {}) for r in runs):
            passes = [_passes(r["protocols"][name], ks) for r in runs]
            entry["protocols"][name] = {"pass_at_k": {str(k): mean_ci([p[str(k)] for p in passes]) for k in ks}}
            entry["protocols"][name] |= _versus_base(counts, [r["protocols"][name] for r in runs], [ks[-1]])
    distinct = [_distinct(r["end"]) for r in runs]
    entry["distinct"] = {key: mean_ci([d[key] for d in distinct if d[key] is not None]) for key in distinct[0]}
    entry["wall"] = {"train_seconds": mean_ci([r["wall"]["train_seconds"] for r in runs]),
                     "seconds_per_step": mean_ci([r["wall"]["train_seconds"] / max(1, r["steps"]) for r in runs]),
                     "eval_seconds": mean_ci([r["wall"]["eval_seconds"] for r in runs]),
                     "interrupted_attempts": sum(r["wall"]["interrupted_attempts"] for r in runs)}  # fmt: skip
    entry["per_seed"] = {s: {"steps": r["steps"], "pass_at_1": ends[i]["1"], "pass_at_kmax": ends[i][str(ks[-1])],
                             "lost_at_kmax": entry["end"]["lost_at"][str(ks[-1])]["per_seed"][i],
                             "gained_at_kmax": entry["end"]["gained_at"][str(ks[-1])]["per_seed"][i],
                             "train_seconds": r["wall"]["train_seconds"], "eval_seconds": r["wall"]["eval_seconds"],
                             "code": r.get("code")}
                         for i, (s, r) in enumerate(seeds.items())}  # fmt: skip
    return entry


def primary(study: Study, base: dict[str, Any], done: dict[str, dict[int, dict[str, Any]]]) -> dict[str, Any]:
    """The declared comparison: per (arm, level), arm − baseline in the metric at matched held-out pass@1, paired by
    seed, its problem-inclusive interval and t-test p (the p Holm reads), the sign-flip p beside; Holm over every
    (arm, level), one with no seed pair reaching the level staying in the family as not rejected (p = 1);
    ``supported`` where the difference has the declared sign, its interval excludes 0 and it survives Holm."""
    p = study.primary
    assert p is not None
    entry: dict[str, Any] = {"metric": p.metric, "k": p.k, "against": p.against, "matched": p.matched,
                             "levels": list(p.levels), "family": p.family, "alpha": p.alpha,
                             "direction": p.direction, "comparisons": []}  # fmt: skip
    baseline = done.get(p.against, {})
    against = matched_paths(baseline, base["test"], p.metric, p.k)
    for name in p.arms:
        mine = matched_paths(done.get(name, {}), base["test"], p.metric, p.k)
        paired = sorted(set(mine) & set(against))
        for level in p.levels:
            cmp = matched_with_prompts(mine, against, level, p.metric, p.resamples)
            cmp |= {"arm": name, "paired_seeds": paired, "unreached_seeds": [s for s in paired if s not in
                    cmp["seeds"]], "sign_flip": sign_flip_p(cmp["differences"])}  # fmt: skip
            entry["comparisons"].append(cmp)
    survives = holm({i: 1.0 if c["p"] is None else c["p"] for i, c in enumerate(entry["comparisons"])}, p.alpha)
    for i, c in enumerate(entry["comparisons"]):
        sign_ok = c["mean"] is not None and (c["mean"] < 0 if p.direction == "negative" else c["mean"] > 0)
        excludes = c["lo"] is not None and (c["lo"] > 0 or c["hi"] < 0)
        c |= {"holm": survives[i], "supported": bool(sign_ok and excludes and survives[i])}
    return entry


def aggregate(study: Study, out: Path) -> dict[str, Any]:
    """Everything the report shows, from ``base.json`` and the runs' ``result.json``."""
    base = _read(out / BASE)
    if base is None:
        raise FileNotFoundError(f"{out / BASE} is missing: run the study first")
    e = study.eval
    ks = list(e.ks)
    done, missing = finished(study, out)
    agg: dict[str, Any] = {"ks": ks, "path_ks": list(e.path_ks), "missing": missing, "filter": _read(out / FILTER),
                           "state": _read(out / STATE), "study_stages": (_read(out / TIMING) or {}).get("stages", {}),
                           "arms": {}}  # fmt: skip
    ood = base.get("ood")
    agg["base"] = {"problems": base["test"]["problems"], "n": base["test"]["n"],
                   "pass_at_k": _passes(base["test"], ks), "distinct": _distinct(base["test"]),
                   "path_problems": base["path_problems"],
                   "ood": None if ood is None else {"problems": ood["problems"], "n": ood["n"],
                                                    "pass_at_k": _passes(ood, ks)},
                   "protocols": {q: _passes(c, ks) for q, c in (base.get("protocols") or {}).items()}}  # fmt: skip
    for name, seeds in done.items():
        agg["arms"][name] = _arm(study, base, seeds)
    agg["primary"] = primary(study, base, done) if study.primary is not None else None
    agg["_train_reward"] = {name: {s: r["train_reward"] for s, r in seeds.items()} for name, seeds in done.items()}
    agg["_pareto"] = {name: {s: (_passes(r["end"], [1])["1"], _passes(r["end"], [ks[-1]])[str(ks[-1])])
                             for s, r in seeds.items()} for name, seeds in done.items()}  # fmt: skip
    return agg


def write_report(study: Study, out: Path, command: str, config: str) -> Path:
    """``report.md``, ``report.json`` and the figures in ``out``; the path of ``report.md``."""
    from collapse_bench.real_math_figures import figures
    from collapse_bench.real_math_markdown import render

    agg = aggregate(study, out)
    drawn = figures(agg, out)
    write_json(out / "report.json", {k: v for k, v in agg.items() if not k.startswith("_")})
    path = out / "report.md"
    path.write_text(render(agg, study, command, config, os.fspath(out), drawn))
    return path
