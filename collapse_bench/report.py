"""The collapse benchmark's report: ``collapse.md`` (tables of mean ± 95% t-interval over seeds, paired differences
against the baseline, the β sweep and its verdict) and its plots (Pareto pass@1 vs pass@K, validity vs diversity
frontier, β sweep beside the closed-form μ(β) and the exact toy lab's policy families)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from collapse_bench.aggregate import multi_answer
from collapse_bench.class_report import class_lines, primary_lines, write_class_plots
from collapse_bench.comparison_tables import (
    difficulty_table,
    levels_table,
    shifted_levels_table,
    shifted_table,
    versus_base_table,
)
from collapse_bench.markdown import marked as _marked
from collapse_bench.markdown import num as _num
from collapse_bench.markdown import pm as _pm
from collapse_bench.markdown import table as _table
from collapse_bench.plotting import beta_sweep_figure, error_bar, pyplot, save
from collapse_bench.stats import paired_difference
from rlvr_div.theory.calibration import mean_validity_at


def _crossover(ci: dict[str, Any], seeds: int) -> str:
    """'median k (each seed's k; seeds)' where the base overtakes; 'none' where it never does; 'base ahead' where
    the model does not lead at k = 1 (no crossover to speak of)."""
    never, ahead = ci.get("never", 0), ci.get("base_ahead", 0)
    parts = []
    if ci.get("per_seed"):  # the median and every seed's k: a mean of crossovers is no seed's crossover
        ks = ", ".join(f"{k:g}" for k in ci["per_seed"])
        parts.append(f"median {ci['median']:g} (k = {ks}; {seeds - never - ahead}/{seeds})")
    elif ci.get("mean") is not None:
        parts.append(f"{ci['mean']:.0f} ({seeds - never - ahead}/{seeds})")
    if never:
        parts.append(f"none ({never}/{seeds})")
    if ahead:
        parts.append(f"base ahead ({ahead}/{seeds})")
    return ", ".join(parts) or "—"


CLIPPED = (
    "Mean ± 95% t-interval over seeds; an interval that reaches past what the number can take (validity and "
    "pass@k in [0, 1], problems lost or gained at least 0) is printed clipped, as mean [lo, hi]."
)


def metric_table(entry: dict[str, Any], split: str, kmax: int) -> list[str]:
    multi = multi_answer(entry, split)
    header = [
        "method",
        "value",
        "pass@1 (μ)",
        f"pass@{kmax}",
        f"lost@{kmax}",
        f"gained@{kmax}",
        "crossover k (base ahead by ≥ ½ problem)",
    ]
    if multi:
        header += [f"cov@{kmax}", "eff. answers", "KL(p*‖π_v)", "KL(u‖π_v)", f"distinct@{kmax}", "n90", "cov90"]
    base = entry["base"].get(split, {})
    rows = [["base", "—", _num(base.get("mu")), _num(base.get(f"pass_at_{kmax}")), "0", "0", "—"]]
    if multi:
        rows[0] += [
            _num(base.get(f"cov_at_{kmax}")),
            _num(base.get("effective_answers"), 2),
            "0",
            _num(base.get("kl_uniform"), 2),
            _num(base.get(f"distinct_at_{kmax}"), 2),
            _num(base.get("n90"), 1),
            _num(base.get("cov90")),
        ]
    for m in entry["methods"].values():
        if "splits" not in m:
            rows.append([m["label"], m.get("status", "—")] + ["—"] * (len(header) - 2))
            continue
        s = m["splits"][split]
        value = "—" if m["value"] is None else f"{m['tune_key']}={m['value']}"
        # validity and pass@k lie in [0, 1], problems lost and gained are counts (≥ 0): intervals print clipped
        row = [m["label"], value, _pm(s.get("mu"), low=0, high=1), _pm(s.get(f"pass_at_{kmax}"), low=0, high=1),
               _pm(s.get(f"lost_at_{kmax}"), 2, low=0), _pm(s.get(f"gained_at_{kmax}"), 2, low=0),
               _crossover(s.get("crossover_k", {}), len(m["seeds"]))]  # fmt: skip
        if multi:
            row += [_pm(s.get(f"cov_at_{kmax}")), _pm(s.get("effective_answers"), 2), _pm(s.get("kl_pstar"), 2),
                    _pm(s.get("kl_uniform"), 2), _pm(s.get(f"distinct_at_{kmax}"), 2), _pm(s.get("n90"), 1),
                    _pm(s.get("cov90"))]  # fmt: skip
        rows.append(row)
    return _table(header, rows)


def training_table(entry: dict[str, Any]) -> list[str]:
    rows = []
    for m in entry["methods"].values():
        if "train" not in m:
            continue
        t = m["train"]
        rows.append([m["label"], str(len(m["seeds"])), _pm(t.get("steps"), 0), _pm(t.get("reward_first")),
                     _pm(t.get("reward_last")), _pm(t.get("step_reached_0.9"), 0),
                     f"{t['never_reached_0.9']}/{len(m['seeds'])}"])  # fmt: skip
    return _table(["method", "seeds", "steps", "validity, first 10 steps", "validity, last 10 steps",
                   "step the 10-step mean reached 0.9", "seeds that never did"], rows)  # fmt: skip


def paired_table(entry: dict[str, Any], split: str, kmax: int) -> list[str]:
    multi = multi_answer(entry, split)
    keys = [("mu", "Δ pass@1"), ("pass_at_kmax", f"Δ pass@{kmax}"), ("lost_at_kmax", f"Δ lost@{kmax}")]
    if multi:
        keys += [("cov_at_kmax", f"Δ cov@{kmax}"), ("effective_answers", "Δ eff. answers"), ("kl_pstar", "Δ KL")]
    rows = []
    for m in entry["methods"].values():
        paired = (m.get("paired_vs_baseline") or {}).get(split)
        if paired:
            rows.append(
                [m["label"], *(_marked(paired[key], 2 if key == "effective_answers" else 3) for key, _ in keys)]
            )
    return _table(["method vs baseline, paired by seed"] + [h for _, h in keys], rows)


def matched_table(entry: dict[str, Any], kmax: int) -> list[str]:
    """Each method against the baseline stopped at the method's own validity (its training path, measured exactly
    every few steps), paired by seed; empty when the task records no paths."""
    rows = []
    for m in entry["methods"].values():
        mv = m.get("matched_validity")
        if not mv:
            continue
        n = len(mv["seeds"]) + len(mv["unmatched"])
        cells = [
            _marked(mv[key], digits) for key, digits in (("effective_answers", 2), ("cov_at_kmax", 3), ("kl_pstar", 2))
        ]
        rows.append([m["label"], f"{len(mv['seeds'])}/{n}", *cells])
    if not rows:
        return []
    return _table(["method vs the baseline at the method's validity, paired by seed", "seeds compared",
                   "Δ eff. answers", f"Δ cov@{kmax}", "Δ KL(p*‖π_v)"], rows)  # fmt: skip


def sweep_verdict(sweep: dict[str, Any], split: str) -> list[str]:
    """One sentence per divergence: does the exact number of effective valid answers shrink from the largest β to
    the smallest positive β (paired by seed)?"""
    lines = []
    for method, rows in sweep["methods"].items():
        positive = [r for r in rows if r["beta"] > 0]
        if len(positive) < 2:
            continue
        hi, lo = max(positive, key=lambda r: r["beta"]), min(positive, key=lambda r: r["beta"])
        a = {s: f["effective_answers"] for s, f in lo["per_seed"][split].items()}
        b = {s: f["effective_answers"] for s, f in hi["per_seed"][split].items()}
        d = paired_difference(a, b)
        if d["mean"] is None:
            continue
        trend = "shrinks" if d["separated"] and d["mean"] < 0 else "grows" if d["separated"] else "shows no change"
        lines.append(
            f"- `{method}`: from β = {hi['beta']:g} to β = {lo['beta']:g} the effective number of valid answers "
            f"{trend} (paired difference {_pm(d, 2)} over {len(d['seeds'])} seeds; the tilted optimum keeps p*, "
            f"KL(p*‖π_v) = 0, at every β)."
        )
    return lines


MARKERS = "osD^vP<X>p*h"


def write_plots(agg: dict[str, Any], out: Path, toy: dict[str, Any] | None, base_mu: list[float] | None) -> list[Path]:
    plt = pyplot()

    paths = []
    kmax = agg["ks"][-1]
    split = agg["report_on"]
    for name, entry in agg["tasks"].items():
        multi = multi_answer(entry, split)
        y_key = f"cov_at_{kmax}" if multi else f"pass_at_{kmax}"
        y_label = f"cov@{kmax} (expected p*-mass seen in {kmax} draws)" if multi else f"pass@{kmax}"
        panels = [("train", "training prompts"), (split, f"{split} prompts")] if multi else [(split, f"{split}")]
        fig, axes = plt.subplots(1, len(panels), figsize=(6.2 * len(panels), 4.8), squeeze=False)
        for ax, (sp, title) in zip(axes[0], panels):
            base = entry["base"].get(sp, {})
            ax.plot(base.get("mu"), base.get(y_key), "k*", ms=14, label="base")
            for i, m in enumerate(entry["methods"].values()):
                if "splits" not in m:
                    continue
                s = m["splits"][sp]
                x, y = s.get("mu", {}), s.get(y_key, {})
                if x.get("mean") is None:
                    continue
                ax.errorbar(
                    x["mean"],
                    y["mean"],
                    xerr=error_bar(x, 0, 1),
                    yerr=error_bar(y, 0, 1),
                    fmt=MARKERS[i % len(MARKERS)],
                    ms=6,
                    capsize=3,
                    color=plt.cm.tab20(i % 20),
                    label=f"{m['label']} ({len(m['seeds'])} seeds)",
                )
            ax.set_xlabel("pass@1 = validity μ (exact)")
            ax.set_ylabel(y_label)
            ax.set_title(f"{name}: {title} (mean ± 95% CI over seeds)", fontsize=9)
            ax.grid(alpha=0.3)
        paths.append(save(fig, out / f"pareto_{name}.png", 110, axes[0][-1]))
        if multi:
            fig, ax = plt.subplots(figsize=(7.5, 4.8))
            base = entry["base"]["train"]
            ax.plot(base["mu"], base["effective_answers"], "k*", ms=14, label="base")
            for i, m in enumerate(entry["methods"].values()):
                if "splits" not in m or m["splits"]["train"].get("mu", {}).get("mean") is None:
                    continue
                s = m["splits"]["train"]
                ax.errorbar(s["mu"]["mean"], s["effective_answers"]["mean"], xerr=error_bar(s["mu"], 0, 1),
                            yerr=error_bar(s["effective_answers"], 1, math.inf),
                            fmt=MARKERS[i % len(MARKERS)], capsize=3, color=plt.cm.tab20(i % 20),
                            label=f"{m['label']} ({len(m['seeds'])} seeds)")  # fmt: skip
            for j, path in enumerate(p for p in (entry.get("baseline_paths") or {}).values() if p):
                ax.plot([p["mu"] for p in path], [p["effective_answers"] for p in path], "-", color="0.6", lw=0.8,
                        label="baseline's training paths (one per seed)" if j == 0 else None)  # fmt: skip
            ax.axhline(base["effective_answers"], color="k", ls=":", lw=1, label="p* (the tilted optimum's valid part)")
            ax.set_xlabel("validity μ on the training prompts (exact)")
            ax.set_ylabel("effective valid answers exp H(π(·|valid)) (exact)")
            ax.set_title(f"{name}: validity vs diversity (mean ± 95% CI over seeds)", fontsize=9)
            ax.grid(alpha=0.3)
            paths.append(save(fig, out / f"frontier_{name}.png", 110, ax))
        paths += write_class_plots(name, entry, split, agg["ks"], out)
    if "beta_sweep" in agg:
        paths.append(_sweep_plot(agg, out, toy, base_mu))
    return paths


def _sweep_plot(agg: dict[str, Any], out: Path, toy: dict[str, Any] | None, base_mu: list[float] | None) -> Path:
    """The grid's β sweep on its training prompts: validity and effective answers against β, and the frontier."""
    sweep = agg["beta_sweep"]
    series = []
    for method, rows in sweep["methods"].items():
        rows = [r for r in rows if r["splits"]["train"].get("mu", {}).get("mean") is not None]
        if rows:
            series.append((method, method, [r["beta"] for r in rows], [r["splits"]["train"] for r in rows]))
    points = [(method, p["splits"]["train"]) for method, p in sweep.get("points", {}).items()
              if p["splits"]["train"].get("mu", {}).get("mean") is not None]  # fmt: skip
    panels = [("mu", "validity μ, training prompts (exact)", 0, 1),
              ("effective_answers", "effective valid answers exp H(π_v) (exact)", 1, math.inf)]  # fmt: skip
    base_eff = agg["tasks"][sweep["task"]]["base"]["train"]["effective_answers"]
    path = out / "beta_sweep.png"
    return beta_sweep_figure(path, sweep["betas"], panels, series, points, base_eff, base_mu, toy, dpi=110)


