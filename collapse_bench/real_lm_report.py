"""The real-LM study's report (issue 25; docs/study/collapse.md, "A real pretrained LM"): ``report.md``
and ``report.json``.

``python -m collapse_bench.real_lm_report --config bench/real_lm.yaml --out bench/results/real_lm/study`` reads the
finished runs of ``rlvr-div beta-study --config bench/real_lm.yaml`` (nothing is trained or loaded) and writes
- per arm: steps, seconds per step, and at the end, on the measured training and test prompts, the exact validity μ,
  the effective number of valid answers, KL(p*‖π_v) and KL(u‖π_v), cov@k and pass@k, the expected problems lost and
  gained against the base at the largest k (:func:`collapse_bench.measure.expected_lost_gained`), beside the sampled
  validity and the mass on non-canonical tokenisations; mean ± 95% t-interval over seeds;
- each remedy against stock GRPO along both training paths at fixed validities, with no chosen end point
  (:func:`collapse_bench.aggregate.matched_levels`), seed by seed;
- with a ``primary`` block in the config, the study's primary comparison as declared there before the runs: its
  interval includes prompt sampling (:func:`collapse_bench.per_prompt.matched_with_prompts`), Holm over its levels.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from collapse_bench.aggregate import matched_levels
from collapse_bench.beta_spec import Study, load_study
from collapse_bench.beta_study import BASE, finished_results
from collapse_bench.markdown import pm as _pm
from collapse_bench.markdown import table
from collapse_bench.measure import SHIFT_TOP
from collapse_bench.per_prompt import matched_with_prompts
from collapse_bench.stats import holm, mean_ci, sign_flip_p
from eval.records import write_json

LEVELS = (0.5, 0.6, 0.7, 0.8, 0.9, 0.95)
PATH_KEYS = ("effective_answers", "kl_pstar", "kl_uniform")
SHIFTED_PATH_KEY = "shifted_pass_kmax"  # pass@kmax under the shifted verifier, along the path (when measured)
BASELINE = "grpo"


def _shifted(mean: dict[str, Any], kmax: str) -> dict[str, float | None]:
    """The shifted verifier's numbers of a split's summary (it accepts the valid answers outside the base's top ones
    of each prompt; :func:`collapse_bench.measure.shifted_summary`): the policy's mass on them π(S), pass@1 and
    pass@kmax under it, and the expected problems lost and gained against the base at kmax (all None where the
    summary has none)."""
    sh = mean.get("shifted") or {}
    passes, lost, gained = sh.get("pass_at") or {}, sh.get("lost_at") or {}, sh.get("gained_at") or {}
    return {"shifted_mass": sh.get("mass"), "shifted_pass_1": passes.get("1"), "shifted_pass_kmax": passes.get(kmax),
            "shifted_lost_kmax": lost.get(kmax), "shifted_gained_kmax": gained.get(kmax)}  # fmt: skip


def _end(result: dict[str, Any], split: str, kmax: str) -> dict[str, float | None]:
    m, sampling = result["splits"][split]["mean"], result["splits"][split].get("sampling") or {}
    return {
        "mu": m["mu"], "effective_answers": m["effective_answers"], "kl_pstar": m["kl_pstar"],
        "kl_uniform": m.get("kl_uniform"), "cov_at_kmax": m["cov_at"][kmax], "pass_at_kmax": m["pass_at"][kmax],
        "lost_kmax": (m.get("lost_at") or {}).get(kmax), "gained_kmax": (m.get("gained_at") or {}).get(kmax),
        "sampled_validity": sampling.get("sampled_validity"), "noncanonical_mass": sampling.get("noncanonical_mass"),
        **_shifted(m, kmax),
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
                              "pass_at_kmax": m["pass_at"][kmax], "prompts": m["problems"],
                              **_shifted(m, kmax)}  # fmt: skip
    cells: dict[str, list[dict[str, Any]]] = {}
    done, agg["missing"] = finished_results(study, out)
    for run, result in done:
        cells.setdefault(run.arm if run.beta is None else f"{run.arm} β={run.beta:g}", []).append(result)
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
    points = [p for e in agg["arms"].values() for path in e["paths"].values() for p in path]
    keys = PATH_KEYS + ((SHIFTED_PATH_KEY,) if points and all(SHIFTED_PATH_KEY in p for p in points) else ())
    if baseline is not None:
        for name, entry in agg["arms"].items():
            if name != BASELINE:
                agg["matched"][name] = matched_levels(entry["paths"], baseline["paths"], LEVELS, keys)
    agg["primary"] = primary(study, agg) if study.primary is not None else None
    return agg


def primary(study: Study, agg: dict[str, Any]) -> dict[str, Any]:
    """The config's primary comparison: per level, ``arm`` − ``against`` in ``key`` at that validity with the
    prompt-inclusive interval and p-value; Holm over the declared levels, a level with no value (an arm never reached
    it) staying in the family as not rejected (p = 1: the family is the one written before the runs); ``supported``
    where the difference has the declared sign, its interval excludes 0 and it survives Holm."""
    p = study.primary
    assert p is not None
    entry: dict[str, Any] = {"arm": p.arm, "against": p.against, "key": p.key, "direction": p.direction,
                             "levels": []}  # fmt: skip
    a, b = agg["arms"].get(p.arm), agg["arms"].get(p.against)
    if a is None or b is None:
        entry["missing"] = [name for name, e in ((p.arm, a), (p.against, b)) if e is None]
        return entry
    levels = [matched_with_prompts(a["paths"], b["paths"], mu, p.key, p.resamples) for mu in p.levels]
    survives = holm({i: 1.0 if lv["p"] is None else lv["p"] for i, lv in enumerate(levels)})
    for i, lv in enumerate(levels):
        sign_ok = lv["mean"] is not None and (lv["mean"] < 0 if p.direction == "negative" else lv["mean"] > 0)
        excludes = lv["lo"] is not None and (lv["lo"] > 0 or lv["hi"] < 0)
        lv |= {"holm": survives[i], "supported": bool(sign_ok and excludes and survives[i])}
    entry["levels"] = levels
    return entry


def report(agg: dict[str, Any], command: str, study: Study, config: str) -> str:
    """The tables as markdown."""
    k = agg["kmax"]
    model = study.model.removeprefix("package:") + (f" ({study.gguf_file})" if study.gguf_file else "")
    lines = [
        f"# Real-LM study: {model}, `{study.task}`",
        "",
        f"Made by `{command}` from the runs of `rlvr-div beta-study --config {config}`. Every number is a "
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
    head = ["arm", "seeds", "steps", "s/step", f"reached μ ≥ {study.convergence.stop_at_mu}", "μ", "effective answers",
            "KL(p*‖π_v)", "KL(u‖π_v)", f"cov@{k}", f"pass@{k}", f"lost at {k}", f"gained at {k}", "sampled validity",
            "non-canonical mass"]  # fmt: skip
    for split in ("train", "test"):
        b = agg["base"][split]
        rows = [["base", "–", "0", "–", "–", f"{b['mu']:.3f}", f"{b['effective_answers']:.2f}", "0",
                 *(f"{b[key]:.3f}" for key in ("kl_uniform", "cov_at_kmax", "pass_at_kmax")), *["–"] * 4]]  # fmt: skip
        for name, e in agg["arms"].items():
            m, n = e["end"][split], len(e["seeds"])
            rows.append([name, str(n), _pm(e["steps"], 1), _pm(e["seconds_per_step"], 1), f"{e['reached']}/{n}",
                         _pm(m["mu"]), _pm(m["effective_answers"], 2), _pm(m["kl_pstar"]), _pm(m["kl_uniform"]),
                         _pm(m["cov_at_kmax"]), _pm(m["pass_at_kmax"]), _pm(m["lost_kmax"], 2),
                         _pm(m["gained_kmax"], 2), _pm(m["sampled_validity"]),
                         _pm(m["noncanonical_mass"], 4)])  # fmt: skip
        lines += [f"## End of training, {split} prompts", "", *table(head, rows), ""]
    dense = (
        ""
        if study.path_dense is None
        else (f", every {study.path_dense.every} once μ passes {study.path_dense.above_mu:g}")
    )
    lines += [
        "## Against stock GRPO at matched validity (descriptive; the declared primary comparison is further down)",
        "",
        "Each arm's training path (the measured training prompts, exactly, every "
        f"{study.path_every} steps{dense}) against GRPO's path of the same seed, both read at the same validity μ "
        "(linear between path points); difference arm − GRPO, mean ± 95% t-interval over the seeds whose two paths "
        "both reach μ (n). Positive effective answers and negative KL(p*‖π_v) mean more of p* kept.",
        "",
    ]
    shifted = any(SHIFTED_PATH_KEY in lv for levels in agg["matched"].values() for lv in levels)
    head = ["arm", "μ", "n", "Δ effective answers", "Δ KL(p*‖π_v)", "Δ KL(u‖π_v)"] + [f"Δ pass@{k} shifted"] * shifted
    rows = [
        [name, f"{lv['mu']:g}", str(len(lv["seeds"])), _pm(lv["effective_answers"], 2), _pm(lv["kl_pstar"]),
         _pm(lv["kl_uniform"])] + [_pm(lv.get(SHIFTED_PATH_KEY))] * shifted
        for name, levels in agg["matched"].items()
        for lv in levels
    ]  # fmt: skip
    lines += table(head, rows)
    if agg["base"]["train"].get("shifted_mass") is not None:
        lines += ["", *_shifted_lines(agg, k)]
    if agg.get("primary"):
        lines += ["", *_primary_lines(agg["primary"], study)]
    return "\n".join(lines) + "\n"


def _shifted_lines(agg: dict[str, Any], k: int) -> list[str]:
    """The end of training under the shifted verifier, per split (issue 32, item 2)."""
    lines = [
        "## Under a shifted verifier (end of training)",
        "",
        f"A held-out verifier accepts only the valid answers outside the base's {SHIFT_TOP} likeliest of each prompt; "
        "training never asked for them. π(S) is the policy's mass on them, "
        f"pass@k under it 1 − (1 − π(S|x))^k averaged over the measured prompts, exactly; lost / gained: the expected "
        f"problems (of the measured prompts) the base solves at k = {k} under this verifier and the policy does not, "
        "and the reverse.",
        "",
    ]
    for split in ("train", "test"):
        b = agg["base"][split]
        rows = [["base", f"{b['shifted_mass']:.4f}", f"{b['shifted_pass_1']:.4f}", f"{b['shifted_pass_kmax']:.3f}",
                 "–", "–"]]  # fmt: skip
        for name, e in agg["arms"].items():
            m = e["end"][split]
            rows.append([name, _pm(m["shifted_mass"], 4), _pm(m["shifted_pass_1"], 4), _pm(m["shifted_pass_kmax"]),
                         _pm(m["shifted_lost_kmax"], 2), _pm(m["shifted_gained_kmax"], 2)])  # fmt: skip
        head = ["arm", "π(S)", "pass@1", f"pass@{k}", f"lost at {k}", f"gained at {k}"]
        lines += [f"{split} prompts:", "", *table(head, rows), ""]
    return lines


def _primary_lines(entry: dict[str, Any], study: Study) -> list[str]:
    p = study.primary
    assert p is not None
    lines = [
        "## The primary comparison (declared in the config before the runs)",
        "",
        f"{p.arm} − {p.against} in {p.key} on the measured training prompts at validity "
        f"{', '.join(f'{v:g}' for v in p.levels)}, read along both training paths of each seed; the interval is "
        f"d̄ ± t(n−1)·√(sd²/n + v_p), v_p the variance of d̄ over {p.resamples} bootstrap draws of the prompts (the "
        f"prompts are shared by all seeds, so the seeds' spread leaves their sampling out; a draw in which a seed's "
        f"resampled path does not reach μ leaves that seed out of that draw, and 'missed' counts such seed-draws "
        f"of all, so v_p is conditional on reaching μ where it is not 0); Holm over the declared levels, a level "
        f"no seed's paths both reach staying in the family as not rejected. p (sign-flip): the exact sign-flip "
        f"permutation test of the per-seed differences (seeds only, prompts fixed; smallest possible 2/2^seeds). "
        f"p (Satterthwaite): the same t with Welch–Satterthwaite df (the prompts' part with prompts − 1 df), beside "
        f"the declared n − 1 (collapse_bench.per_prompt.satterthwaite_df); Holm reads the declared p. "
        f"Supported: the difference is {p.direction}, its interval excludes 0 and it survives Holm.",
        "",
    ]
    if entry.get("missing"):
        return [*lines, f"Not computed: no finished runs of {', '.join(entry['missing'])}."]
    rows = []
    for lv in entry["levels"]:
        if lv["mean"] is None:
            rows.append([f"{lv['level']:g}", "0"] + ["–"] * 10 + ["no"])
            continue
        pairs = ", ".join(f"{d:+.2f}" for d in lv.get("differences", ()))
        interval = "–" if lv["lo"] is None else f"[{lv['lo']:+.3f}, {lv['hi']:+.3f}]"
        se_s = "–" if lv["se_seeds"] is None else f"{lv['se_seeds']:.3f}"
        se_p = "–" if lv["se_prompts"] is None else f"{lv['se_prompts']:.3f}"
        pv = "–" if lv["p"] is None else f"{lv['p']:.3g}"
        flip = sign_flip_p(lv.get("differences") or [])
        flip_cell = "–" if flip is None or lv["n"] < 2 else f"{flip:.3g}"
        missed = "–" if lv["lo"] is None else f"{lv['missed_draws']}/{p.resamples * lv['n']}"
        welch = (
            "–"
            if lv.get("p_satterthwaite") is None
            else (f"{lv['p_satterthwaite']:.3g} (df {lv['df_satterthwaite']:.1f})")
        )
        rows.append([f"{lv['level']:g}", str(lv["n"]), f"{lv['mean']:+.3f}", pairs, interval, se_s, se_p, missed, pv,
                     welch, flip_cell, "yes" if lv["holm"] else "no", "yes" if lv["supported"] else "no"])  # fmt: skip
    head = ["μ", "seeds", "difference", "per seed", "95% interval", "se (seeds)", "se (prompts)", "missed", "p",
            "p (Satterthwaite)", "p (sign-flip)", "Holm", "supported"]  # fmt: skip
    return [*lines, *table(head, rows)]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m collapse_bench.real_lm_report", description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="bench/real_lm.yaml")
    ap.add_argument("--out", default="bench/results/real_lm/study")
    args = ap.parse_args(argv)
    study, out = load_study(args.config), Path(args.out)
    agg = aggregate(study, out)
    command = f"python -m collapse_bench.real_lm_report --config {args.config} --out {args.out}"
    write_json(out / "report.json", agg)
    (out / "report.md").write_text(report(agg, command, study, args.config))
    print((out / "report.md").read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
