"""Verifiable rewards by name: ``get_reward(name, **settings)`` returns a :class:`Reward`.

Each module registers its rewards with ``REWARDS.register(name)`` on a factory ``(**settings) -> Reward``.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from rlvr_div.errors import ConfigError
from rlvr_div.registry import Registry
from rlvr_div.rewards.base import Reward, completion_text

REWARDS: Registry[Callable[..., Reward]] = Registry("reward")

# Modules that register rewards; imported lazily so `import rlvr_div` stays light.
_REWARD_MODULES = ("rlvr_div.rewards.synthetic", "rlvr_div.rewards.math", "rlvr_div.rewards.sql")
_loaded = False


def _load_all() -> None:
    global _loaded
    if _loaded:
        return
    _loaded = True
    for mod in _REWARD_MODULES:
        try:
            importlib.import_module(mod)
        except ModuleNotFoundError as e:
            if e.name != mod:  # a real missing dependency, not a module that does not exist yet
                raise


def get_reward(name: str, **settings: Any) -> Reward:
    """Build the reward registered as ``name`` with ``settings`` (unknown settings raise :class:`ConfigError`)."""
    _load_all()
    factory = REWARDS.get(name)
    try:
        return factory(**settings)
    except TypeError as e:
        raise ConfigError(f"bad settings for reward {name!r}: {e}") from None


def list_rewards() -> list[str]:
    _load_all()
    return REWARDS.names()


__all__ = ["REWARDS", "Reward", "completion_text", "get_reward", "list_rewards"]
