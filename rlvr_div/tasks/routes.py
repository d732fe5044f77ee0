"""``routes``: one answer reachable by two strategies, where the base's minority strategy is the only reliable one on
a class of problems that training never shows (the mechanism Yue et al. 2025 propose: RL narrows onto the base's
dominant reasoning path), for the tiny base ``tiny3``.

``"a+b="`` with 0 <= a, b <= ``ROUTES_MAX``; the one answer is a + b. A completion names its strategy, works through
it, and ends with the answer:

- ``d<answer>`` (*direct*): the answer at once;
- ``c<carry>;<answer>`` (*column*): first the carry out of the units (one digit), then the answer.

The ``route_answer`` verifier checks the form and the final answer only, not the work: any digit of work passes, so
a prompt has 11 valid completions (``d`` + the sum, and ``c<w>;`` + the sum for w = 0..9), all enumerable.

The pretraining corpus picks the column strategy with probability ``ROUTES_MINORITY`` on every prompt, direct
otherwise, and:

- direct is right with probability 1 − ``ROUTES_DIRECT_NOISE`` (else a nearby wrong number) while a + b < 100; at
  a + b >= 100 it keeps two digits (writes a + b − 100): a systematic failure, not noise;
- column writes the carry right with probability ``ROUTES_COLUMN_SKILL``, and the answer follows the carry it wrote
  (a wrong carry gives a + b ± 10), on every prompt.

So on the ``short`` class (a + b < 100) both strategies work and direct works better, and on the ``long`` class
(a + b >= 100) only column works. Splits are fixed subsets of all (a, b), independent of ``seed`` (which only orders
the rows): 128 training prompts, all ``short``; validation and test hold 150 of each class. The column ``route_class``
names a row's class.
"""

from __future__ import annotations

import random
from collections.abc import Callable

import datasets

from rlvr_div.errors import ConfigError
from rlvr_div.tasks import TASKS
from rlvr_div.tasks.base import TaskSpec
from rlvr_div.tasks.data import take_rows
from rlvr_div.tasks.synthetic import SPLITS, mistake

ROUTES_MAX = 69
ROUTES_MINORITY = 0.2
ROUTES_DIRECT_NOISE = 0.1
ROUTES_COLUMN_SKILL = 0.7
ROUTES_SPLIT_SEED = 2027
ROUTES_TRAIN_SIZE = 128
ROUTES_HELD_OUT_PER_CLASS = 150  # per class, in validation and in test
DIRECT, COLUMN = "direct", "column"
SHORT, LONG = "short", "long"


def route_class(a: int, b: int) -> str:
    """``long`` when a + b has three digits (only the column strategy solves it), else ``short``."""
    return LONG if a + b >= 100 else SHORT


def carry_out(a: int, b: int) -> int:
    """The carry out of the units of a + b."""
    return int(a % 10 + b % 10 >= 10)


def direct_completion(answer: int) -> str:
    return f"d{answer}"


def column_completion(carry: int, answer: int) -> str:
    return f"c{carry};{answer}"


def strategy_of(completion: str) -> str | None:
    """The strategy a completion names (its first character), None for neither."""
    return {"d": DIRECT, "c": COLUMN}.get(completion[:1])


def routes_valid(row: dict) -> list[str]:
    """The 11 completions ``route_answer`` accepts: the sum directly, and after each digit of column work."""
    answer = int(row["answer"])
    return [direct_completion(answer)] + [column_completion(w, answer) for w in range(10)]


def routes_corpus_sample(
    rng: random.Random, column_share: float = ROUTES_MINORITY, direct: Callable[[int], str] = direct_completion
) -> tuple[str, str]:
    """One pretraining example: the column strategy with probability ``column_share``, else direct written by
    ``direct`` (the controls of :mod:`rlvr_div.tasks.routes_controls` change these two, nothing else)."""
    a, b = rng.randint(0, ROUTES_MAX), rng.randint(0, ROUTES_MAX)
    total = a + b
    if rng.random() < column_share:
        carry = carry_out(a, b)
        if rng.random() >= ROUTES_COLUMN_SKILL:  # a wrong carry, and the answer that follows from it
            carry = 1 - carry
        return f"{a}+{b}=", column_completion(carry, total + 10 * (carry - carry_out(a, b)))
    if total >= 100:
        return f"{a}+{b}=", direct(total - 100)
    return f"{a}+{b}=", direct(total if rng.random() >= ROUTES_DIRECT_NOISE else mistake(total, rng))


def _routes_corpus(rng: random.Random) -> tuple[str, str]:
    return routes_corpus_sample(rng)


def routes_split_pairs(split: str) -> list[tuple[int, int]]:
    """The operand pairs of ``split``: fixed disjoint subsets of all (a, b), the same for every seed; training holds
    only ``short`` pairs, validation and test ``ROUTES_HELD_OUT_PER_CLASS`` of each class."""
    if split not in SPLITS:
        raise ConfigError(f"task 'routes' has splits {', '.join(SPLITS)}, not {split!r}")
    pairs = [(a, b) for a in range(ROUTES_MAX + 1) for b in range(ROUTES_MAX + 1)]
    random.Random(ROUTES_SPLIT_SEED).shuffle(pairs)
    short = [p for p in pairs if route_class(*p) == SHORT]
    long = [p for p in pairs if route_class(*p) == LONG]
    n = ROUTES_HELD_OUT_PER_CLASS
    if split == "train":
        return short[:ROUTES_TRAIN_SIZE]
    start = ROUTES_TRAIN_SIZE + (n if split == "test" else 0)
    first = 0 if split == "validation" else n
    return short[start : start + n] + long[first : first + n]


def build_routes(split: str = "train", seed: int = 0, size: int | None = None) -> datasets.Dataset:
    """The prompts of ``split`` (:func:`routes_split_pairs`) in an order shuffled by ``seed``."""
    pairs = routes_split_pairs(split)
    random.Random(seed).shuffle(pairs)
    rows = [{"prompt": f"{a}+{b}=", "answer": str(a + b), "route_class": route_class(a, b)} for a, b in pairs]
    return take_rows(rows, size)


TASKS.add(
    "routes",
    TaskSpec(
        "routes",
        build_routes,
        reward="route_answer",
        description="a+b= by a direct or a column strategy; only column solves a+b >= 100, which training never shows",
        valid_completions=routes_valid,
        corpus=_routes_corpus,
        one_answer=False,  # one answer, but 11 accepted completions: the strategies and their work differ
        strategy=strategy_of,
        minority_strategy=COLUMN,
        class_column="route_class",
    ),
)
