"""Markdown cells and tables of the collapse reports."""

from __future__ import annotations

import math
from typing import Any


def num(x: float | None, digits: int = 3) -> str:
    """A number at ``digits``; '—' for none, '∞' for an infinite one."""
    return "—" if x is None else "∞" if isinstance(x, float) and math.isinf(x) else f"{x:.{digits}f}"


def pm(ci: dict[str, Any] | None, digits: int = 3) -> str:
    """'mean ± half-width' of an interval (``mean_ci``'s dict); the mean alone without a finite half-width (one
    seed); '—' if empty."""
    if not ci or ci.get("mean") is None:
        return "—"
    if ci.get("half") is None or not math.isfinite(ci["half"]):
        return f"{ci['mean']:.{digits}f}"
    return f"{ci['mean']:.{digits}f} ± {ci['half']:.{digits}f}"


def table(header: list[str], rows: list[list[str]]) -> list[str]:
    """A markdown table's lines."""
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)] + ["| " + " | ".join(r) + " |" for r in rows]


def marks(diff: dict[str, Any]) -> str:
    """' **' where a paired difference's interval excludes 0, then ' †' where it survives Holm's correction."""
    return (" **" if diff.get("separated") else "") + (" †" if diff.get("holm") else "")


def marked(diff: dict[str, Any], digits: int = 3) -> str:
    """A paired difference as 'mean ± half-width' (:func:`pm`) with its :func:`marks`."""
    return pm(diff, digits) + marks(diff)


def diff_cell(diff: dict[str, Any] | None, digits: int = 3, claim: bool = False) -> str:
    """A paired difference as 'signed mean ± half-width': '≈ 0', unmarked, where the mean and both ends of its
    interval round to 0 at ``digits`` (a difference below display precision claims nothing); with ``claim``, then
    ' **' where the difference is ``claimed`` (separated and large enough, :mod:`collapse_bench.classes`)."""
    if not diff or diff.get("mean") is None:
        return "—"
    if below_precision([diff["mean"]] + [diff[k] for k in ("lo", "hi") if diff.get(k) is not None], digits):
        return "≈ 0"
    cell = f"{diff['mean'] + 0.0:+.{digits}f}"
    if diff.get("half") is not None:
        cell += f" ± {diff['half']:.{digits}f}"
    return cell + (" **" if claim and diff.get("claimed") else "")


def below_precision(values: list[float], digits: int) -> bool:
    """Whether a difference and its interval ends all print as 0 at ``digits``: it claims nothing, marks nothing."""
    return all(round(x, digits) == 0 for x in values)
