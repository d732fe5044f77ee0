"""From the runs' ``result.json`` files to one aggregated JSON: per task and method, the chosen value and the mean ±
95% t-interval over seeds of every metric, the paired differences against the baseline, and the β sweep.

Nothing here trains or loads a model: the tables can be recomputed from the kept per-run files alone.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from collapse_bench.classes import base_by_class, class_table, held_out_path, lost_versus_baseline, primary_comparison
from collapse_bench.measure import MIN_PROBLEMS, PER_PROMPT, crossover_k, has_classes, path_value_at, trajectory_point
from collapse_bench.per_prompt import by_difficulty, versus_base
from collapse_bench.runs import result_of, select
from collapse_bench.spec import Benchmark, Run, grid_runs
from collapse_bench.stats import holm_paired, mean_ci, paired_difference


def multi_answer(entry: dict[str, Any], split: str) -> bool:
    """Whether the task has more than one valid answer per prompt (the p* diversity columns mean something)."""
    base = entry["base"].get(split) or {}
    return (base.get("effective_answers") or 1.0) > 1.0001


# (name in the tables, how to read it from one split's mean metrics); kmax is the largest k
PAIRED = ("mu", "pass_at_kmax", "cov_at_kmax", "distinct_at_kmax", "effective_answers", "kl_pstar", "lost_at_kmax")
MATCHED = ("effective_answers", "cov_at_kmax", "kl_pstar")  # compared at matched validity
SHIFTED = ("shifted_pass_kmax", "shifted_mass")  # the shifted verifier at matched validity, where measured
LEVELS = (0.75, 0.85, 0.9, 0.95)  # the fixed validities at which two training paths are compared


def matched_levels(
    method_paths: dict[int, list[dict[str, Any]]],
    baseline_paths: dict[int, list[dict[str, Any]]],
    levels: Sequence[float],
    keys: Sequence[str] = MATCHED,
) -> list[dict[str, Any]]:
    """Two methods compared along both of their training paths at fixed validities: for each level μ and seed s
    whose two paths both reach μ, d_s = x(method path at μ) − x(baseline path at μ) (:func:`path_value_at`), for
    each number x in ``keys``; per level, mean ± t-interval of d_s over those seeds (``paired_difference``) and the
    seeds that took part. No end point is chosen, so no selection rule is involved that the untrained base could win.
    """
    out = []
    for mu in levels:
        diffs: dict[str, dict[int, float]] = {k: {} for k in keys}
        for seed in sorted(set(method_paths) & set(baseline_paths)):
            for k in keys:
                a, b = path_value_at(method_paths[seed], mu, k), path_value_at(baseline_paths[seed], mu, k)
                if a is not None and b is not None:
                    diffs[k][seed] = a - b
        entry: dict[str, Any] = {"mu": mu, "seeds": sorted(diffs[keys[0]])}
        for k in keys:
            entry[k] = paired_difference(diffs[k], dict.fromkeys(diffs[k], 0.0))
        out.append(entry)
    return out


def matched_validity(
    method_results: dict[int, dict[str, Any]], baseline_results: dict[int, dict[str, Any]], kmax: int
) -> dict[str, Any]:
    """A method against the baseline stopped where it had the method's validity: per seed s, the method's final
    μ_s on the training prompts locates the point of the baseline's seed-s training path with that validity, and
    d_s = x_s(method) − x(baseline path at μ_s) for each exact diversity number; mean ± t-interval of d_s over the
    seeds where the baseline's path reached μ_s (a method whose validity the baseline never had is not compared)."""
    out: dict[str, Any] = {"seeds": [], "unmatched": []}
    diffs: dict[str, dict[int, float]] = {k: {} for k in MATCHED}
    for seed, r in sorted(method_results.items()):
        path = (baseline_results.get(seed) or {}).get("trajectory") or []
        if not path or "train" not in r["splits"]:
            continue
        end = trajectory_point(r["splits"]["train"]["mean"], kmax)
        at = {k: path_value_at(path, end["mu"], k) for k in MATCHED}
        if at["effective_answers"] is None:
            out["unmatched"].append(seed)
            continue
        out["seeds"].append(seed)
        for k in MATCHED:
            diffs[k][seed] = end[k] - at[k]
    for k in MATCHED:
        out[k] = paired_difference(diffs[k], dict.fromkeys(diffs[k], 0.0))
    return out


