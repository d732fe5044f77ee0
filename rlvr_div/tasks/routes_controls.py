"""The controls of ``routes`` (issue 58): the same prompts, splits and classes, with the one property changed that
could make a method win on ``routes`` by construction.

- ``routes_swapped`` (base ``tiny3-swapped``): the pretraining corpus takes the column strategy with probability
  1 − ``ROUTES_MINORITY`` (0.8), so the strategy that solves the held-out ``long`` class is the base's *majority*.
  Methods that keep ``long`` on ``routes`` by rewarding answers the base finds unlikely would here push toward
  direct, which fails on ``long``; a method that keeps the base's distribution would not.
- ``routes_equal`` (base ``tiny3-equal``): direct is written ``dd;<answer>``, the length of column's
  ``c<carry>;<answer>``, so a sequence log-probability (MARA's bonus) no longer favours a strategy by its length.
  Verified by ``route_answer_equal``.

The minority strategy (the one the benchmark tracks the share of) is the corpus's minority: direct in
``routes_swapped``, column in ``routes_equal``.
"""

from __future__ import annotations

import random

from rlvr_div.tasks import TASKS
from rlvr_div.tasks.base import TaskSpec
from rlvr_div.tasks.routes import (
    COLUMN,
    DIRECT,
    ROUTES_MINORITY,
    build_routes,
    column_completion,
    routes_corpus_sample,
    routes_valid,
    strategy_of,
)


def equal_direct_completion(answer: int) -> str:
    """Direct at the column strategy's length: ``dd;<answer>``."""
    return f"dd;{answer}"


def routes_equal_valid(row: dict) -> list[str]:
    """The 11 completions ``route_answer_equal`` accepts."""
    answer = int(row["answer"])
    return [equal_direct_completion(answer)] + [column_completion(w, answer) for w in range(10)]


def _swapped_corpus(rng: random.Random) -> tuple[str, str]:
    return routes_corpus_sample(rng, column_share=1.0 - ROUTES_MINORITY)


def _equal_corpus(rng: random.Random) -> tuple[str, str]:
    return routes_corpus_sample(rng, direct=equal_direct_completion)


TASKS.add(
    "routes_swapped",
    TaskSpec(
        "routes_swapped",
        build_routes,
        reward="route_answer",
        description="routes with the strategies' shares swapped: column, the one that solves a+b >= 100, is the "
        "base's majority",
        valid_completions=routes_valid,
        corpus=_swapped_corpus,
        one_answer=False,
        strategy=strategy_of,
        minority_strategy=DIRECT,
        class_column="route_class",
    ),
)

TASKS.add(
    "routes_equal",
    TaskSpec(
        "routes_equal",
        build_routes,
        reward="route_answer_equal",
        description="routes with direct written dd;<sum>, the column strategy's length",
        valid_completions=routes_equal_valid,
        corpus=_equal_corpus,
        one_answer=False,
        strategy=strategy_of,
        minority_strategy=COLUMN,
        class_column="route_class",
    ),
)
