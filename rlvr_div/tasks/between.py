"""``between``: "A number between a and b:" for a pretrained language model, with an enumerable valid set.

The prompt is completion-style, two worked examples and the question (about 41 tokens with SmolLM2's tokenizer)::

    A number between 10 and 20: 14
    A number between 30 and 45: 38
    A number between {a} and {b}:

and a valid completion is one canonical line ``" x\\n"`` (one space, the integer in digits without a leading zero, a
newline) with a < x < b; whatever follows the newline is not read. The examples show that form, and the verifier
(reward ``number_between``) accepts no other (no sign, no trailing text on the line, no unfinished line), so the
valid set is the b − a − 1 lines ``" x\\n"`` and exact measurement (:mod:`rlvr_div.exact`) teacher-forces each of them
with no EOS after it (``TaskSpec.ends_with_eos`` False): the newline ends the answer.

Why completion-style rather than the chat template: through SmolLM2-135M-Instruct's chat template the model answers
in prose (exact validity below 0.01 for the same question with a one-line system prompt), and a chat prompt with
two worked turns costs about 85 tokens instead of 41 for a validity that stays under 0.2; the two-line prefix costs
41 tokens and the base's exact validity is about 0.2–0.5 (docs/study/collapse.md, real-LM section), with a p* spread
over every integer in the range but not uniform.

Prompts: a in 10..70, b = a + w with w in {10, 15, 20, 25} (the two example pairs excluded); split by a mod 4: {0, 1}
→ train, 2 → validation, 3 → test, so held-out prompts have lower bounds the training set never shows.
"""

from __future__ import annotations

import random

import datasets

from rlvr_div.errors import ConfigError
from rlvr_div.tasks import TASKS
from rlvr_div.tasks.base import TaskSpec
from rlvr_div.tasks.data import take_rows

EXAMPLES = (("10", "20", "14"), ("30", "45", "38"))
PREFIX = "".join(f"A number between {a} and {b}: {x}\n" for a, b, x in EXAMPLES)
LOW_MIN, LOW_MAX = 10, 70
WIDTHS = (10, 15, 20, 25)
SPLITS = ("train", "validation", "test")


def between_prompt(low: int, high: int) -> str:
    """The prompt of the range (low, high): the two worked examples, then the question."""
    return f"{PREFIX}A number between {low} and {high}:"


def between_split(low: int) -> str:
    """The split of lower bound ``low``: low mod 4 in {0, 1} → train, 2 → validation, 3 → test."""
    return {0: "train", 1: "train", 2: "validation", 3: "test"}[low % 4]


def build_between(split: str = "train", seed: int = 0, size: int | None = None) -> datasets.Dataset:
    """The ranges of ``split`` (see :func:`between_split`), shuffled by ``seed``."""
    if split not in SPLITS:
        raise ConfigError(f"task 'between' has splits {', '.join(SPLITS)}, not {split!r}")
    examples = {(int(a), int(b)) for a, b, _ in EXAMPLES}
    ranges = [
        (low, low + w)
        for low in range(LOW_MIN, LOW_MAX + 1)
        for w in WIDTHS
        if between_split(low) == split and (low, low + w) not in examples
    ]
    random.Random(seed).shuffle(ranges)
    return take_rows([{"prompt": between_prompt(lo, hi), "low": lo, "high": hi} for lo, hi in ranges], size)


def between_valid(row: dict) -> list[str]:
    """The b − a − 1 completions ``number_between`` accepts for a row, each with the newline that ends it."""
    return [f" {x}\n" for x in range(int(row["low"]) + 1, int(row["high"]))]


TASKS.add(
    "between",
    TaskSpec(
        "between",
        build_between,
        reward="number_between",
        description="'A number between a and b:' (2 worked examples) -> ' x' on one line, a < x < b (real LMs)",
        valid_completions=between_valid,
        ends_with_eos=False,
    ),
)