def flat_metrics(split: dict[str, Any], ks: list[int]) -> dict[str, float | None]:
    """One split's means as a flat dict: scalars, pass_at_<k>, cov_at_<k>, distinct_at_<k>, lost/gained at k,
    the shifted verifier's mass and pass/lost/gained at k where measured (``shifted_*``), and the *_kmax aliases for
    the largest k."""
    m = split["mean"]
    out: dict[str, float | None] = {k: m.get(k) for k in PER_PROMPT}
    for name in ("pass_at", "cov_at", "distinct_at", "lost_at", "gained_at"):
        for k in ks:
            out[f"{name}_{k}"] = (m.get(name) or {}).get(str(k))
        out[f"{name}_kmax"] = out[f"{name}_{ks[-1]}"]
    shifted = m.get("shifted")
    if shifted is not None:  # a many-answer task measured with the shifted verifier (collapse_bench.measure)
        out["shifted_mass"] = shifted["mass"]
        for name in ("pass_at", "lost_at", "gained_at"):
            for k in ks:
                out[f"shifted_{name}_{k}"] = shifted[name].get(str(k))
            out[f"shifted_{name}_kmax"] = out[f"shifted_{name}_{ks[-1]}"]
    # recomputed under the current rule (at least half a problem), so results written under an older rule agree
    crossover = crossover_k(m, ks) if m.get("lost_at") else m.get("crossover_k")
    out["crossover_k"] = math.nan if m.get("base_ahead_at_1") else math.inf if crossover is None else float(crossover)
    return out


def _flats(results: dict[int, dict[str, Any]], splits: Sequence[str], ks: list[int]) -> dict[str, dict[int, Any]]:
    """Per split, each seed's :func:`flat_metrics`."""
    return {split: {s: flat_metrics(r["splits"][split], ks) for s, r in results.items()} for split in splits}


def _ci_table(per_seed: dict[int, dict[str, Any]]) -> dict[str, Any]:
    keys = sorted({k for v in per_seed.values() for k in v})
    table = {}
    for key in keys:
        values = [v[key] for v in per_seed.values() if v.get(key) is not None]
        table[key] = mean_ci([x for x in values if math.isfinite(x)]) if values else mean_ci([])
        if key == "crossover_k":  # inf: the base never overtakes; nan: the model does not lead at k = 1
            table[key]["never"] = sum(1 for x in values if math.isinf(x))
            table[key]["base_ahead"] = sum(1 for x in values if math.isnan(x))
            # crossovers are reported seed by seed and as a median, never as a mean (k = 2 and 8 are not "5")
            finite = sorted(x for x in values if math.isfinite(x))
            table[key]["per_seed"] = finite
            table[key]["median"] = statistics.median_low(finite) if finite else None  # a k that some seed had
    return table


def chosen_value(bench: Benchmark, out: Path, task: str, method: str) -> Any:
    """The value the tuning rule picks from the finished tuning runs (recomputed, so an edited grid cannot leave a
    stale choice), or None while a tuning run is missing or the method has no grid."""
    m = bench.method(method)
    if m.tune_key is None:
        return None
    if any(result_of(out, bench, Run(task, method, v, bench.tune_seed)) is None for v in m.tune[m.tune_key]):
        return None
    return select(bench, out, task, method)[0]


def inert_values(bench: Benchmark, out: Path, task: str, method: str) -> list[list[Any]]:
    """Groups (of two or more) of a method's grid values whose tuning runs trained bit-identical models (the same
    weights fingerprint): values that change nothing, so the grid is smaller than it looks."""
    m = bench.method(method)
    if m.tune_key is None:
        return []
    by_fingerprint: dict[str, list[Any]] = {}
    for value in m.tune[m.tune_key]:
        result = result_of(out, bench, Run(task, method, value, bench.tune_seed))
        if result is not None and result.get("fingerprint"):
            by_fingerprint.setdefault(result["fingerprint"], []).append(value)
    return [values for values in by_fingerprint.values() if len(values) > 1]


