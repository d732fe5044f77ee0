"""How much of `countries`' held-out set a training prefix answers, and the real-LM studies' held-out numbers on the
prefixes no training prefix answers (issue 58: measurement only, from the committed per-prompt numbers).

A test prefix p has valid names N(p) (:func:`rlvr_div.rewards.country_prefix.names_with_prefix`); its leakage is
|{n ∈ N(p) : n starts with some training prefix}| / |N(p)|, and it is covered outright at 1 ("Al" by "A"). The clean
subset is the test prefixes with leakage 0. On it, for each study's arms, per seed s: the exact held-out pass@k =
mean_x 1 − (1 − μ_s(x))^k over the clean prefixes x (μ_s(x) the run's valid mass at the end, the committed
``splits.test.per_prompt.mu``), its difference from the base's (Σ_x, in problems), and the effective answers; over
seeds, :func:`collapse_bench.per_prompt.versus_base` (the interval over seeds and prompts) and the exact sign-flip p.

    python -m collapse_bench.countries_leakage --out bench/results/real_lm/countries_leakage
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

from collapse_bench.markdown import num, pm, table
from collapse_bench.per_prompt import versus_base
from collapse_bench.stats import mean_ci, sign_flip_p
from rlvr_div.rewards.country_prefix import names_with_prefix

REAL_LM = Path(__file__).resolve().parents[1] / "bench" / "results" / "real_lm"
STUDIES = ("countries", "countries_gemma", "countries_shaping")
KS = (1, 4, 16, 64)


def prefix_of(prompt: str) -> str:
    """The prefix a `countries` prompt asks about (after its last "starts with ")."""
    return prompt.rsplit("starts with ", 1)[1].rstrip(":")


def leakage(test: list[str], train: list[str]) -> dict[str, float]:
    """Per test prefix: the fraction of its valid names that start with some training prefix."""
    out = {}
    for p in test:
        names = names_with_prefix(p)
        out[p] = sum(any(n.startswith(t) for t in train) for n in names) / len(names)
    return out


def pass_at(mu: np.ndarray, k: int) -> np.ndarray:
    """Exact pass@k of prompts with valid mass mu: 1 − (1 − μ)^k."""
    return 1.0 - (1.0 - mu) ** k


def study_on_subset(study: Path, keep: list[int]) -> dict[str, Any]:
    """The study's base and every arm's runs on the test prompts ``keep`` (indices into the base's test prompts)."""
    base = json.loads((study / "base.json").read_text())["splits"]["test"]["summary"]["per_prompt"]
    base_mu = np.asarray(base["mu"], float)[keep]
    base_eff = float(np.mean(np.asarray(base["effective_answers"], float)[keep]))
    out: dict[str, Any] = {"prompts": len(keep), "arms": {},
                           "base": {"pass_at": {str(k): float(pass_at(base_mu, k).mean()) for k in KS},
                                    "effective_answers": base_eff}}  # fmt: skip
    for arm_dir in sorted(p for p in (study / "runs").iterdir() if p.is_dir()):
        seeds: dict[int, dict[str, Any]] = {}
        for path in sorted(arm_dir.glob("*/seed*/result.json")):
            per = json.loads(path.read_text())["splits"]["test"]["per_prompt"]
            seeds[int(path.parent.name[4:])] = {"mu": np.asarray(per["mu"], float)[keep],
                                               "eff": np.asarray(per["effective_answers"], float)[keep]}  # fmt: skip
        if not seeds:
            continue
        below = {s: float((pass_at(v["mu"], 64) - pass_at(base_mu, 64)).sum()) for s, v in seeds.items()}
        vs = versus_base({s: v["mu"].tolist() for s, v in seeds.items()}, base_mu.tolist(), list(KS))
        out["arms"][arm_dir.name] = {
            "seeds": sorted(seeds),
            "pass_at": {str(k): mean_ci([float(pass_at(v["mu"], k).mean()) for v in seeds.values()]) for k in KS},
            "effective_answers": mean_ci([float(v["eff"].mean()) for v in seeds.values()]),
            "vs_base_problems_at_64": below,
            "seeds_half_a_problem_below": sum(d <= -0.5 for d in below.values()),
            "sign_flip_p_at_64": sign_flip_p(list(below.values())) if len(below) >= 2 else None,
            "vs_base": {str(k): vs[k] if k in vs else vs.get(str(k)) for k in KS},
        }
    return out


def measure(root: Path = REAL_LM, studies: tuple[str, ...] = STUDIES) -> dict[str, Any]:
    """The leakage of each study's measured test prefixes against its measured training prefixes, and its numbers on
    the clean subset."""
    out: dict[str, Any] = {}
    for name in studies:
        study = root / name
        if not (study / "base.json").is_file():
            continue
        splits = json.loads((study / "base.json").read_text())["splits"]
        test = [prefix_of(p) for p in splits["test"]["prompts"]]
        train = [prefix_of(p) for p in splits["train"]["prompts"]]
        leak = leakage(test, train)
        keep = [i for i, p in enumerate(test) if leak[p] == 0]
        out[name] = {"test_prefixes": len(test), "mean_leakage": float(np.mean(list(leak.values()))),
                     "covered_outright": sorted(p for p, f in leak.items() if f == 1),
                     "clean": [test[i] for i in keep], **study_on_subset(study, keep)}  # fmt: skip
    return out


def markdown(m: dict[str, Any], command: str) -> str:
    lines = ["# `countries` held out without leakage", "",
             f"Made by `{command}` from the studies' committed `base.json` and per-run `result.json` (nothing is "
             "sampled or trained). A test prefix leaks when its valid names also answer a training prefix; the clean "
             "subset keeps the test prefixes none of whose names do. Numbers on the clean subset: exact pass@k at "
             "the end (mean ± 95% t over seeds, clipped to what it can take), the difference from the base at "
             "k = 64 in problems per seed, and the sign-flip p of those differences.", ""]  # fmt: skip
    for name, s in m.items():
        lines += [f"## {name}", "",
                  f"{s['test_prefixes']} measured test prefixes; mean leakage {s['mean_leakage']:.3f}; covered "
                  f"outright {len(s['covered_outright'])} ({', '.join(s['covered_outright'])}); clean "
                  f"{len(s['clean'])} ({', '.join(s['clean'])}).", ""]  # fmt: skip
        rows = [["base", "–", *(num(s["base"]["pass_at"][str(k)]) for k in KS), num(s["base"]["effective_answers"], 2),
                 "–", "–", "–"]]  # fmt: skip
        for arm, a in s["arms"].items():
            per_seed = ", ".join(f"{d:+.2f}" for _, d in sorted(a["vs_base_problems_at_64"].items()))
            rows.append([arm, str(len(a["seeds"])),
                         *(pm(a["pass_at"][str(k)], 3, 0.0, 1.0) for k in KS), pm(a["effective_answers"], 2, 1.0),
                         per_seed, f"{a['seeds_half_a_problem_below']}/{len(a['seeds'])}",
                         num(a["sign_flip_p_at_64"])])  # fmt: skip
        head = ["arm", "seeds", *(f"pass@{k}" for k in KS), "eff. answers", "vs base at 64 (problems, per seed)",
                "seeds ≥ ½ problem below", "sign-flip p"]  # fmt: skip
        lines += [*table(head, rows), ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m collapse_bench.countries_leakage", description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, help="directory for report.json and report.md")
    args = ap.parse_args(argv)
    m = measure()
    if not m:
        print(f"error: no countries study under {REAL_LM}", file=sys.stderr)
        return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "report.json").write_text(json.dumps(m, indent=1, default=float) + "\n")
    (out / "report.md").write_text(markdown(m, f"python -m collapse_bench.countries_leakage --out {args.out}"))
    clean = ", ".join(f"{n}: {len(s['clean'])} clean prefixes" for n, s in m.items())
    print(f"{out / 'report.md'}: {clean}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
