"""The real-LM study's report (issue 25; docs/collapse.md, "A real pretrained LM"): ``report.md`` and ``report.json``.

``python -m collapse_bench.real_lm_report --config bench/real_lm.yaml --out bench/results/real_lm/study`` reads the
finished runs of ``rlvr-div beta-study --config bench/real_lm.yaml`` (nothing is trained or loaded) and writes
- per arm: steps, seconds per step, and at the end, on the measured training and test prompts, the exact validity μ,
  the effective number of valid answers, KL(p*‖π_v) and KL(u‖π_v), cov@k and pass@k, beside the sampled validity
  and the mass on non-canonical tokenisations; mean ± 95% t-interval over seeds;
- the primary comparison, with no chosen end point: each remedy against stock GRPO along both training paths at
  fixed validities (:func:`collapse_bench.aggregate.matched_levels`), seed by seed.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

from collapse_bench.aggregate import matched_levels
from collapse_bench.beta_spec import Study, load_study, study_runs
from collapse_bench.beta_study import BASE, read_result
from collapse_bench.stats import mean_ci
from eval.records import write_json

LEVELS = (0.5, 0.6, 0.7, 0.8, 0.9)
PATH_KEYS = ("effective_answers", "kl_pstar", "kl_uniform")
BASELINE = "grpo"


def _end(result: dict[str, Any], split: str, kmax: str) -> dict[str, float | None]:
    m, sampling = result["splits"][split]["mean"], result["splits"][split].get("sampling") or {}
    return {
        "mu": m["mu"], "effective_answers": m["effective_answers"], "kl_pstar": m["kl_pstar"],
        "kl_uniform": m.get("kl_uniform"), "cov_at_kmax": m["cov_at"][kmax], "pass_at_kmax": m["pass_at"][kmax],
        "sampled_validity": sampling.get("sampled_validity"), "noncanonical_mass": sampling.get("noncanonical_mass"),
    }  # fmt: skip


def aggregate(study: Study, out: Path) -> dict[str, Any]:
    """Per arm (and β): the seeds' end numbers, steps and paths; then every arm against GRPO at matched validity."""
    kmax = str(max(study.ks))
    base = json.loads((out / BASE).read_text())
    agg: dict[str, Any] = {"base": {}, "arms": {}, "missing": [], "kmax": int(kmax), "levels": list(LEVELS)}
    for split in ("train", "test"):
        m = base["splits"][split]["summary"]["mean"]
        agg["base"][split] = {"mu": m["mu"], "effective_answers": m["effective_answers"], "kl_pstar": 0.0,
                              "kl_uniform": m.get("kl_uniform"), "cov_at_kmax": m["cov_at"][kmax],
                              "pass_at_kmax": m["pass_at"][kmax], "prompts": m["problems"]}  # fmt: skip
    cells: dict[str, list[dict[str, Any]]] = {}
    for run in study_runs(study):
        result = read_result(out, study, run)
        name = run.arm if run.beta is None else f"{run.arm} β={run.beta:g}"
        if result is None:
            agg["missing"].append(run.key)
            continue
        cells.setdefault(name, []).append(result)
    for name, results in cells.items():
        arm = study.arm(results[0]["run"]["arm"])
        seconds = [r["train"]["seconds"] / max(1, r["steps"]) for r in results if r["train"].get("seconds")]
        entry: dict[str, Any] = {
            "label": arm.label, "seeds": [r["run"]["seed"] for r in results],
            "steps": mean_ci([r["steps"] for r in results]), "seconds_per_step": mean_ci(seconds),
            "reached": sum(bool(r.get("reached_stop_mu")) for r in results),
            "paths": {r["run"]["seed"]: r["path"] for r in results}, "end": {},
        }  # fmt: skip
        for split in ("train", "test"):
            ends = [_end(r, split, kmax) for r in results]
            entry["end"][split] = {k: mean_ci([e[k] for e in ends if e[k] is not None]) for k in ends[0]}
        agg["arms"][name] = entry
    baseline = agg["arms"].get(BASELINE)
    agg["matched"] = {}
    if baseline is not None:
        for name, entry in agg["arms"].items():
            if name != BASELINE:
                agg["matched"][name] = matched_levels(entry["paths"], baseline["paths"], LEVELS, PATH_KEYS)
    return agg