def identical_cells(fingerprints: dict[str, dict[int, str]]) -> list[list[str]]:
    """Groups (of two or more) of a task's cells (methods, each at its value) whose runs trained bit-identical models
    at every seed they share (``fingerprints``: method → seed → weights fingerprint): settings that change nothing
    for this task's rewards, so two rows of the tables are one."""
    names = [n for n, by_seed in fingerprints.items() if by_seed]
    groups: list[list[str]] = []
    for name in names:
        for group in groups:
            first = fingerprints[group[0]]
            shared = set(first) & set(fingerprints[name])
            if shared and all(first[s] == fingerprints[name][s] for s in shared):
                group.append(name)
                break
        else:
            groups.append([name])
    return [g for g in groups if len(g) > 1]


def seed_results(bench: Benchmark, out: Path, task: str, method: str, value: Any) -> dict[int, dict[str, Any]]:
    results = {}
    for seed in bench.seeds:
        r = result_of(out, bench, Run(task, method, value, seed))
        if r is not None:
            results[seed] = r
    return results


def aggregate(bench: Benchmark, out: Path) -> dict[str, Any]:
    """The aggregated benchmark (see the module docstring)."""
    ks = list(bench.evaluation.ks)
    report_split = bench.evaluation.report_on
    agg: dict[str, Any] = {"ks": ks, "report_on": report_split, "seeds": list(bench.seeds), "tasks": {}}
    for task in bench.tasks:
        base_file = out / "base" / f"{task.name}.json"
        base = json.loads(base_file.read_text()) if base_file.is_file() else {"splits": {}}
        entry: dict[str, Any] = {"base": {}, "methods": {}}
        for split, data in base["splits"].items():
            entry["base"][split] = flat_metrics(data["summary"], ks)
        baseline_flat: dict[str, dict[int, dict[str, Any]]] = {}
        baseline_results: dict[int, dict[str, Any]] = {}
        for m in bench.methods_of(task):
            value = chosen_value(bench, out, task.name, m.name)
            if m.tune_key is not None and value is None:
                entry["methods"][m.name] = {"label": m.label, "status": "tuning not finished"}
                continue
            results = seed_results(bench, out, task.name, m.name, value)
            flats = _flats(results, bench.evaluation.splits, ks)
            train = _ci_table(  # step times are the machine's, not the method's: kept per run, not tabled
                {
                    s: {k: v for k, v in r["train"].items() if v is not None and k != "seconds"}
                    for s, r in results.items()
                }
            )
            train["never_reached_0.9"] = sum(1 for r in results.values() if r["train"]["step_reached_0.9"] is None)
            entry["methods"][m.name] = {
                "label": m.label,
                "tune_key": m.tune_key,
                "inert_values": inert_values(bench, out, task.name, m.name),
                "value": value,
                "seeds": sorted(results),
                "splits": {split: _ci_table(f) for split, f in flats.items()},
                "train": train,
            }
            if m.name == bench.baseline:
                baseline_flat, baseline_results = flats, results
                entry["baseline_paths"] = {s: r.get("trajectory") or [] for s, r in results.items()}
            entry["methods"][m.name] |= prompt_comparisons(base, results, ks, report_split)
            entry["methods"][m.name]["_flats"] = flats
            entry["methods"][m.name]["_results"] = results
        for name, data in entry["methods"].items():
            flats, results = data.pop("_flats", None), data.get("_results")
            if flats is None or name == bench.baseline or not baseline_flat:
                continue
            if any(r.get("trajectory") for r in baseline_results.values()) and multi_answer(entry, "train"):
                # (with one valid answer per prompt every diversity number is the same for every policy)
                data["matched_validity"] = matched_validity(results, baseline_results, ks[-1])
                paths = {s: r.get("trajectory") or [] for s, r in results.items()}
                data["levels"] = matched_levels(paths, entry["baseline_paths"], LEVELS)
                points = [p for r in (*results.values(), *baseline_results.values()) for p in r.get("trajectory") or []]
                if points and all("shifted_pass_kmax" in p for p in points):
                    data["levels_shifted"] = matched_levels(
                        {s: r["trajectory"] for s, r in results.items()},
                        {s: r["trajectory"] for s, r in baseline_results.items()},
                        LEVELS,
                        SHIFTED,
                    )
            data["paired_vs_baseline"] = {
                split: {
                    key: paired_difference(
                        {s: f[key] for s, f in flats[split].items() if f.get(key) is not None},
                        {s: f[key] for s, f in baseline_flat[split].items() if f.get(key) is not None},
                    )
                    for key in PAIRED
                }
                for split in bench.evaluation.splits
            }
        if has_classes(task.task):
            by_class(entry, bench, task.name, base["splits"])
        entry["identical_cells"] = identical_cells(
            {
                name: {s: r["fingerprint"] for s, r in (data.get("_results") or {}).items() if r.get("fingerprint")}
                for name, data in entry["methods"].items()
            }
        )
        for data in entry["methods"].values():
            data.pop("_results", None)
        holm_families(entry)
        agg["tasks"][task.name] = entry
    if bench.beta_sweep is not None:
        agg["beta_sweep"] = beta_sweep(bench, out)
    agg["code_states"] = code_states(bench, out)
    return agg


