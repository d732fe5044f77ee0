"""The β study's report: ``beta.md`` and ``beta.json`` (per arm and β: steps, plateau, validity, diversity and the
distance to p* at the end, mean ± 95% t-interval over seeds, beside the optimum's closed form; the paired change of
diversity from the largest to the smallest β), ``beta_vs_beta.png`` (end points against β, with the closed form and
the exact toy lab's policy families) and ``beta_paths.png`` (validity, diversity and KL(p*‖π_v) against step)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from collapse_bench.aggregate import matched_levels
from collapse_bench.beta_spec import Study
from collapse_bench.beta_study import BASE, STATE, finished_results
from collapse_bench.markdown import marked
from collapse_bench.markdown import num as _num
from collapse_bench.markdown import pm as _pm
from collapse_bench.markdown import table as _table
from collapse_bench.plotting import beta_sweep_figure, pyplot, save
from collapse_bench.stats import mean_ci, paired_difference
from eval.records import write_json
from rlvr_div.theory.calibration import mean_validity_at

METRICS = ("mu", "effective_answers", "kl_pstar", "cov_at_kmax")
# what an anneal run's last path point adds: J, J* − J, KL(π̄‖p̄_β), the last step's gradient norm
END_KEYS = ("objective", "gap", "kl_p_beta", "grad_norm")


def aggregate(study: Study, out: Path) -> dict[str, Any]:
    """Per arm and β: the seeds' end measurements (train and test), steps, plateau steps and mean paths."""
    base = json.loads((out / BASE).read_text())
    kmax = str(max(study.ks))
    agg: dict[str, Any] = {"arms": {}, "base": {}, "missing": [], "code_states": {}}
    for split in ("train", "test"):
        m = base["splits"][split]["summary"]["mean"]
        agg["base"][split] = {"mu": m["mu"], "effective_answers": m["effective_answers"], "kl_pstar": m["kl_pstar"],
                              "cov_at_kmax": m["cov_at"][kmax]}  # fmt: skip
    base_mu = base["splits"]["train"]["summary"]["per_prompt"]["mu"]
    agg["base_mu_per_prompt"] = base_mu
    cells: dict[tuple[str, float | None], list[dict[str, Any]]] = {}
    done, agg["missing"] = finished_results(study, out)
    for run, result in done:
        cells.setdefault((run.arm, run.beta), []).append(result)
        commit = result.get("commit", "unknown")
        agg["code_states"][commit] = agg["code_states"].get(commit, 0) + 1
    for (arm, beta), results in cells.items():
        entry: dict[str, Any] = {
            "beta": beta,
            "seeds": [r["run"]["seed"] for r in results],
            "steps": mean_ci([r["steps"] for r in results]),
            "max_steps": results[0]["max_steps"],
            "plateaued": sum(r["plateau_step"] is not None for r in results),
            "closed_form_mu": None if beta is None else mean_validity_at(beta, base_mu),
            "per_seed": {},
        }
        for split in ("train", "test"):
            entry[split] = {}
            for key in METRICS:
                values = {r["run"]["seed"]: _metric(r["splits"][split]["mean"], key, kmax) for r in results}
                entry[split][key] = mean_ci(list(values.values()))
                entry["per_seed"].setdefault(split, {})[key] = values
        entry["path"] = _mean_path([r["path"] for r in results])
        ends = [r["path"][-1] for r in results]
        entry["end"] = {k: mean_ci([e[k] for e in ends]) for k in END_KEYS if all(e.get(k) is not None for e in ends)}
        if all("gap" in p for r in results for p in r["path"]):
            entry["end"]["best_gap"] = mean_ci([min(p["gap"] for p in r["path"]) for r in results])
            entry["optimum"] = results[0]["train"]["optimum"]
            entry["per_start_kl_p_beta"] = [r["path"][-1]["kl_p_beta"] for r in results]
        agg["arms"].setdefault(arm, {"label": study.arm(arm).label, "kind": study.arm(arm).kind, "cells": []})
        agg["arms"][arm]["cells"].append(entry)
    for arm in agg["arms"].values():
        arm["cells"].sort(key=lambda c: -1.0 if c["beta"] is None else -c["beta"])
        arm["verdict"] = _verdict(arm)
    return agg


def _metric(mean: dict[str, Any], key: str, kmax: str) -> float:
    return mean["cov_at"][kmax] if key == "cov_at_kmax" else mean[key]


