"""Markdown cells and tables of the collapse reports."""

from __future__ import annotations

from typing import Any


def pm(ci: dict[str, Any] | None, digits: int = 3) -> str:
    """'mean ± half-width' of an interval (``mean_ci``'s dict); the mean alone without a half-width; '—' if empty."""
    if not ci or ci.get("mean") is None:
        return "—"
    if ci.get("half") is None:
        return f"{ci['mean']:.{digits}f}"
    return f"{ci['mean']:.{digits}f} ± {ci['half']:.{digits}f}"


def table(header: list[str], rows: list[list[str]]) -> list[str]:
    """A markdown table's lines."""
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)] + ["| " + " | ".join(r) + " |" for r in rows]


def marks(diff: dict[str, Any]) -> str:
    """' **' where a paired difference's interval excludes 0, then ' †' where it survives Holm's correction."""
    return (" **" if diff.get("separated") else "") + (" †" if diff.get("holm") else "")
