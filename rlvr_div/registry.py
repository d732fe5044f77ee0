"""A small name -> object registry shared by tasks, rewards, divergences and trainers."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

from rlvr_div.errors import ConfigError

T = TypeVar("T")


class Registry(Generic[T]):
    """Maps names to objects; unknown names raise a one-line :class:`ConfigError` listing the known ones."""

    def __init__(self, kind: str, modules: tuple[str, ...] = ()) -> None:
        """``modules`` register into this registry when imported; they are imported on first lookup, so that
        ``import rlvr_div`` stays light."""
        self.kind = kind
        self._items: dict[str, T] = {}
        self._modules = modules
        self._loaded = not modules

    def load(self) -> None:
        """Import the registering modules (once)."""
        if self._loaded:
            return
        self._loaded = True
        for module in self._modules:
            importlib.import_module(module)

    def add(self, name: str, item: T) -> T:
        if name in self._items:
            raise ValueError(f"{self.kind} {name!r} is registered twice")
        self._items[name] = item
        return item

    def register(self, name: str) -> Callable[[T], T]:
        """Decorator form of :meth:`add`."""

        def deco(item: T) -> T:
            return self.add(name, item)

        return deco

    def get(self, name: str) -> T:
        self.load()
        if name not in self._items:
            known = ", ".join(sorted(self._items)) or "none"
            raise ConfigError(f"unknown {self.kind} {name!r}; known: {known}")
        return self._items[name]

    def names(self) -> list[str]:
        self.load()
        return sorted(self._items)

    def __contains__(self, name: object) -> bool:
        self.load()
        return name in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())