def _mean_path(paths: list[list[dict[str, Any]]]) -> list[dict[str, float]]:
    """The seeds' paths averaged at the steps every seed reached (runs that stop at a plateau end at different
    steps; past a seed's end its last point stands for it)."""
    steps = sorted({p["step"] for path in paths for p in path})
    out = []
    for s in steps:
        points = [max((p for p in path if p["step"] <= s), key=lambda p: p["step"]) for path in paths]
        out.append({"step": s, **{k: sum(p[k] for p in points) / len(points) for k in ("mu", "effective_answers",
                                                                                       "kl_pstar")}})  # fmt: skip
    return out


def _verdict(arm: dict[str, Any]) -> dict[str, Any] | None:
    """The paired change of the effective number of valid answers (train) from the largest to the smallest β."""
    cells = [c for c in arm["cells"] if c["beta"] not in (None, 0.0)]
    if len(cells) < 2:
        return None
    hi, lo = cells[0], cells[-1]
    eff = "effective_answers"
    diff = paired_difference(lo["per_seed"]["train"][eff], hi["per_seed"]["train"][eff])
    kl = paired_difference(lo["per_seed"]["train"]["kl_pstar"], hi["per_seed"]["train"]["kl_pstar"])
    return {"from_beta": hi["beta"], "to_beta": lo["beta"], "effective_answers": diff, "kl_pstar": kl}


def _verdict_line(name: str, arm: dict[str, Any]) -> str:
    v = arm["verdict"]
    if v is None:
        return f"- `{name}`: fewer than two β values finished."
    d, k = v["effective_answers"], v["kl_pstar"]
    if len(d["seeds"]) < 2:
        return (f"- `{name}`: from β = {v['from_beta']:g} to β = {v['to_beta']:g} the effective number of valid "
                f"answers changes by {d['mean']:+.2f} (one run: deterministic, no interval); KL(p*‖π_v) by "
                f"{k['mean']:+.2f} nats.")  # fmt: skip
    # the numbers and whether the interval excludes 0; the size that counts as collapse is the study config's rule
    return (
        f"- `{name}`: from β = {v['from_beta']:g} to β = {v['to_beta']:g}, paired over {len(d['seeds'])} seeds, "
        f"the effective number of valid answers changes by {_change(d)} and KL(p*‖π_v) by {_change(k)} nats."
    )


def _change(d: dict[str, Any]) -> str:
    """'mean ± half-width' at 4 decimals, then whether the 95% interval excludes 0."""
    return f"{d['mean']:+.4f} ± {d['half']:.4f} ({'' if d['separated'] else 'not '}separated from 0)"


def write_report(study: Study, out: Path, command: str, toy: dict[str, Any] | None) -> Path:
    """``beta.json``, ``beta.md`` and the two figures in ``out``."""
    agg = aggregate(study, out)
    state = json.loads((out / STATE).read_text())
    codes = ", ".join(f"{c}: {n}" for c, n in sorted(agg["code_states"].items()))
    write_json(out / "beta.json", agg)
    plots = write_plots(agg, study, out, toy)
    kmax = max(study.ks)
    b = agg["base"]["train"]
    lines = [
        "# The β study",
        "",
        f"Command: `{command}`. Code of the runs (commit the worker started at: runs): {codes or 'none yet'}. "
        f"{study.workers} parallel "
        f"runs × {study.threads} torch thread(s); wall time of the invocations: "
        f"{sum(state.get('invocations', [])) / 60:.1f} min. Task `{study.task}` {study.task_options}, seeds "
        f"{list(study.seeds)}; every run stops at the plateau (the means of μ and of the effective number of valid "
        f"answers over the last {study.convergence.window:.0%} of its steps and the {study.convergence.window:.0%} "
        f"before differ by less than {study.convergence.tolerance:.0%}, from step {study.convergence.min_steps}; "
        f"path measured exactly every {study.path_every} steps) or at its step budget.",
        "",
        f"Base on the training prompts: μ {b['mu']:.3f}, effective answers {b['effective_answers']:.2f} (those of p*, "
        f"the valid part of the optimum p_β at every β), cov@{kmax} {b['cov_at_kmax']:.3f}. Values are mean ± 95% "
        "t-interval over seeds; a cell with one run (the sampling-free arm, deterministic) has no interval.",
        "",
    ]
    if agg["missing"]:
        lines += [f"Runs not finished ({len(agg['missing'])}): {', '.join(agg['missing'][:8])}"
                  f"{' …' if len(agg['missing']) > 8 else ''}", ""]  # fmt: skip
    header = ["arm", "β", "runs", "steps (budget)", "plateaued", "μ (train)", "closed-form μ(β)", "eff. answers",
              "KL(p*‖π_v)", f"cov@{kmax}", "μ (test)", "eff. answers (test)"]  # fmt: skip
    rows = []
    for name, arm in agg["arms"].items():
        for c in arm["cells"]:
            t, s = c["train"], c["test"]
            rows.append([
                name, "—" if c["beta"] is None else f"{c['beta']:g}", str(len(c["seeds"])),
                f"{_pm(c['steps'], 0)} ({c['max_steps']})", f"{c['plateaued']}/{len(c['seeds'])}", _pm(t["mu"]),
                _num(c["closed_form_mu"]), _pm(t["effective_answers"], 2), _pm(t["kl_pstar"], 2),
                _pm(t["cov_at_kmax"]), _pm(s["mu"]), _pm(s["effective_answers"], 2),
            ])  # fmt: skip
    lines += _table(header, rows) + [""]
    lines += convergence_table(agg, study)
    lines += arm_comparison(agg)
    lines += frontier(study, out)
    lines += [f"![end points against β]({plots[0].name})", "", f"![paths]({plots[1].name})", "", "Per arm:", ""]
    lines += [_verdict_line(name, arm) for name, arm in agg["arms"].items()] + [""]
    path = out / "beta.md"
    path.write_text("\n".join(lines))
    return path


