"""The collapse report's section for a task with prompt classes (:mod:`collapse_bench.classes`): the primary
comparison as the config wrote it, each method's numbers per class, problems lost against the baseline per class,
and two plots (problems lost against the base at every k, per class; the minority strategy's share along training on
the held-out prompts)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from collapse_bench.markdown import diff_cell, table
from collapse_bench.markdown import pm as _pm
from collapse_bench.plotting import pyplot, save

MARKERS = "osD^v<>pPhX*"


def primary_lines(entry: dict[str, Any]) -> list[str]:
    """The primary comparison: its definition from the config, then one row per method."""
    primary = entry.get("primary")
    if not primary:
        return []
    spec = primary["spec"]
    what = f"{spec['metric']}" + (f" at k = {spec['k']}" if spec.get("k") is not None else "")
    lines = [
        "### The primary comparison (written in the config before the runs)",
        "",
        f"Each method minus the baseline, seed by seed, on {what} of class `{spec['class']}` of the {spec['split']} "
        f"split (mean ± 95% t-interval over seeds, printed clipped as [lo, hi] where it reaches past what the "
        f"difference can take; p: paired t-test; p (sign-flip): the exact sign-flip permutation test of the same "
        f"differences, valid for few seeds, whose smallest possible value is 2/2^seeds, 0.0625 with 5; Holm over "
        f"the family of {primary['family']} methods at α = {spec['alpha']}, on the t-test's p). A difference is "
        f"claimed only where the interval excludes 0, it survives Holm, and its size is at least "
        f"{spec['min_difference']:g}:",
        "",
    ]
    problems = _class_problems(entry, spec)
    bound = None if problems is None or spec["metric"] not in COUNTS else float(problems)
    rows = []
    for name, diff in primary["rows"].items():
        label = entry["methods"][name]["label"]
        p = "—" if diff.get("p") is None else f"{diff['p']:.2g}"
        flip = "—" if diff.get("sign_flip_p") is None else f"{diff['sign_flip_p']:.3g}"
        cell = diff_cell(diff, 2, low=None if bound is None else -bound, high=bound)
        rows.append([label, cell, p, flip, "yes" if diff.get("holm") else "no",
                     "**yes**" if diff.get("claimed") else "no"])  # fmt: skip
    return lines + table(["method − baseline", "Δ", "p", "p (sign-flip)", "Holm", "claimed"], rows)


COUNTS = ("lost_at", "gained_at")  # per-class metrics that count problems: they lie in [0, the class's problems]


def _class_problems(entry: dict[str, Any], spec: dict[str, Any]) -> int | None:
    """The number of problems of the primary comparison's class, where the report has it."""
    return ((entry.get("base_by_class") or {}).get(spec.get("split")) or {}).get(spec.get("class"), {}).get("problems")


def class_lines(entry: dict[str, Any], split: str, kmax: int) -> list[str]:
    """Per method and class on ``split``: validity, the minority share, pass@K, problems lost and gained against
    the base at K, and problems lost against the baseline's (paired by seed)."""
    base = entry.get("base_by_class", {}).get(split) or {}
    classes = list(base)
    if not classes:
        return []
    header = ["method"]
    for c in classes:
        header += [f"μ ({c})", f"minority share ({c})", f"pass@{kmax} ({c})", f"lost@{kmax} ({c})",
                   f"gained@{kmax} ({c})", f"Δ lost@{kmax} vs baseline ({c})"]  # fmt: skip
    row = ["base"]
    for c in classes:
        b = base[c]
        share = b.get("minority_share")
        row += [f"{b['mu']:.3f}", "—" if share is None else f"{share:.3f}", f"{b['pass_at'][str(kmax)]:.3f}", "0", "0",
                "—"]  # fmt: skip
    rows = [row]
    for m in entry["methods"].values():
        by_class = (m.get("by_class") or {}).get(split)
        if not by_class:
            continue
        row = [m["label"]]
        versus = (m.get("lost_vs_baseline") or {}).get(split) or {}
        for c in classes:
            e = by_class.get(c) or {}
            diff = (versus.get(c) or {}).get(str(kmax))
            n = base[c]["problems"]
            row += [_pm(e.get("mu"), low=0, high=1), _pm(e.get("minority_share"), low=0, high=1),
                    _pm(e.get("pass_at", {}).get(str(kmax)), low=0, high=1),
                    _pm(e.get("lost_at", {}).get(str(kmax)), 2, low=0, high=n),
                    _pm(e.get("gained_at", {}).get(str(kmax)), 2, low=0, high=n),
                    "—" if diff is None else diff_cell(diff, 2, claim=True, low=-n, high=n)]  # fmt: skip
        rows.append(row)
    problems = ", ".join(f"{base[c]['problems']} {c}" for c in classes)
    return [
        f"### By prompt class ({split} split: {problems} prompts)",
        "",
        "Exact per class, mean ± 95% t-interval over seeds; an interval that reaches past what the number can "
        "take (0 to 1, or 0 to the class's problems) is printed clipped, as mean [lo, hi]. The minority share is "
        "π(minority strategy | valid); "
        f"lost@{kmax} and gained@{kmax} are the expected numbers of problems the base solves in {kmax} draws and the "
        f"model does not (and the reverse). Δ lost is the model's problems lost minus the baseline's, paired by seed "
        f"(** = the interval excludes 0 and |Δ| ≥ {entry.get('min_difference', 0.5):g} problems; '≈ 0' = below "
        "display precision):",
        "",
        *table(header, rows),
    ]


