"""Helpers of the collapse reports' figures."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any


def pyplot() -> Any:
    """``matplotlib.pyplot`` on the Agg backend (files, no display)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save(fig: Any, path: Path, dpi: int, legend_right_of: Any = None, legend_size: float = 6.5) -> Path:
    """The figure laid out tightly, written to ``path`` at ``dpi`` and closed; with ``legend_right_of``, first that
    panel's legend (at ``legend_size``) right of it."""
    if legend_right_of is not None:
        legend_right_of.legend(fontsize=legend_size, loc="center left", bbox_to_anchor=(1.01, 0.5))
    fig.tight_layout()
    fig.savefig(path, dpi=dpi, bbox_inches="tight")
    pyplot().close(fig)
    return path


def error_bar(ci: dict[str, Any], lo: float, hi: float) -> list[list[float]]:
    """An asymmetric error bar for ``errorbar``: the t-interval clipped to the quantity's range [lo, hi] (with 2 seeds
    the interval is ±12.7 sd and would leave it)."""
    m, h = ci["mean"], ci.get("half") or 0.0
    return [[m - max(lo, m - h)], [min(hi, m + h) - m]]


def error_bars(cis: list[dict[str, Any]], lo: float, hi: float) -> list[list[float]]:
    """:func:`error_bar` for a series."""
    bars = [error_bar(ci, lo, hi) for ci in cis]
    return [[b[0][0] for b in bars], [b[1][0] for b in bars]]


def beta_sweep_figure(
    path: Path,
    betas: list[float],
    panels: list[tuple[str, str, float, float]],
    series: list[tuple[str, str, list[float], list[dict[str, Any]]]],
    points: list[tuple[str, dict[str, Any]]],
    base_eff: float,
    base_mu: list[float] | None,
    toy: dict[str, Any] | None,
    dpi: int = 100,
) -> Path:
    """The β-sweep figure of the grid's β sweep and of the β study: one panel per ``panels`` entry (key, y label, lo,
    hi) against β (log scale over the sweep's ``betas``, β = 0 drawn at a third of the smallest positive β), then the
    frontier μ against effective answers / those of p*. ``series``: (legend label, short name, βs, cells), each cell
    a dict key -> mean ± 95% CI over seeds on the training prompts; ``points``: (name, cell) of the arms without β,
    drawn as horizontal lines and as diamonds on the frontier. Reference lines: the optimum p_β's closed-form
    validity μ(β) = mean over prompts of σ(logit A + 1/β) (from ``base_mu``, the base's per-prompt validity), p*'s
    effective answers and KL(p*‖π_v) = 0 (p_β's valid part is p* at every β); the toy lab's reverse-KL optima per
    family on the frontier (``toy``)."""
    plt = pyplot()

    from rlvr_div.theory.calibration import mean_validity_at

    positive = sorted(b for b in betas if b > 0)
    x_zero = positive[0] / 3
    fig, axes = plt.subplots(1, len(panels) + 1, figsize=(5.5 * (len(panels) + 1), 4.8))
    frontier = axes[-1]

    def ratio(ci: dict[str, Any]) -> dict[str, float]:
        return {"mean": ci["mean"] / base_eff, "half": (ci.get("half") or 0.0) / base_eff}

    for i, (label, short, at, cells) in enumerate(series):
        color = plt.cm.tab10(i)
        xs = [b if b > 0 else x_zero for b in at]
        for ax, (key, _, lo, hi) in zip(axes, panels):
            ax.errorbar(xs, [c[key]["mean"] for c in cells], yerr=error_bars([c[key] for c in cells], lo, hi),
                        fmt="o-", capsize=3, color=color, label=label)  # fmt: skip
        ratios = [ratio(c["effective_answers"]) for c in cells]
        frontier.errorbar([c["mu"]["mean"] for c in cells], [r["mean"] for r in ratios],
                          xerr=error_bars([c["mu"] for c in cells], 0, 1),
                          yerr=error_bars(ratios, 1 / base_eff, math.inf),
                          fmt="o-", capsize=3, color=color, label=f"tiny Llama, {short}")  # fmt: skip
    for j, (name, cell) in enumerate(points):
        color = plt.cm.Dark2(j)
        for ax, (key, _, _, _) in zip(axes, panels):
            ax.axhline(cell[key]["mean"], color=color, ls=":", lw=1.2, label=f"{name} (no β)")
        r = ratio(cell["effective_answers"])
        frontier.errorbar(cell["mu"]["mean"], r["mean"], xerr=error_bar(cell["mu"], 0, 1),
                          yerr=error_bar(r, 1 / base_eff, math.inf), fmt="D", ms=7, capsize=3, color=color,
                          label=f"tiny Llama, {name} (no β)")  # fmt: skip
    reference = {"effective_answers": (base_eff, "optimum p_β (valid part p*, every β)"),
                 "kl_pstar": (0.0, "optimum p_β (KL = 0, every β)")}  # fmt: skip
    grid = [x_zero * (positive[-1] * 3 / x_zero) ** (j / 60) for j in range(61)]
    for ax, (key, ylabel, _, _) in zip(axes, panels):
        if key == "mu" and base_mu:
            ax.plot(grid, [mean_validity_at(b, base_mu) for b in grid], "k--", lw=1,
                    label="optimum p_β: μ(β) = mean σ(logit A + 1/β)")  # fmt: skip
        elif key in reference:
            ax.axhline(reference[key][0], color="k", ls="--", lw=1, label=reference[key][1])
        ax.set_xscale("log")
        ax.set_xlabel(f"β (leftmost: β = 0, drawn at {x_zero:.3g})")
        ax.set_ylabel(ylabel)
        ax.set_title(f"{ylabel.split(' (')[0]} against β (mean ± 95% CI over seeds)", fontsize=9)
    if toy:
        h_star = toy["references"]["filtered p*"]["entropy_valid"]
        for fam, style in {"tabular": "s:", "bigram": "^:", "factorised": "v:"}.items():
            rows = [r for r in toy["rows"] if r["family"] == fam and r["objective"] == "reg:reverse_kl"]
            frontier.plot([r["mu"] for r in rows], [math.exp(r["entropy_valid"] - h_star) for r in rows], style,
                          color="gray", ms=4, lw=1, label=f"toy lab, {fam} family (reverse-KL optimum)")  # fmt: skip
    frontier.set_xlabel("validity μ")
    frontier.set_ylabel("effective answers / those of p*")
    frontier.set_title("validity vs diversity, with the exact toy lab", fontsize=9)
    for ax in axes:
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6)
    return save(fig, path, dpi)