def by_class(entry: dict[str, Any], bench: Benchmark, task: str, base_splits: dict[str, Any]) -> None:
    """A task with prompt classes (:mod:`collapse_bench.classes`): the base's and every method's numbers per class
    on every split, each method's problems lost against the baseline's seed by seed, the held-out path of the
    minority share and pass@K per class, and the study's primary comparison where it is on this task."""
    ks = list(bench.evaluation.ks)
    primary = bench.primary if bench.primary is not None and bench.primary.task in (task, "*") else None
    min_difference = primary.min_difference if primary is not None else MIN_PROBLEMS
    entry["min_difference"] = min_difference
    splits = list(bench.evaluation.splits)
    entry["base_by_class"] = {sp: base_by_class(base_splits[sp]) for sp in splits if sp in base_splits}
    results = {name: data.get("_results") or {} for name, data in entry["methods"].items()}
    baseline = results.get(bench.baseline) or {}
    for name, data in entry["methods"].items():
        if not results[name]:
            continue
        data["by_class"] = {sp: class_table(results[name], sp, ks) for sp in splits}
        classes = list(data["by_class"][bench.evaluation.report_on])
        data["held_out_path"] = {
            f"{key}_{c}": held_out_path(results[name], f"{key}_{c}")
            for c in classes
            for key in ("minority_share", "mu", "pass_kmax")
        }
        if name != bench.baseline and baseline:
            data["lost_vs_baseline"] = {
                sp: lost_versus_baseline(results[name], baseline, sp, ks, min_difference) for sp in splits
            }
    if primary is not None:
        entry["primary"] = primary_comparison(primary, results, bench.baseline)


def prompt_comparisons(
    base: dict[str, Any], results: dict[int, dict[str, Any]], ks: list[int], report_split: str
) -> dict[str, Any]:
    """A method's per-prompt comparisons (:mod:`collapse_bench.per_prompt`): against the base at every k on the
    report split, and validity by the base's difficulty on the training and the report split."""
    out: dict[str, Any] = {"vs_base": {}, "by_difficulty": {}}
    for split in dict.fromkeys(("train", report_split)):
        base_split = (base.get("splits") or {}).get(split)
        per_seed = {s: r["splits"][split]["per_prompt"]["mu"] for s, r in results.items() if split in r["splits"]}
        if base_split is None or not per_seed or "per_prompt" not in base_split["summary"]:
            continue
        base_mu = base_split["summary"]["per_prompt"]["mu"]
        out["by_difficulty"][split] = by_difficulty(per_seed, base_mu)
        if split == report_split:
            out["vs_base"][split] = versus_base(per_seed, base_mu, ks)
    return out