def write_class_plots(name: str, entry: dict[str, Any], split: str, ks: list[int], out: Path) -> list[Path]:
    """``lost_<task>.png`` (expected problems lost against the base at every k, per class, mean ± 95% CI over seeds)
    and ``minority_<task>.png`` (the minority strategy's share on the held-out prompts of each class along
    training)."""
    plt = pyplot()

    classes = list(entry.get("base_by_class", {}).get(split) or {})
    if not classes:
        return []
    paths = []
    fig, axes = plt.subplots(1, len(classes), figsize=(6.2 * len(classes), 4.6), squeeze=False)
    for ax, c in zip(axes[0], classes):
        for i, m in enumerate(entry["methods"].values()):
            e = ((m.get("by_class") or {}).get(split) or {}).get(c)
            if not e:
                continue
            mean = [e["lost_at"][str(k)]["mean"] for k in ks]
            half = [e["lost_at"][str(k)].get("half") or 0.0 for k in ks]
            ax.errorbar(ks, mean, yerr=half, fmt="-" + MARKERS[i % len(MARKERS)], ms=4, capsize=2, lw=1,
                        color=plt.cm.tab20(i % 20), label=m["label"])  # fmt: skip
        ax.set_xscale("log", base=2)
        ax.set_xlabel("k (samples per problem)")
        ax.set_ylabel(f"problems lost against the base (of {entry['base_by_class'][split][c]['problems']})")
        ax.set_title(f"{name}: class '{c}', {split} split (mean ± 95% CI over seeds)", fontsize=9)
        ax.grid(alpha=0.3)
    paths.append(save(fig, out / f"lost_{name}.png", 110, axes[0][-1], 6))
    keys = [f"minority_share_{c}" for c in classes]
    if any((m.get("held_out_path") or {}).get(k) for m in entry["methods"].values() for k in keys):
        fig, axes = plt.subplots(1, len(classes), figsize=(6.2 * len(classes), 4.6), squeeze=False)
        for ax, c, key in zip(axes[0], classes, keys):
            for i, m in enumerate(entry["methods"].values()):
                path_points = (m.get("held_out_path") or {}).get(key) or []
                if not path_points:
                    continue
                steps, means = [p["step"] for p in path_points], [p["mean"] for p in path_points]
                style = "-" + MARKERS[i % len(MARKERS)]
                ax.plot(steps, means, style, ms=3, lw=1, color=plt.cm.tab20(i % 20), label=m["label"])
            ax.set_xlabel("training step")
            ax.set_ylabel("π(minority strategy | valid) (exact)")
            ax.set_title(f"{name}: class '{c}', {split} split (mean over seeds)", fontsize=9)
            ax.grid(alpha=0.3)
        paths.append(save(fig, out / f"minority_{name}.png", 110, axes[0][-1], 6))
    return paths
