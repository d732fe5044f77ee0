"""Verifier of the ``between`` task (:mod:`rlvr_div.tasks.between`): one canonical integer line in an open range."""

from __future__ import annotations

import re
from collections.abc import Sequence

from rlvr_div.rewards import REWARDS
from rlvr_div.rewards.base import Reward

_LINE = re.compile(r" (0|[1-9]\d*)")  # one space, digits without a leading zero: the form the prompt's examples show


class NumberBetween(Reward):
    """1 when the completion's first line is exactly ``" x"`` with low < x < high and the line is finished (a
    newline follows it; what comes after is not read), else 0. The extracted answer is x."""

    name = "number_between"
    columns = ("low", "high")

    def extract(self, completion: str) -> str | None:
        line, newline, _ = completion.partition("\n")
        return line[1:] if newline and _LINE.fullmatch(line) else None

    def score(self, completions: Sequence[str], low: Sequence[int], high: Sequence[int]) -> list[float | None]:
        out: list[float | None] = []
        for c, lo, hi in zip(completions, low, high):
            x = self.extract(c)
            out.append(float(x is not None and int(lo) < int(x) < int(hi)))
        return out


REWARDS.add("number_between", NumberBetween)
