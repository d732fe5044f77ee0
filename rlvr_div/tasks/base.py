"""Task specification: a named dataset builder plus the reward that verifies it."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import datasets


@dataclass(frozen=True)
class TaskSpec:
    """``build(split=..., seed=..., **options) -> datasets.Dataset`` with a ``prompt`` column and the columns
    that ``reward`` reads. ``check(**options)`` validates options (paths!) cheaply, before any model loads.
    ``source(split, **options) -> str`` names the data a split is read from without reading it (``file:<absolute
    path>`` or ``hub:<id>:<config>:<split>``; ``<task>:<split>:<files>`` for a split that a task carves out of files,
    as ``wordmath``); tasks without it are built in, named ``builtin:<task>:<split>``.
    ``valid_completions(row) -> list[str]``, where the valid set is finite, lists every completion the reward
    accepts for a row (exact validity and distances to the filtered model: :mod:`rlvr_div.exact`); with
    ``ends_with_eos`` (chat prompts, the tiny model's tasks) a valid completion is that text then the tokenizer's EOS,
    without it each listed string carries its own end (a completion-style prompt's newline) and no EOS follows.
    ``corpus(rng) -> (prompt, completion)``, for the tasks the built-in tiny bases are pretrained on
    (:mod:`rlvr_div.models.tiny_base`), draws one pretraining example. ``one_answer``: every prompt has exactly one
    valid completion under ``reward`` (settings that act only between several valid answers are refused on it).
    ``strategy(completion) -> str | None`` names the strategy a completion takes, for tasks whose answers are reached
    by several (the benchmark then tracks the valid mass of ``minority_strategy``); ``class_column`` names the row
    column that sorts prompts into classes, reported one by one (e.g. a class training never shows).
    ``reward_settings(**options) -> {reward name: settings}`` gives the reward settings that the task built with
    ``options`` needs by default (a math task's few-shot prompts: ``math_accuracy`` with ``extract="answer_is"``);
    settings the user gives override them (:func:`rlvr_div.tasks.task_reward_settings`). ``stop_text(**options)``:
    the text that ends a completion of the task built with ``options`` (a few-shot prompt's newline, after which
    the model would write the next problem), or None; sampling and training stop at the first token holding it
    (:func:`rlvr_div.sampling.stop_token_ids`)."""

    name: str
    build: Callable[..., datasets.Dataset]
    reward: str
    description: str
    check: Callable[..., None] | None = None
    source: Callable[..., str] | None = None
    valid_completions: Callable[[dict[str, Any]], list[str]] | None = None
    ends_with_eos: bool = True
    corpus: Callable[[random.Random], tuple[str, str]] | None = None
    one_answer: bool = False  # every prompt has exactly one valid completion under the task's own reward
    strategy: Callable[[str], str | None] | None = None
    minority_strategy: str | None = None
    class_column: str | None = None
    reward_settings: Callable[..., dict[str, dict[str, Any]]] | None = None
    stop_text: Callable[..., str | None] | None = None
    options: dict[str, Any] = field(default_factory=dict)