def holm_families(entry: dict[str, Any], alpha: float = 0.05) -> None:
    """Holm–Bonferroni over each of a task's families of comparisons against the baseline: each difference gets
    ``p`` (paired t-test) and ``holm`` (True: it survives the correction at ``alpha``), and ``entry`` each family's
    size (the number tested):
    - ``holm_family``: the paired comparisons, every method × split × paired metric (``PAIRED``);
    - ``holm_family_matched``: the matched-validity comparisons (the primary ones), every method × each fixed
      validity level × effective answers and KL(p*‖π_v), and every method's end point against the baseline's path ×
      the same two numbers;
    - ``holm_family_shifted``, where measured: the shifted-verifier comparisons at matched validity, every method ×
      each fixed validity level, Δ pass@K under the shifted verifier (Δ π(S) is descriptive)."""
    paired, matched, shifted = {}, {}, {}
    for name, data in entry["methods"].items():
        for split, diffs in (data.get("paired_vs_baseline") or {}).items():
            for key, diff in diffs.items():
                paired[(name, split, key)] = diff
        points: list[tuple[Any, dict[str, Any]]] = list(enumerate(data.get("levels") or []))
        if data.get("matched_validity"):
            points.append(("end", data["matched_validity"]))
        for i, level in points:
            for key in ("effective_answers", "kl_pstar"):
                matched[(name, i, key)] = level[key]
        for i, level in enumerate(data.get("levels_shifted") or []):
            shifted[(name, i)] = level["shifted_pass_kmax"]
    entry["holm_family"] = holm_paired(paired, alpha)
    entry["holm_family_matched"] = holm_paired(matched, alpha)
    if shifted:
        entry["holm_family_shifted"] = holm_paired(shifted, alpha)


def code_states(bench: Benchmark, out: Path) -> dict[str, int]:
    """How many of the grid's finished runs each code state (commit, ``+dirty``) trained: every run the tables,
    the tuning choices and the β sweep are computed from."""
    fixed, tuning = grid_runs(bench)
    runs = set(fixed) | set(tuning)
    for task in bench.tasks:
        for m in bench.methods_of(task):
            value = chosen_value(bench, out, task.name, m.name)
            if value is not None:
                runs |= {Run(task.name, m.name, value, s) for s in bench.seeds}
    codes: dict[str, int] = {}
    for run in runs:
        r = result_of(out, bench, run)
        if r is not None:
            codes[r.get("commit", "unknown")] = codes.get(r.get("commit", "unknown"), 0) + 1
    return codes


def beta_sweep(bench: Benchmark, out: Path) -> dict[str, Any]:
    """Per divergence method and β: mean ± CI over seeds of validity and the exact diversity numbers on every split
    (β = 0 is the baseline's runs, the same for every divergence)."""
    sweep = bench.beta_sweep
    assert sweep is not None
    ks = list(bench.evaluation.ks)
    rows: dict[str, list[dict[str, Any]]] = {}
    for method in sweep.methods:
        rows[method] = []
        for beta in sweep.betas:
            name, value = (bench.baseline, None) if beta == 0 else (method, beta)
            results = seed_results(bench, out, sweep.task, name, value)
            per_seed = _flats(results, bench.evaluation.splits, ks)
            splits = {split: _ci_table(f) for split, f in per_seed.items()}
            rows[method].append({"beta": beta, "seeds": sorted(results), "splits": splits, "per_seed": per_seed})
    points = {}
    for method in sweep.points:
        value = chosen_value(bench, out, sweep.task, method)
        if bench.method(method).tune_key is not None and value is None:
            continue
        results = seed_results(bench, out, sweep.task, method, value)
        points[method] = {
            "value": value,
            "seeds": sorted(results),
            "splits": {split: _ci_table(f) for split, f in _flats(results, bench.evaluation.splits, ks).items()},
        }
    return {"task": sweep.task, "betas": list(sweep.betas), "methods": rows, "points": points}