def _sci(ci: dict[str, Any] | None) -> str:
    """'mean ± half-width' in scientific notation (values that span orders of magnitude)."""
    if not ci or ci.get("mean") is None:
        return "—"
    return f"{ci['mean']:.2e}" + ("" if ci.get("half") is None else f" ± {ci['half']:.1e}")


def convergence_table(agg: dict[str, Any], study: Study) -> list[str]:
    """For the anneal arms: where each β's ascent ended against the closed-form optimum (J* − J = β·KL(π̄‖p̄_β)),
    the smallest gap along its path, the last step's gradient norm, and whether KL(π̄‖p̄_β) ended below
    ``study.reached_kl`` in every start."""
    rows = []
    for name, arm in agg["arms"].items():
        for c in arm["cells"]:
            end = c.get("end") or {}
            if "gap" not in end:
                continue
            reached = sum(v <= study.reached_kl for v in c["per_start_kl_p_beta"])
            rows.append([name, f"{c['beta']:g}", str(len(c["seeds"])), f"{c['optimum']:.6f}", _sci(end["gap"]),
                         _sci(end["best_gap"]), _sci(end["kl_p_beta"]), _sci(end["grad_norm"]),
                         _pm(c["train"]["mu"], 6), f"{c['closed_form_mu']:.6f}",
                         f"{reached}/{len(c['seeds'])}"])  # fmt: skip
    if not rows:
        return []
    header = ["arm", "β", "starts", "J*", "J* − J (end)", "J* − J (best on the path)", "KL(π̄‖p̄_β) (end)",
              "gradient norm (last step)", "μ (train)", "μ(β) of p_β",
              f"reached (KL < {study.reached_kl:g})"]  # fmt: skip
    return ["## Convergence of the annealed sampling-free arm", "",
            "J* is the closed-form maximum of J on the training prompts; J* − J = β·KL(π̄‖p̄_β), so KL(π̄‖p̄_β) is the "
            "distance left in nats at every β. Mean ± 95% t-interval over the perturbed starts.", "",
            *_table(header, rows), ""]  # fmt: skip


FRONTIER_LEVELS = (0.75, 0.85, 0.9)


def frontier(study: Study, out: Path, baseline: str = "grpo") -> list[str]:
    """Every arm and β against stock GRPO at fixed validities along both training paths, seed by seed
    (:func:`collapse_bench.aggregate.matched_levels`): no end point is chosen, so the comparison needs no selection
    rule (one the untrained base could win); a β whose path never reaches a level has no row there."""
    paths: dict[tuple[str, float | None], dict[int, list[dict[str, Any]]]] = {}
    for run, result in finished_results(study, out)[0]:
        paths.setdefault((run.arm, run.beta), {})[run.seed] = result["path"]
    base = paths.get((baseline, None))
    if not base:
        return []
    rows = []
    for (arm, beta), by_seed in paths.items():
        if arm == baseline:
            continue
        for lv in matched_levels(by_seed, base, FRONTIER_LEVELS, ("effective_answers", "kl_pstar")):
            if not lv["seeds"]:
                continue
            cells = [marked(lv["effective_answers"], 2), marked(lv["kl_pstar"], 2)]
            rows.append([arm, "—" if beta is None else f"{beta:g}", f"{lv['mu']:.2f}", str(len(lv["seeds"])), *cells])
    head = ["arm", "β", "μ", "seeds", "Δ eff. answers", "Δ KL(p*‖π_v)"]
    return [f"Each arm against `{baseline}` at the same validity μ on the training prompts, read off both training "
            "paths of the same seed (linear between path points; ** = the 95% interval over seeds excludes 0); no end "
            "point is chosen:", "", *_table(head, rows), ""]  # fmt: skip


