"""Allowed intervals of numeric settings, declared next to the settings, and the one-line complaint about a value
outside one.

:data:`rlvr_div.recipe.checks.RANGES` holds the ranges of TRL's, transformers' and LoRA's keys; a plug-in declares its
own keys' ranges in the plug-in class (``ranges = {"simko_alpha": UNIT}``; argparse takes a field's metadata as
its own keyword arguments, so they cannot live there), and
:meth:`rlvr_div.trainers.plugin.GRPOPlugin.check_declared` enforces them before any model loads.
"""

from __future__ import annotations

import dataclasses
import math
import typing
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Range:
    """An interval of allowed values; ``low_open``/``high_open`` exclude the end point."""

    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False

    def __contains__(self, x: float) -> bool:
        if not math.isfinite(x):
            return False
        if self.low is not None and (x <= self.low if self.low_open else x < self.low):
            return False
        return not (self.high is not None and (x >= self.high if self.high_open else x > self.high))

    def __str__(self) -> str:
        if self.high is None:
            return f"{'>' if self.low_open else '>='} {_num(self.low)}"
        if self.low is None:
            return f"{'<' if self.high_open else '<='} {_num(self.high)}"
        return f"in {'(' if self.low_open else '['}{_num(self.low)}, {_num(self.high)}{')' if self.high_open else ']'}"


def _num(x: float | None) -> str:
    return str(int(x)) if x is not None and float(x).is_integer() else str(x)


POSITIVE = Range(0, low_open=True)
NON_NEGATIVE = Range(0)
AT_LEAST_ONE = Range(1)
PROBABILITY = Range(0, 1, low_open=True)  # (0, 1]: top_p and friends
UNIT = Range(0, 1)  # [0, 1]
HALF_OPEN_UNIT = Range(0, 1, high_open=True)  # [0, 1)
OPEN_UNIT = Range(0, 1, low_open=True, high_open=True)  # (0, 1)
AT_LEAST_TWO = Range(2)


def is_integer_field(f: dataclasses.Field) -> bool:
    """Whether the field is annotated ``int`` (or ``int | None``): its values must then be integers. The annotation
    may be a string (``from __future__ import annotations``) or, once a parser resolved it, the type itself."""
    if isinstance(f.type, str):
        return "int" in [part.strip() for part in f.type.split("|")]
    return int in (typing.get_args(f.type) or (f.type,))


def out_of_range(key: str, value: Any, allowed: Range, integer: bool = False) -> str | None:
    """The one-line complaint about ``value`` for ``key`` (None: it is fine): an integer, or a finite number, in
    ``allowed`` ("simko_top_k must be an integer >= 1, got 0")."""
    if integer:
        if isinstance(value, bool) or not isinstance(value, int) or value not in allowed:
            return f"{key} must be an integer {allowed}, got {value!r}"
        return None
    number = not isinstance(value, bool) and isinstance(value, (int, float))
    if not number or not math.isfinite(value) or value not in allowed:
        return f"{key} must be a finite number {allowed}, got {value!r}"
    return None