def _pm(ci: dict[str, Any], digits: int = 3) -> str:
    if ci.get("mean") is None:
        return "–"
    if ci.get("half") is None or not math.isfinite(ci["half"]):
        return f"{ci['mean']:.{digits}f}"
    return f"{ci['mean']:.{digits}f} ± {ci['half']:.{digits}f}"


def report(agg: dict[str, Any], command: str, study: Study) -> str:
    """The tables as markdown."""
    k = agg["kmax"]
    lines = [
        "# Real-LM study: SmolLM2-135M-Instruct, LoRA, `between`",
        "",
        f"Made by `{command}` from the runs of `rlvr-div beta-study --config bench/real_lm.yaml`. Every number is a "
        "mean ± 95% t-interval over seeds (per seed: a mean over the measured prompts); exact numbers teacher-force "
        "every valid line; the sampled validity and the non-canonical mass come from "
        f"{study.samples} samples per measured prompt at the end.",
        "",
        f"Base model: train μ {agg['base']['train']['mu']:.3f}, effective answers "
        f"{agg['base']['train']['effective_answers']:.2f}, KL(u‖a_v) {agg['base']['train']['kl_uniform']:.3f} on "
        f"{agg['base']['train']['prompts']} training prompts; test μ {agg['base']['test']['mu']:.3f}, effective "
        f"answers {agg['base']['test']['effective_answers']:.2f} on {agg['base']['test']['prompts']} test prompts.",
        "",
    ]
    if agg["missing"]:
        lines += [f"Not finished yet: {', '.join(agg['missing'])}.", ""]
    head = (f"| arm | seeds | steps | s/step | reached μ ≥ {study.convergence.stop_at_mu} | μ | effective answers "
            f"| KL(p*‖π_v) | KL(u‖π_v) | cov@{k} | pass@{k} | sampled validity | non-canonical mass |")  # fmt: skip
    for split in ("train", "test"):
        lines += [f"## End of training, {split} prompts", "", head, "|" + "---|" * 13]
        b = agg["base"][split]
        lines.append(
            f"| base | – | 0 | – | – | {b['mu']:.3f} | {b['effective_answers']:.2f} | 0 | {b['kl_uniform']:.3f} "
            f"| {b['cov_at_kmax']:.3f} | {b['pass_at_kmax']:.3f} | – | – |"
        )
        for name, e in agg["arms"].items():
            m = e["end"][split]
            lines.append(
                f"| {name} | {len(e['seeds'])} | {_pm(e['steps'], 1)} | {_pm(e['seconds_per_step'], 1)} "
                f"| {e['reached']}/{len(e['seeds'])} | {_pm(m['mu'])} | {_pm(m['effective_answers'], 2)} "
                f"| {_pm(m['kl_pstar'])} | {_pm(m['kl_uniform'])} | {_pm(m['cov_at_kmax'])} | {_pm(m['pass_at_kmax'])} "
                f"| {_pm(m['sampled_validity'])} | {_pm(m['noncanonical_mass'], 4)} |"
            )
        lines.append("")
    lines += [
        "## Against stock GRPO at matched validity (the primary comparison)",
        "",
        "Each arm's training path (the measured training prompts, exactly, every "
        f"{study.path_every} steps) against GRPO's path of the same seed, both read at the same validity μ "
        "(linear between path points); difference arm − GRPO, mean ± 95% t-interval over the seeds whose two paths "
        "both reach μ (n). Positive effective answers and negative KL(p*‖π_v) mean more of p* kept.",
        "",
        "| arm | μ | n | Δ effective answers | Δ KL(p*‖π_v) | Δ KL(u‖π_v) |",
        "|---|---|---|---|---|---|",
    ]
    for name, levels in agg["matched"].items():
        for lv in levels:
            lines.append(
                f"| {name} | {lv['mu']:.1f} | {len(lv['seeds'])} | {_pm(lv['effective_answers'], 2)} "
                f"| {_pm(lv['kl_pstar'])} | {_pm(lv['kl_uniform'])} |"
            )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m collapse_bench.real_lm_report", description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="bench/real_lm.yaml")
    ap.add_argument("--out", default="bench/results/real_lm/study")
    args = ap.parse_args(argv)
    study, out = load_study(args.config), Path(args.out)
    agg = aggregate(study, out)
    command = f"python -m collapse_bench.real_lm_report --config {args.config} --out {args.out}"
    write_json(out / "report.json", {k: v for k, v in agg.items()})
    (out / "report.md").write_text(report(agg, command, study))
    print((out / "report.md").read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
