"""``carry``: one valid answer and a latent skill, for the tiny base ``tiny2`` (the regime of Yue et al. 2025).

``"a+b="`` with 0 <= a, b <= 39; the one valid answer is a + b, written canonically (the ``arith_exact`` verifier).
The pretraining corpus has a skill the base holds only partly, with a systematic error mode, not noise:

- without a carry in the units (a mod 10 + b mod 10 < 10) the corpus is right with probability
  1 − ``CARRY_NOISE`` (these prompts are near-perfect for the base: DPH-RL's rehearsal set);
- with a carry it carries with probability s(a, b) = ``CARRY_SKILL_MAX`` − (``CARRY_SKILL_MAX`` −
  ``CARRY_SKILL_MIN``)·(⌊a/10⌋ + ⌊b/10⌋)/6, falling with the tens digits; otherwise it drops the carry (writes
  a + b − 10) nine times in ten and a nearby wrong number once.

So RL has something to sharpen that is shared across prompts (carrying), and held-out prompts can gain from training
on others. Splits are fixed subsets of the 1600 prompts, independent of ``seed`` (which only orders the rows): 128
training prompts (each visited often within a run's budget), 300 validation and 300 test prompts.
"""

from __future__ import annotations

import random

import datasets

from rlvr_div.errors import ConfigError
from rlvr_div.tasks import TASKS
from rlvr_div.tasks.base import TaskSpec
from rlvr_div.tasks.data import take_rows
from rlvr_div.tasks.synthetic import SPLITS, arith_valid, mistake

CARRY_MAX = 39
CARRY_NOISE = 0.02
CARRY_SKILL_MAX, CARRY_SKILL_MIN = 0.8, 0.15
CARRY_SPLIT_SEED = 2026
CARRY_SPLIT_SIZES = {"train": 128, "validation": 300, "test": 300}


def has_carry(a: int, b: int) -> bool:
    """Whether ``a + b`` carries from the units into the tens."""
    return a % 10 + b % 10 >= 10


def carry_skill(a: int, b: int) -> float:
    """The corpus's probability of carrying right on a prompt with a carry: falls with the tens digits."""
    return CARRY_SKILL_MAX - (CARRY_SKILL_MAX - CARRY_SKILL_MIN) * (a // 10 + b // 10) / 6


def _carry_corpus(rng: random.Random) -> tuple[str, str]:
    a, b = rng.randint(0, CARRY_MAX), rng.randint(0, CARRY_MAX)
    value = a + b
    if has_carry(a, b):
        if rng.random() >= carry_skill(a, b):
            value = value - 10 if rng.random() < 0.9 else mistake(value, rng)
    elif rng.random() < CARRY_NOISE:
        value = mistake(value, rng)
    return f"{a}+{b}=", str(value)


def carry_split_pairs(split: str) -> list[tuple[int, int]]:
    """The operand pairs of ``split``: fixed disjoint subsets of all 1600 (a, b), the same for every seed."""
    if split not in SPLITS:
        raise ConfigError(f"task 'carry' has splits {', '.join(SPLITS)}, not {split!r}")
    pairs = [(a, b) for a in range(CARRY_MAX + 1) for b in range(CARRY_MAX + 1)]
    random.Random(CARRY_SPLIT_SEED).shuffle(pairs)
    start = 0
    for name in SPLITS:
        if name == split:
            return pairs[start : start + CARRY_SPLIT_SIZES[name]]
        start += CARRY_SPLIT_SIZES[name]
    raise AssertionError(split)  # unreachable: split is one of SPLITS


def build_carry(split: str = "train", seed: int = 0, size: int | None = None) -> datasets.Dataset:
    """The prompts of ``split`` (:func:`carry_split_pairs`) in an order shuffled by ``seed``; column ``carry`` says
    whether a prompt carries (for reporting by difficulty)."""
    pairs = carry_split_pairs(split)
    random.Random(seed).shuffle(pairs)
    rows = [{"prompt": f"{a}+{b}=", "answer": str(a + b), "carry": has_carry(a, b)} for a, b in pairs]
    return take_rows(rows, size)


TASKS.add(
    "carry",
    TaskSpec(
        "carry",
        build_carry,
        reward="arith_exact",
        description="a+b= with a unique answer; the base drops the carry (a latent, shared skill)",
        valid_completions=arith_valid,  # the one canonical sum, as on arith
        corpus=_carry_corpus,
        one_answer=True,
    ),
)
