"""The evaluation's plots (PNG, matplotlib's Agg backend), drawn from ``results.json`` metrics and per-problem
accuracies a_i = c_i / n_i (c_i correct among the n_i samples of problem i, drawn from the model at the evaluation's
temperature and top_p).

- :func:`plot_pass_at_k`: pass@k against k (log₂ axis), one line per model, ±1 bootstrap SE, the base in black;
- :func:`plot_accuracy_panels`: the distribution of a_i, one small panel per model, the base's in grey behind each;
- :func:`plot_accuracy_vs_base`: a_i of each trained model against the base's a_i on the same problem, one panel
  per model, lost problems (base a_i > 0, model a_i = 0) in red, gained ones in green.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

BASE_COLOR = "black"
POINT_COLOR = "0.3"
LOST_COLOR = "tab:red"
GAINED_COLOR = "tab:green"
# Bins of a_i: exactly 0 (never solved), ten equal bins of (0, 1), exactly 1 (always solved).
BIN_LABELS = ["0", *[f"{i / 10:.1f}–{(i + 1) / 10:.1f}" for i in range(10)], "1"]
# Where the bars stand: the two end bins set apart from the ten between them.
BIN_X = np.array([0.0, *[1.5 + i for i in range(10)], 12.0])


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _colors(names: list[str], base: str) -> dict[str, Any]:
    """The base in black; the others in the tab10 cycle, in the order given (the same in every plot)."""
    cycle = [c for c in _pyplot().get_cmap("tab10").colors]
    others = [n for n in names if n != base]
    return {base: BASE_COLOR, **{n: cycle[i % len(cycle)] for i, n in enumerate(others)}}


def _label(name: str, base: str) -> str:
    return f"{name} (base)" if name == base and name != "base" else name


def _grid(panels: int, size: float = 2.6) -> tuple[Any, list[Any]]:
    plt = _pyplot()
    cols = min(3, panels)
    rows = math.ceil(panels / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(size * cols + 0.4, size * rows + 0.5), squeeze=False)
    flat = list(axes.ravel())
    for ax in flat[panels:]:
        ax.set_visible(False)
    return fig, flat[:panels]


def plot_pass_at_k(results: Mapping[str, Mapping[str, Any]], path: Path, base: str | None = None) -> None:
    """pass@k against k on a log₂ axis, one line per model (the base black and thicker), ±1 SE error bars nudged
    sideways per model so that they do not cover each other; the legend sits outside the axes."""
    plt = _pyplot()
    names = list(results)
    base = base if base in results else names[0]
    colors = _colors(names, base)
    fig, ax = plt.subplots(figsize=(7.5, 4.2))
    all_ks: set[int] = set()
    for j, name in enumerate(names):
        m = results[name]["metrics"]
        ks = sorted(int(k) for k in m["pass_at_k"])
        all_ks.update(ks)
        nudge = 2 ** (0.04 * (j - (len(names) - 1) / 2))  # multiplicative: equal on the log axis
        ys = [m["pass_at_k"][str(k)] for k in ks]
        es = [m["pass_at_k_se"][str(k)] for k in ks]
        is_base = name == base
        ax.errorbar(
            [k * nudge for k in ks],
            ys,
            yerr=es,
            marker="o",
            markersize=3,
            capsize=2,
            linewidth=2.2 if is_base else 1.4,
            color=colors[name],
            label=_label(name, base),
            zorder=3 if is_base else 2,
        )
    ax.set_xscale("log", base=2)
    ax.set_xticks(sorted(all_ks))
    ax.set_xticklabels([str(k) for k in sorted(all_ks)])
    ax.minorticks_off()
    ax.set_xlabel("k (samples)")
    ax.set_ylabel("pass@k")
    ax.set_ylim(0, 1.02)
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False, fontsize=9)
    first = results[names[0]]["config"]
    sampling = f", T={first['temperature']}, top_p={first['top_p']}" if "temperature" in first else ""
    ax.set_title(f"{first.get('task') or 'samples'} ({first.get('split') or 'file'}): pass@k{sampling}")
    fig.tight_layout()
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)


def accuracy_bins(accuracy: Mapping[int, float]) -> np.ndarray:
    """Problem counts in :data:`BIN_LABELS`'s 12 bins: a = 0, (0, 0.1], …, (0.9, 1), a = 1."""
    counts = np.zeros(len(BIN_LABELS), dtype=int)
    for a in accuracy.values():
        if a <= 0:
            counts[0] += 1
        elif a >= 1:
            counts[-1] += 1
        else:
            counts[1 + min(9, math.ceil(a * 10) - 1)] += 1
    return counts


