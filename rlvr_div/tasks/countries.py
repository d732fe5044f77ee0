"""``countries``: "A country whose name starts with P:" for a pretrained language model, a skewed p* with an
enumerable valid set (issue 33: the real-LM task where keeping p* can be told from spreading mass).

The prompt is completion-style, like ``between``'s: two worked examples, then the question::

    A country whose name starts with B: Brazil
    A country whose name starts with N: Norway
    A country whose name starts with {prefix}:

and a valid completion is one line ``" Name\\n"``, Name a country name the verifier accepts (reward
``country_prefix``: the 193 UN member states and 14 other names in common use,
:mod:`rlvr_div.rewards.country_prefix`) that starts with the prefix. The valid set of a prompt is every such line, so
exact measurement (:mod:`rlvr_div.exact`) teacher-forces each of them with no EOS after it (the newline ends it).

Why it is skewed: a pretrained model knows some countries far better than others (for "F", France before Fiji), so
the base's filtered model p* is far from uniform over the valid names, which `between` (near-uniform over the
integers of a range) is not. Measured with ``bench/real_lm_task_skew.py`` (docs/study/collapse_details.md, "A real LM").

Prompts: every prefix of one or two letters that at least 2 accepted names start with, except the examples' "B" and
"N" (66 prefixes); split by the prefix's position in sorted order, even → train, odd → test (33 each: the real-LM
study measures at least 32 prompts per split), so held-out prompts are prefixes training never shows (their answers
can overlap a trained prefix's: "Ma" and "M"). There is no validation split: nothing is selected on this task.
"""

from __future__ import annotations

import random

import datasets

from rlvr_div.errors import ConfigError
from rlvr_div.rewards.country_prefix import COUNTRY_NAMES, names_with_prefix
from rlvr_div.tasks import TASKS
from rlvr_div.tasks.base import TaskSpec
from rlvr_div.tasks.data import take_rows

EXAMPLES = (("B", "Brazil"), ("N", "Norway"))
PREFIX = "".join(f"A country whose name starts with {p}: {name}\n" for p, name in EXAMPLES)
SPLITS = ("train", "test")
MIN_NAMES = 2


def countries_prompt(prefix: str) -> str:
    """The prompt of ``prefix``: the two worked examples, then the question."""
    return f"{PREFIX}A country whose name starts with {prefix}:"


def all_prefixes() -> list[str]:
    """Every prefix of one or two letters with at least :data:`MIN_NAMES` accepted names, the examples' excluded,
    sorted."""
    examples = {p for p, _ in EXAMPLES}
    candidates = {n[:1] for n in COUNTRY_NAMES} | {n[:2] for n in COUNTRY_NAMES if len(n) >= 2 and n[1].isalpha()}
    return sorted(p for p in candidates if p not in examples and len(names_with_prefix(p)) >= MIN_NAMES)


def countries_split(prefix: str) -> str:
    """The split of ``prefix``: its position in :func:`all_prefixes`, even → train, odd → test."""
    return SPLITS[all_prefixes().index(prefix) % 2]


def build_countries(split: str = "train", seed: int = 0, size: int | None = None) -> datasets.Dataset:
    """The prefixes of ``split`` (see :func:`countries_split`), shuffled by ``seed``."""
    if split not in SPLITS:
        raise ConfigError(f"task 'countries' has splits {', '.join(SPLITS)}, not {split!r}")
    prefixes = [p for p in all_prefixes() if countries_split(p) == split]
    random.Random(seed).shuffle(prefixes)
    return take_rows([{"prompt": countries_prompt(p), "prefix": p} for p in prefixes], size)


def countries_valid(row: dict) -> list[str]:
    """The completions ``country_prefix`` accepts for a row, each with the newline that ends it."""
    return [f" {name}\n" for name in names_with_prefix(str(row["prefix"]))]


TASKS.add(
    "countries",
    TaskSpec(
        "countries",
        build_countries,
        reward="country_prefix",
        description="'A country whose name starts with P:' (2 worked examples) -> ' Name' on one line (real LMs, "
        "skewed p*)",
        valid_completions=countries_valid,
        ends_with_eos=False,
    ),
)
