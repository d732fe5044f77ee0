"""The real-math report's figures, from :func:`collapse_bench.real_math_report.aggregate`'s numbers: the end pass@k
curves, the held-out paths, the pass@1-vs-pass@k_max Pareto plot and the training reward."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from collapse_bench.plotting import error_bar, error_bars, pyplot, save

DPI = 110


def _colors(names: list[str]) -> dict[str, Any]:
    plt = pyplot()
    return {name: plt.cm.tab10(i % 10) for i, name in enumerate(names)}


def pass_at_k_figure(agg: dict[str, Any], path: Path) -> Path:
    """Held-out pass@k against k at the end (log2 k), mean ± 95% CI over seeds, the base dashed."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    colors = _colors(list(agg["arms"]))
    ks = agg["ks"]
    for name, entry in agg["arms"].items():
        cells = [entry["end"]["pass_at_k"][str(k)] for k in ks]
        ax.errorbar(ks, [c["mean"] for c in cells], yerr=error_bars(cells, 0, 1), fmt="o-", ms=3, capsize=2,
                    color=colors[name], label=f"{name} ({len(entry['seeds'])} seeds)")  # fmt: skip
    ax.plot(ks, [agg["base"]["pass_at_k"][str(k)] for k in ks], "k--", label="base")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("k (samples per problem)")
    ax.set_ylabel("held-out pass@k (fraction of problems)")
    ax.set_title("pass@k at the end of training (mean ± 95% CI over seeds)", fontsize=9)
    ax.grid(alpha=0.3)
    return save(fig, path, DPI, legend_right_of=ax)


def path_figure(agg: dict[str, Any], path: Path) -> Path:
    """Held-out pass@1 and pass@k_max (k_max the largest k along the path) against the training step, mean and 95%
    CI band over seeds."""
    plt = pyplot()
    kmax = max(agg["path_ks"])
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    colors = _colors(list(agg["arms"]))
    for name, entry in agg["arms"].items():
        steps = [p["step"] for p in entry["path"]]
        for ax, key in zip(axes, ("pass_at_1", "pass_at_kmax")):
            cells = [p[key] for p in entry["path"]]
            means = [c["mean"] for c in cells]
            ax.plot(steps, means, "o-", ms=3, color=colors[name], label=name)
            lo = [max(0.0, c["lo"]) if c["lo"] is not None else c["mean"] for c in cells]
            hi = [min(1.0, c["hi"]) if c["hi"] is not None else c["mean"] for c in cells]
            ax.fill_between(steps, lo, hi, color=colors[name], alpha=0.15)
    for ax, label in zip(axes, ("pass@1", f"pass@{kmax}")):
        ax.set_xlabel("training step")
        ax.set_ylabel(f"held-out {label} (fraction of problems)")
        ax.set_title(f"held-out {label} along training (step 0: the base)", fontsize=9)
        ax.grid(alpha=0.3)
    return save(fig, path, DPI, legend_right_of=axes[1])


def pareto_figure(agg: dict[str, Any], path: Path) -> Path:
    """pass@1 against pass@k_max: at the end (each seed, and the arm's mean ± 95% CI; the base a star), and along the
    paths (the mean over seeds at each step, k_max the path's largest k)."""
    plt = pyplot()
    ks, kmax_path = agg["ks"], max(agg["path_ks"])
    fig, (end_ax, path_ax) = plt.subplots(1, 2, figsize=(11, 4.5))
    colors = _colors(list(agg["arms"]))
    for name, entry in agg["arms"].items():
        seeds = agg["_pareto"][name]
        end_ax.scatter([v[0] for v in seeds.values()], [v[1] for v in seeds.values()], s=10, alpha=0.5,
                       color=colors[name])  # fmt: skip
        x, y = entry["end"]["pass_at_k"]["1"], entry["end"]["pass_at_k"][str(ks[-1])]
        end_ax.errorbar(x["mean"], y["mean"], xerr=error_bar(x, 0, 1), yerr=error_bar(y, 0, 1), fmt="D", capsize=3,
                        color=colors[name], label=name)  # fmt: skip
        xs, ys = [p["pass_at_1"]["mean"] for p in entry["path"]], [p["pass_at_kmax"]["mean"] for p in entry["path"]]
        path_ax.plot(xs, ys, "o-", ms=3, color=colors[name], label=name)
    b = agg["base"]["pass_at_k"]
    end_ax.plot([b["1"]], [b[str(ks[-1])]], "k*", ms=12, label="base")
    end_ax.set_ylabel(f"held-out pass@{ks[-1]}")
    path_ax.set_ylabel(f"held-out pass@{kmax_path}")
    end_ax.set_title("at the end (points: seeds; diamonds: mean ± 95% CI)", fontsize=9)
    path_ax.set_title("along the paths (mean over seeds per step; first point: the base)", fontsize=9)
    for ax in (end_ax, path_ax):
        ax.set_xlabel("held-out pass@1")
        ax.grid(alpha=0.3)
    return save(fig, path, DPI, legend_right_of=path_ax)


def reward_figure(agg: dict[str, Any], path: Path) -> Path:
    """The mean training reward of each step (the filtered training pool's pass@1 under sampling), one line per
    seed."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    colors = _colors(list(agg["arms"]))
    for name, seeds in agg["_train_reward"].items():
        for i, rewards in enumerate(seeds.values()):
            ax.plot([r[0] for r in rewards], [r[1] for r in rewards], lw=0.8, alpha=0.7, color=colors[name],
                    label=name if i == 0 else None)  # fmt: skip
    ax.set_xlabel("training step")
    ax.set_ylabel("mean reward of the step's rollouts")
    ax.set_title("training reward (one line per seed)", fontsize=9)
    ax.grid(alpha=0.3)
    return save(fig, path, DPI, legend_right_of=ax)


def figures(agg: dict[str, Any], out: Path) -> list[Path]:
    """Every figure of the report, into ``out`` (none without a finished run)."""
    if not agg["arms"]:
        return []
    return [pass_at_k_figure(agg, out / "pass_at_k.png"), path_figure(agg, out / "path.png"),
            pareto_figure(agg, out / "pareto.png"), reward_figure(agg, out / "train_reward.png")]  # fmt: skip
