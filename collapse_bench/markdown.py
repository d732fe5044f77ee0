"""Markdown cells and tables of the collapse reports."""

from __future__ import annotations

import math
from typing import Any


def num(x: float | None, digits: int = 3) -> str:
    """A number at ``digits``; '—' for none, '∞' for an infinite one."""
    return "—" if x is None else "∞" if isinstance(x, float) and math.isinf(x) else f"{x:.{digits}f}"


def pm(ci: dict[str, Any] | None, digits: int = 3, low: float | None = None, high: float | None = None) -> str:
    """'mean ± half-width' of an interval (``mean_ci``'s dict); the mean alone without a finite half-width (one
    seed); '—' if empty. With ``low``/``high``, the values the outcome can take (0 and the number of problems for a
    count of problems, 0 and 1 for a validity): an interval that reaches past them prints clipped, as
    'mean [lo, hi]' (:func:`clipped`); the stored interval is left as it is."""
    if not ci or ci.get("mean") is None:
        return "—"
    if ci.get("half") is None or not math.isfinite(ci["half"]):
        return f"{ci['mean']:.{digits}f}"
    ends = clipped(ci, low, high, digits)
    if ends is not None:
        return f"{ci['mean']:.{digits}f} [{ends[0] + 0.0:.{digits}f}, {ends[1] + 0.0:.{digits}f}]"
    return f"{ci['mean']:.{digits}f} ± {ci['half']:.{digits}f}"


def clipped(
    ci: dict[str, Any], low: float | None = None, high: float | None = None, digits: int | None = None
) -> tuple[float, float] | None:
    """The interval's ends clipped to [``low``, ``high``] where it reaches past either (a t-interval on a bounded
    outcome can: 30.4 ± 83.0 problems lost reaches −52.6); None where it stays inside, or has no ends. With
    ``digits``, an end past a bound by less than display precision (1.000 ± 0.000 whose end is 1 + 1e-16) counts
    as inside."""
    lo, hi = ci.get("lo"), ci.get("hi")
    if lo is None or hi is None:
        mean, half = ci.get("mean"), ci.get("half")
        if mean is None or half is None:
            return None
        lo, hi = mean - half, mean + half
    shown = (lambda x: x) if digits is None else (lambda x: round(x, digits))
    out_lo = low is not None and shown(lo) < low
    out_hi = high is not None and shown(hi) > high
    if not (out_lo or out_hi):
        return None
    return (low if out_lo else lo, high if out_hi else hi)


def table(header: list[str], rows: list[list[str]]) -> list[str]:
    """A markdown table's lines."""
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)] + ["| " + " | ".join(r) + " |" for r in rows]


def marks(diff: dict[str, Any]) -> str:
    """' **' where a paired difference's interval excludes 0, then ' †' where it survives Holm's correction."""
    return (" **" if diff.get("separated") else "") + (" †" if diff.get("holm") else "")


def marked(diff: dict[str, Any], digits: int = 3) -> str:
    """A paired difference as 'mean ± half-width' (:func:`pm`) with its :func:`marks`."""
    return pm(diff, digits) + marks(diff)


def diff_cell(
    diff: dict[str, Any] | None, digits: int = 3, claim: bool = False, low: float | None = None,
    high: float | None = None,
) -> str:  # fmt: skip
    """A paired difference as 'signed mean ± half-width': '≈ 0', unmarked, where the mean and both ends of its
    interval round to 0 at ``digits`` (a difference below display precision claims nothing); with ``claim``, then
    ' **' where the difference is ``claimed`` (separated and large enough, :mod:`collapse_bench.classes`). With
    ``low``/``high`` (what the difference can take), an interval past them prints clipped, 'mean [lo, hi]'."""
    if not diff or diff.get("mean") is None:
        return "—"
    if below_precision([diff["mean"]] + [diff[k] for k in ("lo", "hi") if diff.get(k) is not None], digits):
        return "≈ 0"
    cell = f"{diff['mean'] + 0.0:+.{digits}f}"
    ends = None if diff.get("half") is None else clipped(diff, low, high, digits)
    if ends is not None:
        cell += f" [{ends[0] + 0.0:+.{digits}f}, {ends[1] + 0.0:+.{digits}f}]"
    elif diff.get("half") is not None:
        cell += f" ± {diff['half']:.{digits}f}"
    return cell + (" **" if claim and diff.get("claimed") else "")


def below_precision(values: list[float], digits: int) -> bool:
    """Whether a difference and its interval ends all print as 0 at ``digits``: it claims nothing, marks nothing."""
    return all(round(x, digits) == 0 for x in values)
