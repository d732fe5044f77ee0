"""Built-in synthetic tasks, deterministic from a seed, small enough for the tiny base model.

- ``arith``: ``"a+b="`` or ``"a-b="`` with 0 <= a, b <= 29 (a >= b for subtraction); one valid answer.
- ``pairsum``: ``"sum n:"`` with 2 <= n <= 61; any ``"a+b"`` with a, b >= 0 and a + b = n is valid, so a prompt
  has n + 1 valid outputs.

Each task also has a pretraining sampler (:func:`corpus_sampler`) that the tiny base model is trained on. It writes
a correct completion with probability 1 - e(prompt) and a plausible mistake otherwise, where the error rate e rises
smoothly with the prompt's difficulty (the size of the operands), so the base model has a wide spread of per-prompt
validity rates, as real base models do.
"""

from __future__ import annotations

import random
from collections.abc import Callable

import datasets

from rlvr_div.errors import ConfigError
from rlvr_div.tasks import TASKS
from rlvr_div.tasks.base import TaskSpec

ARITH_MAX = 29
PAIRSUM_MIN, PAIRSUM_MAX = 2, 61
MAX_ERROR = 0.95
TEST_SIZE = 300


def arith_error_rate(a: int, b: int) -> float:
    """The pretraining corpus's error rate for ``a ± b``: 0 for a = 0, ``MAX_ERROR`` for a = 29."""
    return MAX_ERROR * (a / ARITH_MAX) ** 2


def pairsum_error_rate(n: int) -> float:
    """The pretraining corpus's error rate for ``sum n``: 0 at the smallest n, ``MAX_ERROR`` at the largest."""
    return MAX_ERROR * ((n - PAIRSUM_MIN) / (PAIRSUM_MAX - PAIRSUM_MIN)) ** 1.5


def _arith_prompts() -> list[tuple[str, str]]:
    out = []
    for a in range(ARITH_MAX + 1):
        for b in range(ARITH_MAX + 1):
            out.append((f"{a}+{b}=", str(a + b)))
            if a >= b:
                out.append((f"{a}-{b}=", str(a - b)))
    return out


def _mistake(value: int, rng: random.Random) -> int:
    """A plausible wrong number near ``value`` (never ``value`` itself, never negative)."""
    while True:
        wrong = value + rng.choice([-1, 1]) * rng.randint(1, 10)
        if wrong >= 0 and wrong != value:
            return wrong


def _arith_corpus(rng: random.Random) -> tuple[str, str]:
    a, b = rng.randint(0, ARITH_MAX), rng.randint(0, ARITH_MAX)
    if rng.random() < 0.5:
        prompt, value = f"{a}+{b}=", a + b
    else:
        a, b = max(a, b), min(a, b)
        prompt, value = f"{a}-{b}=", a - b
    if rng.random() < arith_error_rate(a, b):
        value = _mistake(value, rng)
    return prompt, str(value)


def _pairsum_corpus(rng: random.Random) -> tuple[str, str]:
    n = rng.randint(PAIRSUM_MIN, PAIRSUM_MAX)
    a = rng.randint(0, n)
    b = n - a
    if rng.random() < pairsum_error_rate(n):
        b = _mistake(b, rng)
    return f"sum {n}:", f"{a}+{b}"


_CORPUS: dict[str, Callable[[random.Random], tuple[str, str]]] = {
    "arith": _arith_corpus,
    "pairsum": _pairsum_corpus,
}


def corpus_sampler(task: str) -> Callable[[random.Random], tuple[str, str]]:
    """``rng -> (prompt, completion)`` pretraining sampler of a built-in task."""
    if task not in _CORPUS:
        raise ConfigError(f"no pretraining sampler for task {task!r}; known: {', '.join(sorted(_CORPUS))}")
    return _CORPUS[task]


def _take(rows: list[dict], size: int | None) -> datasets.Dataset:
    if size is not None:
        if size < 1:
            raise ConfigError(f"task size must be >= 1, got {size}")
        rows = rows[:size]
    return datasets.Dataset.from_list(rows)


def build_arith(split: str = "train", seed: int = 0, size: int | None = None) -> datasets.Dataset:
    """Prompts shuffled by ``seed``; the last ``TEST_SIZE`` form ``test``, the rest ``train`` (disjoint)."""
    pairs = _arith_prompts()
    random.Random(seed).shuffle(pairs)
    if split == "train":
        pairs = pairs[:-TEST_SIZE]
    elif split == "test":
        pairs = pairs[-TEST_SIZE:]
    else:
        raise ConfigError(f"task 'arith' has splits train and test, not {split!r}")
    return _take([{"prompt": p, "answer": a} for p, a in pairs], size)


def build_pairsum(split: str = "train", seed: int = 0, size: int | None = None) -> datasets.Dataset:
    """All 60 targets, shuffled by ``seed``; ``train`` and ``test`` hold the same prompts (the task is about the
    distribution over the many valid answers, not generalisation to new prompts)."""
    if split not in ("train", "test"):
        raise ConfigError(f"task 'pairsum' has splits train and test, not {split!r}")
    targets = list(range(PAIRSUM_MIN, PAIRSUM_MAX + 1))
    random.Random(seed).shuffle(targets)
    return _take([{"prompt": f"sum {n}:", "target": n} for n in targets], size)


TASKS.add(
    "arith",
    TaskSpec("arith", build_arith, reward="arith_exact", description="a+b= / a-b= with a unique integer answer"),
)
TASKS.add(
    "pairsum",
    TaskSpec("pairsum", build_pairsum, reward="pair_sum", description="'sum n:' -> any a+b = n (n+1 valid answers)"),
)
