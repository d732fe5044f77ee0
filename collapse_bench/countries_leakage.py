"""How much of `countries`' held-out set a training prefix answers, and the real-LM studies' held-out numbers on the
test prefixes no training prefix answers (issue 58: measurement only, from the committed per-prompt numbers).

Leakage. A test prefix p has valid names N(p) (:func:`rlvr_div.rewards.country_prefix.names_with_prefix`); with
training prefixes T its leakage is ℓ(p) = |{n ∈ N(p) : n starts with some t ∈ T}| / |N(p)|; p is covered outright
at ℓ(p) = 1 ("Al" by "A") and clean at ℓ(p) = 0. Measured on the task's own split (33 test against 33 training
prefixes, :mod:`rlvr_div.tasks.countries`) and on each study's measured prompts (its ``base.json``: 32 and 32).

Recomputation on the clean subset C, per run (seed s, end of training valid mass μ_s(x) = the committed
``splits.test.per_prompt.mu``; the base's A(x) from ``base.json``):
pass@k = mean_{x∈C} 1 − (1 − μ_s(x))^k (exact); effective answers and KL(p*‖π) = the mean over C of the committed
per-prompt values; lost@k = Σ_{x∈C} b_k(x)·(1 − m_k(x)) and gained@k = Σ_{x∈C} (1 − b_k(x))·m_k(x) with
b_k = 1 − (1 − A)^k, m_k = 1 − (1 − μ_s)^k (:func:`rlvr_div.exact.expected_lost_gained`); Δ@k = Σ_{x∈C} m_k − b_k
(problems; = gained@k − lost@k). Over seeds: :func:`collapse_bench.stats.mean_ci`; against the base, the exact
sign-flip p of the per-seed Δ@k (:func:`collapse_bench.stats.sign_flip_p`) and
:func:`collapse_bench.per_prompt.versus_base` (its interval resamples seeds and prompts); against GRPO of the same
seed, :func:`collapse_bench.stats.paired_difference` (t-interval and sign-flip p). The same numbers on all measured
test prefixes sit beside them (``all``), and reproduce each run's committed ``splits.test.mean``.

    python -m collapse_bench.countries_leakage --out bench/results/real_lm/countries_leakage
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from collapse_bench.markdown import num, pm, table
from collapse_bench.per_prompt import versus_base
from collapse_bench.stats import mean_ci, paired_difference, sign_flip_p
from rlvr_div.exact import expected_lost_gained
from rlvr_div.rewards.country_prefix import names_with_prefix

REAL_LM = Path(__file__).resolve().parents[1] / "bench" / "results" / "real_lm"
KS = (1, 4, 16, 64)
COMMAND = "python -m collapse_bench.countries_leakage --out bench/results/real_lm/countries_leakage"
SCALARS = ("effective_answers", "kl_pstar")  # per-prompt values averaged over the subset
VS_GRPO = (("pass_at", "64"), ("effective_answers", None), ("kl_pstar", None), ("lost_at", "64"), ("gained_at", "64"))


def prefix_of(prompt: str) -> str:
    """The prefix a `countries` prompt asks about (after its last "starts with ")."""
    return prompt.rsplit("starts with ", 1)[1].rstrip(":")


def leakage(test: Sequence[str], train: Sequence[str]) -> dict[str, float]:
    """ℓ(p) per test prefix p: the fraction of its valid names that start with some training prefix."""
    out = {}
    for p in test:
        names = names_with_prefix(p)
        out[p] = sum(any(n.startswith(t) for t in train) for n in names) / len(names)
    return out


def leakage_summary(test: Sequence[str], train: Sequence[str]) -> dict[str, Any]:
    """ℓ per test prefix, its mean over the test prefixes, the prefixes covered outright (ℓ = 1) and the clean ones
    (ℓ = 0), in the order of ``test``."""
    leak = leakage(test, train)
    return {"test_prefixes": len(test), "train_prefixes": len(train), "leakage": leak,
            "mean_leakage": float(np.mean(list(leak.values()))),
            "covered_outright": [p for p in test if leak[p] == 1.0],
            "clean": [p for p in test if leak[p] == 0.0]}  # fmt: skip


def pass_at(mu: np.ndarray, k: int) -> np.ndarray:
    """Exact pass@k of prompts with valid mass μ: 1 − (1 − μ)^k."""
    return 1.0 - (1.0 - np.asarray(mu, float)) ** k


def subset_metrics(per_prompt: dict[str, Sequence[float]], base_mu: Sequence[float], keep: Sequence[int],
                   ks: Sequence[int] = KS) -> dict[str, Any]:  # fmt: skip
    """One run's numbers on the prompts ``keep``: pass@k (mean), effective answers and KL(p*‖π) (means), and against
    the base A: lost@k, gained@k and Δ@k = Σ pass@k(μ) − pass@k(A) (sums, in problems)."""
    idx = list(keep)
    mu, base = np.asarray(per_prompt["mu"], float)[idx], np.asarray(base_mu, float)[idx]
    out: dict[str, Any] = {"pass_at": {str(k): float(pass_at(mu, k).mean()) for k in ks}}
    for key in SCALARS:
        out[key] = float(np.mean(np.asarray(per_prompt[key], float)[idx]))
    out["lost_at"], out["gained_at"], out["vs_base"] = {}, {}, {}
    for k in ks:
        out["lost_at"][str(k)], out["gained_at"][str(k)] = expected_lost_gained(base, mu, k)
        out["vs_base"][str(k)] = float((pass_at(mu, k) - pass_at(base, k)).sum())
    return out


def _value(m: dict[str, Any], key: str, k: str | None) -> float:
    return m[key][k] if k is not None else m[key]


def over_seeds(runs: dict[int, dict[str, Any]], ks: Sequence[int] = KS, base_effective: float | None = None
               ) -> dict[str, Any]:  # fmt: skip
    """Mean ± t-interval over seeds of every :func:`subset_metrics` number; beside Δ@k, the sign-flip p of the
    per-seed Δ@k (None with one seed) and how many seeds are half a problem or more below the base; with the base's
    effective answers E_b, the same for the per-seed E_s − E_b."""
    first = next(iter(runs.values()))
    out: dict[str, Any] = {key: mean_ci([r[key] for r in runs.values()]) for key in SCALARS}
    for key in ("pass_at", "lost_at", "gained_at", "vs_base"):
        out[key] = {str(k): mean_ci([r[key][str(k)] for r in runs.values()]) for k in ks if str(k) in first[key]}
    out["sign_flip_p"] = {str(k): sign_flip_p([r["vs_base"][str(k)] for r in runs.values()]) if len(runs) > 1 else None
                          for k in ks}  # fmt: skip
    out["seeds_half_a_problem_below"] = {str(k): sum(r["vs_base"][str(k)] <= -0.5 for r in runs.values()) for k in ks}
    if base_effective is not None:
        d = [r["effective_answers"] - base_effective for r in runs.values()]
        out["effective_answers_vs_base"] = {**mean_ci(d), "seeds_below": sum(x < 0 for x in d),
                                            "sign_flip_p": sign_flip_p(d) if len(d) > 1 else None}  # fmt: skip
    return out


def versus_grpo(arm: dict[int, dict[str, Any]], grpo: dict[int, dict[str, Any]]) -> dict[str, Any]:
    """Arm − GRPO of the same seed (the seeds both have) for pass@64, effective answers, KL(p*‖π), lost@64 and
    gained@64: :func:`collapse_bench.stats.paired_difference` (mean, t-interval, sign-flip p); empty below 2 pairs."""
    if len(set(arm) & set(grpo)) < 2:
        return {}
    out = {}
    for key, k in VS_GRPO:
        name = f"{key}_{k}" if k else key
        out[name] = paired_difference({s: _value(r, key, k) for s, r in arm.items()},
                                      {s: _value(r, key, k) for s, r in grpo.items()})  # fmt: skip
    return out


def load_study(study: Path) -> tuple[dict[str, Any], dict[str, dict[int, dict[str, Any]]]]:
    """A study's ``base.json`` splits and its runs' test per-prompt lists, ``{arm: {seed: per_prompt}}`` (an arm
    with a β is named ``arm@β``)."""
    splits = json.loads((study / "base.json").read_text())["splits"]
    runs: dict[str, dict[int, dict[str, Any]]] = {}
    for path in sorted((study / "runs").glob("*/*/seed*/result.json")):
        beta = path.parent.parent.name
        arm = path.parent.parent.parent.name + ("" if beta == "none" else f"@{beta}")
        result = json.loads(path.read_text())["splits"]["test"]
        runs.setdefault(arm, {})[int(path.parent.name[4:])] = {**result["per_prompt"], "committed": result["mean"]}
    return splits, runs


def on_subset(splits: dict[str, Any], runs: dict[str, dict[int, dict[str, Any]]], keep: Sequence[int]
              ) -> dict[str, Any]:  # fmt: skip
    """The base and every arm on the test prompts ``keep``: per seed, over seeds, against the base
    (:func:`versus_base`) and against GRPO of the same seed."""
    base_pp = splits["test"]["summary"]["per_prompt"]
    base_mu = base_pp["mu"]
    base = subset_metrics(base_pp, base_mu, keep)
    out: dict[str, Any] = {"prompts": len(keep), "base": {key: base[key] for key in ("pass_at", *SCALARS)}, "arms": {}}
    per_arm = {arm: {s: subset_metrics(pp, base_mu, keep) for s, pp in sorted(seeds.items())}
               for arm, seeds in runs.items()}  # fmt: skip
    kept_base, base_eff = [base_mu[i] for i in keep], base["effective_answers"]
    for arm, seeds in per_arm.items():
        mus = {s: [runs[arm][s]["mu"][i] for i in keep] for s in seeds}
        out["arms"][arm] = {"seeds": sorted(seeds), "per_seed": {str(s): r for s, r in seeds.items()},
                            **over_seeds(seeds, base_effective=base_eff),
                            "versus_base": versus_base(mus, kept_base, list(KS)),
                            "versus_grpo": versus_grpo(seeds, per_arm["grpo"]) if arm != "grpo" and "grpo" in per_arm
                            else {}}  # fmt: skip
    return out


def measure_study(study: Path) -> dict[str, Any]:
    """One study: the leakage of its measured test prefixes against its measured training prefixes, and its numbers
    on the clean subset and on all measured test prefixes."""
    splits, runs = load_study(study)
    test = [prefix_of(p) for p in splits["test"]["prompts"]]
    train = [prefix_of(p) for p in splits["train"]["prompts"]]
    leak = leakage_summary(test, train)
    keep = [test.index(p) for p in leak["clean"]]
    return {**leak, "clean_subset": on_subset(splits, runs, keep), "all": on_subset(splits, runs, range(len(test)))}


def task_leakage() -> dict[str, Any]:
    """The leakage of the task's own split (:func:`rlvr_div.tasks.countries.countries_split`)."""
    from rlvr_div.tasks.countries import all_prefixes, countries_split

    prefixes = all_prefixes()
    return leakage_summary([p for p in prefixes if countries_split(p) == "test"],
                           [p for p in prefixes if countries_split(p) == "train"])  # fmt: skip