def plot_accuracy_panels(accuracy: Mapping[str, Mapping[int, float]], path: Path, base: str) -> None:
    """One panel per model: how many problems have per-problem accuracy a = c/n in each bin (never solved, ten
    bins between, always solved), the model's bars over the base's in grey; same axes in every panel."""
    from matplotlib.ticker import MaxNLocator

    plt = _pyplot()
    names = list(accuracy)
    colors = _colors(names, base)
    fig, axes = _grid(len(names))
    x = BIN_X
    top = max(int(accuracy_bins(a).max()) for a in accuracy.values()) if names else 1
    ref = accuracy_bins(accuracy[base]) if base in accuracy else None
    for ax, name in zip(axes, names):
        counts = accuracy_bins(accuracy[name])
        if ref is not None and name != base:
            ax.bar(x, ref, width=0.9, color="0.82")
        ax.bar(x, counts, width=0.9 if name == base else 0.55, color=colors[name])
        ax.set_xticks([0, 6.5, 12])
        ax.set_xticklabels(["0", "0.5", "1"], fontsize=8)
        ax.set_xlabel("c/n (end bars: exactly 0, exactly 1)", fontsize=8)
        ax.set_ylim(0, top * 1.1 + 0.5)
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
        ax.tick_params(axis="y", labelsize=8)
        ax.grid(axis="y", alpha=0.3)
        total = len(accuracy[name])
        ax.set_title(f"{_label(name, base)}: solved {total - counts[0]}/{total}", fontsize=9)
    for ax in axes[:: min(3, len(names))]:
        ax.set_ylabel("problems", fontsize=9)
    fig.suptitle(f"Per-problem accuracy c/n{f' (grey: {base})' if len(names) > 1 else ''}", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)


def plot_accuracy_vs_base(accuracy: Mapping[str, Mapping[int, float]], path: Path, base: str) -> None:
    """One panel per trained model: its per-problem accuracy against the base's on the problems both evaluated;
    a marker's area grows with the number of problems at that point (said in the title only when two or more
    problems share a point); the diagonal is "no change". Saved with a tight bounding box, so no label is cut."""
    plt = _pyplot()
    others = [n for n in accuracy if n != base]
    fig, axes = _grid(len(others))
    b = accuracy[base]
    most = 1  # the most problems at one point of any panel
    for ax, name in zip(axes, others):
        m = accuracy[name]
        common = sorted(set(b) & set(m))
        points = Counter((b[i], m[i]) for i in common)
        lost = sum(1 for i in common if b[i] > 0 and m[i] == 0)
        gained = sum(1 for i in common if b[i] == 0 and m[i] > 0)
        up = sum(1 for i in common if m[i] > b[i])
        down = sum(1 for i in common if m[i] < b[i])
        xs = np.array([p[0] for p in points])
        ys = np.array([p[1] for p in points])
        sizes = np.array([12 + 10 * (c - 1) for c in points.values()])
        most = max(most, *points.values())
        kind = [
            LOST_COLOR if bx > 0 and my == 0 else GAINED_COLOR if bx == 0 and my > 0 else POINT_COLOR
            for bx, my in points
        ]
        ax.plot([0, 1], [0, 1], color="0.6", linewidth=0.8, zorder=1)
        ax.scatter(xs, ys, s=sizes, c=kind, alpha=0.65, edgecolors="none", zorder=2)
        ax.set_xlim(-0.04, 1.04)
        ax.set_ylim(-0.04, 1.04)
        ax.set_aspect("equal")
        ax.tick_params(labelsize=8)
        ax.grid(alpha=0.3)
        ax.set_xlabel(f"{base} c/n", fontsize=9)
        ax.set_ylabel(f"{name} c/n", fontsize=9)
        ax.set_title(f"{name}: up {up}, down {down}\nlost {lost} (red), gained {gained} (green)", fontsize=9)
    area = f"\n(marker area: problems at a point, 1 to {most})" if most > 1 else ""
    fig.suptitle(f"Per-problem accuracy against {base}{area}", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)
