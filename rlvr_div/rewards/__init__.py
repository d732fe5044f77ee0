"""Verifiable rewards by name: ``get_reward(name, **settings)`` returns a :class:`Reward`.

Each module of this package registers its rewards with ``REWARDS.add(name, factory)``, a factory
``(**settings) -> Reward``; the registry finds those modules itself (:mod:`rlvr_div.registry`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rlvr_div.registry import Registry
from rlvr_div.rewards.base import Reward, build, check_settings, completion_text

REWARDS: Registry[Callable[..., Reward]] = Registry("reward", package="rlvr_div.rewards", marker="REWARDS.add(")


def get_reward(name: str, **settings: Any) -> Reward:
    """Build the reward registered as ``name`` with ``settings`` (unknown settings raise :class:`ConfigError`, also
    for a reward that takes ``**kwargs``: :func:`rlvr_div.rewards.base.check_settings`).

    ``package.module:attribute`` names a reward outside the registry (:func:`rlvr_div.rewards.custom.import_reward`):
    a :class:`Reward` subclass or factory, or a plain TRL reward function."""
    if ":" in name:
        from rlvr_div.rewards.custom import import_reward

        return import_reward(name, **settings)
    factory = REWARDS.get(name)
    check_settings(name, factory, settings)  # a factory or class with **kwargs names its settings too
    return build(name, factory, settings)


def list_rewards() -> list[str]:
    return REWARDS.names()


__all__ = ["REWARDS", "Reward", "completion_text", "get_reward", "list_rewards"]
