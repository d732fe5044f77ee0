"""Built-in synthetic tasks, deterministic from a seed, small enough for the tiny base model.

- ``arith``: ``"a+b="`` or ``"a-b="`` with 0 <= a, b <= 29 (a >= b for subtraction); one valid answer.
- ``pairsum``: ``"sum n:"`` with 2 <= n <= 61; any ``"a+b"`` with a, b >= 0 and a + b = n is valid, so a prompt
  has n + 1 valid outputs. Options ``min_target``/``max_target`` select a window of n (the base model's validity
  falls with n, so a window of small n is the high-validity regime).

Splits are disjoint: ``train``, ``validation`` and ``test`` (``pairsum``: n mod 4 in {0, 1} → train, 2 → validation,
3 → test, so each split spans the difficulty range). Every valid completion is enumerable
(:func:`valid_completions`): the verifiers accept canonical numbers only (no sign, no leading zeros, no spaces), the
form the pretraining corpus writes, so the exact metrics of :mod:`rlvr_div.exact` cover every accepted output.

Each task also has a pretraining sampler (its ``TaskSpec.corpus``) that the tiny base model is trained on. It writes
a correct completion with probability 1 - e(prompt) and a plausible mistake otherwise, where the error rate e rises
smoothly with the prompt's difficulty (the size of the operands), so the base model has a wide spread of per-prompt
validity rates, as real base models do.
"""

from __future__ import annotations

import random

import datasets

from rlvr_div.errors import ConfigError
from rlvr_div.tasks import TASKS
from rlvr_div.tasks.base import TaskSpec
from rlvr_div.tasks.data import take_rows

ARITH_MAX = 29
PAIRSUM_MIN, PAIRSUM_MAX = 2, 61
MAX_ERROR = 0.95
TEST_SIZE = 300
VALIDATION_SIZE = 300
SPLITS = ("train", "validation", "test")


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


def mistake(value: int, rng: random.Random) -> int:
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
        value = mistake(value, rng)
    return prompt, str(value)


def _pairsum_corpus(rng: random.Random) -> tuple[str, str]:
    n = rng.randint(PAIRSUM_MIN, PAIRSUM_MAX)
    a = rng.randint(0, n)
    b = n - a
    if rng.random() < pairsum_error_rate(n):
        b = mistake(b, rng)
    return f"sum {n}:", f"{a}+{b}"


def build_arith(split: str = "train", seed: int = 0, size: int | None = None) -> datasets.Dataset:
    """Prompts shuffled by ``seed``; the last ``TEST_SIZE`` form ``test``, the ``VALIDATION_SIZE`` before them
    ``validation``, the rest ``train`` (disjoint)."""
    pairs = _arith_prompts()
    random.Random(seed).shuffle(pairs)
    cut = len(pairs) - TEST_SIZE - VALIDATION_SIZE
    if split == "train":
        pairs = pairs[:cut]
    elif split == "validation":
        pairs = pairs[cut:-TEST_SIZE]
    elif split == "test":
        pairs = pairs[-TEST_SIZE:]
    else:
        raise ConfigError(f"task 'arith' has splits {', '.join(SPLITS)}, not {split!r}")
    return take_rows([{"prompt": p, "answer": a} for p, a in pairs], size)


def pairsum_split(n: int) -> str:
    """The split of target n: n mod 4 in {0, 1} → train, 2 → validation, 3 → test (both parities in train)."""
    return {0: "train", 1: "train", 2: "validation", 3: "test"}[n % 4]


def check_pairsum(min_target: int = PAIRSUM_MIN, max_target: int = PAIRSUM_MAX, **_: object) -> None:
    """One-line errors for a target window outside what the base model was pretrained on, or too narrow to split."""
    if not PAIRSUM_MIN <= min_target <= max_target <= PAIRSUM_MAX:
        raise ConfigError(
            f"pairsum window min_target={min_target}, max_target={max_target} must satisfy "
            f"{PAIRSUM_MIN} <= min_target <= max_target <= {PAIRSUM_MAX}"
        )
    if max_target - min_target < 3:
        raise ConfigError(f"pairsum window {min_target}..{max_target} is too narrow: every split needs a target")


def build_pairsum(
    split: str = "train",
    seed: int = 0,
    size: int | None = None,
    min_target: int = PAIRSUM_MIN,
    max_target: int = PAIRSUM_MAX,
) -> datasets.Dataset:
    """The targets n in ``min_target..max_target`` of ``split`` (see :func:`pairsum_split`), shuffled by ``seed``."""
    if split not in SPLITS:
        raise ConfigError(f"task 'pairsum' has splits {', '.join(SPLITS)}, not {split!r}")
    check_pairsum(min_target, max_target)
    targets = [n for n in range(min_target, max_target + 1) if pairsum_split(n) == split]
    random.Random(seed).shuffle(targets)
    return take_rows([{"prompt": f"sum {n}:", "target": n} for n in targets], size)


def arith_valid(row: dict) -> list[str]:
    """The one completion ``arith_exact`` accepts for a row."""
    return [str(int(row["answer"]))]


def pairsum_valid(row: dict) -> list[str]:
    """The n + 1 completions ``pair_sum`` accepts for target n: ``a+(n−a)`` for a = 0..n."""
    n = int(row["target"])
    return [f"{a}+{n - a}" for a in range(n + 1)]


TASKS.add(
    "arith",
    TaskSpec(
        "arith",
        build_arith,
        reward="arith_exact",
        description="a+b= / a-b= with a unique integer answer",
        valid_completions=arith_valid,
        corpus=_arith_corpus,
        one_answer=True,
    ),
)
TASKS.add(
    "pairsum",
    TaskSpec(
        "pairsum",
        build_pairsum,
        reward="pair_sum",
        description="'sum n:' -> any a+b = n (n+1 valid answers)",
        check=check_pairsum,
        valid_completions=pairsum_valid,
        corpus=_pairsum_corpus,
    ),
)
