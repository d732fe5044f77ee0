"""``skewsum``: many valid answers with a skewed filtered model p*, for the tiny base ``tiny2``.

``"add n:"`` with 2 <= n <= 61; any canonical ``"a+b"`` with a + b = n is valid (n + 1 answers, the ``pair_sum``
verifier). The pretraining corpus writes the small part first with a geometric preference,
P(a) ∝ ``SKEW_RATIO``^a over a = 0..n, so the base prefers ``0+n``, then ``1+(n-1)``, …: p* = a(·|valid) is far
from uniform over the valid set (about 1.5 nats of KL(p*‖uniform) in the corpus, against about 0.05 on
``pairsum``), and covering p* is no longer the same as spreading mass evenly over valid answers.

Its one error mode is systematic: with probability ``skewsum_error_rate(n)`` the corpus writes b off by one. The rate
is 0 up to n = ``SKEWSUM_EASY`` (those prompts are near-perfect for the base: DPH-RL's rehearsal set) and rises to
``SKEWSUM_MAX_ERROR`` at n = 61. Splits as ``pairsum``: n mod 4 in {0, 1} → train, 2 → validation, 3 → test.
"""

from __future__ import annotations

import random

import datasets

from rlvr_div.errors import ConfigError
from rlvr_div.tasks import TASKS
from rlvr_div.tasks.base import TaskSpec
from rlvr_div.tasks.data import take_rows
from rlvr_div.tasks.synthetic import SPLITS, pairsum_split, pairsum_valid

SKEWSUM_MIN, SKEWSUM_MAX = 2, 61
SKEWSUM_EASY = 21
SKEWSUM_MAX_ERROR = 0.85
SKEW_RATIO = 0.65


def skewsum_error_rate(n: int) -> float:
    """The corpus's off-by-one rate for ``add n``: 0 up to ``SKEWSUM_EASY``, then linear to ``SKEWSUM_MAX_ERROR``."""
    return SKEWSUM_MAX_ERROR * max(0.0, (n - SKEWSUM_EASY) / (SKEWSUM_MAX - SKEWSUM_EASY))


def skewsum_first_part_weights(n: int) -> list[float]:
    """The corpus's unnormalised preference over the first part a = 0..n: ``SKEW_RATIO``^a."""
    return [SKEW_RATIO**a for a in range(n + 1)]


def _skewsum_corpus(rng: random.Random) -> tuple[str, str]:
    n = rng.randint(SKEWSUM_MIN, SKEWSUM_MAX)
    a = rng.choices(range(n + 1), weights=skewsum_first_part_weights(n))[0]
    b = n - a
    if rng.random() < skewsum_error_rate(n):
        b = b + 1 if b == 0 or rng.random() < 0.5 else b - 1
    return f"add {n}:", f"{a}+{b}"


def build_skewsum(split: str = "train", seed: int = 0, size: int | None = None) -> datasets.Dataset:
    """The targets n of ``split`` (n mod 4: {0, 1} train, 2 validation, 3 test), shuffled by ``seed``."""
    if split not in SPLITS:
        raise ConfigError(f"task 'skewsum' has splits {', '.join(SPLITS)}, not {split!r}")
    targets = [n for n in range(SKEWSUM_MIN, SKEWSUM_MAX + 1) if pairsum_split(n) == split]
    random.Random(seed).shuffle(targets)
    return take_rows([{"prompt": f"add {n}:", "target": n} for n in targets], size)


TASKS.add(
    "skewsum",
    TaskSpec(
        "skewsum",
        build_skewsum,
        reward="pair_sum",
        description="'add n:' -> any a+b = n; the base prefers small a (a skewed p*)",
        valid_completions=pairsum_valid,  # the valid set is pairsum's: a + b = n
        corpus=_skewsum_corpus,
    ),
)
