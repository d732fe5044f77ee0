"""Rewards named by import path, ``package.module:attribute``, as a recipe's ``rewards: [my_pkg.rewards:my_fn]`` or
``rlvr-div eval --reward my_pkg.rewards:my_fn``.

The attribute is a :class:`Reward` subclass (built with the settings), a factory returning a :class:`Reward` (a
function written in Python outside the standard library; a return annotation, if any, must be a Reward), or a
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
import sys
import sysconfig
import typing
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from rlvr_div.errors import ConfigError
from rlvr_div.rewards.base import Reward, build, check_numbers, check_settings

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
        check_numbers(name, fn, settings)
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
        return build(name, obj, settings)
    if not callable(obj):
        raise ConfigError(f"reward {name!r} is not callable")
    try:
        takes_completions = "completions" in inspect.signature(obj).parameters
    except (TypeError, ValueError):  # a builtin without a signature: not a reward
        takes_completions = False
    if takes_completions:
        return FunctionReward(name, obj, **settings)
    refusal = _not_a_factory(obj)
    if refusal is not None:  # refused without being called: a recipe check must never run arbitrary code
        raise ConfigError(
            f"reward {name!r} is {refusal}, not a Reward subclass, a reward function (completions, **kwargs) or a "
            "factory function returning a Reward"
        )
    check_settings(name, obj, settings)
    built = build(
        name, obj, settings, f"reward {name!r}: neither a reward function (completions, **kwargs) nor a factory"
    )
    if not isinstance(built, Reward):
        raise ConfigError(f"reward {name!r}: the factory returned {type(built).__name__}, not a Reward")
    return built


def _not_a_factory(obj: Any) -> str | None:
    """What ``obj`` is when it may not be called as a reward factory (None: it may). A factory is a function written
    in Python outside the standard library whose return annotation, if it has one, is a :class:`Reward` (sub)class;
    a builtin (``os:abort``), a class that is no Reward, a callable object or a standard-library function
    (``code:interact``) is refused without being called."""
    if inspect.isclass(obj):
        return f"the class {obj.__module__}.{obj.__qualname__}"
    if inspect.isbuiltin(obj):
        return f"the builtin {obj.__module__ or 'builtins'}.{obj.__qualname__}"
    if not inspect.isfunction(obj):
        return f"a {type(obj).__name__} object"
    where = f"{obj.__module__}.{obj.__qualname__}"
    if _standard_library(obj.__module__):
        return f"the standard library's {where}"
    returns = inspect.signature(obj).return_annotation
    if returns is inspect.Signature.empty or returns is Any:
        return None
    try:
        returns = typing.get_type_hints(obj).get("return", returns)
    except Exception:  # an annotation that does not resolve here: read as text
        return None if "Reward" in str(returns) else f"{where}, annotated to return {returns}"
    if returns is Any or (inspect.isclass(returns) and issubclass(returns, Reward)):
        return None
    return f"{where}, annotated to return {getattr(returns, '__name__', returns)}"


def _standard_library(module_name: str | None) -> bool:
    """Whether module ``module_name`` is the standard library's (by name, and by its file where it has one: a user's
    own ``test.py`` on the path is not)."""
    if not module_name or module_name.partition(".")[0] not in sys.stdlib_module_names:
        return False
    file = getattr(sys.modules.get(module_name), "__file__", None)
    if file is None:  # built in or frozen
        return True
    path, paths = Path(file).resolve(), sysconfig.get_paths()
    sites = [Path(paths[k]).resolve() for k in ("purelib", "platlib")]
    return path.is_relative_to(Path(paths["stdlib"]).resolve()) and not any(path.is_relative_to(s) for s in sites)
