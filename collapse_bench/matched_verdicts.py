"""Two verdicts per cell of a class study (``routes``), side by side: does a method keep the held-out problems, and
does it keep the base's distribution? The first read at matched training validity, not only at the last step.

A method that trains less (ends at a lower training validity μ) keeps more of the held-out class for that reason
alone, since GRPO loses it as μ rises. So, per seed s, with the method's last training point at validity μ_s and its
held-out validity of class ``cls`` there v_s, GRPO's path of the same seed is read where its training validity
first reaches μ_s (:func:`collapse_bench.measure.path_value_at`, linear between path points): g_s. The matched gain
is d_s = v_s − g_s (None where GRPO's path never reaches μ_s: the method ended beyond GRPO's range or below its
start). Reported: mean ± 95% t over the seeds that have d_s, and the exact sign-flip p
(:func:`collapse_bench.stats.sign_flip_p`, floor 2/2^seeds).

Beside it, from the report (``collapse.json``) at the last step: the declared primary (problems lost at k against
the base, method − GRPO, and whether it was claimed), and the distribution on the training prompts: KL(p*‖π_v),
effective answers, and the minority strategy's share.

    python -m collapse_bench.matched_verdicts --bench bench/results/collapse_routes --task routes --cls long
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from collapse_bench.markdown import num, table
from collapse_bench.measure import path_value_at
from collapse_bench.stats import mean_ci, sign_flip_p


def joined_path(result: dict[str, Any], cls: str) -> list[dict[str, Any]]:
    """A run's path points ``{"step", "mu": training validity, "held": held-out validity of class cls}``, joined by
    step from its ``trajectory`` and ``trajectory_held_out``."""
    held = {p["step"]: p[f"mu_{cls}"] for p in result.get("trajectory_held_out") or [] if f"mu_{cls}" in p}
    return [{"step": p["step"], "mu": p["mu"], "held": held[p["step"]]}
            for p in result.get("trajectory") or [] if p["step"] in held]  # fmt: skip


def read_paths(bench: Path, task: str, cls: str) -> dict[str, dict[int, list[dict[str, Any]]]]:
    """``{cell: {seed: joined path}}`` of every run under ``bench/runs/<task>/<method>/<value>/seed<s>``; a cell is
    the method, or ``method/value`` for a value other than ``default``."""
    out: dict[str, dict[int, list[dict[str, Any]]]] = {}
    for path in sorted((bench / "runs" / task).glob("*/*/seed*/result.json")):
        method, value, seed = path.parts[-4], path.parts[-3], int(path.parts[-2][4:])
        cell = method if value == "default" else f"{method}/{value}"
        out.setdefault(cell, {})[seed] = joined_path(json.loads(path.read_text()), cls)
    return out


def matched_gain(mine: dict[int, list[dict]], baseline: dict[int, list[dict]]) -> dict[str, Any]:
    """Per seed: the method's last (μ, held-out validity) and GRPO's held-out validity at that μ; the gains d_s."""
    seeds, gains, ends = [], [], {}
    for s in sorted(set(mine) & set(baseline)):
        if not mine[s] or not baseline[s]:
            continue
        last = max(mine[s], key=lambda p: p["step"])
        at = path_value_at(baseline[s], last["mu"], "held")
        ends[s] = {"mu": last["mu"], "held": last["held"], "baseline_held": at}
        if at is not None:
            seeds.append(s)
            gains.append(last["held"] - at)
    ci = mean_ci(gains) if len(gains) >= 2 else None
    return {"seeds": seeds, "gains": gains, "ends": ends, "ci": ci,
            "sign_flip_p": sign_flip_p(gains) if len(gains) >= 2 else None}  # fmt: skip


def verdicts(bench: Path, task: str, cls: str, baseline: str = "grpo") -> dict[str, Any]:
    """Every cell's matched gain beside the report's end-of-training primary row and training-prompt distribution."""
    paths = read_paths(bench, task, cls)
    if baseline not in paths:
        raise SystemExit(f"error: no {baseline} runs under {bench / 'runs' / task}")
    entry = json.loads((bench / "collapse.json").read_text())["tasks"][task]
    rows = (entry.get("primary") or {}).get("rows", {})
    out: dict[str, Any] = {"task": task, "class": cls, "baseline": baseline,
                           "primary": (entry.get("primary") or {}).get("spec"), "cells": {}}  # fmt: skip
    for cell in sorted(paths):
        method = entry["methods"].get(cell.split("/")[0], {})
        train = method.get("splits", {}).get("train", {})
        share = method.get("by_class", {}).get("train", {})
        share = next(iter(share.values()), {}).get("minority_share") if share else None
        ends = [max(path, key=lambda q: q["step"])["held"] for path in paths[cell].values() if path]
        out["cells"][cell] = {
            "held_end": sum(ends) / len(ends) if ends else None,
            "matched": None if cell == baseline else matched_gain(paths[cell], paths[baseline]),
            "primary": rows.get(cell),
            "kl_pstar": train.get("kl_pstar"),
            "effective_answers": train.get("effective_answers"),
            "minority_share": share,
            "mu": train.get("mu"),
        }
    return out


def _ci(ci: dict[str, Any] | None, digits: int = 3) -> str:
    return "–" if not ci else f"{num(ci['mean'], digits)} ± {num(ci.get('half'), digits)}"


def markdown(v: dict[str, Any], command: str) -> str:
    p = v["primary"] or {}
    lines = [f"# Two verdicts per cell: `{v['task']}`, held-out class `{v['class']}`", "",
             f"Made by `{command}` from the committed per-run `result.json` files and `collapse.json` (nothing is run; "
             "a reading after the results, not a declared test). Matched gain: the method's held-out validity of the "
             "class at its last step minus GRPO's on GRPO's own path of the same seed where its training validity "
             "equals the method's last one (mean ± 95% t over the seeds where GRPO's path reaches it; sign-flip p "
             f"beside). End: the declared primary ({p.get('metric')} at k = {p.get('k')} on `{p.get('class')}`, "
             "method − GRPO, claimed or not) and the training prompts' distribution at the last step.", ""]  # fmt: skip
    rows = []
    for cell, c in v["cells"].items():
        m = c["matched"]
        ends = list((m or {}).get("ends", {}).values())
        pr = c["primary"]
        rows.append([cell, _ci(c["mu"]), num(c["held_end"]), _ci(m["ci"]) if m else "–",
                     f"{len(m['seeds'])}/{len(ends)}" if m else "–",
                     num(m["sign_flip_p"]) if m and m["sign_flip_p"] is not None else "–",
                     "–" if not pr else f"{num(pr['mean'], 1)} ({'claimed' if pr.get('claimed') else 'not claimed'})",
                     _ci(c["kl_pstar"], 2), _ci(c["effective_answers"], 2), _ci(c["minority_share"])])  # fmt: skip
    head = ["cell", "training μ (end)", f"held-out {v['class']} validity (end)", "matched gain vs GRPO",
            "seeds matched", "sign-flip p", "primary (end): Δ lost", "KL(p*‖π_v)", "eff. answers",
            "minority share"]  # fmt: skip
    return "\n".join(lines + table(head, rows)) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m collapse_bench.matched_verdicts", description=__doc__.split("\n")[0])
    ap.add_argument("--bench", required=True, help="a class study's output directory (collapse.json, runs/)")
    ap.add_argument("--task", default="routes")
    ap.add_argument("--cls", default="long", help="the held-out class")
    ap.add_argument("--baseline", default="grpo")
    args = ap.parse_args(argv)
    bench = Path(args.bench)
    if not (bench / "collapse.json").is_file():
        print(f"error: no report at {bench / 'collapse.json'}", file=sys.stderr)
        return 2
    v = verdicts(bench, args.task, args.cls, args.baseline)
    command = f"python -m collapse_bench.matched_verdicts --bench {args.bench} --task {args.task} --cls {args.cls}"
    (bench / "matched_verdicts.json").write_text(json.dumps(v, indent=1, default=str) + "\n")
    (bench / "matched_verdicts.md").write_text(markdown(v, command))
    print(f"{bench / 'matched_verdicts.md'}: {len(v['cells'])} cells")
    return 0


if __name__ == "__main__":
    sys.exit(main())
