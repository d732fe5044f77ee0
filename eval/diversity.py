"""Diversity of a model's outputs on one problem, and the problems a trained model lost relative to its base.

Per problem, from its n samples (completions, the verifier's extracted answers, correctness):
- ``distinct_correct_answers``: number of distinct extracted answers among the correct samples;
- ``distinct_correct_completions``: number of distinct correct completions after normalisation (strip, collapse
  runs of whitespace to one space);
- ``answer_entropy``: Shannon entropy (nats) of the empirical distribution of extracted answers over all n samples,
  "no answer" (None) counted as one outcome;
- ``correct_answer_entropy``: the same over the correct samples only (0 when fewer than two are correct).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

PER_PROBLEM_KEYS = (
    "distinct_correct_answers",
    "distinct_correct_completions",
    "answer_entropy",
    "correct_answer_entropy",
)


def normalize_completion(text: str) -> str:
    """Completion text for duplicate detection: stripped, whitespace runs collapsed to one space."""
    return " ".join(text.split())


def entropy(counts: Sequence[int]) -> float:
    """Shannon entropy in nats, H = −Σ p_i log p_i with p_i = counts_i / Σ counts (0 for no counts)."""
    total = sum(counts)
    if total == 0:
        return 0.0
    h = -sum((x / total) * math.log(x / total) for x in counts if x > 0)
    return float(h) + 0.0  # + 0.0 turns −0.0 (a single outcome) into 0.0


def problem_diversity(
    completions: Sequence[str], answers: Sequence[str | None], correct: Sequence[bool]
) -> dict[str, float]:
    """The per-problem diversity numbers (module docstring) of one problem's samples."""
    if not (len(completions) == len(answers) == len(correct)):
        raise ValueError("completions, answers and correct must have one entry per sample")
    good = [i for i, ok in enumerate(correct) if ok]
    good_answers = Counter(answers[i] for i in good)
    return {
        "distinct_correct_answers": float(len(good_answers)),
        "distinct_correct_completions": float(len({normalize_completion(completions[i]) for i in good})),
        "answer_entropy": entropy(list(Counter(answers).values())),
        "correct_answer_entropy": entropy(list(good_answers.values())),
    }


def lost_vs_base(base_c: Mapping[int, int], model_c: Mapping[int, int]) -> dict[str, Any]:
    """Compare solved sets on the problems both models were evaluated on (keys are problem indices, values c).

    ``lost``: problems the base solves (c > 0) that the model does not (c = 0); ``lost_fraction`` = lost / base
    solved; ``gained``: the reverse."""
    common = sorted(set(base_c) & set(model_c))
    base_solved = [i for i in common if base_c[i] > 0]
    lost = [i for i in base_solved if model_c[i] == 0]
    gained = [i for i in common if base_c[i] == 0 and model_c[i] > 0]
    return {
        "common_problems": len(common),
        "base_solved": len(base_solved),
        "lost": len(lost),
        "lost_fraction": len(lost) / len(base_solved) if base_solved else 0.0,
        "gained": len(gained),
        "lost_indices": lost,
        "gained_indices": gained,
    }
