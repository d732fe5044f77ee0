"""Verifiers of the built-in synthetic tasks (``rlvr_div.tasks.synthetic``)."""

from __future__ import annotations

import re
from collections.abc import Sequence

from rlvr_div.rewards import REWARDS
from rlvr_div.rewards.base import Reward

# canonical numbers only (no sign, no leading zero, no spaces): the valid set of a prompt is finite and enumerable
_INT = re.compile(r"0|[1-9]\d*")
_PAIR = re.compile(r"(0|[1-9]\d*)\+(0|[1-9]\d*)")
# a strategy and its work, then the answer: "d<answer>" or "c<one digit>;<answer>" (rlvr_div.tasks.routes)
_ROUTE = re.compile(r"(?:d|c\d;)(0|[1-9]\d*)")
# the same with direct written at the column's length, "dd;<answer>" (rlvr_div.tasks.routes_controls)
_ROUTE_EQUAL = re.compile(r"(?:dd;|c\d;)(0|[1-9]\d*)")


class ArithExact(Reward):
    """1 when the completion is exactly the integer in column ``answer``, written canonically, else 0."""

    name = "arith_exact"
    columns = ("answer",)

    def extract(self, completion: str) -> str | None:
        return completion if _INT.fullmatch(completion) else None

    def score(self, completions: Sequence[str], answer: Sequence[str]) -> list[float | None]:
        return [float(self.extract(c) == str(a).strip()) for c, a in zip(completions, answer)]


class PairSum(Reward):
    """1 when the completion is exactly ``a+b`` with canonical non-negative integers summing to column ``target``.

    The extracted answer is the pair itself, so distinct correct answers count distinct pairs.
    """

    name = "pair_sum"
    columns = ("target",)

    def extract(self, completion: str) -> str | None:
        return completion if _PAIR.fullmatch(completion) else None

    def score(self, completions: Sequence[str], target: Sequence[int]) -> list[float | None]:
        out: list[float | None] = []
        for c, t in zip(completions, target):
            pair = self.extract(c)
            out.append(float(pair is not None and sum(int(x) for x in pair.split("+")) == int(t)))
        return out


class RouteAnswer(Reward):
    """1 when the completion is ``d<answer>`` or ``c<digit>;<answer>`` with the final answer the integer in column
    ``answer``: the form and the answer are checked, the work digit is not."""

    name = "route_answer"
    columns = ("answer",)

    def extract(self, completion: str) -> str | None:
        match = _ROUTE.fullmatch(completion)
        return match.group(1) if match else None

    def score(self, completions: Sequence[str], answer: Sequence[str]) -> list[float | None]:
        return [float(self.extract(c) == str(a).strip()) for c, a in zip(completions, answer)]


class RouteAnswerEqual(RouteAnswer):
    """1 when the completion is ``dd;<answer>`` or ``c<digit>;<answer>``: ``route_answer`` for the control whose
    direct strategy is written at the column strategy's length."""

    name = "route_answer_equal"

    def extract(self, completion: str) -> str | None:
        match = _ROUTE_EQUAL.fullmatch(completion)
        return match.group(1) if match else None


REWARDS.add("arith_exact", ArithExact)
REWARDS.add("pair_sum", PairSum)
REWARDS.add("route_answer", RouteAnswer)
REWARDS.add("route_answer_equal", RouteAnswerEqual)