def measure(root: Path = REAL_LM) -> dict[str, Any]:
    """The task split's leakage and every committed `countries` study (``countries*/base.json``) measured."""
    studies = {s.name: measure_study(s) for s in sorted(root.glob("countries*")) if (s / "base.json").is_file()}
    return {"command": COMMAND, "ks": list(KS), "task_split": task_leakage(), "studies": studies}


def _signed(ci: dict[str, Any] | None, digits: int = 2) -> str:
    if not ci or ci.get("mean") is None:
        return "–"
    text = f"{ci['mean']:+.{digits}f}"
    return text if ci.get("half") is None else f"{text} ± {ci['half']:.{digits}f}"


def _eff_vs_base(r: dict[str, Any]) -> str:
    e = r["effective_answers_vs_base"]
    return f"{_signed(e)} ({e['seeds_below']}/{e['n']}; {num(e['sign_flip_p'])})"


def _study_md(name: str, s: dict[str, Any]) -> list[str]:
    c, a = s["clean_subset"], s["all"]
    lines = [f"## {name}", "",
             f"{s['test_prefixes']} measured test prefixes against {s['train_prefixes']} training prefixes; mean "
             f"leakage {s['mean_leakage']:.3f}; covered outright {len(s['covered_outright'])} "
             f"({', '.join(s['covered_outright'])}); clean {len(s['clean'])} ({', '.join(s['clean'])}).", "",
             f"On the {c['prompts']} clean prefixes (lost, gained and Δ in problems of {c['prompts']}; Δ = pass@64 "
             "summed over the prefixes minus the base's, per seed):", ""]  # fmt: skip
    rows = [["base", "–", *(num(c["base"]["pass_at"][str(k)]) for k in KS), num(c["base"]["effective_answers"], 2),
             num(c["base"]["kl_pstar"], 2), "–", "–", "–", "–", "–", "–"]]  # fmt: skip
    for arm, r in c["arms"].items():
        per_seed = ", ".join(f"{v['vs_base']['64']:+.2f}" for v in r["per_seed"].values())
        rows.append([arm, str(len(r["seeds"])), *(pm(r["pass_at"][str(k)], 3, 0.0, 1.0) for k in KS),
                     pm(r["effective_answers"], 2, 1.0), pm(r["kl_pstar"], 2, 0.0),
                     pm(r["lost_at"]["64"], 2, 0.0, c["prompts"]), pm(r["gained_at"]["64"], 2, 0.0, c["prompts"]),
                     per_seed, f"{r['seeds_half_a_problem_below']['64']}/{len(r['seeds'])}",
                     num(r["sign_flip_p"]["64"]), _eff_vs_base(r)])  # fmt: skip
    head = ["arm", "seeds", *(f"pass@{k}" for k in KS), "eff. answers", "KL(p*‖π)", "lost@64", "gained@64",
            "Δ@64 per seed", "seeds ≥ ½ problem below", "sign-flip p",
            "eff. answers − base (seeds below; p)"]  # fmt: skip
    lines += [*table(head, rows), ""]
    pairs = {arm: r["versus_grpo"] for arm, r in c["arms"].items() if r["versus_grpo"]}
    if pairs:
        lines += ["Arm − GRPO of the same seed on the clean prefixes (mean ± 95% t; sign-flip p):", ""]
        names = [f"{key}_{k}" if k else key for key, k in VS_GRPO]
        rows = [[arm, str(len(d["pass_at_64"]["seeds"])),
                 *(f"{_signed(d[n], 3 if n == 'pass_at_64' else 2)} ({num(d[n]['sign_flip_p'])})" for n in names)]
                for arm, d in pairs.items()]  # fmt: skip
        lines += [*table(["arm", "pairs", "pass@64", "eff. answers", "KL(p*‖π)", "lost@64", "gained@64"], rows), ""]
    lines += [f"For comparison, all {a['prompts']} measured test prefixes:", ""]
    rows = [["base", num(a["base"]["pass_at"]["64"]), num(a["base"]["effective_answers"], 2), "–", "–", "–"]]
    rows += [[arm, pm(r["pass_at"]["64"], 3, 0.0, 1.0), pm(r["effective_answers"], 2, 1.0), _signed(r["vs_base"]["64"]),
              num(r["sign_flip_p"]["64"]), _eff_vs_base(r)] for arm, r in a["arms"].items()]  # fmt: skip
    head = ["arm", "pass@64", "eff. answers", "Δ@64 (problems)", "sign-flip p", "eff. answers − base (seeds below; p)"]
    lines += [*table(head, rows), ""]
    return lines