def inert_lines(entry: dict[str, Any]) -> list[str]:
    """One line per method whose tuning grid holds values that trained bit-identical models, and one per group of
    cells that did (none: no lines)."""
    lines = []
    for name, data in entry["methods"].items():
        for group in data.get("inert_values") or []:
            values = " = ".join(f"{v:g}" if isinstance(v, float) else str(v) for v in group)
            lines.append(
                f"- **Inert grid values**: `{name}` trained bit-identical models (the same weights at the "
                f"tuning seed) at {data['tune_key']} {values}: its grid has fewer settings than values."
            )
    for group in entry.get("identical_cells") or []:
        names = " = ".join(f"`{name}`" for name in group)
        lines.append(f"- **Identical cells**: {names} trained bit-identical models at every seed: one setting, "
                     "not several, for this task's rewards.")  # fmt: skip
    return ["", *lines] if lines else []


def _section(table: list[str], *paragraphs: str) -> list[str]:
    """A report section: each paragraph, then the table, blank lines between; nothing without a table."""
    return [line for text in paragraphs for line in ("", text)] + ["", *table] if table else []


def write_report(agg: dict[str, Any], out: Path, header: list[str], toy: dict[str, Any] | None,
                 base_mu: list[float] | None, failures: list[str]) -> Path:  # fmt: skip
    kmax = agg["ks"][-1]
    split = agg["report_on"]
    write_plots(agg, out, toy, base_mu)
    lines = header + [""]
    for name, entry in agg["tasks"].items():
        lines += [f"## Task `{name}`", "", "### Training", ""] + training_table(entry)
        lines += inert_lines(entry)
        splits = ["train", split] if multi_answer(entry, split) else [split]
        for sp in splits:
            what = "the training prompts (the objective's own distribution)" if sp == "train" else f"the {sp} split"
            lines += ["", f"### Exact measurements on {what}", "", CLIPPED, ""] + metric_table(entry, sp, kmax)
            lines += ["", f"Paired differences against the baseline on {what} (** = the 95% interval excludes 0; † = "
                      f"the paired t-test survives Holm's correction at 0.05 over the task's family of "
                      f"{entry.get('holm_family', 0)} paired comparisons: every method × split (train, validation, "
                      "test) × paired metric of collapse.json, a superset of these tables, so the correction is "
                      "conservative):", ""]  # fmt: skip
            lines += paired_table(entry, sp, kmax)
            if sp == "train":
                lines += _section(
                    matched_table(entry, kmax),
                    "At matched validity: each method's end point against the baseline's own training path "
                    "(measured exactly every few steps) where it had the same validity on the training prompts, "
                    "as if the baseline had been stopped there; paired by seed (** = the 95% interval excludes "
                    "0; † = the paired t-test survives Holm's correction at 0.05 over the task's family of "
                    f"{entry.get('holm_family_matched', 0)} matched-validity comparisons, this table's and the next "
                    "one's effective answers and KL; a seed whose baseline never had the method's validity is not "
                    "compared):",
                )
                lines += _section(
                    levels_table(entry),
                    "At fixed validities along both training paths (no end point chosen): each method's "
                    "path and the baseline's path read at the same validity μ of the training prompts, paired "
                    "by seed; a seed counts where both paths reach μ (** = the 95% interval excludes 0; † = "
                    "it survives Holm's correction over the matched-validity family):",
                )
        shifted = shifted_table(entry, split, agg["ks"])
        if shifted:
            lines += _section(
                shifted,
                f"### Under a shifted verifier ({split} split)",
                "A held-out verifier that accepts only S(x), the valid answers outside the base's 3 likeliest for "
                "that prompt, a check training never asked for: π(S) = the policy's mass on S, pass@k = 1 − (1 − "
                "π(S|x))^k exactly per prompt, lost@k against the base under the same verifier; mean ± 95% "
                "t-interval over seeds:",
            )
            lines += _section(
                shifted_levels_table(entry, kmax),
                "The same verifier at fixed validities along both training paths (training prompts), each "
                "method minus the baseline, paired by seed (** = the 95% interval excludes 0; † = Δ pass@k "
                f"survives Holm's correction over its family of {entry.get('holm_family_shifted', 0)}):",
            )
        lines += _section(
            versus_base_table(entry, split, agg["ks"]),
            f"### Against the untrained base at every k ({split} split)",
            "Δ pass@k = mean over seeds and prompts of pass@k(method) − pass@k(base), exact per prompt; "
            "the 95% interval is the wider of a bootstrap that resamples seeds and prompts (the prompt "
            "sampling of the split) and the t-interval over the seeds' means (** = it excludes 0 and |Δ| is at "
            "least half a problem; '≈ 0' = 0 at display precision; a negative Δ is the base ahead):",
        )
        for sp in dict.fromkeys(("train", split)):
            lines += _section(
                difficulty_table(entry, sp),
                f"### Validity by the base's difficulty ({sp} split)",
                "Mean exact validity over the prompts whose base validity A(x) falls in each bin (the "
                "last bin holds the prompts the base nearly always solves: DPH-RL's near-perfect prompts "
                "on the training split), mean ± 95% t-interval over seeds:",
            )
        classes = class_lines(entry, split, kmax)
        if classes:
            lines += ["", *primary_lines(entry), "", *classes]
            lines += ["", f"![problems lost by class](lost_{name}.png)", "", f"![minority share](minority_{name}.png)"]
        lines += ["", f"![Pareto](pareto_{name}.png)"]
        if multi_answer(entry, split):
            lines += ["", f"![frontier](frontier_{name}.png)"]
        lines.append("")
    if "beta_sweep" in agg:
        sweep = agg["beta_sweep"]
        lines += ["## The seed paper's question: does diversity shrink as β is lowered?", ""]
        header_row = ["method", "β", "seeds", "μ (train)", "closed-form μ(β) (reverse KL)", "eff. answers (train)",
                      "KL(p*‖π_v)", f"cov@{kmax} (train)", f"μ ({split})", f"eff. answers ({split})"]  # fmt: skip

        def row(label: str, beta: str, r: dict[str, Any], closed_form: str) -> list[str]:
            t, s = r["splits"]["train"], r["splits"][split]
            return [label, beta, str(len(r["seeds"])), _pm(t.get("mu")), closed_form,
                    _pm(t.get("effective_answers"), 2), _pm(t.get("kl_pstar"), 2), _pm(t.get(f"cov_at_{kmax}")),
                    _pm(s.get("mu")), _pm(s.get("effective_answers"), 2)]  # fmt: skip

        rows = []
        for method, rs in sweep["methods"].items():
            reverse = method == "grpo_reverse_kl" or "reverse" in method
            for r in rs:
                cf = _num(mean_validity_at(r["beta"], base_mu)) if base_mu and reverse else "—"
                rows.append(row(method, f"{r['beta']:g}", r, cf))
        for method, point in sweep.get("points", {}).items():
            rows.append(row(f"{method} (no β; value {point['value']})", "—", point, "—"))
        lines += _table(header_row, rows) + ["", "![beta sweep](beta_sweep.png)", "", "Verdict (training prompts):"]
        lines += sweep_verdict(sweep, "train") or ["- not enough β values with finished runs"]
        lines.append("")
    if failures:
        lines += ["## Failed runs", ""] + [f"- {f}" for f in failures] + [""]
    path = out / "collapse.md"
    path.write_text("\n".join(lines) + "\n")
    return path