def arm_comparison(agg: dict[str, Any]) -> list[str]:
    """The other sampled arms against the first one (the reference arm) at each β, paired by seed on the training
    prompts: Δ validity, Δ effective answers, Δ KL(p*‖π_v) (** = the 95% interval excludes 0)."""
    sampled = [(n, a) for n, a in agg["arms"].items() if a["kind"] == "sampled"]
    if len(sampled) < 2:
        return []
    ref_name, ref = sampled[0]
    by_beta = {c["beta"]: c for c in ref["cells"]}
    rows = []
    for name, arm in sampled[1:]:
        for c in arm["cells"]:
            r = by_beta.get(c["beta"])
            if r is None:
                continue
            cells = [
                marked(paired_difference(c["per_seed"]["train"][key], r["per_seed"]["train"][key]), digits)
                for key, digits in (("mu", 3), ("effective_answers", 2), ("kl_pstar", 2))
            ]
            rows.append([f"{name} − {ref_name}", f"{c['beta']:g}", str(len(c["seeds"])), *cells])
    if not rows:
        return []
    head = ["arms, paired by seed", "β", "seeds", "Δ μ (train)", "Δ eff. answers", "Δ KL(p*‖π_v)"]
    return [f"Each sampled arm against `{ref_name}` at the same β, paired by seed (** = the 95% interval excludes 0):",
            "", *_table(head, rows), ""]  # fmt: skip


def write_plots(agg: dict[str, Any], study: Study, out: Path, toy: dict[str, Any] | None) -> list[Path]:
    plt = pyplot()

    base_eff = agg["base"]["train"]["effective_answers"]
    betas = sorted(study.betas)
    series, points = [], []
    for name, arm in agg["arms"].items():
        cells = [c for c in arm["cells"] if c["beta"] is not None and c["train"]["mu"]["mean"] is not None]
        if arm["kind"] == "point" or not cells:
            points += [(name, c["train"]) for c in arm["cells"] if c["beta"] is None]
        else:
            series.append((arm["label"], name, [c["beta"] for c in cells], [c["train"] for c in cells]))
    panels = [("mu", "validity μ (exact, training prompts)", 0, 1),
              ("effective_answers", "effective valid answers exp H(π_v)", 1, math.inf),
              ("kl_pstar", "KL(p*‖π_v) (nats)", 0, math.inf)]  # fmt: skip
    first = beta_sweep_figure(out / "beta_vs_beta.png", betas, panels, series, points, base_eff,
                              agg["base_mu_per_prompt"], toy)  # fmt: skip

    arms = [(n, a) for n, a in agg["arms"].items() if a["kind"] != "point"]
    fig, axes = plt.subplots(3, max(1, len(arms)), figsize=(5 * max(1, len(arms)), 10), squeeze=False)
    for j, (_, arm) in enumerate(arms):
        for c in arm["cells"]:
            steps = [p["step"] for p in c["path"]]
            colour = plt.cm.viridis(
                0.0
                if not c["beta"]
                else 0.9 * (math.log(c["beta"] / betas[0]) / max(1e-9, math.log(betas[-1] / betas[0])))
            )
            axes[0][j].plot(steps, [p["mu"] for p in c["path"]], color=colour, label=f"β = {c['beta']:g}")
            axes[1][j].plot(steps, [p["effective_answers"] for p in c["path"]], color=colour)
            axes[2][j].plot(steps, [p["kl_pstar"] for p in c["path"]], color=colour)
        axes[0][j].set_title(arm["label"], fontsize=9)
        axes[1][j].axhline(base_eff, color="k", ls="--", lw=1)
        axes[2][j].axhline(0.0, color="k", ls="--", lw=1)
        axes[2][j].set_xlabel("optimiser step")
        axes[0][j].legend(fontsize=6)
    axes[0][0].set_ylabel("validity μ (mean over seeds)")
    axes[1][0].set_ylabel("effective valid answers (dashed: p*)")
    axes[2][0].set_ylabel("KL(p*‖π_v), nats (dashed: the optimum)")
    return [first, save(fig, out / "beta_paths.png", 90)]
