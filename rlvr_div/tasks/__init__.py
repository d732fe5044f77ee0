"""Dataset builders by name: ``get_task(name, split=..., seed=..., **options) -> datasets.Dataset``.

Every dataset has a ``prompt`` column (text or chat messages) and the columns its verifier reads.
Each module of this package registers a :class:`TaskSpec` with ``TASKS.add(name, spec)``; the registry finds those
modules itself (:mod:`rlvr_div.registry`).
"""

from __future__ import annotations

import inspect
from typing import Any

import datasets

from rlvr_div.errors import ConfigError
from rlvr_div.registry import Registry
from rlvr_div.tasks.base import TaskSpec

TASKS: Registry[TaskSpec] = Registry("task", package="rlvr_div.tasks", marker="TASKS.add(")


def get_task_spec(name: str) -> TaskSpec:
    return TASKS.get(name)


def check_task(name: str, **options: Any) -> TaskSpec:
    """Validate the task name and options (e.g. data paths) without building the dataset."""
    spec = get_task_spec(name)
    params = inspect.signature(spec.build).parameters
    if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        takes = sorted(set(params) - {"split", "seed"})
        unknown = sorted(set(options) - set(takes))
        if unknown:
            raise ConfigError(f"task {name!r} has no option {unknown[0]!r}; its options: {', '.join(takes) or 'none'}")
    if spec.check is not None:
        try:
            spec.check(**options)
        except TypeError as e:
            raise ConfigError(f"bad options for task {name!r}: {e}") from None
    return spec


def get_task(name: str, split: str | None = None, seed: int = 0, **options: Any) -> datasets.Dataset:
    """Build task ``name``'s ``split`` (default: the task's own, e.g. ``train`` for the synthetic tasks, ``test`` for
    the math sets, ``dev`` for Spider and BIRD) deterministically from ``seed``."""
    spec = check_task(name, **options)
    if split is not None:
        options["split"] = split
    try:
        return spec.build(seed=seed, **options)
    except TypeError as e:
        raise ConfigError(f"bad options for task {name!r}: {e}") from None


def data_source(name: str, split: str | None = None, **options: Any) -> str:
    """What ``get_task(name, split, **options)`` reads, as a name that two uses of the same data share (see
    :class:`TaskSpec`); ``split`` None means the builder's default. Reads no data, checks no path."""
    spec = get_task_spec(name)
    if split is None:
        default = inspect.signature(spec.build).parameters.get("split")
        split = default.default if default is not None else "train"
    if spec.source is None:
        return f"builtin:{name}:{split}"
    return spec.source(split, **options)


def task_reward_settings(name: str, reward: str, given: dict[str, Any] | None = None, **options: Any) -> dict[str, Any]:
    """The settings of reward ``reward`` on task ``name`` built with ``options``: the task's defaults for that reward
    (:attr:`TaskSpec.reward_settings`, e.g. the answer extraction its prompt format needs) updated by ``given``, the
    settings the user gave (``reward_kwargs`` in a recipe, ``--reward-arg`` in eval)."""
    spec = get_task_spec(name)
    defaults = spec.reward_settings(**options).get(reward, {}) if spec.reward_settings is not None else {}
    return {**defaults, **(given or {})}


def task_stop_text(name: str, **options: Any) -> str | None:
    """The text that ends a completion of task ``name`` built with ``options`` (:attr:`TaskSpec.stop_text`), or None."""
    spec = get_task_spec(name)
    return spec.stop_text(**options) if spec.stop_text is not None else None


def list_tasks() -> list[TaskSpec]:
    return [TASKS.get(n) for n in TASKS.names()]


__all__ = [
    "TASKS",
    "TaskSpec",
    "check_task",
    "data_source",
    "get_task",
    "get_task_spec",
    "list_tasks",
    "task_reward_settings",
    "task_stop_text",
]
