"""Helpers of the collapse reports' figures."""

from __future__ import annotations

from typing import Any


def error_bar(ci: dict[str, Any], lo: float, hi: float) -> list[list[float]]:
    """An asymmetric error bar for ``errorbar``: the t-interval clipped to the quantity's range [lo, hi] (with 2 seeds
    the interval is ±12.7 sd and would leave it)."""
    m, h = ci["mean"], ci.get("half") or 0.0
    return [[m - max(lo, m - h)], [min(hi, m + h) - m]]


def error_bars(cis: list[dict[str, Any]], lo: float, hi: float) -> list[list[float]]:
    """:func:`error_bar` for a series."""
    bars = [error_bar(ci, lo, hi) for ci in cis]
    return [[b[0][0] for b in bars], [b[1][0] for b in bars]]