def markdown(m: dict[str, Any]) -> str:
    """report.md: the leakage, then per study the clean subset's table, arm − GRPO, and the all-prompt numbers."""
    t = m["task_split"]
    lines = ["# `countries` held out without leakage", "",
             f"Made by `{m['command']}` from the studies' committed `base.json` and per-run `result.json` (nothing is "
             "sampled or trained). A test prefix's leakage is the fraction of its valid names that also answer a "
             "training prefix; it is covered outright at 1 and clean at 0. Mean ± 95% t over seeds (clipped to what "
             "the number can take); sign-flip p: exact, of the per-seed differences (floor 2/2^seeds; none with one "
             "seed).", "",
             f"Task split ({t['test_prefixes']} test against {t['train_prefixes']} training prefixes): mean leakage "
             f"{t['mean_leakage']:.3f}; covered outright {len(t['covered_outright'])} "
             f"({', '.join(t['covered_outright'])}); clean {len(t['clean'])} ({', '.join(t['clean'])}).",
             ""]  # fmt: skip
    for name, s in m["studies"].items():
        lines += _study_md(name, s)
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m collapse_bench.countries_leakage", description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, help="directory for report.json and report.md")
    args = ap.parse_args(argv)
    m = measure()
    if not m["studies"]:
        print(f"error: no countries study under {REAL_LM}", file=sys.stderr)
        return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "report.json").write_text(json.dumps(m, indent=1) + "\n")
    (out / "report.md").write_text(markdown(m))
    print(f"{out / 'report.md'}: " + ", ".join(f"{n}: {len(s['clean'])} clean" for n, s in m["studies"].items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
