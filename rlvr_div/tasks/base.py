"""Task specification: a named dataset builder plus the reward that verifies it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import datasets


@dataclass(frozen=True)
class TaskSpec:
    """``build(split=..., seed=..., **options) -> datasets.Dataset`` with a ``prompt`` column and the columns
    that ``reward`` reads. ``check(**options)`` validates options (paths!) cheaply, before any model loads."""

    name: str
    build: Callable[..., datasets.Dataset]
    reward: str
    description: str
    check: Callable[..., None] | None = None
    options: dict[str, Any] = field(default_factory=dict)
