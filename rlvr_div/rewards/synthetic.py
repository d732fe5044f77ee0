"""Verifiers of the built-in synthetic tasks (``rlvr_div.tasks.synthetic``)."""

from __future__ import annotations

import re
from collections.abc import Sequence

from rlvr_div.rewards import REWARDS
from rlvr_div.rewards.base import Reward

_INT = re.compile(r"-?\d+")
_PAIR = re.compile(r"(\d+)\+(\d+)")


class ArithExact(Reward):
    """1 when the completion (stripped) is exactly the integer in column ``answer``, else 0."""

    name = "arith_exact"
    columns = ("answer",)

    def extract(self, completion: str) -> str | None:
        text = completion.strip()
        return str(int(text)) if _INT.fullmatch(text) else None

    def score(self, completions: Sequence[str], answer: Sequence[str]) -> list[float | None]:
        return [float(self.extract(c) == str(a).strip()) for c, a in zip(completions, answer)]


class PairSum(Reward):
    """1 when the completion is ``a+b`` with non-negative integers summing to column ``target``, else 0.

    The extracted answer is the pair itself (canonical ``a+b``), so distinct correct answers count distinct pairs.
    """

    name = "pair_sum"
    columns = ("target",)

    def extract(self, completion: str) -> str | None:
        m = _PAIR.fullmatch(completion.strip())
        return f"{int(m.group(1))}+{int(m.group(2))}" if m else None

    def score(self, completions: Sequence[str], target: Sequence[int]) -> list[float | None]:
        out: list[float | None] = []
        for c, t in zip(completions, target):
            pair = self.extract(c)
            out.append(float(pair is not None and sum(int(x) for x in pair.split("+")) == int(t)))
        return out


REWARDS.add("arith_exact", ArithExact)
REWARDS.add("pair_sum", PairSum)
