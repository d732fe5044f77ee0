"""The one name -> object registry of rlvr-div: tasks, rewards, divergences, trainers, methods (trainer plug-ins) and
eval's sample formats.

A registry whose entries live in many modules finds them itself: every module of its ``package`` (or sub-package, by
its ``__init__``) with a line that starts with its ``marker`` (the registration call, e.g. ``TASKS.add(``) is imported
on the first lookup. So an entry is added by its module alone and removed by deleting it, and ``import rlvr_div``
stays light.
"""

from __future__ import annotations

import functools
import importlib
import pkgutil
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Generic, TypeVar

from rlvr_div.errors import ConfigError

T = TypeVar("T")


@functools.cache
def registering_modules(package: str, marker: str) -> tuple[str, ...]:
    """The modules of ``package`` (a sub-package by its ``__init__``) whose source has a line that starts (after
    indentation) with ``marker``, by name."""
    pkg = importlib.import_module(package)
    line = re.compile(rf"^[ \t]*{re.escape(marker)}", re.M)
    found = []
    for info in sorted(pkgutil.iter_modules(pkg.__path__), key=lambda i: i.name):
        where = Path(pkg.__path__[0]) / info.name
        source = where / "__init__.py" if info.ispkg else where.with_suffix(".py")
        if source.is_file() and line.search(source.read_text(encoding="utf-8")):
            found.append(f"{package}.{info.name}")
    return tuple(found)


class Registry(Generic[T]):
    """Maps names to objects; unknown names raise a one-line :class:`ConfigError` listing the known ones."""

    def __init__(self, kind: str, package: str | None = None, marker: str | None = None) -> None:
        """``package`` and ``marker``: where the registering modules are found (see the module docstring); without
        them, entries are added where the registry is defined."""
        if (package is None) != (marker is None):
            raise TypeError("a registry's package and marker are given together")
        self.kind = kind
        self._items: dict[str, T] = {}
        self._package, self._marker = package, marker
        self._loaded = package is None

    def modules(self) -> tuple[str, ...]:
        """The modules that register into this registry (found, not imported)."""
        if self._package is None or self._marker is None:
            return ()
        return registering_modules(self._package, self._marker)

    def load(self) -> None:
        """Import the registering modules (once)."""
        if self._loaded:
            return
        self._loaded = True
        for module in self.modules():
            importlib.import_module(module)

    def add(self, name: str, item: T, replace: bool = False) -> T:
        """Register ``item`` as ``name``; a name given twice is an error unless ``replace`` (a module imported
        again)."""
        if name in self._items and not replace:
            raise ValueError(f"{self.kind} {name!r} is registered twice")
        self._items[name] = item
        return item

    def registered(self, name: str) -> T | None:
        """The entry registered as ``name`` so far, or None (no module is imported)."""
        return self._items.get(name)

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

    def values(self) -> list[T]:
        """The entries, by name."""
        return [self._items[n] for n in self.names()]

    def __contains__(self, name: object) -> bool:
        self.load()
        return name in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())
