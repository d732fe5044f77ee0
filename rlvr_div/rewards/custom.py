"""Rewards named by import path, ``package.module:attribute``, as a recipe's ``rewards: [my_pkg.rewards:my_fn]`` or
``rlvr-div eval --reward my_pkg.rewards:my_fn``.

The attribute is a :class:`Reward` subclass (built with the settings), a factory returning a :class:`Reward`, or a
plain TRL reward function ``fn(completions, **kwargs) -> list[float | None]``. A plain function is wrapped in
:class:`FunctionReward`: the dataset columns it reads are its named parameters without a default, other than
``prompts``, ``completions`` and ``completion_ids`` (TRL passes every column as a keyword); its parameters with a
default are its settings, bound as keywords,
and it extracts no answer (majority vote and answer diversity then see whole completions).

A setting must be one the reward names: one of its function's parameters with a default, or its factory's or
its class's ``__init__``'s parameters. A ``**kwargs`` there does not take other
settings (TRL reward functions have one for the dataset columns, and a misspelt setting would vanish into it) unless
the function, factory or class sets ``accepts_any_kwargs = True``.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable, Sequence
from typing import Any

from rlvr_div.errors import ConfigError
from rlvr_div.rewards.base import Reward, check_settings

_TRL_ARGS = ("prompts", "completions", "completion_ids", "trainer_state", "log_extra", "log_metric")


class FunctionReward(Reward):
    """A plain reward function as a :class:`Reward` (see the module docstring)."""

    def __init__(self, name: str, fn: Callable[..., Sequence[float | None]], **settings: Any) -> None:
        self.name, self.fn, self._settings = name, fn, dict(settings)
        params = inspect.signature(fn).parameters
        named = [p for p in params.values() if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
        # a setting named like a column would reach the function twice
        check_settings(
            name, fn, settings, [p.name for p in named if p.name not in _TRL_ARGS and p.default is not p.empty]
        )
        self.columns = tuple(p.name for p in named if p.name not in _TRL_ARGS and p.default is p.empty)

    def settings(self) -> dict[str, Any]:
        return dict(self._settings)

    def score(self, completions: Sequence[str], **columns: Sequence[Any]) -> list[float | None]:
        out = list(self.fn(completions=list(completions), **columns, **self._settings))
        return [None if s is None else float(s) for s in out]

    def __call__(self, prompts: Any = None, completions: Any = None, **kwargs: Any) -> list[float | None]:
        return self.fn(prompts=prompts, completions=completions, **kwargs, **self._settings)


def import_reward(name: str, **settings: Any) -> Reward:
    """The reward ``package.module:attribute`` with ``settings``; one-line :class:`ConfigError` when it cannot be
    imported or is not a reward."""
    module_name, _, attr = name.partition(":")
    if not module_name or not attr:
        raise ConfigError(f"reward {name!r} is not package.module:function")
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise ConfigError(f"reward {name!r}: cannot import {module_name!r} ({e}); is it on PYTHONPATH?") from None
    obj = getattr(module, attr, None)
    if obj is None:
        raise ConfigError(f"reward {name!r}: module {module_name!r} has no attribute {attr!r}")
    if inspect.isclass(obj) and issubclass(obj, Reward):
        check_settings(name, obj, settings)
        try:
            return obj(**settings)
        except TypeError as e:
            raise ConfigError(f"bad settings for reward {name!r}: {e}") from None
    if not callable(obj):
        raise ConfigError(f"reward {name!r} is not callable")
    if "completions" in inspect.signature(obj).parameters:
        return FunctionReward(name, obj, **settings)
    check_settings(name, obj, settings)
    try:
        built = obj(**settings)  # a factory
    except TypeError as e:
        raise ConfigError(
            f"reward {name!r}: neither a reward function (completions, **kwargs) nor a factory: {e}"
        ) from None
    if not isinstance(built, Reward):
        raise ConfigError(f"reward {name!r}: the factory returned {type(built).__name__}, not a Reward")
    return built
