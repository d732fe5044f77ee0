"""Scoring: one problem's completions and the verifier's columns → its ``samples.jsonl`` record.

The same function scores completions sampled by the runner and completions read from a sample log made elsewhere
(:mod:`eval.score_only`), so a scored file and a sampled run give the same record for the same completions.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from eval.diversity import problem_diversity

GROUP_COLUMN = "difficulty"  # a task column (BIRD's) by which the metrics are also reported per group


def score_completions(
    index: int,
    prompt: Any,
    columns: dict[str, Any],
    completions: Sequence[str],
    reward: Any,
    num_tokens: Sequence[int] | None = None,
    finish_reasons: Sequence[str] | None = None,
    prompt_text: str | None = None,
) -> dict[str, Any]:
    """The record of one problem: scores from the reward's batch API (``columns`` repeated per completion), answers
    from ``reward.extract``, correct = (score == 1), c = Σ correct, n = len(completions), and the problem's
    diversity numbers. ``num_tokens``/``finish_reasons``/``prompt_text`` are stored when known."""
    completions = list(completions)
    k = len(completions)
    scores = reward.score(completions, **{c: [columns[c]] * k for c in reward.columns})
    answers = [reward.extract(c) for c in completions]
    correct = [s is not None and float(s) == 1.0 for s in scores]
    record: dict[str, Any] = {"index": index, "prompt": prompt}
    if prompt_text is not None:
        record["prompt_text"] = prompt_text
    record |= {
        "columns": {c: columns[c] for c in reward.columns},
        "completions": completions,
        "answers": answers,
        "scores": [None if s is None else float(s) for s in scores],
        "correct": correct,
        "c": sum(correct),
        "n": k,
    }
    if num_tokens is not None:
        record["num_tokens"] = list(num_tokens)
    if finish_reasons is not None:
        record["finish_reasons"] = list(finish_reasons)
    return record | problem_diversity(completions, answers, correct)


def score_problem(
    index: int, row: dict[str, Any], samples: Any, reward: Any, prompt_text: str | None = None
) -> dict[str, Any]:
    """The record of one sampled problem (``samples``: ``rlvr_div.sampling.PromptSamples``) of dataset row
    ``row``; the row's ``difficulty`` is kept when it has one (BIRD)."""
    record = score_completions(
        index,
        row["prompt"],
        {c: row[c] for c in reward.columns},
        samples.completions,
        reward,
        num_tokens=[len(ids) for ids in samples.completion_ids],
        finish_reasons=samples.finish_reasons,
        prompt_text=prompt_text,
    )
    return record | ({GROUP_COLUMN: row[GROUP_COLUMN]} if GROUP_COLUMN in row else {})
